"""The one checkpoint/resume engine, shared by `resumable_fit` (Keras ``fit``) and `Trainer` (custom loop).

A run's state is one file, ``checkpoint_dir/resume-state.npz``, written atomically: every variable
(model, optimizer, metrics), where the run is (epoch, batch), its History so far and the settings it
started with. Each epoch's order (`mgtutor.training.feeding.epoch_rows`) is a function of (seed, epoch)
only, so a restarted process replays exactly the batches that were left.
"""

from __future__ import annotations

import json
import os
import warnings
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from mgtutor.support.files import ModelFileError, atomic_write
from mgtutor.training.worker import is_chief

STATE_FILE = "resume-state.npz"
FORMAT = 1


# --------------------------------------------------------------------------- arguments


def checkpoint_folder(path: Any, name: str = "checkpoint_dir") -> Path:
    """`path` as a folder we may create and write into, checked before any work."""
    if isinstance(path, bytes) or not isinstance(path, (str, os.PathLike)) or str(path) == "":
        raise TypeError(
            f"{name} must be a folder path (str or pathlib.Path), got {path!r}; "
            f"pass e.g. {name}='runs/cifar10'."
        )
    folder = Path(os.fspath(path)).expanduser()
    if folder.exists() and not folder.is_dir():
        raise NotADirectoryError(
            f"{name} {str(folder)!r} is a file; give a folder (it is created if missing)."
        )
    existing = folder
    while not existing.exists():  # the nearest folder that exists is the one we write into
        existing = existing.parent
    if not os.access(existing, os.W_OK | os.X_OK):
        raise PermissionError(
            f"{name} {str(folder)!r}: {str(existing)!r} is not writable by this user. "
            "Choose a folder you own."
        )
    return folder


def refuse_backup_and_restore(callbacks: list, fix: str) -> None:
    """Keras' BackupAndRestore would overwrite the starting epoch this engine restores."""
    import keras

    if any(isinstance(c, keras.callbacks.BackupAndRestore) for c in callbacks):
        raise ValueError(
            f"callbacks: BackupAndRestore would fight the run's own checkpoints (and it only resumes at "
            f"epoch starts). {fix}"
        )


def fingerprint(arrays: Any, n: int) -> str:
    """A cheap checksum of up to 64 examples spread over the data, to notice other data on resume."""
    import keras

    rows = np.unique(np.linspace(0, n - 1, num=min(n, 64)).astype(np.int64))
    checksum = 0
    for leaf in keras.tree.flatten(arrays):
        leaf = np.asarray(leaf)
        sample = np.ascontiguousarray(leaf[rows])
        checksum = zlib.crc32(f"{sample.dtype}{leaf.shape}".encode(), checksum)
        checksum = zlib.crc32(sample.tobytes(), checksum)
    return f"{checksum:08x}"


# --------------------------------------------------------------------------- the state file


def new_state(settings: dict, **extra: Any) -> dict:
    """A fresh run's state: the settings it starts with, at epoch 0, batch 0."""
    return {"format": FORMAT, "settings": settings, "epoch": 0, "step": 0, "history": [], "stopped": False,
            **extra}  # fmt: skip


def write_state(folder: Path, state: dict, groups: dict[str, list], write: bool = True) -> Path:
    """Every variable of `groups` and `state` into the state file, atomically.

    The values are read on every worker of a multi-worker job (summed metric
    variables are read with a collective every worker joins); only the one with
    `write` writes them.
    """
    arrays = {"meta": np.array(json.dumps(state))}
    for group, variables in groups.items():
        for i, variable in enumerate(variables):
            arrays[f"{group}.{i:05d}"] = np.asarray(variable.numpy())
    path = folder / STATE_FILE
    if write:
        folder.mkdir(parents=True, exist_ok=True)
        with atomic_write(path, ".npz") as temp, open(temp, "wb") as handle:
            np.savez(handle, **arrays)
    return path


def read_state(folder: Path) -> tuple[dict, dict[str, list[np.ndarray]]] | None:
    """The state and the saved values by group, or None if `folder` holds no run."""
    path = folder / STATE_FILE
    if not path.exists():
        return None
    try:
        with np.load(path, allow_pickle=False) as npz:
            state = json.loads(str(npz["meta"]))
            groups: dict[str, list[np.ndarray]] = {}
            for key in sorted(k for k in npz.files if k != "meta"):
                groups.setdefault(key.split(".", 1)[0], []).append(npz[key])
    except (OSError, ValueError, KeyError, EOFError) as err:
        raise ModelFileError(
            f"{str(path)!r} cannot be read ({type(err).__name__}: {err}). It is written atomically, so "
            "something else damaged it. Delete it to start the run over (other files beside it, such as "
            "epoch-NN.weights.h5, are separate)."
        ) from err
    if state.get("format") != FORMAT:
        raise ModelFileError(
            f"{str(path)!r} has format {state.get('format')!r}, this mgtutor writes {FORMAT}. "
            "Delete it to start over, or resume with the mgtutor version that wrote it."
        )
    return state, groups


def resume_point(checkpoint_dir: str | os.PathLike) -> tuple[int, int] | None:
    """Where a run in `checkpoint_dir` would resume: (epoch, batches of it done), from 0; None if fresh."""
    saved = read_state(Path(os.fspath(checkpoint_dir)).expanduser())
    if saved is None:
        return None
    return int(saved[0]["epoch"]), int(saved[0]["step"])


# What a setting added later means in a checkpoint written before it existed.
_EARLIER_DEFAULTS = {"accumulation_steps": 1}


def check_same_settings(folder: Path, saved: dict, settings: dict) -> None:
    """Refuse to resume a run started with other settings, naming each difference."""
    before = {**_EARLIER_DEFAULTS, **saved.get("settings", {})}
    changed = {k: (before.get(k), v) for k, v in settings.items() if before.get(k) != v}
    if changed:
        listed = "; ".join(
            "other x/y values (their checksum differs)"
            if k == "data"
            else f"{k}: checkpoint {old!r}, now {new!r}"
            for k, (old, new) in changed.items()
        )
        raise ValueError(
            f"checkpoint_dir {str(folder)!r} holds a run with other settings ({listed}). Resume with the "
            "same arguments, or start a new run in another checkpoint_dir (or delete this one)."
        )


def warn_other_replicas(saved: dict, replicas: int, who: str) -> None:
    if saved.get("replicas", replicas) != replicas:
        warnings.warn(
            f"{who}: the checkpoint was written with {saved.get('replicas')} replica(s), this run has "
            f"{replicas}. Training continues correctly, but the result will not be bit-identical to an "
            "uninterrupted run.",
            stacklevel=3,
        )


# --------------------------------------------------------------------------- restoring


def check_shapes(variables: list, values: list[np.ndarray], what: str, folder: Path) -> None:
    """Refuse, before anything is restored, the state of another model (or optimizer, or metrics)."""
    if len(variables) != len(values):
        raise ValueError(
            f"the checkpoint in {str(folder)!r} holds {len(values)} {what} variables but this run has "
            f"{len(variables)}: it was saved from a different {what}. Build the same model (same builder "
            "and arguments, optimizer and metrics), or use a fresh checkpoint_dir."
        )
    for variable, value in zip(variables, values, strict=True):
        if tuple(variable.shape) != value.shape:
            raise ValueError(
                f"the checkpoint in {str(folder)!r} has {what} variable {getattr(variable, 'path', '?')!r} "
                f"with shape {value.shape}, this one {tuple(variable.shape)}: it was saved from a different "
                "model. Build the same model, or use a fresh checkpoint_dir."
            )


def restore(variables: list, values: list[np.ndarray], what: str, folder: Path) -> None:
    check_shapes(variables, values, what, folder)
    for variable, value in zip(variables, values, strict=True):
        variable.assign(value)


def _local_ids(strategy: Any) -> list[int]:
    """The replica ids (in the whole job) of this worker's replicas, in its devices' order."""
    ids = strategy.experimental_distribute_values_from_function(lambda ctx: ctx.replica_id_in_sync_group)
    return [int(i) for i in strategy.experimental_local_results(ids)]


class ReplicaParts:
    """One sync-on-read variable's part on every replica of every worker, saved as one array.

    A metric's sum under a strategy lives as one part per replica and is read as their sum. Reading
    the parts from other workers is an all-gather that every worker of a job joins. Eager on
    purpose: a ``tf.function`` per variable would trip TensorFlow's retracing warning.
    """

    def __init__(self, strategy: Any, variable: Any) -> None:
        self.strategy, self.variable = strategy, variable
        self.shape = (strategy.num_replicas_in_sync, *variable.shape)

    def numpy(self) -> np.ndarray:
        local = [np.asarray(c.numpy())[None] for c in self.variable.value.values]
        if len(local) == self.strategy.num_replicas_in_sync:  # one worker: every part is here
            return np.concatenate(local)
        import tensorflow as tf

        ids = _local_ids(self.strategy)
        mine = self.strategy.experimental_distribute_values_from_function(
            lambda ctx: tf.constant(local[ids.index(int(ctx.replica_id_in_sync_group))])
        )
        return np.asarray(self.strategy.gather(mine, axis=0))


def replica_parts(strategy: Any, variables: list) -> list[ReplicaParts] | None:
    """Each sync-on-read variable's parts (metric sums under a strategy), else None."""
    import tensorflow as tf

    for variable in variables:
        value = getattr(variable, "value", None)
        if not isinstance(value, tf.distribute.DistributedValues) or (
            value.synchronization != tf.VariableSynchronization.ON_READ
        ):
            return None
    return [ReplicaParts(strategy, v) for v in variables]


def _assign_parts(strategy: Any, variables: list, values: list[np.ndarray]) -> None:
    """Give each of this worker's replicas its own saved part."""
    ids = _local_ids(strategy)
    for variable, parts in zip(variables, values, strict=True):
        for replica, component in zip(ids, variable.value.values, strict=True):
            component.assign(parts[replica])


def restore_metrics(
    variables: list, totals: list, replica_values: list | None, folder: Path, strategy: Any = None
) -> bool:
    """Give the metrics back their sums; False (nothing restored) if they are other metrics."""
    if [tuple(v.shape) for v in variables] != [t.shape for t in totals]:
        return False
    # A sum assigned across replicas is split evenly among them, and each replica's next batches are
    # added to its share: the epoch's logged mean then differs in the last bit from an uninterrupted
    # run's (seen: 1.8993110656738281 vs 1.8993109464645386). Each replica's own part keeps it exact.
    parts = replica_parts(strategy, variables) if strategy is not None else None
    if (
        parts is not None
        and replica_values is not None
        and [p.shape for p in parts] == [v.shape for v in replica_values]
    ):
        _assign_parts(strategy, variables, replica_values)
        return True
    restore(variables, totals, "metric", folder)
    return True


def history_of(model: Any, state: dict, params: dict, resumed_from: tuple[int, int] | None) -> Any:
    """A Keras History of the whole run, the epochs trained before a restart included."""
    import keras

    history = keras.callbacks.History()
    history.set_model(model)
    model.history = history  # as fit leaves it
    history.set_params(params)
    history.epoch = list(range(len(state["history"])))
    history.history = {}
    for logs in state["history"]:
        for key, value in logs.items():
            history.history.setdefault(key, []).append(value)
    history.resumed_from = resumed_from
    return history


class StrategyCheckpointer:
    """`Trainer`'s run state in its file: every worker reads the values, the chief writes."""

    def __init__(self, strategy: Any, folder: Path, groups: dict[str, list], state: dict) -> None:
        self.strategy, self.folder, self.groups, self.state = strategy, folder, groups, state
        self.chief = is_chief(strategy)

    def restore(self, values: dict[str, list[np.ndarray]]) -> None:
        restored = [name for name in self.groups if name != "metric_replicas"]
        for name in restored:  # all refused before anything is assigned
            check_shapes(self.groups[name], values.get(name, []), name, self.folder)
        with self.strategy.scope():
            for name in restored:
                if name != "metrics":
                    restore(self.groups[name], values[name], name, self.folder)
            # Each replica's own part of the metric sums where the file has them (same replicas).
            restore_metrics(
                self.groups["metrics"], values["metrics"], values.get("metric_replicas"), self.folder,
                self.strategy,
            )

    def save(self) -> Path:
        # Reading summed metric variables is a collective: every worker reads, only the chief writes.
        return write_state(self.folder, self.state, self.groups, write=self.chief)
