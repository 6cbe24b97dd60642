"""`without_autotuner`, the streams that use it (lesson 16 writes it out), `iterators_end_promptly`."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import tensorflow as tf

from mgtutor.keras2.augment import ImageDataGenerator
from mgtutor.speed.measure import _make_input
from mgtutor.support.tfdata import without_autotuner
from mgtutor.training.feeding import distributed, epoch_batches
from mgtutor.training.resume import _batches
from tests.conftest import ROOT, run_child

CHILD = ROOT / "tests" / "unit" / "support" / "tfdata_child.py"


def test_without_autotuner_turns_it_off_and_keeps_every_element():
    dataset = tf.data.Dataset.range(10).map(lambda i: i * 2, num_parallel_calls=tf.data.AUTOTUNE).batch(4)
    quiet = without_autotuner(dataset.prefetch(tf.data.AUTOTUNE))
    assert quiet.options().autotune.enabled is False
    assert dataset.options().autotune.enabled is None  # the dataset given is left as it was (unset: on)
    assert [b.tolist() for b in quiet.as_numpy_iterator()] == [[0, 2, 4, 6], [8, 10, 12, 14], [16, 18]]


def test_the_packages_streams_have_no_autotuner_for_a_dropped_iterator_to_wait_on():
    x = np.random.default_rng(0).random((10, 8, 8, 3), dtype=np.float32)
    y = np.eye(2, dtype=np.float32)[np.arange(10) % 2]
    augmented = ImageDataGenerator(horizontal_flip=True).as_dataset(x, y, batch_size=4, seed=0)
    fed = distributed(tf.distribute.get_strategy(), epoch_batches(10, 4, 2, 0, True, 0, 1), (x, y), 4)
    plan = SimpleNamespace(num_examples=10, seed=0, batch_size=4, arrays=(x, y), steps_per_epoch=3)
    streams = {"as_dataset": augmented, "Trainer's feed": fed, "resumable_fit's": _batches(plan, 0, 1, 0),
               **{f"study {p}": _make_input(p, x, y, 4, 0)[0] for p in ("synthetic", "in_memory", "tf.data")}}
    autotuned = {name: stream.options().autotune.enabled for name, stream in streams.items()}
    assert autotuned == dict.fromkeys(streams, False)
    assert len(list(streams["resumable_fit's"])) == 3  # still every batch of the epoch


def test_after_setup_devices_every_iterator_that_leaves_the_autotuner_unset_has_none():
    result = run_child(CHILD)
    assert result["plain"] is False
    assert result["per_device"] == [False, False] and result["source"] is False  # MirroredStrategy's too
    assert result["kept"] is True  # a dataset that sets it keeps its choice
    assert result["stream_left_unset"] is None  # only the iterator's own view changes
    batches = [[8 * b + 2 * i for i in range(4)] for b in range(4)]
    assert result["elements"] == batches  # every element, in order
    assert result["device_batches"] == [batches[:2], batches[2:]]  # each device its batch, in turn
    assert result["again"] is True and result["wrapped_once"]  # a second call wraps nothing twice
