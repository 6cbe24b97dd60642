"""mgtutor.training.feeding: the batch order both engines replay after a restart."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from mgtutor.training.feeding import epoch_rows, fed_rows


def test_epoch_order_depends_on_seed_and_epoch_only():
    def order(seed, epoch, shuffle=True):
        return [int(i) for i in epoch_rows(10, seed, np.int64(epoch), shuffle)]

    assert order(3, 1) == order(3, 1)  # a restarted process replays it
    assert sorted(order(3, 1)) == list(range(10)) and order(3, 1) != order(3, 2) != order(4, 1)
    assert order(3, 1, shuffle=False) == list(range(10))


def test_fed_rows_are_full_global_batches_refused_when_there_is_none():
    strategy = tf.distribute.get_strategy()  # one replica: the whole global batch is this worker's
    assert fed_rows(strategy, 10, 4, shuffle=False) == [[0, 1, 2, 3], [4, 5, 6, 7]]  # 8 and 9: no full batch
    shuffled = fed_rows(strategy, 10, 4, epoch=2, seed=5)
    assert sum(shuffled, []) == [int(i) for i in epoch_rows(10, 5, np.int64(2))][:8]
    with pytest.raises(ValueError, match="batch_size=16 exceeds num_examples=10"):
        fed_rows(strategy, 10, 16)
    with pytest.raises(ValueError, match="seed must be a whole number >= 0"):
        fed_rows(strategy, 10, 4, seed=-1)
