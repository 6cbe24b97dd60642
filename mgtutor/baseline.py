"""The one-device baseline every multi-device notebook compares with, trained once per recipe.

Notebook 02 trains it in cells; later notebooks call `one_device_baseline`, which
reuses that run when one with the same data, recipe and seed is in a sibling working
folder (``work/02_build_cnn``), and otherwise trains it here on one device.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from mgtutor.support.checks import check_whole

_PREFIX = "baseline-"


def baseline_key(
    x: np.ndarray, y: np.ndarray, validation_data: tuple[np.ndarray, np.ndarray], *,
    epochs: int, batch_size: int, learning_rate: float, seed: int,
) -> str:  # fmt: skip
    """A short hash of everything that decides the baseline's curves."""
    digest = hashlib.sha256()
    for array in (x, y, *validation_data):
        array = np.ascontiguousarray(array)
        digest.update(f"{array.dtype}{array.shape}".encode())
        digest.update(array.tobytes())
    import keras

    recipe = {"model": "seed_cnn", "optimizer": "adam", "epochs": epochs, "batch_size": batch_size,
              "learning_rate": float(learning_rate), "seed": seed, "keras": keras.__version__}  # fmt: skip
    digest.update(json.dumps(recipe, sort_keys=True).encode())
    return digest.hexdigest()[:16]


def save_baseline(history: Any, key: str, folder: str | os.PathLike, seconds: float) -> Path:
    """Keep a trained baseline's History (or its ``.history`` dict) in `folder` for other notebooks."""
    from mgtutor.support.files import atomic_write

    curves = getattr(history, "history", history)
    target = Path(os.fspath(folder)) / f"{_PREFIX}{key}.json"
    with atomic_write(target, ".json") as temp:
        temp.write_text(json.dumps({"history": curves, "seconds": seconds}))
    return target


def find_baseline(key: str, folder: str | os.PathLike) -> tuple[dict[str, list[float]], Path, float] | None:
    """A baseline with this key in `folder` or a sibling working folder: (history, file, seconds)."""
    folder = Path(os.fspath(folder))
    for candidate in [folder, *sorted(folder.parent.glob("*"))]:
        path = candidate / f"{_PREFIX}{key}.json"
        if path.is_file():
            saved = json.loads(path.read_text())
            return saved["history"], path, float(saved["seconds"])
    return None


def one_device_baseline(
    x: np.ndarray, y: np.ndarray, validation_data: tuple[np.ndarray, np.ndarray], *,
    epochs: int, batch_size: int, learning_rate: float, seed: int, folder: str | os.PathLike,
    device: str | None = None, trained: tuple[Any, float] | None = None,
) -> dict[str, list[float]]:  # fmt: skip
    """The seed CNN trained with Adam on ONE device: its History dict, reused when already trained.

    The same data, epochs, batch, learning rate and seed give the same baseline; a kept
    run is reused and the output says where from. ``trained=(history, seconds)`` keeps a
    run the caller trained with this recipe (notebook 02) as the baseline instead.
    """
    epochs = check_whole("epochs", epochs, 1)
    batch_size = check_whole("batch_size", batch_size, 1)
    seed = check_whole("seed", seed, 0)
    if trained is not None and (not isinstance(trained, tuple) or len(trained) != 2):
        raise ValueError(f"trained must be (history, seconds) of the caller's own run, got {trained!r}.")
    key = baseline_key(x, y, validation_data, epochs=epochs, batch_size=batch_size,
                       learning_rate=learning_rate, seed=seed)  # fmt: skip
    if trained is not None:
        history, seconds = trained
        path = save_baseline(history, key, folder, float(seconds))
        print(f"one-device baseline: kept in {path} for the later notebooks")
        return dict(getattr(history, "history", history))
    found = find_baseline(key, folder)
    if found is not None:
        history, path, seconds = found
        why = f"same data, recipe and seed; it trained in {seconds:.0f} s"
        print(f"one-device baseline: reused {path} ({why})")
        return history
    import contextlib

    import keras
    import tensorflow as tf

    from mgtutor.models import build_seed_cnn
    from mgtutor.progress import ProgressBar

    print(f"one-device baseline: training it here on {device or 'the default device'}")
    with tf.device(device) if device else contextlib.nullcontext():
        model = build_seed_cnn(x.shape[1:], y.shape[1], seed=seed)
        model.compile(loss="categorical_crossentropy", optimizer=keras.optimizers.Adam(learning_rate),
                      metrics=["accuracy"])  # fmt: skip
        keras.utils.set_random_seed(seed)  # as notebook 02 does before its fit: the same shuffles and masks
        started = time.perf_counter()
        history = model.fit(x, y, batch_size=batch_size, epochs=epochs, validation_data=validation_data,
                            callbacks=[ProgressBar()])  # fmt: skip
    save_baseline(history, key, folder, time.perf_counter() - started)
    return history.history
