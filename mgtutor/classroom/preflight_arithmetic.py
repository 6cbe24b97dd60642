"""Preflight's look at lesson 16's arithmetic, in its own process: the capstone's network timed in float32
and mixed_bfloat16, with and without XLA, in turn, by the lesson's own `race_arithmetic`, on one device;
reports the fastest (what the lesson will pick here) and every rate."""

from __future__ import annotations

from mgtutor.devices import setup_devices
from mgtutor.support.processes import report_result

BATCH = 256  # random 32x32 images: the step's cost depends on the shapes, not on the pixels
ROUNDS = 2  # of one step each, the four choices in turn


def main() -> None:
    setup_devices(1, verbose=False)
    import numpy as np

    from mgtutor.training.capstone import build_capstone_cnn, race_arithmetic, whitening_filters

    rng = np.random.default_rng(0)
    images = rng.normal(size=(BATCH, 32, 32, 3)).astype(np.float32)
    labels = np.eye(10, dtype=np.float32)[rng.integers(0, 10, BATCH)]
    whitening = whitening_filters(images)

    def build():
        return build_capstone_cnn(whitening=whitening, seed=0)

    choices = [(precision, xla) for precision in ("float32", "mixed_bfloat16") for xla in (False, True)]
    timed = race_arithmetic(build, images, labels, choices, ROUNDS)
    rates = {choice: rate for choice, (rate, _, _) in timed.items()}
    precision, xla = max(rates, key=rates.__getitem__)
    named = {f"{p}, XLA {'on' if x else 'off'}": rate for (p, x), rate in rates.items()}
    report_result({"precision": precision, "xla": xla, "rates": named})


if __name__ == "__main__":
    main()
