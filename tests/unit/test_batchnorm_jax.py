"""mgtutor.batchnorm_jax: the child that measures plain BatchNorm under JAX DataParallel (notebook 05)."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from mgtutor import run_script


def _batches(tmp_path, samples: int = 32):
    rng = np.random.default_rng(0)
    x = rng.normal(2.0, 3.0, size=(samples, 4, 4, 3)).astype(np.float32)
    x[: samples // 2] += 5.0  # the two devices' slices differ: a per-slice mean is far from the global one
    y = np.eye(2, dtype=np.float32)[rng.integers(0, 2, samples)]
    np.savez(tmp_path / "batches.npz", x=x, y=y)
    return x


def _child(tmp_path, *args):
    files = (tmp_path / "bn.keras", tmp_path / "batches.npz")
    child = [sys.executable, "-m", "mgtutor.batchnorm_jax"]
    return run_script(child, *files, *args, stream=False, check=False, timeout=300)


def test_a_batch_that_does_not_split_is_refused_before_any_backend_starts(tmp_path):
    _batches(tmp_path, samples=30)
    ended = _child(tmp_path, 16, 0.1, 2)  # 30 samples are not whole batches of 16
    assert ended.returncode != 0 and ended.result is None
    assert any("BATCH_SIZE 16 must split over N_DEVICES 2 and the 30 samples" in line for line in ended.tail)
    assert ended.seconds < 20  # refused before JAX or Keras is imported


@pytest.mark.slow
def test_plain_batchnorm_on_two_jax_devices_keeps_the_whole_batch_statistics(tmp_path):
    import keras

    x = _batches(tmp_path)
    keras.utils.set_random_seed(0)
    layers = [keras.Input((4, 4, 3)), keras.layers.BatchNormalization(momentum=0.0), keras.layers.Flatten(),
              keras.layers.Dense(2, activation="softmax")]  # fmt: skip
    model = keras.Sequential(layers)
    model.save(tmp_path / "bn.keras")
    ended = _child(tmp_path, 32, 0.1, 2)  # one step of the whole batch, split over two devices
    assert ended.returncode == 0, ended.tail
    mean, variance = ended.result["statistics"]
    assert len(ended.result["devices"]) == 2 and ended.result["replicated"] is True
    # momentum 0: the moving statistics are the step's batch statistics, those of all 32 images
    np.testing.assert_allclose(mean, x.mean(axis=(0, 1, 2)), atol=1e-5)
    np.testing.assert_allclose(variance, x.var(axis=(0, 1, 2)), rtol=1e-5)
    assert np.abs(x[:16].mean(axis=(0, 1, 2)) - mean).min() > 2  # not one device's slice
