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
# each goes once a reference run measures it (none now: the reference run has all 19). The slow-laptop
# preset leaves them at their size.
PENDING: dict[str, float] = {}
# One complete `make run` at classroom defaults, nothing else running: its CPU, its reference step and
# each lesson's seconds.
REFERENCE = {
    "run": "2026-11-29 06:42, Intel Xeon with AMX (avx512_bf16, amx_bf16), 2 cores, 13 min 40 s",
    "images_per_s": 1292.9,
    "seconds": {
        "00": 9.3, "01": 7.3, "02": 18.4, "03": 22.8, "04": 27.9, "05": 24.5, "06": 38.6, "07": 67.1,
        "08": 59.1, "09": 34.1, "10": 38.0, "11": 54.1, "12": 68.1, "13": 28.4, "14": 85.8, "15": 63.1,
        "16": 78.8, "17": 62.2, "18": 23.6,
    },
    # `make run PRESET=slow-laptop` on the same CPU, nothing else running, right after the run above (its
    # reference step 1,265.5 images/s, within 2 % of that run's): each lesson's seconds (`series_seconds`).
    "presets": {
        SLOW_LAPTOP: {
            "run": "2026-11-29 06:57, the same CPU, quiet, 11 min 16 s",
            "seconds": {
                "00": 9.6, "01": 7.4, "02": 13.0, "03": 16.8, "04": 21.0, "05": 22.4, "06": 26.1,
                "07": 54.1, "08": 45.1, "09": 29.7, "10": 28.7, "11": 47.1, "12": 47.9, "13": 27.8,
                "14": 58.6, "15": 60.4, "16": 63.1, "17": 64.4, "18": 23.3,
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
    k = slowdown(images_per_s)
    defaults = k * sum(series_seconds(None, lessons).values())
    preset = k * sum(series_seconds(SLOW_LAPTOP, lessons).values())
    return Sizing(SLOW_LAPTOP if defaults > TARGET_SECONDS else None, k, defaults, preset)
