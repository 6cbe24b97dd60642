"""A job run under watch, for `doctor`: when it stops moving, where each worker was, in the script's lines.

`watch_job` runs a worker script on N local workers (`LocalCluster`, through
`mgtutor.training.watched`), with a collective timeout. It ends when every worker has exited,
or when the job stops moving: a worker failed, nothing was printed for `hang_after` seconds, or
`timeout` passed. Then every worker still running is asked for its Python stack (``SIGUSR1``,
which `watched` answers with `faulthandler`), and each worker's place is read from its output:
the innermost frame in the script's folder of its last traceback or stack.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from mgtutor.training.cluster import LocalCluster
from mgtutor.training.job_result import describe_exit
from mgtutor.training.watched import STACK_AFTER
from mgtutor.training.worker import COLLECTIVE_TIMEOUT

STACK_SECONDS = 2.0  # how long the workers get to print their stacks before they are stopped
_FRAME = re.compile(r'\s*File "(?P<path>[^"]+)", line (?P<line>\d+),? in (?P<function>\S+)')
_TRACEBACK = "Traceback (most recent call last):"
_DUMP = re.compile(r"\s*(?:Current thread|Thread) 0x[0-9a-f]+ .*\(most recent call first\):")
_ERROR = re.compile(
    r"(?:[A-Za-z_][\w.]*\.)?(?P<name>[A-Z]\w*(?:Error|Exception|Exit|Interrupt))\b:?(?P<rest>.*)"
)


@dataclass(frozen=True)
class WorkerPlace:
    """Where one worker was when the job ended or stopped moving: its status, line, and error if any."""

    index: int
    status: str  # "exit 0", "exit 1", "running (stopped by doctor)"
    path: str | None  # the file of the innermost frame among the files of the script's folder
    line: int | None
    code: str  # that line, as written
    error: str  # the last line of its traceback, when it failed with one

    def where(self) -> str:
        if self.line is None or self.path is None:
            return "no frame of the script's files in its output"
        return f"{Path(self.path).name}:{self.line}: {self.code}"


@dataclass(frozen=True)
class Watched:
    """How the run went: why it ended, after how long, and each worker's place."""

    reason: str
    seconds: float
    places: tuple[WorkerPlace, ...]
    pids: tuple[int, ...] = ()  # the workers' processes, all stopped by the time this is returned

    @property
    def ok(self) -> bool:
        return all(place.status == "exit 0" for place in self.places)


def _frames(lines: Sequence[str]) -> list[tuple[str, int]]:
    return [(m["path"], int(m["line"])) for m in map(_FRAME.match, lines) if m]


def _innermost(tail: Sequence[str], folder: Path) -> tuple[tuple[str, int] | None, str]:
    """The innermost frame in `folder` of the tail's last traceback or stack dump, and the error line."""
    starts = [i for i, line in enumerate(tail) if line.strip() == _TRACEBACK or _DUMP.match(line)]
    if not starts:
        return None, ""
    block = tail[starts[-1] :]
    frames = [(path, line) for path, line in _frames(block) if Path(path).resolve().parent == folder]
    if block[0].strip() != _TRACEBACK:  # a stack dump: innermost first
        return (frames[0] if frames else None), ""
    return (frames[-1] if frames else None), _error(block)


def _error(block: Sequence[str]) -> str:
    """A traceback's exception, short: its class, then its message without TF's ``{{...}}`` prefix."""
    found = [i for i, line in enumerate(block) if _ERROR.match(line)]
    if not found:
        return ""
    first = _ERROR.match(block[found[-1]])
    message = re.sub(r"^\s*\{\{[^}]*\}\}\s*", "", first["rest"])
    for line in block[found[-1] + 1 :]:  # TF's messages go on over lines, until a hint or a node
        if not line.strip() or line.lstrip().startswith(("The error could be", "[", "\t[")):
            break
        message += " " + line.strip()
    return f"{first['name']}: {message.strip()}"[:240]


def place_of(index: int, status: str, tail: Sequence[str], folder: Path) -> WorkerPlace:
    """Worker `index`'s place, read from its output `tail` (files in `folder` count as the script's)."""
    frame, error = _innermost(list(tail), folder.resolve())
    if frame is None:
        return WorkerPlace(index, status, None, None, "", error)
    path, line = frame
    try:
        code = Path(path).read_text(encoding="utf-8").splitlines()[line - 1].strip()
    except (OSError, IndexError):
        code = ""
    return WorkerPlace(index, status, path, line, code, error)


def _status(code: int | None) -> str:
    return "running (stopped by doctor)" if code is None else describe_exit(code)


def _ask_for_stacks(cluster: LocalCluster, codes: list[int | None]) -> None:
    """Every running worker prints its stack (`watched` registered ``SIGUSR1`` with faulthandler)."""
    usr1 = getattr(signal, "SIGUSR1", None)
    if usr1 is None:  # Windows: `watched` prints it once, MGTUTOR_STACK_AFTER seconds in
        return
    for pid, code in zip(cluster.pids, codes, strict=True):
        if code is None:
            try:
                os.kill(pid, usr1)
            except ProcessLookupError:
                pass
    time.sleep(STACK_SECONDS)


def _why_stop(
    codes: list[int | None], quiet: float, elapsed: float, hang_after: float, timeout: float
) -> str:
    """Why the watch should stop now ("" to go on)."""
    if all(code is not None for code in codes):
        bad = [i for i, code in enumerate(codes) if code != 0]
        return f"worker {bad[0]} ended with {_status(codes[bad[0]])}" if bad else "every worker exited 0"
    bad = [i for i, code in enumerate(codes) if code not in (None, 0)]
    if bad:
        return f"worker {bad[0]} ended with {_status(codes[bad[0]])} while the others ran"
    if quiet > hang_after:
        return f"no worker printed anything for {hang_after:g} s"
    if elapsed > timeout:
        return f"still running after {timeout:g} s"
    return ""


def watch_job(
    script: Path, args: Sequence[str], workers: int, *, timeout: float, hang_after: float,
    cwd: Path | None = None, stream: bool = False,
) -> Watched:  # fmt: skip
    """Run `script` on `workers` local workers until it ends or stops moving; where each one was."""
    command = [sys.executable, "-m", "mgtutor.training.watched", str(script), *args]
    env = {COLLECTIVE_TIMEOUT: f"{hang_after:g}", STACK_AFTER: f"{0.9 * timeout:g}"}
    cluster = LocalCluster(command, workers, cwd=cwd or script.parent, env=env, stream=stream, tail_lines=400)
    with cluster:
        started = time.monotonic()
        while not (reason := _why_stop(cluster.poll(), time.monotonic() - cluster.last_output,
                                       time.monotonic() - started, hang_after, timeout)):  # fmt: skip
            time.sleep(0.1)
        codes = cluster.poll()
        if any(code is None for code in codes):
            _ask_for_stacks(cluster, codes)
        seconds = time.monotonic() - started
    places = tuple(place_of(i, _status(codes[i]), cluster.tail(i), script.parent) for i in range(workers))
    return Watched(reason, seconds, places, tuple(cluster.pids))
