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


# The CPU features that decide bfloat16's speed: AVX-512, its BF16 instructions, Intel's AMX tiles.
CPU_FEATURES = {"avx512f": "AVX-512", "avx512_bf16": "AVX-512 BF16", "amx_bf16": "AMX bfloat16"}


def cpu_features(cpuinfo: str | None = None) -> dict[str, Any]:
    """This CPU's model name and whether it has each of `CPU_FEATURES` (None each where the system does not
    list its flags: Linux lists them in /proc/cpuinfo, which `cpuinfo` replaces in tests)."""
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo") as handle:
                cpuinfo = handle.read()
        except OSError:
            cpuinfo = ""
    fields = {}
    for line in cpuinfo.splitlines():
        key, colon, value = line.partition(":")
        if colon:
            fields[key.strip()] = value.strip()  # every core repeats the lines: one is enough
    flags = set(fields.get("flags", "").split())
    name = fields.get("model name") or platform.processor() or "unknown CPU"
    return {"name": name, **{flag: (flag in flags) if flags else None for flag in CPU_FEATURES}}


def describe_cpu(features: dict[str, Any]) -> str:
    """``AMD EPYC: AVX-512 yes, AVX-512 BF16 yes, AMX bfloat16 no`` from `cpu_features`."""
    if all(features[flag] is None for flag in CPU_FEATURES):
        return f"{features['name']}: its features are not listed on this system"
    listed = ", ".join(f"{name} {'yes' if features[flag] else 'no'}" for flag, name in CPU_FEATURES.items())
    return f"{features['name']}: {listed}"
