"""`FitOptions`, a fit's options written once; `FitPlan`, them checked, before any work.

Both engines (`RESUMABLE_FIT`, Keras ``fit`` made resumable; `TRAINER`, a ``strategy.run`` loop) take
their options as fields of `FitOptions`: each `Engine` names the fields it takes, and `fit_signature`
derives its function's signature from them (`mgtutor.support.options`). `plan_fit` checks them against
what the engine can do; each engine then reads only the `FitPlan`. A new training option is one field
of `FitOptions`, its name in the engines that take it, and its check in `plan_fit`. `Trainer`'s own
parts (model, optimizer, metrics, strategy) are checked here too, before it builds anything.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from mgtutor.data_parallel import check_batch_divisible
from mgtutor.support.checks import check_whole
from mgtutor.support.options import REQUIRED, takes_options
from mgtutor.training import checkpoints


@dataclass(frozen=True, kw_only=True)
class Validation:
    """The data scored after each epoch, every example once, in batches of `batch_size`."""

    x: np.ndarray
    y: np.ndarray
    batch_size: int


@dataclass(frozen=True, kw_only=True)
class FitOptions:
    """A fit's options, one name each, in the order `Trainer.fit` lists them: the one list both engines'
    signatures are derived from. As a caller passes them they are unchecked; `FitPlan.options` holds
    them checked (`steps_per_epoch` counted, `verbose` 0, 1 or 2, `callbacks` a tuple, folders `Path`s).

    `fit_options` are Keras ``fit``'s own (resumable_fit hands them on; Keras checks them).
    """

    x: Any
    y: Any
    batch_size: int
    epochs: int = 1
    steps_per_epoch: int | None = None
    validation_data: tuple[np.ndarray, np.ndarray] | None = None
    validation_batch_size: int | None = None
    shuffle: bool = True
    seed: int = 0
    sample_weight: Any = None
    callbacks: Sequence[keras.callbacks.Callback] | None = None
    verbose: int | str = "auto"
    checkpoint_dir: str | os.PathLike | None = None
    checkpoint_every_steps: int | None = None
    log_dir: str | os.PathLike | None = None
    accumulation_steps: int = 1
    resume_on_other_replicas: bool = False
    fit_options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Engine:
    """What an engine can do, which decides what a fit may ask of it, and the options it takes."""

    name: str
    whole_batches: bool  # True: an epoch trains only full batches (the Trainer slices them per replica)
    plain_arrays: bool  # True: x and y must be NumPy arrays, not nests
    accumulates: bool  # False: accumulation_steps > 1 is refused, with `ACCUMULATION_REFUSED`
    backup_fix: str  # what to do instead of Keras' BackupAndRestore
    options: tuple[str, ...] = ()  # the `FitOptions` its function takes by keyword (x and y are its own)
    defaults: tuple[tuple[str, Any], ...] = ()  # (option, default) where its default is not FitOptions'


def fit_signature(engine: Engine, rest: str | None = None) -> Callable[[Callable], Callable]:
    """Decorate an engine's ``def fit(..., x, y, **options)``: its signature, `engine`'s options."""
    return takes_options(FitOptions, engine.options, defaults=dict(engine.defaults), rest=rest)


# Why resumable_fit takes accumulation_steps=1 only (measured with Keras 3.15.1).
ACCUMULATION_REFUSED = (
    "resumable_fit does not accumulate gradients. Keras' own gradient_accumulation_steps fails under "
    "MirroredStrategy fit (\"merge_call called while defining a new graph\", keras#20582), and on one "
    "replica it averages a short last batch like a full one. Use mgtutor.Trainer(model, optimizer, loss, "
    "metrics, strategy=...).fit(x, y, batch_size=..., accumulation_steps=k, checkpoint_dir=...): one "
    "all-reduce per k batches, the exact mean over them, on 1 or N devices and N workers, resumable."
)
# resumable_fit: callbacks, verbose and validation go to Keras fit with its own options (`fit_options`).
RESUMABLE_FIT = Engine(
    "resumable_fit", whole_batches=False, plain_arrays=False, accumulates=False,
    backup_fix="Remove the BackupAndRestore callback: resumable_fit saves the whole state and resumes "
    "mid-epoch.",
    options=("batch_size", "epochs", "seed", "sample_weight", "checkpoint_dir", "checkpoint_every_steps",
             "accumulation_steps", "resume_on_other_replicas"),
    defaults=(("epochs", REQUIRED), ("checkpoint_dir", REQUIRED), ("checkpoint_every_steps", 50)),
)  # fmt: skip
TRAINER = Engine(
    "Trainer.fit", whole_batches=True, plain_arrays=True, accumulates=True,
    backup_fix="Pass checkpoint_dir=... instead: it resumes mid-epoch.",
    options=tuple(name for name in FitOptions.__dataclass_fields__
                  if name not in ("x", "y", "sample_weight", "fit_options")),
)  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class FitPlan:
    """One fit, every option checked: what the engines train, in which order, and where they save.

    `options` are the fit's options checked; the plan reads them as its own (``plan.batch_size`` is
    ``plan.options.batch_size``, the global batch of all replicas together). `arrays` is ``(x, y)`` or
    ``(x, y, sample_weight)``, each an array or a nest of arrays with `num_examples` rows. With
    `whole_batches` an epoch trains only full batches (`steps_per_epoch` of them); without, its last
    batch holds what is left. `settings` identify the run: a checkpoint of other settings is refused.
    `fit_options` are what `resumable_fit` hands to Keras ``fit`` as they are (its validation among
    them: Keras checks those). `accumulation_steps` batches make one optimizer update (one all-reduce):
    an epoch is `updates_per_epoch` updates, its last one of the batches left when `steps_per_epoch`
    is not a multiple.
    """

    options: FitOptions
    arrays: tuple
    num_examples: int
    whole_batches: bool
    validation: Validation | None
    settings: dict[str, Any]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "options":  # copy and pickle ask before `options` exists
            raise AttributeError(name)
        return getattr(self.options, name)

    @property
    def updates_per_epoch(self) -> int:
        return -(-self.steps_per_epoch // self.accumulation_steps)


# --------------------------------------------------------------------------- the data


def check_arrays(x: Any, y: Any, name: str) -> tuple[np.ndarray, np.ndarray]:
    """`x` and `y` as NumPy arrays of the same non-zero length (the Trainer's data and validation)."""
    for part, value in (("x", x), ("y", y)):
        if not isinstance(value, np.ndarray):
            raise TypeError(
                f"{name}: {part} must be a NumPy array, got {type(value).__name__}. The trainer "
                "replays an exact batch order, which needs the data in memory (np.asarray(...))."
            )
    _num_examples((x, y), ("x", "y"))
    return x, y


def _leaves(data: Any, name: str) -> list[np.ndarray]:
    if data is None:
        raise ValueError(f"{name} is required: training replays in-memory arrays (x, y).")
    leaves = keras.tree.flatten(data)
    if not leaves or not all(isinstance(a, np.ndarray) or hasattr(a, "__array__") for a in leaves):
        raise TypeError(
            f"{name} must be a NumPy array (or a list/dict of them), got {type(data).__name__}. "
            "Training replays an exact batch order, which needs the data in memory; "
            "convert a tf.data pipeline with np.asarray or use model.fit with BackupAndRestore."
        )
    return [np.asarray(a) for a in leaves]


def _num_examples(arrays: tuple, names: tuple[str, ...]) -> int:
    """The rows every array of `arrays` holds, refusing scalars, empty data and unequal lengths."""
    lengths: dict[str, set[int]] = {}
    for name, data in zip(names, arrays, strict=True):
        for leaf in _leaves(data, name):
            if leaf.ndim == 0:
                raise ValueError(f"{name} must have a batch axis; got a scalar.")
            lengths.setdefault(name, set()).add(len(leaf))
    if len(set().union(*lengths.values())) != 1:
        found = ", ".join(f"{name}: {'/'.join(map(str, sorted(n)))}" for name, n in lengths.items())
        raise ValueError(f"x, y (and sample_weight) must hold as many examples each; found {found}.")
    n = lengths["x"].pop()
    if n < 1:
        raise ValueError("x is empty: there is nothing to train on.")
    return n


def _steps(n: int, batch_size: int, whole_batches: bool, steps_per_epoch: Any) -> int:
    if not whole_batches:
        return -(-n // batch_size)  # the last batch holds what is left
    full_batches = n // batch_size
    if full_batches == 0:
        raise ValueError(
            f"batch_size={batch_size} is larger than the {n} training examples; only full "
            f"batches are trained. Use batch_size <= {n}."
        )
    if steps_per_epoch is None:
        return full_batches
    steps = check_whole("steps_per_epoch", steps_per_epoch, 1)
    if steps > full_batches:
        raise ValueError(
            f"steps_per_epoch={steps} but x holds only {full_batches} full batches of "
            f"{batch_size}; use steps_per_epoch <= {full_batches} or more data."
        )
    return steps


# --------------------------------------------------------------------------- the rest


def _auto_verbose() -> int:
    # A live bar needs a terminal or a notebook; in a log (a launched worker) one line per epoch reads better.
    return 1 if sys.stdout.isatty() or "ipykernel" in sys.modules else 2


def _check_verbose(verbose: Any) -> int:
    if verbose == "auto":
        return _auto_verbose()
    if isinstance(verbose, bool) or verbose not in (0, 1, 2):
        raise ValueError(f"verbose must be 'auto', 0, 1 or 2, got {verbose!r}.")
    return int(verbose)


def _check_callbacks(callbacks: Any, backup_fix: str) -> tuple:
    callbacks = [callbacks] if isinstance(callbacks, keras.callbacks.Callback) else list(callbacks or [])
    for callback in callbacks:
        if not isinstance(callback, keras.callbacks.Callback):
            raise TypeError(f"callbacks must be keras.callbacks.Callback objects, got {callback!r}.")
    checkpoints.refuse_backup_and_restore(callbacks, backup_fix)
    return tuple(callbacks)


def _check_validation(data: Any, batch_size: Any, replicas: int) -> Validation:
    if not isinstance(data, (tuple, list)) or len(data) != 2:
        raise TypeError("validation_data must be a tuple (x_val, y_val) of NumPy arrays.")
    x_val, y_val = check_arrays(*data, "validation_data")
    batch = check_whole("validation_batch_size", batch_size, 1)
    check_batch_divisible(batch, replicas)
    return Validation(x=x_val, y=y_val, batch_size=batch)


def _check_checkpoints(checkpoint_dir: Any, every: Any) -> tuple[Path | None, int | None]:
    folder = checkpoints.checkpoint_folder(checkpoint_dir) if checkpoint_dir is not None else None
    if every is None:
        return folder, None
    every = check_whole("checkpoint_every_steps", every, 1)
    if folder is None:
        raise ValueError("checkpoint_every_steps needs checkpoint_dir=... (where to save).")
    return folder, every


def _check_accumulation(steps: Any, engine: Engine) -> int:
    fix = "Pass a whole number such as accumulation_steps=4 (1, the default: one update per batch)."
    steps = check_whole("accumulation_steps", steps, 1, fix)
    if steps > 1 and not engine.accumulates:
        raise ValueError(f"accumulation_steps={steps}: {ACCUMULATION_REFUSED}")
    return steps


def plan_fit(options: FitOptions, *, engine: Engine, replicas: int) -> FitPlan:
    """Every option of a fit checked, in the order a reader would, before any work or write."""
    o = options
    if engine.plain_arrays:
        check_arrays(o.x, o.y, "fit")
    arrays = (o.x, o.y) if o.sample_weight is None else (o.x, o.y, o.sample_weight)
    n = _num_examples(arrays, ("x", "y", "sample_weight")[: len(arrays)])
    batch_size = check_whole("batch_size", o.batch_size, 1)
    epochs = check_whole("epochs", o.epochs, 1)
    seed = check_whole("seed", o.seed, 0)
    for name in ("shuffle", "resume_on_other_replicas"):
        if not isinstance(getattr(o, name), bool):
            raise TypeError(f"{name} must be True or False, got {getattr(o, name)!r}.")
    check_batch_divisible(batch_size, replicas)
    steps = _steps(n, batch_size, engine.whole_batches, o.steps_per_epoch)
    accumulation = _check_accumulation(o.accumulation_steps, engine)
    validation = None
    if o.validation_data is not None:
        validation = _check_validation(o.validation_data, o.validation_batch_size or batch_size, replicas)
    folder, every = _check_checkpoints(o.checkpoint_dir, o.checkpoint_every_steps)
    settings = {
        "batch_size": batch_size, "steps_per_epoch": steps, "seed": seed, "shuffle": o.shuffle,
        "num_examples": n, "data": checkpoints.fingerprint(arrays, n), "accumulation_steps": accumulation,
    }  # fmt: skip
    checked = replace(
        o, batch_size=batch_size, epochs=epochs, steps_per_epoch=steps, seed=seed,
        callbacks=_check_callbacks(o.callbacks, engine.backup_fix), verbose=_check_verbose(o.verbose),
        checkpoint_dir=folder, checkpoint_every_steps=every, accumulation_steps=accumulation,
        log_dir=None if o.log_dir is None else checkpoints.checkpoint_folder(o.log_dir, "log_dir"),
        fit_options=dict(o.fit_options),
    )  # fmt: skip
    return FitPlan(
        options=checked, arrays=arrays, num_examples=n, whole_batches=engine.whole_batches,
        validation=validation, settings=settings,
    )  # fmt: skip


# --------------------------------------------------------------------------- the Trainer's parts


def check_trainer_parts(model: Any, optimizer: Any, metrics: Any) -> None:
    """`Trainer`'s model, optimizer and metrics, checked before anything is built."""
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


def _strategy_of(variable: Any) -> Any:
    """The strategy a (Keras) variable was created under, or None for a plain variable."""
    value = getattr(variable, "value", variable)
    if isinstance(value, tf.distribute.DistributedValues):
        return value.distribute_strategy
    return None


def trainer_strategy(model: keras.Model, optimizer: Any, strategy: Any) -> Any:
    """The strategy `Trainer` trains under: `strategy`, or the one the model was built under, once the
    model's and the optimizer's variables are known to be that strategy's."""
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
    return strategy
