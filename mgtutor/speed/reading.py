"""Read a scaling study's numbers: speed-up, efficiency, the bottleneck, a table.

Plain arithmetic on the runs `mgtutor.speed.study.scaling_study` (or
`mgtutor.speed.measure.measure_training`) records: no TensorFlow, no plotting, so the
reading of saved numbers is quick and `mgtutor.plots.plot_scaling` can use it.

Where it ran matters. Logical CPU devices (`mgtutor.setup_devices` without a
GPU) share the same cores, and one device already uses them all, so more
devices add no compute: at a fixed global batch expect a speed-up of at most 1.
Logical GPUs carved out of one GPU share it the same way. Only real devices can
show a speed-up.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from mgtutor.speed.measure import PIPELINES

# A pipeline that trains this much slower than the synthetic batch at the same device
# count is input-bound; smaller gaps are within a shared machine's run-to-run noise (~10 %).
INPUT_BOUND_THRESHOLD = 0.15


def with_speedups(runs: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Copies of `runs` with ``speedup``, ``ideal_speedup`` and ``efficiency`` added.

    Per pipeline, against that pipeline's run on the fewest devices (normally 1):
    speed-up = images/s / baseline images/s; ideal = devices / baseline devices;
    efficiency = speed-up / ideal (= speed-up / n from one device).
    """
    runs = [dict(run) for run in runs]
    baselines: dict[str, dict[str, Any]] = {}
    for run in runs:
        best = baselines.get(run["pipeline"])
        if best is None or run["devices"] < best["devices"]:
            baselines[run["pipeline"]] = run
    for run in runs:
        base = baselines[run["pipeline"]]
        run["baseline_devices"] = base["devices"]
        run["speedup"] = run["images_per_s"] / base["images_per_s"]
        run["ideal_speedup"] = run["devices"] / base["devices"]
        run["efficiency"] = run["speedup"] / run["ideal_speedup"]
    return runs


def _fmt_rate(value: float) -> str:
    return f"{value:,.0f}"


def _input_verdict(
    pipeline: str, run: Mapping[str, Any], gap: float | None, headroom: float | None, shared: bool
) -> tuple[bool | None, str]:
    """(input-bound or None, sentence) for one pipeline at one device count."""
    n, gap_text = run["devices"], ""
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
        f"the pipeline alone delivers {_fmt_rate(run['pipeline_images_per_s'])} images/s, {headroom:.1f}x "
        "what the devices take"
    )
    lead = f"{pipeline} {gap_text}; {alone}" if gap_text else f"{pipeline}: {alone}"
    # On separate devices the input runs beside the training and limits it only when it is not ahead;
    # on shared cores its own work also takes about 1/headroom of the time.
    if headroom < (1 / INPUT_BOUND_THRESHOLD if shared else 1 + INPUT_BOUND_THRESHOLD):
        why = (
            "it cannot keep ahead"
            if headroom < 1
            else (
                f"its own work takes about {1 / headroom:.0%} of the shared cores"
                if shared
                else "barely ahead"
            )
        )
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


def _scaling_mode(runs: Sequence[Mapping[str, Any]]) -> str:
    """"strong" (the global batch stays fixed), "weak" (the per-replica batch does) or "mixed"."""
    batches = {run.get("global_batch") for run in runs}
    if None in batches:
        return "unknown"
    if len(batches) == 1:
        return "strong"
    return "weak" if len({run.get("batch_size_per_replica") for run in runs}) == 1 else "mixed"


def _best_speedup(runs: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    most = max(run["devices"] for run in runs)
    return max((run for run in runs if run["devices"] == most), key=lambda run: run["speedup"])


def _hardware_line(kind: str, counts: Sequence[int], cores: int, runs: Sequence[Mapping[str, Any]]) -> str:
    """What the hardware allows, then what was measured, in words that agree with the numbers."""
    top = _best_speedup(runs)
    measured = f"measured: speed-up {top['speedup']:.2f} on {top['devices']} devices ({top['pipeline']})"
    if kind in ("logical-cpu", "logical-gpu"):
        what = (
            f"{', '.join(map(str, counts))} logical CPU device(s) share {cores} core(s)"
            if kind == "logical-cpu"
            else "The logical GPUs are slices of one physical GPU"
        )
        same_work = _scaling_mode(runs) == "strong"
        if top["speedup"] <= 1.05:
            verdict = "as expected: the added devices bring no compute of their own."
        elif same_work:
            verdict = (
                "above 1 with the same work per step: smaller per-replica batches happened to run "
                "better on these cores, or the machine was busier during the one-device run; rerun."
            )
        else:
            verdict = "the gain comes from the larger global batch, not from the devices (see below)."
        return (
            f"{what}: one device already keeps it all busy, so more devices cannot add compute; the "
            f"devices' own limit is a speed-up of 1. The dashed ideal line is what separate GPUs would "
            f"allow. {measured.capitalize()}: {verdict}"
        )
    if kind == "gpu":
        return (
            f"Real GPUs: the ideal speed-up is n; {measured}. Efficiency well below 100 % means something "
            "other than the GPUs sets the pace: the input pipeline (see below) or the gradient exchange "
            "(the synthetic runs, which have no input cost, show it)."
        )
    return f"Devices of kind {kind}; {measured}."


def _weak_scaling_line(runs: Sequence[Mapping[str, Any]]) -> str:
    """Weak scaling grows the global batch with the devices: say what that alone is worth."""
    first = min(runs, key=lambda run: run["devices"])
    top = _best_speedup(runs)
    return (
        f"Weak scaling: the global batch grew from {first['global_batch']} to {top['global_batch']} "
        f"images per step ({top['batch_size_per_replica']} per replica). A larger batch costs less per "
        "image (fewer, larger matrix products; less per-step overhead), so images/s can rise even where "
        "the devices add nothing. Compare the strong-scaling study (fixed global batch) to see the "
        "devices alone."
    )


def read_scaling(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """What the runs say: what speed-up the hardware allows, and whether the input limits it.

    Machine-readable fields plus ``lines``, the same in sentences. The input's
    headroom is the pipeline's rate alone (``pipeline_images_per_s``) over the
    rate the devices train at without input cost (the synthetic run at the same
    device count, else the run itself). Below 1 the input cannot keep ahead. A
    pipeline is input-bound when its headroom is below 1 + `INPUT_BOUND_THRESHOLD`
    on separate devices, and below 1 / `INPUT_BOUND_THRESHOLD` on shared
    hardware, where its own work also takes about 1/headroom of the cores. The
    measured gap to the synthetic run is reported beside it; on a busy machine
    it is noisy, the headroom much less so.
    """
    if not runs:
        raise ValueError("runs is empty: pass the runs of a study (scaling_study(...)['runs']).")
    runs = with_speedups(runs) if any("efficiency" not in run for run in runs) else list(runs)
    kinds = sorted({run["device_kind"] for run in runs})
    kind = kinds[0] if len(kinds) == 1 else "mixed"
    cores = runs[0].get("cpu_affinity") or runs[0].get("cpu_count") or 1
    counts = sorted({run["devices"] for run in runs})
    pipelines = list(dict.fromkeys(run["pipeline"] for run in runs))
    shared = kind in ("logical-cpu", "logical-gpu")
    by_key = {(run["pipeline"], run["devices"]): run for run in runs}
    mode = _scaling_mode(runs)
    lines = [_hardware_line(kind, counts, cores, runs)]
    if mode == "weak":
        lines.append(_weak_scaling_line(runs))
    if kind == "logical-cpu" and any(
        run["devices"] > 1 and run.get("strategy") == "mirrored" for run in runs
    ):
        lines.append(
            "Part of the cost is MirroredStrategy's own per-step work on CPUs (splitting each batch, "
            "summing gradients): benchmarks/bench_parallel.py measures it, and --strategy towers "
            "shows the split without it."
        )
    summary: dict[str, Any] = {}
    for pipeline in pipelines:
        mine = sorted((run for run in runs if run["pipeline"] == pipeline), key=lambda run: run["devices"])
        first, last = mine[0], mine[-1]
        summary[pipeline] = {
            "max_speedup": max(run["speedup"] for run in mine),
            "efficiency_at_most_devices": last["efficiency"],
        }
        if len(mine) > 1:
            lines.append(
                f"{pipeline}: {first['devices']} -> {last['devices']} devices: "
                f"{_fmt_rate(first['images_per_s'])} -> {_fmt_rate(last['images_per_s'])} images/s, "
                f"speed-up {last['speedup']:.2f}, efficiency {last['efficiency']:.0%}."
            )
    gaps: dict[str, dict[str, float]] = {}
    headrooms: dict[str, dict[str, float]] = {}
    input_bound: dict[str, bool | None] = {}
    for pipeline in (p for p in pipelines if p != "synthetic"):
        gaps[pipeline], headrooms[pipeline] = {}, {}
        for n in counts:
            run, reference = by_key.get((pipeline, n)), by_key.get(("synthetic", n))
            if run is None:
                continue
            if reference is not None:
                gaps[pipeline][str(n)] = 1 - run["images_per_s"] / reference["images_per_s"]
            if run.get("pipeline_images_per_s"):
                needed = (reference or run)["images_per_s"]
                headrooms[pipeline][str(n)] = run["pipeline_images_per_s"] / needed
        top = max(n for n in counts if (pipeline, n) in by_key)
        input_bound[pipeline], line = _input_verdict(
            pipeline,
            by_key[(pipeline, top)],
            gaps[pipeline].get(str(top)),
            headrooms[pipeline].get(str(top)),
            shared,
        )
        lines.append(line)
    if "synthetic" not in pipelines:
        lines.append("Add the synthetic pipeline to measure what the devices do without input cost.")
    used = [run["cores_used"] for run in runs if run.get("cores_used") is not None]
    if used:
        busy = min(used) < 0.75 * cores
        lines.append(
            f"During the timed steps the training process used {min(used):.1f}-{max(used):.1f} of "
            f"{cores} core(s)"
            + (
                ": where well below that, other work on the machine competed (or the steps left cores "
                "idle); rerun when it is quiet, or with more --steps, before trusting small differences."
                if busy
                else "."
            )
        )
    return {
        "device_kind": kind,
        "shared_hardware": shared,
        "cores": cores,
        "cores_per_device": {str(n): cores / n for n in counts},
        "expected_speedup": "<= 1" if shared else "up to n",
        "scaling": mode,
        "most_devices": max(counts),
        "pipelines": summary,
        "gap_vs_synthetic": gaps,
        "input_headroom": headrooms,
        "input_bound": input_bound,
        "input_bound_threshold": INPUT_BOUND_THRESHOLD,
        "lines": lines,
    }


def format_table(runs: Sequence[Mapping[str, Any]]) -> str:
    """The study as a text table: devices, pipeline, images/s, s/epoch, speed-up, efficiency."""
    runs = with_speedups(runs) if any("efficiency" not in run for run in runs) else runs
    header = (
        f"{'devices':>7}  {'pipeline':<10} {'images/s':>9} {'s/epoch':>8} {'speed-up':>8} "
        f"{'efficiency':>10} {'input alone img/s':>17}"
    )
    lines = [header, "-" * len(header)]
    for run in sorted(runs, key=lambda run: (PIPELINES.index(run["pipeline"]), run["devices"])):
        alone = run.get("pipeline_images_per_s")
        lines.append(
            f"{run['devices']:>7}  {run['pipeline']:<10} {run['images_per_s']:>9,.0f} "
            f"{run['seconds_per_epoch']:>8.1f} {run['speedup']:>8.2f} {run['efficiency']:>10.0%} "
            f"{(_fmt_rate(alone) if alone else '-'):>17}"
        )
    return "\n".join(lines)
