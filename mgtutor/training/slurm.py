"""A two-node Slurm cluster on this one machine, from Python: for the tests and the multi-node lesson.

`cluster/slurm/local_cluster.sh` does the work (root, Linux): two network + UTS namespaces,
``mgt-node1`` (hostname node1, 10.213.0.1, CPU 0, the head node running slurmctld) and
``mgt-node2`` (node2, 10.213.0.2, CPU 1), joined by one veth pair that nothing else can reach.
This module calls it and talks to Slurm the way a user on the head node would::

    with slurm.start_cluster() as cluster:
        job = cluster.submit("cluster/slurm/train.sbatch", ["--data", "d", "--out", "o"])
        cluster.kill_task("node2")          # a node's worker dies mid-run
        print(cluster.wait(job))            # COMPLETED: the batch file retried, the job resumed

No accounting database: a job's state comes from ``scontrol show job`` (kept MinJobAge=300 s).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "cluster" / "slurm" / "local_cluster.sh"
BATCH_FILE = ROOT / "cluster" / "slurm" / "train.sbatch"
DEFAULT_STATE = Path("/tmp/mgtutor-slurm")
NODES = ("node1", "node2")
ADDRESSES = {"node1": "10.213.0.1", "node2": "10.213.0.2"}
CPUS = {"node1": 0, "node2": 1}
HEAD = "node1"
CTLD_PORT = 6817
TOOLS = (
    "ip",
    "unshare",
    "nsenter",
    "taskset",
    "slurmd",
    "slurmctld",
    "munged",
    "munge",
    "sbatch",
    "scontrol",
)
# Job states after which a job never runs again (a requeued job goes back to PENDING first).
FINAL_STATES = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
                          "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "SPECIAL_EXIT"})  # fmt: skip
_RATE = re.compile(r"[1-9][0-9]*(bit|kbit|mbit|gbit)")
_DAEMONS = frozenset({"slurmd", "slurmctld", "slurmstepd", "munged"})


class ShapeUnavailable(RuntimeError):
    """This kernel cannot shape the link (no tc, or no tbf qdisc); the message says why."""


def netns_of(node: str) -> str:
    _check_node(node)
    return f"mgt-{node}"


def _check_node(node: str) -> None:
    if node not in NODES:
        raise ValueError(f"node must be one of {NODES}, not {node!r}")


def _check_timeout(timeout: float) -> None:
    if not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, not {timeout!r}")


def unavailable() -> str | None:
    """Why the cluster cannot be made here, or None if it can (this only checks; it makes nothing)."""
    if not sys.platform.startswith("linux"):
        return f"network namespaces need Linux; this is {sys.platform}"
    if os.geteuid() != 0:
        return "needs root (network namespaces, a veth pair, daemons as root): run sudo make cluster-up"
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        return f"not installed: {', '.join(missing)} (apt install slurm-wlm munge iproute2 util-linux)"
    if not SCRIPT.is_file():
        return f"{SCRIPT} is missing"
    if not Path("/proc/self/ns/net").exists() or not Path("/proc/self/ns/uts").exists():
        return "this kernel has no network or UTS namespaces (/proc/self/ns/net, /proc/self/ns/uts)"
    probe = subprocess.run(["unshare", "--net", "--uts", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"cannot make a network namespace here: unshare --net failed: {probe.stderr.strip()}"
    if not {0, 1} <= os.sched_getaffinity(0):
        return (
            f"each node owns one core, CPUs 0 and 1; this process may use {sorted(os.sched_getaffinity(0))}"
        )
    return None


def _script(*args: str, state_dir: Path, timeout: float = 120, owner: int | None = None
            ) -> subprocess.CompletedProcess:  # fmt: skip
    env = dict(os.environ, MGTUTOR_SLURM_STATE=str(state_dir))
    if owner is not None:
        env["MGTUTOR_CLUSTER_OWNER"] = str(owner)
    return subprocess.run(
        ["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout, env=env
    )


def start_cluster(state_dir: str | os.PathLike = DEFAULT_STATE, timeout: float = 120) -> Cluster:
    """Starts the two-node cluster (both nodes idle when this returns); RuntimeError says why not."""
    if not str(state_dir):
        raise ValueError("state_dir must be a folder, not ''")
    _check_timeout(timeout)
    state = Path(state_dir).resolve()
    # This process owns it: if it dies without down(), the next start_cluster takes the dead one down.
    done = _script("up", str(state), state_dir=state, timeout=timeout, owner=os.getpid())
    if done.returncode != 0:
        raise RuntimeError(
            f"local_cluster.sh up failed ({done.returncode}): {done.stderr.strip() or done.stdout}"
        )
    return Cluster(state)


class Cluster:
    """The running cluster; every command runs on the head node, node1, where slurmctld listens."""

    nodes = NODES

    def __init__(self, state_dir: Path):
        self.state_dir = Path(state_dir).resolve()  # clients run from other folders
        self.conf = self.state_dir / "slurm.conf"

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc) -> None:
        self.down()

    def run(self, argv: Sequence[str], timeout: float = 60, env: Mapping[str, str] | None = None,
            cwd: str | os.PathLike | None = None) -> subprocess.CompletedProcess:  # fmt: skip
        """`argv` on node1 (its network, the host's files), with SLURM_CONF and `env` set; output captured."""
        if isinstance(argv, str) or not argv:
            raise ValueError(f"argv must be a non-empty list of strings, not {argv!r}")
        _check_timeout(timeout)
        assignments = [
            f"{key}={value}" for key, value in {"SLURM_CONF": str(self.conf), **(env or {})}.items()
        ]
        command = ["ip", "netns", "exec", netns_of(HEAD), "env", *assignments, *map(str, argv)]
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=cwd)

    def submit(
        self,
        batch_file: str | os.PathLike = BATCH_FILE,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike | None = None,
    ) -> str:
        """sbatch `batch_file` `args` (from `cwd`, the repository by default); the job id."""
        if not Path(batch_file).is_file():
            raise ValueError(f"batch_file must be a file, not {batch_file!r}")
        if isinstance(args, str):
            raise ValueError(f"args must be a list of strings, not the string {args!r}")
        done = self.run(["sbatch", "--parsable", str(Path(batch_file).resolve()), *args], env=env,
                        cwd=ROOT if cwd is None else cwd)  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"sbatch failed: {done.stderr.strip()}")
        return done.stdout.strip().split(";")[0]

    def job_state(self, job_id: str) -> str:
        """PENDING, RUNNING, COMPLETED, ... from scontrol show job (UNKNOWN once Slurm forgot the job)."""
        if not str(job_id).isdigit():
            raise ValueError(f"job_id must be a Slurm job number, not {job_id!r}")
        done = self.run(["scontrol", "show", "job", "-o", str(job_id)])
        found = re.search(r"\bJobState=(\S+)", done.stdout)
        return found.group(1) if found else "UNKNOWN"

    def wait(self, job_id: str, timeout: float = 600, poll: float = 0.5) -> str:
        """Waits for `job_id` to end; its final state (COMPLETED, FAILED, ...), or TimeoutError."""
        _check_timeout(timeout)
        deadline = time.monotonic() + timeout
        while True:
            state = self.job_state(job_id)
            if state in FINAL_STATES or state == "UNKNOWN":
                return state
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} still {state} after {timeout} s")
            time.sleep(poll)

    def task_pids(self, node: str, match: str = "python") -> list[int]:
        """The job tasks on `node` whose command contains `match`: children of a slurmstepd in its netns."""
        listed = subprocess.run(["ip", "netns", "pids", netns_of(node)], capture_output=True, text=True)
        pids = []
        for pid in map(int, listed.stdout.split()):
            try:
                parent = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]
                parent_name = Path(f"/proc/{parent}/comm").read_text().strip()
                name = Path(f"/proc/{pid}/comm").read_text().strip()
                command = (
                    Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                )
            except (OSError, IndexError):
                continue  # ended while we looked
            if parent_name == "slurmstepd" and name not in _DAEMONS and match in command:
                pids.append(pid)
        return pids

    def kill_task(self, node: str, match: str = "python", timeout: float = 30) -> list[int]:
        """SIGKILLs `node`'s training task(s), waiting up to `timeout` s for one to start; their pids."""
        _check_timeout(timeout)
        deadline = time.monotonic() + timeout
        while not (pids := self.task_pids(node, match)):
            if time.monotonic() > deadline:
                raise TimeoutError(f"no task matching {match!r} on {node} after {timeout} s")
            time.sleep(0.2)
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        return pids

    def shape(self, rate: str | None) -> None:
        """Limits the node1-node2 link to `rate` each way (10gbit, 1gbit, 100mbit: tc tbf); None lifts it."""
        if rate is not None and not _RATE.fullmatch(rate):
            raise ValueError(f"rate must be like 10gbit, 1gbit or 100mbit (or None), not {rate!r}")
        done = _script("shape", rate or "off", state_dir=self.state_dir, timeout=30)
        if done.returncode == 3:
            raise ShapeUnavailable(done.stderr.strip())
        if done.returncode != 0:
            raise RuntimeError(f"local_cluster.sh shape failed: {done.stderr.strip()}")

    def down(self) -> None:
        """Stops every daemon and task, deletes the namespaces; safe to call twice."""
        done = _script("down", str(self.state_dir), state_dir=self.state_dir)
        if done.returncode != 0:
            raise RuntimeError(f"local_cluster.sh down failed: {done.stderr.strip()}")


def namespaces() -> list[str]:
    """The cluster's network namespaces that exist now (empty once it is down)."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    return sorted(line.split()[0] for line in listed.stdout.splitlines() if line.startswith("mgt-node"))
