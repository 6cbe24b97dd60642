"""The batch order both engines replay (`epoch_rows`), and the Trainer's input: row indices of each global
batch, gathered per replica."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import tensorflow as tf

from mgtutor.data_parallel import check_batch_divisible
from mgtutor.support.checks import check_whole
from mgtutor.support.tfdata import without_autotuner


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
        return without_autotuner(gathered.prefetch(tf.data.AUTOTUNE))

    return strategy.distribute_datasets_from_function(dataset_fn)


def fed_rows(
    strategy: Any, num_examples: int, batch_size: int, *, epoch: int = 0, seed: int = 0, shuffle: bool = True
) -> list[list[int]]:
    """Row indices this worker's replicas get at each full global batch of `epoch`, in replica order.

    The Trainer's own feed (`epoch_batches` through `distributed`) over `num_examples` rows; the
    rows after the last full batch are not fed.
    """
    num_examples = check_whole("num_examples", num_examples, 1)
    batch_size = check_whole("batch_size", batch_size, 1)
    epoch, seed = check_whole("epoch", epoch, 0), check_whole("seed", seed, 0)
    check_batch_divisible(batch_size, strategy.num_replicas_in_sync)
    steps = num_examples // batch_size
    if steps == 0:
        raise ValueError(f"batch_size={batch_size} exceeds num_examples={num_examples}: no full batch.")
    batches = epoch_batches(num_examples, batch_size, steps, seed, shuffle, epoch, epoch + 1)
    fed = []
    for (rows,) in distributed(strategy, batches, (np.arange(num_examples, dtype=np.int64),), batch_size):
        local = strategy.experimental_local_results(rows)  # this worker's replicas, in order
        fed.append([int(row) for part in local for row in np.asarray(part)])
    return fed


def padded_rows(n: int, batch: int) -> tuple[np.ndarray, np.ndarray]:
    """Row indices 0..n-1 padded to whole batches (padding repeats row 0), and 1/0 weights."""
    total = math.ceil(n / batch) * batch
    rows = np.arange(total) % n
    weights = (np.arange(total) < n).astype(np.float32)
    return rows, weights
