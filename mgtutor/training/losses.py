"""The Trainer's loss as per-example values (it divides by the global batch itself), and its metrics."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import keras
import numpy as np
import tensorflow as tf

_ACCURACY_NAMES = ("accuracy", "acc")


class _PerExampleLoss(keras.losses.Loss):
    """A loss function as a Keras Loss that returns one value per example (no reduction)."""

    def __init__(self, fn: Callable[..., Any], name: str) -> None:
        super().__init__(name=name, reduction=None)
        self.fn = fn

    def call(self, y_true: Any, y_pred: Any) -> Any:
        # As Keras does for loss functions: labels (b,) against predictions (b, 1).
        if len(y_true.shape) == len(y_pred.shape) - 1 and y_pred.shape[-1] == 1:
            y_true = tf.expand_dims(y_true, -1)
        return self.fn(y_true, y_pred)


def per_example_loss(loss: Any) -> keras.losses.Loss:
    """`loss` (a name, a Keras Loss or a function) as a Loss with reduction None."""
    if isinstance(loss, str):
        try:
            resolved = keras.losses.get(loss)
        except ValueError as err:
            raise ValueError(f"loss: unknown loss {loss!r}; e.g. 'categorical_crossentropy'.") from err
        if isinstance(resolved, keras.losses.Loss):
            loss = resolved
        else:
            return _PerExampleLoss(resolved, loss)
    if isinstance(loss, keras.losses.Loss):
        try:
            return type(loss).from_config({**loss.get_config(), "reduction": None})
        except (TypeError, ValueError) as err:
            raise ValueError(
                f"loss: {type(loss).__name__} cannot be rebuilt without reduction ({err}); pass its "
                "per-example function instead."
            ) from err
    if callable(loss):
        return _PerExampleLoss(loss, getattr(loss, "__name__", "loss"))
    raise TypeError(f"loss must be a loss name, a keras.losses.Loss or a function, got {loss!r}.")


def make_metric(spec: Any, y: np.ndarray, output_shape: tuple) -> keras.metrics.Metric:
    """A fresh metric for `spec`, resolving 'accuracy' from the label and output shapes as compile does."""
    if isinstance(spec, str) and spec.lower() in _ACCURACY_NAMES:
        if output_shape[-1] == 1:
            return keras.metrics.BinaryAccuracy(name=spec)
        if y.ndim < len(output_shape) or (y.shape[-1] == 1 and output_shape[-1] > 1):
            return keras.metrics.SparseCategoricalAccuracy(name=spec)
        return keras.metrics.CategoricalAccuracy(name=spec)
    if isinstance(spec, keras.metrics.Metric):
        # Rebuilt so that its variables are created under the strategy's scope.
        return type(spec).from_config(spec.get_config())
    try:
        resolved = keras.metrics.get(spec)
    except ValueError as err:
        raise ValueError(f"metrics: unknown metric {spec!r}; e.g. 'accuracy' or 'mae'.") from err
    if isinstance(resolved, keras.metrics.Metric):
        return resolved
    return keras.metrics.MeanMetricWrapper(resolved, name=spec if isinstance(spec, str) else None)
