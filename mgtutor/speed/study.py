"""The scaling study: `scaling_study` and ``python -m mgtutor.speed.study --devices 1 2 4``.

Its options are the fields of `StudyArgs`, written once (its signature and the command line's defaults
come from them), and checked once, here, under their own names. Each device count
then runs ``python -m mgtutor.speed.measure`` in a child process of its own, which reports its
`Run`s; `mgtutor.speed.reading` reads them and `mgtutor.speed.figure` draws the reading. This
process never imports TensorFlow.
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
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from mgtutor.speed.measure import (
    PIPELINE_DESCRIPTIONS,
    PIPELINES,
    BenchmarkError,
    Run,
    check_choice,
    check_run_settings,
)
from mgtutor.speed.reading import Reading, read_scaling
from mgtutor.support.checks import check_whole, is_real, is_whole
from mgtutor.support.options import takes_options

DEFAULT_TIMEOUT_S = 1800.0
# The options the study itself uses; each child measures with all the others (`StudyArgs.child_settings`).
STUDY_ONLY = ("devices", "pipelines", "global_batch", "isolate", "output", "timeout")
RESULTS_FILE = "scaling.json"
PLOT_FILE = "scaling.png"


# --------------------------------------------------------------------------- the arguments


@dataclass(frozen=True, kw_only=True)
class StudyArgs:
    """`scaling_study`'s options, written once: its signature and the command line's defaults come from
    these fields. As a caller passes them they are unchecked; `check_study` returns them checked
    (`devices` and `pipelines` tuples, `data_path` a str, `output` a `Path`, `timeout` a float).
    Weak scaling (no `global_batch`) keeps `batch_size_per_replica` on every device count; strong
    scaling gives each of n devices ``global_batch // n``."""

    devices: Sequence[int] = (1, 2, 4)
    pipelines: Sequence[str] = ("synthetic", "in_memory")
    model: str = "seed_cnn"
    strategy: str = "mirrored"
    batch_size_per_replica: int = 32
    global_batch: int | None = None
    steps: int = 20
    warmup_steps: int = 3
    repeats: int = 3
    dataset: str = "cifar10"
    data_path: str | os.PathLike | None = None
    samples: int | None = None
    seed: int = 0
    isolate: bool = False
    output: str | os.PathLike | None = None
    timeout: float = DEFAULT_TIMEOUT_S

    def per_replica(self, n: int) -> int:
        """Images per device per step on `n` devices."""
        return self.batch_size_per_replica if self.global_batch is None else self.global_batch // n

    def child_settings(self, n: int) -> dict[str, Any]:
        """What the child measuring `n` devices needs, as `measure_training` names it: every option but
        those of the study itself (`STUDY_ONLY`), with the per-replica batch of `n` devices."""
        settings = {name: getattr(self, name) for name in self.__dataclass_fields__ if name not in STUDY_ONLY}
        return {**settings, "batch_size_per_replica": self.per_replica(n)}

    def as_dict(self) -> dict[str, Any]:
        return {
            "devices": list(self.devices), "pipelines": list(self.pipelines), "isolate": self.isolate,
            **self.child_settings(self.devices[0]), "batch_size_per_replica": self.batch_size_per_replica,
            "global_batch": self.global_batch,
        }  # fmt: skip


def _check_counts(devices: Any) -> tuple[int, ...]:
    if isinstance(devices, str) or not isinstance(devices, Iterable):
        raise ValueError(f"devices must be a list of device counts such as (1, 2, 4), got {devices!r}.")
    devices = tuple(devices)
    if not devices or not all(is_whole(n) and n >= 1 for n in devices):
        raise ValueError(f"devices must be whole numbers >= 1, such as (1, 2, 4); got {devices!r}.")
    if len(set(devices)) != len(devices):
        raise ValueError(f"devices lists a count twice: {devices!r}; give each count once.")
    return devices


def _check_pipelines(pipelines: Any) -> tuple[str, ...]:
    if isinstance(pipelines, str) or not isinstance(pipelines, Iterable):
        raise ValueError(f"pipelines must be a list drawn from {', '.join(PIPELINES)}; got {pipelines!r}.")
    pipelines = tuple(pipelines)
    if not pipelines or len(set(pipelines)) != len(pipelines):
        raise ValueError(
            f"pipelines must name each of {', '.join(PIPELINES)} at most once; got {pipelines!r}."
        )
    for pipeline in pipelines:
        check_choice("pipelines", pipeline, PIPELINES)
    return pipelines


def _check_batches(args: StudyArgs) -> None:
    """Whole per-replica batches on every count, and enough samples for the largest global batch."""
    if args.global_batch is None:
        check_whole("batch_size_per_replica", args.batch_size_per_replica, 1)
    else:
        check_whole("global_batch", args.global_batch, 1)
        uneven = [n for n in args.devices if args.global_batch % n]
        if uneven:
            raise ValueError(
                f"global_batch={args.global_batch} does not divide over {uneven} device(s); pass a multiple "
                f"of {math.lcm(*args.devices)} so every device count gets whole per-replica batches."
            )
    most = max(args.devices)
    largest = max(n * args.per_replica(n) for n in args.devices)
    if args.samples is not None and args.samples < largest:
        raise ValueError(
            f"samples={args.samples} cannot fill one global batch of {largest} ({args.per_replica(most)} per "
            f"replica x {most} devices); pass samples >= {largest}."
        )


def _check_data(args: StudyArgs) -> None:
    """The data found here, before any child starts: a missing or too small data set fails once, early."""
    from mgtutor.data import load_dataset

    available = len(load_dataset(args.dataset, args.data_path, seed=args.seed).x_train)
    largest = max(n * args.per_replica(n) for n in args.devices)
    if (args.samples or available) > available or available < largest:
        raise ValueError(
            f"samples: the {args.dataset} training set here has {available} images; samples must lie "
            f"between {largest} (one global batch at {max(args.devices)} devices) and {available}, got "
            f"{args.samples!r}."
        )


def check_study(asked: StudyArgs) -> StudyArgs:
    """`scaling_study`'s options, each checked under its own name before any child starts."""
    a = asked
    devices, pipelines = _check_counts(a.devices), _check_pipelines(a.pipelines)
    check_run_settings(
        model=a.model, strategy=a.strategy, steps=a.steps, warmup_steps=a.warmup_steps, samples=a.samples,
        seed=a.seed, repeats=a.repeats,
    )  # fmt: skip
    if not is_real(a.timeout) or not a.timeout > 0:
        raise ValueError(
            f"timeout must be a positive number of seconds per child process, got {a.timeout!r}."
        )
    if a.output is not None and Path(a.output).exists() and not Path(a.output).is_dir():
        raise ValueError(
            f"output {str(a.output)!r} is a file; pass a folder for {RESULTS_FILE} and {PLOT_FILE}."
        )
    if not isinstance(a.isolate, bool):
        raise ValueError(f"isolate must be True or False, got {a.isolate!r}.")
    args = replace(
        a, devices=devices, pipelines=pipelines, data_path=None if a.data_path is None else str(a.data_path),
        output=None if a.output is None else Path(a.output), timeout=float(a.timeout),
    )  # fmt: skip
    _check_batches(args)
    _check_data(args)
    return args


# --------------------------------------------------------------------------- the study


@dataclass(frozen=True, kw_only=True)
class Study:
    """A finished study: its arguments, every `Run`, their `Reading`, and the files written."""

    args: StudyArgs
    runs: tuple[Run, ...]
    reading: Reading
    elapsed_s: float
    files: dict[str, str] | None = None

    @property
    def table(self) -> str:
        return self.reading.table()

    def as_dict(self) -> dict[str, Any]:
        """What ``scaling.json`` holds: the runs with their speed-ups, the reading, the table."""
        return {
            "settings": self.args.as_dict(),
            "pipeline_descriptions": {p: PIPELINE_DESCRIPTIONS[p] for p in self.args.pipelines},
            "runs": [point.as_dict() for point in self.reading.points], "reading": self.reading.as_dict(),
            "table": self.table, "elapsed_s": self.elapsed_s, "files": self.files,
        }  # fmt: skip


def _child_env() -> dict[str, str]:
    package_root = str(Path(__file__).resolve().parents[2])
    path = os.environ.get("PYTHONPATH", "")
    # The children must import this same mgtutor, installed or not.
    return {"PYTHONPATH": package_root + (os.pathsep + path if path else "")}


def _run_child(n: int, pipelines: Sequence[str], settings: Mapping[str, Any], timeout: float) -> list[Run]:
    from mgtutor.support.processes import ScriptError, run_script

    config = {"n_devices": n, "pipelines": list(pipelines), **settings}
    command = [sys.executable, "-m", "mgtutor.speed.measure", json.dumps(config)]
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
    return [Run.from_dict(run) for run in done.result["runs"]]


def _write_outputs(study: Study, output: Path) -> Study:
    from mgtutor.speed.figure import plot_scaling
    from mgtutor.support.files import atomic_write

    output.mkdir(parents=True, exist_ok=True)
    study = replace(study, files={"json": str(output / RESULTS_FILE), "plot": str(output / PLOT_FILE)})
    with atomic_write(study.files["json"], ".json") as temp:
        temp.write_text(json.dumps(study.as_dict(), indent=2) + "\n")
    figure = plot_scaling(study)
    try:
        with atomic_write(study.files["plot"], ".png") as temp:
            figure.savefig(temp, dpi=120)
    finally:
        import matplotlib.pyplot as plt

        plt.close(figure)  # the caller shows it with plot_scaling(study) if wanted
    return study


@takes_options(StudyArgs, positional=("devices", "pipelines"))
def scaling_study(*, verbose: bool = True, reuse: Study | None = None, **options: Any) -> Study:
    """Training throughput on each device count of `devices`, with each input pipeline; speed-up and reading.

    Each device count runs in its own child process (`measure_training` there),
    one after another so they do not compete for the machine; its pipelines run
    in that process one after another, each on a freshly built model, which keeps
    the synthetic and real-input runs it compares close in time. ``isolate=True``
    gives every (devices, pipeline) its own process instead. `timeout` is
    seconds per child. Weak scaling (the default) keeps `batch_size_per_replica`,
    so the global batch grows with the devices; strong scaling, with
    `global_batch`, keeps the global batch and gives each of n devices
    ``global_batch // n``. Each run times `repeats` blocks of `steps` steps: its
    images/s is their median, and the slowest and fastest block give its spread
    (within one process; the processes run one after another). Returns a
    `Study`: ``.runs``, ``.reading`` (speed-ups in ``.reading.points``,
    sentences in ``.reading.lines``), ``.table``; with `output`, also writes
    ``scaling.json`` and ``scaling.png`` there, atomically. ``reuse=`` an earlier
    `Study`: a device count whose child would measure exactly what one of its
    children measured (the same settings, per-replica batch included, and
    pipelines) takes those runs instead of measuring them again.
    """
    args = check_study(StudyArgs(**options))
    groups = [(n, [p]) for n in args.devices for p in args.pipelines] if args.isolate else [
        (n, list(args.pipelines)) for n in args.devices
    ]
    start, runs, reused = time.perf_counter(), [], []
    for n, group in groups:
        earlier = _measured_before(reuse, n, group, args.child_settings(n))
        if verbose:
            clock = f"[{time.perf_counter() - start:6.0f} s]"
            done = " (measured by the earlier study)" if earlier else " ..."
            print(f"{clock} {n} device(s): {', '.join(group)}{done}", file=sys.stderr, flush=True)
        runs.extend(earlier or _run_child(n, group, args.child_settings(n), args.timeout))
        reused.extend(earlier)
    elapsed = time.perf_counter() - start
    study = Study(args=args, runs=tuple(runs), reading=read_scaling(runs, reused), elapsed_s=elapsed)
    return study if args.output is None else _write_outputs(study, args.output)


def _measured_before(reuse: Study | None, n: int, group: Sequence[str], settings: dict) -> list[Run]:
    """The runs of `reuse` that measured `group` on `n` devices with the same child settings, else []."""
    if reuse is None:
        return []
    if not isinstance(reuse, Study):
        raise TypeError(f"reuse must be a Study (what scaling_study returns), got {type(reuse).__name__}.")
    if n not in reuse.args.devices or reuse.args.child_settings(n) != settings:
        return []
    found = [run for run in reuse.runs if run.devices == n and run.pipeline in group]
    return found if sorted(run.pipeline for run in found) == sorted(group) else []


# --------------------------------------------------------------------------- command line


def _add_run_flags(parser: argparse.ArgumentParser) -> None:
    """What each measurement does: the model, its input, its strategy, its batch and steps."""
    from mgtutor.models import MODEL_BUILDERS

    add, d = parser.add_argument, StudyArgs()  # the defaults are scaling_study's
    # fmt: off
    add("--devices", type=int, nargs="+", default=list(d.devices), metavar="N",
        help=f"device counts to measure (default: {' '.join(map(str, d.devices))})")
    add("--model", default=d.model, metavar="NAME",
        help=f"one of {', '.join(sorted(MODEL_BUILDERS))} (default: %(default)s)")
    add("--pipelines", nargs="+", default=list(d.pipelines), metavar="P",
        help=f"input pipelines among {', '.join(PIPELINES)} (default: {' '.join(d.pipelines)})")
    add("--strategy", default=d.strategy, metavar="S",
        help="for 2+ devices: mirrored (MirroredStrategy) or towers (multi_gpu_model)")
    add("--batch-size-per-replica", type=int, default=d.batch_size_per_replica, metavar="B",
        help="images per device per step; the global batch is B x devices (default: %(default)s)")
    add("--steps", type=int, default=d.steps, help="timed training steps per repeat (default: %(default)s)")
    add("--repeats", type=int, default=d.repeats,
        help="blocks of --steps timed one after another: median and spread (default: %(default)s)")
    add("--warmup-steps", type=int, default=d.warmup_steps,
        help="untimed steps first, at least 1: the first traces the graph (default: %(default)s)")
    # fmt: on


def _add_study_flags(parser: argparse.ArgumentParser) -> None:
    """Where the data comes from, how the processes are laid out, where the results go."""
    add, d = parser.add_argument, StudyArgs()
    add("--dataset", default=d.dataset, help="cifar10, mnist or synthetic (default: %(default)s)")
    add("--data-path", default=d.data_path,
        help="a data file or folder (default: MGTUTOR_DATA_DIR, the Keras cache, then a download)")
    add("--samples", type=int, default=d.samples, help="training images to use (default: all)")
    add("--seed", type=int, default=d.seed, help="weights, shuffling and augmentation (default: %(default)s)")
    add("--isolate", action="store_true",
        help="one process per (devices, pipeline) instead of one per device count")
    add("--timeout", type=float, default=d.timeout,
        help="seconds allowed per child process (default: %(default)g)")
    add("--out", default="scaling",
        help="folder for scaling.json and scaling.png (default: scaling)")  # fmt: skip


def _parser() -> argparse.ArgumentParser:
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
    _add_run_flags(parser)
    _add_study_flags(parser)
    return parser


# A refused argument is named as the command line spells it.
_FLAGS = {
    "devices": "--devices", "pipelines": "--pipelines", "model": "--model", "strategy": "--strategy",
    "batch_size_per_replica": "--batch-size-per-replica", "steps": "--steps",
    "repeats": "--repeats", "warmup_steps": "--warmup-steps", "samples": "--samples", "seed": "--seed",
    "timeout": "--timeout",
    "output": "--out", "dataset": "--dataset",
}  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    """The command line: validate everything, run the study, print the table and reading."""
    from mgtutor.data import DataError

    parser = _parser()
    args = parser.parse_args(argv)
    try:
        flags = {name: getattr(args, name) for name in StudyArgs.__dataclass_fields__ if hasattr(args, name)}
        study = scaling_study(**flags, output=args.out)
    except (ValueError, DataError) as err:  # bad arguments or no data: found before any child starts
        message = str(err)
        for name, flag in _FLAGS.items():
            message = re.sub(rf"^{name}\b", flag, message)
        parser.error(message)
    except BenchmarkError as err:
        print(f"python -m mgtutor.speed.study: {err}", file=sys.stderr)
        return 1
    print(study.table)
    print()
    for line in study.reading.lines:
        print(f"- {line}")
    print(f"\nwrote {study.files['json']} and {study.files['plot']} ({study.elapsed_s:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
