"""``ImageDataGenerator.flow``'s result: augmented batches of arrays as a ``keras.utils.PyDataset``."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import keras
import numpy as np

from mgtutor.keras2.augment_checks import _check_flag, _fresh_seed, _GeneratorBase
from mgtutor.support.checks import is_whole

# Keras 2's flow options not implemented here, with the values that switch them off.
_FLOW_KERAS2_OFF = {
    "save_to_dir": None, "save_prefix": "", "save_format": "png",
    "ignore_class_split": False, "subset": None,
}  # fmt: skip
_PYDATASET_ARGUMENTS = ("workers", "use_multiprocessing", "max_queue_size")


class NumpyArrayIterator(keras.utils.PyDataset):
    """What `ImageDataGenerator.flow` returns: augmented batches of arrays, as a PyDataset.

    Batch `i` of epoch `e` draws its shuffle and transforms from
    ``(seed, e, i)``, so the batches do not depend on which worker makes them or
    in what order. `on_epoch_end` (called by ``fit``) moves to the next epoch's
    shuffle. Iterating cycles forever as Keras 2's iterator did; ``next()``
    returns the next batch.
    """

    def __init__(
        self,
        x: Any,
        y: Any,
        image_data_generator: _GeneratorBase,
        batch_size: int = 32,
        shuffle: bool = True,
        seed: int | None = None,
        sample_weight: Any = None,
        **kwargs: Any,
    ) -> None:
        if not isinstance(image_data_generator, _GeneratorBase):
            raise TypeError(
                "image_data_generator must be an mgtutor ImageDataGenerator, got "
                f"{type(image_data_generator).__name__}."
            )
        for name, value in list(kwargs.items()):
            if name in _FLOW_KERAS2_OFF:
                if value != _FLOW_KERAS2_OFF[name]:
                    raise TypeError(
                        f"flow: {name}={value!r} is a Keras 2 option not implemented here; remove it "
                        f"(or pass {_FLOW_KERAS2_OFF[name]!r})."
                    )
                del kwargs[name]
            elif name not in _PYDATASET_ARGUMENTS:
                raise TypeError(
                    f"flow got an unknown argument {name!r}. It takes x, y, batch_size, shuffle, seed, "
                    f"sample_weight and the keras.utils.PyDataset options {', '.join(_PYDATASET_ARGUMENTS)}."
                )
        x, y, sample_weight, batch_size, seed = image_data_generator._check_flow_inputs(
            "flow", x, y, sample_weight, batch_size, seed
        )
        super().__init__(**kwargs)
        self.x, self.y, self.sample_weight = x, y, sample_weight
        self.image_data_generator = image_data_generator
        self.n = len(x)
        self.batch_size = batch_size
        self.shuffle = _check_flag(shuffle, "shuffle")
        self.seed = seed
        self.dtype = "float32"
        self.epoch = 0
        self._base_seed = seed if seed is not None else _fresh_seed()
        self._order_cache: tuple[int, np.ndarray] | None = None
        self._cursor = 0

    def __len__(self) -> int:
        return math.ceil(self.n / self.batch_size)

    def _order(self) -> np.ndarray:
        cached = self._order_cache
        if cached is not None and cached[0] == self.epoch:
            return cached[1]
        if self.shuffle:
            order = np.random.default_rng([self._base_seed, self.epoch]).permutation(self.n)
        else:
            order = np.arange(self.n)
        self._order_cache = (self.epoch, order)
        return order

    def __getitem__(self, index: int) -> Any:
        if not is_whole(index) or not 0 <= index < len(self):
            raise IndexError(f"batch index {index!r} is out of range: this flow has {len(self)} batches.")
        chosen = self._order()[index * self.batch_size : (index + 1) * self.batch_size]
        rng = np.random.default_rng([self._base_seed, self.epoch, int(index), 1])
        generator = self.image_data_generator
        batch_x = generator._standardize(generator._transform(self.x[chosen], rng))
        if self.y is None:
            return batch_x
        if self.sample_weight is None:
            return batch_x, self.y[chosen]
        return batch_x, self.y[chosen], self.sample_weight[chosen]

    def on_epoch_end(self) -> None:
        self.epoch += 1

    def __iter__(self) -> Iterator[Any]:
        while True:  # Keras 2's iterators never ended; loops break out themselves
            for index in range(len(self)):
                yield self[index]
            self.on_epoch_end()

    def next(self) -> Any:
        """The next batch (Keras 2's ``iterator.next()``), moving to a new epoch after the last."""
        if self._cursor >= len(self):
            self._cursor = 0
            self.on_epoch_end()
        self._cursor += 1
        return self[self._cursor - 1]

    def reset(self) -> None:
        """Start `next` again from the first batch of the current epoch."""
        self._cursor = 0
