"""`Trainer`: one ``strategy.run`` loop for one device, N devices and N machines, with ``fit``'s comforts.

Keras 3's ``fit`` fails under ``MultiWorkerMirroredStrategy`` (keras#20585), so this is the loop
TensorFlow's multi-worker tutorial writes by hand (notebook 10 walks through its step): each
epoch's order is a function of (seed, epoch), only full global batches are trained, the loss is
divided by the global batch, and checkpoints (`mgtutor.training.checkpoints`, the engine `resumable_fit`
uses too) let a killed job resume to the same weights. Importing it starts nothing, so
`multi_worker_strategy` can still be the first thing to touch TensorFlow.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from mgtutor.data_parallel import check_batch_divisible
from mgtutor.progress import EpochSummaries
from mgtutor.support.checks import check_whole
from mgtutor.training import checkpoints
from mgtutor.training.accumulation import accumulating_updates, gradient_sums, group_sizes
from mgtutor.training.checkpoints import StrategyCheckpointer as Checkpointer
from mgtutor.training.feeding import distributed, epoch_batches, fed_rows, padded_rows
from mgtutor.training.losses import make_metric, per_example_loss
from mgtutor.training.plan import (
    TRAINER,
    FitOptions,
    FitPlan,
    check_arrays,
    check_trainer_parts,
    fit_signature,
    plan_fit,
    trainer_strategy,
)
from mgtutor.training.worker import is_chief, num_workers

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

    Checkpoints: a second run on the same ``checkpoint_dir`` while one lives is
    refused (`runlock`); a checkpoint written on another replica count is
    refused where the model's step depends on the split (plain BatchNorm,
    random layers: `checkpoints.check_other_replicas`), else it goes on with the
    same global batch; ``resume_on_other_replicas=True`` goes on anyway.
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
        check_trainer_parts(model, optimizer, metrics)
        self.loss = per_example_loss(loss)
        strategy = trainer_strategy(model, optimizer, strategy)
        self.model = model
        self.optimizer = optimizer
        self.strategy = strategy
        self._metric_specs = list(metrics)
        self.metrics: list[keras.metrics.Metric] = []
        self._loss_tracker: keras.metrics.Metric | None = None
        self.history: keras.callbacks.History | None = None
        self._test_step: Callable[[Any], dict[str, Any]] | None = None
        self._vote: Callable[[Any], Any] | None = None
        self._sums: list[tf.Variable] | None = None  # gradient accumulation's, made at its first use

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

    def rows_fed(
        self, num_examples: int, batch_size: int, *, epoch: int = 0, seed: int = 0, shuffle: bool = True
    ) -> list[list[int]]:
        """The rows of x this worker's replicas train on at each full global batch of `epoch`, as `fit`
        feeds them (`mgtutor.training.feeding.fed_rows`). Every worker of a job makes the call."""
        return fed_rows(self.strategy, num_examples, batch_size, epoch=epoch, seed=seed, shuffle=shuffle)

    # -- building blocks

    def _build_metrics(self, x: np.ndarray, y: np.ndarray) -> None:
        if self._loss_tracker is not None:
            return
        outputs = getattr(self.model, "outputs", None)  # a subclassed model has none: ask it
        output_shape = tuple(outputs[0].shape) if outputs else tuple(self.model(x[:1]).shape)
        with self.strategy.scope():
            self._loss_tracker = keras.metrics.Mean(name="loss")
            self.metrics = [make_metric(spec, y, output_shape) for spec in self._metric_specs]
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

    def _replica_gradients(self, x: Any, y: Any, global_batch: int) -> list:
        """This replica's gradients of its share of the global-batch loss; its metrics updated."""
        model = self.model
        with tf.GradientTape() as tape:
            prediction = model(x, training=True)
            per_example = self._per_example(y, prediction)
            regularization = self._regularization()
            # Divide by the GLOBAL batch: summing the replicas' gradients then gives the
            # gradient of the global-batch mean, exactly as on one device.
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
            loss += tf.nn.scale_regularization_loss(regularization)
            scaled = self.optimizer.scale_loss(loss)  # a LossScaleOptimizer's factor (else unchanged)
        gradients = tape.gradient(scaled, model.trainable_variables)
        local = tf.cast(tf.shape(per_example)[0], tf.float32)
        # What fit logs: this replica's mean loss, weighted by its number of examples.
        self._loss_tracker.update_state(tf.reduce_sum(per_example) / local + regularization, local)
        for metric in self.metrics:
            metric.update_state(y, prediction)
        return gradients

    def _train_function(self, global_batch: int) -> Callable[[Any], dict[str, Any]]:
        variables = self.model.trainable_variables

        def replica_step(x: Any, y: Any) -> None:
            gradients = self._replica_gradients(x, y, global_batch)
            # apply_gradients sums the replicas' gradients (an all-reduce) before updating.
            self.optimizer.apply_gradients(zip(gradients, variables, strict=True))

        @tf.function
        def train_step(iterator: Any) -> dict[str, Any]:
            x, y = next(iterator)
            self.strategy.run(replica_step, args=(x, y))
            return self._results()

        return train_step

    def _update_function(self, plan: FitPlan) -> Callable[[Any, int], dict[str, float]]:
        """``update(iterator, g)``: one optimizer update (one all-reduce) from the next g batches."""
        if plan.accumulation_steps == 1:  # one batch per update: the step as it always was
            train_step = self._train_function(plan.batch_size)
            return lambda iterator, _: {k: float(v) for k, v in train_step(iterator).items()}
        variables = self.model.trainable_variables
        if self._sums is None:
            self._sums = gradient_sums(self.strategy, variables)
        return accumulating_updates(
            self.strategy, lambda x, y: self._replica_gradients(x, y, plan.batch_size), self.optimizer,
            variables, self._sums, self._results,
        )  # fmt: skip

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
        rows, weights = padded_rows(len(x), batch_size)
        arrays = (x[rows], y[rows], weights)  # at most batch_size - 1 padded rows, weighted 0
        batches = tf.data.Dataset.range(len(rows)).batch(batch_size)
        return distributed(self.strategy, batches, arrays, batch_size), len(rows) // batch_size

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
        x, y = check_arrays(x, y, "evaluate")
        batch_size = check_whole("batch_size", batch_size, 1)
        check_batch_divisible(batch_size, self.num_replicas)
        self._build_metrics(x, y)
        return self._evaluate(*self._validation(x, y, batch_size))

    # -- training

    @fit_signature(TRAINER)
    def fit(self, x: np.ndarray, y: np.ndarray, **options: Any) -> keras.callbacks.History:
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

        `accumulation_steps` k: one update (one all-reduce) per k batches, with
        the gradient of the mean loss over their k · batch_size examples. An
        epoch of `steps_per_epoch` batches is ceil(steps_per_epoch / k) steps,
        the last of the batches left (the mean over those). Callbacks, the bar,
        `checkpoint_every_steps` and ``steps_trained`` count these steps
        (updates); checkpoints fall between them. `resume_on_other_replicas`: see the class.
        """
        plan = plan_fit(FitOptions(x=x, y=y, **options), engine=TRAINER, replicas=self.num_replicas)
        say = print if (plan.verbose and self.is_chief) else (lambda *_: None)
        self._build_metrics(plan.x, plan.y)
        state, checkpointer, resumed_from = self._start(plan, say)
        params = {"verbose": plan.verbose, "epochs": plan.epochs, "steps": plan.updates_per_epoch}
        callback_list = keras.callbacks.CallbackList(
            list(plan.callbacks), add_progbar=bool(plan.verbose and self.is_chief), model=self.model, **params
        )
        summaries = EpochSummaries(plan.log_dir) if plan.log_dir is not None and self.is_chief else None
        trained = 0
        try:
            if state["epoch"] < plan.epochs and not state["stopped"]:
                trained = self._train(plan, state, checkpointer, callback_list, summaries, say)
            else:
                say(f"Trainer: the run in {plan.checkpoint_dir} already finished; its weights are restored.")
        finally:
            for opened in filter(None, (summaries, checkpointer)):  # the logs; the folder, for another run
                opened.close()
        history = checkpoints.history_of(self.model, state, params, resumed_from)
        history.steps_trained = trained
        self.history = history
        return history

    def _start(self, plan: FitPlan, say: Callable[..., None]) -> tuple[dict, Checkpointer | None, Any]:
        """The run's state, fresh or restored from a checkpoint of the same run; where it resumed."""
        state = checkpoints.new_state(plan.settings, replicas=self.num_replicas)
        if plan.checkpoint_dir is None:
            return state, None, None
        groups = {
            "model": list(self.model.variables),
            "optimizer": list(self.optimizer.variables),
            "metrics": [v for m in self._all_metrics() for v in m.variables],
        }
        parts = checkpoints.replica_parts(self.strategy, groups["metrics"])
        if parts is not None:
            groups["metric_replicas"] = parts
        checkpointer = Checkpointer(self.strategy, plan.checkpoint_dir, groups, state)
        saved = checkpointer.load(plan, self.model, self.num_replicas, say)
        if saved is None:
            return state, checkpointer, None
        try:
            checkpointer.restore(saved[1])
        except BaseException:
            checkpointer.close()
            raise
        state.update({k: saved[0][k] for k in ("epoch", "step", "history", "stopped")})
        epoch, step = state["epoch"], state["step"]
        say(
            f"Trainer: resuming {plan.checkpoint_dir} at epoch {epoch + 1}/{plan.epochs}, batch "
            f"{step}/{plan.steps_per_epoch} (global step "
            f"{epoch * plan.updates_per_epoch + step // plan.accumulation_steps})."
        )
        return state, checkpointer, (epoch, step)

    def _train(
        self,
        plan: FitPlan,
        state: dict[str, Any],
        checkpointer: Checkpointer | None,
        callback_list: Any,
        summaries: EpochSummaries | None,
        say: Callable[..., None],
    ) -> int:
        """The epoch loop, from the position in `state`; returns the number of steps (updates) run."""
        steps, start_epoch, start_step = plan.steps_per_epoch, int(state["epoch"]), int(state["step"])
        sizes, k = group_sizes(steps, plan.accumulation_steps), plan.accumulation_steps
        batches = epoch_batches(
            plan.num_examples, plan.batch_size, steps, plan.seed, plan.shuffle, start_epoch, plan.epochs
        ).skip(start_step)  # the batches of the interrupted epoch trained before the kill
        iterator = iter(distributed(self.strategy, batches, (plan.x, plan.y), plan.batch_size))
        update = self._update_function(plan)
        validation = None
        if plan.validation is not None:
            validation = self._validation(plan.validation.x, plan.validation.y, plan.validation.batch_size)

        def save(epoch: int, step: int) -> None:
            self._average_statistics()  # the checkpoint holds one value per variable
            state.update(epoch=epoch, step=step)
            global_step = epoch * len(sizes) + -(-step // k)
            path = checkpointer.save()
            where = f"epoch {epoch + 1}, batch {step}/{steps}" if step else f"end of epoch {epoch}"
            say(f"checkpoint saved: step {global_step} ({where}) -> {path}")

        trained = 0
        self.model.stop_training = False
        callback_list.on_train_begin()
        epoch_logs: dict[str, float] = {}
        for epoch in range(start_epoch, plan.epochs):
            first = (start_step if epoch == start_epoch else 0) // k  # checkpoints fall between updates
            if first == 0:  # mid-epoch, the restored sums hold the batches trained before the kill
                self._reset_metrics()
            callback_list.on_epoch_begin(epoch)
            logs: dict[str, float] = {}
            for step in range(first, len(sizes)):
                callback_list.on_train_batch_begin(step)
                logs = update(iterator, sizes[step])
                trained += 1
                callback_list.on_train_batch_end(step, logs)
                every = plan.checkpoint_every_steps
                due = every and (epoch * len(sizes) + step + 1) % every == 0
                if checkpointer is not None and due and step + 1 < len(sizes):  # the epoch end saves anyway
                    save(epoch, (step + 1) * k)  # batches done
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
