"""The checks the lesson plans (`mgtutor.classroom.limits`) are written in: each appends a problem, naming
the parameter, the value given and what would work, to the list it is given. Private to the lesson
plans, which import them by their names."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from mgtutor.data import IMAGE_SHAPES
from mgtutor.support.checks import is_real, is_whole


def _whole(p: Mapping[str, Any], name: str, minimum: int, why: str, problems: list[str]) -> bool:
    """Append a problem unless p[name] is a whole number >= minimum; True when it is."""
    value = p.get(name)
    if is_whole(value) and value >= minimum:
        return True
    problems.append(f"{name} must be a whole number >= {minimum} ({why}), got {value!r}.")
    return False


def _at_least(value: int, needed: int, message: str, problems: list[str]) -> None:
    if value < needed:
        problems.append(message.format(needed=needed))


# An accuracy on fewer test images than this cannot be told from chance (ten a class for CIFAR-10's ten):
# the sweep's first draw at TEST_SAMPLES=1 scored 0.000 and was read as "not learning".
MIN_TEST_SAMPLES = 100
TOO_FEW_TO_TEST = "the test accuracy needs about ten images a class to mean anything"


def _common(p: Mapping[str, Any], problems: list[str], devices: str = "N_DEVICES", at_least: int = 1,
            why: str = "the number of devices", fits: bool = True) -> int | None:  # fmt: skip
    """Checks the sizes most lessons share; the global batch, or None when a part of it is wrong."""
    ok = True
    for name in ("TRAIN_SAMPLES", "EPOCHS"):
        if name in p:
            ok &= _whole(p, name, 1, "a count", problems)
    if "TEST_SAMPLES" in p:
        ok &= _whole(p, "TEST_SAMPLES", MIN_TEST_SAMPLES, TOO_FEW_TO_TEST, problems)
    fine = devices not in p or _whole(p, devices, at_least, why, problems)
    if "BATCH_SIZE_PER_REPLICA" not in p or devices not in p:
        return None
    if _whole(p, "BATCH_SIZE_PER_REPLICA", 1, "images per device and step", problems) and fine and ok:
        batch = int(p["BATCH_SIZE_PER_REPLICA"]) * int(p[devices])
        if fits:  # the lesson fits or evaluates the sets at that global batch
            _no_empty_replica(p, batch, devices, problems)
        return batch
    return None


# A worker's SGD step is LEARNING_RATE over its own batch. Lesson 09 at 0.02, synthetic stand-in: 2 images a
# replica diverged where the workers average every 10 steps (spread 3e4, accuracy at chance), 1 image in every
# variant; 4 trained all. The linear rule (lesson 08) carries that bound to other rates, up to a rate the
# network takes at all: at 0.04 with 16 images a replica the all-reduce and averaging every step diverged
# (spreads past 1e17, accuracy at chance); 0.02, the lesson's own, trains.
MAX_RATE_PER_IMAGE = 0.005
MAX_LEARNING_RATE = 0.02


def _rate_per_image(p: Mapping[str, Any], problems: list[str]) -> None:
    rate, per_replica = p.get("LEARNING_RATE"), int(p["BATCH_SIZE_PER_REPLICA"])
    if isinstance(rate, int | float) and rate > MAX_LEARNING_RATE:
        problems.append(f"LEARNING_RATE={rate} is above {MAX_LEARNING_RATE}: at 0.04 the workers' SGD "
                        f"diverged (spreads past 1e17): give LEARNING_RATE <= {MAX_LEARNING_RATE}."
                        )  # fmt: skip
    elif isinstance(rate, int | float) and rate / per_replica > MAX_RATE_PER_IMAGE:
        fewest, most = math.ceil(round(rate / MAX_RATE_PER_IMAGE, 9)), MAX_RATE_PER_IMAGE * per_replica
        problems.append(f"LEARNING_RATE={rate} over BATCH_SIZE_PER_REPLICA={per_replica} is "
                        f"{rate / per_replica:.3g} an image; above {MAX_RATE_PER_IMAGE} the workers' SGD "
                        f"diverged: give BATCH_SIZE_PER_REPLICA >= {fewest} or LEARNING_RATE <= {most:.3g}.")


# Lesson 15's small device must run out of memory: the share's layer outputs (float32, as the lesson counts
# them), counted once, above MEMORY_BUDGET_MB. Measured (oneDNN off, as the drill runs), a step's peak on
# CIFAR-10 at 128 to 512 images: 125 to 368 MiB, 62 MiB plus about 0.65 MiB an image for 0.71 counted; on
# MNIST's 0.53 about 0.4 at 512 to 1,024. The fixed part covers the shortfall up to a device of
# 256 MiB, not beyond: there a share the count says cannot fit can fit. The sweep drew OOM_BATCH=1, 128
# and MEMORY_BUDGET_MB=256 (at the other's default): each fitted, and the drill showed no symptom.


def image_shape(p: Mapping[str, Any]) -> tuple[int, int, int] | None:
    """The shape of the lesson's images, or None for a learner's own (known once they are read)."""
    return IMAGE_SHAPES.get(p.get("DATASET")) if p.get("DATA_PATH") is None else None
MAX_MEMORY_BUDGET_MB = 256


def seed_cnn_floats(height: int, width: int, classes: int = 10) -> int:
    """Every layer's output of `build_seed_cnn(..., dropout=False)` for one image, in numbers."""
    half_h, half_w = (height - 2) // 2, (width - 2) // 2  # after the first valid conv and pooling
    quarter = ((half_h - 2) // 2) * ((half_w - 2) // 2)
    convs = (32 * (height * width + (height - 2) * (width - 2))
             + 64 * (half_h * half_w + (half_h - 2) * (half_w - 2)))  # fmt: skip
    return 2 * convs + 32 * half_h * half_w + 2 * 64 * quarter + 2 * (512 + classes)  # 2: Activation, Flatten


def _memory_drill(p: Mapping[str, Any], problems: list[str]) -> None:
    budget_ok = _whole(p, "MEMORY_BUDGET_MB", 100, "the seed CNN's weights, gradients and workspaces need it",
                       problems)  # fmt: skip
    if budget_ok and p["MEMORY_BUDGET_MB"] > MAX_MEMORY_BUDGET_MB:
        budget_ok = False
        problems.append(f"MEMORY_BUDGET_MB={p['MEMORY_BUDGET_MB']} must be <= {MAX_MEMORY_BUDGET_MB}: the "
                        "drill's small device, where a share whose layer outputs exceed it runs out (on a "
                        "larger one, a step's peak grows by less than its outputs, and such a share can fit)."
                        )  # fmt: skip
    shape = image_shape(p)
    if not (_whole(p, "OOM_BATCH", 1, "a count", problems) and budget_ok and shape):
        return
    budget, share = int(p["MEMORY_BUDGET_MB"]), int(p["OOM_BATCH"])
    per_image = 4 * seed_cnn_floats(*shape[:2])
    if share * per_image <= budget * 2**20:
        fewest, most = budget * 2**20 // per_image + 1, math.ceil(share * per_image / 2**20) - 1
        lower = f" or MEMORY_BUDGET_MB <= {most}" if most >= 100 else ""
        problems.append(f"OOM_BATCH={share} images could fit in MEMORY_BUDGET_MB={budget}: the drill's "
                        f"device must run out, and the seed CNN's layer outputs on {p['DATASET']} take "
                        f"{per_image / 2**20:.2f} MiB an image: give OOM_BATCH >= {fewest}{lower}."
                        )  # fmt: skip


def _capstone_sets(p: Mapping[str, Any], problems: list[str]) -> bool:
    """Lesson 16's sets: None (the whole split), or counts; a test set worth reading. (Fewer training images
    than BATCH_SIZE train: the endless stream repeats them to fill a batch.)"""
    ok = True
    if p.get("TRAIN_SAMPLES") is not None:
        ok &= _whole(p, "TRAIN_SAMPLES", 1, "a count, or None for the whole split", problems)
    if p.get("TEST_SAMPLES") is not None:
        ok &= _whole(p, "TEST_SAMPLES", MIN_TEST_SAMPLES, f"{TOO_FEW_TO_TEST}; or None for the whole split",
                     problems)  # fmt: skip
    return ok


def _capstone_arithmetic(p: Mapping[str, Any], devices: bool, problems: list[str]) -> None:
    if p.get("PRECISION") not in (None, "float32", "mixed_bfloat16"):
        problems.append(f"PRECISION must be None (the faster of the two, timed), \"float32\" or "
                        f"\"mixed_bfloat16\", got {p.get('PRECISION')!r}.")  # fmt: skip
    if p.get("XLA") not in (None, True, False):
        problems.append(f"XLA must be None (the faster, timed; off on several devices), True or False, "
                        f"got {p['XLA']!r}.")  # fmt: skip
    elif p.get("XLA") is True and devices and p["N_DEVICES"] > 1:
        # Measured: XLA's step on replica 0 reads replica 1's variables and fails
        # ("Trying to access resource ... located in device CPU:1 from device CPU:0").
        problems.append(f"XLA=True needs N_DEVICES=1, got N_DEVICES={p['N_DEVICES']}: XLA cannot "
                        "compile a MirroredStrategy step over logical devices. Use XLA=False with more "
                        "devices.")  # fmt: skip


def _study_samples(p: Mapping[str, Any], glob: int, counts: list, problems: list[str]) -> None:
    """Lesson 08's studies read STUDY_SAMPLES images: a strong batch, and a weak one on the most devices."""
    per_replica, samples = p.get("BATCH_SIZE_PER_REPLICA"), p.get("STUDY_SAMPLES")
    if is_whole(per_replica) and is_whole(samples) and samples >= 1:
        _at_least(samples, max(glob, per_replica * max(counts, default=1)), "STUDY_SAMPLES must be >= "
                  "{needed}: the studies fill one global batch of GLOBAL_BATCH, and one of "
                  "BATCH_SIZE_PER_REPLICA x the most DEVICE_COUNTS.", problems)  # fmt: skip


def _enough_for(p: Mapping[str, Any], batch: int, batches: int, what: str, problems: list[str]) -> None:
    _at_least(
        int(p["TRAIN_SAMPLES"]), batches * batch,
        f"TRAIN_SAMPLES={p['TRAIN_SAMPLES']} is too few: {what} needs {batches} global batch(es) of "
        f"{batch} (BATCH_SIZE_PER_REPLICA x N_DEVICES), TRAIN_SAMPLES >= {{needed}}.", problems,
    )  # fmt: skip


def _parity(p: Mapping[str, Any], batch: int | None, problems: list[str]) -> None:
    """The parity check trains PARITY_STEPS distinct global batches."""
    if _whole(p, "PARITY_STEPS", 1, "training steps compared", problems) and batch:
        _enough_for(p, batch, int(p["PARITY_STEPS"]), f"the parity check's PARITY_STEPS={p['PARITY_STEPS']}",
                    problems)  # fmt: skip


def _multiple_of_devices(p: Mapping[str, Any], sets: Mapping[str, str], devices: str, why: str,
                         problems: list[str]) -> None:  # fmt: skip
    """Each of `sets` (a parameter: which set of images) a multiple of p[devices]; `why` takes {last}."""
    n, batch = int(p[devices]), int(p["BATCH_SIZE_PER_REPLICA"]) * int(p[devices])
    for name, which in sets.items():
        value = int(p[name])
        if value % n:  # the global batch is a multiple of n, so the last batch splits exactly when this does
            fits = " or ".join(str(v) for v in (value // n * n, value // n * n + n) if v > 0)
            problems.append(f"{name}={value} ({which}) in global batches of {batch} (BATCH_SIZE_PER_REPLICA "
                            f"x {devices}) leaves a last batch of {value % batch}, which does not split "
                            f"evenly over {devices}={n}: {why} Use a multiple of {n}: {name}={fits}.")


def _within(p: Mapping[str, Any], name: str, low: float, high: float | None, problems: list[str]) -> None:
    """Append a problem unless p[name] is a number in [low, high) (no upper end when `high` is None)."""
    value = p.get(name)
    if name in p and not (is_real(value) and low <= value and (high is None or value < high)):
        upper = "" if high is None else f" and < {high}"
        problems.append(f"{name} must be a number >= {low}{upper}, got {value!r}.")


def empties_a_replica(last: int, n: int) -> bool:
    """Whether a last batch of `last` images leaves one of `n` replicas none. MirroredStrategy's rebatching
    hands them out in turn, up to ceil(last / n) each: 4 on 3 replicas is [2, 2, 0], 5 on 4 [2, 2, 1, 0]."""
    return 0 < last <= (n - 1) * -(-last // n)


def _no_empty_replica(p: Mapping[str, Any], batch: int, devices: str, problems: list[str]) -> None:
    """Each set's last batch of `batch`: none, or one image or more per replica (MirroredStrategy)."""
    n = int(p[devices])
    for name, which in (("TRAIN_SAMPLES", "the training set"), ("TEST_SAMPLES", "the test set")):
        value = p.get(name)
        last = value % batch if is_whole(value) and value >= 1 else 0
        if empties_a_replica(last, n):
            up = next(v for v in range(value + 1, value + batch + 1) if not empties_a_replica(v % batch, n))
            fits = " or ".join(str(v) for v in (value - last, up) if v > 0)
            per = -(-last // n)
            problems.append(f"{name}={value} ({which}) in global batches of {batch} leaves a last batch of "
                            f"{last}, handed to the {devices}={n} replicas in turn, up to {per} each: a "
                            f"replica gets no image, and TensorFlow's convolution fails on an empty batch. "
                            f"Use {name}={fits}.")  # fmt: skip


def _wholes(p: Mapping[str, Any], name: str, example: str, problems: list[str]) -> bool:
    """Whether p[name] is a list of whole numbers >= 1 that holds 1; else a problem naming it."""
    values = p.get(name)
    if isinstance(values, list | tuple) and 1 in values and all(is_whole(v) and v >= 1 for v in values):
        return True
    problems.append(f"{name} must be a list of whole numbers >= 1 holding 1, e.g. {example}, got {values!r}.")
    return False
