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


# The CPU features that decide which arithmetic is fast here (bfloat16 and int8 matrix units, AVX-512).
CPU_FEATURES = (
    "avx2", "avx512f", "avx512_bf16", "avx512_vnni", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8",
)  # fmt: skip


def cpu() -> dict[str, Any]:
    """The CPU's model and which of `CPU_FEATURES` it has (from /proc/cpuinfo; elsewhere the model only)."""
    model, flags = platform.processor() or platform.machine(), set()
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and value.strip():
                    model = value.strip()
                elif key.strip() in ("flags", "Features"):
                    flags = set(value.split())
                if model and flags:
                    break
    except OSError:
        pass
    # TensorFlow's x86 wheels are built for AVX: without it `import tensorflow` dies (Illegal instruction).
    avx = "avx" in flags or not flags  # no flags to read (not Linux): unknown, so not refused
    return {"model": model or "unknown", "features": [f for f in CPU_FEATURES if f in flags], "avx": avx}


def describe_cpu(info: dict[str, Any]) -> str:
    """'AMD EPYC (avx512f, avx512_bf16; no AMX)': a CPU as run tables and benchmarks name it."""
    features = info.get("features", [])
    amx = "" if any(f.startswith("amx") for f in features) else "; no AMX"
    return f"{info.get('model', 'unknown')} ({', '.join(features) or 'no AVX2, AVX-512 or AMX'}{amx})"


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
        "cpu": cpu(),
        "python": platform.python_version(),
        **versions,
    }

