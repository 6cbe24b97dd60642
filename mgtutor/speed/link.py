"""The link between devices, measured: an all-reduce's time fitted as latency + bytes / bandwidth.

Lesson 14 times one all-reduce of 4 KB up to 64 MB between pinned workers and fits
``seconds = alpha + bytes / beta`` (writing the fit out in a cell); `fit_link` is the same fit,
for `benchmarks/bench_workers.py` and the test that holds the two equal. `ring_seconds` is lesson
11's ring all-reduce fed the measured link: 2(N - 1) rounds of 1/N of the tensor, so
(N - 1) alpha + 2(N - 1)/N bytes / beta, which is alpha + bytes / beta for the 2 workers it was
fitted on. Plain arithmetic: no TensorFlow.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mgtutor.support.checks import check_whole, is_real


@dataclass(frozen=True)
class Link:
    """A fitted link: `alpha` seconds of latency, `beta` bytes per second of bandwidth."""

    alpha: float
    beta: float

    def seconds(self, size: float) -> float:
        """The fitted time of one all-reduce of `size` bytes between the workers it was measured on."""
        return self.alpha + size / self.beta


def fit_link(sizes: Sequence[float], seconds: Sequence[float]) -> Link:
    """Least squares of ``seconds = alpha + size / beta``, each point weighted by 1 / its seconds.

    The weights make it a fit of the relative error, so the small sizes, where the latency shows,
    count as much as the large ones, where the bandwidth does. `sizes` in bytes, `seconds` the
    measured times (e.g. each size's median), at least two distinct sizes.
    """
    if len(sizes) != len(seconds) or len(set(sizes)) < 2:
        raise ValueError(f"sizes and seconds must pair up, with at least two distinct sizes; got "
                         f"{len(sizes)} size(s) ({len(set(sizes))} distinct) and {len(seconds)} time(s).")
    if not all(is_real(s) and s > 0 for s in [*sizes, *seconds]):
        raise ValueError("sizes (bytes) and seconds must all be numbers > 0.")
    size, time = np.asarray(sizes, float), np.asarray(seconds, float)
    design = np.stack([np.ones_like(size), size], axis=1) / time[:, None]
    (alpha, inverse_beta), *_ = np.linalg.lstsq(design, np.ones_like(size), rcond=None)
    return Link(alpha=float(alpha), beta=float(1 / inverse_beta))


def ring_seconds(link: Link, size: float, workers: int) -> float:
    """A ring all-reduce of `size` bytes over `workers`: (N - 1) alpha + 2(N - 1)/N size / beta."""
    n = check_whole("workers", workers, 1)
    return (n - 1) * link.alpha + 2 * (n - 1) / n * size / link.beta


def predicted_step(compute: float, gradient_bytes: float, workers: int, link: Link) -> float:
    """Lesson 11's link model: one worker's compute on its slice, then the ring all-reduce of the gradient."""
    return compute + ring_seconds(link, gradient_bytes, workers)
