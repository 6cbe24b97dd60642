"""`resumable_fit`: a run killed mid-epoch, run again, ends with the weights of an uninterrupted run.

Keras 3's ``BackupAndRestore`` re-runs the interrupted epoch from its first batch and keeps no
Dropout generator state (keras#19179, keras#20712). Here each epoch's order is a function of
(seed, epoch), and every `checkpoint_every_steps` batches one atomically written file holds every
variable, the optimizer and metric state and the position; a restart trains only what is left.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np

from mgtutor.saving import save_model
from mgtutor.support.checks import renamed
from mgtutor.support.tfdata import without_autotuner
from mgtutor.training import checkpoints, runlock
from mgtutor.training.feeding import epoch_rows
from mgtutor.training.plan import RESUMABLE_FIT, FitOptions, FitPlan, fit_signature, plan_fit

EPOCH_FILE = "epoch-{epoch:02d}.weights.h5"  # 1-based, as ModelCheckpoint's {epoch}
BEST_FILE = "best.weights.h5"

# fit arguments resumable_fit decides itself, and why.
_OWN_ARGUMENTS = {
    "shuffle": "it shuffles each epoch itself, reproducibly from `seed` and the epoch number",
    "initial_epoch": "the starting epoch comes from the checkpoint",
    "steps_per_epoch": "an epoch is always one pass over x",
    "validation_split": "pass validation_data=(x_val, y_val) instead",
    "x": "pass the data as the 2nd and 3rd arguments",
    "y": "pass the data as the 2nd and 3rd arguments",
}
_PASSED_TO_FIT = {
    "verbose",
    "callbacks",
    "validation_data",
    "validation_batch_size",
    "validation_freq",
    "validation_steps",
    "class_weight",
}


# --------------------------------------------------------------------------- checks


def _mode_for(monitor: str, mode: str) -> str:
    if mode not in ("auto", "min", "max"):
        raise ValueError(f"mode must be 'auto', 'min' or 'max', got {mode!r}.")
    if mode != "auto":
        return mode
    higher_is_better = ("acc", "auc", "precision", "recall", "f1")
    return "max" if any(word in monitor for word in higher_is_better) else "min"


# --------------------------------------------------------------------------- data


def _batches(plan: FitPlan, first: int, last: int, skip: int) -> Any:
    """Epochs first..last-1, each in its (seed, epoch) order, batched; the first `skip` batches left out."""
    import keras
    import tensorflow as tf

    def one_epoch(epoch: Any) -> Any:
        return epoch_rows(plan.num_examples, plan.seed, epoch).batch(plan.batch_size)

    indices = tf.data.Dataset.range(first, last).flat_map(one_epoch).skip(skip)
    # As Keras does for arrays: the data once, batches gathered by index.
    data = tf.data.Dataset.from_tensors(plan.arrays).repeat()
    dataset = tf.data.Dataset.zip((indices, data)).map(
        lambda index, arrays: keras.tree.map_structure(lambda a: tf.gather(a, index), arrays)
    )
    # A known length lets Keras size the progress bar and end the epoch without a warning.
    count = plan.steps_per_epoch * (last - first) - skip
    counted = dataset.apply(tf.data.experimental.assert_cardinality(count))
    return without_autotuner(counted.prefetch(tf.data.AUTOTUNE))


# --------------------------------------------------------------------------- the callback


class _Checkpointer:
    """Saves the training state every few batches and at each epoch end (used by `_Callback`)."""

    def __init__(self, model: Any, folder: Path, meta: dict, save_every: int, monitor: str, mode: str):
        self.model = model
        self.folder = folder
        self.meta = meta
        self.save_every = save_every
        self.monitor = monitor
        self.better = np.less if mode == "min" else np.greater
        self.skip: dict[int, int] = {}  # epoch -> batches already trained before a restart
        self.metric_values: list[np.ndarray] | None = None  # metric state to restore
        self.offset = 0
        self.warned_monitor = False

    def groups(self, with_metrics: bool) -> dict[str, list]:
        groups = {"model": self.model.variables, "optimizer": self.model.optimizer.variables}
        if with_metrics:
            groups["metrics"] = self.model.metrics_variables
            parts = checkpoints.replica_parts(self.model.distribute_strategy, self.model.metrics_variables)
            if parts is not None:
                groups["metric_replicas"] = parts
        return groups

    def average(self) -> None:
        """One set of BatchNormalization statistics on every replica (see `mgtutor.batchnorm`).

        Each replica updates its own copy; the state file and the weights files
        hold one value per variable. Averaged at every save, an uninterrupted run
        and a restored one (whose replicas all get the saved value) stay identical.
        """
        from mgtutor.batchnorm import average_replica_copies

        average_replica_copies(self.model)

    def save(self, epoch: int, step: int) -> None:
        self.average()
        self.meta.update(epoch=epoch, step=step)
        # Mid-epoch, the metric sums so far belong to the epoch's logs; at its end they are reset.
        checkpoints.write_state(self.folder, self.meta, self.groups(with_metrics=step > 0))

    def epoch_begin(self, epoch: int) -> None:
        self.offset = self.skip.pop(epoch, 0)
        if self.metric_values is not None:
            # fit has just reset the metrics; give back the sums of the batches done before the kill.
            if not checkpoints.restore_metrics(
                self.model.metrics_variables, *self.metric_values, self.folder, self.model.distribute_strategy
            ):
                warnings.warn(
                    "resumable_fit: the model's metrics differ from the checkpoint's (compiled with other "
                    "metrics?); the resumed epoch's logged averages cover only the batches after the "
                    "restart. The weights are unaffected.",
                    stacklevel=2,
                )
            self.metric_values = None

    def batch_end(self, epoch: int, batch: int) -> None:
        step = self.offset + batch + 1
        if step % self.save_every == 0 and step < self.meta["settings"]["steps_per_epoch"]:
            self.save(epoch, step)

    def save_weights(self, name: str) -> None:
        """One weights file in the folder; a full disk names the folder and the bytes needed."""
        try:
            save_model(self.model, self.folder / name, verbose=False)
        except OSError as error:
            if not checkpoints.no_space(error):
                raise
            needed = sum(int(w.numpy().nbytes) for w in self.model.weights)
            raise checkpoints.space_error(self.folder, name, needed, "resumable_fit") from error

    def epoch_end(self, epoch: int, logs: dict | None) -> None:
        logs = {k: float(v) for k, v in (logs or {}).items()}
        history = self.meta["history"]
        del history[epoch:]  # an epoch redone after a kill replaces its old entry
        history.append(logs)
        self.average()
        # The per-epoch and best files first, the state last: if a kill falls in
        # between, the restart redoes the end of this epoch and writes them again.
        self.save_weights(EPOCH_FILE.format(epoch=epoch + 1))
        value = logs.get(self.monitor)
        if value is None:
            if not self.warned_monitor:
                warnings.warn(
                    f"resumable_fit: monitor={self.monitor!r} is not among the logged values "
                    f"({', '.join(sorted(logs))}); no best.weights.h5 is kept.",
                    stacklevel=2,
                )
                self.warned_monitor = True
        elif self.meta["best"] is None or self.better(value, self.meta["best"]):
            self.save_weights(BEST_FILE)
            self.meta.update(best=value, best_epoch=epoch)
        self.save(epoch + 1, 0)


def _make_callback(checkpointer: _Checkpointer) -> Any:
    import keras

    class _Callback(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
            self._epoch = epoch
            checkpointer.epoch_begin(epoch)

        def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
            checkpointer.batch_end(self._epoch, batch)

        def on_test_begin(self, logs: dict | None = None) -> None:
            checkpointer.average()  # validation scores the model the epoch's files will hold

        def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
            checkpointer.epoch_end(epoch, logs)

    return _Callback()


def _progress_bar(epochs: int) -> Any:
    from mgtutor.progress import ProgressBar

    # One line per epoch, so that a notebook (or a child's output shown in one) keeps no bar redraws.
    class _RunProgbar(ProgressBar):
        # The rest of an interrupted epoch is a fit of its own, whose `epochs` is that
        # epoch's number: the bar would read "Epoch 2/2" in a 3-epoch run.
        def set_params(self, params: dict) -> None:
            super().set_params({**params, "epochs": epochs})

    return _RunProgbar()


# --------------------------------------------------------------------------- resumable_fit


def _check_model(model: Any, strategy: Any) -> Any:
    """The strategy to train under, once the model is known to be compiled under it."""
    import keras

    if not isinstance(model, keras.Model):
        raise TypeError(f"model must be a keras.Model, got {type(model).__name__}.")
    if not getattr(model, "compiled", False) or model.optimizer is None:
        raise ValueError(
            f"model {model.name!r} is not compiled; call model.compile(optimizer=..., loss=...) "
            "first (inside strategy.scope() when training with a strategy)."
        )
    if getattr(model.optimizer, "use_ema", False):
        raise ValueError(
            "the optimizer has use_ema=True: fit swaps the averaged weights in when it ends, and "
            "a resumed run ends a fit at the restart point, so it would not match an "
            "uninterrupted run. Compile with use_ema=False for resumable training."
        )
    if strategy is None:
        return model.distribute_strategy
    if model.distribute_strategy is not strategy:
        raise ValueError(
            f"model {model.name!r} was not built under this strategy. Build and compile it "
            "inside `with strategy.scope():`, then pass the same strategy."
        )
    return strategy


def _check_fit_kwargs(fit_kwargs: dict[str, Any]) -> None:
    for name, why in _OWN_ARGUMENTS.items():
        if name in fit_kwargs:
            raise TypeError(f"resumable_fit does not take {name}=: {why}.")
    unknown = sorted(set(fit_kwargs) - _PASSED_TO_FIT)
    if unknown:
        raise TypeError(
            f"resumable_fit got unexpected argument(s) {', '.join(unknown)}; besides its own it "
            f"passes these to fit: {', '.join(sorted(_PASSED_TO_FIT))}."
        )


def _check_monitor(monitor: Any, mode: Any, plan: FitPlan) -> tuple[str, str]:
    has_validation = plan.fit_options.get("validation_data") is not None
    monitor = monitor or ("val_loss" if has_validation else "loss")
    if not isinstance(monitor, str):
        raise TypeError(f"monitor must be the name of a logged value such as 'val_loss', got {monitor!r}.")
    return monitor, _mode_for(monitor, mode)


def _build(model: Any, strategy: Any, plan: FitPlan, state: Any) -> None:
    """Model and optimizer variables created (a state can only be restored into them), then checked."""
    import keras

    with strategy.scope():
        if not model.built:  # keras#20712
            first = keras.tree.map_structure(lambda a: np.asarray(a)[: plan.batch_size], plan.x)
            model(first, training=False)
        if not model.optimizer.built:
            model.optimizer.build(model.trainable_variables)
    if state is not None:  # a different model is refused before anything changes
        folder = plan.checkpoint_dir
        checkpoints.check_shapes(model.variables, state[1].get("model", []), "model", folder)
        optimizer = state[1].get("optimizer", [])
        checkpoints.check_shapes(model.optimizer.variables, optimizer, "optimizer", folder)


def _restore(checkpointer: _Checkpointer, strategy: Any, state: Any, replicas: int) -> tuple[int, int] | None:
    """The saved state put back into the model and `checkpointer.meta`; where the run resumes."""
    if state is None:
        return None
    model, meta, folder = checkpointer.model, checkpointer.meta, checkpointer.folder
    saved, groups = state
    with strategy.scope():
        checkpoints.restore(model.variables, groups.get("model", []), "model", folder)
        checkpoints.restore(model.optimizer.variables, groups.get("optimizer", []), "optimizer", folder)
    meta.update({k: saved[k] for k in ("epoch", "step", "history", "best", "best_epoch", "stopped")})
    if saved.get("monitor") != meta["monitor"]:
        meta.update(best=None, best_epoch=None)  # a best of another quantity means nothing here
    if meta["step"] > 0:
        checkpointer.skip[meta["epoch"]] = meta["step"]
        checkpointer.metric_values = (groups.get("metrics", []), groups.get("metric_replicas"))
    return meta["epoch"], meta["step"]


def _announce(say: Any, plan: FitPlan, resumed_from: tuple[int, int] | None) -> None:
    folder, steps = plan.checkpoint_dir, plan.steps_per_epoch
    if resumed_from is None:
        say(
            f"resumable_fit: new run in {folder}: {plan.epochs} epochs of {steps} batches, state "
            f"saved every {plan.checkpoint_every_steps} batches and at each epoch end."
        )
    else:
        start, skip = resumed_from
        say(
            f"resumable_fit: resuming {folder} at epoch {start + 1}/{plan.epochs}, after batch "
            f"{skip} of {steps}; the {skip} batches already trained are skipped."
        )


def _train(model: Any, plan: FitPlan, checkpointer: _Checkpointer) -> Any:
    """Keras ``fit`` over what is left: the rest of an interrupted epoch, then the epochs after it."""
    import keras

    meta, start, skip = checkpointer.meta, checkpointer.meta["epoch"], checkpointer.meta["step"]
    if checkpointer.metric_values is not None and len(model.metrics_variables) != len(
        checkpointer.metric_values[0]
    ):
        # Without a strategy Keras creates the metric variables at the first step;
        # one evaluation creates them now, so the restore has somewhere to go.
        model.evaluate(_batches(plan, start, start + 1, 0).take(1), verbose=0)
    callbacks = [_make_callback(checkpointer), *plan.callbacks]
    if plan.verbose and not any(isinstance(c, keras.callbacks.ProgbarLogger) for c in plan.callbacks):
        callbacks.append(_progress_bar(plan.epochs))
    segments = []
    if skip > 0:  # the rest of the interrupted epoch: an epoch of its own length
        segments.append((start, start + 1, skip, None))
        start += 1
    if start < plan.epochs:
        segments.append((start, plan.epochs, 0, plan.steps_per_epoch))
    last = None
    for first, end, skip_batches, steps_per_epoch in segments:
        last = model.fit(
            _batches(plan, first, end, skip_batches),
            epochs=end,
            initial_epoch=first,
            steps_per_epoch=steps_per_epoch,
            shuffle=False,  # the order is already set; this only silences Keras' warning
            callbacks=callbacks,
            verbose=plan.verbose,
            **plan.fit_options,
        )
        if model.stop_training:
            meta["stopped"] = True
            checkpointer.save(meta["epoch"], meta["step"])
            break
    return last


def _run(model: Any, strategy: Any, plan: FitPlan, monitor: str, mode: str) -> Any:
    """The run, holding its checkpoint folder: a second live run on it is refused before anything."""
    lock = runlock.take(plan.checkpoint_dir, "resumable_fit")
    try:
        return _run_held(model, strategy, plan, monitor, mode, lock)
    finally:
        lock.release()


def _run_held(model: Any, strategy: Any, plan: FitPlan, monitor: str, mode: str, lock: Any) -> Any:
    """Restore the state a checkpoint holds (refusing another run's), then train what is left."""
    import keras
    import tensorflow as tf

    replicas = int(strategy.num_replicas_in_sync)
    folder = plan.checkpoint_dir
    say = print if plan.verbose else (lambda *_: None)
    notes = [lock.stale_note("resumable_fit")]
    state = checkpoints.read_state(folder) if folder.is_dir() else None
    if state is not None:
        checkpoints.check_same_settings(folder, state[0], plan.settings)
        allow, who = plan.resume_on_other_replicas, "resumable_fit"
        notes.append(checkpoints.check_other_replicas(state[0], replicas, model, folder, who, allow))

    keras.utils.set_random_seed(plan.seed)
    _build(model, strategy, plan, state)
    files = {"state": [*model.variables, *model.optimizer.variables], "epoch files": model.weights * 2}
    checkpoints.check_room(folder, files, "resumable_fit")
    tf.config.experimental.enable_op_determinism()
    meta = checkpoints.new_state(
        plan.settings, replicas=replicas, best=None, best_epoch=None, monitor=monitor, keras=keras.__version__
    )
    checkpointer = _Checkpointer(model, folder, meta, plan.checkpoint_every_steps, monitor, mode)
    resumed_from = _restore(checkpointer, strategy, state, replicas)
    for note in filter(None, notes):
        say(note)
    params = {"epochs": plan.epochs, "steps": plan.steps_per_epoch, "verbose": plan.verbose}
    if meta["stopped"] or meta["epoch"] >= plan.epochs:
        why = "stopped early (stop_training)" if meta["stopped"] else f"reached epoch {meta['epoch']}"
        say(f"resumable_fit: the run in {folder} already {why}; restored its final weights.")
        return checkpoints.history_of(model, meta, params, resumed_from)
    _announce(say, plan, resumed_from)
    last = _train(model, plan, checkpointer)
    params = {**(getattr(last, "params", None) or {}), "epochs": plan.epochs, "steps": plan.steps_per_epoch}
    return checkpoints.history_of(model, meta, params, resumed_from)


@fit_signature(RESUMABLE_FIT, rest="fit_kwargs")
def resumable_fit(
    model: Any, x: Any, y: Any, *, strategy: Any = None, monitor: str | None = None, mode: str = "auto",
    **options: Any,
) -> Any:
    """``model.fit(x, y, ...)`` that a restart with the same call continues where it was killed.

    Every `checkpoint_every_steps` batches and at each epoch end, the whole training
    state goes to ``checkpoint_dir/resume-state.npz`` (atomically); each epoch
    also leaves ``epoch-NN.weights.h5`` and, when `monitor` improved,
    ``best.weights.h5`` (`monitor` defaults to ``val_loss`` with validation
    data, else ``loss``). Run it again after a kill and it restores the state,
    skips the batches already trained and finishes: with the same arguments,
    the final weights equal those of an uninterrupted run. Run it once more
    after it finished and it only restores the final weights.

    It seeds everything with `seed` and turns on TensorFlow op determinism (for
    the whole process). `batch_size` is the global batch; under `strategy` (the
    one the model was built and compiled in; by default the model's own) it
    must divide by the replica count. The History covers the whole run, epochs
    trained before a restart included (``history.resumed_from`` says where
    this call started). Other keyword arguments go to ``fit``: verbose,
    callbacks, validation_data, validation_batch_size, validation_freq,
    validation_steps, class_weight. On several replicas, BatchNormalization's
    moving statistics (one copy per replica, each updated from its own slice)
    are averaged before every save and validation, so the files hold the
    statistics of all the data and a resumed run stays bit-identical. A resume
    mid-epoch runs ``fit`` twice (the rest of that epoch, then the epochs after
    it), so `callbacks` see two ``on_train_begin``/``on_train_end`` pairs in
    that process. `accumulation_steps` takes 1 only (more is refused: use
    ``Trainer.fit(..., accumulation_steps=k)``, see `plan.ACCUMULATION_REFUSED`). The name
    ``save_every_steps`` (before issue 39) still works, with a warning. A second run on the
    same `checkpoint_dir` while this one lives is refused (`runlock`); a checkpoint written on
    another replica count is refused where the model's step depends on the split
    (`checkpoints.check_other_replicas`; `resume_on_other_replicas` goes on anyway).
    """

    fit_kwargs = {name: options.pop(name) for name in list(options) if name not in RESUMABLE_FIT.options}
    # The warning names the caller's line: above this call, `fit_signature`'s wrapper and the caller.
    every = options["checkpoint_every_steps"]
    every = renamed(fit_kwargs, "save_every_steps", "checkpoint_every_steps", every, 50, stacklevel=4)
    strategy = _check_model(model, strategy)
    _check_fit_kwargs(fit_kwargs)
    replicas = int(strategy.num_replicas_in_sync)
    options = FitOptions(
        x=x, y=y, **{**options, "checkpoint_every_steps": every}, callbacks=fit_kwargs.pop("callbacks", None),
        verbose=fit_kwargs.pop("verbose", "auto"), fit_options=fit_kwargs,
    )  # fmt: skip
    plan = plan_fit(options, engine=RESUMABLE_FIT, replicas=replicas)
    if plan.checkpoint_dir is None:
        raise TypeError("checkpoint_dir is required: a folder for the run's state, e.g. 'runs/cifar10'.")
    monitor, mode = _check_monitor(monitor, mode, plan)
    return _run(model, strategy, plan, monitor, mode)
