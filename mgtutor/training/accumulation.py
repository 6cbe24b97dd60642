"""Gradient accumulation for `Trainer`: one optimizer update, so one all-reduce, per k batches
(lesson 11). Each replica adds up its own gradients of k batches in local variables, and only the
group's last batch calls ``apply_gradients``, whose all-reduce sums the replicas' totals (PyTorch
DDP's ``no_sync``). Every batch's loss is divided by the global batch, so a group's sum divided by
its size is the gradient of the mean loss over all its examples, a short last group's included. A
group runs from its first batch to the update without a checkpoint in between, and its first batch
overwrites the sums, so a run killed mid-group resumes from the group's start with nothing stale.

Generated from notebooks/11_where_time_goes.ipynb (its #@save cells) by tools/lesson_code.py: edit the lesson,
then `make lesson-code`. A test fails when this file and the lesson differ.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tensorflow as tf


def gradient_sums(strategy: Any, variables: list) -> list[tf.Variable]:
    """One zeroed sum per trainable variable, each replica's copy its own (read locally, never reduced)."""
    with strategy.scope():
        return [tf.Variable(tf.zeros(tuple(v.shape), v.dtype), trainable=False, name="gradient_sum",
                            synchronization=tf.VariableSynchronization.ON_READ,
                            aggregation=tf.VariableAggregation.SUM) for v in variables]


def group_sizes(steps: int, k: int) -> list[int]:
    """The batches of each update of an epoch of `steps` batches: k each, the last one what is left."""
    return [min(k, steps - start) for start in range(0, steps, k)]


def replica_update(gradients_of: Callable, optimizer: Any, variables: list, sums: list, x: Any, y: Any,
                   scale: Any, *, first: bool, last: bool) -> None:
    """One batch of a group, on one replica: its gradients added to this replica's sums; on the group's
    last batch, their mean applied (`apply_gradients` all-reduces it: the group's one all-reduce)."""
    gradients = gradients_of(x, y)  # each batch's loss is divided by the global batch
    gradients = [tf.zeros_like(v) if g is None else g for g, v in zip(gradients, variables, strict=True)]
    if not first:  # the first batch overwrites the sums, so a resumed group starts clean
        gradients = [total + g for total, g in zip(sums, gradients, strict=True)]
    if last:
        mean = [g * tf.cast(scale, g.dtype) for g in gradients]
        optimizer.apply_gradients(zip(mean, variables, strict=True))
    else:
        for total, g in zip(sums, gradients, strict=True):
            total.assign(g)


def accumulating_updates(strategy: Any, gradients_of: Callable, optimizer: Any, variables: list, sums: list,
                         results: Callable[[], dict]) -> Callable[[Any, int], dict[str, float]]:
    """``update(iterator, g)``: g batches summed on each replica, then one update; returns its logs.
    Four graphs at most, each traced once: the group size is a tensor (a short group retraces nothing)."""
    graphs: dict[tuple[bool, bool], Callable] = {}

    def graph(first: bool, last: bool) -> Callable:
        def replica(x: Any, y: Any, scale: Any) -> None:
            replica_update(gradients_of, optimizer, variables, sums, x, y, scale, first=first, last=last)
        @tf.function
        def step(iterator: Any, scale: Any) -> dict:
            x, y = next(iterator)
            strategy.run(replica, args=(x, y, scale))
            return results() if last else {}  # reading metrics is a collective: only after the update
        return step

    def update(iterator: Any, size: int) -> dict[str, float]:
        scale, logs = tf.constant(1.0 / size, tf.float32), {}
        for index in range(size):
            key = (index == 0, index == size - 1)
            graphs[key] = graphs.get(key) or graph(*key)  # made, and traced, once
            logs = graphs[key](iterator, scale)
        return {name: float(value) for name, value in logs.items()}
    return update
