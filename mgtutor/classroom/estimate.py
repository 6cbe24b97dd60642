"""How long `make run` takes on this laptop, estimated before it starts, from one reference step.

The reference step is lesson 02's seed CNN trained on one device (`preflight_smoke.reference_step`),
timed by `make check` and by `make run`'s own checklist. A reference run at classroom defaults measured
both that step and every lesson's seconds; a laptop whose step is k times slower is estimated to take
k times each lesson's seconds. Lessons do not all slow down by the same factor (process starts, XLA
compiles and collectives weigh differently on each CPU), so the estimate is a guide, and `make run`
sets it beside the time it took.

`make run` sizes the series to the laptop from the same step (`choose_preset`): where the estimate at
classroom defaults passes `TARGET_SECONDS`, it runs the slow-laptop preset, estimated the same way from
that preset's own run on the reference CPU (`REFERENCE["presets"]`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from mgtutor.classroom.presets import SLOW_LAPTOP

SLOT_SECONDS = 15 * 60  # `make run` at classroom defaults: one lesson slot
# Past this estimate `make run` takes the slow-laptop preset: the slot less a minute for the estimate's error.
TARGET_SECONDS = 14 * 60
# Lessons the reference run did not have, at the seconds they took on its CPU where they were written;
# each goes once a reference run measures it (lesson 18, pipeline parallelism: about a minute). The
# slow-laptop preset leaves them at their size.
PENDING = {"18": 60.0}
# One complete `make run` at classroom defaults, nothing else running: its CPU, its reference step and
# each lesson's seconds.
REFERENCE = {
    "run": "2026-11-29 03:50, Intel Xeon with AMX (avx512_bf16, amx_bf16), 2 cores, 14 min 47 s",
    "images_per_s": 1369.1,
    "seconds": {
        "00": 8.7, "01": 6.6, "02": 16.8, "03": 21.2, "04": 26.0, "05": 25.4, "06": 37.0, "07": 62.1,
        "08": 61.8, "09": 30.7, "10": 37.4, "11": 55.1, "12": 64.8, "13": 42.5, "14": 89.0, "15": 59.2,
        "16": 109.5, "17": 124.7,
    },
    # `make run PRESET=slow-laptop` on the same CPU: each lesson's seconds (`series_seconds`). Until a quiet
    # run measures them: 00-11 and 13 planned from the reference run's cell times, each cell the preset
    # shrinks scaled by its share of the work (start-up and compiles kept); 14-16 from a run of the preset
    # under other programs' load, each lesson's seconds divided by the slowdown of the reference step timed
    # during it (2.2-2.7x); 12 at its classroom seconds (that run found no saving: JAX's compiles are its
    # time); 17 planned (its Slurm part off, as in the classroom defaults).
    "presets": {
        SLOW_LAPTOP: {
            "run": "planned from the reference run; 14-16 measured under load (not a quiet run)",
            "seconds": {
                "00": 8.7, "01": 6.6, "02": 11.1, "03": 14.4, "04": 19.2, "05": 17.0, "06": 20.0,
                "07": 47.0, "08": 24.0, "09": 21.0, "10": 31.0, "11": 36.0, "12": 65.0, "13": 38.0,
                "14": 52.0, "15": 58.0, "16": 68.0, "17": 102.0,
            },
        },
    },
}  # fmt: skip


def slowdown(images_per_s: float) -> float:
    """How many times slower than the reference run's CPU this one's reference step is."""
    if not images_per_s > 0:
        raise ValueError(f"images_per_s must be > 0 (a timed reference step), got {images_per_s!r}.")
    return REFERENCE["images_per_s"] / images_per_s


def estimate_seconds(images_per_s: float, lessons: Mapping[str, float] | None = None) -> float:
    """`make run`'s estimated seconds here: each lesson's reference seconds (`series_seconds()`: the whole
    series at classroom defaults) times the slowdown."""
    seconds = series_seconds() if lessons is None else lessons
    return slowdown(images_per_s) * sum(seconds.values())


def share_of_slot(lesson: str) -> float | None:
    """Seconds of the 15-minute slot that this lesson's part of the reference run stands for."""
    seconds = REFERENCE["seconds"]
    return SLOT_SECONDS * seconds[lesson] / sum(seconds.values()) if lesson in seconds else None


def series_seconds(preset: str | None = None, lessons: Iterable[str] | None = None) -> dict[str, float]:
    """Each lesson's seconds on the reference run's CPU (`lessons`: two-digit numbers, else the whole series),
    at classroom defaults or at `preset` (measured for the slow-laptop preset only); a lesson the reference
    run lacks counts its `PENDING` seconds."""
    measured = {**PENDING, **REFERENCE["seconds"]}
    if preset is not None:
        if preset not in REFERENCE["presets"]:
            measured_presets = sorted(REFERENCE["presets"])
            raise ValueError(f"no reference run of the {preset} preset; measured: {measured_presets}.")
        measured.update(REFERENCE["presets"][preset]["seconds"])
    wanted = measured if lessons is None else lessons
    return {lesson: measured[lesson] for lesson in wanted if lesson in measured}


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
        target = f"{TARGET_SECONDS // 60}-minute target"
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
    k = slowdown(images_per_s)
    defaults = k * sum(series_seconds(None, lessons).values())
    preset = k * sum(series_seconds(SLOW_LAPTOP, lessons).values())
    return Sizing(SLOW_LAPTOP if defaults > TARGET_SECONDS else None, k, defaults, preset)
