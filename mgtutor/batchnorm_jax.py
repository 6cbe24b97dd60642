"""BatchNorm under Keras' `DataParallel` on JAX, a child program for notebook 05's table of routes.

A process has one Keras backend, so a TensorFlow notebook measures the JAX route in a child:
``python -m mgtutor.batchnorm_jax MODEL BATCHES BATCH_SIZE LEARNING_RATE N_DEVICES`` trains
the `.keras` file MODEL one pass over the x and y of the .npz BATCHES, in order, with plain
SGD on N_DEVICES JAX devices, and reports (`report_result`) every BatchNorm layer's moving
mean and variance and whether each is one replicated copy. Importing it imports no backend.
"""

from __future__ import annotations

import sys

import numpy as np


def _arguments(argv: list[str]) -> tuple[str, str, int, float, int]:
    """The command line, checked before any backend starts."""
    if len(argv) != 5:
        raise SystemExit("usage: python -m mgtutor.batchnorm_jax MODEL BATCHES BATCH_SIZE LEARNING_RATE "
                         "N_DEVICES")
    model, batches, batch_size, learning_rate, n_devices = argv
    batch_size, learning_rate, n_devices = int(batch_size), float(learning_rate), int(n_devices)
    samples = len(np.load(batches)["x"])
    whole = n_devices >= 1 and batch_size >= 1 and not batch_size % n_devices and not samples % batch_size
    if not whole or learning_rate <= 0:
        raise SystemExit(f"BATCH_SIZE {batch_size} must split over N_DEVICES {n_devices} and the {samples} "
                         f"samples must be whole batches of it (LEARNING_RATE {learning_rate} > 0): pass a "
                         "batch size divisible by the device count and a multiple of it in samples.")
    return model, batches, batch_size, learning_rate, n_devices


def main(argv: list[str]) -> None:
    """Train and report; see the module docstring."""
    model_path, batches, batch_size, learning_rate, n_devices = _arguments(argv)
    from mgtutor.devices import setup_devices

    setup = setup_devices(n_devices, backend="jax", verbose=False)
    import jax
    import keras

    from mgtutor.processes import report_result

    data = np.load(batches)
    with keras.distribution.DataParallel(devices=jax.devices()).scope():
        model = keras.saving.load_model(model_path, compile=False)
        model.compile(optimizer=keras.optimizers.SGD(learning_rate), loss="categorical_crossentropy")
        model.fit(data["x"], data["y"], batch_size=batch_size, epochs=1, shuffle=False, verbose=0)
    moving = [variable for layer in model.layers if isinstance(layer, keras.layers.BatchNormalization)
              for variable in (layer.moving_mean, layer.moving_variance)]  # fmt: skip
    report_result({
        "statistics": [np.asarray(variable.numpy()) for variable in moving],
        "replicated": all(variable.value.sharding.is_fully_replicated for variable in moving),
        "devices": list(setup.names),
    })  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1:])
