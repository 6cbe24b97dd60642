"""`EndlessBatches`: Keras 2's endless stream of batches, for ``fit(..., steps_per_epoch=...)``.

Keras 2 read a ``Sequence`` round and round, ``on_epoch_end`` at each pass; Keras 3 restarts a
``PyDataset`` only once read to the end ("Your input ran out of data"). This infinite PyDataset
maps Keras 3's positions 0, 1, 2, ... of the whole run to (pass, batch).
"""

from __future__ import annotations

import os
import random
import threading
from typing import Any

import keras
import numpy as np

from mgtutor.support.checks import check_whole, is_whole


def is_sequence_like(data: Any) -> bool:
    """A finite, indexable batch source: a ``keras.utils.PyDataset`` or a Keras 2 ``Sequence``."""
    if isinstance(data, keras.utils.PyDataset):
        return data.num_batches is not None
    # Keras 2 (and tf_keras) Sequences are not PyDatasets but have these three.
    return all(hasattr(data, name) for name in ("__len__", "__getitem__", "on_epoch_end")) and not isinstance(
        data, str | bytes | dict | tuple | list | np.ndarray
    )


class EndlessBatches(keras.utils.PyDataset):
    """`data` (a PyDataset, ``flow()`` or Keras 2 Sequence) as one endless stream of batches.

    Position ``g`` of a run is batch ``g % len(data)`` of pass ``g // len(data)``
    (in a fresh random order per pass when `shuffle`, as Keras 2's
    ``fit_generator(shuffle=True)``), and ``data.on_epoch_end()`` runs at each
    pass boundary, so ``steps_per_epoch`` may be below, equal to or above
    ``len(data)``. The first run starts where `data` is; a later ``fit`` or
    ``evaluate`` reading the same object starts on a new pass. `workers`,
    `use_multiprocessing` and `max_queue_size` default to `data`'s own.
    `seed` fixes the batch orders (default: drawn from Python's ``random``, which
    ``keras.utils.set_random_seed`` seeds). Worker threads are fine; with
    ``use_multiprocessing`` each worker process replays the pass boundaries on its
    own copy of `data`, which is exact when ``on_epoch_end`` is deterministic (as
    ``flow()``'s is).
    """

    def __init__(
        self,
        data: Any,
        *,
        shuffle: bool = False,
        seed: int | None = None,
        workers: int | None = None,
        use_multiprocessing: bool | None = None,
        max_queue_size: int | None = None,
    ) -> None:
        if not is_sequence_like(data):
            raise TypeError(
                "data must be a finite keras.utils.PyDataset (e.g. ImageDataGenerator.flow(...)) or a "
                f"Keras 2 Sequence (__len__, __getitem__, on_epoch_end); got {type(data).__name__}."
            )
        n = len(data)
        if not is_whole(n) or n < 1:
            raise ValueError(f"data has {n!r} batches; it needs at least one (check its __len__).")
        if not isinstance(shuffle, bool):
            raise TypeError(f"shuffle must be True or False, got {shuffle!r}.")
        if seed is not None:
            seed = check_whole("seed", seed, 0, "Pass None for a seed drawn from Python's random.")
        loader = {"workers": 1, "use_multiprocessing": False, "max_queue_size": 10}  # Keras' defaults
        if isinstance(data, keras.utils.PyDataset):
            loader = {name: getattr(data, name) for name in loader}
        given = dict(workers=workers, use_multiprocessing=use_multiprocessing, max_queue_size=max_queue_size)
        super().__init__(**{name: loader[name] if given[name] is None else given[name] for name in loader})
        self.data = data
        self.batches_per_pass = int(n)
        self.shuffle = shuffle
        self.seed = seed if seed is not None else random.getrandbits(32)
        self._pid = os.getpid()
        self._cond = threading.Condition()
        self._armed = False  # set by the reset Keras does before reading; earlier reads are peeks
        self._started = False  # position 0 of a run has been read
        self._pass = 0  # the pass `data` is in (data.on_epoch_end() calls so far)
        self._served: set[int] = set()  # batches of `_pass` already handed out
        self._base = 0  # the pass position 0 of the current run belongs to

    @property
    def num_batches(self) -> None:
        return None  # infinite: Keras 3 then continues one iterator across epochs

    @property
    def passes(self) -> int:
        """How many times ``data.on_epoch_end()`` has run (in this process)."""
        return self._pass

    def order(self, pass_index: int) -> np.ndarray:
        """The batch indices of `data` in the order pass `pass_index` reads them."""
        if not self.shuffle:
            return np.arange(self.batches_per_pass)
        return np.random.default_rng([self.seed, pass_index]).permutation(self.batches_per_pass)

    def __getitem__(self, index: int) -> Any:
        index = int(index)
        if not self._armed:
            # Keras reads the first batches to learn their shapes (and, under a
            # distribution strategy, to build the model) before it resets the data and
            # trains: answer without moving the stream.
            return self.data[index % self.batches_per_pass]
        pass_index, position = divmod(index, self.batches_per_pass)
        with self._cond:
            if index == 0:
                if self._started:
                    # Position 0 again: a new fit/evaluate. Start it on a new pass, as
                    # Keras 2 did a new enqueuer; what the last run left of its pass is dropped.
                    self._base = self._pass + 1
                    self._served = set(range(self.batches_per_pass))
                self._started = True
            pass_index += self._base
            stale = self._advance_to(pass_index)
        try:
            return self.data[int(self.order(pass_index)[position])]
        finally:
            if not stale:  # even on an error, else threads waiting for the next pass would hang
                with self._cond:
                    if pass_index == self._pass:
                        self._served.add(position)
                        self._cond.notify_all()

    def _advance_to(self, pass_index: int) -> bool:
        """Move `data` on to `pass_index` (lock held); True if that pass is already behind."""
        if os.getpid() != self._pid:
            # A multiprocessing worker: a copy of `data` that sees only some positions,
            # in increasing order; it replays the boundaries it crosses.
            while self._pass < pass_index:
                self._next_pass()
            return pass_index < self._pass
        while self._pass < pass_index:
            # Worker threads may ask for the next pass while batches of this one are
            # still being made from data's current state: wait for them.
            if len(self._served) < self.batches_per_pass:
                self._cond.wait(timeout=1.0)
                continue
            self._next_pass()
            self._cond.notify_all()
        return pass_index < self._pass

    def _next_pass(self) -> None:
        self.data.on_epoch_end()
        self._pass += 1
        self._served = set()

    def on_epoch_end(self) -> None:
        # Keras calls this once before reading (its reset), then after every epoch;
        # the stream runs on across epochs, so only the first call matters.
        with self._cond:
            if not self._armed:
                self._armed = True
                self._base = self._pass

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["_cond"]  # locks do not pickle (multiprocessing with spawn)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._cond = threading.Condition()
