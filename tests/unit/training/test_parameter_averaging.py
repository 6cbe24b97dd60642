"""mgtutor.training.parameter_averaging: DL4J's ParallelWrapper (parameter averaging) on Keras 3.

Everything that needs two devices runs in ONE child process (devices are fixed once
per process): parity with synchronous training, the averaging schedule and log,
optimizer-state averaging, the data forms, LeNet on real MNIST. The child prints
the measured values as JSON and the tests below assert on them. Argument errors and
the prefetch thread's failure paths run in this process on one CPU device.
"""

from __future__ import annotations

import itertools
import threading
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import ROOT, run_child

# Parity: after 4 rounds at lr 0.5 (SGD) / 0.1 with Nesterov momentum, averaged workers and
# one model trained on the concatenated batches agree to ~1e-7 (measured 8.9e-8 and 7.5e-8:
# the mean of two gradients is summed in another order). 1e-5 leaves ~100x margin yet is
# >10,000x below the weights' change over the run (0.37 and 0.13, checked), so a missed
# averaging, a sum instead of a mean or a stale momentum fails.
PARITY_ATOL = 1e-5
MIN_UPDATE = 1e-2
# Between averagings the workers see different batches: their weights must drift apart
# by far more than rounding (measured 0.29-0.52 before each averaging at lr 0.1).
MIN_SPREAD = 1e-4

CHILD = ROOT / "tests" / "unit" / "training" / "parameter_averaging_child.py"


def children(folder: Path) -> dict:
    return run_child(CHILD, timeout=600)


@pytest.fixture(scope="module")
def child(run_once) -> dict:
    return run_once("averaging", children)


# --------------------------------------------------------------------------- two devices


@pytest.mark.parametrize("optimizer", ["sgd", "nesterov"])
def test_frequency_one_equals_synchronous_training(child, optimizer):
    result = child[optimizer]
    assert result["update"] > MIN_UPDATE
    assert result["weights"] < PARITY_ATOL, result
    # The original model also holds the averaged optimizer state (momentum) and step count.
    assert result["optimizer_state"] < PARITY_ATOL
    assert result["iterations"] == [4, 4]
    assert result["steps"] == 4 and result["syncs"] == 4
    loss, reference_loss = result["loss"]
    assert loss == pytest.approx(reference_loss, abs=1e-6)
    assert result["accuracy"][0] == pytest.approx(result["accuracy"][1], abs=1e-6)
    assert [d.split("/")[-1] for d in result["devices"]] == ["device:CPU:0", "device:CPU:1"]


def test_averaging_every_three_rounds(child):
    result = child["freq3"]
    log = result["log"]
    # 7 rounds: averagings after rounds 3 and 6, and at the end of the epoch.
    assert [e["round"] for e in log] == [3, 6, 7]
    assert [e["step"] for e in log] == [6, 12, 14]
    assert [e["sync"] for e in log] == [1, 2, 3]
    assert result["steps"] == 7 and result["syncs"] == 3
    # Workers drift apart between averagings and are identical right after each one.
    assert min(result["before"]) > MIN_SPREAD
    assert result["after"] == [0.0, 0.0, 0.0]
    # The logged spread is that drift (float32 on device vs float64 here).
    assert [e["spread"] for e in log] == pytest.approx(result["before"], rel=1e-5)
    assert all(e["loss"] is not None and np.isfinite(e["loss"]) for e in log)
    # After fit the original model holds the average, BatchNorm statistics included.
    assert result["final_spread"] == 0.0
    assert result["model_vs_worker"] == 0.0
    assert result["moving_mean_change"] > MIN_SPREAD


def test_validation_history_and_tensorboard(child):
    result = child["freq3"]
    history, evaluated = result["history"], result["evaluate"]
    assert set(history) == {"loss", "accuracy", "val_loss", "val_accuracy"}
    assert history["val_loss"][0] == pytest.approx(evaluated["loss"], abs=1e-6)
    assert history["val_accuracy"][0] == pytest.approx(evaluated["accuracy"], abs=1e-6)
    steps = {tag: [step for step, _ in pairs] for tag, pairs in result["events"].items()}
    values = {tag: [value for _, value in pairs] for tag, pairs in result["events"].items()}
    assert steps["averaging/loss"] == steps["averaging/spread"] == [6, 12, 14]
    assert values["averaging/loss"] == pytest.approx([e["loss"] for e in result["log"]], rel=1e-6)
    assert values["averaging/spread"] == pytest.approx([e["spread"] for e in result["log"]], rel=1e-6)
    assert steps["epoch/val_loss"] == [0]
    assert values["epoch/val_loss"] == pytest.approx(history["val_loss"], rel=1e-6)


def test_optimizer_state_averaging(child):
    averaged, separate = child["adam_True"], child["adam_False"]
    assert averaged["optimizer_spread"] == 0.0
    assert separate["optimizer_spread"] > MIN_SPREAD  # each worker's Adam moments are its own
    assert averaged["weight_spread"] == 0.0 and separate["weight_spread"] == 0.0


def test_data_forms_give_the_same_training(child):
    # The same batches in the same order: identical weights (float32 rounding allowed).
    assert child["forms"] == pytest.approx(
        {"list": 0.0, "generator": 0.0, "tf.data": 0.0, "PyDataset": 0.0}, abs=1e-7
    )
    partial = child["partial"]
    assert partial["steps"] == 2
    assert any("left out 1 batch" in w for w in partial["warnings"])


def test_errors_that_need_devices(child):
    assert "setup_devices(3)" in child["too_many_workers"]
    assert "steps_per_epoch=3 is not a multiple of workers=2" in child["steps_not_multiple"]
    assert "Pass 2 or 4" in child["steps_not_multiple"]
    assert "1 batch(es)" in child["too_few_batches"]
    names = ["workers", "averaging_frequency", "prefetch_buffer"]
    assert [message.split(" ")[0] for message in child["early"]] == names


@pytest.mark.needs_data
def test_lenet_on_mnist_learns(child):
    if "lenet" not in child:
        pytest.skip("real MNIST not available: set MGTUTOR_DATA_DIR to the shared data folder")
    result = child["lenet"]
    # 1,536 images, 24 rounds of 2 x 32: chance is 0.1; measured 0.86-0.88 over three seeds.
    assert result["accuracy"] > 0.7
    assert result["steps"] == 24 and result["syncs"] == 8
    assert min(result["spread"]) > MIN_SPREAD


# --------------------------------------------------------------------------- this process


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"workers": 0}, "workers must be a whole number >= 1"),
        ({"workers": "2"}, "workers must be a whole number >= 1"),
        ({"workers": True}, "workers must be a whole number >= 1"),
        ({"averaging_frequency": 0}, "averaging_frequency must be a whole number >= 1"),
        ({"prefetch_buffer": 0}, "prefetch_buffer must be a whole number >= 1"),
        ({"average_optimizer_state": "yes"}, "average_optimizer_state must be True or False"),
    ],
)
def test_argument_errors(kwargs, message):
    from mgtutor.training.parameter_averaging import ParallelWrapper

    with pytest.raises(ValueError, match=message):
        ParallelWrapper(None, **kwargs)


def tiny_model(compile_it: bool = True):
    import keras

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2, activation="softmax")])
    if compile_it:
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss="categorical_crossentropy", jit_compile=False)
    return model


def batch(rows: int = 8, y_rows: int | None = None):
    rng = np.random.default_rng(rows)
    labels = rng.integers(0, 2, y_rows or rows)
    return rng.random((rows, 4), dtype=np.float32), np.eye(2, dtype=np.float32)[labels]


def endless():
    import tensorflow as tf

    return tf.data.Dataset.from_tensors(batch()).repeat()


def prefetch_threads() -> list[threading.Thread]:
    from mgtutor.training.worker_batches import PREFETCH_THREAD_NAME

    return [t for t in threading.enumerate() if t.name == PREFETCH_THREAD_NAME and t.is_alive()]


def test_model_errors():
    from mgtutor.training.parameter_averaging import ParallelWrapper

    with pytest.raises(ValueError, match=r"not compiled.*model.compile"):
        ParallelWrapper(tiny_model(compile_it=False), workers=1)
    with pytest.raises(TypeError, match="keras.Model"):
        ParallelWrapper("model", workers=1)


@pytest.mark.parametrize(
    ("make_data", "kwargs", "error", "message"),
    [
        (lambda: [], {}, ValueError, "yields 0 batch"),
        (lambda: iter([]), {}, ValueError, "yielded 0 batch"),
        (lambda: batch(), {"batch_size": 0}, ValueError, "batch_size must be a whole number"),
        (lambda: [batch()], {"batch_size": 4}, ValueError, "batch_size is for"),
        (lambda: batch()[0], {}, TypeError, "data must be"),
        (lambda: (batch()[0], batch(rows=7)[1]), {}, ValueError, "x has 8 examples but y has 7"),
        (lambda: (b for b in [batch()]), {"epochs": 2}, ValueError, "one-pass iterator"),
        (lambda: itertools.repeat(batch()), {"epochs": 0}, ValueError, "epochs must be"),
        (lambda: [batch()], {"verbose": 3}, ValueError, "verbose must be"),
        (lambda: [batch()], {"log_dir": 5}, TypeError, "log_dir must be"),
        (lambda: endless(), {}, ValueError, "never ends"),
    ],
)
def test_data_errors_before_any_step(make_data, kwargs, error, message):
    from mgtutor.training.parameter_averaging import ParallelWrapper

    model = tiny_model()
    initial = model.get_weights()
    wrapper = ParallelWrapper(model, workers=1)
    with pytest.raises(error, match=message):
        wrapper.fit(make_data(), **{"verbose": 0, **kwargs})
    assert wrapper.steps == 0
    assert all(np.array_equal(a, b) for a, b in zip(initial, model.get_weights(), strict=True))
    assert not prefetch_threads()


def test_producer_errors_reach_the_caller_and_stop_the_thread():
    from mgtutor.training.parameter_averaging import ParallelWrapper

    def failing():
        yield from (batch() for _ in range(3))
        raise OSError("corrupt record 3")

    wrapper = ParallelWrapper(tiny_model(), workers=1, averaging_frequency=1, prefetch_buffer=1)
    with pytest.raises(OSError, match="corrupt record 3"):
        wrapper.fit(failing(), verbose=0)
    assert wrapper.steps == 3  # the good batches trained first
    assert not prefetch_threads()
    with pytest.raises(ValueError, match=r"batch 2 has \[7, 8\] rows"):
        wrapper.fit([batch(), batch(), batch(8, y_rows=7)], verbose=0)
    assert not prefetch_threads()


def test_training_errors_stop_a_blocked_producer(capsys):
    from mgtutor.training.parameter_averaging import ParallelWrapper

    wrapper = ParallelWrapper(tiny_model(), workers=1, prefetch_buffer=2)
    history = wrapper.fit([batch(), batch()], verbose=2)
    assert "Epoch 1/1" in capsys.readouterr().out and len(history.history["loss"]) == 1
    # The model rejects these batches (3 features, not 4) while the producer, endless, sits
    # on a full queue: leaving fit must still stop it.
    import tensorflow as tf

    wrong = (np.zeros((8, 3), np.float32), np.zeros((8, 2), np.float32))
    with pytest.raises((ValueError, tf.errors.InvalidArgumentError), match="incompatible"):
        wrapper.fit(itertools.repeat(wrong), steps_per_epoch=50, verbose=0)
    assert not prefetch_threads()


def test_replica_spread():
    from mgtutor.training.parameter_averaging import replica_spread

    a, b = tiny_model(), tiny_model()
    assert replica_spread([a, b]) == 0.0
    b.set_weights([w + 0.25 * (i == 1) for i, w in enumerate(b.get_weights())])
    assert replica_spread([a, b, a]) == pytest.approx(0.25)
