"""Measure throughput honestly: the input pipeline, training on N devices, and how it scales.

Training speed on N devices is bounded by the slower of two rates: how fast
the devices consume batches and how fast the input pipeline produces them.

* `pipeline_images_per_second` measures the second, for any iterable of batches
  (a ``PyDataset`` from ``ImageDataGenerator.flow``, a ``tf.data.Dataset``, a
  generator).
* `measure_training` measures the first, in this process: images/s of ``fit``
  on n devices fed by one input pipeline, with the machine facts needed to read it.
* `scaling_study` (command line: ``python -m mgtutor.bench --devices 1 2 4``)
  runs `measure_training` for several device counts, each count in its own child
  process (TensorFlow fixes its devices once per process, and two
  MirroredStrategy sizes in one process abort it), then computes speed-up,
  efficiency and a reading of the bottleneck, and writes JSON and a plot.
  Training on a synthetic batch (no input cost) beside the real pipelines shows
  whether the input is what limits scaling.
* `amdahl_speedup` and `projected_scaling`: what the study means on real GPUs,
  from seed 001's 63 s -> 16 s per epoch on four V100s.

Where it runs matters. Logical CPU devices (`mgtutor.setup_devices` without a
GPU) share the same cores, and one device already uses them all, so more
devices add no compute: at a fixed global batch expect a speed-up of at most 1. Logical GPUs carved
out of one GPU share it the same way. Only real devices can show a speed-up.

Importing this module starts nothing: TensorFlow loads only inside
`measure_training`, so the command line checks its arguments, and starts its
children, from a process that never imports TensorFlow.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import numbers
import os
import platform
import re
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from mgtutor._checks import check_whole, is_whole
from mgtutor._tflog import TF_NOISE

PIPELINES = ("synthetic", "in_memory", "flow", "tf.data", "layers")
PIPELINE_DESCRIPTIONS = {
    "synthetic": "one random batch repeated (tf.data from_tensors): no input cost, the devices' own rate",
    "in_memory": "the training images from NumPy through tf.data (shuffle, batch, prefetch), no augmentation",
    "flow": "seed 000's ImageDataGenerator(...).flow: NumPy augmentation in a Keras PyDataset",
    "tf.data": "the same augmentation as a tf.data pipeline (ImageDataGenerator.as_dataset)",
    "layers": "the same augmentation as Keras layers inside the model (as_layers), run on each device",
}
STRATEGIES = ("mirrored", "towers")
# Seed 000 (the Keras cifar10_cnn example): shifts of 0.1 and horizontal flips, rotation_range=0.
SEED_000_AUGMENTATION: dict[str, Any] = {
    "rotation_range": 0,
    "width_shift_range": 0.1,
    "height_shift_range": 0.1,
    "horizontal_flip": True,
}
# Seed 001: MiniGoogLeNet on CIFAR-10, seconds per epoch on 1 and on 4 V100 GPUs.
SEED_001_EPOCH_SECONDS: dict[int, float] = {1: 63.0, 4: 16.0}
# A pipeline that trains this much slower than the synthetic batch at the same device
# count is input-bound; smaller gaps are within a shared machine's run-to-run noise (~10 %).
INPUT_BOUND_THRESHOLD = 0.15
DEFAULT_TIMEOUT_S = 1800.0
RESULTS_FILE = "scaling.json"
PLOT_FILE = "scaling.png"
_RESULT_MARK = "MGTUTOR_BENCH_RESULT "


class BenchmarkError(RuntimeError):
    """A measurement could not be made: a child process failed or timed out."""


# --------------------------------------------------------------------------- the input alone


def _batch_size(batch: Any) -> int:
    images = batch[0] if isinstance(batch, tuple | list) else batch
    return int(images.shape[0])


def _materialise(batch: Any) -> None:
    # tf.data and Keras layers may return lazily evaluated tensors; force the work.
    images = batch[0] if isinstance(batch, tuple | list) else batch
    if hasattr(images, "numpy"):
        images.numpy()


def pipeline_images_per_second(batches: Iterable[Any], n_batches: int, *, warmup: int = 1) -> float:
    """Images per second over `n_batches` batches of `batches`, after `warmup` untimed ones.

    The warm-up batches absorb one-off costs (tracing a ``tf.data`` graph,
    starting workers), which would otherwise dominate a short measurement.
    """
    for name, value, minimum in (("n_batches", n_batches, 1), ("warmup", warmup, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ValueError(f"{name} must be a whole number >= {minimum}, got {value!r}.")
    iterator = iter(batches)
    for batch in itertools.islice(iterator, warmup):
        _materialise(batch)
    images, start = 0, time.perf_counter()
    for batch in itertools.islice(iterator, n_batches):
        _materialise(batch)
        images += _batch_size(batch)
    seconds = time.perf_counter() - start
    if images == 0:
        raise ValueError(
            f"batches ran out after the {warmup} warm-up batch(es); give an iterable with at "
            f"least warmup + n_batches = {warmup + n_batches} batches (or one that repeats)."
        )
    return images / seconds


# --------------------------------------------------------------------------- checks


def _check_choice(name: str, value: Any, choices: Sequence[str]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(choices)}; got {value!r}.")
    return value


def _check_model(model: Any) -> str:
    from mgtutor.models import MODEL_BUILDERS

    return _check_choice("model", model, sorted(MODEL_BUILDERS))


def _check_run_args(
    model: Any,
    pipeline: Any,
    strategy: Any,
    batch_size_per_replica: Any,
    steps: Any,
    warmup_steps: Any,
    samples: Any,
    seed: Any,
) -> None:
    _check_model(model)
    _check_choice("pipeline", pipeline, PIPELINES)
    _check_choice("strategy", strategy, STRATEGIES)
    check_whole("batch_size_per_replica", batch_size_per_replica, 1)
    check_whole("steps", steps, 1)
    # Timing starts when a step ends; the first step also traces the graph, so it must not count.
    check_whole("warmup_steps", warmup_steps, 1, "The first step traces the graph and must not be timed.")
    if samples is not None:
        check_whole("samples", samples, 1, "Pass None for the whole training set.")
    check_whole("seed", seed, 0)


# --------------------------------------------------------------------------- one configuration


def _machine() -> dict[str, Any]:
    """Facts about this process that decide what a speed-up can be."""
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "cpu_count": os.cpu_count(),
        "cpu_affinity": affinity,
        "platform": platform.platform(),
        "python": platform.python_version(),
    }


def _load_training_images(dataset: str, data_path: Any, samples: int | None, seed: int):
    """(x float32 in [0, 1], y one-hot, size of the whole training split, data summary)."""
    from mgtutor.data import load_dataset, one_hot, scale_images

    data = load_dataset(dataset, data_path, seed=seed)
    full_size = len(data.x_train)
    data = data.subset(samples, None, seed=seed) if samples is not None else data
    return scale_images(data.x_train), one_hot(data.y_train, data.num_classes), full_size, data


def _make_input(pipeline: str, x: Any, y: Any, global_batch: int, seed: int) -> tuple[Any, bool]:
    """The batches `fit` trains on for `pipeline`, and whether they repeat forever."""
    import numpy as np

    from mgtutor.augment import ImageDataGenerator
    from mgtutor.data import make_dataset

    if pipeline == "synthetic":
        import tensorflow as tf

        rng = np.random.default_rng(seed)
        images = rng.random((global_batch, *x.shape[1:]), dtype=np.float32)
        labels = np.eye(y.shape[1], dtype=np.float32)[rng.integers(0, y.shape[1], global_batch)]
        return tf.data.Dataset.from_tensors((images, labels)).repeat(), True
    if pipeline in ("in_memory", "layers"):  # "layers" augments inside the model
        return make_dataset(x, y, global_batch, seed=seed, drop_remainder=True, repeat=True), True
    generator = ImageDataGenerator(**SEED_000_AUGMENTATION)
    if pipeline == "flow":
        # Whole batches only: every step then holds global_batch images on every replica count.
        whole = len(x) // global_batch * global_batch
        return generator.flow(x[:whole], y[:whole], batch_size=global_batch, seed=seed), False
    dataset = generator.as_dataset(x, y, batch_size=global_batch, seed=seed, drop_remainder=True)
    return dataset.repeat(), True


def _build_and_compile(
    name: str, pipeline: str, devices: Sequence[str], strategy: str, input_shape, num_classes, seed
):
    """The model to fit (wrapped for the `devices` when there are several) and the template's parameters."""
    import contextlib

    import keras

    from mgtutor.augment import ImageDataGenerator
    from mgtutor.models import build_model, seed_optimizer
    from mgtutor.parallel import mirrored_strategy, multi_gpu_model

    # The devices by name: a machine with more GPUs than asked for must not use them all.
    n = len(devices)
    scope = (
        mirrored_strategy(list(devices)).scope()
        if n > 1 and strategy == "mirrored"
        else contextlib.nullcontext()
    )
    with scope:
        template = build_model(name, tuple(input_shape), num_classes, seed=seed)
        params = int(template.count_params())
        model = template
        if pipeline == "layers":
            layers = ImageDataGenerator(**SEED_000_AUGMENTATION).as_layers(
                input_shape=tuple(input_shape), seed=seed
            )
            model = keras.Sequential([layers, template], name=f"augmented_{template.name}")
        if n > 1 and strategy == "towers":
            model = multi_gpu_model(model, list(devices))
        # XLA fails on logical CPUs and would undo the towers' device placement.
        model.compile(
            optimizer=seed_optimizer(),
            loss="categorical_crossentropy",
            metrics=["accuracy"],
            jit_compile=False,
        )
    return model, params


def _step_clock(total_steps: int) -> Any:
    import keras

    class StepClock(keras.callbacks.Callback):
        """The time each training step ends; stops `fit` after `total_steps` steps.

        Defining ``on_train_batch_end`` makes Keras call it synchronously, after the
        step's logs are fetched from the device, so each time is a finished step.
        """

        def __init__(self) -> None:
            super().__init__()
            self.ends: list[float] = []
            self.cpu: list[float] = []  # this process's CPU seconds, all threads

        def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
            self.ends.append(time.perf_counter())
            self.cpu.append(time.process_time())
            if len(self.ends) >= total_steps:
                self.model.stop_training = True

    return StepClock()


def _measure(
    n: int,
    pipeline: str,
    data: tuple,
    *,
    model: str,
    strategy: str,
    batch_size_per_replica: int,
    steps: int,
    warmup_steps: int,
    seed: int,
    device_setup: Any,
) -> dict[str, Any]:
    """Time `steps` training steps after `warmup_steps` on already loaded data."""
    import keras
    import numpy as np
    import tensorflow as tf

    x, y, full_size, dataset = data
    global_batch = batch_size_per_replica * n
    if len(x) < global_batch:
        raise ValueError(
            f"samples: {len(x)} training images cannot fill one global batch of {global_batch} "
            f"({batch_size_per_replica} per replica x {n} devices); pass samples >= {global_batch}."
        )
    total = warmup_steps + steps
    producer, _ = _make_input(pipeline, x, y, global_batch, seed)
    producer_rate = pipeline_images_per_second(producer, min(steps, 50), warmup=1)
    batches, repeats = _make_input(pipeline, x, y, global_batch, seed)
    fitted, params = _build_and_compile(
        model, pipeline, device_setup.names, strategy, x.shape[1:], y.shape[1], seed
    )
    clock = _step_clock(total)
    load_before = os.getloadavg()[0]
    if repeats:
        history = fitted.fit(
            batches, epochs=1, steps_per_epoch=total, verbose=0, callbacks=[clock], shuffle=False
        )
    else:  # a PyDataset ends with its epoch: run as many epochs as the steps need
        epochs = math.ceil(total / len(batches))
        history = fitted.fit(batches, epochs=epochs, verbose=0, callbacks=[clock])
    load_after = os.getloadavg()[0]
    if len(clock.ends) < total:
        raise BenchmarkError(f"{pipeline}: fit stopped after {len(clock.ends)} of {total} steps.")
    ends = np.asarray(clock.ends[warmup_steps - 1 : total])
    seconds = float(ends[-1] - ends[0])
    cpu_seconds = clock.cpu[total - 1] - clock.cpu[warmup_steps - 1]
    images_per_s = steps * global_batch / seconds
    return {
        "devices": n,
        "pipeline": pipeline,
        "model": model,
        "strategy": strategy if n > 1 else "none (one device)",
        "device_kind": device_setup.kind,
        "device_names": list(device_setup.names),
        "physical_gpus": len(tf.config.list_physical_devices("GPU")),
        "batch_size_per_replica": batch_size_per_replica,
        "global_batch": global_batch,
        "steps": steps,
        "warmup_steps": warmup_steps,
        "timed_seconds": seconds,
        "images_per_s": images_per_s,
        "step_seconds_median": float(np.median(np.diff(ends))),
        "cores_used": cpu_seconds / seconds,
        "epoch_images": full_size,
        "seconds_per_epoch": full_size / images_per_s,
        "pipeline_images_per_s": producer_rate,
        "model_params": params,
        "final_loss": float(history.history["loss"][-1]),
        "train_images": len(x),
        "data": dataset.summary(),
        "synthetic_data": bool(dataset.synthetic),
        "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads(),
        "inter_op_threads": tf.config.threading.get_inter_op_parallelism_threads(),
        "load_before": load_before,
        "load_after": load_after,
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "pid": os.getpid(),
        **_machine(),
    }


def _measure_in_process(n_devices: int, pipelines: Sequence[str], **kwargs: Any) -> list[dict[str, Any]]:
    """Every pipeline for one device count, in this process: devices first, data loaded once."""
    from mgtutor.devices import setup_devices

    device_setup = setup_devices(n_devices, verbose=False)
    data = _load_training_images(
        kwargs.pop("dataset"), kwargs.pop("data_path"), kwargs.pop("samples"), kwargs["seed"]
    )
    return [
        _measure(n_devices, pipeline, data, device_setup=device_setup, **kwargs) for pipeline in pipelines
    ]


def measure_training(
    n_devices: int,
    *,
    model: str = "seed_cnn",
    pipeline: str = "in_memory",
    strategy: str = "mirrored",
    batch_size_per_replica: int = 32,
    steps: int = 20,
    warmup_steps: int = 3,
    dataset: str = "cifar10",
    data_path: str | os.PathLike | None = None,
    samples: int | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """Training images/s of `model` on `n_devices` devices fed by `pipeline`, in this process.

    Calls ``setup_devices(n_devices)`` first, so run it in a fresh process (or a
    notebook right after a restart). One device trains the model itself; more
    use `strategy`: ``"mirrored"`` (``MirroredStrategy``) or ``"towers"``
    (`mgtutor.multi_gpu_model`). The global batch is `batch_size_per_replica`
    x `n_devices`. Times `steps` steps after `warmup_steps` untimed ones (the
    first traces the graph); ``seconds_per_epoch`` is the whole training split
    at that rate; ``pipeline_images_per_s`` is the pipeline alone (no training).
    `samples` limits the training images (None: all). Pipelines: `PIPELINES`,
    described in `PIPELINE_DESCRIPTIONS`.
    """
    n_devices = check_whole("n_devices", n_devices, 1)
    _check_run_args(model, pipeline, strategy, batch_size_per_replica, steps, warmup_steps, samples, seed)
    return _measure_in_process(
        n_devices,
        [pipeline],
        model=model,
        strategy=strategy,
        batch_size_per_replica=batch_size_per_replica,
        steps=steps,
        warmup_steps=warmup_steps,
        dataset=dataset,
        data_path=data_path,
        samples=samples,
        seed=seed,
    )[0]


# --------------------------------------------------------------------------- reading the numbers


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


# --------------------------------------------------------------------------- the study


def _check_study_args(
    devices: Any,
    pipelines: Any,
    model: Any,
    strategy: Any,
    batch_size_per_replica: Any,
    steps: Any,
    warmup_steps: Any,
    samples: Any,
    seed: Any,
    timeout: Any,
    output: Any,
) -> tuple[tuple[int, ...], tuple[str, ...]]:
    if isinstance(devices, str) or not isinstance(devices, Iterable):
        raise ValueError(f"devices must be a list of device counts such as (1, 2, 4), got {devices!r}.")
    devices = tuple(devices)
    if not devices or not all(is_whole(n) and n >= 1 for n in devices):
        raise ValueError(f"devices must be whole numbers >= 1, such as (1, 2, 4); got {devices!r}.")
    if len(set(devices)) != len(devices):
        raise ValueError(f"devices lists a count twice: {devices!r}; give each count once.")
    if isinstance(pipelines, str) or not isinstance(pipelines, Iterable):
        raise ValueError(f"pipelines must be a list drawn from {', '.join(PIPELINES)}; got {pipelines!r}.")
    pipelines = tuple(pipelines)
    if not pipelines or len(set(pipelines)) != len(pipelines):
        raise ValueError(
            f"pipelines must name each of {', '.join(PIPELINES)} at most once; got {pipelines!r}."
        )
    for pipeline in pipelines:
        _check_choice("pipelines", pipeline, PIPELINES)
    _check_run_args(model, pipelines[0], strategy, batch_size_per_replica, steps, warmup_steps, samples, seed)
    largest = max(devices) * batch_size_per_replica
    if samples is not None and samples < largest:
        raise ValueError(
            f"samples={samples} cannot fill one global batch of {largest} ({batch_size_per_replica} per "
            f"replica x {max(devices)} devices); pass samples >= {largest}."
        )
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real) or not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds per child process, got {timeout!r}.")
    if output is not None and Path(output).exists() and not Path(output).is_dir():
        raise ValueError(
            f"output {str(output)!r} is a file; pass a folder for {RESULTS_FILE} and {PLOT_FILE}."
        )
    return devices, pipelines


def _stderr_tail(text: str | bytes | None, limit: int = 3000) -> str:
    """The end of a child's stderr without TensorFlow's C++ log lines."""
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    kept = [line for line in (text or "").splitlines() if line.strip() and not TF_NOISE.match(line)]
    return "\n".join(kept)[-limit:]


def _child_env() -> dict[str, str]:
    package_root = str(Path(__file__).resolve().parents[1])
    path = os.environ.get("PYTHONPATH", "")
    return {
        **os.environ,
        "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"),
        # The children must import this same mgtutor, installed or not.
        "PYTHONPATH": package_root + (os.pathsep + path if path else ""),
    }


def _run_child(n: int, pipelines: Sequence[str], settings: Mapping[str, Any], timeout: float) -> list[dict]:
    config = {"n_devices": n, "pipelines": list(pipelines), **settings}
    command = [sys.executable, "-m", "mgtutor.bench", "--worker", json.dumps(config)]
    what = f"the {n}-device run ({', '.join(pipelines)})"
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=_child_env())
    except subprocess.TimeoutExpired as err:
        raise BenchmarkError(
            f"{what} did not finish within timeout={timeout:g} s; pass a larger timeout or fewer steps.\n"
            f"{_stderr_tail(err.stderr)}"
        ) from None
    if done.returncode != 0:
        raise BenchmarkError(f"{what} failed (exit code {done.returncode}):\n{_stderr_tail(done.stderr)}")
    for line in reversed(done.stdout.splitlines()):
        if line.startswith(_RESULT_MARK):
            return json.loads(line[len(_RESULT_MARK) :])
    raise BenchmarkError(f"{what} printed no result:\n{done.stdout[-2000:]}\n{_stderr_tail(done.stderr)}")


def _write_outputs(results: dict[str, Any], output: Path) -> dict[str, str]:
    from mgtutor.plots import plot_scaling
    from mgtutor.saving import atomic_write

    output.mkdir(parents=True, exist_ok=True)
    paths = {"json": str(output / RESULTS_FILE), "plot": str(output / PLOT_FILE)}
    results["files"] = paths
    with atomic_write(paths["json"], ".json") as temp:
        temp.write_text(json.dumps(results, indent=2) + "\n")
    figure = plot_scaling(results)
    try:
        with atomic_write(paths["plot"], ".png") as temp:
            figure.savefig(temp, dpi=120)
    finally:
        import matplotlib.pyplot as plt

        plt.close(figure)  # the caller shows it with plot_scaling(results) if wanted
    return paths


def scaling_study(
    devices: Sequence[int] = (1, 2, 4),
    pipelines: Sequence[str] = ("synthetic", "in_memory"),
    *,
    model: str = "seed_cnn",
    strategy: str = "mirrored",
    batch_size_per_replica: int = 32,
    global_batch: int | None = None,
    steps: int = 20,
    warmup_steps: int = 3,
    dataset: str = "cifar10",
    data_path: str | os.PathLike | None = None,
    samples: int | None = None,
    seed: int = 0,
    isolate: bool = False,
    output: str | os.PathLike | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
    verbose: bool = True,
) -> dict[str, Any]:
    """Training throughput on each device count of `devices`, with each input pipeline; speed-up and reading.

    Each device count runs in its own child process (`measure_training` there),
    one after another so they do not compete for the machine; its pipelines run
    in that process one after another, each on a freshly built model, which keeps
    the synthetic and real-input runs it compares close in time. ``isolate=True``
    gives every (devices, pipeline) its own process instead. `timeout` is
    seconds per child. Weak scaling (the default) keeps `batch_size_per_replica`,
    so the global batch grows with the devices; strong scaling, with
    `global_batch`, keeps the global batch and gives each of n devices
    ``global_batch // n``. Returns ``{"settings", "runs", "reading", "elapsed_s"}``
    (runs gain ``speedup`` and ``efficiency``: see `with_speedups`); with
    `output`, also writes ``scaling.json`` and ``scaling.png`` there, atomically.
    """
    devices, pipelines = _check_study_args(
        devices,
        pipelines,
        model,
        strategy,
        batch_size_per_replica if global_batch is None else 1,  # strong scaling: checked below
        steps,
        warmup_steps,
        samples,
        seed,
        timeout,
        output,
    )
    if not isinstance(isolate, bool):
        raise ValueError(f"isolate must be True or False, got {isolate!r}.")
    per_replica = {n: batch_size_per_replica for n in devices}
    if global_batch is not None:
        global_batch = check_whole("global_batch", global_batch, 1)
        uneven = [n for n in devices if global_batch % n]
        if uneven:
            raise ValueError(
                f"global_batch={global_batch} does not divide over {uneven} device(s); pass a multiple of "
                f"{math.lcm(*devices)} so every device count gets whole per-replica batches."
            )
        per_replica = {n: global_batch // n for n in devices}
        if samples is not None and samples < global_batch:
            raise ValueError(f"samples={samples} cannot fill one global batch of {global_batch}; pass more.")
    from mgtutor.data import load_dataset

    # Find the data here, before any child starts: a missing or too small data set fails once, early.
    available = len(load_dataset(dataset, data_path, seed=seed).x_train)
    largest = max(n * per_replica[n] for n in devices)
    if (samples or available) > available or available < largest:
        raise ValueError(
            f"samples: the {dataset} training set here has {available} images; samples must lie between "
            f"{largest} (one global batch at {max(devices)} devices) and {available}, got {samples!r}."
        )
    settings = {
        "model": model,
        "strategy": strategy,
        "batch_size_per_replica": batch_size_per_replica,
        "global_batch": global_batch,
        "steps": steps,
        "warmup_steps": warmup_steps,
        "dataset": dataset,
        "data_path": None if data_path is None else str(data_path),
        "samples": samples,
        "seed": seed,
    }
    groups = (
        [(n, [p]) for n in devices for p in pipelines] if isolate else [(n, list(pipelines)) for n in devices]
    )
    start, runs = time.perf_counter(), []
    for n, group in groups:
        if verbose:
            print(
                f"[{time.perf_counter() - start:6.0f} s] {n} device(s): {', '.join(group)} ...",
                file=sys.stderr,
                flush=True,
            )
        child = {**settings, "batch_size_per_replica": per_replica[n]}
        child.pop("global_batch")
        runs.extend(_run_child(n, group, child, float(timeout)))
    runs = with_speedups(runs)
    results = {
        "settings": {
            "devices": list(devices),
            "pipelines": list(pipelines),
            "isolate": bool(isolate),
            **settings,
        },
        "pipeline_descriptions": {p: PIPELINE_DESCRIPTIONS[p] for p in pipelines},
        "runs": runs,
        "reading": read_scaling(runs),
        "elapsed_s": time.perf_counter() - start,
    }
    if output is not None:
        _write_outputs(results, Path(output))
    return results


# --------------------------------------------------------------------------- real GPUs


def amdahl_speedup(n_devices: float, parallel_fraction: float) -> float:
    """Amdahl's law: the speed-up on `n_devices` when `parallel_fraction` of the time divides over them."""
    if isinstance(n_devices, bool) or not isinstance(n_devices, numbers.Real) or not n_devices >= 1:
        raise ValueError(f"n_devices must be a number >= 1, got {n_devices!r}.")
    if (
        isinstance(parallel_fraction, bool)
        or not isinstance(parallel_fraction, numbers.Real)
        or not (0 <= parallel_fraction <= 1)
    ):
        raise ValueError(f"parallel_fraction must lie between 0 and 1, got {parallel_fraction!r}.")
    return 1.0 / ((1 - parallel_fraction) + parallel_fraction / n_devices)


def parallel_fraction(speedup: float, n_devices: float) -> float:
    """The parallel fraction for which Amdahl's law gives `speedup` on `n_devices` (inverse of it)."""
    if isinstance(n_devices, bool) or not isinstance(n_devices, numbers.Real) or not n_devices > 1:
        raise ValueError(f"n_devices must be a number > 1 (one device tells nothing), got {n_devices!r}.")
    if isinstance(speedup, bool) or not isinstance(speedup, numbers.Real) or not 1 <= speedup <= n_devices:
        raise ValueError(
            f"speedup must lie between 1 and n_devices={n_devices:g} for Amdahl's law, got {speedup!r}."
        )
    return (1 - 1 / speedup) / (1 - 1 / n_devices)


def projected_scaling(
    devices: Sequence[int] = (1, 2, 4, 8),
    epoch_seconds: Mapping[int, float] = SEED_001_EPOCH_SECONDS,
) -> list[dict[str, float]]:
    """Seconds per epoch, speed-up and efficiency on real GPUs, by Amdahl's law fitted to two measurements.

    `epoch_seconds` maps 1 and one other device count to measured seconds per
    epoch; the default is seed 001's 63 s (1 V100) and 16 s (4 V100s): speed-up
    3.94, efficiency 98 %, parallel fraction 0.9947. One fitted point cannot
    see a slow input pipeline or a saturated interconnect at larger counts, so
    treat the numbers beyond the measured count as an upper bound.
    """
    if len(epoch_seconds) != 2 or 1 not in epoch_seconds:
        raise ValueError(
            "epoch_seconds must map 1 and one other device count to seconds per epoch, e.g. "
            f"{{1: 63.0, 4: 16.0}}; got {dict(epoch_seconds)!r}."
        )
    (n_ref, ref_s), one_s = next((n, s) for n, s in epoch_seconds.items() if n != 1), epoch_seconds[1]
    if not all(isinstance(s, numbers.Real) and s > 0 for s in (one_s, ref_s)):
        raise ValueError(f"epoch_seconds must be positive numbers, got {dict(epoch_seconds)!r}.")
    fraction = parallel_fraction(one_s / ref_s, n_ref)
    projection = []
    for n in devices:
        check_whole("devices", n, 1)
        speedup = amdahl_speedup(n, fraction)
        projection.append(
            {
                "devices": n,
                "epoch_seconds": one_s / speedup,
                "speedup": speedup,
                "efficiency": speedup / n,
                "parallel_fraction": fraction,
            }
        )
    return projection


# --------------------------------------------------------------------------- command line


def _parser() -> argparse.ArgumentParser:
    from mgtutor.models import MODEL_BUILDERS

    description = (
        "Scaling study: training images/s, seconds per epoch, speed-up and efficiency on 1, 2, 4 ... "
        "devices, each device count in its own process, for each input pipeline. Writes scaling.json "
        "and scaling.png to --out and prints a table and a reading of the bottleneck. Uses real GPUs "
        "when there are enough; otherwise splits the machine into logical devices, which share the "
        "same hardware: there the study shows the overheads, and a speed-up of at most 1."
    )
    pipelines = [f"  {name:<10} {text}" for name, text in PIPELINE_DESCRIPTIONS.items()]
    example = (
        "example:\n  python -m mgtutor.bench --devices 1 2 4 --model seed_cnn "
        "--pipelines synthetic in_memory flow --out scaling/"
    )
    parser = argparse.ArgumentParser(
        prog="python -m mgtutor.bench",
        description=textwrap.fill(description, 79),
        epilog="\n".join(["pipelines:", *pipelines, "", example]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--devices",
        type=int,
        nargs="+",
        default=[1, 2, 4],
        metavar="N",
        help="device counts to measure (default: 1 2 4)",
    )
    parser.add_argument(
        "--model",
        default="seed_cnn",
        metavar="NAME",
        help=f"one of {', '.join(sorted(MODEL_BUILDERS))} (default: seed_cnn)",
    )
    parser.add_argument(
        "--pipelines",
        nargs="+",
        default=["synthetic", "in_memory"],
        metavar="P",
        help=f"input pipelines among {', '.join(PIPELINES)} (default: synthetic in_memory)",
    )
    parser.add_argument(
        "--strategy",
        default="mirrored",
        metavar="S",
        help="for 2+ devices: mirrored (MirroredStrategy) or towers (multi_gpu_model)",
    )
    parser.add_argument(
        "--batch-size-per-replica",
        type=int,
        default=32,
        metavar="B",
        help="images per device per step; the global batch is B x devices (default: 32)",
    )
    parser.add_argument("--steps", type=int, default=20, help="timed training steps (default: 20)")
    parser.add_argument(
        "--warmup-steps",
        type=int,
        default=3,
        help="untimed steps first, at least 1: the first traces the graph (default: 3)",
    )
    parser.add_argument("--dataset", default="cifar10", help="cifar10, mnist or synthetic (default: cifar10)")
    parser.add_argument(
        "--data-path",
        default=None,
        help="a data file or folder (default: MGTUTOR_DATA_DIR, the Keras cache, then a download)",
    )
    parser.add_argument("--samples", type=int, default=None, help="training images to use (default: all)")
    parser.add_argument(
        "--seed", type=int, default=0, help="weights, shuffling and augmentation (default: 0)"
    )
    parser.add_argument(
        "--isolate",
        action="store_true",
        help="one process per (devices, pipeline) instead of one per device count",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        help=f"seconds allowed per child process (default: {DEFAULT_TIMEOUT_S:g})",
    )
    parser.add_argument(
        "--out", default="scaling", help="folder for scaling.json and scaling.png (default: scaling)"
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # a child's configuration, as JSON
    return parser


def _worker(config_json: str) -> None:
    config = json.loads(config_json)
    runs = _measure_in_process(config.pop("n_devices"), config.pop("pipelines"), **config)
    print(_RESULT_MARK + json.dumps(runs), flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """The command line: validate everything, run the study, print the table and reading."""
    from mgtutor.data import DataError

    parser = _parser()
    args = parser.parse_args(argv)
    if args.worker is not None:
        _worker(args.worker)
        return 0
    names = {
        "devices": "--devices",
        "pipelines": "--pipelines",
        "model": "--model",
        "strategy": "--strategy",
        "batch_size_per_replica": "--batch-size-per-replica",
        "steps": "--steps",
        "warmup_steps": "--warmup-steps",
        "samples": "--samples",
        "seed": "--seed",
        "timeout": "--timeout",
        "output": "--out",
        "dataset": "--dataset",
        "n_devices": "--devices",
    }
    try:
        results = scaling_study(
            args.devices,
            args.pipelines,
            model=args.model,
            strategy=args.strategy,
            batch_size_per_replica=args.batch_size_per_replica,
            steps=args.steps,
            warmup_steps=args.warmup_steps,
            dataset=args.dataset,
            data_path=args.data_path,
            samples=args.samples,
            seed=args.seed,
            isolate=args.isolate,
            output=args.out,
            timeout=args.timeout,
        )
    except (ValueError, DataError) as err:  # bad arguments or no data: found before any child starts
        message = str(err)
        for name, flag in names.items():
            message = re.sub(rf"^{name}\b", flag, message)
        parser.error(message)
    except BenchmarkError as err:
        print(f"python -m mgtutor.bench: {err}", file=sys.stderr)
        return 1
    print(format_table(results["runs"]))
    print()
    for line in results["reading"]["lines"]:
        print(f"- {line}")
    print(f"\nwrote {results['files']['json']} and {results['files']['plot']} ({results['elapsed_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
