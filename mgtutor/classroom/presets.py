"""Presets for `make run PRESET=name`: named per-lesson parameter overrides, each with its reason.

A preset sits above the series' own defaults (`runner.SERIES_DEFAULTS`) and below the command line:
a parameter given with ``-p`` (or ``make run NAME=value``) always wins. `make check` offers the
low-memory preset where the laptop has less memory available than the series needs at classroom
defaults; `make run` takes the slow-laptop preset itself where its reference step says the defaults
would overrun the slot (`estimate.choose_preset`), unless PRESET names one (``none``: the defaults).
It imports nothing heavy.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mgtutor.classroom.limits import check_lessons

LOW_MEMORY = "low-memory"
# The stated ceiling of the low-memory preset: each notebook's peak (its kernel and every process it
# starts, as `make run` samples it: `memory.ChildMemory`), in the MiB of summary.json's peak_rss_mb.
# Lesson 14 peaks while both workers hold the link's largest message: with LINK_MAX_MB 16 it measured
# 2,913 MiB alone on a quiet 2-core Xeon, 3,421 under make test-all's load, 3,076 alone on the AVX2-only
# EPYC; with 8 there, 2,871 (13 at the preset: 2,277). One run each: an aim, not yet a ceiling any test
# can hold (issue 55).
LOW_MEMORY_PEAK_MB = 3000
SLOW_LAPTOP = "slow-laptop"
# PRESET=none: the classroom defaults whatever the laptop (`make run` sizes itself otherwise: `estimate`).
NONE = "none"

# The slow-laptop preset's smaller training sets: a fifth of the defaults' steps; every lesson still learns.
_FEWER_IMAGES = {
    "TRAIN_SAMPLES": (1024, "16 steps an epoch at a global batch of 64, as many in all as the tests' runs "
                            "that learn"),
    "TEST_SAMPLES": (512, "an accuracy's noise over 512 images is still below the gaps the lesson reads"),
}
# preset -> lesson (its notebook's stem) -> parameter -> (value, why the lesson keeps its point).
PRESETS: dict[str, dict[str, dict[str, tuple[Any, str]]]] = {
    LOW_MEMORY: {
        "10_multi_worker": {
            "TRAIN_SAMPLES": (2048, "each worker holds a copy; kill, resume and shards are as before"),
        },
        "13_sharding": {
            "N_DEVICES": (4, "each stage still splits its arrays N ways; half the copies of the whole model"),
            "WIDTH": (512, "a narrower model: every part is still counted to the byte, every stage compared"),
        },
        "14_pinned_workers": {
            "BATCH_SIZE_PER_REPLICA": (64, "weak scaling still doubles the global batch with the workers"),
            "LINK_MAX_MB": (8, "the link's sizes still pass the 5 MB gradient its prediction reads"),
            "TRAIN_SAMPLES": (1500, "each training worker loads and holds them; 3 epochs still learn"),
            "TARGET_ACCURACY": (0.3, "reached within 3 epochs of 1,500 images: the jobs' minutes compare"),
        },
        "15_when_it_breaks": {
            "OOM_BATCH": (192, "still more images than fit in MEMORY_BUDGET_MB: the drill still runs out"),
            "TRAIN_SAMPLES": (512, "each worker's input pipeline holds them; every drill needs at most 256"),
        },
    },
    # `make run` picks this one itself where its reference step says the classroom defaults would overrun
    # the slot (`choose_preset`). Sized by its run on the AVX2-only EPYC (`estimate.REFERENCE`), where it
    # fits the slot: fewer images, repeats and timed steps; every lesson still trains, times and compares
    # what it did at its defaults.
    SLOW_LAPTOP: {
        "02_build_cnn": _FEWER_IMAGES,
        "03_data_parallel_step": _FEWER_IMAGES,
        "04_multi_gpu_wrapping": _FEWER_IMAGES,
        "05_batchnorm_and_replica_state": {
            "TRAIN_SAMPLES": (1024, "16 steps of 2 x 32 an epoch: the replicas' statistics still drift"),
            "TEST_SAMPLES": (256, "the routes are still tested on the same images"),
        },
        "06_augmented_training": {**_FEWER_IMAGES,
            "PIPELINE_BATCHES": (8, "the slow reader's stall shows in any number of batches")},  # fmt: skip
        "07_save_and_restore": _FEWER_IMAGES,
        "08_scaling_study": {**_FEWER_IMAGES,
            "BENCH_STEPS": (3, "steps a block: the rate of a warm step"),
            "SWEEP": ([16, 32, 64], "three batch sizes still draw the curve's bend"),
            "STUDY_SAMPLES": (256, "the scaling study still times every device count on them")},  # fmt: skip
        "09_parameter_averaging": {
            "TRAIN_SAMPLES": (2048, "every frequency still gets its rounds (30 between evaluations)"),
            "EVALS": (3, "three evaluations a curve: its start, middle and end"),
        },
        "10_multi_worker": _FEWER_IMAGES,
        "11_where_time_goes": {**_FEWER_IMAGES,
            "EPOCHS": (2, "accumulation's parity and the accuracy gap need two epochs, not three"),
            "MIXED_TRAIN_SAMPLES": (256, "bfloat16 and float32 still train the same images to compare "
                                         "(without bfloat16 instructions, at a tenth of float32's pace)"),
            "TIMING_STEPS": (3, "steps a timing: warm steps are alike")},  # fmt: skip
        "12_keras_on_jax": {**_FEWER_IMAGES,
            "TIMING_CALLS": (3, "calls a timing: warm calls are alike")},  # fmt: skip
        "14_pinned_workers": {
            "BENCH_STEPS": (3, "steps a block: the workers' rate, not their start-up, is timed"),
            "LINK_MAX_MB": (16, "the link's sizes still pass the gradient its prediction reads"),
            "TRAIN_SAMPLES": (1500, "3 epochs of 1,500 images still reach the target"),
            "TARGET_ACCURACY": (0.3, "reached within 3 epochs of 1,500 images: the jobs' minutes compare"),
        },
        "15_when_it_breaks": {
            "OOM_BATCH": (192, "still more images than fit in MEMORY_BUDGET_MB: the drill still runs out"),
            "TRAIN_SAMPLES": (512, "every drill needs at most 256 images"),
        },
        "16_capstone": {
            "MINUTES": (0.5, "its training is planned to the budget from timed batches: each size and "
                             "lookahead still run"),
        },
    },
}


# preset -> lesson -> why the preset leaves it at its size (the guide's reason table prints both tables).
KEPT: dict[str, dict[str, str]] = {
    SLOW_LAPTOP: {
        "00_environment": "no training: the devices and their check, seconds of start-up",
        "01_prepare_data": "no training: the data loaded, split and checked once",
        "13_sharding": "XLA's compiles of each layout it compares are its time, not its steps; it times "
                       "each the fewest times already (REPEATS 2)",
        "17_to_a_cluster": "starting processes is its time (1 process, 2 workers, a killed worker resumed, "
                           "the link) and each start is what it shows; its steps take seconds",
        "18_pipeline_parallelism": "starting a worker per stage and XLA's compiles of the table's "
                                   "layouts are its time; its steps are milliseconds, each timed the "
                                   "fewest times (REPEATS 2)",
    },
}


def _known() -> str:
    return ", ".join(sorted(PRESETS))


def preset_overrides(name: str) -> dict[str, dict[str, Any]]:
    """The preset's overrides, lesson by lesson; a ValueError naming the known presets for any other name."""
    if name == NONE:
        return {}
    if name not in PRESETS:
        raise ValueError(f"PRESET={name!r} is not a preset; known: {_known()} ({NONE}: the classroom "
                         "defaults, not sized to the laptop).")
    return {lesson: {param: value for param, (value, _) in params.items()}
            for lesson, params in PRESETS[name].items()}  # fmt: skip


def apply_preset(name: str, plan: dict[Path, dict], command_line: dict[str, Any],
                 defaults: dict[Path, dict]) -> dict[Path, dict]:  # fmt: skip
    """Each notebook's overrides in `plan` with the preset's for its lesson added, except where the command
    line named the parameter; checked against each lesson's limits as `plan` was. A ValueError before any
    work for an unknown preset, a parameter the lesson lacks, or a mix of preset and command line a lesson
    refuses (the message names the preset's values, which the learner did not type)."""
    overrides = preset_overrides(name)
    applied = {}  # notebook -> the preset's values it takes
    for notebook in plan:
        own = overrides.get(notebook.stem, {})
        unknown = sorted(set(own) - set(defaults[notebook]))
        if unknown:
            raise ValueError(f"the {name} preset sets {unknown} for {notebook.name}, whose parameters cell "
                             "has no such parameter: mgtutor/classroom/presets.py is out of date.")
        applied[notebook] = {k: v for k, v in own.items() if k not in command_line}
    try:
        return check_lessons({nb: {**planned, **applied[nb]} for nb, planned in plan.items()}, defaults)
    except ValueError as err:
        used = {nb.stem: values for nb, values in applied.items() if values}
        raise ValueError(f"{err}\n(with the {name} preset's {used}; a parameter given on the command line "
                         "replaces the preset's)") from None


def reason_table(name: str) -> str:
    """The preset as a Markdown table for the guide: each lesson's values and why it keeps its point,
    then each lesson it leaves at its size and why."""
    rows = ["| lesson | set to | why the lesson keeps its point |", "| --- | --- | --- |"]
    for lesson, params in PRESETS[name].items():
        values = ", ".join(f"`{param} = {value!r}`" for param, (value, _) in params.items())
        rows.append(f"| {lesson[:2]} | {values} | {'; '.join(why for _, why in params.values())} |")
    rows += [f"| {lesson[:2]} | its size | {why} |" for lesson, why in KEPT.get(name, {}).items()]
    return "\n".join(rows)

