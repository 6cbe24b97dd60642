"""Start a multi-worker TensorFlow job on this machine: N processes, one ``TF_CONFIG`` each.

``tf.distribute.MultiWorkerMirroredStrategy`` runs one process per machine;
each learns the cluster and its own place in it from ``TF_CONFIG``::

    {"cluster": {"worker": ["host0:port", "host1:port"]}, "task": {"type": "worker", "index": 0}}

Worker 0 is the chief (it writes checkpoints and logs). `launch` plays the
cluster on localhost: it picks free ports, starts N copies of a worker script,
each in its own process group with its own ``TF_CONFIG``, streams their output
prefixed ``[worker i]``, and waits. TensorFlow cannot continue without a
worker (the others block in collective ops until a timeout), so when one
worker fails the launcher stops the others at once; at the end, on a timeout,
or on Ctrl-C it kills every process group it started, so no process is left
behind. It returns each worker's exit status, the tail of its log and the
values it reported with `report_result` (a line ``MGTUTOR_RESULT {json}``).
For the fault-tolerance demo, ``kill_worker=1, kill_when="checkpoint saved"``
kills worker 1 (SIGKILL, like a crashed machine) when a line of any worker
matches the pattern.

The same worker script runs unchanged on real machines; only who writes
``TF_CONFIG`` changes:

* by hand or with a job scheduler / ``ssh`` loop: set ``TF_CONFIG`` to
  ``json.dumps(tf_config(["host0:12345", "host1:12345"], index))`` on each
  machine, then start the script there;
* Kubernetes: the Kubeflow Training Operator's ``TFJob`` sets ``TF_CONFIG``
  in every pod;
* Slurm: build the strategy from
  ``tf.distribute.cluster_resolver.SlurmClusterResolver()`` instead of
  ``TF_CONFIG`` (``tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=...)``),
  run with ``srun`` one task per node.

Checkpoints must then go to storage every machine reads (NFS, GCS, S3), and
the job is restarted as a whole after a failure (TensorFlow's fault-tolerance
pattern: all workers restart and restore the latest checkpoint).

This module imports neither TensorFlow nor Keras: the launcher is a plain
process supervisor.
"""

from __future__ import annotations

import json
import math
import numbers
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mgtutor._checks import check_whole, is_whole
from mgtutor._tflog import TF_NOISE

RESULT_MARK = "MGTUTOR_RESULT "
DEFAULT_TAIL_LINES = 40
# Measured: TensorFlow's coordination service catches SIGTERM, and a worker waiting for a
# dead peer outlived it for 10 s. So workers are stopped with SIGKILL; their output is
# unbuffered, so no log line is lost.
_STOP_SIGNAL = signal.SIGKILL
_REAP_SECONDS = 5.0
_POLL_SECONDS = 0.05


class ClusterError(RuntimeError):
    """A launched job failed; ``.result`` holds every worker's status and log tail."""

    def __init__(self, message: str, result: ClusterResult) -> None:
        super().__init__(message)
        self.result = result


# --------------------------------------------------------------------------- pure helpers


def tf_config(addresses: Sequence[int | str], index: int, task_type: str = "worker") -> dict[str, Any]:
    """The ``TF_CONFIG`` of task `index` in a cluster of workers at `addresses`.

    An int is a port on localhost; a string is ``"host:port"``. Serialize it
    with ``json.dumps`` into the worker's environment.
    """
    if isinstance(addresses, (str, bytes)) or not isinstance(addresses, Sequence) or not addresses:
        raise ValueError(f"addresses must be a non-empty list of ports or 'host:port', got {addresses!r}.")
    workers = []
    for address in addresses:
        if isinstance(address, numbers.Integral) and not isinstance(address, bool) and 0 < address < 65536:
            workers.append(f"localhost:{int(address)}")
        elif isinstance(address, str) and re.fullmatch(r"[^:\s]+:\d{1,5}", address):
            workers.append(address)
        else:
            raise ValueError(f"addresses: {address!r} is neither a port (1-65535) nor 'host:port'.")
    if not is_whole(index) or not 0 <= index < len(workers):
        raise ValueError(f"index must be a worker number 0..{len(workers) - 1}, got {index!r}.")
    return {"cluster": {"worker": workers}, "task": {"type": task_type, "index": int(index)}}


def free_ports(count: int) -> list[int]:
    """`count` distinct TCP ports free right now (another program may still take one before TF binds it)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("", 0))  # all held at once, so the ports differ
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def report_result(values: Mapping[str, Any]) -> None:
    """Print `values` as the worker's result line, for the launcher to collect (numpy values allowed)."""
    if not isinstance(values, Mapping):
        raise TypeError(f"values must be a dict of JSON-serializable values, got {type(values).__name__}.")

    def plain(value: Any) -> Any:
        tolist = getattr(value, "tolist", None)  # numpy scalars and arrays
        if callable(tolist):
            return tolist()
        raise TypeError(f"report_result: {value!r} ({type(value).__name__}) is not JSON-serializable.")

    print(RESULT_MARK + json.dumps(dict(values), default=plain), flush=True)


def processes_in_group(pgid: int) -> list[int]:
    """Live processes whose process group is `pgid` (read from /proc; empty where there is none)."""
    found = []
    proc = Path("/proc")
    if not proc.is_dir():
        return found
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            found.append(int(entry.name))
    return found


# --------------------------------------------------------------------------- this worker's place


def _current_strategy() -> Any:
    import tensorflow as tf  # only here: the launcher never loads TensorFlow

    return tf.distribute.get_strategy()


def is_chief(strategy: Any = None) -> bool:
    """True for the worker that writes checkpoints and logs (always, with one process)."""
    strategy = strategy or _current_strategy()
    return bool(strategy.extended.should_checkpoint)


def num_workers(strategy: Any = None) -> int:
    """How many processes train together under `strategy` (1 unless multi-worker)."""
    strategy = strategy or _current_strategy()
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None:
        return 1
    jobs = resolver.cluster_spec().as_dict()
    return max(1, sum(len(jobs.get(job, ())) for job in ("chief", "worker")))


def worker_index(strategy: Any = None) -> int:
    """This worker's task index in ``TF_CONFIG`` (0 with one process)."""
    strategy = strategy or _current_strategy()
    resolver = getattr(strategy, "cluster_resolver", None)
    return int(getattr(resolver, "task_id", None) or 0)


# --------------------------------------------------------------------------- results


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


# --------------------------------------------------------------------------- the cluster


def _command(command: Any, args: Sequence[Any], cwd: Path) -> list[str]:
    if isinstance(command, (str, os.PathLike)):
        script = Path(command)
        resolved = script if script.is_absolute() else cwd / script
        if not resolved.is_file():
            raise FileNotFoundError(
                f"command: no worker script {str(resolved)!r}. Give the path of a Python file (relative "
                f"to cwd={str(cwd)!r}) or an argv list such as [sys.executable, '-m', 'package.module']."
            )
        argv = [sys.executable, str(resolved)]
    elif (
        isinstance(command, Sequence)
        and command
        and all(isinstance(part, (str, os.PathLike)) for part in command)
    ):
        argv = [os.fspath(a) for a in command]
    else:
        raise TypeError(
            f"command must be a script path or a non-empty argv list of strings, got {command!r}."
        )
    if isinstance(args, (str, bytes)) or not isinstance(args, Sequence):
        raise TypeError(f"args must be a list of arguments (e.g. ['--epochs', 2]), got {args!r}.")
    for arg in args:
        if not isinstance(arg, (str, os.PathLike, numbers.Number)) or isinstance(arg, bool):
            raise TypeError(f"args: {arg!r} is not a string, path or number.")
    return argv + [os.fspath(a) if isinstance(a, os.PathLike) else str(a) for a in args]


class LocalCluster:
    """N worker processes on this machine, each with its own ``TF_CONFIG``; see `launch`.

    With `kill_worker` and `kill_when` (a regular expression), worker
    `kill_worker` is killed (SIGKILL) the first time any worker prints a
    matching line. Use it as a context manager (leaving the block kills whatever still runs)::

        with LocalCluster("worker.py", 2) as cluster:
            ...               # cluster.kill(1) to simulate a failed machine
            result = cluster.wait(timeout=300)
    """

    def __init__(
        self,
        command: str | os.PathLike | Sequence[str],
        n_workers: int = 2,
        *,
        args: Sequence[Any] = (),
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike | None = None,
        stream: bool = True,
        quiet_tf: bool = True,
        tail_lines: int = DEFAULT_TAIL_LINES,
        kill_worker: int | None = None,
        kill_when: str | None = None,
    ) -> None:
        check_whole("n_workers", n_workers, 1)
        self._watch: tuple[int, re.Pattern[str]] | None = None
        if kill_worker is not None or kill_when is not None:
            self._watch = (_check_kill(kill_worker, kill_when, int(n_workers)), re.compile(kill_when))
        self.cwd = Path(os.fspath(cwd)).expanduser() if cwd is not None else Path.cwd()
        if not self.cwd.is_dir():
            raise NotADirectoryError(f"cwd {str(self.cwd)!r} is not a folder.")
        self.argv = _command(command, args, self.cwd)
        if env is not None and (
            not isinstance(env, Mapping)
            or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())
        ):
            raise TypeError("env must be a dict of str -> str (extra environment variables for the workers).")
        check_whole("tail_lines", tail_lines, 1)
        self.n_workers = int(n_workers)
        self.env = dict(env or {})
        self.stream = bool(stream)
        self.quiet_tf = bool(quiet_tf)
        self.ports: list[int] = []
        self._procs: list[subprocess.Popen] = []
        self._threads: list[threading.Thread] = []
        self._tails = [deque(maxlen=tail_lines) for _ in range(self.n_workers)]
        self._results: list[dict[str, Any] | None] = [None] * self.n_workers
        self._stopped: set[int] = set()
        self._print_lock = threading.Lock()
        self._event = threading.Event()  # set on every line: the wait loop wakes up to check
        self._watch_hit = threading.Event()
        self._started = 0.0

    # -- life cycle

    def start(self) -> LocalCluster:
        """Start every worker (each in a new session, i.e. its own process group)."""
        if self._procs:
            raise RuntimeError("this cluster was started already; make a new LocalCluster to run again.")
        self.ports = free_ports(self.n_workers)
        self._started = time.monotonic()
        try:
            for index in range(self.n_workers):
                env = {
                    **os.environ,
                    "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"),
                    **self.env,
                    "TF_CONFIG": json.dumps(tf_config(self.ports, index)),
                    "PYTHONUNBUFFERED": "1",  # lines arrive as they are printed, not at exit
                }
                proc = subprocess.Popen(
                    self.argv,
                    cwd=self.cwd,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    errors="replace",
                    bufsize=1,
                    start_new_session=True,
                )
                self._procs.append(proc)
                thread = threading.Thread(target=self._read, args=(index, proc), daemon=True)
                thread.start()
                self._threads.append(thread)
        except BaseException:
            self.stop()
            raise
        return self

    def __enter__(self) -> LocalCluster:
        return self.start() if not self._procs else self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def pids(self) -> list[int]:
        return [proc.pid for proc in self._procs]

    def _read(self, index: int, proc: subprocess.Popen) -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.rstrip("\n")
            if line.startswith(RESULT_MARK):
                try:
                    self._results[index] = json.loads(line[len(RESULT_MARK) :])
                except ValueError:
                    pass  # a malformed result line is shown as output, below
                else:
                    continue
            self._tails[index].append(line)
            if self._watch is not None and not self._watch_hit.is_set() and self._watch[1].search(line):
                self._watch_hit.set()
                if self._watch[0] < len(self._procs):  # (else the wait loop kills it once started)
                    self.kill(self._watch[0])  # at once: a few ms later the job may be past the point
            if self.stream and not (self.quiet_tf and TF_NOISE.match(line)):
                with self._print_lock:
                    print(f"[worker {index}] {line}", flush=True)
            self._event.set()
        self._event.set()

    def kill(self, index: int, sig: int = signal.SIGKILL) -> None:
        """Send `sig` (default SIGKILL, like a crashed machine) to worker `index`'s process group."""
        if not is_whole(index) or not 0 <= index < len(self._procs):
            raise ValueError(f"index must be a started worker 0..{len(self._procs) - 1}, got {index!r}.")
        _kill_group(self._procs[index], sig)

    def _stop_others(self, failed: int) -> None:
        for index, proc in enumerate(self._procs):
            if index != failed and proc.poll() is None:
                self._stopped.add(index)
                self.kill(index, _STOP_SIGNAL)

    def stop(self) -> None:
        """Kill every worker's process group (SIGKILL), reap the workers, close the pipes."""
        for index, proc in enumerate(self._procs):
            if proc.poll() is None:
                self._stopped.add(index)
            _kill_group(proc, _STOP_SIGNAL)  # even when the worker has exited: its children go too
        for proc in self._procs:
            proc.wait()
        # A worker's children die a moment after the SIGKILL: return once they are gone.
        deadline = time.monotonic() + _REAP_SECONDS
        while time.monotonic() < deadline and any(processes_in_group(p.pid) for p in self._procs):
            time.sleep(0.01)
        for thread in self._threads:
            thread.join(timeout=2.0)
        for proc in self._procs:
            if proc.stdout is not None:
                proc.stdout.close()

    # -- waiting

    def wait(self, timeout: float = 300) -> ClusterResult:
        """Wait until every worker has exited, one fails, or `timeout` seconds pass; then clean up.

        A failing worker (non-zero exit) makes the launcher stop the others: a
        collective job cannot go on without it. `timeout` counts from `start`.
        """
        timeout = _check_timeout(timeout)
        if not self._procs:
            self.start()
        deadline = self._started + timeout
        timed_out = False
        reason = "all workers exited 0"
        try:
            while True:
                codes = [proc.poll() for proc in self._procs]
                failed = [
                    i for i, code in enumerate(codes) if code not in (None, 0) and i not in self._stopped
                ]
                if failed:
                    first = failed[0]
                    cause = "killed by the launcher (kill_when matched)" if self._watch_hit.is_set() and (
                        self._watch is not None and first == self._watch[0]
                    ) else f"failed ({_describe(codes[first])})"
                    reason = f"worker {first} {cause}; the others were stopped"
                    self._stop_others(first)
                    break
                if all(code == 0 for code in codes):
                    break
                if self._watch_hit.is_set() and codes[self._watch[0]] is None:
                    self.kill(self._watch[0])
                if time.monotonic() >= deadline:
                    timed_out = True
                    reason = f"timeout after {timeout:g} s; every worker was stopped"
                    break
                self._event.wait(_POLL_SECONDS)
                self._event.clear()
        finally:
            self.stop()  # also on Ctrl-C: no worker outlives the launcher
        return self._result(timed_out, reason)

    def _result(self, timed_out: bool, reason: str) -> ClusterResult:
        workers = tuple(
            WorkerResult(
                index=i,
                pid=proc.pid,
                returncode=proc.returncode,
                result=self._results[i],
                log_tail=tuple(self._tails[i]),
                stopped_by_launcher=i in self._stopped or (
                    self._watch is not None and self._watch_hit.is_set() and i == self._watch[0]
                ),
            )
            for i, proc in enumerate(self._procs)
        )
        return ClusterResult(
            workers=workers,
            seconds=time.monotonic() - self._started,
            timed_out=timed_out,
            reason=reason,
            command=tuple(self.argv),
        )


def _kill_group(proc: subprocess.Popen, sig: int) -> None:
    """Signal the process group `proc` leads, if anything of it is left."""
    # A reaped worker's pid could in principle be reused, but not while processes of its
    # group still exist: the kernel keeps a group id taken until its last member is gone.
    if proc.poll() is None or processes_in_group(proc.pid):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _describe(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit {code}"


def _check_timeout(timeout: Any) -> float:
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real) or not (
        math.isfinite(timeout) and timeout > 0
    ):
        raise ValueError(f"timeout must be a number of seconds > 0, got {timeout!r}.")
    return float(timeout)


def _check_kill(kill_worker: Any, kill_when: Any, n_workers: int) -> int:
    if kill_worker is None or kill_when is None:
        raise ValueError(
            "kill_worker and kill_when go together: which worker to kill, and the output line "
            "(a regular expression) that triggers it, e.g. kill_worker=1, kill_when='checkpoint saved'."
        )
    if not is_whole(kill_worker) or not 0 <= kill_worker < n_workers:
        raise ValueError(f"kill_worker must be a worker number 0..{n_workers - 1}, got {kill_worker!r}.")
    if not isinstance(kill_when, str) or not kill_when:
        raise TypeError(f"kill_when must be a non-empty regular expression string, got {kill_when!r}.")
    try:
        re.compile(kill_when)
    except re.error as err:
        raise ValueError(f"kill_when {kill_when!r} is not a valid regular expression: {err}.") from err
    return kill_worker


def launch(
    command: str | os.PathLike | Sequence[str],
    n_workers: int = 2,
    *,
    args: Sequence[Any] = (),
    env: Mapping[str, str] | None = None,
    timeout: float = 300,
    cwd: str | os.PathLike | None = None,
    stream: bool = True,
    quiet_tf: bool = True,
    kill_worker: int | None = None,
    kill_when: str | None = None,
    check: bool = False,
) -> ClusterResult:
    """Run `command` as `n_workers` localhost workers of one TF cluster, wait, and clean up.

    `command` is a Python script (run with this interpreter) or an argv list;
    `args` are appended. Each worker gets ``TF_CONFIG`` (free ports on
    localhost, its own index), ``TF_CPP_MIN_LOG_LEVEL=2`` unless set, and
    `env`. Output lines stream as ``[worker i] ...`` (`stream`; TF's start-up
    chatter dropped with `quiet_tf`). When a worker fails the others are
    stopped; after `timeout` seconds all are; every process group is killed
    at the end in any case (SIGKILL: TensorFlow catches SIGTERM).
    `kill_worker` and `kill_when` kill one worker when a matching line
    appears (the fault-tolerance demo). Returns a `ClusterResult`; with
    ``check=True`` a failure raises `ClusterError`.
    """
    timeout = _check_timeout(timeout)
    cluster = LocalCluster(
        command, n_workers, args=args, env=env, cwd=cwd, stream=stream, quiet_tf=quiet_tf,
        kill_worker=kill_worker, kill_when=kill_when,
    )  # fmt: skip
    with cluster:
        result = cluster.wait(timeout)
    return result.check() if check else result
