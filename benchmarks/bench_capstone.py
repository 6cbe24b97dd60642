"""Notebook 16's recipe, taken apart: what each trick adds, and what each speed option costs.

Two studies, each in its own process (run from the repository root)::

    python benchmarks/bench_capstone.py ablations            # accuracy, at a reduced budget
    python benchmarks/bench_capstone.py speed                # images/s of the training step
    python benchmarks/bench_capstone.py speed --devices 2    # the same on 2 logical devices
    python benchmarks/bench_capstone.py comparisons          # the seeds' recipes, for --minutes each

`ablations` trains the whole recipe and, for each trick, the recipe without it, on a balanced
subset of `--train` CIFAR-10 images for `--epochs` epochs (all but the last `--full-size-epochs`
of them on images shrunk as the lesson's first epochs, by its rule `epoch_sides`: 24x24 for
one), `--repeats` times with other seeds, the variants in turn; each is tested on the whole test
set, and its training minutes are shown (the one variant whose point is time, not accuracy, is
progressive resizing). A difference counts only where it exceeds the spread of the repeats.
Test-time augmentation needs no training: it is read from the whole recipe's own models.
Accuracies do not depend on the load of the machine.

`speed` times the training step on one batch (after an untimed one that traces and compiles
it), the variants interleaved `--repeats` times: float32 and mixed bfloat16, with and without
XLA (without only, on several devices: XLA cannot compile the strategy's step over logical
devices), and at the smaller image sides of progressive resizing. Run it on a quiet machine.
`ablations` reads `MGTUTOR_DATA_DIR` like the tests (the synthetic stand-in without it); `speed`
trains on random images.

`comparisons` trains the seeds' recipes on the whole data set for `--minutes` of wall time each,
epoch by epoch, and tests after each epoch on the whole test set (the minutes include it), as
notebook 16 records its own curve: seed 000's CNN with RMSprop 1e-4 and batch 128, and seed
001's MiniGoogLeNet with SGD (momentum 0.9, 5e-3 falling linearly over its published 70 epochs)
and batch 64, both fed by the capstone's pipeline (flips and 2-pixel crops, not the seeds'
`ImageDataGenerator`), without XLA as the series trains them. An epoch is started only if the
last one's time still fits. Run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ABLATIONS = {
    "whole recipe": {"views": True},
    "no whitening (a learnt first layer)": {"whitening": False},
    "no identity start": {"identity": False},
    "no label smoothing": {"label_smoothing": 0.0},
    "no warm-up (starts at the peak)": {"warmup": False},
    "random flips, not alternating": {"alternate": False},
    "no progressive resizing (every epoch at 32x32)": {"sides": []},
    "no lookahead": {"lookahead": False},
}
SMALL_SIZES = [16, 24, 24, 24]  # the lesson's
SPEEDS = {  # precision, XLA, image side
    "float32, XLA": ("float32", True, 32),
    "float32, no XLA": ("float32", False, 32),
    "mixed bfloat16, XLA": ("mixed_bfloat16", True, 32),
    "mixed bfloat16, no XLA": ("mixed_bfloat16", False, 32),
    "float32, XLA, 24x24 images": ("float32", True, 24),
    "float32, XLA, 16x16 images": ("float32", True, 16),
}


def _setup(devices: int):
    sys.path.insert(0, str(ROOT))
    import mgtutor

    mgtutor.setup_devices(devices, verbose=False)
    return mgtutor


def train_variant(data, options: dict, epochs: int, batch: int, seed: int, sides: list[int] = ()) -> dict:
    """One training run of the recipe with `options` changed; test accuracy plain and with test views."""
    import keras
    import numpy as np

    from mgtutor.capstone import (
        TTA_WEIGHTS,
        build_capstone_cnn,
        capstone_pipeline,
        channel_statistics,
        lookahead,
        one_cycle,
        tta_view,
    )
    from mgtutor.data_parallel import mirrored_strategy

    stats = channel_statistics(data.x_train)
    y_train = keras.utils.to_categorical(data.y_train, data.num_classes)
    y_test = keras.utils.to_categorical(data.y_test, data.num_classes)
    train = capstone_pipeline(
        data.x_train, y_train, batch, stats, augment=True, seed=seed,
        alternate=options.get("alternate", True), sides=options.get("sides", sides),
    )
    test = capstone_pipeline(data.x_test, y_test, 1000, stats, augment=False)
    sample = (data.x_train[:2000].astype(np.float32) - stats[0]) / stats[1]
    whiten_with = sample if options.get("whitening", True) else None
    total = epochs * -(-len(data.x_train) // batch)
    warm = options.get("warmup", True)
    schedule = one_cycle(
        1.5 * batch / 1024, total, int(0.23 * total) if warm else 0, start=0.2 if warm else 1.0
    )
    with mirrored_strategy().scope():
        model = build_capstone_cnn(num_classes=data.num_classes, whiten_with=whiten_with, seed=seed,
                                   identity=options.get("identity", True))  # fmt: skip
        optimizer = keras.optimizers.SGD(schedule, momentum=0.85, nesterov=True, weight_decay=0.009)
        model.compile(optimizer=optimizer,
                      loss=keras.losses.CategoricalCrossentropy(
                          from_logits=True, label_smoothing=options.get("label_smoothing", 0.2)),
                      jit_compile=True)  # fmt: skip
    start = time.perf_counter()
    callbacks = [lookahead(total)] if options.get("lookahead", True) else []
    steps = -(-len(data.x_train) // batch)
    model.fit(train, epochs=epochs, steps_per_epoch=steps, verbose=0, callbacks=callbacks)
    minutes = (time.perf_counter() - start) / 60
    views = len(TTA_WEIGHTS) if options.get("views", False) else 1  # the whole recipe's only: 5 more passes
    logits = [
        weight * model.predict(test.map(functools.partial(tta_view, which=which)), verbose=0)
        for which, weight in enumerate(TTA_WEIGHTS[:views])
    ]
    truth = data.y_test[:, 0]

    def accuracy(parts) -> float:
        return float(np.mean(sum(parts).argmax(axis=1) == truth))

    return {"plain": accuracy(logits[:1]), "flips": accuracy(logits[:2]),
            "flips and shifts": accuracy(logits), "minutes": minutes}  # fmt: skip


def ablations(args) -> None:
    mgtutor = _setup(1)
    data = mgtutor.load_dataset("cifar10", seed=0, full=True).subset(args.train, None, seed=0)
    print(data.summary())
    from mgtutor.capstone import epoch_sides

    sides = epoch_sides(args.epochs, args.full_size_epochs, SMALL_SIZES, data.input_shape[0])
    print(f"{args.epochs} epochs of {len(data.y_train):,} images (sides {sides}), "
          f"batch {args.batch}; "
          f"{args.repeats} repeats (seeds 0..{args.repeats - 1}), variants in turn", flush=True)  # fmt: skip
    runs: dict[str, list[dict]] = {}
    for seed in range(args.repeats):
        for name, options in ABLATIONS.items():
            result = train_variant(data, options, args.epochs, args.batch, seed, sides)
            runs.setdefault(name, []).append(result)
            print(
                f"  seed {seed}  {name:47s} {result['plain']:.4f}  ({result['minutes']:.1f} min)", flush=True
            )
    whole = runs["whole recipe"]
    rows = [(name, [r["plain"] for r in results], [r["minutes"] for r in results])
            for name, results in runs.items()]  # fmt: skip
    rows += [("whole recipe + test flips", [r["flips"] for r in whole], []),
             ("whole recipe + test flips and shifts", [r["flips and shifts"] for r in whole], [])]
    base = statistics.median(r["plain"] for r in whole)
    base_spread = max(r["plain"] for r in whole) - min(r["plain"] for r in whole)
    print(f"\n| variant | test accuracy (median) | range over {args.repeats} seeds | vs whole recipe "
          "| training minutes (range) |")
    print("| --- | --- | --- | --- | --- |")
    for name, values, minutes in rows:
        median, spread = statistics.median(values), max(values) - min(values)
        delta = median - base
        verdict = "a difference" if abs(delta) > max(spread, base_spread) else "within the spread"
        took = f"{min(minutes):.1f}-{max(minutes):.1f}" if minutes else "(no training)"
        print(f"| {name} | {median:.4f} | {min(values):.4f}-{max(values):.4f} | {delta:+.4f} ({verdict}) "
              f"| {took} |")  # fmt: skip


SEED_RECIPES = {
    "seed 000: seed CNN, RMSprop 1e-4, batch 128": ("seed_cnn", 128),
    "seed 001: MiniGoogLeNet, SGD 5e-3 over 70 epochs, batch 64": ("minigooglenet", 64),
}
PUBLISHED_EPOCHS = {"minigooglenet": 70, "seed_cnn": 50}  # seed 001's 74m10s of 63 s epochs; seed 000's


def train_for_minutes(data, model_name: str, batch: int, minutes: float) -> list[dict]:
    """One seed's recipe, whole epochs while they fit in `minutes`; each epoch's minutes and test accuracy."""
    import keras

    from mgtutor import build_model, seed_optimizer
    from mgtutor.capstone import capstone_pipeline, channel_statistics

    stats = channel_statistics(data.x_train)
    y_train = keras.utils.to_categorical(data.y_train, data.num_classes)
    y_test = keras.utils.to_categorical(data.y_test, data.num_classes)
    train = capstone_pipeline(data.x_train, y_train, batch, stats, augment=True, seed=0, alternate=False)
    test = capstone_pipeline(data.x_test, y_test, 1000, stats, augment=False)
    steps = -(-len(data.x_train) // batch)
    model = build_model(model_name, data.input_shape, data.num_classes, seed=0)
    if model_name == "seed_cnn":
        optimizer = seed_optimizer()
    else:  # seed 001's schedule: linear ("polynomial", power 1) from 5e-3 to 0 over 70 epochs
        rate = keras.optimizers.schedules.PolynomialDecay(5e-3, PUBLISHED_EPOCHS[model_name] * steps, 0.0)
        optimizer = keras.optimizers.SGD(rate, momentum=0.9)
    # Without XLA, as the series trains these models: seed 000's CNN took 6.1 min for its first epoch
    # of the whole set with XLA here, 2.0 min without (one run each, 2026-11-26, quiet).
    model.compile(optimizer=optimizer, loss="categorical_crossentropy", metrics=["accuracy"],
                  jit_compile=False)  # fmt: skip
    curve: list[dict] = []

    class Budget(keras.callbacks.Callback):  # after each epoch: its point; stop if another would not fit
        def on_train_begin(self, logs=None):
            self.start = self.began = time.perf_counter()

        def on_epoch_begin(self, epoch, logs=None):
            self.began = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            now = time.perf_counter()
            point = {"epoch": epoch + 1, "minutes": (now - self.start) / 60,
                     "epoch_minutes": (now - self.began) / 60,
                     "accuracy": float(logs["val_accuracy"])}  # fmt: skip
            curve.append(point)
            print(f"    epoch {epoch + 1}: {point['accuracy']:.4f} after {point['minutes']:.1f} min",
                  flush=True)  # fmt: skip
            self.model.stop_training = (now - self.start) + (now - self.began) > 60 * minutes

    model.fit(train, epochs=10_000, steps_per_epoch=steps, validation_data=test, verbose=0,
              callbacks=[Budget()])  # fmt: skip
    return curve


def comparisons(args) -> None:
    mgtutor = _setup(1)
    data = mgtutor.load_dataset("cifar10", seed=0, full=True).subset(args.train_all, None, seed=0)
    print(data.summary())
    print(f"each recipe for whole epochs within {args.minutes:g} min, tested on all {len(data.y_test):,} "
          "after each epoch", flush=True)  # fmt: skip
    rows = []
    for name, (model_name, batch) in SEED_RECIPES.items():
        print(f"  {name}", flush=True)
        curve = train_for_minutes(data, model_name, batch, args.minutes)
        # the first epoch also traces and compiles
        later = [p["epoch_minutes"] for p in curve[1:]] or [curve[0]["epoch_minutes"]]
        per_epoch = statistics.median(later)
        points = ", ".join(f"{p['accuracy']:.3f} ({p['minutes']:.1f})" for p in curve)
        epochs = PUBLISHED_EPOCHS[model_name]
        rows.append(f"| {name} | {per_epoch:.2f} | {points} | {epochs}: {epochs * per_epoch / 60:.1f} h |")
    print("\n| recipe | minutes per epoch (median after the first) | test accuracy (minutes) "
          "| published epochs, projected here |")
    print("| --- | --- | --- | --- |")
    print("\n".join(rows))


def speed(args) -> None:
    _setup(args.devices)
    import keras
    import numpy as np

    from mgtutor.capstone import build_capstone_cnn
    from mgtutor.data_parallel import mirrored_strategy

    strategy = mirrored_strategy()
    rng = np.random.default_rng(0)
    images = rng.normal(size=(args.batch, 32, 32, 3)).astype(np.float32)
    y = np.eye(10, dtype=np.float32)[rng.integers(0, 10, args.batch)]

    rates: dict[str, list[float]] = {}
    # XLA cannot compile a MirroredStrategy step over logical devices (notebook 16 refuses it too).
    variants = {name: v for name, v in SPEEDS.items() if args.devices == 1 or not v[1]}
    for repeat in range(args.repeats):
        for name, (policy, xla, side) in variants.items():
            keras.mixed_precision.set_global_policy(policy)
            x = images[:, :side, :side]  # the step's cost depends on the side only, not on the pixels
            with strategy.scope():
                model = build_capstone_cnn(whiten_with=images[:256], seed=0)
                model.compile(optimizer=keras.optimizers.SGD(0.01), jit_compile=xla,
                              loss=keras.losses.CategoricalCrossentropy(from_logits=True))  # fmt: skip
            model.train_on_batch(x, y)  # traces and compiles
            start = time.perf_counter()
            for _ in range(args.steps):
                model.train_on_batch(x, y)
            rates.setdefault(name, []).append(args.steps * args.batch / (time.perf_counter() - start))
            print(f"  repeat {repeat}  {name:24s} {rates[name][-1]:6.0f} images/s", flush=True)
            keras.backend.clear_session()
    keras.mixed_precision.set_global_policy("float32")
    reference = "float32, XLA" if args.devices == 1 else "float32, no XLA"
    base = statistics.median(rates[reference])
    print(
        f"\n{args.devices} device(s), global batch {args.batch}, {args.steps} steps x {args.repeats} repeats"
    )
    print(f"| step | images/s (median) | range | vs {reference} |")
    print("| --- | --- | --- | --- |")
    for name, values in rates.items():
        print(f"| {name} | {statistics.median(values):.0f} | {min(values):.0f}-{max(values):.0f} | "
              f"x{statistics.median(values) / base:.2f} |")  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("study", choices=("ablations", "speed", "comparisons"))
    parser.add_argument("--train", type=int, default=8_000, help="training images (ablations)")
    parser.add_argument("--epochs", type=int, default=3, help="epochs (ablations)")
    parser.add_argument("--full-size-epochs", type=int, default=2, help="the last, at 32x32 (ablations)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--batch", type=int, default=512, help="global batch, as the lesson's")
    parser.add_argument("--steps", type=int, default=4, help="timed steps per repeat (speed)")
    parser.add_argument("--devices", type=int, default=1, help="logical devices (speed)")
    parser.add_argument("--minutes", type=float, default=10.0, help="wall time per recipe (comparisons)")
    parser.add_argument("--train-all", type=int, default=None, help=argparse.SUPPRESS)  # tests: fewer images
    args = parser.parse_args(argv)
    for name in ("train", "epochs", "repeats", "batch", "steps", "devices"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    if args.full_size_epochs < 0:
        parser.error(f"--full-size-epochs must be >= 0, got {args.full_size_epochs}")
    if args.batch % args.devices:
        parser.error(f"--batch {args.batch} must split evenly over --devices {args.devices}")
    if args.minutes <= 0:
        parser.error(f"--minutes must be > 0, got {args.minutes}")
    {"ablations": ablations, "speed": speed, "comparisons": comparisons}[args.study](args)


if __name__ == "__main__":
    main()
