"""What tf.data's autotuner costs a lesson's fit: TF's default against `iterators_end_promptly`.

A lesson-sized ``model.fit(x, y)``: the seed CNN on 2 logical CPU devices under MirroredStrategy,
5,000 random images, batch 128, 4 epochs with 1,000 validation images, twice per process (a fresh
model each time). Each process is one contender: TF's default, where every iterator Keras makes has
an autotuner (``fit``'s dataset, each epoch's validation, the copy MirroredStrategy makes for each
device), or with `mgtutor.support.tfdata.iterators_end_promptly`, as `setup_devices` now gives every
lesson. The two alternate, ``--rounds`` times, so the machine's pace hits both alike. Per fit it
prints the seconds, the seconds after the last epoch ended and the epochs' seconds; then each
contender's median fit with its range, and the ratio. A dropped iterator waits for the autotuner's
next round (see `without_autotuner`), so TF's default shows as spread: fits that stall, and fits that
do not. Run from the repository root::

    .venv/bin/python benchmarks/bench_iterator_end.py --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODES = ("default", "prompt")


def _child(mode: str) -> None:
    """Two fits in this process, `mode`'s iterators; prints one JSON line."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    if mode == "prompt":
        from mgtutor.support.tfdata import iterators_end_promptly

        iterators_end_promptly()
    import keras
    import numpy as np

    from mgtutor.models import build_model

    rng = np.random.default_rng(0)
    x = rng.random((5000, 32, 32, 3), dtype=np.float32)
    y = keras.utils.to_categorical(rng.integers(0, 10, 5000), 10)
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    ends: list[float] = []
    clock = keras.callbacks.LambdaCallback(on_epoch_end=lambda epoch, logs: ends.append(time.perf_counter()))
    fits = []
    for _ in range(2):
        with strategy.scope():
            model = build_model("seed_cnn", (32, 32, 3), 10, seed=0)
            model.compile(loss="categorical_crossentropy", optimizer="adam", metrics=["accuracy"])
        ends.clear()
        started = time.perf_counter()
        model.fit(x, y, batch_size=128, epochs=4, verbose=0, callbacks=[clock],
                  validation_data=(x[:1000], y[:1000]))
        done = time.perf_counter()
        epochs = [b - a for a, b in zip([started, *ends[:-1]], ends, strict=True)]
        fits.append({"seconds": done - started, "after_last_epoch": done - ends[-1], "epochs": epochs})
    print(json.dumps(fits), flush=True)


def _run(mode: str) -> list[dict]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, __file__, "--child", mode], cwd=ROOT, env=env, capture_output=True,
                          text=True, check=True)  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="processes per contender, alternating (>= 1)")
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return _child(args.child)
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}.")
    sys.path.insert(0, str(ROOT))
    from mgtutor.support.system import cpu, describe_cpu

    when = f"{datetime.now():%Y-%m-%d %H:%M}"
    print(f"bench_iterator_end.py, {when}, {os.cpu_count()} cores, {describe_cpu(cpu())}", flush=True)
    fits: dict[str, list[float]] = {mode: [] for mode in MODES}
    for round_ in range(args.rounds):
        for mode in MODES if round_ % 2 == 0 else MODES[::-1]:
            for fit in _run(mode):
                fits[mode].append(fit["seconds"])
                epochs = " ".join(f"{s:.1f}" for s in fit["epochs"])
                after = fit["after_last_epoch"]
                print(f"round {round_ + 1} {mode:>7}: fit {fit['seconds']:5.1f} s, {after:4.1f} s after "
                      f"its last epoch; epochs {epochs}", flush=True)  # fmt: skip
    middle = {mode: statistics.median(seconds) for mode, seconds in fits.items()}
    for mode, seconds in fits.items():
        print(f"{mode:>7}: median fit {middle[mode]:.1f} s (range {min(seconds):.1f}-{max(seconds):.1f}, "
              f"{len(seconds)} fits)")  # fmt: skip
    apart = min(fits["default"]) > max(fits["prompt"]) or max(fits["default"]) < min(fits["prompt"])
    verdict = "a difference: the ranges do not overlap" if apart else "within the spread: the ranges overlap"
    print(f"default / prompt: {middle['default'] / middle['prompt']:.2f}x the seconds per fit, {verdict}")


if __name__ == "__main__":
    main()
