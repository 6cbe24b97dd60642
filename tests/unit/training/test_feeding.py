"""mgtutor.training.feeding: the batch order both engines replay after a restart."""

from __future__ import annotations

import numpy as np

from mgtutor.training.feeding import epoch_rows


def test_epoch_order_depends_on_seed_and_epoch_only():
    def order(seed, epoch, shuffle=True):
        return [int(i) for i in epoch_rows(10, seed, np.int64(epoch), shuffle)]

    assert order(3, 1) == order(3, 1)  # a restarted process replays it
    assert sorted(order(3, 1)) == list(range(10)) and order(3, 1) != order(3, 2) != order(4, 1)
    assert order(3, 1, shuffle=False) == list(range(10))
