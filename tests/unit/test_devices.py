"""mgtutor.devices: device set-up is once per process, so each case runs in a fresh interpreter."""

from __future__ import annotations

import pytest

from mgtutor.devices import parameter_memory, setup_devices
from tests.conftest import run_python


def test_splits_the_cpu_and_is_idempotent():
    result = run_python(
        """
        import json
        import tensorflow as tf
        from mgtutor import setup_devices
        first = setup_devices(4)
        again = setup_devices(4, verbose=False)
        with tf.device(first[3]):
            where = tf.constant(1.0).device
        print(json.dumps({"names": list(first), "kind": first.kind, "again": list(again),
                          "where": where,
                          "logical": len(tf.config.list_logical_devices("CPU"))}))
        """
    )
    assert result["names"] == [f"/device:CPU:{i}" for i in range(4)]
    assert result["kind"] == "logical-cpu" and result["again"] == result["names"]
    assert result["logical"] == 4 and result["where"].endswith("CPU:3")


def test_changing_the_count_after_start_asks_for_a_restart():
    result = run_python(
        """
        import json
        import tensorflow as tf
        from mgtutor import DeviceSetupError, setup_devices
        tf.constant(1.0)  # the runtime starts with its default single CPU
        messages = []
        for n in (2, 1):
            try:
                messages.append(list(setup_devices(n, verbose=False)))
            except DeviceSetupError as err:
                messages.append(str(err))
        print(json.dumps(messages))
        """
    )
    refused, accepted = result
    assert "Restart the kernel" in refused and "setup_devices(2)" in refused
    assert accepted == ["/device:CPU:0"]


def test_prints_what_it_did():
    result = run_python(
        """
        import contextlib, io, json
        from mgtutor import setup_devices
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            setup_devices(2)
        print(json.dumps(out.getvalue()))
        """
    )
    assert "the CPU split into 2 logical CPU device(s)" in result
    assert "/device:CPU:0, /device:CPU:1" in result


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
