"""Presets for `make run PRESET=name`: named per-lesson parameter overrides, each with its reason.

A preset sits above the series' own defaults (`runner.SERIES_DEFAULTS`) and below the command line:
a parameter given with ``-p`` (or ``make run NAME=value``) always wins. `make check` offers the
low-memory preset where the laptop has less memory available than the series needs at classroom
defaults. It imports nothing heavy.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mgtutor.classroom.limits import check_lessons

LOW_MEMORY = "low-memory"
# The stated ceiling of the low-memory preset: each notebook's peak (its kernel and every process it
# starts, as `make run` samples it: `memory.ChildMemory`), in the MiB of summary.json's peak_rss_mb.
# Lesson 14 measured 2,913 MiB alone on a quiet 2-core Xeon, 3,421 under make test-all's load: an aim,
# not yet a ceiling any test can hold (issue 55).
LOW_MEMORY_PEAK_MB = 3000

# preset -> lesson (its notebook's stem) -> parameter -> (value, why the lesson keeps its point).
PRESETS: dict[str, dict[str, dict[str, tuple[Any, str]]]] = {
    LOW_MEMORY: {
        "10_multi_worker": {
            "TRAIN_SAMPLES": (2048, "each worker holds a copy; kill, resume and shards are as before"),
        },
        "13_sharding": {
            "N_DEVICES": (4, "each stage still splits its arrays N ways; half the copies of the whole model"),
            "TP_DEVICES": (2, "a 2 x 2 mesh: tensor parallelism beside a batch axis, as on 8 devices"),
            "WIDTH": (512, "the rates are per parameter and per activation byte: any width measures them"),
            "WIDTHS": ([512, 1024, 2048], "the table still runs from all fit to all too big"),
            "BUDGET_MIB": (80, "between the widths' sizes on 4 devices: the middle width splits verdicts"),
        },
        "14_pinned_workers": {
            "BATCH_SIZE_PER_REPLICA": (64, "weak scaling still doubles the global batch with the workers"),
            "LINK_MAX_MB": (16, "the link's sizes still pass the 5 MB gradient its prediction reads"),
            "TRAIN_SAMPLES": (1500, "each training worker loads and holds them; 3 epochs still learn"),
            "TARGET_ACCURACY": (0.3, "reached within 3 epochs of 1,500 images: the jobs' minutes compare"),
        },
        "15_when_it_breaks": {
            "OOM_BATCH": (192, "still more images than fit in MEMORY_BUDGET_MB: the drill still runs out"),
            "TRAIN_SAMPLES": (512, "each worker's input pipeline holds them; every drill needs at most 256"),
        },
        "16_capstone": {
            "XLA": (False, "the race still times float32 against bfloat16; XLA's compiles held the most"),
        },
    },
}


def _known() -> str:
    return ", ".join(sorted(PRESETS))


def preset_overrides(name: str) -> dict[str, dict[str, Any]]:
    """The preset's overrides, lesson by lesson; a ValueError naming the known presets for any other name."""
    if name not in PRESETS:
        raise ValueError(f"PRESET={name!r} is not a preset; known: {_known()} (none: classroom defaults).")
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

