"""What the accumulation tests share with their child programs: the data, a BN-free model, the update by
hand, and a count of the optimizer's gradient all-reduces as they run (not as they are traced).

Keras 3's TensorFlow optimizer sums the replicas' gradients in ``_all_reduce_sum_gradients``
(keras/src/backend/tensorflow/optimizer.py, Keras 3.15), once per ``apply_gradients`` in replica
context. `count_all_reduces` wraps it with a counter increment, so the counter moves each time a
graph that all-reduces runs. Import it after the devices are set up (it imports TensorFlow).
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
import tensorflow as tf

from mgtutor.training.feeding import epoch_rows

N = 100  # not a multiple of any batch used: whole batches only, so 4 rows (B=8, 16, 32) are left out


def data(n: int = N, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.random((n, 8, 8, 3), dtype=np.float32), np.eye(4, dtype=np.float32)[rng.integers(0, 4, n)]


class Tripwire(keras.layers.Layer):
    """The identity; while training, raises at its `at`-th call: a process dying between two batches."""

    def __init__(self, at: int | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.at, self.calls = at, 0

    def _tick(self) -> np.float32:
        self.calls += 1
        if self.calls == self.at:
            raise RuntimeError(f"simulated kill at batch {self.at}")
        return np.float32(0)

    def call(self, x, training=False):
        if not training or self.at is None:
            return x
        with tf.control_dependencies([tf.py_function(self._tick, [], tf.float32)]):
            return tf.identity(x)

    def compute_output_shape(self, input_shape):
        return input_shape


def model(dropout: float = 0.0, tripwire: int | None = None) -> keras.Model:
    keras.utils.set_random_seed(1)
    return keras.Sequential([  # no BatchNormalization: the equalities below are exact in real numbers
        keras.Input((8, 8, 3)), Tripwire(tripwire), keras.layers.Conv2D(4, 3, activation="relu"),
        keras.layers.Flatten(), *([keras.layers.Dropout(dropout)] if dropout else []),
        keras.layers.Dense(4, activation="softmax", kernel_regularizer=keras.regularizers.L2(1e-3)),
    ])  # fmt: skip


def by_hand(model: keras.Model, batch: int, k: int, epochs: int) -> int:
    """Plain TensorFlow: each update is the gradient of the mean loss over all the examples of its group."""
    x, y = data()
    optimizer = keras.optimizers.SGD(0.1, momentum=0.9)
    loss_of = keras.losses.CategoricalCrossentropy()  # the mean over the examples given
    updates = 0
    for epoch in range(epochs):
        order = np.fromiter(epoch_rows(N, 3, tf.constant(epoch, tf.int64)).as_numpy_iterator(), np.int64)
        order = order[: N // batch * batch]  # whole batches only
        for start in range(0, len(order), k * batch):
            rows = order[start : start + k * batch]  # the last group: what is left
            with tf.GradientTape() as tape:
                loss = loss_of(y[rows], model(x[rows], training=True)) + tf.add_n(model.losses)
            gradients = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(gradients, model.trainable_variables, strict=True))
            updates += 1
    return updates


def count_all_reduces(strategy: Any, optimizer: Any) -> tf.Variable:
    """A counter per replica, +1 each time the replica takes part in the optimizer's gradient all-reduce."""
    with strategy.scope():
        calls = tf.Variable(
            0.0,
            trainable=False,
            synchronization=tf.VariableSynchronization.ON_READ,
            aggregation=tf.VariableAggregation.SUM,
        )
    original = optimizer._all_reduce_sum_gradients

    def counted(grads_and_vars: Any) -> Any:
        calls.assign_add(1.0)  # replica context: this replica's own copy
        return original(grads_and_vars)

    optimizer._all_reduce_sum_gradients = counted
    return calls


def per_replica(strategy: Any, calls: tf.Variable) -> list[int]:
    """The count of each replica of this process."""
    return [int(value) for value in strategy.experimental_local_results(calls)]
