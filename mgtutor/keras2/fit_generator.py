"""Keras 2's ``model.fit_generator`` on Keras 3: `steps_per_epoch` batches every epoch from an endless stream.

Keras 3's ``fit`` takes generators itself; ``workers``, ``use_multiprocessing`` and
``max_queue_size`` moved to the ``keras.utils.PyDataset`` constructor.
"""

from __future__ import annotations

import types
import warnings
from collections.abc import Iterator
from typing import Any

import keras
import numpy as np

from mgtutor.keras2.streams import EndlessBatches, is_sequence_like
from mgtutor.support.checks import check_whole

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


def _kind(data: Any) -> str:
    """Which of fit_generator's inputs `data` is; "other" goes to ``model.fit`` as it is."""
    if isinstance(data, keras.utils.PyDataset):
        return "pydataset" if data.num_batches is not None else "endless pydataset"
    if _is_python_generator(data):
        return "generator"
    if is_sequence_like(data):
        return "sequence"
    if _is_tf_dataset(data):
        return "tf.data"
    return "other"


def _is_tf_dataset(data: Any) -> bool:
    import tensorflow as tf  # already loaded by Keras' TensorFlow backend

    return isinstance(data, tf.data.Dataset)


def _cardinality(dataset: Any) -> int:
    return int(dataset.cardinality().numpy())  # -1 infinite, -2 unknown


def _stream(
    data: Any, kind: str, steps: int | None, name: str, shuffle: bool, loader: dict[str, Any]
) -> tuple[Any, int | None]:
    """`data` made to give `steps` batches per epoch the Keras 2 way, and the steps to pass on.

    `name` is the argument `data` came in, "generator" or "validation_data".
    """
    parameter = "steps_per_epoch" if name == "generator" else "validation_steps"
    if kind == "tf.data":
        import tensorflow as tf

        size = _cardinality(data)
        if size == 0:
            raise ValueError(f"{name} is an empty tf.data.Dataset: it has no batches.")
        if steps is None and size == tf.data.INFINITE_CARDINALITY:
            raise ValueError(
                f"{parameter} is required when {name} is an infinite tf.data.Dataset (.repeat() "
                "without a count), else the first epoch never ends. Pass "
                f"{parameter}=math.ceil(n_samples / batch_size)."
            )
        if steps is not None and size != tf.data.INFINITE_CARDINALITY:
            # Keras 3 would stop at the end of the data; Keras 2 read on across epochs.
            return data.repeat(), steps
        return data, steps
    if kind == "endless pydataset" and steps is None:
        raise ValueError(
            f"{parameter} is required when {name} is a PyDataset whose num_batches is None "
            f"(endless), else the first epoch never ends. Pass {parameter}=math.ceil(n_samples / batch_size)."
        )
    if kind in ("sequence", "pydataset") and len(data) < 1:
        raise ValueError(f"{name} has no batches: len({name}) is {len(data)}.")
    if kind == "sequence" or (kind == "pydataset" and steps is not None):
        return EndlessBatches(data, shuffle=shuffle, **loader), steps if steps is not None else len(data)
    return data, steps


class _RanOut(keras.callbacks.Callback):
    """Turns Keras 3's "input ran out of data; interrupting training" into an error.

    Keras 2 read steps_per_epoch batches every epoch or failed; Keras 3 ends the
    epoch early with a warning and trains on. Runs after the caller's callbacks,
    so they still see the cut-short epoch.
    """

    def __init__(self, steps_per_epoch: int | None, validation_steps: int | None) -> None:
        super().__init__()
        self.steps_per_epoch, self.validation_steps = steps_per_epoch, validation_steps
        self._steps = self._test_steps = 0

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        self._steps = 0

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        self._steps = batch + 1  # Keras passes the last step of the execution

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        if self.steps_per_epoch is None or self._steps >= self.steps_per_epoch or self.model.stop_training:
            return  # a callback such as TerminateOnNaN may stop an epoch on purpose
        raise ValueError(
            f"fit_generator: the training data ran out after {self._steps} of the "
            f"steps_per_epoch={self.steps_per_epoch} batches of epoch {epoch + 1}. Keras 2 reads "
            "steps_per_epoch batches every epoch from one endless stream, so a generator must never "
            "end: loop over the data forever (`while True:` around the loop that yields the "
            "batches), or give a keras.utils.PyDataset, which fit_generator goes round pass after pass."
        )

    def on_test_begin(self, logs: dict | None = None) -> None:
        self._test_steps = 0

    def on_test_batch_end(self, batch: int, logs: dict | None = None) -> None:
        self._test_steps = batch + 1

    def on_test_end(self, logs: dict | None = None) -> None:
        if self.validation_steps is None or self._test_steps >= self.validation_steps:
            return
        raise ValueError(
            f"fit_generator: the validation data ran out after {self._test_steps} of the "
            f"validation_steps={self.validation_steps} batches. Make the validation data endless (a "
            "generator: `while True:` around its loop), or lower validation_steps."
        )


def _check_arguments(
    model: Any,
    generator: Any,
    steps_per_epoch: Any,
    epochs: Any,
    validation_data: Any,
    validation_steps: Any,
    class_weight: Any,
    initial_epoch: Any,
) -> tuple[str, str | None]:
    """The kinds of `generator` and `validation_data`, once every argument is known good."""
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
        if value is not None:
            check_whole(name, value, minimum)
    if class_weight is not None and not isinstance(class_weight, dict):
        raise TypeError(
            f"class_weight must be a dict {{class index: weight}}, got {type(class_weight).__name__}."
        )

    kind = _kind(generator)
    if kind == "generator" and steps_per_epoch is None:
        raise ValueError(
            "steps_per_epoch is required when `generator` is a Python generator: it has no "
            "length, so Keras cannot tell where an epoch ends (an infinite generator would "
            "never end the first one). Pass steps_per_epoch=math.ceil(n_samples / batch_size), "
            "or wrap the data in a keras.utils.PyDataset, which knows its length."
        )
    validation_kind = _kind(validation_data) if validation_data is not None else None
    if validation_kind == "generator" and validation_steps is None:
        raise ValueError(
            "validation_steps is required when validation_data is a Python generator: Keras "
            "cannot tell where the validation pass ends. Pass "
            "validation_steps=math.ceil(n_validation_samples / batch_size)."
        )
    return kind, validation_kind


def _loader_options(
    generator: Any, kind: str, workers: Any, use_multiprocessing: Any, max_queue_size: Any
) -> dict:
    """Keras 2's loader options the caller changed; a warning where Keras 3 cannot apply them."""
    requested = {
        name: value
        for name, value in (
            ("workers", workers),
            ("use_multiprocessing", use_multiprocessing),
            ("max_queue_size", max_queue_size),
        )
        if value != _LOADER_DEFAULTS[name]
    }
    loads_itself = kind in ("pydataset", "endless pydataset", "sequence")
    if requested and not loads_itself:
        given = ", ".join(f"{k}={v!r}" for k, v in requested.items())
        warnings.warn(
            f"fit_generator: {given} ignored. In Keras 3 these belong to keras.utils.PyDataset "
            "(pass them to its constructor: super().__init__(workers=..., ...)); a "
            f"{type(generator).__name__} is read by a single thread.",
            UserWarning,
            stacklevel=2,
        )
    return requested


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
    ``keras.utils.PyDataset`` (such as ``ImageDataGenerator.flow(...)``), a
    Keras 2 ``Sequence`` or a ``tf.data.Dataset``. As in Keras 2, every epoch
    trains `steps_per_epoch` batches taken from one endless stream: a PyDataset
    or Sequence is read round and round (`EndlessBatches`; ``on_epoch_end`` at
    each pass boundary), a finite tf.data.Dataset repeats, and a Python
    generator is read on from where the last epoch stopped; if it ends, a
    ValueError says so. Without `steps_per_epoch`, an epoch is one pass
    (``len(generator)``); a generator needs it. `validation_steps` works the
    same way for `validation_data`.

    `workers`, `use_multiprocessing` and `max_queue_size` apply to a PyDataset
    or Sequence only (Keras 3 reads them from the PyDataset, which is left as it
    was); for anything else a warning says they are ignored. `shuffle` shuffles
    the batch order of each pass of a PyDataset or Sequence, as in Keras 2.
    """
    kind, validation_kind = _check_arguments(
        model, generator, steps_per_epoch, epochs, validation_data, validation_steps, class_weight,
        initial_epoch,
    )
    requested = _loader_options(generator, kind, workers, use_multiprocessing, max_queue_size)

    # Check everything (the validation data too) before any work starts.
    data, steps = _stream(generator, kind, steps_per_epoch, "generator", bool(shuffle), requested)
    if validation_kind is not None:
        validation_data, validation_steps = _stream(
            validation_data, validation_kind, validation_steps, "validation_data", False, {}
        )
    wrapped = data is not generator
    data = _as_generator(data)
    if class_weight is not None and kind == "generator":
        data, class_weight = _with_class_weight(data, class_weight), None
    if (steps is not None or validation_steps is not None) and isinstance(callbacks, list | tuple | None):
        callbacks = [*(callbacks or []), _RanOut(steps, validation_steps)]
    fit_kwargs = {
        "epochs": epochs,
        "verbose": verbose,
        "callbacks": callbacks,
        "validation_data": _as_generator(validation_data),
        "validation_steps": validation_steps,
        "class_weight": class_weight,
        "initial_epoch": initial_epoch,
        "steps_per_epoch": steps,
        # Keras 2 shuffled only Sequences; Keras 3 warns if asked for anything else
        # (an EndlessBatches shuffles each pass itself).
        "shuffle": bool(shuffle) if kind == "pydataset" and not wrapped else False,
    }

    saved = {}
    if kind in ("pydataset", "endless pydataset") and not wrapped:
        for name, value in requested.items():
            saved[name] = getattr(generator, name)
            setattr(generator, name, value)
    try:
        return model.fit(data, **fit_kwargs)
    finally:
        for name, value in saved.items():
            setattr(generator, name, value)
