"""The figures the notebooks share: image grids and learning curves (a scaling study's is in
`mgtutor.speed.figure`).

Each function returns its matplotlib Figure (the notebook shows it inline), so a
learner can also save it with ``fig.savefig(...)``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from mgtutor.support.checks import check_whole


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
    check_whole("ncols", ncols, 1)
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
        if np.issubdtype(image.dtype, np.floating) and (image.min() < 0 or image.max() > 1):
            # standardized pixels: stretched to [0, 1] to be seen (imshow would clip them, and warn)
            low, high = float(image.min()), float(image.max())
            image = (image - low) / (high - low) if high > low else np.zeros_like(image)
        grey = image.ndim == 3 and image.shape[-1] == 1
        axis.imshow(image[..., 0] if grey else image, cmap="gray" if grey else None)
        if label_ids is not None:
            label = int(label_ids[index])
            axis.set_title(class_names[label] if class_names else str(label), fontsize=8)
    if title:
        fig.suptitle(title)
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


def plot_against_baseline(
    curves: Mapping[str, Any],
    baseline: str,
    metrics: Sequence[str] = ("loss", "val_accuracy"),
    *,
    title: str = "",
):
    """Runs' curves overlaid on the one-device `baseline` (a key of `curves`), one panel per metric.

    `curves` maps a run's name to its History or History dict. The baseline is
    drawn thick and grey, so the multi-device runs read as departures from it.
    """
    if baseline not in curves:
        raise ValueError(f"baseline {baseline!r} is not one of the runs: {', '.join(curves)}.")
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(metrics), figsize=(4.8 * len(metrics), 3.2), squeeze=False)
    for axis, metric in zip(axes.flat, metrics, strict=True):
        for name, history in curves.items():
            series = getattr(history, "history", history)[metric]
            epochs = np.arange(1, len(series) + 1)
            style = {"color": "0.6", "linewidth": 5, "alpha": 0.6} if name == baseline else {"marker": "o"}
            axis.plot(epochs, series, label=name, **style)
        axis.set_xlabel("epoch")
        axis.set_title(metric)
        axis.set_xticks(epochs)
    axes.flat[0].legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig
