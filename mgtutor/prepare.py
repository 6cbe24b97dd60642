"""Preparing arrays for training: scaled pixels, one-hot labels, a tf.data pipeline (lesson 01).

Generated from notebooks/01_prepare_data.ipynb (its #@save cells) by tools/lesson_code.py: edit the lesson,
then `make lesson-code`. A test fails when this file and the lesson differ.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf


def scale_images(x: np.ndarray) -> np.ndarray:
    """uint8 pixels to float32 in [0, 1], what seed 000 does with ``/= 255``."""
    return np.asarray(x, dtype=np.float32) / 255.0


def one_hot(y: np.ndarray, num_classes: int) -> np.ndarray:
    """Integer labels, (N,) or (N, 1), to float32 one-hot rows: label k becomes row k of the identity."""
    labels = np.asarray(y).reshape(-1).astype(np.int64)
    if labels.size and (labels.min() < 0 or labels.max() >= num_classes):  # NumPy would wrap -1 silently
        raise ValueError(f"labels must lie in [0, {num_classes}); found {labels.min()}..{labels.max()}. "
                         "Check num_classes.")
    return np.eye(num_classes, dtype=np.float32)[labels]


def make_dataset(x, y, batch_size: int, *, shuffle: bool = True, seed: int | None = 0,
                 drop_remainder: bool = False, repeat: bool = False) -> tf.data.Dataset:
    """(x, y) shuffled, batched and prefetched; under a strategy, batch_size is the global batch."""
    dataset = tf.data.Dataset.from_tensor_slices((x, y))
    if shuffle:  # a new order every epoch; the same orders in every run with the same seed
        dataset = dataset.shuffle(len(x), seed=seed, reshuffle_each_iteration=True)
    if repeat:  # endless: `steps_per_epoch` then says where an epoch ends
        dataset = dataset.repeat()
    return dataset.batch(batch_size, drop_remainder=drop_remainder).prefetch(tf.data.AUTOTUNE)
