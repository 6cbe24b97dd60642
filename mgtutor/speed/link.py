"""The link between devices, measured (lesson 14): an all-reduce's time fitted as latency alpha
+ bytes / bandwidth beta, each point weighted by 1 / its time (a fit of the relative error), and
lesson 11's ring all-reduce on that link, (N - 1) alpha + 2(N - 1)/N bytes / beta, which is alpha
+ bytes / beta for the 2 workers it was measured on. `benchmarks/bench_workers.py` uses both.
Before them, how lesson 14 reads a ratio of two timed rates (`read_ratio`), which lesson 08's
scaling study and docs/results.md print through too: one reading wherever a direction is printed.

Generated from notebooks/14_pinned_workers.ipynb (its #@save cells) by tools/lesson_code.py: edit the lesson,
then `make lesson-code`. A test fails when this file and the lesson differ.
"""

from __future__ import annotations

from statistics import median

import numpy as np


def versus(these: list[float], base: list[float]) -> tuple[float, float, float]:
    """The ratio of two sorted lists of rates: their medians', bounded: slowest over fastest, and back."""
    return median(these) / median(base), these[0] / base[-1], these[-1] / base[0]


def ratio_figure(value: float) -> str:
    """Two decimals, more where a value other than 1 would show as 1.00 ("1.00" beside "slower" is false)."""
    for digits in (2, 3, 4):
        if value == 1 or round(value, digits) != 1:
            break
    return f"{value:.{digits}f}"


def read_ratio(ratio: float, low: float, high: float) -> str:
    """'1.65 (1.60-1.66), faster': a ratio, its bounds, and a direction only where both bounds lie past 1."""
    direction = "faster" if low > 1 else "slower" if high < 1 else "within the spread"
    return f"{ratio_figure(ratio)} ({ratio_figure(low)}-{ratio_figure(high)}), {direction}"


def fit_link(sizes: list[float], seconds: list[float]) -> tuple[float, float]:
    """(alpha, beta): least squares of seconds = alpha + size / beta, each point weighted by 1 / seconds."""
    size, time = np.asarray(sizes, float), np.asarray(seconds, float)
    design = np.stack([np.ones_like(size), size], axis=1) / time[:, None]  # the relative error of each point
    (alpha, inverse_beta), *_ = np.linalg.lstsq(design, np.ones_like(size), rcond=None)
    return float(alpha), float(1 / inverse_beta)


def ring_seconds(alpha: float, beta: float, size: float, workers: int) -> float:
    """Lesson 11's ring all-reduce of `size` bytes over `workers`, on the link (alpha, beta) measured at 2."""
    return (workers - 1) * alpha + 2 * (workers - 1) / workers * size / beta
