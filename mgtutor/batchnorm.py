"""BatchNormalization under replicas: one set of moving statistics, not one drifting copy per replica.

`replica_copy_spread` measures the drift; ``BatchNormalization(synchronized=True)``
(`sync_batchnorm`) prevents it; `average_replica_copies` (and the `AverageReplicaCopies`
callback) repairs it. `mgtutor.save_model` refuses a drifted model. Notebook 05 teaches why.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator
from typing import Any

import keras
import numpy as np
import tensorflow as tf

# Copies further apart than this make save_model refuse. Synchronized BatchNormalization
# keeps them bit-identical (measured 0.0); drift after one epoch is ~1e-4 .. 1e-2.
DRIFT_TOLERANCE = 1e-6

# model -> (ids of the variables it was traced for, the traced averaging): tracing costs
# ~0.5 s, a call ~1 ms, and a callback averages every epoch.
_AVERAGERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _check_model(model: Any) -> keras.Model:
    if not isinstance(model, keras.Model):
        raise TypeError(
            f"model must be a keras.Model, got {type(model).__name__}. Pass the model you built "
            "(or the wrapper multi_gpu_model returned)."
        )
    return model


def _distributed(variable: Any) -> Any:
    """The tf.distribute variable behind a Keras variable, or None for a plain one."""
    value = getattr(variable, "value", variable)
    return value if isinstance(value, tf.distribute.DistributedValues) else None


def _is_float(variable: Any) -> bool:
    return tf.as_dtype(variable.dtype).is_floating  # not step counters nor RNG states


def _replicated_statistics(model: keras.Model) -> list[Any]:
    """The distributed variables each replica updates on its own: non-trainable, aggregation NONE."""
    found = []
    for variable in model.variables:
        value = _distributed(variable)
        if (
            value is not None
            and not variable.trainable
            and _is_float(variable)
            and value.synchronization == tf.VariableSynchronization.ON_WRITE
            and value.aggregation == tf.VariableAggregation.NONE
        ):
            found.append(value)
    return found


def _copies_spread(copies: list[np.ndarray]) -> float:
    stacked = np.stack([np.asarray(c, dtype=np.float64) for c in copies])
    if not stacked.size:
        return 0.0
    gap = stacked.max(axis=0) - stacked.min(axis=0)
    nan = np.isnan(stacked)
    # NaN in some copies but not all is the worst drift there is, not a missing value.
    gap = np.where(nan.any(axis=0), np.where(nan.all(axis=0), 0.0, np.inf), gap)
    return float(gap.max())


def largest_drift(model: Any) -> tuple[float, str]:
    """(`replica_copy_spread`, the path of the variable where it is largest, '' if none)."""
    model = _check_model(model)
    worst, where = 0.0, ""
    for variable in model.variables:
        value = _distributed(variable)
        if value is None or len(value.values) < 2:
            continue
        spread = _copies_spread([c.numpy() for c in value.values])
        if spread > worst:
            worst, where = spread, getattr(variable, "path", variable.name)
    return worst, where


def replica_copy_spread(model: Any) -> float:
    """The largest absolute difference between the replica copies of any variable of `model`.

    0.0 for a model built outside a strategy or under one replica. It reads the
    copies of this process only: under a multi-worker strategy each worker
    holds one, and the workers' copies are not compared.
    """
    return largest_drift(model)[0]


def _make_averager(strategy: Any, variables: list[Any]) -> Callable[[], Any]:
    sizes = [int(np.prod(v.shape)) for v in variables]

    def replica_fn() -> Any:
        context = tf.distribute.get_replica_context()
        replicas = context.num_replicas_in_sync
        mine = tf.concat([tf.reshape(tf.cast(v.read_value(), tf.float64), [-1]) for v in variables], 0)
        # An all-gather built from an all-reduce, which every cross-device op supports: each
        # replica fills its own row, zeros elsewhere; x + 0 is exact, so the sum is the rows.
        own_row = tf.equal(tf.range(replicas), context.replica_id_in_sync_group)[:, None]
        rows = context.all_reduce(tf.distribute.ReduceOp.SUM, tf.where(own_row, mine[None, :], 0.0))
        spread = tf.reduce_max(tf.reduce_max(rows, 0) - tf.reduce_min(rows, 0))
        mean = tf.reduce_mean(rows, axis=0)
        for variable, part in zip(variables, tf.split(mean, sizes), strict=True):
            # Aggregation NONE in a replica context: each replica writes its own copy.
            variable.assign(tf.cast(tf.reshape(part, variable.shape), variable.dtype))
        return spread

    function = tf.function(lambda: strategy.run(replica_fn), jit_compile=False)
    return function


def average_replica_copies(model: Any) -> float | None:
    """Set each replica's copy of `model`'s moving statistics to the mean of the copies.

    The variables averaged are the non-trainable floating-point ones that each
    replica updates on its own (BatchNormalization's moving mean and variance);
    weights, counters and random-generator states are left alone. Returns the
    largest difference between the copies before averaging (0.0 if they were
    equal), or None when there is nothing to average (no strategy, one replica,
    no such variable). Call it eagerly, outside ``strategy.run`` (inside or
    outside the strategy's scope). Under a multi-worker strategy it is a
    collective: every worker must call it, and it averages across workers too.
    """
    model = _check_model(model)
    if tf.distribute.has_strategy() and not tf.distribute.in_cross_replica_context():
        raise RuntimeError(
            "average_replica_copies was called inside strategy.run (a replica context); call it "
            "from the Python loop between steps, or use the AverageReplicaCopies callback."
        )
    variables = _replicated_statistics(model)
    if not variables:
        return None
    strategy = variables[0].distribute_strategy
    if strategy.num_replicas_in_sync < 2:
        return None
    key = tuple(id(v) for v in variables)
    cached = _AVERAGERS.get(model)
    if cached is None or cached[0] != key:
        cached = (key, _make_averager(strategy, variables))
        _AVERAGERS[model] = cached
    spreads = strategy.experimental_local_results(cached[1]())
    return max(float(s) for s in spreads)


class AverageReplicaCopies(keras.callbacks.Callback):
    """Average the replicas' BatchNormalization statistics (`average_replica_copies`) during ``fit``.

    It averages when validation starts (so validation scores the averaged
    model), at each epoch end and at the end of training. Put it first in
    ``callbacks``, before ModelCheckpoint and the like, so they save the
    averaged model. `spreads` holds, per epoch, the largest difference between
    the copies before that epoch's first averaging; a model with nothing to
    average (one replica, no BatchNormalization) records nothing.
    """

    def __init__(self, verbose: bool = False) -> None:
        super().__init__()
        if not isinstance(verbose, bool):
            raise ValueError(f"verbose must be True or False, got {verbose!r}.")
        self.verbose = verbose
        self.spreads: list[float] = []
        self._pending: float | None = None

    def _average(self) -> None:
        spread = average_replica_copies(self.model)
        if spread is not None:
            self._pending = spread if self._pending is None else max(self._pending, spread)

    def on_test_begin(self, logs: dict | None = None) -> None:
        self._average()

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        self._average()
        if self._pending is not None:
            self.spreads.append(self._pending)
            if self.verbose:
                print(
                    f"AverageReplicaCopies: epoch {epoch + 1}: replica copies of the moving "
                    f"statistics differed by up to {self._pending:.3g}; set to their mean."
                )
        self._pending = None

    def on_train_end(self, logs: dict | None = None) -> None:
        self._average()  # fit stopped mid-epoch by a callback ends here, not at on_epoch_end
        self._pending = None


def _layers(layer: Any) -> Iterator[Any]:
    yield layer
    for child in getattr(layer, "layers", ()):
        yield from _layers(child)


def batchnorm_layers(model: Any) -> list[keras.layers.BatchNormalization]:
    """Every BatchNormalization layer of `model`, nested models (and a towers' template) included."""
    found: dict[int, Any] = {}  # a layer shared by two parents is listed once
    for layer in _layers(_check_model(model)):
        if isinstance(layer, keras.layers.BatchNormalization):
            found.setdefault(id(layer), layer)
    return list(found.values())


def sync_batchnorm(model: Any) -> int:
    """Switch every BatchNormalization layer of `model` to ``synchronized=True``; how many there are.

    Its weights are unchanged and the model's config says ``synchronized``, so
    a saved copy stays synchronized. Call it before training: a ``fit`` already
    run traced the old behaviour, so the compiled functions are reset here and
    traced again at the next ``fit``/``evaluate``/``predict``. Without a
    strategy (one device) synchronized layers compute the same statistics, to
    rounding (as E[x^2] - E[x]^2 rather than ``tf.nn.moments``).
    """
    layers = batchnorm_layers(model)
    for layer in layers:
        layer.synchronized = True  # read when the layer is called, i.e. at the next trace
    for owner in (model, getattr(model, "template", None)):
        for name in ("train_function", "test_function", "predict_function"):
            if owner is not None and getattr(owner, name, None) is not None:
                setattr(owner, name, None)
    return len(layers)
