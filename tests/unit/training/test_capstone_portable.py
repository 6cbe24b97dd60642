"""Lesson 16's saved model loads anywhere: its `.keras` file in plain Keras and its `model.export` SavedModel
in TensorFlow alone, in a process that cannot import mgtutor, give the live model's predictions."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

# Logits are about 1 in size; the folded bias adds the same numbers in the same order, so the copies agree
# to a few float32 units in the last place at most (measured: exactly, on this and the synthetic data).
TOLERANCE = {"rtol": 1e-6, "atol": 1e-6}

CHILD = textwrap.dedent("""
    import sys
    sys.modules["mgtutor"] = None  # before anything: `import mgtutor` now fails, here and in Keras's loader
    try:
        import mgtutor  # noqa: F401
    except ImportError:
        pass
    else:
        raise SystemExit("mgtutor was importable")
    import json
    import numpy as np
    import keras
    import tensorflow as tf

    folder = sys.argv[1]
    images = np.load(folder + "/images.npy")
    model = keras.saving.load_model(folder + "/capstone.keras")
    served = tf.saved_model.load(folder + "/served")
    np.save(folder + "/keras.npy", model.predict(images, batch_size=250, verbose=0))
    np.save(folder + "/served.npy", np.concatenate([served.serve(tf.constant(images[i : i + 250])).numpy()
                                                    for i in range(0, len(images), 250)]))
    print(json.dumps({"classes": sorted({type(layer).__module__.split(".")[0] for layer in model.layers}),
                      "mgtutor": [name for name in sys.modules if name.startswith("mgtutor")]}))
""")


def _trained_model(data, precision: str):
    """The lesson's network, small, trained 2 epochs with its whitening bias learning in the first."""
    import keras

    from mgtutor.training.capstone import (
        WhiteningBias,
        build_capstone_cnn,
        channel_statistics,
        standardize,
        whitening_filters,
    )

    keras.mixed_precision.set_global_policy(precision)
    statistics = channel_statistics(data.x_train)
    x = standardize(data.x_train, statistics).numpy()
    model = build_capstone_cnn(whitening=whitening_filters(x[:256]), widths=(16, 32, 32), seed=0)
    bias = WhiteningBias(model, 1)
    model.compile(optimizer=keras.optimizers.SGD(0.2, momentum=0.85, nesterov=True),
                  loss=keras.losses.CategoricalCrossentropy(from_logits=True))  # fmt: skip
    y = keras.utils.to_categorical(data.y_train, data.num_classes)
    model.fit(x, y, batch_size=64, epochs=2, verbose=0, callbacks=[bias])
    return model, standardize(data.x_test, statistics).numpy()


# bfloat16 too: its sums rounded as the live ones. A model, a child and an export (18 s in float32):
# kept out of make test's 3 minutes, in make test-all.
@pytest.mark.slow
@pytest.mark.parametrize("precision", ["float32", "mixed_bfloat16"])
def test_the_saved_model_and_its_export_serve_the_live_predictions_where_mgtutor_cannot_be_imported(
    tmp_path, precision
):
    import keras

    from mgtutor import load_dataset, save_model
    from mgtutor.training.capstone import Bias, portable

    # The real test images where MGTUTOR_DATA_DIR holds them; else the labelled synthetic stand-in.
    data = load_dataset("cifar10", seed=0).subset(512, 500, seed=0)
    try:
        model, images = _trained_model(data, precision)
        bias = keras.ops.convert_to_numpy(model.get_layer("whitening_bias").bias)
        assert np.abs(bias).max() > 1e-4  # it learnt: the fold carries something
        live = model.predict(images, batch_size=250, verbose=0)
        copy = portable(model)
        assert not any(isinstance(layer, Bias) for layer in copy.layers)
        np.testing.assert_array_equal(copy.get_layer("whitening").bias.numpy(), bias)
        save_model(copy, tmp_path / "capstone.keras", verbose=False)
        copy.export(str(tmp_path / "served"), verbose=False)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    np.save(tmp_path / "images.npy", images)
    quiet = {"TF_CPP_MIN_LOG_LEVEL": "3", "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-I", "-c", CHILD, str(tmp_path)], capture_output=True, text=True,
                          env=quiet, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {"classes": ["keras"], "mgtutor": ["mgtutor"]}  # Keras's layers; mgtutor only the block
    for name in ("keras", "served"):
        predicted = np.load(tmp_path / f"{name}.npy")
        np.testing.assert_allclose(predicted, live, **TOLERANCE, err_msg=name)
        assert np.array_equal(predicted.argmax(axis=1), live.argmax(axis=1))  # the same accuracy
    accuracy = float(np.mean(live.argmax(axis=1) == data.y_test[:, 0]))
    assert accuracy > 1.5 / data.num_classes  # a model that learnt, not chance (both data sets: measured)
