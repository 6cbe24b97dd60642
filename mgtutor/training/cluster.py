"""`launch`: a multi-worker TensorFlow job on this machine, N processes with one ``TF_CONFIG`` each.

Each worker runs in its own process group; when one fails the others are stopped (a collective
job cannot go on without it), and at the end every group is killed, so nothing is left behind.
On Linux, where the system allows it, all workers of a job share one private network namespace
with loopback only (`mgtutor.training.netns`): TensorFlow's unauthenticated gRPC servers, which listen on
every interface, are then reachable from nowhere but the job itself.
What a worker script itself uses (its ``TF_CONFIG``, `is_chief`, `report_result`) is in
`mgtutor.training.worker`. No TensorFlow is imported here.
"""

from __future__ import annotations

import json
import math
import numbers
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from mgtutor.support.checks import check_whole, is_real, is_whole
from mgtutor.support.processes import parse_result
from mgtutor.support.tflog import KERAS_STEP_LINE, PEER_LOST, TF_NOISE, LibraryFrames
from mgtutor.training import netns, pinning
from mgtutor.training.job_result import ClusterResult, WorkerResult, describe_exit
from mgtutor.training.proctree import kill_tree, new_group, processes_in_group
from mgtutor.training.worker import tf_config

DEFAULT_TAIL_LINES = 40
# What TensorFlow's runtime adds to an error, which names its graph, not the learner's code: the node
# and op lines under a message, the hint of a derived status, the counts of a multi-error report.
TF_INTERNALS = re.compile(
    r"\s*(?:\[\[\{\{node |\[\[\S+\]\]$|The error could be from a previous operation\. Restart your program"
    r"|\d+ successful operations\.$|\d+ derived errors ignored\.)"
)
# The graph function's name inside an error message: "...Error: {{function_node __inference_f_238}} What."
FUNCTION_NODE = re.compile(r"\{\{function_node [^}]*\}\}\s*")
# Measured: TensorFlow's coordination service catches SIGTERM, and a worker waiting for a
# dead peer outlived it for 10 s. So workers are stopped with the hard kill (SIGKILL; a tree
# termination on Windows); their output is unbuffered, so no log line is lost.
_REAP_SECONDS = 5.0
_POLL_SECONDS = 0.05


# --------------------------------------------------------------------------- pure helpers


def free_ports(count: int) -> list[int]:
    """`count` distinct TCP ports free right now (another program may still take one before TF binds it)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))  # all held at once, so the ports differ
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


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
        isolate: bool | None = None,
        cores_per_worker: int | None = None,
    ) -> None:
        check_whole("n_workers", n_workers, 1)
        self.isolate = netns.check_isolate(isolate)
        self.cores = pinning.plan(int(n_workers), cores_per_worker)  # None: not pinned
        self.isolated = False
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
        self.last_output = 0.0  # time.monotonic() of the last line any worker printed

    # -- life cycle

    def start(self) -> LocalCluster:
        """Start every worker (each in a new session, i.e. its own process group)."""
        if self._procs:
            raise RuntimeError("this cluster was started already; make a new LocalCluster to run again.")
        self.ports = free_ports(self.n_workers)
        namespace = netns.for_workers(self.isolate, self.ports)
        self.isolated = namespace is not None
        pinning.tell_unpinned(self.cores)
        self._started = self.last_output = time.monotonic()
        try:
            for index in range(self.n_workers):
                argv = pinning.pinned_command(self.cores, index, self.argv)
                argv = namespace.command(argv) if namespace is not None else argv
                env = {
                    **os.environ,
                    "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"),
                    **self.env,
                    **pinning.thread_variables(self.cores, index),
                    "TF_CONFIG": json.dumps(tf_config(self.ports, index)),
                    "PYTHONUNBUFFERED": "1",  # lines arrive as they are printed, not at exit
                }
                proc = subprocess.Popen(
                    argv,
                    cwd=self.cwd,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    errors="replace",
                    bufsize=1,
                    pass_fds=namespace.fds if namespace is not None else (),
                    **new_group(),
                )
                self._procs.append(proc)
                thread = threading.Thread(target=self._read, args=(index, proc), daemon=True)
                thread.start()
                self._threads.append(thread)
        except BaseException:
            self.stop()
            raise
        finally:
            if namespace is not None:
                namespace.close()  # the workers hold it now
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
        folding = LibraryFrames()  # shown lines only: the tail keeps every frame
        peer_lost: set[str] = set()  # gRPC repeats its report of a lost peer for each pending call
        for raw in proc.stdout:
            line = raw.rstrip("\n")
            result = parse_result(line)  # a malformed result line is shown as output, below
            if result is not None:
                self._results[index] = result
                continue
            self._tails[index].append(line)
            self.last_output = time.monotonic()
            # After a kill on purpose the others' lines are its consequence, and how many come before they
            # are stopped is timing (a traceback cut anywhere): shown never, kept in the tails.
            after_kill = self._watch_hit.is_set()
            if self._watch is not None and not after_kill and self._watch[1].search(line):
                self._watch_hit.set()
                if self._watch[0] < len(self._procs):  # (else the wait loop kills it once started)
                    self.kill(self._watch[0])  # at once: a few ms later the job may be past the point
            again = PEER_LOST.match(line) and line in peer_lost
            peer_lost |= {line} if PEER_LOST.match(line) else set()
            chatter = TF_NOISE.match(line) or KERAS_STEP_LINE.match(line) or TF_INTERNALS.match(line)
            if self.stream and not (self.quiet_tf and (chatter or again or after_kill)):
                self._show(index, folding.shown(FUNCTION_NODE.sub("", line)) if self.quiet_tf else [line])
            self._event.set()
        if self.stream:
            self._show(index, folding.flush())
        self._event.set()

    def _show(self, index: int, lines: list[str]) -> None:
        with self._print_lock:
            for line in lines:
                print(f"[worker {index}] {line}", flush=True)

    def poll(self) -> list[int | None]:
        """Each worker's exit code so far: None while it runs (negative: killed by that signal)."""
        return [proc.poll() for proc in self._procs]

    def tail(self, index: int) -> list[str]:
        """Worker `index`'s last lines of output (`tail_lines` of them), oldest first."""
        return list(self._tails[index])

    def kill(self, index: int, sig: int | None = None) -> None:
        """Kill worker `index`'s process group: `sig`, default the hard kill (SIGKILL, a crashed machine)."""
        if not is_whole(index) or not 0 <= index < len(self._procs):
            raise ValueError(f"index must be a started worker 0..{len(self._procs) - 1}, got {index!r}.")
        kill_tree(self._procs[index], sig)

    def _stop_others(self, failed: int) -> None:
        for index, proc in enumerate(self._procs):
            if index != failed and proc.poll() is None:
                self._stopped.add(index)
                self.kill(index)

    def stop(self) -> None:
        """Kill every worker's process group (the hard kill), reap the workers, close the pipes."""
        for index, proc in enumerate(self._procs):
            if proc.poll() is None:
                self._stopped.add(index)
            kill_tree(proc)  # even when the worker has exited: its children go too
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
                    ) else f"failed ({describe_exit(codes[first])})"
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
            isolated=self.isolated,
            cores=None if self.cores is None else tuple(self.cores),
        )


def _check_timeout(timeout: Any) -> float:
    if not is_real(timeout) or not (math.isfinite(timeout) and timeout > 0):
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
    isolate: bool | None = None,
    cores_per_worker: int | None = None,
) -> ClusterResult:
    """Run `command` as `n_workers` localhost workers of one TF cluster, wait, and clean up.

    `command` is a Python script (run with this interpreter) or an argv list;
    `args` are appended. Each worker gets ``TF_CONFIG`` (free ports on
    localhost, its own index), ``TF_CPP_MIN_LOG_LEVEL=2`` unless set, and
    `env`. Output lines stream as ``[worker i] ...`` (`stream`; TF's start-up
    chatter, Keras's "78/78 - 9s - 110ms/step" lines, the runtime's node and
    op lines (`TF_INTERNALS`) and a lost peer's report said again dropped with
    `quiet_tf`, kept in the tails). When a worker fails the others are
    stopped; after `timeout` seconds all are; every process group is killed
    at the end in any case (SIGKILL: TensorFlow catches SIGTERM).
    `kill_worker` and `kill_when` kill one worker when a matching line
    appears (the fault-tolerance demo); what the others print after it, how
    much depending on timing, stays in the tails. `isolate`: None runs the workers in
    a private network namespace with loopback only where this machine allows
    it (Linux), else prints once what is exposed; True refuses to run
    without one; False never isolates. `cores_per_worker` (None: unpinned)
    pins each worker to that many cores of its own before it starts, thread
    pools to match (`mgtutor.training.pinning`: more cores than this process
    may use are refused; where none can be pinned, a note says so). Returns
    a `ClusterResult`; with ``check=True`` a failure raises `ClusterError`.
    """
    timeout = _check_timeout(timeout)
    cluster = LocalCluster(
        command, n_workers, args=args, env=env, cwd=cwd, stream=stream, quiet_tf=quiet_tf,
        kill_worker=kill_worker, kill_when=kill_when, isolate=isolate, cores_per_worker=cores_per_worker,
    )  # fmt: skip
    with cluster:
        result = cluster.wait(timeout)
    return result.check() if check else result
