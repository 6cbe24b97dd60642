"""The peer, measured beside us: airbench94's own code and lesson 16's recipe, on the same CPU and the same
data, one run after the other (issue 56). Run from the repository root, with nothing else running::

    python benchmarks/bench_peer.py            # 2 seeds each side at full budget (each run its whole recipe)
    python benchmarks/bench_peer.py --quick    # 2,048 images, 1 epoch each side: the harness end to end

**The peer's code** is the `airbench` package from PyPI (PEER_PACKAGES), installed with PyTorch's CPU build
into a virtual environment of its own (`--peer-env`, made on first use): never a dependency of mgtutor, and
none of its code is kept in this repository. It is written for a CUDA GPU. Each run copies the installed
package to a temporary folder and applies PATCH there, the smallest change that runs it on a CPU, each
replacement required to match exactly once (another version fails loudly, naming it): its data loaded to
the CPU instead of GPU 0; its number format, half precision, replaced by the one measured fastest here
(float32 or bfloat16); its network on the CPU; its CUDA timing events replaced by a wall clock. Everything
else is its own: network, `hyp`, schedule, alternating flips, crops, whitening, lookahead, test views.

**Ours** is lesson 16's recipe as the package holds it (`HYP` and `train_recipe`, generated from the
lesson): `--recipe long` is `make capstone-long`'s (CAPSTONE_LONG), `--recipe lesson` `make capstone`'s.

**The data**: the same arrays for both, `load_dataset("cifar10", full=True)` (with MGTUTOR_DATA_DIR set,
its whole CIFAR-10: on these machines the JPEG-once copy), written once to a temporary file that each side
reads (the peer's loader as its `train.pt` and `test.pt`).

**The arithmetic**: each side first times a few training steps of its network in float32 and in bfloat16
(ours also with and without XLA, as the lesson does), the choices in turn, a warm-up round then 3 timed
(`--quick`: 1, and XLA off), and trains in the fastest.

**What it prints**: each run's test accuracy after its last epoch (plain) and with its test views
(airbench's own `tta_level=2`; ours the lesson's six views), and its minutes of training (tests after each
epoch left out, on both sides). Then, seed by seed, two ratios with their median and range: our minutes
to reach the peer's final plain accuracy over the peer's minutes (our curve between epochs read linearly;
"not reached" if it never does), and our plain accuracy at the peer's training minutes less the peer's.
Every figure holds for the machine named in the first line only.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
AIRBENCH = "0.1.8"  # the version PATCH is written against
PEER_PACKAGES = ["torch==2.13.0", f"airbench=={AIRBENCH}", "numpy"]
PEER_ENV = Path.home() / ".cache" / "mgtutor" / "peer-env"
# (file, the peer's text, ours): the whole change that runs airbench94 on a CPU.
PATCH = [
    ("utils.py", "data = torch.load(data_path, map_location=torch.device(gpu))",
     "data = torch.load(data_path, map_location='cpu')"),  # its data on the CPU, not GPU 0
    ("utils.py", "self.images = (self.images.half() / 255)",
     "self.images = (self.images.to(CPU_DTYPE) / 255)"),  # the number format measured fastest, not fp16
    ("lib_airbench94.py", "net = net.half().cuda()", "net = net.to(CPU_DTYPE)"),  # the same, on the CPU
    ("utils.py", "starter = torch.cuda.Event(enable_timing=True)", "starter = WallClock()"),  # no CUDA timers
    ("utils.py", "ender = torch.cuda.Event(enable_timing=True)", "ender = WallClock()"),
]
SYNCHRONIZE = ("utils.py", "torch.cuda.synchronize()", "pass")  # every occurrence: a CPU computes in order
# airbench's loader imports torchvision for `transforms.Normalize` (and a CIFAR-10 download it does not need
# here); PyPI's torchvision is linked to PyTorch's CUDA build and does not load beside the CPU build, so a
# stand-in, made beside the patched copy, gives torchvision's Normalize on a tensor: (x - mean) / std, each
# channel.
TORCHVISION = {
    "__init__.py": "from . import datasets, transforms  # noqa: F401\n",
    "transforms.py": (
        "import torch\n\n\nclass Normalize:\n    def __init__(self, mean, std):\n"
        "        self.mean, self.std = mean, std\n\n    def __call__(self, x):\n"
        "        mean = torch.as_tensor(self.mean, dtype=x.dtype, device=x.device).view(-1, 1, 1)\n"
        "        std = torch.as_tensor(self.std, dtype=x.dtype, device=x.device).view(-1, 1, 1)\n"
        "        return (x - mean) / std\n"
    ),
    "datasets.py": "def CIFAR10(*args, **kwargs):\n    raise RuntimeError('no download: cifar10/*.pt')\n",
}
FORMATS = ("float32", "bfloat16")
QUICK = {"train": 2048, "test": 1000, "epochs": 1, "rounds": 1}  # rounds: timed steps of each format


def _patched_airbench(folder: Path):
    """The installed airbench, copied into `folder` and patched (PATCH), imported; the patch as applied."""
    import importlib.util

    source = Path(importlib.util.find_spec("airbench").origin).parent
    target = folder / "airbench"
    shutil.copytree(source, target)
    applied = []
    for name, old, new in PATCH:
        text = (target / name).read_text()
        if text.count(old) != 1:
            raise SystemExit(f"the patch expects {old!r} once in airbench/{name}, found it {text.count(old)} "
                             f"times: not airbench {AIRBENCH}? Make --peer-env anew.")
        (target / name).write_text(text.replace(old, new))
        applied.append(f"airbench/{name}: {old}  ->  {new}")
    name, old, new = SYNCHRONIZE
    text = (target / name).read_text()
    (target / name).write_text(text.replace(old, new))
    applied.append(f"airbench/{name}: {old}  ->  {new} ({text.count(old)} places)")
    (folder / "torchvision").mkdir()
    for name, text in TORCHVISION.items():
        (folder / "torchvision" / name).write_text(text)
    applied.append("torchvision: a stand-in with transforms.Normalize alone (TORCHVISION)")
    sys.path.insert(0, str(folder))
    import airbench
    import airbench.lib_airbench94
    import airbench.utils

    class WallClock:  # what the patched timers call: CUDA events' record and elapsed_time (ms), on a CPU
        def record(self):
            self.at = time.perf_counter()

        def elapsed_time(self, end) -> float:
            return 1e3 * (end.at - self.at)

    airbench.utils.WallClock = WallClock
    return airbench, applied


def _peer_format(airbench, torch, name: str) -> None:
    dtype = getattr(torch, name)
    airbench.utils.CPU_DTYPE = airbench.lib_airbench94.CPU_DTYPE = dtype


def _peer_race(airbench, torch, images, labels, rounds: int = 3) -> dict[str, float]:
    """Images/s of airbench94's training step (its net, loss, optimizer kind) in each format, in turn."""
    import torch.nn.functional as F  # noqa: N812

    nets = {}
    for name in FORMATS:
        _peer_format(airbench, torch, name)
        net = airbench.make_net94()
        nets[name] = (net, torch.optim.SGD([p for p in net.parameters() if p.requires_grad], lr=1e-3,
                                           momentum=0.85, nesterov=True))  # fmt: skip
    batch = images.to(memory_format=torch.channels_last)

    def step(name: str) -> float:
        net, optimizer = nets[name]
        started = time.perf_counter()
        loss = F.cross_entropy(net(batch.to(getattr(torch, name))), labels, label_smoothing=0.2).sum()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return len(batch) / (time.perf_counter() - started)

    rates: dict[str, list[float]] = {name: [] for name in FORMATS}
    for round_ in range(rounds + 1):  # the first round warms up
        for name in FORMATS:
            rate = step(name)
            if round_:
                rates[name].append(rate)
    return {name: statistics.median(each) for name, each in rates.items()}


def peer_child(args) -> dict:
    """One run of airbench94's own `train94`, patched for a CPU, on the arrays in args.data."""
    import numpy as np
    import torch

    work = Path(tempfile.mkdtemp(prefix="peer-"))
    arrays = np.load(args.data)
    (work / "cifar10").mkdir()
    for split in ("train", "test"):  # its loader's own files, from the same arrays as ours
        torch.save({"images": torch.tensor(arrays[f"x_{split}"]), "classes": [str(i) for i in range(10)],
                    "labels": torch.tensor(arrays[f"y_{split}"][:, 0].astype(np.int64))},
                   work / "cifar10" / f"{split}.pt")  # fmt: skip
    airbench, applied = _patched_airbench(work)
    os.chdir(work)  # its loaders read ./cifar10
    _peer_format(airbench, torch, "float32")
    loader = airbench.CifarLoader("cifar10", train=True)  # its own normalisation, for the timed batch
    batch = airbench.lib_airbench94.hyp["opt"]["batch_size"]
    rates = _peer_race(airbench, torch, loader.normalize(loader.images[:batch]), loader.labels[:batch],
                       args.rounds)  # fmt: skip
    fastest = max(rates, key=rates.get)
    _peer_format(airbench, torch, fastest)
    torch.manual_seed(args.seed)
    table = io.StringIO()
    epochs = airbench.lib_airbench94.hyp["opt"]["train_epochs"] if args.epochs is None else args.epochs
    with contextlib.redirect_stdout(table):
        airbench.train94(epochs=epochs, verbose=True)
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in table.getvalue().splitlines()
            if line.startswith("|")]  # fmt: skip
    header, body = rows[0], rows[1:]
    column = {name: header.index(name) for name in ("epoch", "val_acc", "tta_val_acc", "total_time_seconds")}
    epochs_run = [row for row in body if row[column["epoch"]].isdigit()]
    curve = [{"epoch": int(row[column["epoch"]]) + 1, "accuracy": float(row[column["val_acc"]]),
              "minutes": float(row[column["total_time_seconds"]]) / 60} for row in epochs_run]  # fmt: skip
    final = next(row for row in body if row[column["epoch"]] == "eval")
    return {"side": "peer", "seed": args.seed, "format": fastest, "rates": rates, "epochs": epochs,
            "curve": curve, "plain": curve[-1]["accuracy"], "views": float(final[column["tta_val_acc"]]),
            "minutes": curve[-1]["minutes"], "patch": applied, "torch": torch.__version__}  # fmt: skip


def ours_child(args) -> dict:
    """One run of lesson 16's recipe (`train_recipe` with `HYP`, or CAPSTONE_LONG over it) on args.data."""
    sys.path.insert(0, str(ROOT))
    import mgtutor

    mgtutor.setup_devices(1, verbose=False)
    import functools

    import keras
    import numpy as np

    from mgtutor.classroom.runner import CAPSTONE_LONG
    from mgtutor.data_parallel import mirrored_strategy
    from mgtutor.training.capstone import (
        HYP,
        TTA_WEIGHTS,
        build_capstone_cnn,
        channel_statistics,
        compile_for_training,
        epoch_sides,
        evaluation_stream,
        race_arithmetic,
        standardize,
        train_recipe,
        training_stream,
        tta_view,
        whitening_filters,
    )

    arrays = np.load(args.data)
    x_train, x_test, labels = arrays["x_train"], arrays["x_test"], arrays["y_test"][:, 0]
    long = {name.lower(): value for name, value in CAPSTONE_LONG.items() if name.lower() in HYP}
    hyp = {**HYP, **(long if args.recipe == "long" else {})}
    hyp = {**hyp, **({"epochs": int(args.epochs)} if args.epochs is not None else {})}
    keras.utils.set_random_seed(args.seed)  # before the stream: its shuffle follows the global seed too
    stats = channel_statistics(x_train)
    y_train, y_test = (keras.utils.to_categorical(arrays[f"y_{s}"], 10) for s in ("train", "test"))
    sides = epoch_sides(hyp["epochs"], hyp["full_size_epochs"], hyp["small_sizes"], x_train.shape[1])
    train = training_stream(x_train, y_train, hyp["batch_size"], stats, seed=args.seed, sides=sides)
    test = evaluation_stream(x_test, y_test, 1000, stats)
    whitening = whitening_filters(standardize(x_train[: hyp["whitening_images"]], stats).numpy())
    strategy = mirrored_strategy()

    def build() -> keras.Model:
        with strategy.scope():
            return build_capstone_cnn(whitening=whitening, widths=tuple(hyp["widths"]), seed=args.seed)

    probe = standardize(x_train[: hyp["batch_size"]], stats), y_train[: hyp["batch_size"]]
    compilers = (False,) if args.no_xla else (False, True)
    choices = [(p, x) for p in ("float32", "mixed_bfloat16") for x in compilers]
    compile_model = functools.partial(compile_for_training, hyp=hyp)
    timed = race_arithmetic(build, *probe, choices, args.rounds, compile_model=compile_model)
    (precision, xla), _ = max(timed.items(), key=lambda item: item[1][0])
    keras.mixed_precision.set_global_policy(precision)
    model = build()
    keras.utils.set_random_seed(args.seed)
    clock = TrainingClock()
    train_recipe(model, train, hyp, -(-len(x_train) // hyp["batch_size"]), xla=xla, validation_data=test,
                 then=[clock])  # fmt: skip
    logits = [weight * model.predict(test.map(functools.partial(tta_view, which=which)), verbose=0)
              for which, weight in enumerate(TTA_WEIGHTS)]  # fmt: skip
    keras.mixed_precision.set_global_policy("float32")
    views = float(np.mean(sum(logits).argmax(axis=1) == labels))
    return {"side": "ours", "seed": args.seed, "format": f"{precision}, XLA {'on' if xla else 'off'}",
            "rates": {f"{p}, XLA {'on' if x else 'off'}": r for (p, x), (r, _, _) in timed.items()},
            "epochs": hyp["epochs"], "curve": clock.curve, "plain": clock.curve[-1]["accuracy"],
            "views": views,
            "minutes": clock.curve[-1]["minutes"], "recipe": args.recipe}  # fmt: skip


def TrainingClock():  # noqa: N802  (a Keras callback class, made where Keras is imported)
    """Minutes of training after each epoch, its tests left out (as airbench times itself), and accuracy."""
    import keras

    class Clock(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.curve, self.seconds, self.since = [], 0.0, None

        def on_train_batch_begin(self, batch, logs=None):
            self.since = self.since or time.perf_counter()

        def on_test_begin(self, logs=None):
            self.seconds += time.perf_counter() - self.since
            self.since = None

        def on_epoch_end(self, epoch, logs=None):
            self.curve.append({"epoch": epoch + 1, "minutes": self.seconds / 60,
                               "accuracy": float(logs["val_accuracy"])})  # fmt: skip

    return Clock()


def along(curve: list[dict], given: str, value: float, wanted: str) -> float | None:
    """`wanted` where `curve` (from 0 minutes at chance, 0.1) first reaches `value` of `given`, linear
    between its epochs; None if it never does."""
    before = {"minutes": 0.0, "accuracy": 0.1}
    for point in curve:
        if point[given] >= value:
            share = (value - before[given]) / max(point[given] - before[given], 1e-12)
            return before[wanted] + share * (point[wanted] - before[wanted])
        before = point
    return None


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} ({min(values):.3f} to {max(values):.3f})"


def _peer_python(env: Path) -> Path:
    """The peer's Python, its environment made with PEER_PACKAGES if it has none."""
    python = env / "bin" / "python"
    if not python.exists():
        print(f"making the peer's environment in {env}: {' '.join(PEER_PACKAGES)}", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(env)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", *PEER_PACKAGES], check=True)
    return python


def _run(python: Path, side: str, args, seed: int, data: Path) -> dict:
    command = [str(python), str(Path(__file__).resolve()), "--child", side, "--seed", str(seed),
               "--data", str(data), "--recipe", args.recipe]  # fmt: skip
    command += (["--epochs", str(args.epochs)] if args.epochs is not None else []) + (
        ["--no-xla", "--rounds", str(QUICK["rounds"])] if args.quick else [])
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONWARNINGS": "ignore"}
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode:
        raise SystemExit(f"the {side} run, seed {seed}, failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def compare(args) -> None:
    sys.path.insert(0, str(ROOT))
    import numpy as np

    import mgtutor
    from mgtutor.support.system import cpu, describe_cpu, machine

    facts = machine()
    print(f"bench_peer.py, {datetime.now():%Y-%m-%d %H:%M}, {facts['cpu_count']} cores, "
          f"{describe_cpu(cpu())}, "
          f"TensorFlow {facts['tensorflow']} + Keras {facts['keras']}", flush=True)  # fmt: skip
    python = _peer_python(Path(args.peer_env))
    data = mgtutor.load_dataset("cifar10", seed=0, full=True).subset(args.train, args.test, seed=0)
    print(data.summary(), flush=True)
    folder = Path(tempfile.mkdtemp(prefix="bench-peer-"))
    path = folder / "data.npz"
    np.savez(path, x_train=data.x_train, y_train=data.y_train, x_test=data.x_test, y_test=data.y_test)
    runs: dict[str, list[dict]] = {"peer": [], "ours": []}
    for seed in range(args.seeds):
        for side in ("peer", "ours"):
            result = _run(python if side == "peer" else Path(sys.executable), side, args, seed, path)
            runs[side].append(result)
            rates = ", ".join(f"{name} {rate:,.0f}" for name, rate in result["rates"].items())
            print(f"  {side:4s} seed {seed}: {result['plain']:.4f} plain, {result['views']:.4f} with views, "
                  f"{result['minutes']:.2f} min of training, {result['epochs']:g} epochs, in "
                  f"{result['format']} "
                  f"(images/s: {rates})", flush=True)  # fmt: skip
    shutil.rmtree(folder)
    if args.out:
        write_runs(Path(args.out), runs)
    print("\nthe peer's patch, as applied:\n  " + "\n  ".join(runs["peer"][0]["patch"]))
    _ratios(runs)


def write_runs(path: Path, runs: dict[str, list[dict]]) -> None:
    """Each run as a JSON line (side, seed, its figures and its curve), written whole or not at all."""
    lines = [json.dumps({"side": side, "seed": seed, **run})
             for side in runs for seed, run in enumerate(runs[side])]  # fmt: skip
    partial = path.with_name(path.name + ".partial")
    partial.write_text("\n".join(lines) + "\n")
    os.replace(partial, path)
    print(f"each run, its curve included: {path}", flush=True)


def _ratios(runs: dict[str, list[dict]]) -> None:
    times, gains, missed = [], [], 0
    for peer, ours in zip(runs["peer"], runs["ours"], strict=True):
        took = along(ours["curve"], "accuracy", peer["plain"], "minutes")
        missed += took is None
        times += [took / peer["minutes"]] if took is not None else []
        at = along(ours["curve"], "minutes", peer["minutes"], "accuracy")  # None: ours ended sooner
        gains.append((ours["plain"] if at is None else at) - peer["plain"])
    seeds = len(runs["peer"])
    print(f"\n| over {seeds} seeds | median (range) |\n| --- | --- |")
    print("| minutes to the peer's final plain accuracy, ours / the peer's | "
          + (_spread(times) if times else "-")
          + (f"; not reached in {missed} of {seeds}" if missed else "") + " |")
    print(f"| plain accuracy at the peer's training minutes, ours - the peer's | {_spread(gains)} |")
    for key in ("plain", "views", "minutes"):
        peer, ours = ([r[key] for r in runs[side]] for side in ("peer", "ours"))
        print(f"| {key}: the peer {_spread(peer)}, ours {_spread(ours)} | ours - the peer's: "
              f"{statistics.median(ours) - statistics.median(peer):+.3f} |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help=f"{QUICK['train']:,} images, {QUICK['epochs']} "
                        "epoch each side, XLA not timed: the harness end to end in minutes")  # fmt: skip
    parser.add_argument("--seeds", type=int, default=2, help="runs each side, seeds 0.. (default 2)")
    parser.add_argument("--recipe", choices=("long", "lesson"), default="long",
                        help="ours: make capstone-long's (default) or make capstone's")  # fmt: skip
    parser.add_argument("--peer-env", default=str(PEER_ENV),
                        help=f"the peer's environment, made if missing (default {PEER_ENV})")
    parser.add_argument("--out", help="also write each run, its curve included, as a JSON line to this file")
    parser.add_argument("--child", choices=("peer", "ours"), help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    parser.add_argument("--epochs", type=float, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--no-xla", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.seeds < 1:
        parser.error(f"--seeds must be >= 1, got {args.seeds}")
    if args.out and not Path(args.out).resolve().parent.is_dir():
        parser.error(f"--out: the folder of {args.out} does not exist; make it first, or name a file in "
                     "one that does")  # fmt: skip
    if args.child:
        child = peer_child if args.child == "peer" else ours_child
        print(json.dumps(child(args)))
        return
    args.train, args.test = (QUICK["train"], QUICK["test"]) if args.quick else (None, None)
    args.epochs = QUICK["epochs"] if args.quick else None
    compare(args)


if __name__ == "__main__":
    main()
