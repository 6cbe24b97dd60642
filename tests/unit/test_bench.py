"""mgtutor.bench: pipeline throughput counts the images it was given, after the warm-up."""

from __future__ import annotations

import time

import numpy as np
import pytest

from mgtutor.bench import pipeline_images_per_second


def slow_batches(size: int, delay: float):
    while True:
        time.sleep(delay)
        yield np.zeros((size, 2)), np.zeros(size)


def test_rate_matches_a_known_producer():
    # 10 batches of 50 images at 20 ms each: about 2,500 images/s, never more.
    rate = pipeline_images_per_second(slow_batches(50, 0.02), 10, warmup=2)
    assert 1500 < rate <= 2500


def test_accepts_a_tf_data_dataset_shorter_than_asked():
    import tensorflow as tf

    dataset = tf.data.Dataset.from_tensor_slices(np.zeros((25, 3), np.float32)).batch(10)
    assert pipeline_images_per_second(dataset, 5, warmup=0) > 0


def test_too_few_batches_and_bad_counts_are_clear_errors():
    with pytest.raises(ValueError, match="ran out after the 1 warm-up"):
        pipeline_images_per_second([np.zeros((4, 1))], 3, warmup=1)
    with pytest.raises(ValueError, match="n_batches must be a whole number >= 1"):
        pipeline_images_per_second([], 0)
