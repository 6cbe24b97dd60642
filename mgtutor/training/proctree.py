"""Start a process in its own group and kill it with everything it started, on POSIX and Windows.

Nothing platform-specific is looked up at import time, so this imports on Windows too.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any


def new_group() -> dict[str, Any]:
    """`subprocess.Popen` keywords that put the child in a process group of its own."""
    if sys.platform == "win32":
        return {"creationflags": getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0x200)}
    return {"start_new_session": True}


def hard_kill_signal() -> int | None:
    """SIGKILL where there is one (like a pulled plug); None on Windows, where kill_tree terminates."""
    return getattr(signal, "SIGKILL", None)


def processes_in_group(pgid: int) -> list[int]:
    """Live processes whose process group is `pgid` (read from /proc; empty where there is none)."""
    found: list[int] = []
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


def kill_tree(proc: subprocess.Popen, sig: int | None = None) -> None:
    """Send `sig` (default: the hard kill) to the group `proc` leads, if anything of it is left.

    On Windows the whole tree is terminated (``taskkill /T /F``) whatever `sig` is.
    """
    killpg = getattr(os, "killpg", None)
    if killpg is None:
        if proc.poll() is None:
            subprocess.run(["taskkill", "/T", "/F", "/PID", str(proc.pid)], capture_output=True, check=False)
            proc.kill()
        return
    # A reaped leader's pid could in principle be reused, but not while processes of its group
    # still exist: the kernel keeps a group id taken until its last member is gone.
    if proc.poll() is None or processes_in_group(proc.pid):
        try:
            killpg(proc.pid, hard_kill_signal() if sig is None else sig)
        except (ProcessLookupError, PermissionError):
            pass
