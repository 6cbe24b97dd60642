"""benchmarks/bench_capstone.py's speed study times lesson 16's network against the same network with Keras's
own `gelu`: that copy must be the step before `float32_gelu`, with the very same weights."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(ROOT / "benchmarks"))  # a script's folder, as `python benchmarks/...` runs it
    try:
        yield importlib.import_module("bench_capstone")
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


def test_the_copy_with_kerass_gelu_has_the_same_weights_and_predictions(bench):
    import keras

    from mgtutor.training.capstone import build_capstone_cnn, float32_gelu, whitening_filters

    images = np.random.default_rng(0).normal(size=(8, 32, 32, 3)).astype(np.float32)
    model = build_capstone_cnn(whitening=whitening_filters(images), widths=(8, 16, 16), seed=0)
    copy = bench.with_kerass_gelu(model)
    activations = [layer.activation for layer in copy.layers if isinstance(layer, keras.layers.Activation)]
    assert len(activations) == 7 and all(a is keras.activations.gelu for a in activations)
    assert sum(isinstance(layer, keras.layers.Activation) and layer.activation is float32_gelu
               for layer in model.layers) == 7  # fmt: skip
    for ours, theirs in zip(model.get_weights(), copy.get_weights(), strict=True):
        np.testing.assert_array_equal(ours, theirs)
    # float32: the same function, Keras's gelu in both (float32_gelu's forward is it, to the bit)
    np.testing.assert_array_equal(model.predict(images, verbose=0), copy.predict(images, verbose=0))
