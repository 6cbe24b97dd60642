"""The link fit (latency + bytes / bandwidth) and lesson 11's ring fed it (`mgtutor.speed.link`, generated
from lesson 14's #@save cell)."""

from __future__ import annotations

import numpy as np
import pytest

from mgtutor.speed.link import fit_link, ring_seconds

SIZES = [4096 * 4**k for k in range(8)]  # 4 KB .. 64 MB, as lesson 14 measures


def test_exact_times_give_back_their_latency_and_bandwidth():
    alpha, beta = 1e-3, 2e8
    fitted = fit_link(SIZES, [alpha + s / beta for s in SIZES])
    assert fitted == pytest.approx((alpha, beta), rel=1e-9)


def test_the_fit_weighs_relative_errors_so_the_latency_survives_noise_at_large_sizes():
    alpha, beta = 2e-4, 1e9
    noisy = [(alpha + s / beta) * (1.3 if s > 2**24 else 1.0) for s in SIZES]  # the two largest 30 % slow
    fitted_alpha, _ = fit_link(SIZES, noisy)
    assert fitted_alpha == pytest.approx(alpha, rel=0.1)  # plain least squares loses it:
    plain_alpha = np.polyfit(np.array(SIZES, float), np.array(noisy), 1)[1]
    assert abs(plain_alpha - alpha) > 10 * abs(fitted_alpha - alpha)


def test_the_ring_is_the_fitted_all_reduce_at_two_workers_and_grows_as_lesson_11_says():
    alpha, beta, size = 1e-3, 1e8, 5_003_432
    assert ring_seconds(alpha, beta, size, 2) == pytest.approx(alpha + size / beta)
    assert ring_seconds(alpha, beta, size, 1) == 0.0  # one worker exchanges nothing
    assert ring_seconds(alpha, beta, size, 8) == pytest.approx(7 * alpha + 2 * 7 / 8 * size / beta)
