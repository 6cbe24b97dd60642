"""Gradient accumulation for `Trainer`: one optimizer update, so one all-reduce, per k batches.

Each replica adds up its own gradients of k batches in local variables (``ON_READ``: nothing is
exchanged while they fill), and only the group's last batch calls ``apply_gradients``, whose
all-reduce sums the replicas' totals: PyTorch DDP's ``no_sync``, written as notebook 11's cells do.
Every batch's loss is divided by the global batch, so the sum of a group of g batches divided by g is
the gradient of the mean loss over all its g · batch examples, a short last group's included.
A group runs from its first batch to the update without a checkpoint in between, and its first batch
overwrites the sums, so a run killed mid-group resumes from the group's start with nothing stale.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import tensorflow as tf

# (x, y) of one replica's batch -> that replica's gradients of its loss share (metrics updated).
ReplicaGradients = Callable[[Any, Any], list]


def gradient_sums(strategy: Any, variables: list) -> list[tf.Variable]:
    """One zeroed sum per trainable variable, each replica's copy its own (read locally, never reduced)."""
    with strategy.scope():
        return [
            tf.Variable(
                tf.zeros(tuple(variable.shape), variable.dtype),
                trainable=False,
                name="gradient_sum",
                synchronization=tf.VariableSynchronization.ON_READ,
                aggregation=tf.VariableAggregation.SUM,
            )
            for variable in variables
        ]


def group_sizes(steps: int, k: int) -> list[int]:
    """The batches of each update of an epoch of `steps` batches: k each, the last one what is left."""
    return [min(k, steps - start) for start in range(0, steps, k)]


def accumulating_updates(
    strategy: Any,
    gradients_of: ReplicaGradients,
    optimizer: Any,
    variables: list,
    sums: list[tf.Variable],
    results: Callable[[], dict[str, Any]],
) -> Callable[[Any, int], dict[str, float]]:
    """``update(iterator, g)``: g batches from `iterator` summed on each replica, then one update.

    Returns the logs (`results`) after the update. Four graphs at most (first/last batch of a group
    or not), each traced once; the group size enters as a tensor, so a short last group retraces nothing.
    """

    def replica_step(x: Any, y: Any, scale: Any, *, first: bool, last: bool) -> None:
        gradients = gradients_of(x, y)
        gradients = [tf.zeros_like(v) if g is None else g for g, v in zip(gradients, variables, strict=True)]
        if not first:  # in replica context a sum reads this replica's own copy
            gradients = [total + g for total, g in zip(sums, gradients, strict=True)]
        if last:
            mean = [g * tf.cast(scale, g.dtype) for g in gradients]
            # The group's one all-reduce: apply_gradients sums the replicas' totals, then updates.
            optimizer.apply_gradients(zip(mean, variables, strict=True))
        else:
            for total, g in zip(sums, gradients, strict=True):
                total.assign(g)

    def graph(first: bool, last: bool) -> Callable[[Any, Any], Any]:
        @tf.function
        def step(iterator: Any, scale: Any) -> Any:
            x, y = next(iterator)
            strategy.run(functools.partial(replica_step, first=first, last=last), args=(x, y, scale))
            # Reading the metrics is a collective under a multi-worker strategy: only after the update.
            return results() if last else {}

        return step

    graphs: dict[tuple[bool, bool], Callable[[Any, Any], Any]] = {}

    def update(iterator: Any, size: int) -> dict[str, float]:
        scale = tf.constant(1.0 / size, tf.float32)
        logs: dict[str, Any] = {}
        for index in range(size):
            key = (index == 0, index == size - 1)
            if key not in graphs:
                graphs[key] = graph(*key)
            logs = graphs[key](iterator, scale)
        return {name: float(value) for name, value in logs.items()}

    return update
