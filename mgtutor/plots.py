"""The figures the notebooks share: image grids, learning curves, a scaling study's reading.

Each function returns its matplotlib Figure (the notebook shows it inline), so a
learner can also save it with ``fig.savefig(...)``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from mgtutor._checks import check_whole
from mgtutor.speed.reading import read_scaling, with_speedups


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


def plot_scaling(results: Any, *, title: str = ""):
    """A scaling study's two panels: images/s vs devices with the ideal line, and efficiency.

    `results` is what `mgtutor.speed.study.scaling_study` returns (or its saved JSON),
    or just its list of runs. Per pipeline, the dashed line is the ideal: the
    run on the fewest devices scaled linearly. On logical devices, which share
    the same hardware, the ideal there is flat, and the title says so.
    """
    runs = results.get("runs") if isinstance(results, Mapping) else results
    if not runs:
        raise ValueError("results holds no runs: pass scaling_study(...)'s result or its list of runs.")
    runs = with_speedups(runs)
    reading = read_scaling(runs)
    plt = _pyplot()
    fig, (rate_axis, efficiency_axis) = plt.subplots(1, 2, figsize=(10, 3.8))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    pipelines = list(dict.fromkeys(run["pipeline"] for run in runs))
    counts = sorted({run["devices"] for run in runs})
    for index, pipeline in enumerate(pipelines):
        mine = sorted((run for run in runs if run["pipeline"] == pipeline), key=lambda run: run["devices"])
        color = colors[index % len(colors)]
        devices = [run["devices"] for run in mine]
        base = mine[0]
        ideal = [base["images_per_s"] * n / base["devices"] for n in devices]
        rate_axis.plot(devices, [run["images_per_s"] for run in mine], "-o", color=color, label=pipeline)
        rate_axis.plot(devices, ideal, "--", color=color, alpha=0.6)
        efficiency_axis.plot(
            devices, [100 * run["efficiency"] for run in mine], "-o", color=color, label=pipeline
        )
    rate_axis.plot([], [], "--", color="gray", label="ideal: linear from the fewest devices")
    efficiency_axis.axhline(100, color="black", linestyle="--", linewidth=1, label="ideal (100 %)")
    for axis in (rate_axis, efficiency_axis):
        axis.set_xticks(counts)
        axis.set_xlabel("devices")
        axis.legend(fontsize=8)
    rate_axis.set_ylabel("training images/s")
    rate_axis.set_ylim(bottom=0)
    efficiency_axis.set_ylabel("efficiency (%) = speed-up / devices")
    efficiency_axis.set_ylim(0, max(110, 10 + max(100 * run["efficiency"] for run in runs)))
    kind = reading["device_kind"]
    if not title:
        model = runs[0].get("model", "")
        title = f"{model} on {kind} devices" if model else f"{kind} devices"
        if kind == "logical-cpu":
            title += f": all share the same {reading['cores']} CPU core(s) ({reading['scaling']} scaling)"
        elif kind == "logical-gpu":
            title += f": all share one physical GPU ({reading['scaling']} scaling)"
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig
