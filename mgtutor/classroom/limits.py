"""What each lesson needs of its parameters, in one place: the notebook's first cells and `make run` read it.

`lesson_plan(lesson, parameters)` refuses values a lesson cannot honour (one ValueError naming each
parameter, the minimum and why) and returns the step counts it derives from them (07's save and kill steps,
09's rounds, 10's checkpoint and kill steps). It imports nothing heavy: `make run` checks every lesson first.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from mgtutor.classroom.limit_checks import (
    _at_least,
    _capstone_arithmetic,
    _capstone_sets,
    _common,
    _enough_for,
    _memory_drill,
    _multiple_of_devices,
    _no_empty_replica,
    _parity,
    _rate_per_image,
    _study_samples,
    _whole,
    _wholes,
    _within,
    image_shape,
)
from mgtutor.support.checks import is_real, is_whole
from mgtutor.training.pinning import usable_cores

Plan = dict[str, Any]
_RULES: dict[str, Callable[[Mapping[str, Any], list[str]], Plan]] = {}


def _lesson(stem: str) -> Callable:
    def register(function: Callable) -> Callable:
        _RULES[stem] = function
        return function

    return register


_REPLICAS = "the lesson compares replicas, so it needs at least two"
# How far apart two test accuracies of one short recipe may land when only float rounding (which Adam
# amplifies) and dropout's masks differ: the one limit the lessons read an accuracy gap against.
ACCURACY_GAP_LIMIT = 0.05
# The least TIMEOUT a lesson takes: below it, a child process that starts TensorFlow is stopped before it
# trains.
MIN_TIMEOUT = 30
_TOWERS = "multi_gpu_model builds one tower per device and needs at least two"


@_lesson("00_environment")
def _(p: Mapping[str, Any], problems: list[str]) -> Plan:
    _whole(p, "N_DEVICES", 1, "the number of devices", problems)
    return {}


@_lesson("01_prepare_data")
def _(p: Mapping[str, Any], problems: list[str]) -> Plan:
    if batch := _common(p, problems, fits=False):  # a whole global batch split (1 image: [1, 0])
        _enough_for(p, batch, 1, "the split of a global batch over the replicas", problems)
    return {}


@_lesson("02_build_cnn")
def _(p: Mapping[str, Any], problems: list[str]) -> Plan:
    _common(p, problems)
    _whole(p, "BATCH_SIZE", 1, "images per step", problems)
    return {}


@_lesson("03_data_parallel_step")
def _(p: Mapping[str, Any], problems: list[str]) -> Plan:
    batch = _common(p, problems, at_least=2, why=_REPLICAS)
    if batch:
        _enough_for(p, batch, 1, "the by-hand step", problems)
    return {"accuracy_gap_limit": ACCURACY_GAP_LIMIT}


@_lesson("04_multi_gpu_wrapping")
def _(p: Mapping[str, Any], problems: list[str]) -> Plan:
    batch = _common(p, problems, at_least=2, why=_TOWERS)
    _parity(p, batch, problems)
    if batch:  # its evaluation's last batch: partial, an image or more a replica, not split evenly
        _at_least(int(p["BATCH_SIZE_PER_REPLICA"]), 2, "BATCH_SIZE_PER_REPLICA must be >= {needed}: the "
                  "evaluation's hard case is a last batch with more images than N_DEVICES.", problems)
    return {"accuracy_gap_limit": ACCURACY_GAP_LIMIT}


@_lesson("05_batchnorm_and_replica_state")
def _(p: Mapping[str, Any], problems: list[str]) -> Plan:
    _parity(p, _common(p, problems, at_least=2, why=_REPLICAS), problems)
    _whole(p, "SPEED_REPEATS", 2, "the cost's range needs at least two epochs of each", problems)
    if is_whole(p.get("TRAIN_SAMPLES")):
        _at_least(int(p["TRAIN_SAMPLES"]), 64, "TRAIN_SAMPLES must be >= {needed}: section 6 draws batches "
                  "of up to 64 distinct images.", problems)  # fmt: skip
    return {}


@_lesson("06_augmented_training")
def _(p: Mapping[str, Any], problems: list[str]) -> Plan:
    batch = _common(p, problems, at_least=2, why=_TOWERS)
    _whole(p, "PIPELINE_BATCHES", 1, "batches timed per pipeline", problems)
    if batch:
        _enough_for(p, batch, 1, "an epoch of TRAIN_SAMPLES // batch steps", problems)
        _at_least(int(p["TRAIN_SAMPLES"]), 8, "TRAIN_SAMPLES must be >= {needed}: section 2 draws 8 images.",
                  problems)  # fmt: skip
    return {"accuracy_gap_limit": ACCURACY_GAP_LIMIT}


@_lesson("07_save_and_restore")
def _(p: Mapping[str, Any], problems: list[str]) -> Plan:
    batch = _common(p, problems, at_least=2, why=_TOWERS)
    every = p.get("SAVE_EVERY_STEPS")
    if every is not None:
        _whole(p, "SAVE_EVERY_STEPS", 1, "batches between saves, or None for a quarter of an epoch", problems)
    if not batch:
        return {}
    steps = -(-int(p["TRAIN_SAMPLES"]) // batch)
    if steps < 2:
        problems.append(
            f"TRAIN_SAMPLES={p['TRAIN_SAMPLES']} gives {steps} batch per epoch of the global batch {batch}; "
            f"section 5 kills the run mid-epoch, so it needs TRAIN_SAMPLES >= {batch + 1}."
        )
        return {}
    if int(p["TRAIN_SAMPLES"]) < 2 * batch:
        problems.append(
            f"TRAIN_SAMPLES={p['TRAIN_SAMPLES']} holds fewer than 2 full global batches of {batch}; "
            f"section 6 crashes a run one batch past a checkpoint, so it needs TRAIN_SAMPLES >= {2 * batch}."
        )
    # Killed after the batch just past the middle of the middle epoch; saved every quarter of an epoch.
    kill = [(int(p["EPOCHS"]) - 1) // 2, steps // 2 + 1]
    if every is None:
        every = max(1, steps // 4)
    elif is_whole(every) and every > steps // 2:
        problems.append(
            f"SAVE_EVERY_STEPS={every} saves no checkpoint before the kill at batch {kill[1]} of {steps}: "
            f"use SAVE_EVERY_STEPS <= {steps // 2}, or None (a quarter of an epoch)."
        )
    return {"steps_per_epoch": steps, "checkpoint_every_steps": every, "kill_at": kill}


@_lesson("08_scaling_study")
def _(p: Mapping[str, Any], problems: list[str]) -> Plan:
    study = _common(p, problems, at_least=2, why="the learning-rate study trains N devices' larger batch")
    if study and not any("fewer than N_DEVICES" in q for q in problems):  # its larger batch: 2 x per device
        _no_empty_replica(p, 2 * study, "N_DEVICES", problems)
    counts = p.get("DEVICE_COUNTS")
    if not (isinstance(counts, list | tuple) and counts and all(is_whole(n) and n >= 1 for n in counts)):
        problems.append(f"DEVICE_COUNTS must be a list of device counts >= 1, e.g. [1, 2], got {counts!r}.")
        counts = []
    sweep = p.get("SWEEP")
    if not (isinstance(sweep, list | tuple) and sweep and all(is_whole(b) and b >= 1 for b in sweep)):
        problems.append(f"SWEEP must be a list of batch sizes >= 1, e.g. [16, 32], got {sweep!r}.")
        sweep = []
    for name in ("GLOBAL_BATCH", "BENCH_STEPS", "STUDY_SAMPLES"):
        _whole(p, name, 1, "a count", problems)
    _whole(p, "REPEATS", 2, "the spread needs at least two timed blocks", problems)
    glob, devices = p.get("GLOBAL_BATCH"), p.get("N_DEVICES")
    if is_whole(glob) and glob >= 1:
        sources = {n: f"DEVICE_COUNTS' {n} devices" for n in counts}
        if is_whole(devices) and devices >= 1:
            sources.setdefault(devices, f"N_DEVICES={devices}")
        for n, source in sources.items():
            if glob % n:
                fits = " or ".join(str(v) for v in (glob // n * n, glob // n * n + n) if v)
                problems.append(f"GLOBAL_BATCH={glob} does not split evenly over {source} (strong scaling "
                                f"and section 4 give each device the same share): use a multiple of {n}: "
                                f"GLOBAL_BATCH={fits}.")  # fmt: skip
        if is_whole(p.get("TRAIN_SAMPLES")):
            _at_least(int(p["TRAIN_SAMPLES"]), max([glob, *sweep]), "TRAIN_SAMPLES must be >= {needed}: the "
                      "batch sweep and section 4 each take one batch of that size.", problems)  # fmt: skip
        _study_samples(p, glob, counts, problems)
    return {}


@_lesson("09_parameter_averaging")
def _(p: Mapping[str, Any], problems: list[str]) -> Plan:
    batch = _common(p, problems, at_least=2, why="averaging needs at least two workers")
    frequencies = p.get("FREQUENCIES")
    if not (isinstance(frequencies, list | tuple) and frequencies
            and all(is_whole(f) and f >= 1 for f in frequencies)):  # fmt: skip
        problems.append(f"FREQUENCIES must be a list of averaging frequencies >= 1, got {frequencies!r}.")
    _whole(p, "EVALS", 1, "evaluations", problems)
    if not batch:
        return {}
    _rate_per_image(p, problems)
    rounds = int(p["TRAIN_SAMPLES"]) // batch  # rounds the training set holds: one batch per worker each
    # Seed 004 averages every 3 rounds; 12 rounds show 4 averagings, fewer data show fewer.
    _at_least(rounds, 3, f"TRAIN_SAMPLES={p['TRAIN_SAMPLES']} holds {rounds} round(s) of {batch} images "
              "(BATCH_SIZE_PER_REPLICA x N_DEVICES); the seed's wrapper averages every 3, so it needs "
              f"TRAIN_SAMPLES >= {3 * batch}.", problems)  # fmt: skip
    return {"seed_rounds": min(12, rounds) // 3 * 3, "parity_rounds": min(10, rounds)}


@_lesson("10_multi_worker")
def _(p: Mapping[str, Any], problems: list[str]) -> Plan:
    batch = _common(p, problems, devices="N_WORKERS", at_least=2,
                    why="a cluster of two or more workers, one of which is killed")  # fmt: skip
    if not batch:
        return {}
    total = int(p["EPOCHS"]) * (int(p["TRAIN_SAMPLES"]) // batch)  # the Trainer drops a last partial batch
    if total < 2:
        problems.append(f"TRAIN_SAMPLES={p['TRAIN_SAMPLES']} x EPOCHS={p['EPOCHS']} give {total} step(s) of "
                        f"the global batch {batch}; the kill and restart need >= 2: TRAIN_SAMPLES >= "
                        f"{2 * batch}.")  # fmt: skip
        return {}
    every, kill = p.get("CHECKPOINT_EVERY_STEPS"), p.get("KILL_AFTER_STEP")
    if every is None:
        every = max(1, total // 4)
    elif not _whole(p, "CHECKPOINT_EVERY_STEPS", 1, "steps between checkpoints, or None", problems):
        return {}
    if kill is None:
        kill = max(every, total // 2 // every * every)
    if not is_whole(kill) or kill < 1 or kill % every or kill >= total:
        problems.append(
            f"KILL_AFTER_STEP={kill!r} must be a checkpoint step (a multiple of "
            f"CHECKPOINT_EVERY_STEPS={every}) before the run's last step {total} (EPOCHS x TRAIN_SAMPLES // "
            f"(BATCH_SIZE_PER_REPLICA x N_WORKERS)): "
            "the worker is killed when that checkpoint is saved. "
            "Use None for the checkpoint nearest half-way."
        )
    return {"total_steps": total, "checkpoint_every_steps": every, "kill_after_step": kill}


@_lesson("11_where_time_goes")
def _(p: Mapping[str, Any], problems: list[str]) -> Plan:
    batch = _common(p, problems, at_least=2, why="the ring all-reduce and accumulation need replicas")
    _whole(p, "TIMING_STEPS", 1, "steps timed per measurement", problems)
    if _whole(p, "ACCUMULATION_STEPS", 2, "micro-batches an update; Keras takes >= 2", problems) and batch:
        k = int(p["ACCUMULATION_STEPS"])
        _at_least(int(p["TRAIN_SAMPLES"]), k * batch, f"TRAIN_SAMPLES={p['TRAIN_SAMPLES']} is too few: "
                  f"section 4 adds ACCUMULATION_STEPS={k} micro-batches of the global batch {batch} "
                  "(BATCH_SIZE_PER_REPLICA x N_DEVICES) into one update, TRAIN_SAMPLES >= {needed}.",
                  problems)  # fmt: skip
    _whole(p, "MIXED_TRAIN_SAMPLES", 1, "images the mixed-precision recipe trains, at most TRAIN_SAMPLES",
           problems)  # fmt: skip
    _whole(p, "SPEED_REPEATS", 2, "a speed ratio's range needs at least two repeats", problems)
    return {"accuracy_gap_limit": ACCURACY_GAP_LIMIT}


@_lesson("12_keras_on_jax")
def _(p: Mapping[str, Any], problems: list[str]) -> Plan:
    batch = _common(p, problems, at_least=2, why="section 6 shows a batch that does not split over the "
                    "devices, and one device splits every batch", fits=False)  # fmt: skip
    _whole(p, "TIMING_CALLS", 1, "calls timed per layer", problems)
    if not batch:
        return {}
    sets = {"TRAIN_SAMPLES": "the training set", "TEST_SAMPLES": "the test set"}
    _multiple_of_devices(p, sets, "N_DEVICES", "Keras on JAX fails at that step (keras#21167).", problems)
    _at_least(int(p["TRAIN_SAMPLES"]), batch + 1, f"TRAIN_SAMPLES={p['TRAIN_SAMPLES']} is too few: section 6 "
              f"trains a global batch of {batch} and one image more, TRAIN_SAMPLES >= {{needed}}.", problems)
    return {}


_DRILL_STEPS = {"BAD_STEP": "the step worker 1 skips", "DRIFT_STEP": "the step BatchNorm is unfrozen at",
                "NAN_STEP": "the step the blank image is in"}  # fmt: skip


@_lesson("15_when_it_breaks")
def _(p: Mapping[str, Any], problems: list[str]) -> Plan:
    batch = _common(p, problems, at_least=2, why="the drills compare replicas, so they need at least two",
                    fits=False)  # fmt: skip
    if batch:
        _at_least(int(p["BATCH_SIZE_PER_REPLICA"]), 3, "BATCH_SIZE_PER_REPLICA must be >= {needed}: "
                  "section 3 blanks the third image of replica NAN_REPLICA's slice.", problems)  # fmt: skip
    workers = _whole(p, "N_WORKERS", 2, "worker 1 is the one that skips a step", problems)
    steps = _whole(p, "STEPS", 2, "steps of the drills' jobs", problems)
    for name, why in _DRILL_STEPS.items():
        if _whole(p, name, 0, why, problems) and steps and p[name] >= p["STEPS"]:
            problems.append(f"{name}={p[name]} must be a step of the job: < STEPS={p['STEPS']}.")
    _whole(p, "CHECK_EVERY", 1, "a count", problems)
    tutorial = p.get("TUTORIAL_SECONDS")
    if not (is_real(tutorial) and tutorial >= 10):
        problems.append(f"TUTORIAL_SECONDS must be a number >= 10 (the tutorial's first step traces its "
                        f"model and optimizer before it trains), got {tutorial!r}.")  # fmt: skip
    for name in ("WATCHDOG_SECONDS", "COLLECTIVE_TIMEOUT"):
        _within(p, name, 0, None, problems)
    watchdog, timeout = p.get("WATCHDOG_SECONDS"), p.get("COLLECTIVE_TIMEOUT")
    if is_real(watchdog) and is_real(timeout) and not 0 < watchdog < timeout:
        problems.append(f"WATCHDOG_SECONDS={watchdog} must be > 0 and below COLLECTIVE_TIMEOUT={timeout}: "
                        "the stacks are printed before the timeout ends the job.")  # fmt: skip
    _memory_drill(p, problems)
    if batch and _whole(p, "NAN_REPLICA", 0, "the replica the blank image goes to", problems):
        if p["NAN_REPLICA"] >= p["N_DEVICES"]:
            problems.append(f"NAN_REPLICA={p['NAN_REPLICA']} names no replica: use < {p['N_DEVICES']}.")
    if batch and workers and steps and is_whole(p.get("OOM_BATCH")):
        per_worker = p["BATCH_SIZE_PER_REPLICA"] * p["N_WORKERS"]
        needed = max(p["STEPS"] * batch, p["STEPS"] * per_worker, p["OOM_BATCH"], 4 * per_worker)
        why = (f"TRAIN_SAMPLES={p['TRAIN_SAMPLES']} is too few: the drills train STEPS global batches on "
               "N_DEVICES and on N_WORKERS, OOM_BATCH images on one device and read 4 x "
               "BATCH_SIZE_PER_REPLICA x N_WORKERS rows in section 5: TRAIN_SAMPLES >= {needed}.")
        _at_least(int(p["TRAIN_SAMPLES"]), needed, why, problems)
    return {}


def _worker_counts(p: Mapping[str, Any], per_worker: int, problems: list[str]) -> list[int]:
    """WORKER_COUNTS checked against the cores this process may use; None: 1, 2, 4, ... as they allow."""
    cores, counts = len(usable_cores()), p.get("WORKER_COUNTS")
    if counts is None:
        counts = [2**k for k in range(cores.bit_length()) if 2**k * per_worker <= cores]
    elif not (isinstance(counts, list | tuple) and counts and all(is_whole(n) and n >= 1 for n in counts)
              and list(counts) == sorted(set(counts)) and counts[0] == 1):  # fmt: skip
        problems.append(f"WORKER_COUNTS must be None or an increasing list of worker counts starting at 1 "
                        f"(the baseline), e.g. [1, 2], got {counts!r}.")  # fmt: skip
        return []
    if len(counts) < 2 or max(counts) * per_worker > cores:
        workers = max([2, *counts])  # None and too few cores leave no count at all
        problems.append(f"{workers} workers x CORES_PER_WORKER={per_worker} need {workers * per_worker} "
                        "cores, "
                        f"but this process may use {cores} (os.sched_getaffinity(0)); the lesson compares 1 "
                        "worker with more: lower WORKER_COUNTS or CORES_PER_WORKER, or use more cores.")
        return []
    return [int(n) for n in counts]


@_lesson("14_pinned_workers")
def _(p: Mapping[str, Any], problems: list[str]) -> Plan:
    per_worker = _whole(p, "CORES_PER_WORKER", 1, "cores each worker owns", problems)
    counts = _worker_counts(p, int(p["CORES_PER_WORKER"]), problems) if per_worker else []
    for name in ("TRAIN_SAMPLES", "TEST_SAMPLES", "EPOCHS", "BATCH_SIZE_PER_REPLICA"):
        _whole(p, name, 1, "a count", problems)
    _whole(p, "BENCH_STEPS", 1, "steps per timed block", problems)
    _whole(p, "REPEATS", 2, "timed blocks: two at least, for a spread", problems)
    _whole(p, "LINK_MAX_MB", 1, "the largest all-reduce, from 4 KB up", problems)
    _within(p, "TARGET_ACCURACY", 0.0, 1.0, problems)
    if _whole(p, "GLOBAL_BATCH", 1, "images per step in strong scaling", problems) and counts:
        uneven = [n for n in counts if p["GLOBAL_BATCH"] % n]
        if uneven:
            problems.append(f"GLOBAL_BATCH={p['GLOBAL_BATCH']} must split evenly over every worker "
                            f"count {counts} (not over {uneven}): use a multiple of {math.lcm(*counts)}.")
        elif is_whole(p.get("TRAIN_SAMPLES")):
            _at_least(int(p["TRAIN_SAMPLES"]), int(p["GLOBAL_BATCH"]), f"TRAIN_SAMPLES={p['TRAIN_SAMPLES']} "
                      "is too few: training to accuracy needs one global batch (GLOBAL_BATCH), TRAIN_SAMPLES "
                      ">= {needed}.", problems)  # fmt: skip
    largest = 2**20 * int(p["LINK_MAX_MB"]) if is_whole(p.get("LINK_MAX_MB")) else 0
    sizes = [4096 * 4**k for k in range(12) if 4096 * 4**k <= largest] or [4096]
    return {"worker_counts": counts, "link_sizes": sizes}


@_lesson("16_capstone")
def _(p: Mapping[str, Any], problems: list[str]) -> Plan:
    devices = _whole(p, "N_DEVICES", 1, "the number of devices", problems)
    _whole(p, "EPOCHS", 1, "a count", problems)
    _whole(p, "FULL_SIZE_EPOCHS", 0, "the last epochs, at full size; EPOCHS or more: all of them", problems)
    _whole(p, "WHITENING_BIAS_EPOCHS", 0, "the first epochs, in which its first layer's bias learns",
           problems)
    sizes = p.get("SMALL_SIZES")
    if not (isinstance(sizes, list | tuple) and all(is_whole(side) and side >= 10 for side in sizes)):
        problems.append(f"SMALL_SIZES must be a list of image sides >= 10 (the network needs 10 or more), "
                        f"e.g. [16, 24], or [] for every epoch at full size, got {sizes!r}.")  # fmt: skip
    widths = p.get("WIDTHS")
    if "WIDTHS" in p and not (isinstance(widths, list | tuple) and len(widths) == 3
                              and all(is_whole(width) and width >= 1 for width in widths)):  # fmt: skip
        problems.append(f"WIDTHS must be the channels of the network's three blocks, three whole numbers "
                        f"such as [64, 128, 128] or airbench's [64, 256, 256], got {widths!r}.")  # fmt: skip
    batch = _whole(p, "BATCH_SIZE", 1, "the global batch", problems)
    if batch and devices and p["BATCH_SIZE"] % p["N_DEVICES"]:
        problems.append(f"BATCH_SIZE={p['BATCH_SIZE']} must split evenly over N_DEVICES={p['N_DEVICES']}: "
                        "use a multiple of N_DEVICES.")  # fmt: skip
    sets_ok = _capstone_sets(p, problems)
    if batch and devices and sets_ok and not p["BATCH_SIZE"] % p["N_DEVICES"]:  # training drops a last part
        _no_empty_replica({**p, "TRAIN_SAMPLES": None}, int(p["BATCH_SIZE"]), "N_DEVICES", problems)
    for name, meaning in (("MINUTES", "minutes, or None for every image every epoch"),
                          ("PEAK_LEARNING_RATE", "the learning rate at a global batch of 256")):  # fmt: skip
        value = p.get(name)
        if (name == "PEAK_LEARNING_RATE" or value is not None) and not (is_real(value) and value > 0):
            problems.append(f"{name} must be a number > 0 ({meaning}), got {value!r}.")
    _within(p, "WARMUP_FRACTION", 0.0, 1.0, problems)
    _within(p, "LABEL_SMOOTHING", 0.0, 1.0, problems)
    _within(p, "WEIGHT_DECAY", 0.0, None, problems)
    if p.get("LOOKAHEAD") not in (True, False):
        problems.append(f"LOOKAHEAD must be True or False, got {p.get('LOOKAHEAD')!r}.")
    _capstone_arithmetic(p, devices, problems)
    return {}




@_lesson("17_to_a_cluster")
def _(p: Mapping[str, Any], problems: list[str]) -> Plan:
    ok = all([_whole(p, "SHARDS", 2, "files per split; 2 replicas need 2 or more", problems),
              _whole(p, "GLOBAL_BATCH", 2, "images per step over 2 replicas", problems),
              _whole(p, "STEPS", 2, "optimizer steps", problems),
              _whole(p, "CHECKPOINT_EVERY", 1, "steps between checkpoints", problems),
              _whole(p, "LOG_EVERY", 1, "steps between printed losses", problems),
              _whole(p, "KILL_AT_STEP", 1, "the printed step at which worker 1 is killed", problems)])
    if not ok:
        return {}
    if p["GLOBAL_BATCH"] % 2:
        problems.append(f"GLOBAL_BATCH={p['GLOBAL_BATCH']} must split over 2 replicas: give an even number.")
    every, kill, steps = p["CHECKPOINT_EVERY"], p["KILL_AT_STEP"], p["STEPS"]
    if kill % p["LOG_EVERY"] or not kill % every or not every <= kill < steps:
        problems.append(
            f"KILL_AT_STEP={kill} must be a step the script prints (a multiple of "
            f"LOG_EVERY={p['LOG_EVERY']}), "
            f"not a checkpoint step (a multiple of CHECKPOINT_EVERY={every}: the kill would race its save), "
            f"after the first checkpoint and before the last step STEPS={steps}."
        )
    rates = p.get("LINK_RATES")
    if not isinstance(rates, list | tuple) or not rates or not all(
        rate is None or (isinstance(rate, str) and re.fullmatch(r"\d+[kmg]?bit", rate)) for rate in rates
    ):
        problems.append(f"LINK_RATES={rates!r} must be a non-empty list of rates like '1gbit' or '100mbit' "
                        "(None: the link unshaped).")
    return {"resume_step": kill // every * every}


@_lesson("13_sharding")
def _(p: Mapping[str, Any], problems: list[str]) -> Plan:
    devices = _whole(p, "N_DEVICES", 2, "the stages split arrays over the devices, so at least two", problems)
    for name, why in (("PARITY_STEPS", "training steps compared"),
                      ("REMAT_DEPTH", "hidden layers"), ("REMAT_WIDTH", "units per layer"),
                      ("REMAT_BATCH", "images per step")):  # fmt: skip
        _whole(p, name, 1, why, problems)
    _whole(p, "REPEATS", 2, "the spread needs at least two timed steps", problems)
    if not (is_real(p.get("LEARNING_RATE")) and p["LEARNING_RATE"] > 0):
        problems.append(f"LEARNING_RATE must be a number > 0, got {p.get('LEARNING_RATE')!r}.")
    if not devices:
        return {}
    n = int(p["N_DEVICES"])
    values = math.prod(shape) if (shape := image_shape(p)) else None  # the MLP's input: a flattened image
    if values and values % n:
        fits = ", ".join(str(k) for k in range(2, 9) if values % k == 0)
        problems.append(f"N_DEVICES={n} must divide the {values:,} values of an image (the first kernel's "
                        f"rows are split in N_DEVICES): use one of {fits}.")  # fmt: skip
    width = p.get("WIDTH")
    if not (is_whole(width) and width >= n and width % n == 0):
        problems.append(f"WIDTH={width!r} must be a multiple of N_DEVICES={n}: the stages split its units "
                        "over the devices.")  # fmt: skip
    batch = _whole(p, "GLOBAL_BATCH", n, f"images per step, split over N_DEVICES={n}", problems)
    if batch and p["GLOBAL_BATCH"] % n:
        problems.append(f"GLOBAL_BATCH={p['GLOBAL_BATCH']} must split evenly over N_DEVICES={n}: "
                        "use a multiple of it.")  # fmt: skip
    return {}


@_lesson("18_pipeline_parallelism")
def _(p: Mapping[str, Any], problems: list[str]) -> Plan:
    n = _whole(p, "N_DEVICES", 2, "section 1 splits a layer over the devices, so at least two", problems)
    ok = all([_whole(p, name, 1, why, problems) for name, why in (("DEPTH", "hidden layers"),
              ("MICROBATCH", "images"), ("REPEATS", "timed steps"), ("TABLE_MICROBATCHES", "microbatches"))])
    cores, usable = p.get("CORES_PER_WORKER"), len(usable_cores())
    if cores is not None and _whole(p, "CORES_PER_WORKER", 1, "cores a worker; None: not pinned", problems):
        _at_least(usable, 2 * cores, f"CORES_PER_WORKER={cores}: 2 workers need {{needed}} cores, this "
                  f"process may use {usable}; pass None (not pinned) or {usable // 2 or None}.", problems)
    counts = _wholes(p, "MICROBATCH_COUNTS", "[1, 2]", problems)
    degrees = _wholes(p, "DEGREES", "[1, 2]", problems)
    if n and not (is_whole(p.get("WIDTH")) and p["WIDTH"] % p["N_DEVICES"] == 0):
        problems.append(f"WIDTH={p.get('WIDTH')!r} must be a multiple of N_DEVICES={p['N_DEVICES']}: "
                        "section 1 splits its units.")  # fmt: skip
    split = p["TABLE_MICROBATCHES"] * p["N_DEVICES"] if n and ok and counts and degrees else None
    if split and not (is_whole(p.get("TABLE_BATCH")) and p["TABLE_BATCH"] % split == 0):
        problems.append(f"TABLE_BATCH={p.get('TABLE_BATCH')!r} must be a multiple of TABLE_MICROBATCHES x "
                        f"N_DEVICES = {split}: section 5 cuts it into both.")  # fmt: skip
    ws, most = p.get("WIDTHS"), max(p["DEGREES"]) if degrees else 1
    if not (isinstance(ws, list | tuple) and ws and all(is_whole(w) and w % most == 0 for w in ws)):
        problems.append(f"WIDTHS must be widths the largest of DEGREES ({most}) divides, got {ws!r}.")
    _within(p, "BUDGET_MIB", 1, None, problems)
    return {}


def lesson_plan(lesson: str, parameters: Mapping[str, Any]) -> Plan:
    """The step counts `lesson` derives from `parameters`; a ValueError naming every value it cannot take.

    `lesson` is a notebook's name without ``.ipynb`` (``"07_save_and_restore"``);
    `parameters` its parameters cell (a notebook passes ``globals()``). A lesson
    with no rules returns ``{}``.
    """
    rule = _RULES.get(str(lesson).removesuffix(".ipynb"))
    if rule is None:
        return {}
    problems: list[str] = []
    if "TIMEOUT" in parameters:  # every lesson that has it gives it to child processes that start TensorFlow
        _whole(parameters, "TIMEOUT", MIN_TIMEOUT, "seconds a child process may take; starting TensorFlow "
               "alone takes seconds", problems)  # fmt: skip
    plan = rule(parameters, problems)
    if problems:
        raise ValueError(f"{lesson} cannot run with these parameters:\n  - " + "\n  - ".join(problems))
    return plan


def check_lessons(plan: dict[Path, dict], defaults: dict[Path, dict]) -> dict[Path, dict]:
    """`plan` (overrides per notebook) once every lesson takes them, else a ValueError with every refusal."""
    refused = []
    for notebook, overrides in plan.items():
        try:
            lesson_plan(notebook.stem, {**defaults[notebook], **overrides})
        except ValueError as err:
            refused.append(str(err))
    if refused:
        raise ValueError("\n".join(refused))
    return plan
