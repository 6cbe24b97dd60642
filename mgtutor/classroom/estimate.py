"""How long `make run` takes on this laptop, estimated before it starts, from one reference step.

The reference step is lesson 02's seed CNN trained on one device (`preflight_smoke.reference_step`),
timed by `make check` and by `make run`'s own checklist. A reference run at classroom defaults measured
both that step and every lesson's seconds; a laptop whose step is k times slower is estimated to take
k times each lesson's seconds. Lessons do not all slow down by the same factor (process starts, XLA
compiles and collectives weigh differently on each CPU), so the estimate is a guide, and `make run`
sets it beside the time it took.
"""

from __future__ import annotations

from collections.abc import Mapping

SLOT_SECONDS = 15 * 60  # `make run` at classroom defaults: one lesson slot
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
}  # fmt: skip


def slowdown(images_per_s: float) -> float:
    """How many times slower than the reference run's CPU this one's reference step is."""
    if not images_per_s > 0:
        raise ValueError(f"images_per_s must be > 0 (a timed reference step), got {images_per_s!r}.")
    return REFERENCE["images_per_s"] / images_per_s


def estimate_seconds(images_per_s: float, lessons: Mapping[str, float] | None = None) -> float:
    """`make run`'s estimated seconds here: each lesson's reference seconds times the slowdown."""
    seconds = REFERENCE["seconds"] if lessons is None else lessons
    return slowdown(images_per_s) * sum(seconds.values())


def share_of_slot(lesson: str) -> float | None:
    """Seconds of the 15-minute slot that this lesson's part of the reference run stands for."""
    seconds = REFERENCE["seconds"]
    return SLOT_SECONDS * seconds[lesson] / sum(seconds.values()) if lesson in seconds else None
