"""`Trainer.fit`'s arguments, every one checked before any work, as a `Plan`."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import keras
import numpy as np

from mgtutor._checks import check_whole
from mgtutor.data_parallel import check_batch_divisible
from mgtutor.training import checkpoints


def check_arrays(x: Any, y: Any, name: str) -> tuple[np.ndarray, np.ndarray]:
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


def check_verbose(verbose: Any) -> int:
    if verbose == "auto":
        return _auto_verbose()
    if isinstance(verbose, bool) or verbose not in (0, 1, 2):
        raise ValueError(f"verbose must be 'auto', 0, 1 or 2, got {verbose!r}.")
    return int(verbose)


@dataclass(frozen=True)
class Plan:
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


def plan_fit(
    num_replicas: int,
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
) -> Plan:
    """Every argument of `fit` checked, before any work."""
    x, y = check_arrays(x, y, "fit")
    batch_size = check_whole("batch_size", batch_size, 1)
    epochs = check_whole("epochs", epochs, 1)
    seed = check_whole("seed", seed, 0)
    if not isinstance(shuffle, bool):
        raise TypeError(f"shuffle must be True or False, got {shuffle!r}.")
    check_batch_divisible(batch_size, num_replicas)
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
        x_val, y_val = check_arrays(*validation_data, "validation_data")
        val_batch = check_whole("validation_batch_size", validation_batch_size or batch_size, 1)
        check_batch_divisible(val_batch, num_replicas)
        validation = (x_val, y_val, val_batch)
    callbacks = list(callbacks or [])
    for callback in callbacks:
        if not isinstance(callback, keras.callbacks.Callback):
            raise TypeError(f"callbacks must be keras.callbacks.Callback objects, got {callback!r}.")
    checkpoints.refuse_backup_and_restore(
        callbacks, "Pass checkpoint_dir=... instead: it resumes mid-epoch, on every worker."
    )
    folder = checkpoints.checkpoint_folder(checkpoint_dir) if checkpoint_dir is not None else None
    if checkpoint_every_steps is not None:
        checkpoint_every_steps = check_whole("checkpoint_every_steps", checkpoint_every_steps, 1)
        if folder is None:
            raise ValueError("checkpoint_every_steps needs checkpoint_dir=... (where to save).")
    settings = {
        "batch_size": batch_size, "steps_per_epoch": steps, "seed": seed, "shuffle": shuffle,
        "num_examples": len(x), "data": checkpoints.fingerprint((x, y), len(x)),
    }  # fmt: skip
    return Plan(
        x=x, y=y, batch_size=batch_size, epochs=epochs, steps=steps, validation=validation,
        shuffle=shuffle, seed=seed, callbacks=callbacks, verbose=check_verbose(verbose),
        checkpoint_dir=folder, checkpoint_every=checkpoint_every_steps,
        log_dir=None if log_dir is None else checkpoints.checkpoint_folder(log_dir, "log_dir"),
        settings=settings,
    )  # fmt: skip
