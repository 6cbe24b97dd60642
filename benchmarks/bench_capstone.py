"""Notebook 16's recipe, taken apart: what each trick adds, what airbench's other levers would add, and what
each kind of arithmetic costs. Run from the repository root::

    python benchmarks/bench_capstone.py ablations    # accuracy without each trick, at a reduced budget
    python benchmarks/bench_capstone.py levers       # accuracy with each of airbench's other levers
    python benchmarks/bench_capstone.py speed        # images/s of the step: precision, XLA, widths, sides
    python benchmarks/bench_capstone.py comparisons  # the seeds' recipes, for --minutes each

`ablations` and `levers` train the lesson's recipe (`mgtutor.training.capstone`, generated from the lesson) on
a balanced subset of `--train` CIFAR-10 images for `--epochs` epochs (the ones before the last
`--full-size-epochs` shrunk as the lesson's first epochs are, by its rule `epoch_sides`), `--repeats` times
with other seeds, the variants in turn, each tested on the whole test set; then the same with one thing
changed. `ablations` takes one trick out (the whitening bias's epochs too); `levers` adds one of airbench94's
that the lesson leaves out (PyTorch's initial scale of the weights, BatchNorm biases trained 64x faster, its
widths 64/256/256), or changes the batch or the number format. A difference counts only where it exceeds
the spread of the repeats; `--only NAME ...` runs just those variants beside the whole recipe. `--out FILE`
keeps each run as a JSON line, and a study started again with the same file skips the runs already there.
Accuracies do not depend on the load of the machine; the minutes shown do. `--precision` sets the recipe's
number format (the lesson picks the fastest).

`speed` times the training step on one batch of random images (after its first step, which traces and with
XLA compiles it, and a warm-up step), the variants interleaved `--repeats` times: float32 and mixed
bfloat16, each with and without XLA, at both widths and at the smaller sides of progressive resizing; the
network with Keras's `gelu` in place of the lesson's `float32_gelu` (each format and width, XLA off, timed
right after its pair; `--gelu-pairs`: those pairs alone); and one pass of the 10,000-image test set. Run it
on a quiet machine.

`comparisons` trains the seeds' recipes on the whole data set for `--minutes` of wall time each, epoch by
epoch, and tests after each epoch on the whole test set (the minutes include it): seed 000's CNN with RMSprop
1e-4 and batch 128, and seed 001's MiniGoogLeNet with SGD (momentum 0.9, 5e-3 falling linearly over its
published 70 epochs) and batch 64, both fed by the capstone's stream (flips and 2-pixel crops), without XLA
as the series trains them. An epoch is started only if the last one's time still fits. Run it quietly.

Every study first prints the date and the machine (the CPU's model and AMX/AVX-512 flags).
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# One change each from the lesson's recipe (`recipe_of`: its HYP and the switches only this benchmark turns).
ABLATIONS = {
    "whole recipe": {"views": True},
    "no whitening (a learnt first layer)": {"whitening": False},
    "no identity start": {"identity": False},
    "no label smoothing": {"label_smoothing": 0.0},
    "no warm-up (starts at the peak)": {"warmup_fraction": 0.0, "rate_start": 1.0},
    "random flips, not alternating": {"alternate": False},
    "no progressive resizing (every epoch at 32x32)": {"small_sizes": ()},
    "no lookahead": {"lookahead": False},
    "whitening bias frozen from the start": {"whitening_bias_epochs": 0},
}
LEVERS = {
    "whole recipe": {"views": True},
    "+ airbench's initial scale (PyTorch's)": {"initial_scale": "airbench"},
    "+ BatchNorm biases at 64x the rate": {"bias_boost": 64.0},
    "+ both": {"initial_scale": "airbench", "bias_boost": 64.0, "views": True},
    "+ airbench's widths 64/256/256": {"widths": (64, 256, 256), "views": True},
    "global batch 1024": {"batch_size": 1024},
    "float32 (the other number format)": {"precision": "other"},
}
SWITCHES = {"whitening": True, "identity": True, "alternate": True, "views": False, "bias_boost": 1.0,
            "initial_scale": "keras"}  # fmt: skip
PRECISIONS = ("float32", "mixed_bfloat16")
KERASS_GELU = ", Keras's gelu"  # the speed study's step with Keras's own gelu in place of float32_gelu


def recipe_of(options: dict) -> dict:
    """The lesson's recipe (`HYP`, from lesson 16) and this benchmark's switches; `options` over them."""
    from mgtutor.training.capstone import HYP

    return {**HYP, **SWITCHES, **options}


def _setup(devices: int):
    sys.path.insert(0, str(ROOT))
    import mgtutor

    mgtutor.setup_devices(devices, verbose=False)
    return mgtutor


def _header(study: str) -> None:
    from mgtutor.support.system import cpu, describe_cpu, machine

    facts = machine()
    versions = f"TensorFlow {facts['tensorflow']} + Keras {facts['keras']}"
    print(f"bench_capstone.py {study}, {datetime.now():%Y-%m-%d %H:%M}, {facts['cpu_count']} cores, "
          f"{describe_cpu(cpu())}, {versions}", flush=True)  # fmt: skip


def _airbench_levers(model, recipe: dict):
    """airbench94's levers the lesson leaves out, applied to a built model; its optimizer for them."""
    import keras

    from mgtutor.training.capstone import start_as_identity

    if recipe["initial_scale"] == "airbench":  # PyTorch's default: uniform, variance 1/(3 fan_in)
        start = keras.initializers.VarianceScaling(1 / 3, "fan_in", "uniform", seed=0)
        for layer in model.layers:
            if isinstance(layer, keras.layers.Conv2D | keras.layers.Dense) and layer.trainable:
                layer.kernel.assign(start(layer.kernel.shape))
        start_as_identity(model)
    boost = recipe["bias_boost"]

    class LeverSGD(keras.optimizers.SGD):  # BatchNorm's biases `boost`x faster
        def build(self, variables):
            self._boosted = {self._var_key(v) for v in variables if v.path.endswith("/beta")}
            super().build(variables)

        def update_step(self, gradient, variable, learning_rate):
            if self._var_key(variable) in self._boosted:
                learning_rate = learning_rate * boost
            super().update_step(gradient, variable, learning_rate)

    return LeverSGD


def train_variant(data, options: dict, epochs: int, seed: int, full_size_epochs: int, precision: str) -> dict:
    """One training run of the recipe with `options` changed; test accuracy plain and with test views."""
    import keras
    import numpy as np

    from mgtutor.data_parallel import mirrored_strategy
    from mgtutor.training.capstone import (
        TTA_WEIGHTS,
        build_capstone_cnn,
        channel_statistics,
        epoch_sides,
        evaluation_stream,
        standardize,
        train_recipe,
        training_stream,
        tta_view,
        whitening_filters,
    )

    # Before the stream: its shuffle's order follows the global seed too, which the first run in a process
    # would otherwise find unset and the later ones set (measured: the same seed gave 0.6109, then 0.6086).
    keras.utils.set_random_seed(seed)
    recipe = recipe_of({"epochs": epochs, "full_size_epochs": full_size_epochs, **options})
    if recipe.get("precision") == "other":
        recipe["precision"] = PRECISIONS[1 - PRECISIONS.index(precision)]
    keras.mixed_precision.set_global_policy(recipe.get("precision", precision))
    batch, stats = recipe["batch_size"], channel_statistics(data.x_train)
    sides = epoch_sides(epochs, recipe["full_size_epochs"], recipe["small_sizes"], data.input_shape[0])
    y_train, y_test = (keras.utils.to_categorical(y, data.num_classes) for y in (data.y_train, data.y_test))
    train = training_stream(data.x_train, y_train, batch, stats, seed=seed, sides=sides,
                            alternate=recipe["alternate"])  # fmt: skip
    test = evaluation_stream(data.x_test, y_test, 1000, stats)
    whitening = whitening_filters(standardize(data.x_train[: recipe["whitening_images"]], stats).numpy())
    with mirrored_strategy().scope():
        model = build_capstone_cnn(num_classes=data.num_classes, seed=seed, identity=recipe["identity"],
                                   whitening=whitening if recipe["whitening"] else None,
                                   widths=tuple(recipe["widths"]))  # fmt: skip
    optimizer = _airbench_levers(model, recipe)
    start = time.perf_counter()
    train_recipe(model, train, recipe, -(-len(data.x_train) // batch), optimizer=optimizer)
    minutes = (time.perf_counter() - start) / 60
    views = len(TTA_WEIGHTS) if recipe["views"] else 1
    logits = [weight * model.predict(test.map(functools.partial(tta_view, which=which)), verbose=0)
              for which, weight in enumerate(TTA_WEIGHTS[:views])]  # fmt: skip
    keras.mixed_precision.set_global_policy("float32")

    def accuracy(parts) -> float:
        return float(np.mean(sum(parts).argmax(axis=1) == data.y_test[:, 0]))

    return {"plain": accuracy(logits[:1]), "flips": accuracy(logits[:2]),
            "flips and shifts": accuracy(logits), "minutes": minutes}  # fmt: skip


def _done(out: Path | None, key: dict) -> dict[tuple[str, int], dict]:
    """The runs of this study and budget already in `out` (a JSON line each), by (variant, seed)."""
    if out is None or not out.exists():
        return {}
    runs = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    return {(r["variant"], r["seed"]): r for r in runs if all(r.get(k) == v for k, v in key.items())}


def accuracy_study(args, variants: dict[str, dict]) -> None:
    mgtutor = _setup(1)
    _header(args.study)
    data = mgtutor.load_dataset("cifar10", seed=0, full=True).subset(args.train, None, seed=0)
    print(data.summary())
    from mgtutor.training.capstone import HYP, epoch_sides

    sides = epoch_sides(args.epochs, args.full_size_epochs, HYP["small_sizes"], data.input_shape[0])
    print(f"{args.epochs} epochs of {len(data.y_train):,} images (sides {sides} unless said), batch "
          f"{HYP['batch_size']} unless said, "
          f"{args.precision}, XLA off; {args.repeats} repeats (seeds 0..{args.repeats - 1}), variants in "
          "turn", flush=True)  # fmt: skip
    key = {"study": args.study, "train": len(data.y_train), "epochs": args.epochs, "sides": sides,
           "precision": args.precision}  # fmt: skip
    out = Path(args.out) if args.out else None
    runs = _done(out, key)
    for seed in range(args.repeats):
        for name, options in variants.items():
            result = runs.get((name, seed))
            if result is None:
                result = train_variant(data, options, args.epochs, seed, args.full_size_epochs,
                                       args.precision)  # fmt: skip
                runs[name, seed] = result = {**key, "variant": name, "seed": seed, **result}
                if out is not None:
                    with out.open("a") as handle:
                        handle.write(json.dumps(result) + "\n")
            print(
                f"  seed {seed}  {name:47s} {result['plain']:.4f}  ({result['minutes']:.1f} min)", flush=True
            )
    _table(args.repeats, {name: [runs[name, seed] for seed in range(args.repeats)] for name in variants})


def _table(repeats: int, runs: dict[str, list[dict]]) -> None:
    whole = runs["whole recipe"]
    rows = [(name, [r["plain"] for r in results], [r["minutes"] for r in results])
            for name, results in runs.items()]  # fmt: skip
    rows += [("whole recipe + test flips", [r["flips"] for r in whole], []),
             ("whole recipe + test flips and shifts", [r["flips and shifts"] for r in whole], [])]
    base = statistics.median(r["plain"] for r in whole)
    base_spread = max(r["plain"] for r in whole) - min(r["plain"] for r in whole)
    print(
        f"\n| variant | test accuracy (median) | range over {repeats} seeds | vs whole recipe "
        "| training minutes (range) |"
    )
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
    from mgtutor.training.capstone import channel_statistics, evaluation_stream, training_stream

    stats = channel_statistics(data.x_train)
    y_train, y_test = (keras.utils.to_categorical(y, data.num_classes) for y in (data.y_train, data.y_test))
    train = training_stream(data.x_train, y_train, batch, stats, seed=0, alternate=False)
    test = evaluation_stream(data.x_test, y_test, 1000, stats)
    steps = -(-len(data.x_train) // batch)
    model = build_model(model_name, data.input_shape, data.num_classes, seed=0)
    if model_name == "seed_cnn":
        optimizer = seed_optimizer()
    else:  # seed 001's schedule: linear ("polynomial", power 1) from 5e-3 to 0 over 70 epochs
        rate = keras.optimizers.schedules.PolynomialDecay(5e-3, PUBLISHED_EPOCHS[model_name] * steps, 0.0)
        optimizer = keras.optimizers.SGD(rate, momentum=0.9)
    # Without XLA, as the series trains these models.
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
    _header("comparisons")
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
    print(
        "\n| recipe | minutes per epoch (median after the first) | test accuracy (minutes) "
        "| published epochs, projected here |"
    )
    print("| --- | --- | --- | --- |")
    print("\n".join(rows))


def with_kerass_gelu(model):
    """A copy of the lesson's network with Keras's own `gelu` where it has `float32_gelu`: the step before."""
    import keras

    from mgtutor.training.capstone import float32_gelu

    def swapped(layer):
        config = layer.get_config()
        if isinstance(layer, keras.layers.Activation) and layer.activation is float32_gelu:
            config["activation"] = "gelu"
        return layer.__class__.from_config(config)

    copy = keras.models.clone_model(model, clone_function=swapped)
    copy.set_weights(model.get_weights())
    return copy


def speed(args) -> None:
    _setup(args.devices)
    _header("speed")
    import keras
    import numpy as np
    import tensorflow as tf

    from mgtutor.data_parallel import mirrored_strategy
    from mgtutor.training.capstone import build_capstone_cnn, step_rate, whitening_filters

    strategy = mirrored_strategy()
    rng = np.random.default_rng(0)
    images = rng.normal(size=(args.batch, 32, 32, 3)).astype(np.float32)
    labels = np.eye(10, dtype=np.float32)[rng.integers(0, 10, args.batch)]
    test = rng.normal(size=(10_000, 32, 32, 3)).astype(np.float32)
    whitening = whitening_filters(images[:256])
    # (precision, XLA, widths, side, Keras's gelu); XLA at full size only, and not over logical devices (it
    # cannot compile the strategy's step there); right after each full-size step without XLA, the same with
    # Keras's gelu: the pair timed side by side
    variants = {
        f"{p}, XLA {'on' if x else 'off'}, {w[1]} wide, {s}x{s}{gelu}": (p, x, w, s, bool(gelu))
        for w in ((64, 128, 128), (64, 256, 256)) for p in PRECISIONS for x in (False, True)
        for s in (32, 24, 16) if (s == 32 or not x) and (args.devices == 1 or not x)
        for gelu in ("", KERASS_GELU) if not gelu or (s == 32 and not x)
        if not args.gelu_pairs or (s == 32 and not x)
    }  # fmt: skip
    rates: dict[str, list[float]] = {}
    for repeat in range(args.repeats):
        for name, (precision, xla, widths, side, kerass_gelu) in variants.items():

            def build(widths=widths, kerass_gelu=kerass_gelu):  # noqa: B023  (called at once, below)
                with strategy.scope():
                    model = build_capstone_cnn(whitening=whitening, widths=widths, seed=0)
                    return with_kerass_gelu(model) if kerass_gelu else model

            x = images if side == 32 else tf.image.resize(images, [side, side]).numpy()
            rates.setdefault(name, []).append(step_rate(build, x, labels, precision, xla, args.steps)[0])
            if side == 32 and not xla:  # one pass of the test set, forward only
                model = build()
                model.predict(test[:1000], batch_size=1000, verbose=0)
                started = time.perf_counter()
                model.predict(test, batch_size=1000, verbose=0)
                rates.setdefault(f"{precision}, {widths[1]} wide: test pass, seconds", []).append(
                    time.perf_counter() - started)  # fmt: skip
            print(f"  repeat {repeat}  {name:40s} {rates[name][-1]:6.0f} images/s", flush=True)
            keras.backend.clear_session()
    keras.mixed_precision.set_global_policy("float32")
    reference = "float32, XLA off, 128 wide, 32x32"
    base = statistics.median(rates[reference])
    print(
        f"\n{args.devices} device(s), global batch {args.batch}, {args.steps} steps x {args.repeats} repeats"
    )
    print(f"| step | images/s (median) | range | vs {reference} |")
    print("| --- | --- | --- | --- |")
    for name, values in rates.items():
        ratio = "" if "seconds" in name else f"x{statistics.median(values) / base:.2f}"
        print(f"| {name} | {statistics.median(values):.1f} | {min(values):.1f}-{max(values):.1f} | {ratio} |")
    print("\n| step | float32_gelu over Keras's gelu, each repeat's pair: median | range |")
    print("| --- | --- | --- |")
    for name in (name for name in rates if name.endswith(KERASS_GELU)):
        step = name.removesuffix(KERASS_GELU)
        pairs = [ours / theirs for ours, theirs in zip(rates[step], rates[name], strict=True)]
        print(f"| {step} | x{statistics.median(pairs):.2f} | {min(pairs):.2f}-{max(pairs):.2f} |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("study", choices=("ablations", "levers", "speed", "comparisons"))
    parser.add_argument("--train", type=int, default=10_000, help="training images (ablations, levers)")
    parser.add_argument("--epochs", type=int, default=8, help="epochs (ablations, levers)")
    parser.add_argument(
        "--full-size-epochs", type=int, default=8, help="the last, at 32x32 (ablations, levers)"
    )
    parser.add_argument("--precision", choices=PRECISIONS, default="mixed_bfloat16",
                        help="the recipe's number format (ablations, levers)")  # fmt: skip
    parser.add_argument(
        "--out", help="a JSON-lines file of runs to add to and resume from (ablations, levers)"
    )
    parser.add_argument("--only", nargs="+", metavar="VARIANT",
                        help="these variants, by name, beside the whole recipe (ablations, levers)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--batch", type=int, default=512, help="global batch (speed)")
    parser.add_argument("--steps", type=int, default=4, help="timed steps per repeat (speed)")
    parser.add_argument("--devices", type=int, default=1, help="logical devices (speed)")
    parser.add_argument(
        "--gelu-pairs", action="store_true", help="only the 32x32 steps, no XLA, beside Keras's gelu (speed)"
    )
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
    tables = {"ablations": ABLATIONS, "levers": LEVERS}
    if args.only and args.study not in tables:
        parser.error(f"--only names variants of ablations or levers, not of {args.study}")
    unknown = [name for name in args.only or [] if name not in tables.get(args.study, {})]
    if unknown:
        parser.error(f"--only: no variant {unknown[0]!r} in {args.study}; its variants: "
                     + "; ".join(tables[args.study]))  # fmt: skip
    variants = {name: options for name, options in tables.get(args.study, {}).items()
                if not args.only or name == "whole recipe" or name in args.only}  # fmt: skip
    study = functools.partial(accuracy_study, variants=variants) if args.study in tables else {
        "speed": speed, "comparisons": comparisons}[args.study]  # fmt: skip
    study(args)


if __name__ == "__main__":
    main()
