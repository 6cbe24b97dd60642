"""Keras 2's ``keras.utils.multi_gpu_model`` on Keras 3: towers that share the template's weights.

Each batch is sliced into one part per device, the template runs on every part under
``tf.device``, and the outputs are concatenated; `split` gives unequal GPUs unequal parts.
"""

from __future__ import annotations

import contextlib
import math
import numbers
from collections.abc import Iterable, Sequence
from fractions import Fraction
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from mgtutor.devices import requested_count, resolve_devices
from mgtutor.support.checks import is_whole

# --------------------------------------------------------------------------- splitting


def _split_shares(split: Any, n_devices: int) -> tuple[int, ...]:
    """Whole-number shares, one per device, proportional to `split` (equal when None)."""
    if split is None:
        return (1,) * n_devices
    if isinstance(split, str) or not isinstance(split, Sequence):
        raise TypeError(
            f"split must be a list of {n_devices} positive numbers, one per device "
            f"(e.g. {[2] + [1] * (n_devices - 1)}), got {split!r}."
        )
    if len(split) != n_devices:
        raise ValueError(
            f"split has {len(split)} entries but there are {n_devices} devices; give one "
            f"share per device, e.g. split={[2] + [1] * (n_devices - 1)}."
        )
    fractions = []
    for share in split:
        if (
            isinstance(share, bool)
            or not isinstance(share, numbers.Real)
            or not (math.isfinite(share) and share > 0)
        ):
            raise ValueError(
                f"split entries must be positive numbers (a device's relative share of each "
                f"batch), got {share!r} in {list(split)}."
            )
        fractions.append(Fraction(share).limit_denominator(10_000))
    # Exact integer shares: float shares like 0.6/0.4 would round unpredictably.
    scale = math.lcm(*(f.denominator for f in fractions))
    shares = [int(f * scale) for f in fractions]
    common = math.gcd(*shares)
    return tuple(s // common for s in shares)


def split_sizes(batch_size: Any, split: Sequence[float]) -> Any:
    """How a batch of `batch_size` divides over devices with relative shares `split`.

    Cumulative rounding: device i ends where ``floor(batch * share_0..i / total)``
    does, so the sizes always sum to the batch and differ from the exact shares by
    less than one example. A Python int gives a list; a tensor gives a tensor.
    """
    shares = _split_shares(list(split), len(split))
    total = sum(shares)
    bounds = np.cumsum(shares)
    if is_whole(batch_size):
        if batch_size < 0:
            raise ValueError(f"batch_size must be >= 0, got {batch_size}.")
        ends = [int(batch_size) * int(b) // total for b in bounds]
        return [end - start for start, end in zip([0] + ends[:-1], ends, strict=True)]
    ends = tf.cast(batch_size, tf.int64) * tf.constant(bounds, tf.int64) // total
    return tf.cast(ends - tf.concat([[0], ends[:-1]], axis=0), tf.int32)


# --------------------------------------------------------------------------- towers


@keras.saving.register_keras_serializable(package="mgtutor")
class TowersModel(keras.Model):
    """Keras 2's multi_gpu_model as a Keras 3 model: one tower per device, shared weights.

    `call` slices the batch by `split`, runs `template` on each slice under
    ``tf.device``, and concatenates the outputs along the batch axis (on CPU:0
    when `cpu_merge`, as Keras 2 did). Its variables are the template's, so
    training this model trains the template: save the template.

    BatchNormalization, faithful to Keras 2: each tower normalises its own
    slice with that slice's statistics, and each tower's call updates the one
    shared moving mean and variance, so a training step applies the moving
    average once per tower. Here the updates run in tower order (TensorFlow
    orders writes to one variable as the program issues them); with momentum
    m and 2 towers, one step gives ``m**2 * old + m*(1-m) * mean_0 + (1-m) *
    mean_1`` (measured to 3e-8): the statistics follow the data about twice as
    fast as on one device (effective momentum m**2 per step), and a moving
    variance averages per-slice variances, which leave out the spread between
    the slices' means. Keras 2 also added one update per tower call to the
    training step. There is a single copy of each statistic, so nothing drifts
    apart and ``synchronized=True`` has nothing to synchronize (towers are not
    replicas of a strategy). For one device's statistics, use ``MirroredStrategy``
    with synchronized BatchNormalization.
    """

    def __init__(
        self,
        template: keras.Model,
        devices: Any = 2,
        split: Sequence[float] | None = None,
        cpu_merge: bool = True,
        **kwargs: Any,
    ) -> None:
        if not isinstance(template, keras.Model):
            raise TypeError(
                f"model must be a keras.Model (the template to replicate), got {type(template).__name__}."
            )
        if not template.built or not template.weights:
            raise ValueError(
                f"model {template.name!r} is not built, so it has no weights to share. Build it "
                "first: start it with keras.Input(shape=...) or call model.build(input_shape)."
            )
        if isinstance(devices, Iterable) and not isinstance(devices, str):
            devices = list(devices)
        if requested_count(devices) >= 2:  # a bad split fails before TF is asked for devices
            _split_shares(split, requested_count(devices))
        names = resolve_devices(devices, parameter="gpus")
        shares = _split_shares(split, len(names))
        kwargs.setdefault("name", f"{template.name}_towers")
        super().__init__(**kwargs)
        self.template = template
        self.tower_devices = names
        self.split = tuple(split) if split is not None else None
        self.cpu_merge = bool(cpu_merge)
        self._shares = shares
        # XLA compiles a whole step for one device, which would undo the per-tower
        # placement: with this flag compile's jit_compile="auto" (or True) means False.
        self.supports_jit = False
        if getattr(template, "output_names", None):
            # compile() matches dict losses and metrics to outputs by these names
            self.output_names = list(template.output_names)
        self.built = True  # the template's weights are ours; nothing left to create

    # -- forward

    def call(self, inputs: Any, training: bool | None = None) -> Any:
        first = keras.tree.flatten(inputs)[0]
        static_batch = first.shape[0]
        if static_batch is not None:  # a traced step with a known batch: decide in Python
            sizes = split_sizes(int(static_batch), self._shares)
            if min(sizes) > 0:
                return self._towers(inputs, sizes, training)
            return self._whole_batch(inputs, training)
        sizes = split_sizes(tf.shape(first)[0], self._shares)
        return tf.cond(
            tf.reduce_all(sizes > 0),
            lambda: self._towers(inputs, sizes, training),
            lambda: self._whole_batch(inputs, training),
        )

    def _merge_scope(self) -> Any:
        return tf.device("/cpu:0") if self.cpu_merge else contextlib.nullcontext()

    def _towers(self, inputs: Any, sizes: Any, training: bool | None) -> Any:
        with self._merge_scope():
            pieces = [tf.split(x, sizes, axis=0) for x in keras.tree.flatten(inputs)]
        outputs = []
        for i, device in enumerate(self.tower_devices):
            with tf.device(device):
                part = keras.tree.pack_sequence_as(inputs, [p[i] for p in pieces])
                outputs.append(self.template(part, training=training))
        with self._merge_scope():
            return keras.tree.map_structure(lambda *parts: tf.concat(parts, axis=0), *outputs)

    def _whole_batch(self, inputs: Any, training: bool | None) -> Any:
        # Fewer examples than towers would leave some tower an empty slice, and
        # BatchNormalization in training turns an empty batch into NaN moving
        # statistics (shared by all towers). One tower takes the whole batch.
        with tf.device(self.tower_devices[int(np.argmax(self._shares))]):
            return self.template(inputs, training=training)

    # -- Keras 2 conveniences

    def fit_generator(self, generator: Any, *args: Any, **kwargs: Any) -> keras.callbacks.History:
        """Keras 2's ``fit_generator``: see `mgtutor.keras2.fit_generator`."""
        from mgtutor.keras2.fit_generator import fit_generator

        return fit_generator(self, generator, *args, **kwargs)

    def get_config(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "template": keras.saving.serialize_keras_object(self.template),
            "devices": list(self.tower_devices),
            "split": None if self.split is None else [float(s) for s in self.split],
            "cpu_merge": self.cpu_merge,
        }

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> TowersModel:
        config = dict(config)
        template = keras.saving.deserialize_keras_object(config.pop("template"))
        return cls(template, config.pop("devices"), **config)


def multi_gpu_model(
    model: keras.Model,
    gpus: int | Sequence[int | str],
    *,
    split: Sequence[float] | None = None,
    cpu_merge: bool = True,
) -> TowersModel:
    """Replicate `model` on `gpus` devices, Keras 2 style (``keras.utils.multi_gpu_model``).

    `gpus` is a count (>= 2) or a list of device indices or names; with no GPU
    the logical CPUs of `mgtutor.setup_devices` stand in. `split` gives each
    device a relative share of every batch (``[2, 1]``: the first device gets
    two thirds), for unequal GPUs. Compile and fit the returned model; save
    `model`, whose weights the returned model trains.
    """
    return TowersModel(model, gpus, split=split, cpu_merge=cpu_merge)


