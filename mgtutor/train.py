"""Training entry points that keep Keras 2 tutorial code running on Keras 3.

Keras 3 removed ``model.fit_generator``: ``model.fit`` takes generators
itself, and the loading options ``workers``, ``use_multiprocessing`` and
``max_queue_size`` moved from ``fit`` to the ``keras.utils.PyDataset``
constructor. `fit_generator` maps the old call onto the new one. This module
will grow (a custom training loop comes later in the series), so
`fit_generator` and its helpers stay self-contained.
"""

from __future__ import annotations

import time
import types
import warnings
from collections.abc import Iterator
from typing import Any

import keras
import numpy as np

# Keras 2's defaults for the loader arguments: any other value was a request.
_LOADER_DEFAULTS = {"workers": 1, "use_multiprocessing": False, "max_queue_size": 10}


def _as_generator(data: Any) -> Any:
    """Keras 3 takes generator objects but not other iterators; Keras 2 took both."""
    if isinstance(data, Iterator) and not isinstance(data, types.GeneratorType):
        return (batch for batch in data)
    return data


def _is_python_generator(data: Any) -> bool:
    return isinstance(data, Iterator)


def _class_weights_for(y: Any, class_weight: dict[int, float]) -> np.ndarray:
    """Per-example weights from labels, one-hot or integer, as Keras applies `class_weight`."""
    labels = np.asarray(y)
    if labels.ndim > 1:
        labels = labels.argmax(axis=-1) if labels.shape[-1] > 1 else labels[..., 0]
    labels = np.round(labels).astype(np.int64).reshape(-1)
    return np.array([class_weight.get(int(c), 1.0) for c in labels], dtype=np.float32)


def _with_class_weight(generator: Any, class_weight: dict[int, float]) -> Any:
    # Keras 3 rejects class_weight for Python generators; Keras 2 turned it into
    # sample weights batch by batch, which is what this does.
    for batch in generator:
        if not isinstance(batch, tuple | list) or len(batch) != 2:
            raise ValueError(
                "class_weight needs the generator to yield (inputs, targets) pairs; it "
                f"yielded a {type(batch).__name__}"
                + (f" of length {len(batch)}" if isinstance(batch, tuple | list) else "")
                + ". Drop class_weight or yield (x, y)."
            )
        x, y = batch
        yield x, y, _class_weights_for(y, class_weight)


def fit_generator(
    model: Any,
    generator: Any,
    steps_per_epoch: int | None = None,
    epochs: int = 1,
    verbose: Any = "auto",
    callbacks: Any = None,
    validation_data: Any = None,
    validation_steps: int | None = None,
    class_weight: dict[int, float] | None = None,
    max_queue_size: int = 10,
    workers: int = 1,
    use_multiprocessing: bool = False,
    shuffle: bool = True,
    initial_epoch: int = 0,
) -> Any:
    """Keras 2's ``model.fit_generator(...)`` on Keras 3: returns ``model.fit``'s History.

    `generator` is a Python generator (or iterator) of batches, a
    ``keras.utils.PyDataset`` or a ``tf.data.Dataset``. For a PyDataset,
    non-default `workers`, `use_multiprocessing` and `max_queue_size` are set on
    it for this call (Keras 3 reads them there) and restored afterwards; for
    anything else they cannot apply, and a warning says so. `shuffle` applies to
    a PyDataset only, as in Keras 2.
    """
    if not hasattr(model, "fit"):
        raise TypeError(f"model must be a Keras model, got {type(model).__name__}.")
    if isinstance(generator, tuple | list | np.ndarray):
        raise TypeError(
            "fit_generator takes a generator of batches, a keras.utils.PyDataset or a "
            f"tf.data.Dataset, got a {type(generator).__name__}. For arrays in memory call "
            "model.fit(x, y, batch_size=...)."
        )
    for name, value, minimum in (
        ("steps_per_epoch", steps_per_epoch, 1),
        ("validation_steps", validation_steps, 1),
        ("epochs", epochs, 1),
        ("initial_epoch", initial_epoch, 0),
    ):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < minimum):
            raise ValueError(f"{name} must be a whole number >= {minimum}, got {value!r}.")
    if class_weight is not None and not isinstance(class_weight, dict):
        raise TypeError(
            f"class_weight must be a dict {{class index: weight}}, got {type(class_weight).__name__}."
        )

    is_py_dataset = isinstance(generator, keras.utils.PyDataset)
    is_generator = _is_python_generator(generator)
    if is_generator and steps_per_epoch is None:
        raise ValueError(
            "steps_per_epoch is required when `generator` is a Python generator: it has no "
            "length, so Keras cannot tell where an epoch ends (an infinite generator would "
            "never end the first one). Pass steps_per_epoch=math.ceil(n_samples / batch_size), "
            "or wrap the data in a keras.utils.PyDataset, which knows its length."
        )
    if _is_python_generator(validation_data) and validation_steps is None:
        raise ValueError(
            "validation_steps is required when validation_data is a Python generator: Keras "
            "cannot tell where the validation pass ends. Pass "
            "validation_steps=math.ceil(n_validation_samples / batch_size)."
        )

    requested = {
        name: value
        for name, value in (
            ("workers", workers),
            ("use_multiprocessing", use_multiprocessing),
            ("max_queue_size", max_queue_size),
        )
        if value != _LOADER_DEFAULTS[name]
    }
    if requested and not is_py_dataset:
        given = ", ".join(f"{k}={v!r}" for k, v in requested.items())
        warnings.warn(
            f"fit_generator: {given} ignored. In Keras 3 these belong to keras.utils.PyDataset "
            "(pass them to its constructor: super().__init__(workers=..., ...)); a "
            f"{type(generator).__name__} is read by a single thread.",
            UserWarning,
            stacklevel=2,
        )

    data = _as_generator(generator)
    if class_weight is not None and is_generator:
        data, class_weight = _with_class_weight(data, class_weight), None
    fit_kwargs = {
        "epochs": epochs,
        "verbose": verbose,
        "callbacks": callbacks,
        "validation_data": _as_generator(validation_data),
        "validation_steps": validation_steps,
        "class_weight": class_weight,
        "initial_epoch": initial_epoch,
        "steps_per_epoch": steps_per_epoch,
        # Keras 2 shuffled only Sequences; Keras 3 warns if asked for anything else.
        "shuffle": bool(shuffle) if is_py_dataset else False,
    }

    saved = {}
    if is_py_dataset:
        for name, value in requested.items():
            saved[name] = getattr(generator, name)
            setattr(generator, name, value)
    try:
        return model.fit(data, **fit_kwargs)
    finally:
        for name, value in saved.items():
            setattr(generator, name, value)



class Throughput(keras.callbacks.Callback):
    """Images/s and seconds per epoch, the numbers seed 001 quotes (63 s -> 16 s per epoch).

    Counts ``global_batch`` images per training step; the last, smaller batch
    of an epoch counts in full unless ``images_per_epoch`` gives the exact
    number. Adds ``images_per_s`` and ``epoch_seconds`` to the epoch logs (so
    they appear in ``History``) and keeps every epoch in ``.epochs``. The first
    epoch includes graph tracing: compare the later ones.
    """

    def __init__(self, global_batch: int, images_per_epoch: int | None = None, verbose: bool = True):
        super().__init__()
        for name, value in (("global_batch", global_batch), ("images_per_epoch", images_per_epoch)):
            if value is None and name == "images_per_epoch":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a whole number >= 1, got {value!r}.")
        self.global_batch = global_batch
        self.images_per_epoch = images_per_epoch
        self.verbose = verbose
        self.epochs: list[dict[str, float]] = []
        self._steps = 0
        self._start = 0.0

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        self._steps = 0
        self._start = time.perf_counter()

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        self._steps += 1

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        # Keras validates inside the epoch; that time counts, as in seed 001's figures.
        seconds = time.perf_counter() - self._start
        images = self.images_per_epoch or self._steps * self.global_batch
        entry = {"epoch": epoch + 1, "seconds": seconds, "images": images, "images_per_s": images / seconds}
        self.epochs.append(entry)
        if logs is not None:
            logs["images_per_s"] = entry["images_per_s"]
            logs["epoch_seconds"] = seconds
        if self.verbose:
            print(f"epoch {epoch + 1}: {seconds:.1f} s, {entry['images_per_s']:,.0f} images/s")
