"""mgtutor.batchnorm: one set of BatchNormalization statistics when training on several replicas.

Everything that needs several devices runs in ``batchnorm_child.py``, one child process per
device count: 2 devices, then 4, which reloads the files the 2-device run saved (measured on an
idle 2-core machine: 1 min 30 s and 38 s, started in the background as the session starts).
MiniGoogLeNet on 16x16x3, float64, 100 examples in batches of 32 (the last batch holds 4), one
epoch. The children print their measurements as JSON; the assertions are here. Bad inputs and the
one-device behaviour are checked in this process. Two workers averaging their statistics through
`Trainer` are tested in test_cluster.py, whose multi-worker job has BatchNormalization.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mgtutor import batchnorm, models
from tests.conftest import ROOT, run_child

CHILD = ROOT / "tests" / "unit" / "batchnorm_child.py"
CHILD_TIMEOUT = 600  # seconds, per child; at most 120 measured

# Plain BatchNormalization on 2 devices: the copies of the moving statistics drift.
# Measured 1.0e-2 after one epoch (MiniGoogLeNet, 16x16, float64) and 6.2e-4 (the tiny model).
DRIFT_MIN = 1e-4
TINY_DRIFT_MIN = 1e-5
# Synchronized copies and averaged copies: measured 0.0 (bit-identical).
SAME_ATOL = 1e-6
# The averaged model saved and loaded vs the live one on 2 replicas: measured 0.0.
SAVED_ATOL = 1e-5
# Synchronized, 2 devices vs 1, float64: measured 1.4e-15 (weights), 6.9e-17 (outputs).
# Plain BatchNormalization, same comparison: 1.0e-1 and 1.9e-3 (each replica normalises
# its own half of the batch). In float32 rounding noise hides the difference (see the child).
# 4 devices vs 1 (eager): 1.2e-15 and 6.9e-17 (the largest difference is in the first
# kernel, where both differ from one device alike). Trainer on
# 2 devices vs fit on 1, one step: 2.5e-16.
PARITY_ATOL = 1e-12
PLAIN_PARITY_MIN = 1e-4
# Towers: the moving mean after one step vs the tower-order formula: measured 6e-8.
TOWERS_ATOL = 1e-6
# A model saved on 2 devices (averaged) or on 1, reloaded on 1 or under a 4-replica strategy,
# vs the live model's predictions: measured 0.0 in all three cases. The two files' models predict
# 1.3e-3 apart.
RELOAD_ATOL = 1e-5
OTHER_MODEL_MIN = 1e-3


def children(folder: Path) -> dict:
    """The 2-device child, then the 4-device one, which reloads what the first saved in `folder`."""
    return {str(n): run_child(CHILD, "--folder", folder, "--devices", n, timeout=CHILD_TIMEOUT)
            for n in (2, 4)}  # fmt: skip


@pytest.fixture(scope="module")
def measured(run_once) -> dict:
    return run_once("batchnorm", children)["2"]


@pytest.fixture(scope="module")
def on_four_devices(run_once) -> dict:
    return run_once("batchnorm", children)["4"]


# --------------------------------------------------------------------------- 2 devices


def test_plain_batchnorm_copies_drift_and_the_live_model_is_not_replica_0s(measured):
    assert measured["replicas"] == 2
    assert measured["plain_spread"] > DRIFT_MIN
    # The live model predicts half of each batch with replica 1's statistics.
    assert measured["live_vs_replica0"] > SAME_ATOL


def test_saving_a_drifted_model_is_refused_before_anything_is_written(measured):
    for key in ("save_error", "weights_error", "export_error"):
        message = measured[key]
        assert f"differ by up to {measured['plain_spread']:.3g}" in message, key
        assert "replica 0's copy" in message
        assert "average_replica_copies(model)" in message
        assert "BatchNormalization(synchronized=True)" in message
        assert "Nothing was written" in message
    # Only the file that was there before, with its old content: no temp files either.
    assert measured["files_after_refusals"] == ["drifted.keras"]
    assert measured["existing_unchanged"] is True


def test_averaging_leaves_one_copy_and_the_saved_model_predicts_as_the_live_one(measured):
    assert measured["average_returned"] == pytest.approx(measured["plain_spread"], rel=1e-6)
    assert measured["spread_after_average"] == 0.0
    assert measured["average_again"] == 0.0
    assert measured["saved_vs_live"] <= SAVED_ATOL


def test_synchronized_batchnorm_keeps_the_copies_equal(measured):
    assert measured["synced_spread"] < SAME_ATOL
    assert measured["auto_under_strategy"] == [True]  # build_minigooglenet's default on 2 replicas
    assert measured["auto_one_device"] == [False]


def test_synchronized_on_two_devices_trains_like_one_device(measured):
    assert measured["parity_synced"] <= PARITY_ATOL
    assert measured["parity_synced_outputs"] <= PARITY_ATOL
    assert measured["parity_plain"] > PLAIN_PARITY_MIN
    assert measured["one_device_spread"] == 0.0
    assert measured["one_device_average"] is None


def test_trainer_with_synchronized_batchnorm_trains_like_one_device(measured):
    # Trainer trains full batches only: one step of 32 (16 per replica) vs fit's first step on 1 device.
    assert measured["trainer_parity_synced"] <= PARITY_ATOL
    assert measured["trainer_synced_spread"] == 0.0


def test_callback_trainer_and_resumable_fit_leave_one_copy(measured):
    assert measured["tiny_fit_spread"] > TINY_DRIFT_MIN  # fit alone: the tiny model drifts
    spreads = measured["callback_spreads"]
    assert len(spreads) == 2 and all(s > TINY_DRIFT_MIN for s in spreads)
    assert measured["callback_spread_after"] == 0.0
    assert measured["trainer_spread"] == 0.0
    assert measured["resume_spread"] == 0.0  # and its epoch-end save_model was not refused
    assert "epoch-02.weights.h5" in measured["resume_files"]


def test_resumable_fit_with_batchnorm_resumes_bit_identically(measured):
    # Every replica's copy of every variable, not only replica 0's: a restore gives all replicas
    # the saved value, which the uninterrupted run holds too only because both average at every
    # save. Measured 0.0 (op determinism is on); 6.9e-4 with the averaging taken out.
    assert measured["interrupted_at"] == [1, 2]
    assert measured["resumed_vs_uninterrupted"] == 0.0


def test_towers_update_the_shared_statistics_once_per_tower(measured):
    assert measured["towers_vs_tower_order"] <= TOWERS_ATOL
    assert measured["towers_vs_one_device"] > 0.1  # about twice as far as one device's step
    assert measured["towers_spread"] == 0.0


# --------------------------------------------------------------------------- 4 devices, and reloads


def test_synchronized_on_four_devices_trains_like_one_device(on_four_devices):
    # The same float64 epoch as on 2 devices (batches of 32 and 4: 8 and 1 per replica), against the
    # one-device weights the 2-device run saved.
    assert on_four_devices["replicas"] == 4
    assert on_four_devices["parity_four"] <= PARITY_ATOL
    assert on_four_devices["parity_four_outputs"] <= PARITY_ATOL
    assert on_four_devices["parity_four_copies"] == 4
    assert on_four_devices["parity_four_spread"] == 0.0


def test_saved_on_two_devices_predicts_the_same_on_one_and_on_four(measured, on_four_devices):
    assert measured["two_on_one_copies"] == 1  # loaded without a strategy: one device's variables
    assert measured["two_on_one"] <= RELOAD_ATOL
    # load_model(path, strategy=...): every variable mirrored on the 4 replicas, all copies equal.
    assert on_four_devices["two_on_four_copies"] == 4
    assert on_four_devices["two_on_four_spread"] == 0.0
    assert on_four_devices["two_on_four"] <= RELOAD_ATOL


def test_saved_on_one_device_predicts_the_same_on_four(on_four_devices):
    assert on_four_devices["one_on_four_copies"] == 4
    assert on_four_devices["one_on_four_spread"] == 0.0
    assert on_four_devices["one_on_four"] <= RELOAD_ATOL
    # The comparisons tell models apart: the two files' models predict differently.
    assert on_four_devices["two_vs_one_predictions"] > OTHER_MODEL_MIN


# --------------------------------------------------------------------------- this process


def tiny_bn_model():
    import keras

    inner = keras.Sequential([keras.Input((4,)), keras.layers.BatchNormalization()], name="inner")
    inputs = keras.Input((4,))
    hidden = keras.layers.BatchNormalization()(inner(inputs))
    return keras.Model(inputs, keras.layers.Dense(2, activation="softmax")(hidden))


def test_without_a_strategy_there_is_nothing_to_average():
    import keras

    model = tiny_bn_model()
    assert batchnorm.replica_copy_spread(model) == 0.0
    assert batchnorm.average_replica_copies(model) is None
    callback = batchnorm.AverageReplicaCopies()
    model.compile(optimizer="sgd", loss="categorical_crossentropy")
    x = np.random.default_rng(0).random((8, 4), dtype=np.float32)
    model.fit(x, keras.utils.to_categorical(np.arange(8) % 2, 2), epochs=1, verbose=0, callbacks=[callback])
    assert callback.spreads == []


def test_sync_batchnorm_switches_nested_layers_and_keeps_the_weights():
    import keras

    model = tiny_bn_model()
    before = model.get_weights()
    model.compile(optimizer="sgd", loss="mse")
    model.predict(np.zeros((2, 4), np.float32), verbose=0)
    assert model.predict_function is not None
    assert batchnorm.sync_batchnorm(model) == 2
    assert all(layer.synchronized for layer in batchnorm.batchnorm_layers(model))
    assert model.predict_function is None  # traced again with the new setting
    assert all(np.array_equal(a, b) for a, b in zip(before, model.get_weights(), strict=True))
    clone = keras.models.clone_model(model)  # the flag is in the config
    assert all(layer.synchronized for layer in batchnorm.batchnorm_layers(clone))


def test_minigooglenet_synchronized_and_dropout_switches():
    default = models.build_minigooglenet((16, 16, 3), 10, seed=0)
    synced = models.build_minigooglenet((16, 16, 3), 10, seed=0, synchronized=True)
    assert len(batchnorm.batchnorm_layers(default)) == 19
    assert {layer.synchronized for layer in batchnorm.batchnorm_layers(default)} == {False}
    assert {layer.synchronized for layer in batchnorm.batchnorm_layers(synced)} == {True}
    assert all(np.array_equal(a, b) for a, b in zip(default.get_weights(), synced.get_weights(), strict=True))
    no_dropout = models.build_minigooglenet((16, 16, 3), 10, seed=0, dropout=False)
    assert "Dropout" not in [type(layer).__name__ for layer in no_dropout.layers]
    assert no_dropout.count_params() == default.count_params()


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: batchnorm.replica_copy_spread("model"), TypeError, "model must be a keras.Model"),
        (lambda: batchnorm.average_replica_copies(None), TypeError, "model must be a keras.Model"),
        (lambda: batchnorm.sync_batchnorm(3), TypeError, "model must be a keras.Model"),
        (lambda: batchnorm.AverageReplicaCopies(verbose="yes"), ValueError, "verbose must be True or False"),
        (lambda: models.build_minigooglenet(synchronized="yes"), ValueError, "synchronized must be True"),
        (lambda: models.build_minigooglenet(dropout=1), ValueError, "dropout must be True or False"),
    ],
)
def test_bad_inputs_are_named(call, error, match):
    with pytest.raises(error, match=match):
        call()
