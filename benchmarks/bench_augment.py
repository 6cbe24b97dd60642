"""Augmentation speed: tf_keras's ImageDataGenerator against mgtutor.keras2.augment's three paths.

Part 1, loaders: images per second made into augmented batches with seed 000's
transforms (width/height shift 0.1, horizontal flip), batch 128, over the
CIFAR-10 training images (the shared subset holds 5,085): tf_keras's ``flow``
(one image at a time, SciPy), our ``flow`` (NumPy, a whole batch at once, read
on one thread as tf_keras's is), our tf.data path, and our layers path run on
the CPU with ``training=True``. Ratios are against tf_keras.

Part 2, training: the seed CNN on 2 simulated devices under MirroredStrategy,
images per second with augmentation off and on (our flow as seed 000 uses it,
the tf.data path, the layers inside the model). All four train in one process,
one epoch each in turn, after an untimed epoch each (tracing).

Both parts interleave what they compare, pass by pass or epoch by epoch, and
report the median, so other work on the machine slows every contender alike
instead of whichever ran at the time. They also report CPU seconds (all
threads of the process), what augmenting costs the machine, which other
processes competing for the cores barely change. Run from the repository root::

    MGTUTOR_DATA_DIR=/work/shared/data python benchmarks/bench_augment.py

tf_keras's transforms need SciPy, which mgtutor does not depend on: without it
tf_keras's ``flow`` fails on its first batch and its row says so (``pip install
scipy`` to measure it). On logical CPU devices augmentation and training share
the same cores, so part 2 measures what augmenting costs the CPU; on GPUs the
layers path runs on the devices and the tf.data path overlaps with them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TRAIN_CONFIGS = ("off", "flow", "tf.data", "layers")
SEED_000 = {"width_shift_range": 0.1, "height_shift_range": 0.1, "horizontal_flip": True}


def _images(samples: int | None) -> tuple[Any, Any, str]:
    """Seed 000's inputs: CIFAR-10 training images as float32 in [0, 1], one-hot labels."""
    from mgtutor.data import load_dataset
    from mgtutor.prepare import one_hot, scale_images

    data = load_dataset("cifar10")
    if samples is not None and samples < len(data.x_train):
        data = data.subset(samples)
    return scale_images(data.x_train), one_hot(data.y_train, data.num_classes), data.summary()


def _round_robin(runs: dict[str, Callable[[], Any]], rounds: int) -> dict[str, dict[str, list[float]]]:
    """Wall and CPU seconds of each run, `rounds` times in turn (the start rotating), after one untimed call.

    CPU seconds (all of this process's threads) are what a run costs the
    machine, and barely move when other processes compete for the cores.
    """
    for run in runs.values():
        run()  # tracing, caches
    names = list(runs)
    seconds = {name: {"wall": [], "cpu": []} for name in names}
    for round_ in range(rounds):
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            wall, cpu = time.perf_counter(), time.process_time()
            runs[name]()
            seconds[name]["cpu"].append(time.process_time() - cpu)
            seconds[name]["wall"].append(time.perf_counter() - wall)
    return seconds


def run_loaders(samples: int | None, batch_size: int, rounds: int) -> dict[str, Any]:
    """Part 1: every path makes all batches of an epoch, in turn; median images per second."""
    import numpy as np
    import tensorflow as tf

    from mgtutor.keras2.augment import ImageDataGenerator
    from mgtutor.prepare import make_dataset

    x, y, summary = _images(samples)
    results: dict[str, Any] = {"data": summary, "batch_size": batch_size, "images": len(x)}
    runs: dict[str, Callable[[], Any]] = {}

    def drain(flow: Any) -> Callable[[], Any]:
        return lambda: [flow[i] for i in range(len(flow))]

    try:
        from tf_keras.preprocessing.image import ImageDataGenerator as LegacyGenerator

        legacy = LegacyGenerator(**SEED_000).flow(x, y, batch_size=batch_size, seed=0)
        legacy[0]  # NameError here when SciPy is missing
        runs["tf_keras flow"] = drain(legacy)
    except (ImportError, NameError) as err:
        results["tf_keras flow"] = {"error": f"{type(err).__name__}: {err}"}

    generator = ImageDataGenerator(**SEED_000)
    runs["ours: flow (NumPy)"] = drain(generator.flow(x, y, batch_size=batch_size, seed=0))
    dataset = generator.as_dataset(x, y, batch_size=batch_size, seed=0)
    runs["ours: tf.data"] = lambda: [batch for batch in dataset]
    layers = generator.as_layers(input_shape=x.shape[1:], seed=0)
    augment = tf.function(lambda images: layers(images, training=True), jit_compile=False)
    plain = make_dataset(x, y, batch_size, seed=0)
    runs["ours: layers (CPU)"] = lambda: [np.asarray(augment(images)) for images, _ in plain]

    for name, seconds in _round_robin(runs, rounds).items():
        rates = [len(x) / s for s in seconds["wall"]]
        results[name] = {
            "images_per_s": statistics.median(rates),
            "passes": [round(r) for r in rates],
            "cpu_ms_per_image": 1e3 * statistics.median(seconds["cpu"]) / len(x),
        }
    results["load"] = os.getloadavg()[0]
    return results


def run_training(
    samples: int | None, per_replica: int, devices: int, rounds: int, configs: list[str]
) -> dict:
    """Part 2: the seed CNN under one MirroredStrategy, each augmentation config an epoch in turn."""
    from mgtutor.devices import setup_devices

    setup_devices(devices, verbose=False)
    import keras

    from mgtutor import data_parallel as parallel
    from mgtutor.keras2.augment import ImageDataGenerator
    from mgtutor.models import build_seed_cnn
    from mgtutor.prepare import make_dataset

    x, y, summary = _images(samples)
    strategy = parallel.mirrored_strategy()
    batch = parallel.global_batch_size(per_replica, strategy)
    steps = len(x) // batch
    x, y = x[: steps * batch], y[: steps * batch]  # whole batches only: every config sees the same images
    generator = ImageDataGenerator(**SEED_000)
    data = {
        "off": make_dataset(x, y, batch, drop_remainder=True, seed=0),
        "flow": generator.flow(x, y, batch_size=batch, seed=0),
        "tf.data": generator.as_dataset(x, y, batch_size=batch, seed=0, drop_remainder=True),
        "layers": make_dataset(x, y, batch, drop_remainder=True, seed=0),
    }
    models, losses = {}, {}
    for config in configs:
        with strategy.scope():
            model = build_seed_cnn(x.shape[1:], y.shape[1], seed=0)
            if config == "layers":
                model = keras.Sequential([generator.as_layers(input_shape=x.shape[1:], seed=0), model])
            model.compile(
                optimizer=keras.optimizers.RMSprop(1e-4),
                loss="categorical_crossentropy",
                metrics=["accuracy"],
                jit_compile=False,  # XLA fails on logical CPU devices
            )
        models[config] = model

    def epoch(config: str) -> Callable[[], None]:
        def run() -> None:
            history = models[config].fit(data[config], epochs=1, verbose=0)
            losses[config] = history.history["loss"][-1]

        return run

    seconds = _round_robin({config: epoch(config) for config in configs}, rounds)
    return {
        "devices": devices,
        "global_batch": batch,
        "images_per_epoch": len(x),
        "data": summary,
        "load": os.getloadavg()[0],
        "configs": {
            config: {
                "epoch_seconds": [round(s, 2) for s in seconds[config]["wall"]],
                "images_per_s": len(x) / statistics.median(seconds[config]["wall"]),
                "best_images_per_s": len(x) / min(seconds[config]["wall"]),
                "cpu_seconds": statistics.median(seconds[config]["cpu"]),
                "final_loss": losses[config],
            }
            for config in configs
        },
    }


def _child(args: argparse.Namespace, what: str) -> dict:
    command = [
        sys.executable, __file__, "--child", what, "--batch-size", str(args.batch_size),
        "--per-replica-batch", str(args.per_replica_batch), "--devices", str(args.devices),
        "--rounds", str(args.rounds), "--epochs", str(args.epochs), "--configs", *args.configs,
    ] + (["--samples", str(args.samples)] if args.samples else [])  # fmt: skip
    from mgtutor.support.processes import run_script

    print(f"running {what} ...", file=sys.stderr, flush=True)
    return run_script(command, cwd=ROOT, stream=False).result  # fails with its last lines


def report(loaders: dict, training: dict | None) -> str:
    lines = [
        f"data: {loaders['data']}",
        "",
        f"Part 1: augmented batches of {loaders['batch_size']} with seed 000's transforms, "
        f"{loaders['images']} images a pass (load average at the end: {loaders['load']:.1f} "
        f"on {os.cpu_count()} CPUs)",
        f"{'path':<22} {'images/s':>9} {'vs tf_keras':>11} {'CPU ms/img':>10}   each pass (images/s)",
    ]
    base = loaders["tf_keras flow"].get("images_per_s")
    for name in ("tf_keras flow", "ours: flow (NumPy)", "ours: tf.data", "ours: layers (CPU)"):
        result = loaders[name]
        if "error" in result:
            lines.append(f"{name:<22} {'-':>9} {'-':>11} {'-':>10}   unavailable: {result['error']}")
            continue
        ratio = f"{result['images_per_s'] / base:.1f}x" if base else "-"
        passes = ", ".join(str(p) for p in result["passes"])
        cpu = result["cpu_ms_per_image"]
        lines.append(f"{name:<22} {result['images_per_s']:>9.0f} {ratio:>11} {cpu:>10.3f}   {passes}")
    if training:
        configs = training["configs"]
        lines += [
            "",
            f"Part 2: the seed CNN, MirroredStrategy over {training['devices']} simulated devices, global "
            f"batch {training['global_batch']}, {training['images_per_epoch']} images an epoch (load "
            f"average at the end: {training['load']:.1f})",
            f"{'augmentation':<14} {'images/s':>9} {'cost':>7} {'best':>7} {'cost':>7} {'CPU s':>7} "
            f"{'cost':>7}   epochs (s)",
        ]
        off = configs.get("off")
        for name, r in configs.items():
            cost = best_cost = cpu_cost = "-"
            if off is not None and name != "off":
                cost = f"{100 * (1 - r['images_per_s'] / off['images_per_s']):.1f}%"
                best_cost = f"{100 * (1 - r['best_images_per_s'] / off['best_images_per_s']):.1f}%"
                cpu_cost = f"{100 * (r['cpu_seconds'] / off['cpu_seconds'] - 1):.1f}%"
            epochs = ", ".join(f"{s:.1f}" for s in r["epoch_seconds"])
            lines.append(
                f"{name:<14} {r['images_per_s']:>9.1f} {cost:>7} {r['best_images_per_s']:>7.1f} "
                f"{best_cost:>7} {r['cpu_seconds']:>7.1f} {cpu_cost:>7}   {epochs}"
            )
        lines.append(
            "images/s: from the median epoch; best: the fastest epoch; CPU s: median CPU seconds an "
            "epoch (all threads); cost: against 'off'"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=None, help="training images (default: all)")
    parser.add_argument("--batch-size", type=int, default=128, help="part 1 batch size")
    parser.add_argument("--rounds", type=int, default=5, help="part 1: timed passes per path")
    parser.add_argument("--per-replica-batch", type=int, default=64, help="part 2: batch per device")
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=4, help="part 2: timed epochs per config")
    parser.add_argument("--configs", nargs="+", default=list(TRAIN_CONFIGS), choices=TRAIN_CONFIGS)
    parser.add_argument("--skip-training", action="store_true")
    parser.add_argument("--json", action="store_true", help="print the raw results as JSON too")
    parser.add_argument("--child", choices=("loaders", "train"), help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.child:
        from mgtutor.support.processes import report_result

        if args.child == "loaders":
            report_result(run_loaders(args.samples, args.batch_size, args.rounds))
        else:
            report_result(run_training(args.samples, args.per_replica_batch, args.devices, args.epochs,
                                       args.configs))  # fmt: skip
        return

    loaders = _child(args, "loaders")
    training = None if args.skip_training else _child(args, "train")
    print(report(loaders, training))
    if args.json:
        print(json.dumps({"loaders": loaders, "training": training}))


if __name__ == "__main__":
    main()
