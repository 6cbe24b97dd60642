"""The batch order both engines replay (`epoch_rows`), and the Trainer's input: row indices of each global
batch, gathered per replica."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import tensorflow as tf


def epoch_rows(n: int, seed: int, epoch: Any, shuffle: bool = True) -> Any:
    """The rows 0..n-1 as a dataset, in epoch `epoch`'s order for `seed`."""
    rows = tf.range(n, dtype=tf.int64)
    if shuffle:
        # Stateless: the order depends on (seed, epoch) only, never on what ran before,
        # so a restarted process shuffles epoch 3 exactly as the first process did.
        rows = tf.random.experimental.stateless_shuffle(
            rows, seed=tf.stack([tf.constant(seed, tf.int64), epoch])
        )
    return tf.data.Dataset.from_tensor_slices(rows)


def epoch_batches(n: int, batch: int, steps: int, seed: int, shuffle: bool, first: int, last: int) -> Any:
    """Row indices of each global batch of epochs first..last-1, in their (seed, epoch) order."""

    def one_epoch(epoch: Any) -> Any:
        return epoch_rows(n, seed, epoch, shuffle).batch(batch, drop_remainder=True).take(steps)

    return tf.data.Dataset.range(first, last).flat_map(one_epoch)


def distributed(strategy: Any, batches: Any, arrays: tuple, global_batch: int) -> Any:
    """Feed each replica its contiguous slice of every global batch of row indices."""

    def dataset_fn(context: tf.distribute.InputContext) -> Any:
        per_replica = context.get_per_replica_batch_size(global_batch)
        local = context.num_replicas_in_sync // context.num_input_pipelines  # replicas this pipeline feeds
        start = context.input_pipeline_id * local * per_replica

        def own_slices(rows: Any) -> Any:
            return tf.reshape(rows[start : start + local * per_replica], [local, per_replica])

        data = tf.data.Dataset.from_tensors(arrays).repeat()
        # One element per local replica, in replica order: the strategy hands them out round-robin.
        rows = batches.map(own_slices).unbatch()
        gathered = tf.data.Dataset.zip((rows, data)).map(
            lambda index, values: tuple(tf.gather(value, index) for value in values)
        )
        return gathered.prefetch(tf.data.AUTOTUNE)

    return strategy.distribute_datasets_from_function(dataset_fn)


def padded_rows(n: int, batch: int) -> tuple[np.ndarray, np.ndarray]:
    """Row indices 0..n-1 padded to whole batches (padding repeats row 0), and 1/0 weights."""
    total = math.ceil(n / batch) * batch
    rows = np.arange(total) % n
    weights = (np.arange(total) < n).astype(np.float32)
    return rows, weights
