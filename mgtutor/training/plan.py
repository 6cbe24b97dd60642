"""`FitPlan`: one fit's arguments, checked once, before any work.

Both engines (`RESUMABLE_FIT`, Keras ``fit`` made resumable; `TRAINER`, a ``strategy.run`` loop) gather
what their caller asked into `FitOptions`, one typed record with one name per option, and `plan_fit`
checks it against what the `Engine` can do; each engine then reads only the `FitPlan`. A new training
option is one field of `FitOptions` and of `FitPlan` and its check in `plan_fit`.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import keras
import numpy as np

from mgtutor.data_parallel import check_batch_divisible
from mgtutor.support.checks import check_whole
from mgtutor.training import checkpoints


@dataclass(frozen=True, kw_only=True)
class Validation:
    """The data scored after each epoch, every example once, in batches of `batch_size`."""

    x: np.ndarray
    y: np.ndarray
    batch_size: int


@dataclass(frozen=True)
class Engine:
    """What an engine can do, which decides what a fit may ask of it."""

    name: str
    whole_batches: bool  # True: an epoch trains only full batches (the Trainer slices them per replica)
    plain_arrays: bool  # True: x and y must be NumPy arrays, not nests
    accumulates: bool  # False: accumulation_steps > 1 is refused, with `ACCUMULATION_REFUSED`
    backup_fix: str  # what to do instead of Keras' BackupAndRestore


# Why resumable_fit takes accumulation_steps=1 only (measured with Keras 3.15.1).
ACCUMULATION_REFUSED = (
    "resumable_fit does not accumulate gradients. Keras' own gradient_accumulation_steps fails under "
    "MirroredStrategy fit (\"merge_call called while defining a new graph\", keras#20582), and on one "
    "replica it averages a short last batch like a full one. Use mgtutor.Trainer(model, optimizer, loss, "
    "metrics, strategy=...).fit(x, y, batch_size=..., accumulation_steps=k, checkpoint_dir=...): one "
    "all-reduce per k batches, the exact mean over them, on 1 or N devices and N workers, resumable."
)
RESUMABLE_FIT = Engine(
    "resumable_fit", whole_batches=False, plain_arrays=False, accumulates=False,
    backup_fix="Remove the BackupAndRestore callback: resumable_fit saves the whole state and resumes "
    "mid-epoch.",
)  # fmt: skip
TRAINER = Engine(
    "Trainer.fit", whole_batches=True, plain_arrays=True, accumulates=True,
    backup_fix="Pass checkpoint_dir=... instead: it resumes mid-epoch.",
)  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class FitOptions:
    """A fit as its caller asked it, unchecked: the options both engines share, one name each.

    `fit_options` are Keras ``fit``'s own (resumable_fit hands them on; Keras checks them).
    """

    x: Any
    y: Any
    batch_size: Any
    epochs: Any
    sample_weight: Any = None
    seed: Any = 0
    steps_per_epoch: Any = None
    shuffle: Any = True
    callbacks: Any = None
    verbose: Any = "auto"
    checkpoint_dir: Any = None
    checkpoint_every_steps: Any = None
    validation_data: Any = None
    validation_batch_size: Any = None
    log_dir: Any = None
    accumulation_steps: Any = 1
    fit_options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class FitPlan:
    """One fit, every argument checked: what the engines train, in which order, and where they save.

    `arrays` is ``(x, y)`` or ``(x, y, sample_weight)``, each an array or a nest of arrays with
    `num_examples` rows. `batch_size` is the global batch (all replicas together). With
    `whole_batches` an epoch trains only full batches (`steps_per_epoch` of them); without, its
    last batch holds what is left. `settings` identify the run: a checkpoint of other settings is
    refused. `fit_options` are what `resumable_fit` hands to Keras ``fit`` as they are (its
    validation among them: Keras checks those). `accumulation_steps` batches make one optimizer
    update (one all-reduce): an epoch is `updates_per_epoch` updates, its last one of the batches
    left when `steps_per_epoch` is not a multiple.
    """

    arrays: tuple
    num_examples: int
    batch_size: int
    epochs: int
    steps_per_epoch: int
    whole_batches: bool
    shuffle: bool
    seed: int
    callbacks: tuple
    verbose: int
    checkpoint_dir: Path | None
    checkpoint_every_steps: int | None
    validation: Validation | None
    log_dir: Path | None
    settings: dict[str, Any]
    accumulation_steps: int = 1
    fit_options: dict[str, Any] = field(default_factory=dict)  # resumable_fit's, handed to Keras fit

    @property
    def updates_per_epoch(self) -> int:
        return -(-self.steps_per_epoch // self.accumulation_steps)

    @property
    def x(self) -> Any:
        return self.arrays[0]

    @property
    def y(self) -> Any:
        return self.arrays[1]


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
    if not isinstance(o.shuffle, bool):
        raise TypeError(f"shuffle must be True or False, got {o.shuffle!r}.")
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
    return FitPlan(
        arrays=arrays, num_examples=n, batch_size=batch_size, epochs=epochs, steps_per_epoch=steps,
        whole_batches=engine.whole_batches, shuffle=o.shuffle, seed=seed,
        callbacks=_check_callbacks(o.callbacks, engine.backup_fix), verbose=_check_verbose(o.verbose),
        checkpoint_dir=folder, checkpoint_every_steps=every, validation=validation,
        log_dir=None if o.log_dir is None else checkpoints.checkpoint_folder(o.log_dir, "log_dir"),
        settings=settings, accumulation_steps=accumulation, fit_options=dict(o.fit_options),
    )  # fmt: skip
