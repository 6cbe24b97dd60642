"""What a scaling study's runs say: speed-up, efficiency, the bottleneck and a table, as a `Reading`.

Plain arithmetic on the `Run`s that `mgtutor.speed.measure` records: no TensorFlow, no plotting.
`read_scaling` is the one place the numbers are read; `mgtutor.speed.figure` draws a `Reading`
as it is, and the study prints its lines and table.

Where it ran matters. Logical CPU devices (`mgtutor.setup_devices` without a
GPU) share the same cores: a second device brings no cores of its own, only a
second stream of operations, which can fill cores that one device's step leaves
idle (its operations do not all keep every core busy) while splitting batches
and summing gradients cost time. Which wins is measured, not assumed: the lines
say it from the speed-up's spread and from the cores each run kept busy.
Logical GPUs carved out of one GPU share it the same way. Only separate devices
add compute of their own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mgtutor.speed.link import read_ratio
from mgtutor.speed.measure import PIPELINES, Run

# A pipeline that trains this much slower than the synthetic batch at the same device
# count is input-bound; smaller gaps are within a shared machine's run-to-run noise (~10 %).
INPUT_BOUND_THRESHOLD = 0.15
# On shared cores N devices can at best fill the cores one device leaves idle (batch effects apart).
SHARED_BOUND = "<= cores / cores one device keeps busy"


@dataclass(frozen=True, kw_only=True)
class Point:
    """One run read against its pipeline's run on the fewest devices (normally 1).

    speed-up = images/s / baseline images/s; ideal = devices / baseline devices;
    efficiency = speed-up / ideal; ``ideal_images_per_s`` = baseline images/s x ideal.
    ``speedup_low``/``_high`` bound the speed-up by the two runs' spreads (slowest block here over
    the baseline's fastest, and the reverse): a speed-up is a difference only outside them.
    """

    run: Run
    baseline_devices: int
    speedup: float
    speedup_low: float
    speedup_high: float
    ideal_speedup: float
    efficiency: float
    ideal_images_per_s: float

    @property
    def devices(self) -> int:
        return self.run.devices

    @property
    def pipeline(self) -> str:
        return self.run.pipeline

    @property
    def images_per_s(self) -> float:
        return self.run.images_per_s

    def as_dict(self) -> dict[str, Any]:
        """The run with its reading beside it (a row of ``scaling.json``'s runs)."""
        return {
            **self.run.as_dict(), "baseline_devices": self.baseline_devices, "speedup": self.speedup,
            "speedup_low": self.speedup_low, "speedup_high": self.speedup_high,
            "ideal_speedup": self.ideal_speedup, "efficiency": self.efficiency,
            "ideal_images_per_s": self.ideal_images_per_s,
        }  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class Reading:
    """What the runs say: what speed-up the hardware allows, and whether the input limits it.

    ``lines`` say it in sentences. ``input_headroom`` is a pipeline's rate alone over the rate the
    devices train at without input cost (the synthetic run at the same device count, else the run
    itself), per device count; ``gap_vs_synthetic`` the measured gap to the synthetic run.
    """

    points: tuple[Point, ...]
    model: str
    device_kind: str
    shared_hardware: bool
    cores: int
    cores_per_device: dict[str, float]
    expected_speedup: str
    scaling: str
    most_devices: int
    pipelines: dict[str, dict[str, float]]
    gap_vs_synthetic: dict[str, dict[str, float]]
    input_headroom: dict[str, dict[str, float]]
    input_bound: dict[str, bool | None]
    input_bound_threshold: float
    lines: tuple[str, ...]

    def table(self) -> str:
        """The runs as a text table: devices, pipeline, images/s (median, slowest-fastest), s/epoch, ..."""
        header = (
            f"{'devices':>7}  {'pipeline':<10} {'images/s':>9} {'spread':>13} {'s/epoch':>8} {'speed-up':>8} "
            f"{'efficiency':>10} {'input alone img/s':>17}"
        )
        lines = [header, "-" * len(header)]
        for point in sorted(self.points, key=lambda p: (PIPELINES.index(p.pipeline), p.devices)):
            run, alone = point.run, point.run.pipeline_images_per_s
            spread = "-".join(_fmt_rate(rate) for rate in run.spread)
            lines.append(
                f"{run.devices:>7}  {run.pipeline:<10} {run.images_per_s:>9,.0f} {spread:>13} "
                f"{run.seconds_per_epoch:>8.1f} {point.speedup:>8.2f} {point.efficiency:>10.0%} "
                f"{(_fmt_rate(alone) if alone else '-'):>17}"
            )
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        """Every field but the points (the study writes those as its runs)."""
        fields = {name: getattr(self, name) for name in self.__dataclass_fields__ if name != "points"}
        return {**fields, "lines": list(self.lines)}


def speedups(runs: Sequence[Run]) -> list[Point]:
    """Each run read against its pipeline's run on the fewest devices (see `Point`)."""
    baselines: dict[str, Run] = {}
    for run in runs:
        best = baselines.get(run.pipeline)
        if best is None or run.devices < best.devices:
            baselines[run.pipeline] = run
    points = []
    for run in runs:
        base = baselines[run.pipeline]
        speedup, ideal = run.images_per_s / base.images_per_s, run.devices / base.devices
        (low, high), (base_low, base_high) = run.spread, base.spread
        bounds = (1.0, 1.0) if run is base else (low / base_high, high / base_low)
        points.append(Point(
            run=run, baseline_devices=base.devices, speedup=speedup, speedup_low=bounds[0],
            speedup_high=bounds[1], ideal_speedup=ideal,
            efficiency=speedup / ideal, ideal_images_per_s=base.images_per_s * ideal,
        ))  # fmt: skip
    return points


def _fmt_rate(value: float) -> str:
    return f"{value:,.0f}"


def _with_spread(point: Point) -> str:
    if point.run.repeats < 2 or point.devices == point.baseline_devices:  # no spread to read
        return f"{point.speedup:.2f}"
    return read_ratio(point.speedup, point.speedup_low, point.speedup_high)  # lesson 14's reading


def _input_verdict(
    point: Point, gap: float | None, headroom: float | None, shared: bool
) -> tuple[bool | None, str]:
    """(input-bound or None, sentence) for one pipeline at one device count."""
    pipeline, n, gap_text = point.pipeline, point.devices, ""
    if gap is not None:
        gap_text = f"{gap:.0%} slower" if gap >= 0 else f"{-gap:.0%} faster"
        gap_text = f"trains {gap_text} than synthetic at {n} device(s)"
    if pipeline == "layers":
        return False, (
            f"layers {gap_text or f'at {n} device(s)'}: the augmentation runs on the devices, so its cost "
            "is compute, paid on every device; the input never makes them wait."
        )
    if headroom is None:
        return None, f"{pipeline}: no producer rate recorded, so no verdict on the input."
    alone = (
        f"the pipeline alone delivers {_fmt_rate(point.run.pipeline_images_per_s)} images/s, {headroom:.1f}x "
        "what the devices take"
    )
    lead = f"{pipeline} {gap_text}; {alone}" if gap_text else f"{pipeline}: {alone}"
    # On separate devices the input runs beside the training and limits it only when it is not ahead;
    # on shared cores its own work also takes about 1/headroom of the time.
    if headroom < (1 / INPUT_BOUND_THRESHOLD if shared else 1 + INPUT_BOUND_THRESHOLD):
        if headroom < 1:
            why = "it cannot keep ahead"
        else:
            shared_why = f"its own work takes about {1 / headroom:.0%} of the shared cores"
            why = shared_why if shared else "barely ahead"
        return True, f"{lead}: input-bound ({why}); prefer tf.data or augmentation layers."
    noise = ""
    if gap is not None and gap > INPUT_BOUND_THRESHOLD:
        noise = (
            f" The {gap:.0%} gap is more than producing the batches (about {1 / headroom:.1%} of the time) "
            "explains: either other work on the machine, or the cost of handing host batches to the "
            "devices (a Python generator's batches are converted and split per replica each step). "
            "Rerun to tell them apart: noise moves, a feeding cost stays."
        )
    return False, f"{lead}: not input-bound.{noise}"


def _scaling_mode(points: Sequence[Point]) -> str:
    """"strong" (the global batch stays fixed), "weak" (the per-replica batch does) or "mixed"."""
    if len({p.run.global_batch for p in points}) == 1:
        return "strong"
    return "weak" if len({p.run.batch_size_per_replica for p in points}) == 1 else "mixed"


def _best_speedup(points: Sequence[Point]) -> Point:
    most = max(p.devices for p in points)
    return max((p for p in points if p.devices == most), key=lambda p: p.speedup)


def why_faster(speedup: float, speedup_low: float, cores_before: float | None,
               cores_after: float | None, where: str = "the cores line below") -> str:
    """What the cores line can say of a speed-up whose range lies above 1, in proportion to it: busier
    cores carry at most their own ratio of speed; beyond it, each image took less CPU time."""
    if cores_before is None or cores_after is None:
        return "the cores were not measured: this study does not separate what made it faster."
    ratio = cores_after / cores_before
    places = 2  # a digit more where the two would print alike, so that the words read true beside them
    while places < 4 and f"{ratio:.{places}f}" == f"{speedup_low:.{places}f}":
        places += 1
    busier, low = f"x{ratio:.{places}f} busier", f"{speedup_low:.{places}f}"
    if ratio >= speedup:
        return (f"{where} shows them {busier}, as much as the speed-up: busier cores can account for it, "
                "though this study does not measure them as its cause.")
    if ratio >= speedup_low:
        return (f"{where} shows them {busier}, within the speed-up's range (from {low}): busier cores can "
                "account for much of it, perhaps all; this study does not take it apart.")
    rest = "each image took less CPU time, which this study does not take apart."
    if ratio > 1:
        return (f"{where} shows them only {busier}, below the speed-up's range (from {low}): beyond that, "
                f"{rest}")
    return f"{where} shows no busier cores (x{ratio:.2f}): {rest}"


def why_slower(who: str = "this study") -> str:
    """What a slowdown whose range lies below 1 can be read as: `who` names what did not take it apart."""
    return ("the strategy's work each step (splitting each batch onto the devices, summing the gradients) "
            f"can cost more than a second stream fills; {who} does not separate the two.")


def _cores_of(points: Sequence[Point], top: Point) -> tuple[float | None, float | None]:
    """The cores kept busy by the fewest devices' run and by `top`'s (same pipeline)."""
    first = min((p for p in points if p.pipeline == top.pipeline), key=lambda p: p.devices)
    return first.run.cores_used, top.run.cores_used


def _hardware_line(kind: str, counts: Sequence[int], cores: int, points: Sequence[Point]) -> str:
    """What the hardware allows, then what was measured, in words that agree with the numbers."""
    top = _best_speedup(points)
    measured = (f"measured on {top.devices} devices ({top.pipeline}, global batch {top.run.global_batch}): "
                f"speed-up {_with_spread(top)}")
    if kind in ("logical-cpu", "logical-gpu"):
        what = (
            f"{', '.join(map(str, counts))} logical CPU device(s) share {cores} core(s)"
            if kind == "logical-cpu"
            else "The logical GPUs are slices of one physical GPU"
        )
        if _scaling_mode(points) != "strong":  # one verdict a measurement: the devices' is strong scaling's
            verdict = ("the devices and a larger global batch together, so no verdict on the devices alone: "
                       "a fixed global batch (strong scaling) gives theirs.")  # fmt: skip
        elif top.speedup_low > 1.0:
            why = why_faster(top.speedup, top.speedup_low, *_cores_of(points, top))
            verdict = f"with the same images per step; {why}"
        elif top.speedup_high < 1.0:
            verdict = f"a loss: {why_slower()}"
        else:
            verdict = "no difference measured beyond the spread."
        return (
            f"{what}: a device added brings no cores of its own, only another stream of operations for "
            f"the cores one device's step leaves idle. The dashed ideal line is what separate GPUs would "
            f"allow. {measured.capitalize()}: {verdict}"
        )
    if kind == "gpu":
        return (
            f"Real GPUs: the ideal speed-up is n; {measured}. Efficiency well below 100 % means something "
            "other than the GPUs sets the pace: the input pipeline (see below) or the gradient exchange "
            "(the synthetic runs, which have no input cost, show it)."
        )
    return f"Devices of kind {kind}; {measured}."


def _context_lines(kind: str, points: Sequence[Point], reused: Sequence[Run]) -> list[str]:
    """What weak scaling and MirroredStrategy on CPUs add to the picture, where they apply (once: not
    again for runs taken from an earlier study, which said it)."""
    lines = []
    if _scaling_mode(points) == "weak":
        first, top = min(points, key=lambda p: p.devices), _best_speedup(points)
        lines.append(
            f"Weak scaling: the global batch grew from {first.run.global_batch} to {top.run.global_batch} "
            f"images per step ({top.run.batch_size_per_replica} per replica). A larger batch can cost less "
            "per image (fewer, larger matrix products; less per-step overhead), so images/s can rise even "
            "where the devices add nothing; a batch sweep measures whether it does. Compare the "
            "strong-scaling study (fixed global batch) to see the devices alone."
        )
    mirrored = [p for p in points if p.devices > 1 and p.run.strategy == "mirrored"]
    if kind == "logical-cpu" and any(p.run not in reused for p in mirrored):
        lines.append(
            "MirroredStrategy's own per-step work on CPUs (splitting each batch, summing the gradients) is "
            "measured alone by "
            "benchmarks/bench_parallel.py, and --strategy towers shows the split without it."
        )
    return lines


def _pipeline_summaries(points: Sequence[Point], pipelines: Sequence[str]) -> tuple[dict, list[str]]:
    summary: dict[str, dict[str, float]] = {}
    lines = []
    for pipeline in pipelines:
        mine = sorted((p for p in points if p.pipeline == pipeline), key=lambda p: p.devices)
        first, last = mine[0], mine[-1]
        summary[pipeline] = {
            "max_speedup": max(p.speedup for p in mine),
            "efficiency_at_most_devices": last.efficiency,
        }
        if len(mine) > 1:
            lines.append(
                f"{pipeline}: {first.devices} -> {last.devices} devices: "
                f"{_fmt_rate(first.images_per_s)} -> {_fmt_rate(last.images_per_s)} images/s, "
                f"speed-up {_with_spread(last)}, efficiency {last.efficiency:.0%}."
            )
    return summary, lines


def _input_readings(points: Sequence[Point], pipelines: Sequence[str], shared: bool) -> tuple[dict, ...]:
    """Per pipeline but synthetic: its gap to synthetic and headroom per count, its verdict and line."""
    by_key = {(p.pipeline, p.devices): p for p in points}
    counts = sorted({p.devices for p in points})
    gaps: dict[str, dict[str, float]] = {}
    headrooms: dict[str, dict[str, float]] = {}
    input_bound: dict[str, bool | None] = {}
    lines: dict[str, str] = {}
    for pipeline in (p for p in pipelines if p != "synthetic"):
        gaps[pipeline], headrooms[pipeline] = {}, {}
        for n in counts:
            point, reference = by_key.get((pipeline, n)), by_key.get(("synthetic", n))
            if point is None:
                continue
            if reference is not None:
                gaps[pipeline][str(n)] = 1 - point.images_per_s / reference.images_per_s
            if point.run.pipeline_images_per_s:
                needed = (reference or point).images_per_s
                headrooms[pipeline][str(n)] = point.run.pipeline_images_per_s / needed
        top = str(max(n for n in counts if (pipeline, n) in by_key))
        input_bound[pipeline], lines[pipeline] = _input_verdict(
            by_key[(pipeline, int(top))], gaps[pipeline].get(top), headrooms[pipeline].get(top), shared
        )
    return gaps, headrooms, input_bound, lines


def cores_used(runs: Sequence[Run]) -> dict[str, float]:
    """Cores each device count's training process kept busy during its timed steps (the first pipeline's)."""
    first = runs[0].pipeline if runs else None
    return {str(r.devices): r.cores_used for r in runs if r.pipeline == first and r.cores_used is not None}


def _cores_line(runs: Sequence[Run], cores: int) -> list[str]:
    used = cores_used(runs)
    if not used:
        return []
    how = ("Where more devices kept more cores busy, their op streams filled cores one device left idle; "
           "on a machine busy with other work every figure is lower: rerun when it is quiet.")  # fmt: skip
    counts = ", ".join(f"{n} device(s) {u:.2f}" for n, u in used.items())
    line = f"Cores kept busy during the timed steps, of {cores}: {counts}."
    return [line + (f" {how}" if len(used) > 1 else "")]  # one count: nothing to compare


def _reused_line(reused: Sequence[Run]) -> list[str]:
    if not reused:
        return []
    counts = ", ".join(str(n) for n in sorted({run.devices for run in reused}))
    batches = ", ".join(str(b) for b in sorted({run.global_batch for run in reused}))
    return [f"{counts} device(s) at global batch {batches}: the earlier study's run (the same settings, not "
            "measured again), read there: its devices' verdict, its input and its cores."]  # fmt: skip


def read_scaling(runs: Sequence[Run], reused: Sequence[Run] = ()) -> Reading:
    """What the runs say, as a `Reading`: the one place a study's numbers are read.

    `reused`: the runs taken from an earlier study (``scaling_study(reuse=)``), whose reading already
    said what they alone say: one verdict a measurement, so this one points there instead of saying it
    again.

    A pipeline is input-bound when its headroom is below 1 + `INPUT_BOUND_THRESHOLD` on separate
    devices, and below 1 / `INPUT_BOUND_THRESHOLD` on shared hardware, where its own work also takes
    about 1/headroom of the cores. On a busy machine the measured gap to the synthetic run is
    noisy, the headroom much less so.
    """
    if not runs:
        raise ValueError("runs is empty: pass the runs of a study (scaling_study(...).runs).")
    points = speedups(runs)
    kinds = sorted({run.device_kind for run in runs})
    kind = kinds[0] if len(kinds) == 1 else "mixed"
    cores, counts = runs[0].cores, sorted({run.devices for run in runs})
    pipelines = list(dict.fromkeys(run.pipeline for run in runs))
    shared = kind in ("logical-cpu", "logical-gpu")
    summary, summary_lines = _pipeline_summaries(points, pipelines)
    gaps, headrooms, input_bound, input_lines = _input_readings(points, pipelines, shared)
    lines = [_hardware_line(kind, counts, cores, points), *_context_lines(kind, points, reused)]
    lines += summary_lines
    tops = {p.pipeline: p for p in sorted(points, key=lambda p: p.devices)}  # each pipeline's most devices
    lines += [line for pipeline, line in input_lines.items() if tops[pipeline].run not in reused]
    if "synthetic" not in pipelines and not reused:
        lines.append("Add the synthetic pipeline to measure what the devices do without input cost.")
    lines += _reused_line(reused)
    return Reading(
        points=tuple(points), model=runs[0].model, device_kind=kind, shared_hardware=shared, cores=cores,
        cores_per_device={str(n): cores / n for n in counts},
        expected_speedup=SHARED_BOUND if shared else "up to n",
        scaling=_scaling_mode(points), most_devices=max(counts), pipelines=summary, gap_vs_synthetic=gaps,
        input_headroom=headrooms, input_bound=input_bound, input_bound_threshold=INPUT_BOUND_THRESHOLD,
        lines=tuple(lines + _cores_line([run for run in runs if run not in reused], cores)),
    )  # fmt: skip
