"""The custom-loop Trainer: Keras fit's numbers on one device and under MirroredStrategy, resume, errors.

Most tests run in this process under the default strategy on a tiny model.
The MirroredStrategy test runs in one child process (devices are fixed per
process). Multi-worker training is tested in test_cluster.py.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from mgtutor.data_parallel import copy_model, max_weight_difference
from mgtutor.training.checkpoints import resume_point
from mgtutor.training.trainer import Trainer
from mgtutor.training.worker import is_chief, num_workers, weights_digest, worker_index
from tests.conftest import ROOT, run_child

# Measured 0.0 for both (the same float32 ops in the same order); the margin is for other CPUs.
WEIGHT_TOLERANCE = 1e-6
HISTORY_TOLERANCE = 1e-5


def _data(n: int, seed: int, sparse: bool = False) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.random((n, 8, 8, 3), dtype=np.float32)
    labels = rng.integers(0, 4, n)
    return x, (labels if sparse else np.eye(4, dtype=np.float32)[labels])


def _model(dropout: float = 0.0) -> keras.Model:
    keras.utils.set_random_seed(1)
    return keras.Sequential(
        [
            keras.Input((8, 8, 3)),
            keras.layers.Conv2D(4, 3, activation="relu"),
            keras.layers.Flatten(),
            *([keras.layers.Dropout(dropout)] if dropout else []),
            # The regularizer checks that model.losses enter the loss as fit's do.
            keras.layers.Dense(4, activation="softmax", kernel_regularizer=keras.regularizers.L2(1e-3)),
        ]
    )


def _assert_same_history(ours: dict, keras_fit: dict) -> None:
    assert sorted(ours) == sorted(keras_fit)
    for key, values in keras_fit.items():
        np.testing.assert_allclose(ours[key], values, rtol=0, atol=HISTORY_TOLERANCE, err_msg=key)


def test_matches_keras_fit_on_one_device():
    x, y = _data(96, 0)
    x_val, y_val = _data(37, 1)  # 37: the last validation batch is partial, padded with weight 0
    ours = _model()
    reference = copy_model(ours)
    reference.compile(
        optimizer=keras.optimizers.SGD(0.1), loss="categorical_crossentropy", metrics=["accuracy"]
    )
    expected = reference.fit(
        x, y, batch_size=16, epochs=2, shuffle=False, validation_data=(x_val, y_val), verbose=0
    )

    trainer = Trainer(ours, keras.optimizers.SGD(0.1), "categorical_crossentropy", ["accuracy"])
    history = trainer.fit(
        x, y, batch_size=16, epochs=2, shuffle=False, validation_data=(x_val, y_val), verbose=0
    )

    assert max_weight_difference(ours, reference) <= WEIGHT_TOLERANCE
    _assert_same_history(history.history, expected.history)
    assert history.epoch == [0, 1] and history.params["steps"] == 6
    assert history.resumed_from is None and history.steps_trained == 12
    evaluated = trainer.evaluate(x_val, y_val, batch_size=16)
    keras_evaluated = reference.evaluate(x_val, y_val, batch_size=16, verbose=0, return_dict=True)
    assert evaluated == pytest.approx(keras_evaluated, abs=HISTORY_TOLERANCE)
    assert is_chief(trainer.strategy) and num_workers(trainer.strategy) == 1
    assert worker_index(trainer.strategy) == 0


def test_sparse_labels_resolve_accuracy_like_compile():
    x, y = _data(64, 2, sparse=True)
    model = _model()
    trainer = Trainer(model, keras.optimizers.SGD(0.1), "sparse_categorical_crossentropy", ["accuracy"])
    trainer.fit(x, y, batch_size=16, epochs=1, verbose=0)
    assert isinstance(trainer.metrics[0], keras.metrics.SparseCategoricalAccuracy)
    logs = trainer.evaluate(x, y, batch_size=24)  # 64 = 2 full batches + 16 padded rows
    predicted = model.predict(x, verbose=0).argmax(axis=1)
    assert logs["accuracy"] == pytest.approx(float(np.mean(predicted == y)), abs=1e-6)


MIRRORED_CHILD = ROOT / "tests" / "unit" / "training" / "trainer_mirrored_child.py"


@pytest.mark.slow
def test_mirrored_strategy_matches_keras_fit_and_one_device():
    out = run_child(MIRRORED_CHILD, timeout=240)
    assert out["replicas"] == 2
    # Same replicas, same slices, same all-reduce: Keras fit and the loop agree (measured 0.0).
    assert out["vs_fit"] <= WEIGHT_TOLERANCE
    _assert_same_history(out["history"], out["expected"])
    # One device sums the same gradients in one go: float32 rounding only (measured 3e-8).
    assert out["vs_one_device"] <= WEIGHT_TOLERANCE
    _assert_same_history(out["history"], out["one_device"])
    assert "global batch 15" in out["errors"]["batch"] and "14 (7 per replica)" in out["errors"]["batch"]
    assert "strategy.scope()" in out["errors"]["scope"]
    assert "must run before anything else uses TensorFlow" in out["errors"]["late"]


class _Crash(keras.callbacks.Callback):
    """Raises after `at_step` steps of the run: the process 'dies' between two checkpoints."""

    def __init__(self, at_step: int) -> None:
        super().__init__()
        self.at_step, self.seen = at_step, 0

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        self.seen += 1
        if self.seen == self.at_step:
            raise KeyboardInterrupt("simulated kill")


def _resumable_run(folder, callbacks=()):
    model = _model(dropout=0.5)  # dropout: its random-generator state must be checkpointed too
    trainer = Trainer(model, keras.optimizers.RMSprop(1e-3), "categorical_crossentropy", ["accuracy"])
    x, y = _data(100, 3)  # 6 steps of 16 per epoch; 4 examples left out, different ones each epoch
    history = trainer.fit(
        x, y, batch_size=16, epochs=2, seed=7, callbacks=list(callbacks), verbose=0,
        checkpoint_dir=folder, checkpoint_every_steps=4,
    )  # fmt: skip
    return model, history


# Checkpoints at global steps 4, 6 (epoch end), 8: a kill at 5 loses step 5 (resumes in epoch 1
# after its batch 4), a kill at 11 loses steps 9-11 (resumes in epoch 2 after its batch 2).
@pytest.mark.parametrize(("kill_at", "saved"), [(5, (0, 4)), (11, (1, 2))])
def test_killed_run_resumes_from_last_checkpoint_to_identical_weights(tmp_path, kill_at, saved):
    uninterrupted, full = _resumable_run(tmp_path / "full")
    with pytest.raises(KeyboardInterrupt):
        _resumable_run(tmp_path / "killed", callbacks=[_Crash(at_step=kill_at)])
    assert resume_point(tmp_path / "killed") == saved

    resumed, history = _resumable_run(tmp_path / "killed")

    assert history.resumed_from == saved
    assert history.steps_trained == 12 - (saved[0] * 6 + saved[1])
    assert max_weight_difference(resumed, uninterrupted) == 0.0  # measured: bit-identical
    assert weights_digest(resumed) == weights_digest(uninterrupted)
    _assert_same_history(history.history, full.history)

    # Run once more: nothing left to train, the final weights are restored.
    again, finished = _resumable_run(tmp_path / "killed")
    assert finished.steps_trained == 0 and finished.resumed_from == (2, 0)
    assert max_weight_difference(again, uninterrupted) == 0.0
    assert finished.history == history.history


def test_checkpoint_of_another_run_is_refused_before_training(tmp_path):
    x, y = _data(64, 4)
    first = Trainer(_model(), keras.optimizers.SGD(0.1), "categorical_crossentropy")
    first.fit(x, y, batch_size=16, verbose=0, checkpoint_dir=tmp_path)
    model = _model()
    before = model.get_weights()
    trainer = Trainer(model, keras.optimizers.SGD(0.1), "categorical_crossentropy")
    with pytest.raises(ValueError, match="batch_size: checkpoint 16, now 32"):
        trainer.fit(x, y, batch_size=32, verbose=0, checkpoint_dir=tmp_path)
    assert max(np.abs(a - b).max() for a, b in zip(before, model.get_weights(), strict=True)) == 0.0


class _Recorder(keras.callbacks.Callback):
    def __init__(self, stop_after_epoch: int) -> None:
        super().__init__()
        self.calls: list[str] = []
        self.stop_after_epoch = stop_after_epoch

    def on_train_begin(self, logs=None):
        self.calls.append("train_begin")

    def on_epoch_begin(self, epoch, logs=None):
        self.calls.append(f"epoch_begin {epoch}")

    def on_train_batch_end(self, batch, logs=None):
        self.calls.append(f"batch_end {batch} loss={'loss' in logs}")

    def on_epoch_end(self, epoch, logs=None):
        self.calls.append(f"epoch_end {epoch} {sorted(logs)}")
        if epoch == self.stop_after_epoch:
            self.model.stop_training = True  # as EarlyStopping does

    def on_train_end(self, logs=None):
        self.calls.append("train_end")


def test_callbacks_progress_bar_and_tensorboard(tmp_path, capsys):
    x, y = _data(48, 5)
    recorder = _Recorder(stop_after_epoch=1)
    trainer = Trainer(_model(), keras.optimizers.SGD(0.1), "categorical_crossentropy", ["accuracy"])
    history = trainer.fit(
        x, y, batch_size=16, epochs=5, validation_data=(x[:20], y[:20]), callbacks=[recorder],
        verbose=2, log_dir=tmp_path / "logs",
    )  # fmt: skip

    assert history.epoch == [0, 1]  # stopped by the callback after epoch 2 of 5
    assert recorder.calls[:5] == [
        "train_begin", "epoch_begin 0", "batch_end 0 loss=True", "batch_end 1 loss=True",
        "batch_end 2 loss=True",
    ]  # fmt: skip
    assert recorder.calls[5] == "epoch_end 0 ['accuracy', 'loss', 'val_accuracy', 'val_loss']"
    assert recorder.calls[-1] == "train_end"
    assert trainer.model.history is history
    printed = capsys.readouterr().out
    assert "Epoch 1/5" in printed and "Epoch 2/5" in printed and "Epoch 3/5" not in printed
    assert "val_loss:" in printed

    for folder, expected in (("train", {"epoch_loss", "epoch_accuracy"}), ("validation", {"epoch_loss"})):
        files = list((tmp_path / "logs" / folder).glob("events.out.tfevents.*"))
        tags = set()
        for record in tf.data.TFRecordDataset([str(f) for f in files]):
            event = tf.compat.v1.Event.FromString(record.numpy())
            tags.update(value.tag for value in event.summary.value)
        assert expected <= tags, (folder, tags)


def test_rows_fed_are_the_rows_fit_trains_on():
    x, y = _data(42, 8)  # 42 = 5 full batches of 8 and 2 rows no step trains
    shuffled, in_order = _model(), _model()
    Trainer(shuffled, keras.optimizers.SGD(0.1), "categorical_crossentropy").fit(
        x, y, batch_size=8, epochs=2, seed=3, verbose=0
    )
    trainer = Trainer(in_order, keras.optimizers.SGD(0.1), "categorical_crossentropy")
    rows = trainer.rows_fed(42, 8, epoch=1, seed=3)
    assert [len(step) for step in rows] == [8] * 5 and len(set(sum(rows, []))) == 40
    assert rows != trainer.rows_fed(42, 8, epoch=0, seed=3)
    # The same start trained unshuffled on epoch 0's rows, then epoch 1's, in rows_fed's order: SGD
    # keeps no state between the two calls, so the weights must be fit's.
    for epoch in (0, 1):
        picked = np.concatenate(trainer.rows_fed(42, 8, epoch=epoch, seed=3))
        trainer.fit(x[picked], y[picked], batch_size=8, shuffle=False, verbose=0)
    assert max_weight_difference(shuffled, in_order) <= WEIGHT_TOLERANCE
    assert trainer.rows_fed(10, 4, shuffle=False) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    with pytest.raises(ValueError, match="batch_size=16 exceeds num_examples=10: no full batch"):
        trainer.rows_fed(10, 16)
    with pytest.raises(ValueError, match="epoch must be a whole number >= 0"):
        trainer.rows_fed(10, 4, epoch=-1)


def test_bad_arguments_are_refused_with_the_fix():
    x, y = _data(32, 6)
    model = _model()
    trainer = Trainer(model, keras.optimizers.SGD(0.1), "categorical_crossentropy")
    cases = [
        (dict(batch_size=64), "batch_size=64 is larger than the 32 training examples"),
        (dict(batch_size=8, steps_per_epoch=5), "steps_per_epoch <= 4"),
        (dict(batch_size=8, checkpoint_every_steps=2), "needs checkpoint_dir"),
        (dict(batch_size=8, validation_data=x), "validation_data must be a tuple"),
        (dict(batch_size=8, verbose=3), "verbose must be 'auto', 0, 1 or 2"),
        (dict(batch_size=0), "batch_size must be a whole number >= 1"),
    ]
    for kwargs, message in cases:
        with pytest.raises((ValueError, TypeError), match=message.replace("(", r"\(")):
            trainer.fit(x, y, **kwargs)
    with pytest.raises(ValueError, match="BackupAndRestore"):
        trainer.fit(x, y, batch_size=8, callbacks=[keras.callbacks.BackupAndRestore("unused")])
    with pytest.raises(TypeError, match="NumPy array"):
        trainer.fit(list(x), y, batch_size=8)
    with pytest.raises(TypeError, match="optimizer must be a keras.optimizers.Optimizer"):
        Trainer(model, "sgd", "mse")
    with pytest.raises(ValueError, match="unknown loss 'nope'"):
        Trainer(model, keras.optimizers.SGD(0.1), "nope")
    with pytest.raises(TypeError, match="metrics must be a list"):
        Trainer(model, keras.optimizers.SGD(0.1), "mse", "accuracy")
    assert trainer.optimizer.iterations.numpy() == 0  # nothing trained by any refused call


def test_multi_worker_strategy_refuses_a_bad_tf_config(monkeypatch):
    from mgtutor.training.worker import multi_worker_strategy

    for raw in ("{not json", '{"cluster": {"worker": ["localhost:1"]}}', "[1, 2]"):
        monkeypatch.setenv("TF_CONFIG", raw)
        with pytest.raises(ValueError, match="TF_CONFIG is not valid"):
            multi_worker_strategy()
