"""The batches `ParallelWrapper` deals to its workers, one per worker per round.

From whatever Keras 2 or deeplearning4j's wrapper took (a list, a generator, a ``PyDataset``, a
``tf.data.Dataset``, or (x, y) arrays cut into batches), read ahead in a thread (deeplearning4j's
``prefetchBuffer``); and `ParallelWrapper.fit`'s arguments, checked before any work.
"""

from __future__ import annotations

import itertools
import os
import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from mgtutor.support.checks import check_whole

PREFETCH_THREAD_NAME = "mgtutor-prefetch"
_DONE = object()


def rows(part: Any) -> int:
    """The rows of a batch part (an array, or a nest of them)."""
    return int(keras.tree.flatten(part)[0].shape[0])


def _as_batch(item: Any, index: int) -> tuple[Any, Any]:
    """(x, y) as tensors, or an error naming the bad batch."""
    if not isinstance(item, tuple | list) or len(item) != 2:
        raise ValueError(f"data: batch {index} is a {type(item).__name__}, not an (x, y) pair (no weights).")
    try:
        x, y = (keras.tree.map_structure(tf.convert_to_tensor, part) for part in item)
    except (ValueError, TypeError) as err:
        raise ValueError(f"data: batch {index} cannot be turned into tensors: {err}") from err
    rows = {int(t.shape[0]) for t in keras.tree.flatten((x, y))}
    if len(rows) != 1 or 0 in rows:
        raise ValueError(f"data: batch {index} has {sorted(rows)} rows in x and y; they must match, >= 1.")
    return x, y


class Prefetcher:
    """DL4J's prefetchBuffer: a thread keeps up to `size` batches ready ahead of training.

    Its exceptions are raised again in the caller; leaving the `with` block (end of
    epoch, or any error) stops the thread and waits for it.
    """

    def __init__(self, make_iterator: Callable[[], Iterator], limit: int | None, size: int) -> None:
        self._queue: queue.Queue = queue.Queue(maxsize=size)
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._produce, args=(make_iterator, limit), name=PREFETCH_THREAD_NAME, daemon=True
        )

    def __enter__(self) -> Prefetcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()

    def _put(self, item: Any) -> bool:
        while not self._stop.is_set():  # timed, so a full queue cannot hold the thread after a stop
            try:
                self._queue.put(item, timeout=0.05)
                return True
            except queue.Full:
                pass
        return False

    def _produce(self, make_iterator: Callable[[], Iterator], limit: int | None) -> None:
        try:
            iterator = make_iterator()
            for index in itertools.count() if limit is None else range(limit):
                item = next(iterator, _DONE)
                if item is _DONE or not self._put(_as_batch(item, index)):
                    break
        except BaseException as err:  # every error must reach the caller
            self._put(err)
            return
        self._put(_DONE)

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        # The thread always ends by queueing _DONE or its error, unless __exit__ stopped it.
        while (item := self._queue.get()) is not _DONE:
            if isinstance(item, BaseException):
                raise item
            yield item


class Source:
    """Each epoch's batches: `count` per pass when known; `persistent` when one iterator
    serves the whole fit (a one-pass iterator, or endless data)."""

    def __init__(self, data: Any, batch_size: int | None, shuffle: bool, seed: int | None) -> None:
        self.count: int | None = None
        self.on_epoch_end = data.on_epoch_end if isinstance(data, keras.utils.PyDataset) else None
        self.infinite, self.persistent = False, None
        if isinstance(data, tuple) and len(data) == 2 and all(hasattr(a, "__array__") for a in data):
            x, y = (np.asarray(a) for a in data)
            batch = check_whole("batch_size", 32 if batch_size is None else batch_size, 1)
            if len(x) != len(y):
                raise ValueError(f"data: x has {len(x)} examples but y has {len(y)}; give one target each.")
            rng, self.count = np.random.default_rng(seed), -(-len(x) // batch)

            def batches() -> Iterator[tuple[np.ndarray, np.ndarray]]:
                order = rng.permutation(len(x)) if shuffle else np.arange(len(x))
                for start in range(0, len(x), batch):
                    yield x[order[start : start + batch]], y[order[start : start + batch]]

            self.make_iterator = batches
            return
        if batch_size is not None:
            raise ValueError("batch_size is for (x, y) arrays; this data yields batches: drop batch_size.")
        if isinstance(data, np.ndarray | str | bytes) or not isinstance(data, Iterable):
            raise TypeError(
                "data must be (x, y) arrays (with batch_size=) or an iterable of (x, y) batches (a list, "
                f"a generator, a keras.utils.PyDataset, a tf.data.Dataset); got {type(data).__name__}."
            )

        def make() -> Iterator:
            if not isinstance(data, keras.utils.PyDataset):
                return iter(data)
            # By index, as Keras reads it: a Keras 2 style __iter__ (.flow's) never ends.
            return (data[i] for i in (itertools.count() if self.infinite else range(self.count)))

        if isinstance(data, keras.utils.PyDataset):
            self.count = data.num_batches
            self.infinite = self.count is None
        elif isinstance(data, tf.data.Dataset):
            cardinality = int(data.cardinality())
            self.count = cardinality if cardinality >= 0 else None
            self.infinite = cardinality == tf.data.INFINITE_CARDINALITY
        elif hasattr(data, "__len__"):
            self.count = len(data)
        if isinstance(data, Iterator) or self.infinite:
            self.persistent = make()  # later epochs continue where the last one stopped
        self.make_iterator = lambda: make() if self.persistent is None else self.persistent

    def check(self, workers: int, epochs: int, steps_per_epoch: int | None) -> None:
        """Refuse, before any work, data that cannot give every epoch a full round."""
        if steps_per_epoch is None and (self.infinite or (self.persistent is not None and epochs > 1)):
            raise ValueError(
                f"data never ends or is a one-pass iterator (a generator) with epochs={epochs}; pass "
                "steps_per_epoch to say where an epoch ends (or give a list, PyDataset or tf.data.Dataset)."
            )
        if self.count is not None and self.count < workers:
            raise ValueError(
                f"data yields {self.count} batch(es); each round needs one batch per worker (workers="
                f"{workers}). Give more data, a smaller batch_size or fewer workers."
            )


def checked_fit(
    data: Any, n: int, epochs: Any, batch_size: Any, shuffle: Any, seed: Any, steps_per_epoch: Any,
    validation_data: Any, verbose: Any, log_dir: Any,
) -> tuple[int, int, Source, dict[str, Any]]:
    """`ParallelWrapper.fit`'s arguments checked, before any work: (epochs, verbose, source, evaluate's)."""
    epochs = check_whole("epochs", epochs, 1)
    if steps_per_epoch is not None and check_whole("steps_per_epoch", steps_per_epoch, 1) % n:
        below = steps_per_epoch // n * n
        raise ValueError(
            f"steps_per_epoch={steps_per_epoch} is not a multiple of workers={n}: each round deals one "
            f"batch to every worker. Pass {f'{below} or ' if below else ''}{below + n}."
        )
    verbose = 1 if verbose == "auto" else verbose
    if isinstance(verbose, bool) or verbose not in (0, 1, 2):
        raise ValueError(f"verbose must be 0, 1, 2 or 'auto', got {verbose!r}.")
    if not isinstance(shuffle, bool):
        raise ValueError(f"shuffle must be True or False, got {shuffle!r}.")
    if log_dir is not None and (not isinstance(log_dir, str | os.PathLike) or not str(log_dir)):
        raise TypeError(f"log_dir must be a folder path (str or pathlib.Path) or None, got {log_dir!r}.")
    source = Source(data, batch_size, shuffle, seed)
    source.check(n, epochs, steps_per_epoch)
    evaluate_kwargs: dict[str, Any] = {"x": validation_data}
    if isinstance(validation_data, tuple) and len(validation_data) == 2:
        evaluate_kwargs = dict(zip(("x", "y"), validation_data, strict=True), batch_size=batch_size or 32)
    return epochs, verbose, source, evaluate_kwargs
