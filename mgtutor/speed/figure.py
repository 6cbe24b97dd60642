"""`plot_scaling`: a scaling study's reading drawn as it is, images/s and efficiency per device count."""

from __future__ import annotations

from typing import Any

from mgtutor.speed.reading import Reading


def _title(reading: Reading) -> str:
    kind = reading.device_kind
    title = f"{reading.model} on {kind} devices" if reading.model else f"{kind} devices"
    if kind == "logical-cpu":
        title += f": all share the same {reading.cores} CPU core(s) ({reading.scaling} scaling)"
    elif kind == "logical-gpu":
        title += f": all share one physical GPU ({reading.scaling} scaling)"
    return title


def plot_scaling(study: Any, *, title: str = ""):
    """A study's two panels: images/s vs devices with the ideal line, and efficiency.

    `study` is what `scaling_study` returns, or its `Reading` (``study.reading``).
    Per pipeline, the bars span each run's slowest and fastest block, and the
    dashed line is the reading's ideal: the run on the fewest devices scaled
    linearly. On logical devices, which share the same hardware, the title says so.
    Returns the matplotlib Figure.
    """
    import matplotlib.pyplot as plt

    reading = getattr(study, "reading", study)
    if not isinstance(reading, Reading):
        got = type(study).__name__
        raise TypeError(f"study must be what scaling_study returns (or its .reading), got {got}.")
    fig, (rate_axis, efficiency_axis) = plt.subplots(1, 2, figsize=(10, 3.8))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    pipelines = list(dict.fromkeys(point.pipeline for point in reading.points))
    for index, pipeline in enumerate(pipelines):
        mine = sorted((p for p in reading.points if p.pipeline == pipeline), key=lambda p: p.devices)
        color, devices = colors[index % len(colors)], [p.devices for p in mine]
        rates = [p.images_per_s for p in mine]
        # The bars span the slowest and fastest block of each run: what rerunning moves.
        below = [rate - p.run.spread[0] for rate, p in zip(rates, mine, strict=True)]
        above = [p.run.spread[1] - rate for rate, p in zip(rates, mine, strict=True)]
        rate_axis.errorbar(
            devices, rates, yerr=[below, above], fmt="-o", capsize=3, color=color, label=pipeline
        )
        rate_axis.plot(devices, [p.ideal_images_per_s for p in mine], "--", color=color, alpha=0.6)
        efficiency_axis.plot(devices, [100 * p.efficiency for p in mine], "-o", color=color, label=pipeline)
    rate_axis.plot([], [], "--", color="gray", label="ideal: linear from the fewest devices")
    efficiency_axis.axhline(100, color="black", linestyle="--", linewidth=1, label="ideal (100 %)")
    for axis in (rate_axis, efficiency_axis):
        axis.set_xticks(sorted({p.devices for p in reading.points}))
        axis.set_xlabel("devices")
        axis.legend(fontsize=8)
    rate_axis.set_ylabel("training images/s")
    rate_axis.set_ylim(bottom=0)
    efficiency_axis.set_ylabel("efficiency (%) = speed-up / devices")
    efficiency_axis.set_ylim(0, max(110, 10 + max(100 * p.efficiency for p in reading.points)))
    fig.suptitle(title or _title(reading), fontsize=10)
    fig.tight_layout()
    return fig
