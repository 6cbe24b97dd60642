"""Throughput measured in this process: the input pipeline alone (`pipeline_images_per_second`) and
training on N devices (`measure_training`, a `Run`), whichever is slower sets the pace.

Several device counts need several processes: the study (`mgtutor.speed.study`) starts this module
once per count, ``python -m mgtutor.speed.measure CONFIG_JSON``, and reads back its runs. TensorFlow
loads only when used.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from mgtutor.support.checks import check_whole
from mgtutor.support.system import machine as _machine

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


class BenchmarkError(RuntimeError):
    """A measurement could not be made: a child process failed or timed out, or fit stopped early."""


@dataclass(frozen=True, kw_only=True)
class Run:
    """One measurement: `model` trained on `devices` devices fed by `pipeline`, and where it ran.

    ``images_per_s`` is training throughput over the timed steps; ``seconds_per_epoch`` the whole
    training split (``epoch_images``) at that rate; ``pipeline_images_per_s`` the pipeline alone.
    The fields after ``cores_used`` say how and where it ran; a run written by hand may leave them out.
    """

    devices: int
    pipeline: str
    model: str
    strategy: str
    device_kind: str
    batch_size_per_replica: int
    global_batch: int
    images_per_s: float
    seconds_per_epoch: float
    pipeline_images_per_s: float | None
    cores_used: float | None = None
    steps: int = 0
    warmup_steps: int = 0
    timed_seconds: float = 0.0
    step_seconds_median: float = 0.0
    epoch_images: int = 0
    train_images: int = 0
    model_params: int = 0
    final_loss: float = float("nan")
    # `images_per_s` is the median of `repeats` blocks of `steps` steps; low/high the slowest and fastest.
    repeats: int = 1
    images_per_s_low: float = 0.0
    images_per_s_high: float = 0.0
    device_names: tuple[str, ...] = ()
    physical_gpus: int = 0
    data: str = ""
    synthetic_data: bool = False
    intra_op_threads: int = 0
    inter_op_threads: int = 0
    load_before: float = 0.0
    load_after: float = 0.0
    pid: int = 0
    hostname: str = ""
    cpu_count: int | None = None
    cpu_affinity: int | None = None
    platform: str = ""
    cpu: dict = field(default_factory=dict)  # the CPU's model and features (support.system.cpu)
    python: str = ""
    tensorflow: str = ""
    keras: str = ""

    @property
    def spread(self) -> tuple[float, float]:
        """(slowest, fastest) block's images/s; a run from before repeats: its one rate twice."""
        return (self.images_per_s_low or self.images_per_s, self.images_per_s_high or self.images_per_s)

    @property
    def cores(self) -> int:
        """The cores this process could use (its affinity), else the machine's."""
        return self.cpu_affinity or self.cpu_count or 1

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "device_names": list(self.device_names)}

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> Run:
        """A run back from its dict (as a child reports it, or as scaling.json holds it)."""
        known = {f.name for f in fields(cls)}
        kept = {k: v for k, v in values.items() if k in known}
        return cls(**{**kept, "device_names": tuple(kept.get("device_names", ()))})


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
        check_whole(name, value, minimum)
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


def check_choice(name: str, value: Any, choices: Sequence[str]) -> str:
    """`value`, one of `choices`, or a ValueError naming `name` and the choices."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(choices)}; got {value!r}.")
    return value


def check_run_settings(
    *, model: Any, strategy: Any, steps: Any, warmup_steps: Any, samples: Any, seed: Any, repeats: Any = 1
) -> None:
    """What every measurement shares, checked under the names the study and `measure_training` share."""
    from mgtutor.models import MODEL_BUILDERS

    check_choice("model", model, sorted(MODEL_BUILDERS))
    check_choice("strategy", strategy, STRATEGIES)
    check_whole("steps", steps, 1)
    check_whole("repeats", repeats, 1, "Each repeat times `steps` more steps; 3 shows the spread.")
    # Timing starts when a step ends; the first step also traces the graph, so it must not count.
    check_whole("warmup_steps", warmup_steps, 1, "The first step traces the graph and must not be timed.")
    if samples is not None:
        check_whole("samples", samples, 1, "Pass None for the whole training set.")
    check_whole("seed", seed, 0)


# --------------------------------------------------------------------------- one configuration


def _load_training_images(dataset: str, data_path: Any, samples: int | None, seed: int):
    """(x float32 in [0, 1], y one-hot, size of the whole training split, data summary)."""
    from mgtutor.data import load_dataset
    from mgtutor.prepare import one_hot, scale_images

    data = load_dataset(dataset, data_path, seed=seed)
    full_size = len(data.x_train)
    data = data.subset(samples, None, seed=seed) if samples is not None else data
    return scale_images(data.x_train), one_hot(data.y_train, data.num_classes), full_size, data


def _make_input(pipeline: str, x: Any, y: Any, global_batch: int, seed: int) -> tuple[Any, bool]:
    """The batches `fit` trains on for `pipeline`, and whether they repeat forever."""
    import numpy as np

    from mgtutor.keras2.augment import ImageDataGenerator
    from mgtutor.prepare import make_dataset
    from mgtutor.support.tfdata import without_autotuner

    if pipeline == "synthetic":
        import tensorflow as tf

        rng = np.random.default_rng(seed)
        images = rng.random((global_batch, *x.shape[1:]), dtype=np.float32)
        labels = np.eye(y.shape[1], dtype=np.float32)[rng.integers(0, y.shape[1], global_batch)]
        return without_autotuner(tf.data.Dataset.from_tensors((images, labels)).repeat()), True
    if pipeline in ("in_memory", "layers"):  # "layers" augments inside the model
        batches = make_dataset(x, y, global_batch, seed=seed, drop_remainder=True, repeat=True)
        return without_autotuner(batches), True
    generator = ImageDataGenerator(**SEED_000_AUGMENTATION)
    if pipeline == "flow":
        # Whole batches only: every step then holds global_batch images on every replica count.
        whole = len(x) // global_batch * global_batch
        return generator.flow(x[:whole], y[:whole], batch_size=global_batch, seed=seed), False
    dataset = generator.as_dataset(x, y, batch_size=global_batch, seed=seed, drop_remainder=True)
    return dataset.repeat(), True  # as_dataset's stream already has no autotuner; repeat keeps its options


def _build_and_compile(
    name: str, pipeline: str, devices: Sequence[str], strategy: str, input_shape, num_classes, seed
):
    """The model to fit (wrapped for the `devices` when there are several) and the template's parameters."""
    import contextlib

    import keras

    from mgtutor.data_parallel import mirrored_strategy
    from mgtutor.keras2.augment import ImageDataGenerator
    from mgtutor.keras2.towers import multi_gpu_model
    from mgtutor.models import build_model, seed_optimizer

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


def _fit_timed(fitted: Any, batches: Any, endless: bool, total: int) -> tuple[Any, Any]:
    """`fit` for `total` steps; the history and the clock of each step's end."""
    clock = _step_clock(total)
    if endless:
        history = fitted.fit(
            batches, epochs=1, steps_per_epoch=total, verbose=0, callbacks=[clock], shuffle=False
        )
    else:  # a PyDataset ends with its epoch: run as many epochs as the steps need
        history = fitted.fit(batches, epochs=math.ceil(total / len(batches)), verbose=0, callbacks=[clock])
    return history, clock


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
    repeats: int = 1,
) -> Run:
    """Time `repeats` blocks of `steps` training steps after `warmup_steps`, on already loaded data."""
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
    timed = steps * repeats
    total = warmup_steps + timed
    producer, _ = _make_input(pipeline, x, y, global_batch, seed)
    producer_rate = pipeline_images_per_second(producer, min(steps, 50), warmup=1)
    batches, endless = _make_input(pipeline, x, y, global_batch, seed)
    fitted, params = _build_and_compile(
        model, pipeline, device_setup.names, strategy, x.shape[1:], y.shape[1], seed
    )
    load_before = os.getloadavg()[0]
    history, clock = _fit_timed(fitted, batches, endless, total)
    load_after = os.getloadavg()[0]
    if len(clock.ends) < total:
        raise BenchmarkError(f"{pipeline}: fit stopped after {len(clock.ends)} of {total} steps.")
    ends = np.asarray(clock.ends[warmup_steps - 1 : total])
    seconds = float(ends[-1] - ends[0])
    # One rate per block of `steps` consecutive steps: their spread is what rerunning would move.
    blocks = [steps * global_batch / float(ends[(r + 1) * steps] - ends[r * steps]) for r in range(repeats)]
    images_per_s = float(np.median(blocks))
    return Run(
        devices=n, pipeline=pipeline, model=model, strategy=strategy if n > 1 else "none (one device)",
        device_kind=device_setup.kind, batch_size_per_replica=batch_size_per_replica,
        global_batch=global_batch, images_per_s=images_per_s, seconds_per_epoch=full_size / images_per_s,
        pipeline_images_per_s=producer_rate,
        cores_used=(clock.cpu[total - 1] - clock.cpu[warmup_steps - 1]) / seconds,
        steps=steps, warmup_steps=warmup_steps, timed_seconds=seconds, repeats=repeats,
        images_per_s_low=min(blocks), images_per_s_high=max(blocks),
        step_seconds_median=float(np.median(np.diff(ends))), epoch_images=full_size, train_images=len(x),
        model_params=params, final_loss=float(history.history["loss"][-1]),
        device_names=tuple(device_setup.names), physical_gpus=len(tf.config.list_physical_devices("GPU")),
        data=dataset.summary(), synthetic_data=bool(dataset.synthetic),
        intra_op_threads=tf.config.threading.get_intra_op_parallelism_threads(),
        inter_op_threads=tf.config.threading.get_inter_op_parallelism_threads(),
        load_before=load_before, load_after=load_after, pid=os.getpid(),
        # Where it ran, then the versions TensorFlow and Keras report, which win.
        **{**_machine(), "tensorflow": tf.__version__, "keras": keras.__version__},
    )  # fmt: skip


def _measure_in_process(n_devices: int, pipelines: Sequence[str], **kwargs: Any) -> list[Run]:
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
    repeats: int = 1,
) -> Run:
    """Training images/s of `model` on `n_devices` devices fed by `pipeline`, in this process.

    Calls ``setup_devices(n_devices)`` first, so run it in a fresh process (or a
    notebook right after a restart). One device trains the model itself; more
    use `strategy`: ``"mirrored"`` (``MirroredStrategy``) or ``"towers"``
    (`mgtutor.multi_gpu_model`). The global batch is `batch_size_per_replica`
    x `n_devices`. Times `repeats` blocks of `steps` steps after `warmup_steps`
    untimed ones (the first traces the graph): ``images_per_s`` is the blocks'
    median, ``images_per_s_low``/``_high`` their extremes; ``seconds_per_epoch`` is the whole training split
    at that rate; ``pipeline_images_per_s`` is the pipeline alone (no training).
    `samples` limits the training images (None: all). Pipelines: `PIPELINES`,
    described in `PIPELINE_DESCRIPTIONS`.
    """
    n_devices = check_whole("n_devices", n_devices, 1)
    check_choice("pipeline", pipeline, PIPELINES)
    check_whole("batch_size_per_replica", batch_size_per_replica, 1)
    check_run_settings(
        model=model, strategy=strategy, steps=steps, warmup_steps=warmup_steps, samples=samples, seed=seed,
        repeats=repeats,
    )
    return _measure_in_process(
        n_devices, [pipeline], model=model, strategy=strategy, batch_size_per_replica=batch_size_per_replica,
        steps=steps, warmup_steps=warmup_steps, dataset=dataset, data_path=data_path, samples=samples,
        seed=seed, repeats=repeats,
    )[0]  # fmt: skip


if __name__ == "__main__":  # a study's child: python -m mgtutor.speed.measure CONFIG_JSON
    from mgtutor.support.processes import report_result

    config = json.loads(sys.argv[1])
    runs = _measure_in_process(config.pop("n_devices"), config.pop("pipelines"), **config)
    report_result({"runs": [run.as_dict() for run in runs]})
