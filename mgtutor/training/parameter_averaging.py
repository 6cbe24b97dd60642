"""Parameter averaging: deeplearning4j's ParallelWrapper (seed 004) on Keras 3 and TensorFlow.

Each worker trains its own copy of the model on its own batches; every few rounds the
copies are averaged and every worker continues from the average. With plain SGD and an
averaging after every round this is MirroredStrategy's algorithm, w - lr * mean_i(g_i);
averaging less often trades that equality for fewer synchronisations. Workers' steps are
dispatched from Python one after another, which on GPUs is not serial: TensorFlow
launches kernels asynchronously and Python waits only where it reads a value (at an
averaging). Logical CPU devices share the same cores: there this shows correctness,
not speed. Importing this module starts nothing.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from mgtutor.data_parallel import copy_model
from mgtutor.devices import resolve_devices
from mgtutor.support.checks import check_whole
from mgtutor.training.worker_batches import Prefetcher, Source, checked_fit, rows


def replica_spread(models: Sequence[keras.Model]) -> float:
    """The largest absolute difference between any two models' corresponding weights.

    Every weight counts, trainable or not (BatchNormalization's moving statistics too):
    0.0 right after an averaging, growing while the workers train apart.
    """
    worst = 0.0
    for group in zip(*(m.get_weights() for m in models), strict=True):
        stacked = np.stack([np.asarray(w, dtype=np.float64) for w in group])
        if stacked.size:
            worst = max(worst, float(np.max(stacked.max(axis=0) - stacked.min(axis=0))))
    return worst


def _is_float(variable: Any) -> bool:
    return str(variable.dtype).startswith(("float", "bfloat"))  # not step counters nor RNG states


def _function(python_function: Callable, **kwargs: Any) -> Callable:
    function = tf.function(python_function, jit_compile=False, **kwargs)
    # TF counts traces per source line across wrappers: a notebook comparing several
    # wrappers would be warned of "retracing" that is only each one's first trace.
    function._omit_frequent_tracing_warning = True
    return function


def _write(writer: Any, scalars: dict[str, float], step: int) -> None:
    if writer is not None:
        with writer.as_default():
            for name, value in scalars.items():
                tf.summary.scalar(name, value, step=step)


class ParallelWrapper:
    """DL4J's ParallelWrapper: `workers` copies of a compiled model, averaged periodically.

    Each worker copies `model`'s weights, optimizer, loss and metrics onto its own device
    (`devices`, or the first `workers` available). `fit` deals batch i to worker
    i % workers; a round is one step of every worker. Every `averaging_frequency` rounds
    and at each epoch's end all model weights (BatchNormalization's moving statistics
    too) are averaged into every worker, and after each epoch into `model` itself.

    `average_optimizer_state` (DL4J's default) also averages the optimizer slots
    (momentum, Adam's moments). Without it each worker's momentum, built from its own
    shard, keeps pushing the shared weights its own way after an averaging, and adaptive
    optimizers scale steps by statistics of 1/workers of the data; averaged, the state
    is that of one optimizer that saw every batch (exactly so for SGD with or without
    momentum, whose updates are linear in the gradients).

    `averaging_log` holds one dict per averaging: epoch, round, step (worker steps in
    all), sync, spread (largest weight difference between workers just before it) and,
    with `report_score_after_averaging`, loss (mean over the steps since the previous
    one; else None). `steps` counts steps per worker; counters run on across fits.
    """

    def __init__(
        self,
        model: keras.Model,
        workers: int = 2,
        averaging_frequency: int = 3,
        prefetch_buffer: int = 24,
        report_score_after_averaging: bool = True,
        devices: Any = None,
        average_optimizer_state: bool = True,
    ) -> None:
        workers = check_whole("workers", workers, 1, "Pass e.g. workers=2, one per device.")
        self.averaging_frequency = check_whole(
            "averaging_frequency", averaging_frequency, 1, "Pass e.g. 3 to average every 3 rounds."
        )
        self.prefetch_buffer = check_whole("prefetch_buffer", prefetch_buffer, 1, "Pass e.g. 24 batches.")
        for name, flag in (("report_score_after_averaging", report_score_after_averaging),
                           ("average_optimizer_state", average_optimizer_state)):  # fmt: skip
            if not isinstance(flag, bool):
                raise ValueError(f"{name} must be True or False, got {flag!r}.")
        if not isinstance(model, keras.Model) or not model.weights:
            raise TypeError(f"model must be a built keras.Model (keras.Input); got {type(model).__name__}.")
        config = model.get_compile_config() if getattr(model, "compiled", False) else {}
        if not config or model.optimizer is None:
            raise ValueError(
                f"model {model.name!r} is not compiled: every worker copies its loss, optimizer and "
                "metrics. Call model.compile(optimizer=..., loss=..., metrics=[...]) first."
            )
        parameter = "workers" if devices is None else "devices"
        names = resolve_devices(workers if devices is None else devices, parameter=parameter, minimum=1)
        if len(names) != workers:
            raise ValueError(f"devices names {len(names)} device(s) for workers={workers}; give one each.")
        self.model, self.devices = model, names
        self.report_score_after_averaging = report_score_after_averaging
        self.average_optimizer_state = average_optimizer_state
        self.synchronizations = self.steps = 0
        self.averaging_log: list[dict[str, Any]] = []
        self._since_sync = self._epochs_done = self._skipped = 0
        if not model.optimizer.built:
            model.optimizer.build(model.trainable_variables)  # it receives the averaged state
        self._workers: list[keras.Model] = []
        for device in names:
            with tf.device(device):
                self._workers.append(copy_model(model))
                self._workers[-1].compile_from_config(config)  # its own optimizer, loss and metrics
        self._steps = [self._make_step(w, d) for w, d in zip(self._workers, names, strict=True)]
        self._average = self._make_average()

    @property
    def worker_models(self) -> tuple[keras.Model, ...]:
        """The workers' models, in device order."""
        return tuple(self._workers)

    @staticmethod
    def _make_step(worker: keras.Model, device: str) -> Callable:
        def step(x: Any, y: Any) -> Any:
            variables = worker.trainable_variables
            with tf.device(device):
                with tf.GradientTape() as tape:
                    y_pred = worker(x, training=True)
                    loss = worker.compute_loss(x, y, y_pred, training=True)
                    scaled = worker.optimizer.scale_loss(loss)  # for mixed precision; else the loss itself
                worker.optimizer.apply(tape.gradient(scaled, variables), variables)
                worker.compute_metrics(x, y, y_pred)
            return loss

        return _function(step, reduce_retracing=True)

    def _make_average(self) -> Callable:
        def float_groups(lists: Iterable[list[Any]]) -> list[tuple[Any, ...]]:
            return [g for g in zip(*lists, strict=True) if _is_float(g[0])]

        groups = [(True, g) for g in float_groups(w.weights for w in self._workers)]
        if self.average_optimizer_state:
            groups += [(False, g) for g in float_groups(w.optimizer.variables for w in self._workers)]

        def average() -> Any:
            spread = tf.zeros((), tf.float32)
            for measured, group in groups:
                with tf.device(self.devices[0]):  # gathered on one device, like ReductionToOneDevice
                    stacked = tf.stack([v.value for v in group])
                    mean = tf.reduce_mean(stacked, axis=0)
                    if measured and int(np.prod(group[0].shape)) > 0:
                        gap = tf.reduce_max(tf.reduce_max(stacked, 0) - tf.reduce_min(stacked, 0))
                        spread = tf.maximum(spread, tf.cast(gap, tf.float32))
                for variable in group:
                    variable.assign(mean)
            return spread

        return _function(average)

    def _pull_from_model(self) -> None:
        # `model` is the truth between fits: it may have been trained or loaded meanwhile.
        weights, state = self.model.get_weights(), [v.numpy() for v in self.model.optimizer.variables]
        for worker in self._workers:
            worker.set_weights(weights)
            for variable, value in zip(worker.optimizer.variables, state, strict=True):
                variable.assign(value)

    def _push_to_model(self) -> None:
        # Optimizer state: the workers' mean (their common state when it is averaged anyway).
        self.model.set_weights(self._workers[0].get_weights())
        states = [w.optimizer.variables for w in self._workers]
        for target, *group in zip(self.model.optimizer.variables, *states, strict=True):
            values = [v.numpy() for v in group]
            target.assign(np.mean(values, axis=0).astype(values[0].dtype) if _is_float(target) else values[0])

    def _train_metrics(self) -> dict[str, Any]:
        """The workers' compiled metrics as one: states combined as tf.distribute does."""
        for group in zip(*(w.metrics_variables for w in self._workers), strict=True):
            values = [v.numpy() for v in group]
            how = getattr(group[0], "aggregation", "sum")
            merged = {"sum": np.sum, "mean": np.mean}.get(how, lambda v, axis: v[0])(values, axis=0)
            group[0].assign(np.asarray(merged, dtype=values[0].dtype))
        results = {}
        for name, value in self._workers[0].get_metrics_result().items():
            if name != "loss":  # Keras' loss tracker is unused: _run_epoch weighs the losses
                results[name] = float(value) if np.ndim(value) == 0 else np.asarray(value)
        return results

    def _synchronize(self, window: list[Any], writer: Any) -> None:
        spread = float(self._average())
        self.synchronizations += 1
        self._since_sync = 0
        score = None
        if self.report_score_after_averaging and window:
            score = float(np.mean(tf.stack(window).numpy()))
        step = self.steps * len(self._workers)
        self.averaging_log.append({
            "epoch": self._epochs_done + 1, "round": self.steps, "step": step,
            "sync": self.synchronizations, "loss": score, "spread": spread,
        })  # fmt: skip
        scalars = {"averaging/spread": spread, **({} if score is None else {"averaging/loss": score})}
        _write(writer, scalars, step)

    def _run_epoch(
        self, source: Source, epoch: int, limit: int | None, verbose: int, writer: Any
    ) -> tuple[dict[str, Any], keras.utils.Progbar, int]:
        n = len(self._workers)
        for worker in self._workers:
            worker.reset_metrics()
        known = [c // n for c in (source.count, limit) if c is not None]
        progbar = keras.utils.Progbar(min(known, default=None), verbose=verbose, stateless_metrics=[])
        losses: list[Any] = []  # tensors: reading each would make Python wait for the devices
        sizes: list[int] = []
        start, rounds, pending = 0, 0, []
        with Prefetcher(source.make_iterator, limit, self.prefetch_buffer) as batches:
            for batch in batches:
                pending.append(batch)
                if len(pending) < n:
                    continue
                for step, (x, y) in zip(self._steps, pending, strict=True):
                    losses.append(step(x, y))
                    sizes.append(rows(x))
                pending, rounds, self.steps = [], rounds + 1, self.steps + 1
                self._since_sync += 1
                if self._since_sync == self.averaging_frequency:
                    self._synchronize(losses[start:], writer)
                    start = len(losses)
                score = self.averaging_log[-1]["loss"] if self.averaging_log else None
                progbar.update(rounds, None if score is None else [("loss", score)], finalize=False)
        if source.on_epoch_end is not None:
            source.on_epoch_end()
        if rounds == 0:  # unknown length: found out now, still before any step of this epoch
            raise ValueError(
                f"data yielded {len(pending)} batch(es) in epoch {epoch + 1}; each round needs one batch "
                f"per worker (workers={n}). Give more data or fewer workers (iterators: steps_per_epoch)."
            )
        self._skipped += len(pending)
        if self._since_sync:
            self._synchronize(losses[start:], writer)
        # Weighted by batch size, as Keras' own epoch loss is.
        logs = {"loss": float(np.average(tf.stack(losses).numpy(), weights=sizes)), **self._train_metrics()}
        self._push_to_model()
        return logs, progbar, rounds

    def fit(
        self,
        data: Any,
        epochs: int = 1,
        *,
        batch_size: int | None = None,
        shuffle: bool = True,
        seed: int | None = None,
        steps_per_epoch: int | None = None,
        validation_data: Any = None,
        verbose: int | str = "auto",
        log_dir: str | os.PathLike | None = None,
    ) -> keras.callbacks.History:
        """Train the workers, averaging as configured; returns a History of per-epoch logs.

        `data`: an iterable of (x, y) batches (a list, a generator, a
        ``keras.utils.PyDataset`` such as ``ImageDataGenerator.flow``, a ``tf.data.Dataset``),
        or an (x, y) tuple of arrays cut into batches of `batch_size` (default 32),
        reshuffled each epoch from `seed` when `shuffle`.
        `steps_per_epoch` counts batches, a multiple of workers; an epoch ends there or
        where the data does. A trailing partial round (fewer batches left than workers)
        is left out, with a warning, so every worker takes as many steps and the average
        weighs them equally. History: ``loss`` (mean over all worker steps), compiled
        metrics, and ``val_*`` of the averaged model with `validation_data`. `log_dir`
        gets TensorBoard scalars: loss and spread per averaging, the logs per epoch.
        """
        n = len(self._workers)
        epochs, verbose, source, evaluate_kwargs = checked_fit(
            data, n, epochs, batch_size, shuffle, seed, steps_per_epoch, validation_data, verbose, log_dir
        )
        self._pull_from_model()
        self._skipped = 0
        history = keras.callbacks.History()
        history.set_model(self.model)
        history.on_train_begin()
        writer = tf.summary.create_file_writer(os.fspath(log_dir)) if log_dir is not None else None
        try:
            for epoch in range(epochs):
                if verbose:
                    print(f"Epoch {epoch + 1}/{epochs}")
                logs, progbar, rounds = self._run_epoch(source, epoch, steps_per_epoch, verbose, writer)
                if validation_data is not None:
                    measured = self.model.evaluate(**evaluate_kwargs, verbose=0, return_dict=True)
                    logs.update({f"val_{k}": float(v) for k, v in measured.items()})
                scalars = {k: v for k, v in logs.items() if np.ndim(v) == 0}
                progbar.update(rounds, list(scalars.items()), finalize=True)
                _write(writer, {f"epoch/{k}": v for k, v in scalars.items()}, self._epochs_done)
                self._epochs_done += 1
                history.on_epoch_end(epoch, logs)
        finally:
            if writer is not None:
                writer.close()
        if self._skipped:
            warnings.warn(
                f"ParallelWrapper.fit left out {self._skipped} batch(es): trailing partial rounds of fewer "
                f"batches than workers={n}. Make the batch count a multiple of workers to use them all.",
                UserWarning,
                stacklevel=2,
            )
        return history

