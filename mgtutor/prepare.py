"""Preparing arrays for training: a balanced subset, scaled pixels, one-hot labels, a tf.data pipeline.

Notebook 01 writes these steps out; `Dataset.subset` and `Dataset.prepared` use them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mgtutor.support.checks import check_whole, is_whole


def take_subset(
    x: np.ndarray, y: np.ndarray, n: int | None, seed: int = 0, parameter: str = "n"
) -> tuple[np.ndarray, np.ndarray]:
    """`n` examples, as close to equally many per class as the data allows, in random order."""
    if n is None:
        return x, y
    if not is_whole(n) or n < 1:
        raise ValueError(f"{parameter} must be a whole number >= 1 or None, got {n!r}.")
    if n > len(y):
        raise ValueError(f"{parameter}={n} but only {len(y)} examples exist; use at most {len(y)}.")
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(y))
    labels = np.asarray(y).reshape(-1)[order]
    rank_in_class = np.zeros(len(order), dtype=np.int64)
    for label in np.unique(labels):
        members = labels == label
        rank_in_class[members] = np.arange(members.sum())
    # Ranks interleave the classes: the first n picks take from every class in turn.
    chosen = order[np.argsort(rank_in_class, kind="stable")[:n]]
    chosen = rng.permutation(chosen)
    return x[chosen], y[chosen]


def scale_images(x: np.ndarray) -> np.ndarray:
    """uint8 pixels to float32 in [0, 1], what seed 000 does with ``/= 255``."""
    return np.asarray(x, dtype=np.float32) / 255.0


def one_hot(y: np.ndarray, num_classes: int) -> np.ndarray:
    """Integer labels (N,) or (N, 1) to float32 one-hot (N, num_classes).

    The replacement for Keras 2's ``keras.utils.np_utils.to_categorical``
    (in Keras 3: ``keras.utils.to_categorical``).
    """
    labels = np.asarray(y).reshape(-1).astype(np.int64)
    if labels.size and (labels.min() < 0 or labels.max() >= num_classes):
        raise ValueError(
            f"labels must lie in [0, {num_classes}); found {labels.min()}..{labels.max()}. "
            "Check num_classes."
        )
    return np.eye(num_classes, dtype=np.float32)[labels]


def class_counts(y: np.ndarray, num_classes: int) -> np.ndarray:
    """How many examples each class has."""
    return np.bincount(np.asarray(y).reshape(-1).astype(np.int64), minlength=num_classes)


def make_dataset(
    x: np.ndarray,
    y: np.ndarray,
    batch_size: int,
    *,
    shuffle: bool = True,
    seed: int | None = 0,
    drop_remainder: bool = False,
    repeat: bool = False,
) -> Any:
    """A ``tf.data`` pipeline: (seeded) shuffle, batch, prefetch.

    Under a distribution strategy ``batch_size`` is the *global* batch, the
    per-replica batch times the number of replicas.
    """
    check_whole("batch_size", batch_size, 1)
    if len(x) != len(y):
        raise ValueError(f"x and y differ in length: {len(x)} images, {len(y)} labels.")
    import tensorflow as tf

    dataset = tf.data.Dataset.from_tensor_slices((x, y))
    if shuffle:
        dataset = dataset.shuffle(len(x), seed=seed, reshuffle_each_iteration=True)
    if repeat:
        dataset = dataset.repeat()
    return dataset.batch(batch_size, drop_remainder=drop_remainder).prefetch(tf.data.AUTOTUNE)
