"""Training throughput of the seed CNN: one device, towers (multi_gpu_model), MirroredStrategy.

Each configuration runs in its own Python process (TensorFlow fixes its devices
once per process, and two MirroredStrategy device counts cannot share one), one
after the other so they do not compete for the cores; the first epoch (tracing,
graph optimisation) is excluded from the timing. Run from the repository root::

    MGTUTOR_DATA_DIR=/work/shared/data python benchmarks/bench_parallel.py

On logical CPU devices (no GPU) the devices share the same cores: the numbers
compare the overheads of the two data-parallel routes, not a speed-up.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ("single", "towers", "mirrored")


def _seed_cnn(seed: int) -> Any:
    from mgtutor.models import build_seed_cnn

    return build_seed_cnn(seed=seed, dropout=True)


def run_one(config: str, devices: int, per_replica: int, samples: int, epochs: int, reduction: str) -> dict:
    """Train one configuration for 1 warm-up + `epochs` timed epochs; its throughput."""
    from mgtutor.devices import setup_devices

    n = 1 if config == "single" else devices
    setup_devices(n, verbose=False)
    import keras

    from mgtutor import data_parallel as parallel
    from mgtutor.data import load_dataset
    from mgtutor.keras2.towers import multi_gpu_model
    from mgtutor.prepare import make_dataset, one_hot, scale_images
    from mgtutor.progress import Throughput

    data = load_dataset("cifar10").subset(samples)
    x, y = scale_images(data.x_train), one_hot(data.y_train, data.num_classes)
    global_batch = parallel.global_batch_size(per_replica, n)
    # Whole batches only, so every configuration trains on the same number of images.
    steps = len(x) // global_batch
    train = make_dataset(x, y, global_batch, drop_remainder=True, seed=0)

    def compile_model(model: Any) -> None:
        model.compile(
            optimizer=keras.optimizers.RMSprop(1e-4),
            loss="categorical_crossentropy",
            metrics=["accuracy"],
            jit_compile=False,  # XLA fails on logical CPUs and would undo the towers' placement
        )

    if config == "mirrored":
        import tensorflow as tf

        ops = {
            "auto": None,  # mirrored_strategy's choice: ReductionToOneDevice on logical devices
            "reduce-to-one": tf.distribute.ReductionToOneDevice(),
            "hierarchical-copy": tf.distribute.HierarchicalCopyAllReduce(),
        }[reduction]
        strategy = parallel.mirrored_strategy(cross_device_ops=ops)
        reduction = type(strategy.extended._cross_device_ops).__name__
        with strategy.scope():
            model = _seed_cnn(seed=0)
            compile_model(model)
    else:
        model = _seed_cnn(seed=0)
        if config == "towers":
            model = multi_gpu_model(model, n)
        compile_model(model)

    meter = Throughput(global_batch, verbose=False)
    history = model.fit(train, epochs=1 + epochs, verbose=0, callbacks=[meter])
    seconds = [entry["seconds"] for entry in meter.epochs]
    timed = seconds[1:]  # the first epoch traces and optimises the graph
    images = steps * global_batch
    return {
        "config": config,
        "devices": n,
        "global_batch": global_batch,
        "images_per_epoch": images,
        "warmup_seconds": round(seconds[0], 2),
        "epoch_seconds": [round(s, 2) for s in timed],
        "images_per_s": images * len(timed) / sum(timed),
        "final_loss": history.history["loss"][-1],
        "reduction": reduction if config == "mirrored" else "",
        "data": data.summary(),
        "load": os.getloadavg()[0],
    }


def run_all(args: argparse.Namespace) -> list[dict]:
    from mgtutor.support.processes import run_script

    results = []
    for config in args.configs:
        command = [
            sys.executable, __file__, "--child", config, "--devices", str(args.devices),
            "--per-replica-batch", str(args.per_replica_batch), "--samples", str(args.samples),
            "--epochs", str(args.epochs), "--reduction", args.reduction,
        ]  # fmt: skip
        print(f"running {config} ...", file=sys.stderr, flush=True)
        results.append(run_script(command, cwd=ROOT, stream=False).result)  # fails with its last lines
    return results


def report(results: list[dict]) -> str:
    lines = [
        f"data: {results[0]['data']}",
        "",
        f"{'config':<9} {'devices':>7} {'global batch':>12} {'warm-up s':>9} "
        f"{'timed epochs s':>16} {'images/s':>9} {'load':>5}",
    ]
    for r in results:
        epochs = ", ".join(f"{s:.1f}" for s in r["epoch_seconds"])
        lines.append(
            f"{r['config']:<9} {r['devices']:>7} {r['global_batch']:>12} {r['warmup_seconds']:>9.1f} "
            f"{epochs:>16} {r['images_per_s']:>9.1f} {r['load']:>5.1f}"
        )
    for r in results:
        if r["reduction"]:
            lines.append(f"{r['config']} gradients summed by {r['reduction']}")
    speed = {r["config"]: r["images_per_s"] for r in results}
    lines.append("")
    if "single" in speed:
        for config in ("towers", "mirrored"):
            if config in speed:
                lines.append(f"{config} / single:   {speed[config] / speed['single']:.2f}x")
    if {"towers", "mirrored"} <= speed.keys():
        ratio = speed["towers"] / speed["mirrored"]
        verdict = "meets" if ratio >= 0.9 else "misses"
        lines.append(f"towers / mirrored: {ratio:.2f}x ({verdict} the >= 0.9x target)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", choices=CONFIGS, help=argparse.SUPPRESS)
    parser.add_argument("--configs", nargs="+", choices=CONFIGS, default=list(CONFIGS))
    parser.add_argument("--devices", type=int, default=2, help="devices for towers and mirrored")
    parser.add_argument("--per-replica-batch", type=int, default=32)
    parser.add_argument("--samples", type=int, default=4096, help="training images per epoch")
    parser.add_argument("--epochs", type=int, default=2, help="timed epochs after the warm-up one")
    parser.add_argument(
        "--reduction",
        choices=("auto", "reduce-to-one", "hierarchical-copy"),
        default="auto",
        help="MirroredStrategy's cross_device_ops",
    )
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    if args.child:
        sys.path.insert(0, str(ROOT))
        result = run_one(
            args.child, args.devices, args.per_replica_batch, args.samples, args.epochs, args.reduction
        )
        from mgtutor.support.processes import report_result

        report_result(result)
        return
    results = run_all(args)
    print(report(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
