"""Data parallelism with ``tf.distribute``: devices, `mirrored_strategy`, batch and learning-rate
rules, and the parity checks the notebooks use. Keras 2's towers are in `mgtutor.keras2.towers`.

Importing this module imports TensorFlow but starts nothing, so `setup_devices` can still run.
"""

from __future__ import annotations

import contextlib
import math
import numbers
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from mgtutor.devices import available_devices, resolve_devices
from mgtutor.support.checks import is_whole
from mgtutor.support.tflog import quiet_python_logs

# The device count of the first strategy made by `mirrored_strategy` in this
# process: a second MirroredStrategy over a different count aborts the process
# (the kernel dies without a Python error), so we refuse it first.
_strategy_devices: tuple[str, ...] | None = None


# --------------------------------------------------------------------------- MirroredStrategy


def _replica_count(value: Any, parameter: str) -> int:
    replicas = getattr(value, "num_replicas_in_sync", value)
    if not is_whole(replicas) or replicas < 1:
        raise ValueError(
            f"{parameter} must be a replica count >= 1 or a tf.distribute strategy, got {value!r}."
        )
    return int(replicas)


def _default_cross_device_ops(names: tuple[str, ...]) -> Any:
    kinds = {tf.DeviceSpec.from_string(name).device_type for name in names}
    if kinds == {"GPU"} and len(names) <= len(tf.config.list_physical_devices("GPU")):
        return None  # real GPUs: TF's own choice (NCCL where it can)
    # NCCL has no CPU kernels and cannot all-reduce between logical GPUs that
    # share one physical GPU; copying to one device and back works everywhere.
    return tf.distribute.ReductionToOneDevice()


def mirrored_strategy(devices: Any = None, *, cross_device_ops: Any = None) -> tf.distribute.MirroredStrategy:
    """A MirroredStrategy over `devices` (default: every device of `available_devices`).

    On real GPUs TF picks how gradients are summed (NCCL); on logical devices
    (`mgtutor.setup_devices` splitting a CPU or one GPU) this uses
    ``ReductionToOneDevice``, as NCCL cannot serve them. Pass `cross_device_ops`
    to choose. One device count per process: a second strategy over a
    different count aborts TensorFlow, so it is refused here.
    """
    global _strategy_devices
    if devices is None:
        names = available_devices()
    else:
        names = resolve_devices(devices, parameter="devices", minimum=1)
    if _strategy_devices is not None and len(_strategy_devices) != len(names):
        raise RuntimeError(
            f"This process already made a MirroredStrategy over {len(_strategy_devices)} "
            f"device(s) ({', '.join(_strategy_devices)}); a second over {len(names)} would "
            "abort TensorFlow. Use one device count per process: restart the kernel to change it."
        )
    if cross_device_ops is None:
        cross_device_ops = _default_cross_device_ops(names)
    # TF logs an INFO line per all-reduce set-up ("Reduce to ... then broadcast"), dozens per
    # fit on CPUs: noise that buries a notebook's output. Errors still show.
    quiet_python_logs()
    strategy = tf.distribute.MirroredStrategy(devices=list(names), cross_device_ops=cross_device_ops)
    _strategy_devices = names
    return strategy


def global_batch_size(per_replica: int, strategy_or_replicas: Any) -> int:
    """The batch to give ``fit``: per-replica batch x replicas (each replica gets `per_replica`)."""
    if not is_whole(per_replica) or per_replica < 1:
        raise ValueError(f"per_replica must be a whole number >= 1, got {per_replica!r}.")
    return int(per_replica) * _replica_count(strategy_or_replicas, "strategy_or_replicas")


def check_batch_divisible(global_batch: int, replicas: Any, *, samples: int | None = None) -> int:
    """Return the per-replica batch, or raise if `global_batch` does not split evenly.

    With `samples`, the last, shorter batch of an epoch must split evenly too: Keras on JAX
    (`keras.distribution.DataParallel`) cannot shard it otherwise and fails at that step.
    """
    count = _replica_count(replicas, "replicas")
    if not is_whole(global_batch) or global_batch < 1:
        raise ValueError(f"global_batch must be a whole number >= 1, got {global_batch!r}.")
    if samples is not None and (not is_whole(samples) or samples < 1):
        raise ValueError(f"samples must be a whole number >= 1, got {samples!r}.")
    if global_batch % count == 0:
        last = samples % global_batch if samples is not None else 0
        if last % count:
            whole, even = samples - last, samples - last % count
            other = f", or on {even} (x[:{even}], a last batch of {last - last % count})"
            other = other if even != whole else ""
            raise ValueError(
                f"samples {samples} in global batches of {global_batch} leave a last batch of {last}, "
                f"which does not split evenly over {count} devices: Keras on JAX fails at that step "
                f"(keras#21167). Train on {whole} samples (x[:{whole}]){other}, so that every batch "
                f"is a multiple of {count}."
            )
        return global_batch // count
    below, above = (global_batch // count) * count, (global_batch // count + 1) * count
    options = [f"{size} ({size // count} per replica)" for size in (below, above) if size > 0]
    raise ValueError(
        f"global batch {global_batch} does not split evenly over {count} replicas. Under "
        "MirroredStrategy each replica takes global batch / replicas examples and Keras builds "
        "the model from the first batch, so the global batch must be a multiple of the "
        "replica count: global batch = per-replica batch x replicas. Nearest valid sizes: "
        f"{' or '.join(options)}; global_batch_size(per_replica, strategy) computes it."
    )


@keras.saving.register_keras_serializable(package="mgtutor")
class LinearWarmup(keras.optimizers.schedules.LearningRateSchedule):
    """Learning rate rising linearly from `initial` to `target` over `warmup_steps`, then flat."""

    def __init__(self, initial: float, target: float, warmup_steps: int) -> None:
        self.initial = float(initial)
        self.target = float(target)
        self.warmup_steps = int(warmup_steps)

    def __call__(self, step: Any) -> Any:
        progress = keras.ops.minimum(keras.ops.cast(step, "float32") / self.warmup_steps, 1.0)
        return self.initial + (self.target - self.initial) * progress

    def get_config(self) -> dict[str, Any]:
        return {"initial": self.initial, "target": self.target, "warmup_steps": self.warmup_steps}


def scaled_learning_rate(base_lr: float, replicas: Any, warmup_steps: int = 0) -> float | LinearWarmup:
    """The linear scaling rule: ``base_lr x replicas``, optionally reached by linear warm-up.

    A global batch `replicas` times larger takes `replicas` times fewer steps
    per epoch, so each step moves further (Goyal et al., 2017). Warm-up starts
    at `base_lr` and reaches the scaled rate after `warmup_steps` steps, which
    avoids the early divergence a large rate can cause.
    """
    if (
        isinstance(base_lr, bool)
        or not isinstance(base_lr, numbers.Real)
        or not (math.isfinite(base_lr) and base_lr > 0)
    ):
        raise ValueError(f"base_lr must be a positive number, got {base_lr!r}.")
    count = _replica_count(replicas, "replicas")
    if not is_whole(warmup_steps) or warmup_steps < 0:
        raise ValueError(f"warmup_steps must be a whole number >= 0, got {warmup_steps!r}.")
    target = float(base_lr) * count
    if warmup_steps == 0:
        return target
    return LinearWarmup(float(base_lr), target, int(warmup_steps))


# --------------------------------------------------------------------------- parity


def copy_model(model: keras.Model, *, strategy: Any = None) -> keras.Model:
    """An independent copy of `model` with the same weights (built under `strategy`'s scope)."""
    scope = strategy.scope() if strategy is not None else contextlib.nullcontext()
    with scope:
        clone = keras.models.clone_model(model)
        clone.set_weights(model.get_weights())
    return clone


def max_weight_difference(model_a: keras.Model, model_b: keras.Model) -> float:
    """The largest absolute difference between corresponding weights of two models."""
    weights_a, weights_b = model_a.get_weights(), model_b.get_weights()
    if len(weights_a) != len(weights_b):
        raise ValueError(
            f"the models have {len(weights_a)} and {len(weights_b)} weight arrays; compare "
            "models of the same architecture (for a towers model, compare its template)."
        )
    worst = 0.0
    for i, (a, b) in enumerate(zip(weights_a, weights_b, strict=True)):
        if a.shape != b.shape:
            raise ValueError(f"weight {i} has shape {a.shape} in one model and {b.shape} in the other.")
        if a.size:
            worst = max(worst, float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))))
    return worst


def _predictions(model: keras.Model, x: Any, batch_size: int) -> list[np.ndarray]:
    strategy = getattr(model, "distribute_strategy", None)
    if strategy is not None and strategy.num_replicas_in_sync > 1:
        # Live under its strategy: each replica predicts its slice with its own copies (BatchNorm).
        return keras.tree.flatten(model.predict(x, batch_size=batch_size, verbose=0))
    batches = [model(x[i : i + batch_size], training=False) for i in range(0, len(x), batch_size)]
    flat = [keras.tree.flatten(batch) for batch in batches]
    return [np.concatenate([np.asarray(b[k]) for b in flat]) for k in range(len(flat[0]))]


def max_output_difference(
    model_a: keras.Model, model_b: keras.Model, x: Any, batch_size: int | None = None
) -> float:
    """The largest absolute difference between the two models' predictions on `x`, batch by batch.

    Calls a model eagerly rather than through ``predict`` (a notebook that compares many
    models would trace one predict function per model, and TensorFlow warns of
    "retracing" from the fifth), except a model that lives under a multi-replica
    strategy: ``predict`` runs it as training does, each replica on its slice.
    """
    size = len(x) if batch_size is None else batch_size
    out_a, out_b = _predictions(model_a, x, size), _predictions(model_b, x, size)
    pairs = zip(out_a, out_b, strict=True)
    return max(float(np.max(np.abs(np.asarray(a) - np.asarray(b)))) for a, b in pairs)


def train_steps(model: keras.Model, x: Any, y: Any, steps: int, batch_size: int) -> keras.callbacks.History:
    """Exactly `steps` training steps on the first ``steps x batch_size`` examples, in order.

    No shuffling, one epoch: two models with the same weights see the same
    batches, which is what a parity check needs. Under a MirroredStrategy,
    `batch_size` is the global batch.
    """
    for name, value in (("steps", steps), ("batch_size", batch_size)):
        if not is_whole(value) or value < 1:
            raise ValueError(f"{name} must be a whole number >= 1, got {value!r}.")
    needed = steps * batch_size
    n = len(keras.tree.flatten(x)[0])
    if n < needed:
        raise ValueError(
            f"train_steps needs steps x batch_size = {needed} examples but x has {n}; "
            "pass more data or fewer steps."
        )
    return model.fit(
        keras.tree.map_structure(lambda a: a[:needed], x),
        keras.tree.map_structure(lambda a: a[:needed], y),
        batch_size=batch_size,
        epochs=1,
        shuffle=False,
        verbose=0,
    )
