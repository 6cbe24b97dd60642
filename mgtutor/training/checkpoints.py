"""The one checkpoint/resume engine, shared by `resumable_fit` (Keras ``fit``) and `Trainer` (custom loop).

A run's state is one file, ``checkpoint_dir/resume-state.npz``, written atomically: every variable
(model, optimizer, metrics), where the run is (epoch, batch), its History so far and the settings it
started with. Each epoch's order (`mgtutor.training.feeding.epoch_rows`) is a function of (seed, epoch)
only, so a restarted process replays exactly the batches that were left.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import weakref
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from mgtutor.support.files import ModelFileError, atomic_write
from mgtutor.training import runlock
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


def _state_arrays(state: dict, groups: dict[str, list]) -> dict[str, np.ndarray]:
    arrays = {"meta": np.array(json.dumps(state))}
    for group, variables in groups.items():
        for i, variable in enumerate(variables):
            arrays[f"{group}.{i:05d}"] = np.asarray(variable.numpy())
    return arrays


def state_bytes(groups: dict[str, list]) -> int:
    """At most what these variables' state file takes (an uncompressed npz; 8 bytes a value, headers)."""
    return sum(8 * int(np.prod(v.shape)) + 256 for variables in groups.values() for v in variables) + 4096


def no_space(error: OSError) -> bool:
    """Whether `error` says the disk (or the user's quota) is full."""
    return error.errno in (errno.ENOSPC, errno.EDQUOT) or "No space left" in str(error)


def space_error(folder: Path, what: str, needed: int, who: str = "") -> OSError:
    """The error a full disk gives a checkpoint write: the folder, the bytes needed and free, what is left."""
    free = shutil.disk_usage(folder if folder.exists() else folder.parent).free
    where = resume_point(folder) if (folder / STATE_FILE).exists() else None
    kept = (f"the last checkpoint there (epoch {where[0] + 1}, batch {where[1]}) is intact" if where
            else "nothing was written there")  # fmt: skip
    return OSError(
        errno.ENOSPC,
        f"{who + ': ' if who else ''}no space left in checkpoint_dir {str(folder)!r} to write {what}: it "
        f"needs {needed:,} bytes, its disk has {free:,} free. {kept[0].upper()}{kept[1:]}. Free some space "
        "or move the folder to a larger disk, then run the same call again to resume from it.",
    )


def check_room(folder: Path, groups: dict[str, list], who: str) -> None:
    """Refuse, before any training, a run whose checkpoint cannot fit on its folder's disk."""
    needed = state_bytes(groups)
    existing = folder if folder.exists() else next(p for p in folder.parents if p.exists())
    if shutil.disk_usage(existing).free < needed:
        raise space_error(folder, STATE_FILE, needed, who)


def write_state(folder: Path, state: dict, groups: dict[str, list], write: bool = True) -> Path:
    """Every variable of `groups` and `state` into the state file, atomically.

    The values are read on every worker of a multi-worker job (summed metric
    variables are read with a collective every worker joins); only the one with
    `write` writes them. A full disk leaves the last state file as it was and raises
    an ``OSError`` (ENOSPC) naming the folder and the bytes the write needed.
    """
    arrays = _state_arrays(state, groups)
    path = folder / STATE_FILE
    if write:
        folder.mkdir(parents=True, exist_ok=True)
        try:
            with atomic_write(path, ".npz") as temp, open(temp, "wb") as handle:
                np.savez(handle, **arrays)
        except OSError as error:
            if not no_space(error):
                raise
            needed = sum(a.nbytes for a in arrays.values()) + 256 * len(arrays)
            raise space_error(folder, STATE_FILE, needed) from error
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


_GENERATORS = ("seed_generator", "generator")  # where Keras layers keep the SeedGenerator they draw from


def split_dependent_layers(model: Any) -> dict[str, list[str]]:
    """The layers whose training step depends on how the global batch is split over replicas.

    Plain BatchNormalization normalises each replica's slice with that slice's statistics; a
    layer that draws random numbers (Dropout, noise, augmentation) draws them per slice.
    """
    import keras

    found: dict[str, list[str]] = {"BatchNormalization (not synchronized)": [], "random draws": []}
    stack = list(model.layers)
    while stack:
        layer = stack.pop(0)
        stack.extend(getattr(layer, "layers", []))
        if isinstance(layer, keras.layers.BatchNormalization) and not getattr(layer, "synchronized", False):
            found["BatchNormalization (not synchronized)"].append(layer.name)
        elif any(isinstance(getattr(layer, a, None), keras.random.SeedGenerator) for a in _GENERATORS):
            found["random draws"].append(layer.name)
    return {kind: names for kind, names in found.items() if names}


def check_other_replicas(saved: dict, replicas: int, model: Any, folder: Path, who: str, allow: bool) -> str:
    """Resuming on another replica count: refused where the model's step depends on the split.

    The global batch is the run's setting, so it stays; each replica takes its new share. Where
    no layer depends on the split the run continues as the uninterrupted one would, to float
    rounding; else it is refused (`allow` continues anyway). Returns the sentence to say, or "".
    """
    before = saved.get("replicas", replicas)
    if before == replicas:
        return ""
    batch = saved["settings"]["batch_size"]
    moved = f"{who}: the checkpoint in {str(folder)!r} was written on {before} replica(s), this run has "
    moved += f"{replicas}"
    layers = split_dependent_layers(model)
    if not layers:
        return (f"{moved}. The global batch stays {batch} ({batch // replicas} per replica now) and no "
                "layer depends on the split, so the run goes on as the uninterrupted one would, to float "
                "rounding.")  # fmt: skip
    listed = "; ".join(f"{kind}: {', '.join(names)}" for kind, names in layers.items())
    why = (f"{moved}, and the model has layers whose step depends on how the global batch is split "
           f"({listed}): the rest of the run would train differently from the uninterrupted one")  # fmt: skip
    if allow:
        return f"{why}. Going on anyway (resume_on_other_replicas=True)."
    raise ValueError(
        f"{why}. Resume on {before} replica(s), or use BatchNormalization(synchronized=True) and no random "
        "layers, or pass resume_on_other_replicas=True to go on anyway (a correct run, not the same one)."
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


_GATHERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # strategy -> its all-gather


def _all_gather(strategy: Any) -> Any:
    """The strategy's one all-gather along axis 0, a ``tf.function`` made once and traced once per shape.

    TensorFlow's own ``strategy.gather``, called eagerly, builds a new ``tf.function`` at every call
    (``CollectiveAllReduce._batch_all_gather``), so that from the fifth metric part a job reads, each
    read is a retrace and every worker logs TensorFlow's retracing warning. One function per strategy,
    reused for every part and every checkpoint, traces once per shape of part.
    """
    if strategy not in _GATHERS:
        import tensorflow as tf

        @tf.function
        def gather(value: Any) -> Any:
            return strategy.gather(value, axis=0)  # traced here once: its inner function with it

        _GATHERS[strategy] = gather
    return _GATHERS[strategy]


class ReplicaParts:
    """One sync-on-read variable's part on every replica of every worker, saved as one array.

    A metric's sum under a strategy lives as one part per replica and is read as their sum. Reading
    the parts from other workers is an all-gather that every worker of a job joins (`_all_gather`).
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
        return np.asarray(_all_gather(self.strategy)(mine))


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
        # The chief alone writes: it holds the folder against a second run, and checks its disk has room.
        self.lock = runlock.take(folder, "Trainer") if self.chief else None
        if self.chief:
            try:
                check_room(folder, groups, "Trainer")
            except OSError:
                self.close()
                raise

    def close(self) -> None:
        """Let the folder go: another run may take it."""
        if self.lock is not None:
            self.lock.release()

    def load(self, plan: Any, model: Any, replicas: int, say: Callable[[str], None]) -> tuple | None:
        """The folder's saved state if it holds one of this run (another's is refused), not yet restored."""
        if self.lock is not None and self.lock.previous:
            say(self.lock.stale_note("Trainer"))
        try:
            saved = read_state(self.folder)
            if saved is not None:
                check_same_settings(self.folder, saved[0], plan.settings)
                allow = plan.resume_on_other_replicas
                if note := check_other_replicas(saved[0], replicas, model, self.folder, "Trainer", allow):
                    say(note)
        except BaseException:
            self.close()  # refused: the folder is free again
            raise
        return saved

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
