"""Measure throughput honestly: how fast an input pipeline delivers batches.

Training speed on N devices is bounded by the slower of two rates: how fast
the devices consume batches and how fast the input pipeline produces them.
`pipeline_images_per_second` measures the second, for any iterable of batches
(a ``PyDataset`` from ``ImageDataGenerator.flow``, a ``tf.data.Dataset``, a
generator), so a notebook can put the two rates side by side.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable
from typing import Any


def _batch_size(batch: Any) -> int:
    images = batch[0] if isinstance(batch, tuple | list) else batch
    return int(images.shape[0])


def _materialise(batch: Any) -> None:
    # tf.data and Keras layers may return lazily evaluated tensors; force the work.
    images = batch[0] if isinstance(batch, tuple | list) else batch
    if hasattr(images, "numpy"):
        images.numpy()


def pipeline_images_per_second(batches: Iterable[Any], n_batches: int, *, warmup: int = 1) -> float:
    """Images per second over `n_batches` batches of `batches`, after `warmup` untimed ones.

    The warm-up batches absorb one-off costs (tracing a ``tf.data`` graph,
    starting workers), which would otherwise dominate a short measurement.
    """
    for name, value, minimum in (("n_batches", n_batches, 1), ("warmup", warmup, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ValueError(f"{name} must be a whole number >= {minimum}, got {value!r}.")
    iterator = iter(batches)
    for batch in itertools.islice(iterator, warmup):
        _materialise(batch)
    images, start = 0, time.perf_counter()
    for batch in itertools.islice(iterator, n_batches):
        _materialise(batch)
        images += _batch_size(batch)
    seconds = time.perf_counter() - start
    if images == 0:
        raise ValueError(
            f"batches ran out after the {warmup} warm-up batch(es); give an iterable with at "
            f"least warmup + n_batches = {warmup + n_batches} batches (or one that repeats)."
        )
    return images / seconds
