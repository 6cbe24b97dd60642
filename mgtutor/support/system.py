"""Facts about this machine and its processes, from cheap sources (it imports nothing heavy)."""

from __future__ import annotations

import importlib.metadata
import os
import platform
from typing import Any


def pid_alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie (a zombie has ended; only its exit status is left)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    except OSError:  # no /proc: ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:  # someone else's live process
            return True
        return True


def machine() -> dict[str, Any]:
    """Where a run happened, what a speed-up can be there (importing TensorFlow here would cost seconds)."""
    versions = {}
    for package in ("tensorflow", "keras"):
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = "not installed"
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "hostname": platform.node(),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": affinity,
        "platform": platform.platform(),
        "python": platform.python_version(),
        **versions,
    }
