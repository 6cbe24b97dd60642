"""Give a notebook N devices to train on, real or simulated, and account for their memory.

TensorFlow fixes its device list when its runtime starts (the first tensor or
strategy), so `setup_devices` must run before anything else touches TF. JAX fixes
its own when its backend starts, from ``XLA_FLAGS``, and Keras picks its backend
(``KERAS_BACKEND``) at import: `setup_devices(n, backend="jax")` sets both first. On a
machine without N GPUs it splits what there is into N *logical* devices: one
GPU into N memory-limited logical GPUs, or the CPU into N logical CPUs. Logical
devices share the same hardware: they prove correctness, not speed.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from mgtutor.support.checks import check_whole, is_whole
from mgtutor.support.tfdata import iterators_end_promptly
from mgtutor.support.tflog import quiet_python_logs, quiet_tensorflow

DEFAULT_GPU_MEMORY_LIMIT_MB = 2048
BACKENDS = ("tensorflow", "jax")
_XLA_COUNT_FLAG = "--xla_force_host_platform_device_count"


_SIMULATE_HINT = (
    "To simulate {n} devices on this machine, put `mgtutor.setup_devices({n})` at the top of "
    "the notebook, before anything else uses TensorFlow, then restart the kernel and run all."
)

class DeviceSetupError(RuntimeError):
    """The requested devices cannot be given to this process."""


@dataclass(frozen=True)
class DeviceSetup:
    """What `setup_devices` did: the device names to train on and how they came about."""

    names: tuple[str, ...]
    kind: str  # "gpu", "logical-gpu" or "logical-cpu"

    def __len__(self) -> int:
        return len(self.names)

    def __iter__(self):
        return iter(self.names)

    def __getitem__(self, index: int) -> str:
        return self.names[index]


def _check_count(n: Any) -> int:
    return check_whole("n_devices", n, 1, "Pass e.g. n_devices=2.")


def setup_devices(
    n_devices: int,
    *,
    gpu_memory_limit_mb: int = DEFAULT_GPU_MEMORY_LIMIT_MB,
    verbose: bool = True,
    backend: str = "tensorflow",
) -> DeviceSetup:
    """Make `n_devices` devices available and return their names.

    N real GPUs when there are that many; else the first GPU split into N logical
    GPUs of `gpu_memory_limit_mb` each; else the CPU split into N logical CPUs.
    Calling it again with the same N is harmless; a different N after TensorFlow
    has started raises `DeviceSetupError` (restart the kernel). It also keeps
    TensorFlow's log chatter out of the notebook (`mgtutor.support.tflog.quiet_tensorflow`), and keeps
    tf.data's autotuner from stalling the iterators Keras drops (`support.tfdata.iterators_end_promptly`).
    ``backend="jax"`` gives JAX N CPU devices instead (`_setup_jax_devices`).
    """
    n_devices = _check_count(n_devices)
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(map(repr, BACKENDS))}, got {backend!r}.")
    if backend == "jax":
        return _setup_jax_devices(n_devices, verbose)
    if not is_whole(gpu_memory_limit_mb) or gpu_memory_limit_mb < 64:
        raise ValueError(
            f"gpu_memory_limit_mb must be a whole number of MB >= 64, got {gpu_memory_limit_mb!r}."
        )
    # Before TensorFlow's import: its C++ start-up lines come with the import and the device scan.
    quiet_tensorflow()
    import tensorflow as tf

    quiet_python_logs()  # again: TensorFlow's logger is set up now
    iterators_end_promptly()
    gpus = tf.config.list_physical_devices("GPU")
    if len(gpus) >= n_devices:
        kind, physical, configs = "gpu", None, None
    elif gpus:
        kind, physical = "logical-gpu", gpus[0]
        configs = [
            tf.config.LogicalDeviceConfiguration(memory_limit=gpu_memory_limit_mb)
            for _ in range(n_devices)
        ]
    else:
        kind, physical = "logical-cpu", tf.config.list_physical_devices("CPU")[0]
        configs = [tf.config.LogicalDeviceConfiguration() for _ in range(n_devices)]

    if physical is not None:
        try:
            tf.config.set_logical_device_configuration(physical, configs)
        except RuntimeError as err:  # the runtime has started: the split is fixed
            existing = tf.config.list_logical_devices(physical.device_type)
            if len(existing) != n_devices:
                raise DeviceSetupError(
                    f"TensorFlow has already started in this process with {len(existing)} "
                    f"{physical.device_type} device(s); it cannot be given {n_devices} now. "
                    "Restart the kernel (Kernel > Restart) and call setup_devices("
                    f"{n_devices}) before anything else uses TensorFlow."
                ) from err

    device_type = "GPU" if kind in ("gpu", "logical-gpu") else "CPU"
    logical = tf.config.list_logical_devices(device_type)
    if len(logical) < n_devices:
        raise DeviceSetupError(
            f"Asked for {n_devices} {device_type} devices but TensorFlow shows "
            f"{len(logical)}. Restart the kernel and call setup_devices({n_devices}) first."
        )
    setup = DeviceSetup(names=tuple(d.name for d in logical[:n_devices]), kind=kind)
    if verbose:
        print(_explain(setup, gpu_memory_limit_mb))
    return setup


def _jax_refusal(why: str, n_devices: int) -> DeviceSetupError:
    return DeviceSetupError(
        f"{why}; JAX cannot be given {n_devices} device(s) now. Restart the kernel (Kernel > Restart) "
        f'and call setup_devices({n_devices}, backend="jax") first, before anything imports Keras or JAX.'
    )


def _setup_jax_devices(n_devices: int, verbose: bool) -> DeviceSetup:
    """N CPU devices for JAX: ``KERAS_BACKEND=jax`` and ``XLA_FLAGS`` set before either is imported.

    jax[cpu] has no GPU support, so these are always the CPU split N ways (logical CPUs).
    """
    keras = sys.modules.get("keras")
    if keras is not None and keras.config.backend() != "jax":
        raise _jax_refusal(f"Keras is already imported with the {keras.config.backend()!r} backend",
                           n_devices)
    quiet_tensorflow()  # keras.utils.set_random_seed imports TensorFlow (to seed it) if it is installed
    # Read once, when JAX's CPU backend starts (the first jax.devices() or array): a later change is ignored.
    os.environ["KERAS_BACKEND"] = "jax"
    os.environ.setdefault("JAX_PLATFORMS", "cpu")  # no probing for GPU/TPU plug-ins jax[cpu] lacks
    flags = re.sub(rf"{_XLA_COUNT_FLAG}=\S*", "", os.environ.get("XLA_FLAGS", "")).split()
    os.environ["XLA_FLAGS"] = " ".join([*flags, f"{_XLA_COUNT_FLAG}={n_devices}"])
    import jax

    devices = jax.devices()
    if len(devices) != n_devices or devices[0].platform != "cpu":
        raise _jax_refusal(f"JAX has already started in this process with {len(devices)} "
                           f"{devices[0].platform} device(s)", n_devices)  # fmt: skip
    setup = DeviceSetup(names=tuple(str(d) for d in devices), kind="logical-cpu")
    if verbose:
        how = f"the CPU split into {n_devices} JAX device(s)" if n_devices > 1 else "the CPU"
        print(f"setup_devices: Keras on JAX (jax {jax.__version__}), using {how}: {', '.join(setup.names)}")
    return setup


def _explain(setup: DeviceSetup, gpu_memory_limit_mb: int) -> str:
    n = len(setup)
    if setup.kind == "gpu":
        how = f"{n} real GPU(s)"
    elif setup.kind == "logical-gpu":
        how = f"1 GPU split into {n} logical GPUs of {gpu_memory_limit_mb} MB each"
    else:
        how = (
            f"the CPU split into {n} logical CPU device(s) (no GPU found: "
            "this shows correctness, not speed)"
            if n > 1
            else "the CPU (no GPU found)"
        )
    return f"setup_devices: using {how}: {', '.join(setup.names)}"


def parameter_memory(model: Any) -> dict[str, int]:
    """Bytes held by a model's weights: counts and bytes, trainable and not.

    This is params x bytes per parameter, the figure seed 002 compares with
    nvidia-smi (206,538,153 float32 params ~ 826 MB). Optimizer slots (RMSprop
    keeps one per weight, Adam two) and activations come on top at training time.
    """
    import numpy as np

    def tally(weights) -> tuple[int, int]:
        count = sum(int(np.prod(w.shape)) for w in weights)
        size = sum(int(np.prod(w.shape)) * np.dtype(w.dtype).itemsize for w in weights)
        return count, size

    trainable, trainable_bytes = tally(model.trainable_weights)
    frozen, frozen_bytes = tally(model.non_trainable_weights)
    return {
        "params": trainable + frozen,
        "trainable_params": trainable,
        "non_trainable_params": frozen,
        "bytes": trainable_bytes + frozen_bytes,
    }


def describe(model: Any = None) -> str:
    """A table of physical and logical devices and, given a model, its parameter memory."""
    import tensorflow as tf

    lines = [f"{'kind':<9} {'type':<5} name", f"{'-' * 9} {'-' * 5} {'-' * 30}"]
    for device in tf.config.list_physical_devices():
        lines.append(f"{'physical':<9} {device.device_type:<5} {device.name}")
    for device in tf.config.list_logical_devices():
        lines.append(f"{'logical':<9} {device.device_type:<5} {device.name}")
    if model is not None:
        memory = parameter_memory(model)
        lines.append("")
        lines.append(
            f"model {getattr(model, 'name', '')!s}: {memory['params']:,} parameters "
            f"= {memory['bytes']:,} bytes ({memory['bytes'] / 2**20:.1f} MiB) of weights"
        )
    return "\n".join(lines)


# --------------------------------------------------------------------------- discovery


def available_devices() -> tuple[str, ...]:
    """The devices to train on: the (logical) GPUs, or the logical CPUs if there is no GPU.

    Calling it starts TensorFlow's runtime, which fixes the device list for the
    rest of the process: call `mgtutor.setup_devices(n)` before it.
    """
    import tensorflow as tf

    devices = tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("CPU")
    return tuple(device.name for device in devices)


def _match_name(name: str, available: tuple[str, ...], parameter: str) -> str:
    import tensorflow as tf

    try:
        wanted = tf.DeviceSpec.from_string(name)
    except (ValueError, TypeError) as err:
        raise ValueError(f"{parameter}: {name!r} is not a device name such as '/gpu:0'.") from err
    for candidate in available:
        spec = tf.DeviceSpec.from_string(candidate)
        if (spec.device_type, spec.device_index) == (wanted.device_type, wanted.device_index):
            return candidate
    raise ValueError(f"{parameter}: no device {name!r} in this process; available: {', '.join(available)}.")


def requested_count(devices: Any) -> int:
    if is_whole(devices):
        return int(devices)
    if isinstance(devices, str):
        return 1
    return len(list(devices)) if isinstance(devices, Iterable) else 0


def resolve_devices(devices: Any, *, parameter: str = "gpus", minimum: int = 2) -> tuple[str, ...]:
    """Device names from a count, a list of indices or a list of names (Keras 2's `gpus`).

    An index ``i`` means the i-th device of the kind in use (see `available_devices`).
    """
    if isinstance(devices, str):
        devices = [devices]
    if is_whole(devices):
        count, wanted = int(devices), None
    elif isinstance(devices, Iterable):
        wanted = list(devices)
        count = len(wanted)
    else:
        raise TypeError(
            f"{parameter} must be a device count (e.g. 2) or a list of device indices or names "
            f"(e.g. [0, 1] or ['/gpu:0', '/gpu:1']), got {type(devices).__name__}."
        )
    if count < minimum:
        if minimum == 2:
            raise ValueError(
                f"{parameter}={devices!r}: data parallelism needs at least 2 devices. With one "
                "device there is nothing to split the batch across and the wrapper would only "
                "add work (Keras 2 refused gpus=1 too). Compile and fit the model itself."
            )
        raise ValueError(f"{parameter}={devices!r}: give at least {minimum} device(s).")
    available = available_devices()
    if count > len(available):
        raise ValueError(
            f"{parameter}={devices!r} asks for {count} devices but this process has "
            f"{len(available)}: {', '.join(available)}. " + _SIMULATE_HINT.format(n=count)
        )
    if wanted is None:
        return available[:count]
    names = []
    for item in wanted:
        if is_whole(item):
            if not 0 <= item < len(available):
                raise ValueError(
                    f"{parameter}: device index {item} is out of range; this process has "
                    f"{len(available)} device(s), indices 0..{len(available) - 1}: "
                    f"{', '.join(available)}. " + _SIMULATE_HINT.format(n=item + 1)
                )
            names.append(available[int(item)])
        elif isinstance(item, str):
            names.append(_match_name(item, available, parameter))
        else:
            raise TypeError(f"{parameter}: each device is an index (int) or a name (str), got {item!r}.")
    if len(set(names)) != len(names):
        raise ValueError(
            f"{parameter}={devices!r} names a device twice ({', '.join(names)}); "
            "each tower needs its own device."
        )
    return tuple(names)
