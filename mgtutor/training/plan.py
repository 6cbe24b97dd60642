"""`FitPlan`: one fit's arguments, keyword-only and checked once, before any work.

Both engines build it with `plan_fit` (`resumable_fit` around Keras ``fit``, `Trainer.fit` around a
``strategy.run`` loop) and read only it afterwards. A new training option (gradient accumulation,
mixed precision) is one field of `FitPlan` and its check in `plan_fit`; each engine then reads
``plan.<option>`` where it trains.
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
    save_every_steps: int | None
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


def _check_checkpoints(checkpoint_dir: Any, every: Any, name: str) -> tuple[Path | None, int | None]:
    folder = checkpoints.checkpoint_folder(checkpoint_dir) if checkpoint_dir is not None else None
    if every is None:
        return folder, None
    every = check_whole(name, every, 1)
    if folder is None:
        raise ValueError(f"{name} needs checkpoint_dir=... (where to save).")
    return folder, every


def _check_accumulation(steps: Any, refused: str | None) -> int:
    fix = "Pass a whole number such as accumulation_steps=4 (1, the default: one update per batch)."
    steps = check_whole("accumulation_steps", steps, 1, fix)
    if steps > 1 and refused:
        raise ValueError(f"accumulation_steps={steps}: {refused}")
    return steps


def plan_fit(
    *,
    replicas: int,
    x: Any,
    y: Any,
    sample_weight: Any = None,
    plain_arrays: bool = False,
    batch_size: Any,
    epochs: Any,
    seed: Any = 0,
    whole_batches: bool,
    steps_per_epoch: Any = None,
    shuffle: Any = True,
    callbacks: Any = None,
    verbose: Any = "auto",
    checkpoint_dir: Any = None,
    save_every_steps: Any = None,
    save_every_name: str = "checkpoint_every_steps",
    validation_data: Any = None,
    validation_batch_size: Any = None,
    log_dir: Any = None,
    backup_fix: str = "Pass checkpoint_dir=... instead: it resumes mid-epoch.",
    fit_options: dict[str, Any] | None = None,
    accumulation_steps: Any = 1,
    accumulation_refused: str | None = None,
) -> FitPlan:
    """Every argument of a fit checked, in the order a reader would, before any work or write.

    `plain_arrays`: x and y must be NumPy arrays (the Trainer slices them per replica), not nests.
    `accumulation_refused`: why this engine cannot accumulate (then only accumulation_steps=1 is taken).
    """
    if plain_arrays:
        check_arrays(x, y, "fit")
    arrays = (x, y) if sample_weight is None else (x, y, sample_weight)
    n = _num_examples(arrays, ("x", "y", "sample_weight")[: len(arrays)])
    batch_size = check_whole("batch_size", batch_size, 1)
    epochs = check_whole("epochs", epochs, 1)
    seed = check_whole("seed", seed, 0)
    if not isinstance(shuffle, bool):
        raise TypeError(f"shuffle must be True or False, got {shuffle!r}.")
    check_batch_divisible(batch_size, replicas)
    steps = _steps(n, batch_size, whole_batches, steps_per_epoch)
    accumulation = _check_accumulation(accumulation_steps, accumulation_refused)
    validation = None
    if validation_data is not None:
        validation = _check_validation(validation_data, validation_batch_size or batch_size, replicas)
    folder, every = _check_checkpoints(checkpoint_dir, save_every_steps, save_every_name)
    settings = {
        "batch_size": batch_size, "steps_per_epoch": steps, "seed": seed, "shuffle": shuffle,
        "num_examples": n, "data": checkpoints.fingerprint(arrays, n), "accumulation_steps": accumulation,
    }  # fmt: skip
    return FitPlan(
        arrays=arrays, num_examples=n, batch_size=batch_size, epochs=epochs, steps_per_epoch=steps,
        whole_batches=whole_batches, shuffle=shuffle, seed=seed,
        callbacks=_check_callbacks(callbacks, backup_fix), verbose=_check_verbose(verbose),
        checkpoint_dir=folder, save_every_steps=every, validation=validation,
        log_dir=None if log_dir is None else checkpoints.checkpoint_folder(log_dir, "log_dir"),
        settings=settings, accumulation_steps=accumulation, fit_options=dict(fit_options or {}),
    )  # fmt: skip
