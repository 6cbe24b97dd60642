"""Workers that own their cores: each pinned to cores of its own before TensorFlow starts (`launch`).

A logical device shares the process's cores with every other device; a worker *process* pinned to
its own cores, with TensorFlow's thread pools sized to match, owns its compute, as a GPU does.
`core_sets` hands out the cores this process may use (``os.sched_getaffinity(0)``) and refuses to
hand out more than there are, naming both numbers. Each worker then starts through this file run
as a script, ``python pinning.py 0,1 -- worker argv...``: it pins itself with
``os.sched_setaffinity`` and replaces itself with the worker (``os.execvp``), which keeps the pin, so
the worker is pinned before it runs a line. It imports nothing from the package, so it starts in
milliseconds. By hand, the same is ``taskset -c 0 python worker.py`` (Linux) with
``TF_NUM_INTRAOP_THREADS=1 TF_NUM_INTEROP_THREADS=1`` in its environment.

Where a process cannot be pinned (macOS and Windows have no ``sched_setaffinity``), the workers
run unpinned, their thread pools still sized, after a note printed once: a workshop on macOS
laptops can still run the lesson, and the note says its figures may share cores.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

CAN_PIN = hasattr(os, "sched_setaffinity")
# TensorFlow reads the first two when its runtime starts (its intra-op and inter-op thread pools);
# the third sizes OpenMP, which some builds of its CPU kernels use.
THREAD_VARIABLES = ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", "OMP_NUM_THREADS")
_unpinned_told = False  # the note on unpinned workers is printed once per process


def usable_cores() -> list[int]:
    """The cores this process may run on (its affinity), or every core where the system cannot say."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def plan(n_workers: int, cores_per_worker: object) -> list[tuple[int, ...]] | None:
    """`launch`'s ``cores_per_worker``, checked: each worker's cores (`core_sets`), or None (not pinned)."""
    # Imported here: run as a script, this file imports nothing of the package.
    from mgtutor.support.checks import is_whole

    if cores_per_worker is None:
        return None
    if not is_whole(cores_per_worker) or cores_per_worker < 1:
        raise ValueError(
            f"cores_per_worker must be None (workers not pinned) or a whole number >= 1, got "
            f"{cores_per_worker!r}; pass e.g. cores_per_worker=1."
        )
    return core_sets(n_workers, int(cores_per_worker))


def core_sets(n_workers: int, cores_per_worker: int) -> list[tuple[int, ...]]:
    """The cores of each worker: `cores_per_worker` of this process's cores each, none shared.

    Refused (ValueError) when the workers need more cores than this process may use.
    """
    cores = usable_cores()
    needed = n_workers * cores_per_worker
    if needed > len(cores):
        raise ValueError(
            f"{n_workers} worker(s) x cores_per_worker={cores_per_worker} need {needed} cores, but this "
            f"process may use {len(cores)} (cores {', '.join(map(str, cores))}; os.sched_getaffinity(0)). "
            "Ask for fewer workers or fewer cores per worker."
        )
    return [tuple(cores[i * cores_per_worker : (i + 1) * cores_per_worker]) for i in range(n_workers)]


def thread_variables(cores: Sequence[Sequence[int]] | None, index: int) -> dict[str, str]:
    """The environment that sizes worker `index`'s TensorFlow thread pools to its cores ({} unpinned)."""
    return {} if cores is None else {name: str(len(cores[index])) for name in THREAD_VARIABLES}


def pinned_command(cores: Sequence[Sequence[int]] | None, index: int, argv: Sequence[str]) -> list[str]:
    """`argv` started pinned to worker `index`'s cores (through this file); as it is, unpinned."""
    if cores is None or not CAN_PIN:
        return list(argv)
    spec = ",".join(str(core) for core in cores[index])
    return [sys.executable, "-I", str(Path(__file__).resolve()), spec, "--", *argv]


def summary_lines(cores: Sequence[Sequence[int]] | None) -> list[str]:
    """A job summary's line saying which cores each worker had (none for an unpinned job)."""
    if cores is None:
        return []
    where = "pinned to" if CAN_PIN else "NOT pinned (this system cannot), sized for"
    each = (f"worker {i} {where} {', '.join(map(str, worker))}" for i, worker in enumerate(cores))
    return ["  cores: " + "; ".join(each)]


def unpinned_note(cores_per_worker: int) -> str:
    """What running unpinned means for the figures, in plain words."""
    return (
        f"Note: the workers are not pinned to cores: this system ({sys.platform}) cannot pin a process "
        f"(no os.sched_setaffinity). Each worker's TensorFlow still uses {cores_per_worker} thread(s) per "
        "pool, but the system may run two workers on one core, so speed figures may share cores."
    )


def tell_unpinned(cores: Sequence[Sequence[int]] | None) -> None:
    """Print `unpinned_note` once per process, when workers should be pinned and cannot be."""
    global _unpinned_told
    if cores is not None and not CAN_PIN and not _unpinned_told:
        _unpinned_told = True
        print(unpinned_note(len(cores[0])), flush=True)


def _pin_and_exec(arguments: Sequence[str]) -> None:
    """``CORES -- argv...``: pin this process to CORES (e.g. 0,1), then become argv."""
    if len(arguments) < 3 or arguments[1] != "--":
        sys.exit("usage: python pinning.py CORES -- command...   (started by mgtutor's launcher)")
    os.sched_setaffinity(0, {int(core) for core in arguments[0].split(",")})
    os.execvp(arguments[2], list(arguments[2:]))


if __name__ == "__main__":
    _pin_and_exec(sys.argv[1:])
