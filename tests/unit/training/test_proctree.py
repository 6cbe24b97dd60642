"""mgtutor.training.proctree: a process and everything it started, killed; needs no POSIX signals."""

from __future__ import annotations

import subprocess
import sys
import time

from mgtutor.training.proctree import kill_tree, new_group, processes_in_group
from tests.conftest import ROOT, run_child

# A child that starts a grandchild, prints its pid, then sleeps: both must go.
PARENT = (
    "import subprocess, sys, time\n"
    "grandchild = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
    "print(grandchild.pid, flush=True)\n"
    "time.sleep(60)\n"
)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_kill_tree_kills_the_child_and_its_grandchild():
    proc = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True, **new_group())
    grandchild = int(proc.stdout.readline())
    assert sorted(processes_in_group(proc.pid)) == sorted([proc.pid, grandchild])
    kill_tree(proc)
    proc.wait(timeout=10)
    deadline = time.monotonic() + 5
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert proc.returncode == -9
    assert not _alive(grandchild) and processes_in_group(proc.pid) == []
    proc.stdout.close()


def test_imports_where_there_is_no_sigkill_or_killpg():
    result = run_child(ROOT / "tests" / "unit" / "no_posix_signals_child.py")
    assert result == {"imported": True, "hard_kill_signal": None}
