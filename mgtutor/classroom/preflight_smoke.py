"""Preflight's smoke step, in its own process: 2 logical devices, a few steps under MirroredStrategy
and on one device from the same weights; reports the largest weight difference and any NaN, and the
reference step: lesson 02's seed CNN trained on one device, in images per second, from which `make check`
estimates how long `make run` takes on this laptop.
``python -m mgtutor.classroom.preflight_smoke jax`` does the same on the JAX backend with
``keras.distribution.DataParallel``; ``... reference`` times the reference step alone (`make run` again at
its end: did the machine's speed change during the run?)."""

from __future__ import annotations

import math
import sys

from mgtutor.devices import setup_devices
from mgtutor.support.processes import report_result


def _problem() -> tuple:
    """64 random 8x8 images with 4 classes and a small CNN, the same on every backend."""
    import keras
    import numpy as np

    rng = np.random.default_rng(0)
    x = rng.random((64, 8, 8, 3), dtype=np.float32)
    y = np.eye(4, dtype=np.float32)[rng.integers(0, 4, 64)]
    keras.utils.set_random_seed(0)
    layers = [keras.Input((8, 8, 3)), keras.layers.Conv2D(4, 3, activation="relu"), keras.layers.Flatten(),
              keras.layers.Dense(4, activation="softmax")]  # fmt: skip
    model = keras.Sequential(layers)
    return x, y, model


def _train(model, x, y) -> None:
    import keras

    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="categorical_crossentropy")
    model.fit(x, y, batch_size=32, epochs=2, shuffle=False, verbose=0)


def _outcome(one, two) -> dict:
    import numpy as np

    pairs = list(zip(one.get_weights(), two.get_weights(), strict=True))
    weights = [w for pair in pairs for w in pair if w.size]
    return {"difference": max(float(np.abs(a - b).max()) for a, b in pairs),
            "nan": any(not math.isfinite(float(np.abs(w).max())) for w in weights)}  # fmt: skip


REFERENCE_BATCH, REFERENCE_STEPS, REFERENCE_ROUNDS = 64, 8, 3


def reference_step() -> float:
    """Images per second of lesson 02's seed CNN training step, batch 64, on one device: the median round."""
    import time

    import keras
    import numpy as np
    import tensorflow as tf

    from mgtutor.models import build_model

    rng = np.random.default_rng(0)
    x = rng.random((REFERENCE_BATCH, 32, 32, 3), dtype=np.float32)  # the cost is the shapes', not the pixels'
    y = np.eye(10, dtype=np.float32)[rng.integers(0, 10, REFERENCE_BATCH)]
    with tf.device("/CPU:0"):
        model = build_model("seed_cnn", (32, 32, 3), 10, seed=0)
        model.compile(optimizer=keras.optimizers.RMSprop(1e-4), loss="categorical_crossentropy")
        model.train_on_batch(x, y)  # traced and compiled once, outside the clock
        rounds = []
        for _ in range(REFERENCE_ROUNDS):
            started = time.perf_counter()
            for _ in range(REFERENCE_STEPS):
                model.train_on_batch(x, y)
            rounds.append(REFERENCE_STEPS * REFERENCE_BATCH / (time.perf_counter() - started))
    return sorted(rounds)[len(rounds) // 2]


def main() -> None:
    setup = setup_devices(2, verbose=False)
    from mgtutor.data_parallel import copy_model, mirrored_strategy

    x, y, one = _problem()
    strategy = mirrored_strategy()
    two = copy_model(one, strategy=strategy)
    _train(one, x, y)
    with strategy.scope():
        _train(two, x, y)
    rate = reference_step()
    report_result({"devices": list(setup.names), "kind": setup.kind, "reference_images_per_s": rate,
                   "tensorflow": __import__("tensorflow").__version__, **_outcome(one, two)})  # fmt: skip


def main_jax() -> None:
    setup = setup_devices(2, backend="jax", verbose=False)
    import jax
    import keras

    x, y, one = _problem()
    start = one.get_weights()
    _train(one, x, y)
    with keras.distribution.DataParallel(devices=jax.devices()).scope():
        two = keras.models.clone_model(one)
        two.set_weights(start)
        _train(two, x, y)
    report_result({"devices": list(setup.names), "kind": setup.kind, "jax": jax.__version__,
                   **_outcome(one, two)})  # fmt: skip


def main_reference() -> None:
    setup_devices(1, verbose=False)
    report_result({"reference_images_per_s": reference_step()})


if __name__ == "__main__":
    {"jax": main_jax, "reference": main_reference}.get(" ".join(sys.argv[1:]), main)()
