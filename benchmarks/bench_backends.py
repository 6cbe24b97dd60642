"""Training throughput of the seed CNN on both Keras backends: JAX one device, JAX DataParallel,
TensorFlow one device, TensorFlow MirroredStrategy (lesson 12).

Each route runs in its own Python process (one Keras backend per process, devices fixed
when the backend starts), the routes one after the other so they do not compete for the
cores, and the whole round `--rounds` times in alternating order so that a change in the
machine's load hits every route. In each process the first epoch (tracing, compiling) is
left out; every later epoch is one repeat. Run from the repository root::

    MGTUTOR_DATA_DIR=/work/shared/data python benchmarks/bench_backends.py

The same model (seed CNN, dropout on), optimizer (Adam 1e-3), data and global batch on
every route; TensorFlow runs without XLA (`jit_compile=False`, as the series does), JAX
always compiles with XLA. On logical CPU devices (no GPU) the devices share the same
cores: the numbers compare the routes' overheads, not a speed-up.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ROUTES = ("jax-one", "jax-dataparallel", "tf-one", "tf-mirrored")


def run_one(route: str, devices: int, global_batch: int, samples: int, epochs: int) -> dict:
    """Train one route for 1 warm-up + `epochs` timed epochs; images/s of each timed epoch."""
    from mgtutor.devices import setup_devices

    backend = "jax" if route.startswith("jax") else "tensorflow"
    n = 1 if route.endswith("one") else devices
    setup_devices(n, backend=backend, verbose=False)
    import keras

    from mgtutor.data import load_dataset, one_hot, scale_images
    from mgtutor.models import build_seed_cnn
    from mgtutor.progress import Throughput

    data = load_dataset("cifar10").subset(samples)
    steps = len(data.x_train) // global_batch  # whole batches only: the same images on every route
    x = scale_images(data.x_train[: steps * global_batch])
    y = one_hot(data.y_train[: steps * global_batch], data.num_classes)
    if route == "jax-dataparallel":
        import jax

        scope = keras.distribution.DataParallel(devices=jax.devices()).scope()
    elif route == "tf-mirrored":
        from mgtutor.data_parallel import mirrored_strategy

        scope = mirrored_strategy().scope()
    else:
        import contextlib

        scope = contextlib.nullcontext()
    with scope:
        model = build_seed_cnn(seed=0, dropout=True)
        model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="categorical_crossentropy",
                      metrics=["accuracy"], jit_compile=backend == "jax")  # fmt: skip
        meter = Throughput(global_batch, verbose=False)
        model.fit(x, y, batch_size=global_batch, epochs=1 + epochs, shuffle=False, verbose=0,
                  callbacks=[meter])
    seconds = [entry["seconds"] for entry in meter.epochs]
    return {"route": route, "backend": backend, "devices": n, "global_batch": global_batch,
            "images_per_epoch": len(x), "warmup_seconds": round(seconds[0], 2),
            "images_per_s": [len(x) / s for s in seconds[1:]], "data": data.summary(),
            "load": os.getloadavg()[0]}  # fmt: skip


def run_all(args: argparse.Namespace) -> list[dict]:
    from mgtutor.support.processes import run_script

    results = []
    for round_ in range(args.rounds):
        order = args.routes if round_ % 2 == 0 else list(reversed(args.routes))
        for route in order:
            command = [sys.executable, __file__, "--child", route, "--devices", str(args.devices),
                       "--global-batch", str(args.global_batch), "--samples", str(args.samples),
                       "--epochs", str(args.epochs)]  # fmt: skip
            print(f"round {round_ + 1}: {route} ...", file=sys.stderr, flush=True)
            env = {"KERAS_BACKEND": "jax" if route.startswith("jax") else "tensorflow"}
            results.append(run_script(command, cwd=ROOT, stream=False, env=env).result)
    return results


def summarise(results: list[dict]) -> dict[str, dict]:
    """Per route: every repeat's images/s, their median and spread (max - min)."""
    table: dict[str, dict] = {}
    for r in results:
        entry = table.setdefault(r["route"], {"devices": r["devices"], "repeats": [], "load": []})
        entry["repeats"].extend(r["images_per_s"])
        entry["load"].append(r["load"])
    for entry in table.values():
        entry["median"] = statistics.median(entry["repeats"])
        entry["spread"] = max(entry["repeats"]) - min(entry["repeats"])
    return table


def report(results: list[dict]) -> str:
    table = summarise(results)
    first = results[0]
    lines = [f"data: {first['data']}; global batch {first['global_batch']}, "
             f"{first['images_per_epoch']} images per epoch", "",
             f"{'route':<17} {'devices':>7} {'repeats':>7} {'median img/s':>12} {'spread':>8} "
             f"{'load':>9}"]  # fmt: skip
    for route, e in table.items():
        load = f"{min(e['load']):.1f}-{max(e['load']):.1f}"
        lines.append(f"{route:<17} {e['devices']:>7} {len(e['repeats']):>7} {e['median']:>12.0f} "
                     f"{e['spread']:>8.0f} {load:>9}")  # fmt: skip
    if "tf-one" in table:
        lines.append("")
        base = table["tf-one"]
        for route, e in table.items():
            if route == "tf-one":
                continue
            gap = abs(e["median"] - base["median"])
            verdict = "a difference" if gap > max(e["spread"], base["spread"]) else "within the spread"
            lines.append(f"{route} / tf-one: {e['median'] / base['median']:.2f}x ({verdict})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", choices=ROUTES, help=argparse.SUPPRESS)
    parser.add_argument("--routes", nargs="+", choices=ROUTES, default=list(ROUTES))
    parser.add_argument("--devices", type=int, default=2, help="devices for the two data-parallel routes")
    parser.add_argument("--global-batch", type=int, default=64)
    parser.add_argument("--samples", type=int, default=2048, help="training images per epoch")
    parser.add_argument("--epochs", type=int, default=3, help="timed epochs after the warm-up one")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of every route, in alternating order")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    if args.devices < 1 or args.global_batch % args.devices:
        parser.error(f"--global-batch {args.global_batch} must split evenly over --devices {args.devices}")
    if args.child:
        sys.path.insert(0, str(ROOT))
        result = run_one(args.child, args.devices, args.global_batch, args.samples, args.epochs)
        from mgtutor.support.processes import report_result

        report_result(result)
        return
    results = run_all(args)
    print(report(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
