"""The scaling study: `scaling_study` and ``python -m mgtutor.speed.study --devices 1 2 4``.

Each device count runs `mgtutor.speed.measure.measure_training` in its own child process (a child is
``python -m mgtutor.speed.study --worker CONFIG_JSON``); speed-up, efficiency and the reading come from
`mgtutor.speed.reading`. This process never imports TensorFlow.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import textwrap
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from mgtutor._checks import check_whole, is_real, is_whole
from mgtutor.speed.measure import (
    PIPELINE_DESCRIPTIONS,
    PIPELINES,
    BenchmarkError,
    _check_choice,
    _check_run_args,
    _measure_in_process,
)
from mgtutor.speed.reading import format_table, read_scaling, with_speedups

DEFAULT_TIMEOUT_S = 1800.0
RESULTS_FILE = "scaling.json"
PLOT_FILE = "scaling.png"


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
    if not is_real(timeout) or not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds per child process, got {timeout!r}.")
    if output is not None and Path(output).exists() and not Path(output).is_dir():
        raise ValueError(
            f"output {str(output)!r} is a file; pass a folder for {RESULTS_FILE} and {PLOT_FILE}."
        )
    return devices, pipelines


def _child_env() -> dict[str, str]:
    package_root = str(Path(__file__).resolve().parents[1])
    path = os.environ.get("PYTHONPATH", "")
    # The children must import this same mgtutor, installed or not.
    return {"PYTHONPATH": package_root + (os.pathsep + path if path else "")}


def _run_child(n: int, pipelines: Sequence[str], settings: Mapping[str, Any], timeout: float) -> list[dict]:
    from mgtutor.processes import ScriptError, run_script

    config = {"n_devices": n, "pipelines": list(pipelines), **settings}
    command = [sys.executable, "-m", "mgtutor.speed.study", "--worker", json.dumps(config)]
    what = f"the {n}-device run ({', '.join(pipelines)})"
    try:
        done = run_script(command, env=_child_env(), timeout=timeout, stream=False, check=False)
    except ScriptError as err:  # with check=False, only a timeout
        fix = "pass a larger timeout or fewer steps"
        raise BenchmarkError(f"{what} did not finish within timeout={timeout:g} s; {fix}.\n{err}") from None
    tail = "\n".join(done.tail)
    if done.returncode != 0:
        raise BenchmarkError(f"{what} failed (exit code {done.returncode}):\n{tail}")
    if done.result is None:
        raise BenchmarkError(f"{what} reported no result:\n{tail}")
    return done.result["runs"]


def _write_outputs(results: dict[str, Any], output: Path) -> dict[str, str]:
    from mgtutor.files import atomic_write
    from mgtutor.plots import plot_scaling

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
    ``global_batch // n``. Returns ``{"settings", "runs", "reading", "table", "elapsed_s"}``
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
        "table": format_table(runs),
        "elapsed_s": time.perf_counter() - start,
    }
    if output is not None:
        _write_outputs(results, Path(output))
    return results


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
        "example:\n  python -m mgtutor.speed.study --devices 1 2 4 --model seed_cnn "
        "--pipelines synthetic in_memory flow --out scaling/"
    )
    parser = argparse.ArgumentParser(
        prog="python -m mgtutor.speed.study",
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
    from mgtutor.processes import report_result

    config = json.loads(config_json)
    report_result({"runs": _measure_in_process(config.pop("n_devices"), config.pop("pipelines"), **config)})


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
        print(f"python -m mgtutor.speed.study: {err}", file=sys.stderr)
        return 1
    print(results["table"])
    print()
    for line in results["reading"]["lines"]:
        print(f"- {line}")
    print(f"\nwrote {results['files']['json']} and {results['files']['plot']} ({results['elapsed_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
