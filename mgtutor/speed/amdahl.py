"""Amdahl's law: what a measured speed-up means on more real GPUs.

`projected_scaling` fits the law to seed 001's 63 s -> 16 s per epoch on four
V100s (or any two measurements) and projects seconds per epoch, speed-up and
efficiency to other device counts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from mgtutor.support.checks import check_whole, is_real

# Seed 001: MiniGoogLeNet on CIFAR-10, seconds per epoch on 1 and on 4 V100 GPUs.
SEED_001_EPOCH_SECONDS: dict[int, float] = {1: 63.0, 4: 16.0}


def amdahl_speedup(n_devices: float, parallel_fraction: float) -> float:
    """Amdahl's law: the speed-up on `n_devices` when `parallel_fraction` of the time divides over them."""
    if not is_real(n_devices) or not n_devices >= 1:
        raise ValueError(f"n_devices must be a number >= 1, got {n_devices!r}.")
    if not is_real(parallel_fraction) or not 0 <= parallel_fraction <= 1:
        raise ValueError(f"parallel_fraction must lie between 0 and 1, got {parallel_fraction!r}.")
    return 1.0 / ((1 - parallel_fraction) + parallel_fraction / n_devices)


def parallel_fraction(speedup: float, n_devices: float) -> float:
    """The parallel fraction for which Amdahl's law gives `speedup` on `n_devices` (inverse of it)."""
    if not is_real(n_devices) or not n_devices > 1:
        raise ValueError(f"n_devices must be a number > 1 (one device tells nothing), got {n_devices!r}.")
    if not is_real(speedup) or not 1 <= speedup <= n_devices:
        raise ValueError(
            f"speedup must lie between 1 and n_devices={n_devices:g} for Amdahl's law, got {speedup!r}."
        )
    return (1 - 1 / speedup) / (1 - 1 / n_devices)


def projected_scaling(
    devices: Sequence[int] = (1, 2, 4, 8),
    epoch_seconds: Mapping[int, float] = SEED_001_EPOCH_SECONDS,
) -> list[dict[str, float]]:
    """Seconds per epoch, speed-up and efficiency on real GPUs, by Amdahl's law fitted to two measurements.

    `epoch_seconds` maps 1 and one other device count to measured seconds per
    epoch; the default is seed 001's 63 s (1 V100) and 16 s (4 V100s): speed-up
    3.94, efficiency 98 %, parallel fraction 0.9947. One fitted point cannot
    see a slow input pipeline or a saturated interconnect at larger counts, so
    treat the numbers beyond the measured count as an upper bound.
    """
    if len(epoch_seconds) != 2 or 1 not in epoch_seconds:
        raise ValueError(
            "epoch_seconds must map 1 and one other device count to seconds per epoch, e.g. "
            f"{{1: 63.0, 4: 16.0}}; got {dict(epoch_seconds)!r}."
        )
    (n_ref, ref_s), one_s = next((n, s) for n, s in epoch_seconds.items() if n != 1), epoch_seconds[1]
    if not all(is_real(s) and s > 0 for s in (one_s, ref_s)):
        raise ValueError(f"epoch_seconds must be positive numbers, got {dict(epoch_seconds)!r}.")
    fraction = parallel_fraction(one_s / ref_s, n_ref)
    projection = []
    for n in devices:
        check_whole("devices", n, 1)
        speedup = amdahl_speedup(n, fraction)
        projection.append(
            {
                "devices": n,
                "epoch_seconds": one_s / speedup,
                "speedup": speedup,
                "efficiency": speedup / n,
                "parallel_fraction": fraction,
            }
        )
    return projection
