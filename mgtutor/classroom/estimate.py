"""How long `make run` takes on this laptop, estimated before it starts, from one reference step.

The reference step is lesson 02's seed CNN trained on one device (`preflight_smoke.reference_step`),
timed by `make check` and by `make run`'s own checklist. A laptop whose step takes k times the reference
CPU's is not k times slower at everything: starting kernels and processes, imports and XLA's compiles grow
less than the step does. So each lesson's seconds are split in two (`fixed_seconds`): a part that stays
and a part that grows k-fold, fitted from the same preset run on two CPUs whose steps differ 2.56-fold
(`CALIBRATION`). A single ratio over whole lessons estimated the AVX2-only EPYC's run at 28 min 27 s; it
took 17 min 12 s. The split is between CPUs; a shared host that slows in its busy hours slows the part
that stays as well, so an estimate from a run in one of those hours errs for the other. The estimate is a
guide, and `make run` sets it beside the time it took.

`make run` sizes the series to the laptop from the same step (`choose_preset`): where the estimate at
classroom defaults passes `TARGET_SECONDS`, it runs the slow-laptop preset, estimated the same way from
that preset's own run (`REFERENCE["presets"]`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from mgtutor.classroom.presets import SLOW_LAPTOP

SLOT_SECONDS = 15 * 60  # `make run` at classroom defaults: one lesson slot
# Past this estimate `make run` takes the slow-laptop preset: the slot less a minute for the estimate's error.
TARGET_SECONDS = 14 * 60
# Lessons the reference run did not have, at the seconds they took on its CPU where they were written;
# each goes once a reference run measures it (none now: the reference run has all 19). The slow-laptop
# preset leaves them at their size.
PENDING: dict[str, float] = {}
# One complete `make run` at classroom defaults, nothing else running: its CPU, its reference step and
# each lesson's seconds. A preset's run may be on another CPU: its own reference step scales it here.
REFERENCE = {
    "run": "2026-11-29 06:42, Intel Xeon with AMX (avx512_bf16, amx_bf16), 2 cores, 13 min 40 s",
    "images_per_s": 1292.9,
    "seconds": {
        "00": 9.3, "01": 7.3, "02": 18.4, "03": 22.8, "04": 27.9, "05": 24.5, "06": 38.6, "07": 67.1,
        "08": 59.1, "09": 34.1, "10": 38.0, "11": 54.1, "12": 68.1, "13": 28.4, "14": 85.8, "15": 63.1,
        "16": 78.8, "17": 62.2, "18": 23.6,
    },
    # The slow-laptop preset as it is now (2026-12-01: fewer images in 02-12, the capstone 0.5 min),
    # `make run` choosing it itself on the AVX2-only EPYC in one of its host's slow hours: each lesson's
    # seconds (`series_seconds`) and the reference step `make run` timed before it (359.2 images/s after).
    "presets": {
        SLOW_LAPTOP: {
            "run": "2026-12-01 03:14, AMD EPYC (AVX2 only, family 25), 2 cores, 24 min 43 s",
            "images_per_s": 277.6,
            "seconds": {
                "00": 22.7, "01": 15.1, "02": 22.1, "03": 31.1, "04": 40.1, "05": 55.1, "06": 60.1,
                "07": 107.1, "08": 94.1, "09": 66.1, "10": 56.2, "11": 117.2, "12": 85.2, "13": 56.1,
                "14": 153.2, "15": 110.2, "16": 164.2, "17": 150.2, "18": 50.8,
            },
        },
    },
}  # fmt: skip
# The same configuration on two CPUs, nothing else running on either: the slow-laptop preset as it was
# before 2026-12-01, run on the reference CPU right after its REFERENCE run (its reference step within 2 %
# of that run's), and `make run` choosing that preset itself on the AVX2-only EPYC.
CALIBRATION = {
    "reference_run": "2026-11-29 06:57, the reference CPU, `make run PRESET=slow-laptop`, 11 min 16 s",
    "reference_seconds": {
        "00": 9.6, "01": 7.4, "02": 13.0, "03": 16.8, "04": 21.0, "05": 22.4, "06": 26.1, "07": 54.1,
        "08": 45.1, "09": 29.7, "10": 28.7, "11": 47.1, "12": 47.9, "13": 27.8, "14": 58.6, "15": 60.4,
        "16": 63.1, "17": 64.4, "18": 23.3,
    },
    "run": "2026-11-30 23:30, AMD EPYC (AVX2 only, family 25), 2 cores, 17 min 12 s",
    "images_per_s": 504.9,
    "seconds": {
        "00": 11.4, "01": 8.1, "02": 19.0, "03": 23.4, "04": 26.0, "05": 28.8, "06": 46.0, "07": 75.0,
        "08": 75.1, "09": 46.8, "10": 49.7, "11": 94.1, "12": 63.1, "13": 32.6, "14": 96.9, "15": 82.5,
        "16": 115.0, "17": 90.1, "18": 33.3,
    },
}  # fmt: skip


def slowdown(images_per_s: float) -> float:
    """How many times the reference run's CPU's time this one's reference step takes."""
    if not images_per_s > 0:
        raise ValueError(f"images_per_s must be > 0 (a timed reference step), got {images_per_s!r}.")
    return REFERENCE["images_per_s"] / images_per_s


def fixed_seconds(lesson: str) -> float:
    """The seconds of `lesson` that do not grow with the reference step: on the calibration's two CPUs,
    what the slower one's run spent beyond the reference's, over the steps' ratio less one, is the part that
    grows; the rest stays. A lesson the calibration lacks grows whole (the cautious side)."""
    fast, slow = CALIBRATION["reference_seconds"].get(lesson), CALIBRATION["seconds"].get(lesson)
    if fast is None or slow is None:
        return 0.0
    grows = max(0.0, (slow - fast) / (slowdown(CALIBRATION["images_per_s"]) - 1))
    return max(0.0, fast - grows)


def _measured(preset: str | None) -> tuple[dict[str, float], float]:
    """Each lesson's seconds in the run that measured `preset` (None: the defaults), and its slowdown."""
    if preset is None:
        return {**PENDING, **REFERENCE["seconds"]}, 1.0
    if preset not in REFERENCE["presets"]:
        measured_presets = sorted(REFERENCE["presets"])
        raise ValueError(f"no reference run of the {preset} preset; measured: {measured_presets}.")
    run = REFERENCE["presets"][preset]
    return {**PENDING, **REFERENCE["seconds"], **run["seconds"]}, slowdown(run["images_per_s"])


def series_seconds(preset: str | None = None, lessons: Iterable[str] | None = None,
                   images_per_s: float | None = None) -> dict[str, float]:  # fmt: skip
    """Each lesson's estimated seconds (`lessons`: two-digit numbers, else the whole series) at classroom
    defaults or at `preset`, on a laptop whose reference step runs `images_per_s` (else the reference CPU's):
    its fixed part, and the rest times the laptop's slowdown over that of the run that measured it. A lesson
    no run measured counts its `PENDING` seconds; one the preset's run lacks, the defaults'."""
    measured, measured_at = _measured(preset)
    k = 1.0 if images_per_s is None else slowdown(images_per_s)
    wanted = measured if lessons is None else lessons
    estimated = {}
    for lesson in (lesson for lesson in wanted if lesson in measured):
        fixed = min(fixed_seconds(lesson), measured[lesson])
        estimated[lesson] = fixed + k * (measured[lesson] - fixed) / measured_at
    return estimated


def estimate_seconds(images_per_s: float, preset: str | None = None,
                     lessons: Iterable[str] | None = None) -> float:  # fmt: skip
    """`make run`'s estimated seconds here (`series_seconds`), at classroom defaults or at `preset`."""
    return sum(series_seconds(preset, lessons, images_per_s).values())


def rate_for(seconds: float, preset: str | None = None, lessons: Iterable[str] | None = None) -> float:
    """The reference step's images/s at which the estimate (`estimate_seconds`) is `seconds`."""
    lessons = None if lessons is None else list(lessons)
    fixed = sum(series_seconds(preset, lessons, float("inf")).values())  # a step that takes no time
    grows = sum(series_seconds(preset, lessons).values()) - fixed
    if not seconds > fixed:
        raise ValueError(f"seconds must be > {fixed:.0f}, the part of the estimate no reference step "
                         "changes.")
    return REFERENCE["images_per_s"] * grows / (seconds - fixed)


def share_of_slot(lesson: str) -> float | None:
    """Seconds of the 15-minute slot that this lesson's part of the reference run stands for."""
    seconds = REFERENCE["seconds"]
    return SLOT_SECONDS * seconds[lesson] / sum(seconds.values()) if lesson in seconds else None


@dataclass(frozen=True)
class Sizing:
    """What `make run` runs on this laptop, and why: `preset` None for the classroom defaults."""

    preset: str | None
    slowdown: float
    defaults_seconds: float  # estimated here, at classroom defaults
    preset_seconds: float  # estimated here, with the slow-laptop preset

    @property
    def seconds(self) -> float:
        """The estimate of what runs."""
        return self.defaults_seconds if self.preset is None else self.preset_seconds

    @property
    def fits(self) -> bool:
        return self.seconds <= SLOT_SECONDS

    def line(self) -> str:
        """One line for make run and make check: the choice, the slowdown and both estimates."""
        from mgtutor.classroom.run_page import duration

        step = f"the reference step takes {self.slowdown:.2f}x the reference CPU's time"
        target = (f"{TARGET_SECONDS // 60}-minute target (the {SLOT_SECONDS // 60}-minute slot less a minute "
                  "for the estimate's error)")  # fmt: skip
        defaults, preset = duration(self.defaults_seconds), duration(self.preset_seconds)
        if self.preset is None:
            return (f"the classroom defaults: about {defaults} here, within the {target} (with the "
                    f"{SLOW_LAPTOP} preset: about {preset}); {step}")  # fmt: skip
        said = (f"the {SLOW_LAPTOP} preset: about {preset} here, where the classroom defaults would take "
                f"about {defaults}, past the {target}; {step}")  # fmt: skip
        if self.fits:
            return said
        return (f"{said}. Even the preset is over the {SLOT_SECONDS // 60}-minute slot: docs/teachers.md, "
                "'The slowest laptop in the room'")


def choose_preset(images_per_s: float, lessons: Iterable[str] | None = None) -> Sizing:
    """The slow-laptop preset where the estimate at classroom defaults passes `TARGET_SECONDS`, else none."""
    lessons = None if lessons is None else list(lessons)
    defaults = estimate_seconds(images_per_s, None, lessons)
    preset = estimate_seconds(images_per_s, SLOW_LAPTOP, lessons)
    chosen = SLOW_LAPTOP if defaults > TARGET_SECONDS else None
    return Sizing(chosen, slowdown(images_per_s), defaults, preset)
