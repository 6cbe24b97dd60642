"""Preflight's smoke step, in its own process: 2 logical devices, a few steps under MirroredStrategy
and on one device from the same weights; reports the largest weight difference and any NaN."""

from __future__ import annotations

import math

from mgtutor.devices import setup_devices
from mgtutor.processes import report_result


def main() -> None:
    setup = setup_devices(2, verbose=False)
    import keras
    import numpy as np

    from mgtutor.data_parallel import copy_model, max_weight_difference, mirrored_strategy

    rng = np.random.default_rng(0)
    x = rng.random((64, 8, 8, 3), dtype=np.float32)
    y = np.eye(4, dtype=np.float32)[rng.integers(0, 4, 64)]
    keras.utils.set_random_seed(0)
    one = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Conv2D(4, 3, activation="relu"),
                            keras.layers.Flatten(), keras.layers.Dense(4, activation="softmax")])  # fmt: skip
    strategy = mirrored_strategy()
    two = copy_model(one, strategy=strategy)
    for model, scope in ((one, None), (two, strategy)):
        if scope is None:
            model.compile(optimizer=keras.optimizers.SGD(0.1), loss="categorical_crossentropy")
        else:
            with scope.scope():
                model.compile(optimizer=keras.optimizers.SGD(0.1), loss="categorical_crossentropy")
        model.fit(x, y, batch_size=32, epochs=2, shuffle=False, verbose=0)
    weights = [w for model in (one, two) for w in model.get_weights()]
    report_result({
        "devices": list(setup.names), "kind": setup.kind, "tensorflow": __import__("tensorflow").__version__,
        "difference": max_weight_difference(one, two),
        "nan": any(not math.isfinite(float(np.abs(w).max())) for w in weights if w.size),
    })  # fmt: skip


if __name__ == "__main__":
    main()
