"""`doctor`: lesson 15's checks on your own worker script, each finding printed with its fix.

    python -m mgtutor doctor worker.py [--workers 2] [--timeout 300] [--hang-after 60] [--no-run] [-- ARGS...]

or, in a notebook, ``doctor("worker.py", args=[...])``. It first reads the script
(`mgtutor.training.branches`): a branch on the worker's index that holds a collective or skips
past one, a loop whose length depends on the worker, Keras ``fit`` under a multi-worker
strategy (keras#20585), no collective timeout. Then it runs the script as it is, on `workers`
local workers (`mgtutor.training.cluster`, isolated as `launch` isolates them), with a
collective timeout, and when the job stops moving (no output for `hang_after` seconds, a
worker failed, or `timeout` passed) it asks every worker still running for its Python stack
(`mgtutor.training.watched`) and says where each one was, in the script's own lines. Run it on a
short version of the job: it runs the whole script.
"""

from __future__ import annotations

import argparse
import ast
import math
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mgtutor.support.checklist import Check, failed, format_checklist
from mgtutor.support.checks import check_whole, is_real
from mgtutor.training.branches import Branch, read_script, uses
from mgtutor.training.stacks import Watched, WorkerPlace, watch_job


@dataclass
class Diagnosis:
    """What `doctor` found: the checklist, the worker-dependent branches, and where each worker was."""

    script: Path
    checks: list[Check]
    branches: list[Branch] = field(default_factory=list)
    run: Watched | None = None  # None when the script was only read

    @property
    def places(self) -> tuple[WorkerPlace, ...]:
        return self.run.places if self.run is not None else ()

    @property
    def ok(self) -> bool:
        return not failed(self.checks)

    def __str__(self) -> str:
        return format_checklist(self.checks)


# --------------------------------------------------------------------------- reading the script


FIXES = {
    "holds": "make the collective on every worker (let only the chief print or write its result), or decide "
    "the branch on every worker together (gather the flag first)",
    "skips": "skip on every worker or on none: gather the flag first (strategy.gather, or an all-reduce "
    "of it) and branch on the gathered value",
    "runs": "give every worker the same number of steps: the shortest share, or a loop over "
    "strategy.experimental_distribute_dataset(...), which ends them together",
    "timeout": "multi_worker_strategy(collective_timeout=600), or MultiWorkerMirroredStrategy("
    "communication_options=tf.distribute.experimental.CommunicationOptions(timeout_seconds=600)): "
    "longer than any step can take",
    "fit": "train with mgtutor.Trainer(model, optimizer, loss, metrics, strategy=strategy).fit(...), or a "
    "strategy.run loop (lesson 10)",
}


def _calls(path: Path) -> list[ast.Call]:
    return [n for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))) if isinstance(n, ast.Call)]


def _named(call: ast.Call) -> str:
    return getattr(call.func, "attr", getattr(call.func, "id", ""))


def _timeout_check(path: Path) -> Check:
    """A hang waits forever without a collective timeout: does the script give one?"""
    calls, name = _calls(path), "collective timeout"
    if any(_named(c) == "CommunicationOptions" and c.keywords for c in calls):
        return Check(name, True, "set with CommunicationOptions: a hang becomes an error")
    ours = [c for c in calls if _named(c) == "multi_worker_strategy"]
    if ours and all(c.keywords or c.args for c in ours):
        return Check(name, True, "set with multi_worker_strategy(collective_timeout=...)")
    strategies = ours + [c for c in calls if _named(c) == "MultiWorkerMirroredStrategy"]
    if not strategies:
        return Check(name, True, "no MultiWorkerMirroredStrategy in this script")
    detail = (
        f"none (line {strategies[0].lineno}): a worker that leaves the job's collectives makes the others "
        "wait forever, printing nothing"
    )
    return Check(name, False, detail, FIXES["timeout"], warning=True)


def _fit_check(path: Path) -> Check:
    """keras#20585: Keras 3's ``fit`` fails under MultiWorkerMirroredStrategy."""
    found = uses(path, {"fit", "Trainer", "MultiWorkerMirroredStrategy", "multi_worker_strategy"})
    multi_worker = {"MultiWorkerMirroredStrategy", "multi_worker_strategy"} & set(found)
    name = "Keras fit under MultiWorkerMirroredStrategy"
    if "fit" in found and multi_worker and "Trainer" not in found:
        return Check(
            name, False, f"line {found['fit']}: Keras 3's fit fails there (keras#20585)", FIXES["fit"]
        )
    return Check(name, True, "not used")


def _branch_checks(branches: list[Branch], path: Path) -> list[Check]:
    if not branches:
        return [Check("worker-dependent branches", True, "none holds a collective or skips past one")]
    checks = []
    for branch in branches:
        kind = (
            "skips"
            if branch.what.startswith("skips")
            else "runs"
            if branch.what.startswith("runs")
            else "holds"
        )
        where = f"branch at {path.name}:{branch.line}"
        checks.append(Check(where, False, f"`{branch.test}` {branch.what}", FIXES[kind]))
    return checks


def read(script: str | os.PathLike) -> Diagnosis:
    """The checks that need only the script's text (no run): see the module's docstring."""
    path = Path(os.fspath(script)).expanduser().resolve()
    branches = read_script(path)
    checks = [*_branch_checks(branches, path), _timeout_check(path), _fit_check(path)]
    return Diagnosis(path, checks, branches)


# --------------------------------------------------------------------------- running it


def _run_checks(run: Watched, workers: int, branches: list[Branch]) -> list[Check]:
    """The run's lines: how it ended, and where each worker was, tied to a branch found in the text."""
    fix = (
        "read the worker lines below: a worker that failed names its error; workers stopped at different "
        "lines made different collectives (see the branch lines above)"
    )
    checks = [Check(f"the job on {workers} workers", run.ok, f"{run.reason} after {run.seconds:.0f} s", fix)]
    for place in run.places:
        if place.status == "exit 0":
            checks.append(Check(f"worker {place.index}", True, "exit 0"))
            continue
        detail = f"{place.status}; at {place.where()}"
        inside = [b.line for b in branches if place.line in (b.line, b.collective_line)]
        if inside:
            detail += f" (in the branch at line {inside[0]})"
        if place.error:
            detail += f"; {place.error}"
        checks.append(Check(f"worker {place.index}", False, detail))
    return checks


def _positive(name: str, value: Any) -> float:
    if not is_real(value) or not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a number of seconds > 0, got {value!r}.")
    return float(value)


def doctor(
    script: str | os.PathLike,
    *,
    args: Sequence[Any] = (),
    workers: int = 2,
    run: bool = True,
    timeout: float = 300,
    hang_after: float = 60,
    cwd: str | os.PathLike | None = None,
    stream: bool = False,
    verbose: bool = True,
) -> Diagnosis:
    """Read the worker script `script`, then run it on `workers` local workers; print the checklist.

    `args` are the script's arguments. With ``run=False`` only the text is read.
    The run ends when every worker exits, or stops when the job does not move:
    a worker failed, nothing was printed for `hang_after` seconds (also the
    collective timeout it is given), or `timeout` seconds passed; each worker's
    place is then read from its stack. `stream` shows the workers' output as it
    comes. Returns a `Diagnosis` (``.ok``, ``.checks``, ``.branches``,
    ``.places``); `verbose` prints it, each line ok/WARN/FAIL with its fix.
    """
    path = Path(os.fspath(script)).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"script: no worker script {str(path)!r}; give the path of a Python file.")
    workers = check_whole("workers", workers, 1)
    timeout, hang_after = _positive("timeout", timeout), _positive("hang_after", hang_after)
    if isinstance(args, (str, bytes)) or not isinstance(args, Sequence):
        raise TypeError(f"args must be a list of the script's arguments, got {args!r}.")
    diagnosis = read(path)
    if run:
        folder = Path(os.fspath(cwd)).expanduser() if cwd is not None else None
        watched = watch_job(diagnosis.script, [str(a) for a in args], workers, timeout=timeout,
                            hang_after=hang_after, cwd=folder, stream=stream)  # fmt: skip
        diagnosis.run = watched
        diagnosis.checks += _run_checks(watched, workers, diagnosis.branches)
    if verbose:
        how = f"run on {workers} workers" if run else "read only"
        print(f"doctor: {diagnosis.script.name} ({how})\n{diagnosis}")
    return diagnosis


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ours, script_args = (
        (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    )
    parser = argparse.ArgumentParser(
        prog="python -m mgtutor doctor", description=__doc__.split("\n\n")[0],
        epilog="Arguments after -- go to the script: python -m mgtutor doctor worker.py -- '{\"epochs\": 1}'",
    )  # fmt: skip
    parser.add_argument("script", help="the worker script, run as `python SCRIPT ARGS...` on every worker")
    parser.add_argument("--workers", type=int, default=2, help="local workers to run it on (default 2)")
    parser.add_argument("--timeout", type=float, default=300, help="seconds the whole run may take (300)")
    parser.add_argument(
        "--hang-after", type=float, default=60, help="seconds without output that stop it (60)"
    )
    parser.add_argument("--no-run", action="store_true", help="only read the script")
    parser.add_argument("--quiet", action="store_true", help="do not show the workers' output")
    options = parser.parse_args(ours)
    try:
        diagnosis = doctor(
            options.script, args=script_args, workers=options.workers, run=not options.no_run,
            timeout=options.timeout, hang_after=options.hang_after, stream=not options.quiet,
        )  # fmt: skip
    except (OSError, ValueError, TypeError, SyntaxError) as error:
        parser.exit(2, f"doctor: {type(error).__name__}: {error}\n")
    return 0 if diagnosis.ok else 1


if __name__ == "__main__":
    sys.exit(main())
