"""`Trainer`: one ``strategy.run`` loop for one device, N devices and N machines, with ``fit``'s comforts.

Keras 3's ``fit`` fails under ``MultiWorkerMirroredStrategy`` (keras#20585), so this is the loop
TensorFlow's multi-worker tutorial writes by hand (notebook 10 walks through its step): each
epoch's order is a function of (seed, epoch), only full global batches are trained, the loss is
divided by the global batch, and checkpoints (model, optimizer, metric and random-generator
variables, plus the position) let a killed job resume to the same weights. Importing it starts
nothing, so `multi_worker_strategy` can still be the first thing to touch TensorFlow.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from mgtutor._checks import check_whole
from mgtutor.parallel import check_batch_divisible
from mgtutor.worker import is_chief, num_workers, worker_index

CHECKPOINT_NAME = "ckpt"
KEEP_CHECKPOINTS = 2
_FORMAT = 1
_ACCURACY_NAMES = ("accuracy", "acc")


# --------------------------------------------------------------------------- strategies


def multi_worker_strategy() -> tf.distribute.MultiWorkerMirroredStrategy:
    """A ``MultiWorkerMirroredStrategy`` for this worker, configured from ``TF_CONFIG``.

    Call it first, before anything else uses TensorFlow (`mgtutor.setup_devices`
    included): it starts the collective runtime, which TF can only configure at
    start-up. Each worker trains on all its GPUs, or on ONE CPU device: the
    strategy does not use logical CPU devices. Without ``TF_CONFIG`` it is a
    one-worker strategy, so the same script also runs alone.
    """
    raw = os.environ.get("TF_CONFIG")
    if raw:
        try:
            config = json.loads(raw)
        except ValueError:
            config = None
        task = config.get("task") if isinstance(config, dict) else None
        if not (isinstance(task, dict) and "index" in task and isinstance(config.get("cluster"), dict)):
            raise ValueError(
                f"TF_CONFIG is not valid: {raw!r}. It must be JSON like "
                '{"cluster": {"worker": ["host1:port", "host2:port"]}, "task": {"type": "worker", '
                '"index": 0}}; mgtutor.cluster.tf_config(ports, index) writes it.'
            )
    try:
        return tf.distribute.MultiWorkerMirroredStrategy()
    except RuntimeError as err:
        if "startup" not in str(err):
            raise
        raise RuntimeError(
            "multi_worker_strategy() must run before anything else uses TensorFlow in this "
            "process (setup_devices, tensors, models, tf.config.list_logical_devices...): TF "
            "configures its collective ops only at start-up. Move it to the top of the worker "
            "script. Note that on a CPU each worker trains on one device whatever "
            "setup_devices() says; on a GPU machine it uses every GPU of the worker."
        ) from err


def weights_digest(model: keras.Model) -> str:
    """A short SHA-256 of all of `model`'s weights: equal digests mean bit-identical weights."""
    digest = hashlib.sha256()
    for value in model.get_weights():
        array = np.ascontiguousarray(value)
        digest.update(f"{array.dtype}{array.shape}".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()[:16]


def _strategy_of(variable: Any) -> Any:
    """The strategy a (Keras) variable was created under, or None for a plain variable."""
    value = getattr(variable, "value", variable)
    if isinstance(value, tf.distribute.DistributedValues):
        return value.distribute_strategy
    return None


# --------------------------------------------------------------------------- checks


def _arrays(x: Any, y: Any, name: str) -> tuple[np.ndarray, np.ndarray]:
    for part, value in (("x", x), ("y", y)):
        if not isinstance(value, np.ndarray):
            raise TypeError(
                f"{name}: {part} must be a NumPy array, got {type(value).__name__}. The trainer "
                "replays an exact batch order, which needs the data in memory (np.asarray(...))."
            )
    if x.ndim == 0 or y.ndim == 0 or len(x) != len(y):
        raise ValueError(
            f"{name}: x and y must hold as many examples each; got shapes {x.shape} and {y.shape}."
        )
    if len(x) == 0:
        raise ValueError(f"{name}: x is empty, there is nothing to train on.")
    return x, y


def _auto_verbose() -> int:
    # A live bar needs a terminal or a notebook; in a log (a launched worker) one line per epoch reads better.
    return 1 if sys.stdout.isatty() or "ipykernel" in sys.modules else 2


def _check_verbose(verbose: Any) -> int:
    if verbose == "auto":
        return _auto_verbose()
    if isinstance(verbose, bool) or verbose not in (0, 1, 2):
        raise ValueError(f"verbose must be 'auto', 0, 1 or 2, got {verbose!r}.")
    return int(verbose)


def _folder(path: Any, name: str) -> Path:
    if isinstance(path, bytes) or not isinstance(path, (str, os.PathLike)) or str(path) == "":
        raise TypeError(f"{name} must be a folder path (str or pathlib.Path), got {path!r}.")
    folder = Path(os.fspath(path)).expanduser()
    if folder.exists() and not folder.is_dir():
        raise NotADirectoryError(f"{name} {str(folder)!r} is a file; give a folder (created if missing).")
    return folder


# --------------------------------------------------------------------------- loss and metrics


class _PerExampleLoss(keras.losses.Loss):
    """A loss function as a Keras Loss that returns one value per example (no reduction)."""

    def __init__(self, fn: Callable[..., Any], name: str) -> None:
        super().__init__(name=name, reduction=None)
        self.fn = fn

    def call(self, y_true: Any, y_pred: Any) -> Any:
        # As Keras does for loss functions: labels (b,) against predictions (b, 1).
        if len(y_true.shape) == len(y_pred.shape) - 1 and y_pred.shape[-1] == 1:
            y_true = tf.expand_dims(y_true, -1)
        return self.fn(y_true, y_pred)


def _per_example_loss(loss: Any) -> keras.losses.Loss:
    """`loss` (a name, a Keras Loss or a function) as a Loss with reduction None."""
    if isinstance(loss, str):
        try:
            resolved = keras.losses.get(loss)
        except ValueError as err:
            raise ValueError(f"loss: unknown loss {loss!r}; e.g. 'categorical_crossentropy'.") from err
        if isinstance(resolved, keras.losses.Loss):
            loss = resolved
        else:
            return _PerExampleLoss(resolved, loss)
    if isinstance(loss, keras.losses.Loss):
        try:
            return type(loss).from_config({**loss.get_config(), "reduction": None})
        except (TypeError, ValueError) as err:
            raise ValueError(
                f"loss: {type(loss).__name__} cannot be rebuilt without reduction ({err}); pass its "
                "per-example function instead."
            ) from err
    if callable(loss):
        return _PerExampleLoss(loss, getattr(loss, "__name__", "loss"))
    raise TypeError(f"loss must be a loss name, a keras.losses.Loss or a function, got {loss!r}.")


def _make_metric(spec: Any, y: np.ndarray, output_shape: tuple) -> keras.metrics.Metric:
    """A fresh metric for `spec`, resolving 'accuracy' from the label and output shapes as compile does."""
    if isinstance(spec, str) and spec.lower() in _ACCURACY_NAMES:
        if output_shape[-1] == 1:
            return keras.metrics.BinaryAccuracy(name=spec)
        if y.ndim < len(output_shape) or (y.shape[-1] == 1 and output_shape[-1] > 1):
            return keras.metrics.SparseCategoricalAccuracy(name=spec)
        return keras.metrics.CategoricalAccuracy(name=spec)
    if isinstance(spec, keras.metrics.Metric):
        # Rebuilt so that its variables are created under the strategy's scope.
        return type(spec).from_config(spec.get_config())
    try:
        resolved = keras.metrics.get(spec)
    except ValueError as err:
        raise ValueError(f"metrics: unknown metric {spec!r}; e.g. 'accuracy' or 'mae'.") from err
    if isinstance(resolved, keras.metrics.Metric):
        return resolved
    return keras.metrics.MeanMetricWrapper(resolved, name=spec if isinstance(spec, str) else None)


# --------------------------------------------------------------------------- data


def _epoch_batches(n: int, batch: int, steps: int, seed: int, shuffle: bool, first: int, last: int) -> Any:
    """Row indices of each global batch of epochs first..last-1, in their (seed, epoch) order."""

    def one_epoch(epoch: Any) -> Any:
        rows = tf.range(n, dtype=tf.int64)
        if shuffle:
            # Stateless: a restarted process shuffles epoch e exactly as the first one did.
            rows = tf.random.experimental.stateless_shuffle(
                rows, seed=tf.stack([tf.constant(seed, tf.int64), epoch])
            )
        return tf.data.Dataset.from_tensor_slices(rows).batch(batch, drop_remainder=True).take(steps)

    return tf.data.Dataset.range(first, last).flat_map(one_epoch)


def _distributed(strategy: Any, batches: Any, arrays: tuple, global_batch: int) -> Any:
    """Feed each replica its contiguous slice of every global batch of row indices."""

    def dataset_fn(context: tf.distribute.InputContext) -> Any:
        per_replica = context.get_per_replica_batch_size(global_batch)
        local = context.num_replicas_in_sync // context.num_input_pipelines  # replicas this pipeline feeds
        start = context.input_pipeline_id * local * per_replica

        def own_slices(rows: Any) -> Any:
            return tf.reshape(rows[start : start + local * per_replica], [local, per_replica])

        data = tf.data.Dataset.from_tensors(arrays).repeat()
        # One element per local replica, in replica order: the strategy hands them out round-robin.
        rows = batches.map(own_slices).unbatch()
        gathered = tf.data.Dataset.zip((rows, data)).map(
            lambda index, values: tuple(tf.gather(value, index) for value in values)
        )
        return gathered.prefetch(tf.data.AUTOTUNE)

    return strategy.distribute_datasets_from_function(dataset_fn)


def _padded_rows(n: int, batch: int) -> tuple[np.ndarray, np.ndarray]:
    """Row indices 0..n-1 padded to whole batches (padding repeats row 0), and 1/0 weights."""
    total = math.ceil(n / batch) * batch
    rows = np.arange(total) % n
    weights = (np.arange(total) < n).astype(np.float32)
    return rows, weights


# --------------------------------------------------------------------------- checkpoint state


class _Progress(tf.train.experimental.PythonState):
    """Where the run is (epoch, batch), the history so far, and the settings it was started with."""

    def __init__(self) -> None:
        self.state: dict[str, Any] = {"format": _FORMAT, "epoch": 0, "step": 0, "history": []}

    def serialize(self) -> str:
        return json.dumps(self.state)

    def deserialize(self, string_value: Any) -> None:
        self.state = json.loads(string_value.decode() if isinstance(string_value, bytes) else string_value)


def _read_progress(path: str) -> dict[str, Any]:
    reader = tf.train.load_checkpoint(path)
    raw = reader.get_tensor("progress/.ATTRIBUTES/py_state")
    return json.loads(raw.decode() if isinstance(raw, bytes) else raw)


def _check_structure(path: str, groups: dict[str, list]) -> None:
    """Refuse, before restoring anything, a checkpoint of another model."""
    shapes = dict(tf.train.list_variables(path))
    for group, variables in groups.items():
        saved = {k: v for k, v in shapes.items() if k.startswith(f"{group}/")}
        if len(saved) != len(variables):
            raise ValueError(
                f"the checkpoint {path!r} holds {len(saved)} {group} variables, this trainer has "
                f"{len(variables)}: it was saved from another model, optimizer or metrics. Build "
                "the same ones, or start in a fresh checkpoint_dir."
            )
        for i, variable in enumerate(variables):
            shape = saved.get(f"{group}/{i}/.ATTRIBUTES/VARIABLE_VALUE")
            if shape is not None and tuple(shape) != tuple(variable.shape):
                raise ValueError(
                    f"the checkpoint {path!r} has {group} variable {i} ({getattr(variable, 'path', '?')}) "
                    f"of shape {tuple(shape)}, this one is {tuple(variable.shape)}: another model. Build "
                    "the same model, or start in a fresh checkpoint_dir."
                )


class _Checkpointer:
    """Saves on every worker (chief into `folder`, others into a temp folder), restores the latest."""

    def __init__(self, strategy: Any, folder: Path, groups: dict[str, list], progress: _Progress) -> None:
        self.folder = folder
        self.chief = is_chief(strategy)
        self.checkpoint = tf.train.Checkpoint(progress=progress, **{k: list(v) for k, v in groups.items()})
        self.groups = groups
        # Non-chief workers must still save (reading summed metric variables is a collective
        # op every worker joins), but into a folder of their own, deleted right after.
        self.write_dir = folder if self.chief else folder / f".worker-{worker_index(strategy)}-tmp"
        self.manager: Any = None
        self.restored = False

    def latest(self) -> str | None:
        return tf.train.latest_checkpoint(str(self.folder)) if self.folder.is_dir() else None

    def restore(self, path: str) -> None:
        _check_structure(path, self.groups)
        self.checkpoint.restore(path).assert_existing_objects_matched()
        self.restored = True

    def save(self, global_step: int) -> str:
        if not self.chief:
            shutil.rmtree(self.write_dir, ignore_errors=True)  # a killed worker's leftovers
        if self.manager is None:
            self.write_dir.mkdir(parents=True, exist_ok=True)
            self.manager = tf.train.CheckpointManager(
                self.checkpoint, str(self.write_dir), KEEP_CHECKPOINTS, checkpoint_name=CHECKPOINT_NAME
            )
        path = self.manager.save(checkpoint_number=global_step)
        if not self.chief:
            shutil.rmtree(self.write_dir, ignore_errors=True)
        return path


# --------------------------------------------------------------------------- fit's plumbing


@dataclass(frozen=True)
class _Plan:
    """fit's arguments, checked."""

    x: np.ndarray
    y: np.ndarray
    batch_size: int
    epochs: int
    steps: int
    validation: tuple[np.ndarray, np.ndarray, int] | None
    shuffle: bool
    seed: int
    callbacks: list
    verbose: int
    checkpoint_dir: Path | None
    checkpoint_every: int | None
    log_dir: Path | None
    settings: dict[str, Any]


class _EpochSummaries:
    """Epoch scalars for TensorBoard, laid out as Keras' TensorBoard callback does (train/, validation/)."""

    def __init__(self, log_dir: Path) -> None:
        self.writers = {
            "": tf.summary.create_file_writer(str(log_dir / "train")),
            "val_": tf.summary.create_file_writer(str(log_dir / "validation")),
        }

    def write(self, epoch: int, logs: dict[str, float]) -> None:
        for prefix, writer in self.writers.items():
            with writer.as_default(step=epoch):
                for key, value in logs.items():
                    if key.startswith("val_") == (prefix == "val_"):
                        tf.summary.scalar(f"epoch_{key[len(prefix):]}", value)
            writer.flush()

    def close(self) -> None:
        for writer in self.writers.values():
            writer.close()


# --------------------------------------------------------------------------- the trainer


class Trainer:
    """Train a Keras 3 model with a custom loop under any ``tf.distribute`` strategy.

    Create `model` and `optimizer` inside ``with strategy.scope():`` (its
    variables must be mirrored before training starts), then::

        trainer = Trainer(model, optimizer, "categorical_crossentropy", ["accuracy"], strategy=strategy)
        history = trainer.fit(x, y, batch_size=64, epochs=2, validation_data=(x_val, y_val))

    `strategy` defaults to the one the model was built under (the default
    strategy for a plain model). `loss` is a loss name, a ``keras.losses.Loss``
    or a function ``(y_true, y_pred) -> per-example losses``; `metrics` are
    metric names (``"accuracy"`` resolved as ``compile`` does) or metrics,
    rebuilt under the strategy's scope (read them from ``trainer.metrics``).
    In a multi-worker job every worker runs the same script, so the same calls.

    BatchNormalization: each replica (on every worker) updates its own copy of
    the moving statistics from its own slice of the batch. The trainer sets
    the copies to their mean at each epoch end (before validation, callbacks
    and the checkpoint) and before every mid-epoch checkpoint, so there is one
    set to save and a resumed run matches an uninterrupted one. Training still
    normalises each replica's slice on its own; to train exactly as one device
    does with the global batch, build the model with
    ``BatchNormalization(synchronized=True)`` (`mgtutor.sync_batchnorm`).
    """

    def __init__(
        self,
        model: keras.Model,
        optimizer: keras.optimizers.Optimizer,
        loss: Any,
        metrics: Sequence[Any] = (),
        *,
        strategy: Any = None,
    ) -> None:
        if not isinstance(model, keras.Model):
            raise TypeError(f"model must be a keras.Model, got {type(model).__name__}.")
        if not model.built or not model.trainable_variables:
            raise ValueError(
                f"model {model.name!r} is not built (or has nothing to train). Build it first: start "
                "it with keras.Input(shape=...) or call model.build(input_shape), inside strategy.scope()."
            )
        if not isinstance(optimizer, keras.optimizers.Optimizer):
            raise TypeError(
                f"optimizer must be a keras.optimizers.Optimizer instance (e.g. keras.optimizers.SGD(0.01)), "
                f"got {optimizer!r}. Create it inside strategy.scope(), next to the model."
            )
        if isinstance(metrics, (str, keras.metrics.Metric)) or not isinstance(metrics, Sequence):
            raise TypeError(f"metrics must be a list such as ['accuracy'], got {metrics!r}.")
        self.loss = _per_example_loss(loss)
        built_under = _strategy_of(model.trainable_variables[0])
        if strategy is None:
            strategy = built_under or tf.distribute.get_strategy()
        elif not callable(getattr(strategy, "scope", None)) or not hasattr(strategy, "run"):
            raise TypeError(f"strategy must be a tf.distribute strategy or None, got {strategy!r}.")
        default = not tf.distribute.has_strategy() and strategy is tf.distribute.get_strategy()
        for what, variable in (("model", model.trainable_variables[0]), ("optimizer", optimizer.iterations)):
            under = _strategy_of(variable)
            if under is not strategy and not (under is None and default):
                raise ValueError(
                    f"the {what} was not created under this strategy's scope, so its variables are "
                    f"not mirrored on the strategy's {strategy.num_replicas_in_sync} replica(s). Create "
                    "both inside it:\n    with strategy.scope():\n        model = build_...(...)\n"
                    "        optimizer = keras.optimizers....(...)\nthen pass the same strategy."
                )
        self.model = model
        self.optimizer = optimizer
        self.strategy = strategy
        self._metric_specs = list(metrics)
        self.metrics: list[keras.metrics.Metric] = []
        self._loss_tracker: keras.metrics.Metric | None = None
        self.history: keras.callbacks.History | None = None
        self._test_step: Callable[[Any], dict[str, Any]] | None = None
        self._vote: Callable[[Any], Any] | None = None

    # -- facts

    @property
    def num_replicas(self) -> int:
        return int(self.strategy.num_replicas_in_sync)

    @property
    def is_chief(self) -> bool:
        return is_chief(self.strategy)

    @property
    def num_workers(self) -> int:
        return num_workers(self.strategy)

    # -- building blocks

    def _build_metrics(self, x: np.ndarray, y: np.ndarray) -> None:
        if self._loss_tracker is not None:
            return
        outputs = getattr(self.model, "outputs", None)  # a subclassed model has none: ask it
        output_shape = tuple(outputs[0].shape) if outputs else tuple(self.model(x[:1]).shape)
        with self.strategy.scope():
            self._loss_tracker = keras.metrics.Mean(name="loss")
            self.metrics = [_make_metric(spec, y, output_shape) for spec in self._metric_specs]
            if not self.optimizer.built:
                self.optimizer.build(self.model.trainable_variables)

    def _all_metrics(self) -> list[keras.metrics.Metric]:
        return [self._loss_tracker, *self.metrics]

    def _reset_metrics(self) -> None:
        for metric in self._all_metrics():
            metric.reset_state()

    def _results(self) -> dict[str, Any]:
        # Read in cross-replica context: the per-replica sums are added up (across workers too).
        return {metric.name: metric.result() for metric in self._all_metrics()}

    def _regularization(self) -> Any:
        losses = self.model.losses
        return tf.add_n([tf.cast(v, tf.float32) for v in losses]) if losses else tf.constant(0.0)

    def _per_example(self, y: Any, prediction: Any) -> Any:
        values = tf.cast(self.loss(y, prediction), tf.float32)
        if values.shape.rank is not None and values.shape.rank > 1:  # Keras averages the other axes
            values = tf.reduce_mean(values, axis=list(range(1, values.shape.rank)))
        return values

    def _train_function(self, global_batch: int) -> Callable[[Any], dict[str, Any]]:
        model, optimizer = self.model, self.optimizer

        def replica_step(x: Any, y: Any) -> None:
            with tf.GradientTape() as tape:
                prediction = model(x, training=True)
                per_example = self._per_example(y, prediction)
                regularization = self._regularization()
                # Divide by the GLOBAL batch: summing the replicas' gradients then gives the
                # gradient of the global-batch mean, exactly as on one device.
                loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
                loss += tf.nn.scale_regularization_loss(regularization)
                scaled = optimizer.scale_loss(loss)  # a LossScaleOptimizer's factor (else unchanged)
            gradients = tape.gradient(scaled, model.trainable_variables)
            # apply_gradients sums the replicas' gradients (an all-reduce) before updating.
            optimizer.apply_gradients(zip(gradients, model.trainable_variables, strict=True))
            local = tf.cast(tf.shape(per_example)[0], tf.float32)
            # What fit logs: this replica's mean loss, weighted by its number of examples.
            self._loss_tracker.update_state(tf.reduce_sum(per_example) / local + regularization, local)
            for metric in self.metrics:
                metric.update_state(y, prediction)

        @tf.function
        def train_step(iterator: Any) -> dict[str, Any]:
            x, y = next(iterator)
            self.strategy.run(replica_step, args=(x, y))
            return self._results()

        return train_step

    def _test_function(self) -> Callable[[Any], dict[str, Any]]:
        model = self.model

        def replica_step(x: Any, y: Any, weight: Any) -> None:
            prediction = model(x, training=False)
            per_example = self._per_example(y, prediction)
            count = tf.reduce_sum(weight)
            mean = tf.math.divide_no_nan(tf.reduce_sum(per_example * weight), count)
            self._loss_tracker.update_state(mean + self._regularization(), count)
            for metric in self.metrics:
                metric.update_state(y, prediction, sample_weight=weight)

        @tf.function
        def test_step(iterator: Any) -> dict[str, Any]:
            x, y, weight = next(iterator)
            self.strategy.run(replica_step, args=(x, y, weight))
            return self._results()

        return test_step

    def _average_statistics(self) -> None:
        """Every replica's BatchNormalization statistics set to their mean (`mgtutor.batchnorm`).

        A collective under a multi-worker strategy: every worker reaches it at
        the same point of the same loop. A no-op on one replica.
        """
        if self.num_replicas > 1:
            from mgtutor.batchnorm import average_replica_copies

            average_replica_copies(self.model)

    def _any_worker(self, flag: bool) -> bool:
        """True if `flag` is True on any worker: a stop decided on one worker must stop all of them."""
        if self.num_workers == 1:
            return flag
        if self._vote is None:
            strategy = self.strategy

            @tf.function  # eager collectives are slow and warn
            def vote(value: Any) -> Any:
                votes = strategy.run(tf.identity, args=(value,))
                return strategy.reduce(tf.distribute.ReduceOp.SUM, votes, axis=None)

            self._vote = vote
        return bool(self._vote(tf.constant(1.0 if flag else 0.0)) > 0)

    # -- evaluation

    def _validation(self, x: np.ndarray, y: np.ndarray, batch_size: int) -> tuple[Any, int]:
        """A distributed dataset over all of (x, y) and its number of steps."""
        rows, weights = _padded_rows(len(x), batch_size)
        arrays = (x[rows], y[rows], weights)  # at most batch_size - 1 padded rows, weighted 0
        batches = tf.data.Dataset.range(len(rows)).batch(batch_size)
        return _distributed(self.strategy, batches, arrays, batch_size), len(rows) // batch_size

    def _evaluate(self, dataset: Any, steps: int, callbacks: Any = None) -> dict[str, float]:
        if self._test_step is None:  # traced once per trainer, not once per epoch
            self._test_step = self._test_function()
        iterator = iter(dataset)
        self._reset_metrics()
        if callbacks is not None:
            callbacks.on_test_begin()
        logs: dict[str, float] = {}
        for step in range(steps):
            if callbacks is not None:
                callbacks.on_test_batch_begin(step)
            logs = {k: float(v) for k, v in self._test_step(iterator).items()}
            if callbacks is not None:
                callbacks.on_test_batch_end(step, logs)
        if callbacks is not None:
            callbacks.on_test_end(logs)
        return logs

    def evaluate(self, x: np.ndarray, y: np.ndarray, *, batch_size: int) -> dict[str, float]:
        """Loss and metrics over all of (x, y), every example counted once (the last batch padded).

        Under a multi-worker strategy every worker makes the call (the sums are collective).
        """
        x, y = _arrays(x, y, "evaluate")
        batch_size = check_whole("batch_size", batch_size, 1)
        check_batch_divisible(batch_size, self.num_replicas)
        self._build_metrics(x, y)
        return self._evaluate(*self._validation(x, y, batch_size))

    # -- training

    def fit(
        self,
        x: np.ndarray,
        y: np.ndarray,
        *,
        batch_size: int,
        epochs: int = 1,
        steps_per_epoch: int | None = None,
        validation_data: tuple[np.ndarray, np.ndarray] | None = None,
        validation_batch_size: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        callbacks: Sequence[keras.callbacks.Callback] | None = None,
        verbose: int | str = "auto",
        checkpoint_dir: str | os.PathLike | None = None,
        checkpoint_every_steps: int | None = None,
        log_dir: str | os.PathLike | None = None,
    ) -> keras.callbacks.History:
        """Train for `epochs` epochs of full global batches of `batch_size`; returns the History.

        Every worker of a multi-worker job makes the same call. An epoch is
        ``len(x) // batch_size`` steps (fewer with `steps_per_epoch`), in the
        order of `seed` and the epoch (``shuffle=False``: rows in order).
        `validation_data` is evaluated after each epoch, every example once.
        `callbacks` get Keras' hooks with ``fit``'s logs (identical on every
        worker); the progress bar (`verbose` 1: a bar, 2: a line per epoch,
        'auto': a bar in a terminal or notebook, else lines) shows on the chief
        only. With `checkpoint_dir` the state is saved every
        `checkpoint_every_steps` steps and at each epoch end, and a call that
        finds a checkpoint there resumes from it, training only the steps
        left: ``history.resumed_from`` is (epoch, batch) or None, and
        ``history.steps_trained`` the steps this call ran. The History covers
        the whole run, epochs trained before a restart included. `log_dir`
        gets TensorBoard epoch scalars (chief only).

        ``model.stop_training`` set by a callback ends the epoch; at epoch ends
        the workers vote, so one worker's stop stops all. A callback that stops
        mid-epoch must decide from the logs (identical on every worker), or the
        other workers would wait for it. File-writing callbacks (ModelCheckpoint,
        CSVLogger) belong on the chief only (``[...] if trainer.is_chief else []``).
        """
        plan = self._plan(
            x, y, batch_size, epochs, steps_per_epoch, validation_data, validation_batch_size,
            shuffle, seed, callbacks, verbose, checkpoint_dir, checkpoint_every_steps, log_dir,
        )  # fmt: skip
        say = print if (plan.verbose and self.is_chief) else (lambda *_: None)
        self._build_metrics(plan.x, plan.y)
        progress, checkpointer = self._start(plan, say)
        state = progress.state
        resumed_from = (state["epoch"], state["step"]) if checkpointer and checkpointer.restored else None

        history = keras.callbacks.History()
        for logs in state["history"]:  # epochs trained before a restart
            for key, value in logs.items():
                history.history.setdefault(key, []).append(value)
        callback_list = keras.callbacks.CallbackList(
            [*plan.callbacks, history],
            add_progbar=bool(plan.verbose and self.is_chief),
            model=self.model,
            verbose=plan.verbose,
            epochs=plan.epochs,
            steps=plan.steps,
        )
        summaries = _EpochSummaries(plan.log_dir) if plan.log_dir is not None and self.is_chief else None
        trained = 0
        try:
            if state["epoch"] < plan.epochs and not state.get("stopped", False):
                trained = self._train(plan, state, checkpointer, callback_list, summaries, say)
            else:
                say(f"Trainer: the run in {plan.checkpoint_dir} already finished; its weights are restored.")
        finally:
            if summaries is not None:
                summaries.close()

        history.epoch = list(range(len(state["history"])))
        history.set_params({"verbose": plan.verbose, "epochs": plan.epochs, "steps": plan.steps})
        history.set_model(self.model)
        self.model.history = history
        history.resumed_from = resumed_from
        history.steps_trained = trained
        self.history = history
        return history

    def _plan(
        self,
        x: Any,
        y: Any,
        batch_size: Any,
        epochs: Any,
        steps_per_epoch: Any,
        validation_data: Any,
        validation_batch_size: Any,
        shuffle: Any,
        seed: Any,
        callbacks: Any,
        verbose: Any,
        checkpoint_dir: Any,
        checkpoint_every_steps: Any,
        log_dir: Any,
    ) -> _Plan:
        """Every argument of `fit` checked, before any work."""
        x, y = _arrays(x, y, "fit")
        batch_size = check_whole("batch_size", batch_size, 1)
        epochs = check_whole("epochs", epochs, 1)
        seed = check_whole("seed", seed, 0)
        if not isinstance(shuffle, bool):
            raise TypeError(f"shuffle must be True or False, got {shuffle!r}.")
        check_batch_divisible(batch_size, self.num_replicas)
        full_batches = len(x) // batch_size
        if full_batches == 0:
            raise ValueError(
                f"batch_size={batch_size} is larger than the {len(x)} training examples; only full "
                f"batches are trained. Use batch_size <= {len(x)}."
            )
        steps = full_batches
        if steps_per_epoch is not None:
            steps = check_whole("steps_per_epoch", steps_per_epoch, 1)
            if steps > full_batches:
                raise ValueError(
                    f"steps_per_epoch={steps} but x holds only {full_batches} full batches of "
                    f"{batch_size}; use steps_per_epoch <= {full_batches} or more data."
                )
        validation = None
        if validation_data is not None:
            if not isinstance(validation_data, (tuple, list)) or len(validation_data) != 2:
                raise TypeError("validation_data must be a tuple (x_val, y_val) of NumPy arrays.")
            x_val, y_val = _arrays(*validation_data, "validation_data")
            val_batch = check_whole("validation_batch_size", validation_batch_size or batch_size, 1)
            check_batch_divisible(val_batch, self.num_replicas)
            validation = (x_val, y_val, val_batch)
        callbacks = list(callbacks or [])
        for callback in callbacks:
            if not isinstance(callback, keras.callbacks.Callback):
                raise TypeError(f"callbacks must be keras.callbacks.Callback objects, got {callback!r}.")
            if isinstance(callback, keras.callbacks.BackupAndRestore):
                raise ValueError(
                    "callbacks: BackupAndRestore would fight the trainer's own checkpoints; pass "
                    "checkpoint_dir=... instead (it also resumes mid-epoch, on every worker)."
                )
        folder = _folder(checkpoint_dir, "checkpoint_dir") if checkpoint_dir is not None else None
        if checkpoint_every_steps is not None:
            checkpoint_every_steps = check_whole("checkpoint_every_steps", checkpoint_every_steps, 1)
            if folder is None:
                raise ValueError("checkpoint_every_steps needs checkpoint_dir=... (where to save).")
        from mgtutor.resume import _fingerprint

        settings = {
            "batch_size": batch_size, "steps_per_epoch": steps, "seed": seed, "shuffle": shuffle,
            "num_examples": len(x), "data": _fingerprint((x, y), len(x)),
        }  # fmt: skip
        return _Plan(
            x=x, y=y, batch_size=batch_size, epochs=epochs, steps=steps, validation=validation,
            shuffle=shuffle, seed=seed, callbacks=callbacks, verbose=_check_verbose(verbose),
            checkpoint_dir=folder, checkpoint_every=checkpoint_every_steps,
            log_dir=_folder(log_dir, "log_dir") if log_dir is not None else None, settings=settings,
        )  # fmt: skip

    def _start(self, plan: _Plan, say: Callable[..., None]) -> tuple[_Progress, _Checkpointer | None]:
        """The run's progress: fresh, or restored from the latest checkpoint of the same run."""
        progress = _Progress()
        checkpointer = None
        if plan.checkpoint_dir is not None:
            groups = {
                "model": list(self.model.variables),
                "optimizer": list(self.optimizer.variables),
                "metrics": [v for m in self._all_metrics() for v in m.variables],
            }
            checkpointer = _Checkpointer(self.strategy, plan.checkpoint_dir, groups, progress)
            latest = checkpointer.latest()
            if latest is not None:
                saved = _read_progress(latest).get("settings", {})
                changed = {k: (saved.get(k), v) for k, v in plan.settings.items() if saved.get(k) != v}
                if changed:
                    listed = "; ".join(
                        "other x/y values" if k == "data" else f"{k}: checkpoint {old!r}, now {new!r}"
                        for k, (old, new) in changed.items()
                    )
                    raise ValueError(
                        f"checkpoint_dir {str(plan.checkpoint_dir)!r} holds a run with other settings "
                        f"({listed}). Resume with the same arguments, or use a fresh checkpoint_dir."
                    )
                checkpointer.restore(latest)
                epoch, step = progress.state["epoch"], progress.state["step"]
                say(
                    f"Trainer: resuming from {latest} at epoch {epoch + 1}/{plan.epochs}, batch "
                    f"{step}/{plan.steps} (global step {epoch * plan.steps + step})."
                )
        progress.state["settings"] = plan.settings
        return progress, checkpointer

    def _train(
        self,
        plan: _Plan,
        state: dict[str, Any],
        checkpointer: _Checkpointer | None,
        callback_list: Any,
        summaries: _EpochSummaries | None,
        say: Callable[..., None],
    ) -> int:
        """The epoch loop, from the position in `state`; returns the number of steps run."""
        steps, start_epoch, start_step = plan.steps, int(state["epoch"]), int(state["step"])
        batches = _epoch_batches(
            len(plan.x), plan.batch_size, steps, plan.seed, plan.shuffle, start_epoch, plan.epochs
        ).skip(start_step)  # the batches of the interrupted epoch trained before the kill
        iterator = iter(_distributed(self.strategy, batches, (plan.x, plan.y), plan.batch_size))
        train_step = self._train_function(plan.batch_size)
        validation = self._validation(*plan.validation) if plan.validation is not None else None

        def save(epoch: int, step: int) -> None:
            self._average_statistics()  # the checkpoint holds one value per variable
            state.update(epoch=epoch, step=step)
            global_step = epoch * steps + step
            path = checkpointer.save(global_step)
            where = f"epoch {epoch + 1}, batch {step}/{steps}" if step else f"end of epoch {epoch}"
            say(f"checkpoint saved: step {global_step} ({where}) -> {path}")

        trained = 0
        self.model.stop_training = False
        callback_list.on_train_begin()
        epoch_logs: dict[str, float] = {}
        for epoch in range(start_epoch, plan.epochs):
            first = start_step if epoch == start_epoch else 0
            if first == 0:  # mid-epoch, the restored sums hold the batches trained before the kill
                self._reset_metrics()
            callback_list.on_epoch_begin(epoch)
            logs: dict[str, float] = {}
            for step in range(first, steps):
                callback_list.on_train_batch_begin(step)
                logs = {k: float(v) for k, v in train_step(iterator).items()}
                trained += 1
                callback_list.on_train_batch_end(step, logs)
                due = plan.checkpoint_every and (epoch * steps + step + 1) % plan.checkpoint_every == 0
                if checkpointer is not None and due and step + 1 < steps:  # the epoch end saves anyway
                    save(epoch, step + 1)
                if self.model.stop_training:
                    break
            epoch_logs = dict(logs)
            # Before validation and callbacks: they score and save the averaged statistics.
            self._average_statistics()
            if validation is not None:
                val_logs = self._evaluate(*validation, callback_list)
                epoch_logs.update({f"val_{k}": v for k, v in val_logs.items()})
            callback_list.on_epoch_end(epoch, epoch_logs)
            if summaries is not None:
                summaries.write(epoch, epoch_logs)
            stop = self._any_worker(bool(self.model.stop_training))
            self.model.stop_training = stop
            state["history"].append(epoch_logs)
            state["stopped"] = stop
            if checkpointer is not None:
                save(epoch + 1, 0)
            else:
                state.update(epoch=epoch + 1, step=0)
            if stop:
                break
        callback_list.on_train_end(epoch_logs)
        return trained
