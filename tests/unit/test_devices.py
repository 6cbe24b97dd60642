"""mgtutor.devices: device set-up is once per process, so each case runs in a fresh interpreter
(devices_child.py)."""

from __future__ import annotations

import pytest

from mgtutor.devices import parameter_memory, setup_devices
from tests.conftest import ROOT, run_child

CHILD = ROOT / "tests" / "unit" / "devices_child.py"


@pytest.mark.slow
def test_splits_the_cpu_says_so_and_is_idempotent():
    result = run_child(CHILD, "first")
    assert result["names"] == [f"/device:CPU:{i}" for i in range(4)]
    assert result["kind"] == "logical-cpu" and result["again"] == result["names"]
    assert result["logical"] == 4 and result["where"].endswith("CPU:3")
    assert "the CPU split into 4 logical CPU device(s)" in result["printed"]
    assert ", ".join(result["names"]) in result["printed"]


@pytest.mark.slow
def test_changing_the_count_after_start_asks_for_a_restart():
    refused, accepted = run_child(CHILD, "late")["messages"]
    assert "Restart the kernel" in refused and "setup_devices(2)" in refused
    assert accepted == ["/device:CPU:0"]


@pytest.mark.slow
def test_jax_gets_its_devices_when_set_first_and_refuses_a_change():
    result = run_child(CHILD, "jax", env={"KERAS_BACKEND": "tensorflow", "XLA_FLAGS": ""})
    assert result["names"] == result["again"] == [f"cpu:{i}" for i in range(4)]
    assert result["kind"] == "logical-cpu" and result["backend"] == "jax"
    assert result["shards"] == sorted(result["names"])  # an array split over the 4 devices
    assert "the CPU split into 4 JAX device(s)" in result["printed"]
    assert "Restart the kernel" in result["refused"]
    assert 'setup_devices(2, backend="jax")' in result["refused"]
    assert result["tensorflow_imported"] is False


@pytest.mark.slow
def test_jax_after_keras_started_on_tensorflow_asks_for_a_restart():
    result = run_child(CHILD, "jax-late", env={"KERAS_BACKEND": "tensorflow"})
    assert result["backend"] == "tensorflow"
    assert "'tensorflow' backend" in result["refused"] and "Restart the kernel" in result["refused"]


def test_rejects_an_unknown_backend():
    with pytest.raises(ValueError, match="backend must be one of 'tensorflow', 'jax', got 'torch'"):
        setup_devices(2, backend="torch")


@pytest.mark.parametrize("bad", [0, -1, 2.0, "4", True, None])
def test_rejects_a_bad_count_before_touching_tensorflow(bad):
    with pytest.raises(ValueError, match="n_devices must be a whole number >= 1"):
        setup_devices(bad)


def test_rejects_a_bad_memory_limit():
    with pytest.raises(ValueError, match="gpu_memory_limit_mb"):
        setup_devices(2, gpu_memory_limit_mb=10)


def test_parameter_memory_is_params_times_bytes():
    import keras

    model = keras.Sequential(
        [keras.Input((8,)), keras.layers.Dense(4), keras.layers.BatchNormalization()]
    )
    memory = parameter_memory(model)
    # Dense 8*4+4 = 36 trainable; BatchNorm 4 gamma + 4 beta trainable, 4+4 moving stats.
    assert memory == {
        "params": 52, "trainable_params": 44, "non_trainable_params": 8, "bytes": 52 * 4,
    }  # fmt: skip
    assert memory["bytes"] == sum(v.numpy().nbytes for v in model.weights)


def test_describe_lists_devices_and_model_memory():
    import keras

    from mgtutor.devices import describe

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)], name="tiny")
    table = describe(model)
    assert "physical  CPU" in table and "logical   CPU" in table
    assert "model tiny: 8 parameters = 32 bytes" in table
