"""The figures the notebooks share: image grids, class balance, learning curves.

Each function returns its matplotlib Figure (the notebook shows it inline), so a
learner can also save it with ``fig.savefig(...)``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np


def _pyplot():
    import matplotlib.pyplot as plt

    return plt


def show_images(
    images: np.ndarray,
    labels: np.ndarray | None = None,
    class_names: Sequence[str] | None = None,
    *,
    ncols: int = 8,
    limit: int = 32,
    title: str | None = None,
):
    """A grid of up to `limit` images with their class names as captions."""
    if isinstance(ncols, bool) or not isinstance(ncols, int) or ncols < 1:
        raise ValueError(f"ncols must be a whole number >= 1, got {ncols!r}.")
    shown = np.asarray(images)[:limit]
    if len(shown) == 0:
        raise ValueError("images is empty: pass at least one image.")
    label_ids = None
    if labels is not None:
        labels = np.asarray(labels)[:limit]
        one_hot = labels.ndim == 2 and labels.shape[1] > 1
        label_ids = labels.argmax(axis=1) if one_hot else labels.reshape(-1)
    plt = _pyplot()
    nrows = -(-len(shown) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(1.4 * ncols, 1.5 * nrows), squeeze=False)
    for index, axis in enumerate(axes.flat):
        axis.axis("off")
        if index >= len(shown):
            continue
        image = shown[index]
        grey = image.ndim == 3 and image.shape[-1] == 1
        axis.imshow(image[..., 0] if grey else image, cmap="gray" if grey else None)
        if label_ids is not None:
            label = int(label_ids[index])
            axis.set_title(class_names[label] if class_names else str(label), fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_class_counts(counts: Sequence[int], class_names: Sequence[str], *, title: str = ""):
    """A bar chart of examples per class, with the perfectly balanced level dashed."""
    plt = _pyplot()
    counts = np.asarray(counts)
    fig, axis = plt.subplots(figsize=(7, 3))
    axis.bar(range(len(counts)), counts, color="tab:blue")
    axis.axhline(counts.mean(), color="black", linestyle="--", linewidth=1, label="balanced")
    axis.set_xticks(range(len(counts)), class_names, rotation=45, ha="right")
    axis.set_ylabel("examples")
    axis.set_title(title or "examples per class")
    axis.legend()
    fig.tight_layout()
    return fig


def plot_history(history: Any, metrics: Sequence[str] = ("loss", "accuracy"), *, title: str = ""):
    """Learning curves (training and ``val_`` series) from a Keras History or its dict."""
    series: Mapping[str, Sequence[float]] = getattr(history, "history", history)
    shown = [m for m in metrics if m in series]
    if not shown:
        raise ValueError(f"history has none of {list(metrics)}; it has {sorted(series)}.")
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(shown), figsize=(4.5 * len(shown), 3), squeeze=False)
    for axis, metric in zip(axes.flat, shown, strict=True):
        for key, style in ((metric, "-o"), (f"val_{metric}", "--s")):
            if key in series:
                epochs = np.arange(1, len(series[key]) + 1)
                axis.plot(epochs, series[key], style, label=key)
        axis.set_xlabel("epoch")
        axis.set_title(metric)
        axis.legend()
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig
