"""The link fit (latency + bytes / bandwidth) and lesson 11's ring model fed it (`mgtutor.speed.link`)."""

from __future__ import annotations

import numpy as np
import pytest

from mgtutor.speed.link import Link, fit_link, predicted_step, ring_seconds

SIZES = [4096 * 4**k for k in range(8)]  # 4 KB .. 64 MB, as lesson 14 measures


def test_exact_times_give_back_their_latency_and_bandwidth():
    truth = Link(alpha=1e-3, beta=2e8)
    fitted = fit_link(SIZES, [truth.seconds(s) for s in SIZES])
    assert fitted.alpha == pytest.approx(truth.alpha, rel=1e-9)
    assert fitted.beta == pytest.approx(truth.beta, rel=1e-9)


def test_the_fit_weighs_relative_errors_so_the_latency_survives_noise_at_large_sizes():
    truth = Link(alpha=2e-4, beta=1e9)
    noisy = [truth.seconds(s) * (1.3 if s > 2**24 else 1.0) for s in SIZES]  # the two largest 30 % slow
    fitted = fit_link(SIZES, noisy)
    assert fitted.alpha == pytest.approx(truth.alpha, rel=0.1)  # plain least squares would lose it
    sizes, seconds = np.array(SIZES, float), np.array(noisy)
    plain_alpha = np.polyfit(sizes, seconds, 1)[1]
    assert abs(plain_alpha - truth.alpha) > 10 * abs(fitted.alpha - truth.alpha)


@pytest.mark.parametrize(
    "sizes, seconds, message",
    [([4096], [1e-3], "at least two distinct sizes"), ([4096, 4096], [1e-3, 2e-3], "at least two distinct"),
     ([4096, 8192], [1e-3], "must pair up"), ([4096, 8192], [1e-3, 0.0], "numbers > 0"),
     ([4096, -1], [1e-3, 2e-3], "numbers > 0")],
)  # fmt: skip
def test_bad_points_are_refused(sizes, seconds, message):
    with pytest.raises(ValueError, match=message):
        fit_link(sizes, seconds)


def test_the_ring_is_the_fitted_all_reduce_at_two_workers_and_grows_as_lesson_11_says():
    link = Link(alpha=1e-3, beta=1e8)
    size = 5_003_432
    assert ring_seconds(link, size, 2) == pytest.approx(link.seconds(size))
    assert ring_seconds(link, size, 1) == 0.0  # one worker exchanges nothing
    assert ring_seconds(link, size, 8) == pytest.approx(7 * link.alpha + 2 * 7 / 8 * size / link.beta)
    assert predicted_step(0.05, size, 2, link) == pytest.approx(0.05 + link.seconds(size))
    with pytest.raises(ValueError, match="workers must be a whole number >= 1"):
        ring_seconds(link, size, 0)
