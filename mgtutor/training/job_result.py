"""What a launched job reports: each worker's end (`WorkerResult`), the job's (`ClusterResult`).

`launch` and `LocalCluster.wait` return a `ClusterResult`; ``check()`` raises `ClusterError`,
with every failing worker's last lines, unless every worker exited 0.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass, field
from typing import Any

from mgtutor.training import pinning


class ClusterError(RuntimeError):
    """A launched job failed; ``.result`` holds every worker's status and log tail."""

    def __init__(self, message: str, result: ClusterResult) -> None:
        super().__init__(message)
        self.result = result


@dataclass(frozen=True)
class WorkerResult:
    """How one worker ended: exit code (negative: killed by that signal), log tail, reported values."""

    index: int
    pid: int
    returncode: int | None
    result: dict[str, Any] | None
    log_tail: tuple[str, ...]
    stopped_by_launcher: bool = False

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def status(self) -> str:
        if self.returncode == 0:
            return "exit 0"
        if self.returncode is None:
            return "still running"
        if self.returncode < 0:
            try:
                name = signal.Signals(-self.returncode).name
            except ValueError:
                name = f"signal {-self.returncode}"
            return f"killed ({name})" + (" by the launcher" if self.stopped_by_launcher else "")
        return f"exit {self.returncode}"


@dataclass(frozen=True)
class ClusterResult:
    """What `launch` saw: each worker's end, how long it took, and why it stopped."""

    workers: tuple[WorkerResult, ...]
    seconds: float
    timed_out: bool
    reason: str
    command: tuple[str, ...] = field(default=())
    isolated: bool = False  # the workers ran in a private network namespace, loopback only
    cores: tuple[tuple[int, ...], ...] | None = None  # each worker's own cores; None: not pinned

    @property
    def ok(self) -> bool:
        return not self.timed_out and all(worker.ok for worker in self.workers)

    @property
    def returncodes(self) -> list[int | None]:
        return [worker.returncode for worker in self.workers]

    @property
    def results(self) -> list[dict[str, Any] | None]:
        return [worker.result for worker in self.workers]

    @property
    def metrics(self) -> dict[str, Any] | None:
        """The chief's (worker 0's) reported values."""
        return self.workers[0].result if self.workers else None

    @property
    def pids(self) -> list[int]:
        return [worker.pid for worker in self.workers]

    def summary(self) -> str:
        lines = [f"{len(self.workers)} worker(s), {self.seconds:.1f} s: {self.reason}"]
        lines.append("  network: " + ("isolated (a private namespace with loopback only)" if self.isolated
                                      else "not isolated (the workers listened on every interface)"))
        lines += pinning.summary_lines(self.cores)
        for worker in self.workers:
            lines.append(f"  worker {worker.index} (pid {worker.pid}): {worker.status()}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()

    def check(self) -> ClusterResult:
        """Return self if every worker exited 0, else raise `ClusterError` with the failing logs."""
        if self.ok:
            return self
        tails = []
        for worker in self.workers:
            if not worker.ok:
                tail = "\n".join(f"    {line}" for line in worker.log_tail[-15:])
                tails.append(f"  worker {worker.index}, {worker.status()}; last lines:\n{tail}")
        raise ClusterError(self.summary() + "\n" + "\n".join(tails), self)


def describe_exit(code: int | None) -> str:
    """An exit code in words: "exit 1", "killed by SIGKILL"."""
    if code is not None and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit {code}"
