"""The link between devices, measured (lesson 14): an all-reduce's time fitted as latency alpha
+ bytes / bandwidth beta, each point weighted by 1 / its time (a fit of the relative error), and
lesson 11's ring all-reduce on that link, (N - 1) alpha + 2(N - 1)/N bytes / beta, which is alpha
+ bytes / beta for the 2 workers it was measured on. `benchmarks/bench_workers.py` uses both.

Generated from notebooks/14_pinned_workers.ipynb (its #@save cells) by tools/lesson_code.py: edit the lesson,
then `make lesson-code`. A test fails when this file and the lesson differ.
"""

from __future__ import annotations

import numpy as np


def fit_link(sizes: list[float], seconds: list[float]) -> tuple[float, float]:
    """(alpha, beta): least squares of seconds = alpha + size / beta, each point weighted by 1 / seconds."""
    size, time = np.asarray(sizes, float), np.asarray(seconds, float)
    design = np.stack([np.ones_like(size), size], axis=1) / time[:, None]  # the relative error of each point
    (alpha, inverse_beta), *_ = np.linalg.lstsq(design, np.ones_like(size), rcond=None)
    return float(alpha), float(1 / inverse_beta)


def ring_seconds(alpha: float, beta: float, size: float, workers: int) -> float:
    """Lesson 11's ring all-reduce of `size` bytes over `workers`, on the link (alpha, beta) measured at 2."""
    return (workers - 1) * alpha + 2 * (workers - 1) / workers * size / beta
