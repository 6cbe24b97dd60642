"""Lesson 14's study, with more repeats: pinned workers' speed-up, the honest baseline, the link.

    MGTUTOR_DATA_DIR=../shared/data .venv/bin/python benchmarks/bench_workers.py \
        [--models seed_cnn capstone_cnn] [--rounds 2] [--repeats 5] [--steps 10] [--link-max-mb 64] [--train]

The workers run lesson 14's own code: the ``%%writefile`` cells of notebooks/14_pinned_workers.ipynb
are written to a temporary folder, so the benchmark times exactly what the lesson shows. Each
configuration is one `launch` (n workers of one core each for n = 1, 2, 4, ... as this process's
cores allow, then one process with all their cores), every job starting from the same saved
weights; ``--rounds`` runs the whole set again, alternating the order, and pools the timed blocks,
so each spread covers the drift between jobs. For each network it prints strong and weak scaling
(images/s, the median and the range of the blocks, the speed-up bounded by both spreads and called
a difference only beyond them), the workers against one process with every core, the link's
latency and bandwidth fitted from the largest job's all-reduces (4 KB to --link-max-mb), and the
step lesson 11's model predicts from them beside the measured one. The capstone's network is
`mgtutor.training.capstone.build_capstone_cnn` (its whitening computed from the data). ``--train`` also
trains the lesson's recipe (the seed CNN, Adam) to --target on 1 and n one-core workers and one
process with their cores.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
LESSON = ROOT / "notebooks" / "14_pinned_workers.ipynb"


def write_worker(folder: Path) -> Path:
    """The lesson's worker files, from its ``%%writefile`` cells, into `folder`; the worker's path."""
    for cell in json.loads(LESSON.read_text())["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] != "code" or not source.startswith("%%writefile"):
            continue
        magic, body = source.split("\n", 1)
        words = magic.split()
        path = Path(words[-1].replace("{WORK}", str(folder)))
        with path.open("a" if "-a" in words else "w") as handle:
            handle.write(body + "\n")
    return folder / "worker.py"


def save_networks(names: list[str], folder: Path, args: argparse.Namespace) -> dict[str, tuple[Path, int]]:
    """Each network's starting weights as a .keras file (every job loads it), and its gradient's bytes."""
    from mgtutor import build_model, load_dataset, save_model
    from mgtutor.training.capstone import build_capstone_cnn, whitening_filters

    data = load_dataset("cifar10", args.data_path, seed=args.seed).subset(2000, 1, seed=args.seed)
    (x, _), _ = data.prepared(standardize=True)
    files = {}
    for name in names:
        model = (build_capstone_cnn((32, 32, 3), 10, whitening=whitening_filters(x), seed=args.seed)
                 if name == "capstone_cnn"
                 else build_model(name, (32, 32, 3), 10, seed=args.seed))  # fmt: skip
        files[name] = (
            folder / f"{name}.keras",
            4 * sum(int(v.numpy().size) for v in model.trainable_variables),
        )
        save_model(model, files[name][0])
    return files


def run_jobs(
    worker: Path, model_file: Path, counts: list[int], args: argparse.Namespace, train: bool
) -> dict:
    """Every configuration's worker-0 report, pooled over the rounds; `train`: the lesson's recipe too."""

    jobs = {f"{n} x 1 core": (n, 1) for n in counts} | {f"1 x {max(counts)} cores": (1, max(counts))}
    common = {"model_file": str(model_file), "dataset": "cifar10", "data_path": args.data_path,
              "seed": args.seed,
              "train_samples": args.train_samples, "test_samples": args.test_samples, "epochs": args.epochs,
              "learning_rate": 1e-3, "global_batch": args.global_batch, "repeats": args.repeats,
              "steps": args.steps,
              "link_sizes": [4096 * 4**k for k in range(12) if 4096 * 4**k <= 2**20 * args.link_max_mb],
              "traces": str(worker.parent / f"traces_{model_file.stem}")}  # fmt: skip
    pooled: dict = {}
    for round_ in range(args.rounds):
        order = list(jobs) if round_ % 2 == 0 else list(reversed(jobs))
        for name in order:
            n, cores = jobs[name]
            batches = {args.global_batch} | (
                {args.per_worker * n} if cores == 1 else {args.per_worker * max(counts)}
            )
            batches |= {args.global_batch // m for m in counts} if name == "1 x 1 core" else set()
            trains = train and round_ == 0 and (n in (1, max(counts)) or cores > 1)
            settings = {**common, "batches": sorted(batches), "train": trains}
            job = launch_retrying(worker, n, settings, cores, args)
            report = job.results[0]
            into = pooled.setdefault(name, {"seconds": {}, "parts": {}, "link": {}, "training": None})
            for key in ("seconds", "parts", "link"):
                for size, blocks in (report.get(key) or {}).items():
                    into[key].setdefault(size, []).extend(blocks)
            into["training"] = into["training"] or report.get("training")
            into["identical"] = len({r["digest"] for r in job.results}) == 1
            print(
                f"  round {round_ + 1}, {name}: {job.seconds:.0f} s, cores "
                f"{[r['cores'] for r in job.results]}",
                flush=True,
            )
    return pooled


def launch_retrying(worker: Path, n: int, settings: dict, cores: int, args: argparse.Namespace) -> Any:
    """One job; a job whose worker dies of a signal runs again, once, and says so.

    Measured on TF 2.21: the capstone's network (synchronized BatchNorm) under MultiWorkerMirroredStrategy
    sometimes aborts a worker with "free(): invalid pointer" (SIGABRT); cf. tensorflow#41113.
    """
    from mgtutor import launch
    from mgtutor.training.job_result import ClusterError

    for attempt in (1, 2):
        try:
            return launch(worker, n, args=[json.dumps(settings)], cores_per_worker=cores,
                          timeout=args.timeout, stream=False, check=True, cwd=worker.parent)  # fmt: skip
        except ClusterError as error:
            killed = [w for w in error.result.workers if w.returncode is not None and w.returncode < 0
                      and not w.stopped_by_launcher]  # fmt: skip
            if attempt == 2 or not killed:
                raise
            tail = killed[0].log_tail[-1] if killed[0].log_tail else ""
            print(f"  a worker died ({killed[0].status()}: {tail!r}); the job runs again", flush=True)
    raise AssertionError("unreachable")


def rates(job: dict, batch: int) -> list[float]:
    return sorted(batch / s for s in job["seconds"][str(batch)])


def versus(these: list[float], base: list[float]) -> tuple[float, float, float]:
    """Median ratio, bounded by the two spreads (slowest over fastest, and the reverse)."""
    return statistics.median(these) / statistics.median(base), these[0] / base[-1], these[-1] / base[0]


def verdict(low: float, high: float) -> str:
    return (
        "faster (beyond the spread)"
        if low > 1
        else "slower (beyond the spread)"
        if high < 1
        else "within the spread"
    )


def report_network(
    name: str, pooled: dict, counts: list[int], gradient_bytes: int, args: argparse.Namespace
) -> None:
    from mgtutor.speed.link import fit_link, ring_seconds

    one, most = pooled["1 x 1 core"], max(counts)
    print(
        f"\n{name}: images/s, median (range) over {args.rounds} round(s) x {args.repeats} blocks of "
        f"{args.steps} steps"
    )
    print(
        "| scaling | workers | global batch | images/s (range) | speed-up (bounds) | efficiency | reading |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for mode, batch_of in (("strong", lambda n: args.global_batch), ("weak", lambda n: args.per_worker * n)):
        for n in counts:
            measured = rates(pooled[f"{n} x 1 core"], batch_of(n))
            ratio, low, high = versus(measured, rates(one, batch_of(1)))
            print(
                f"| {mode} | {n} | {batch_of(n)} | {statistics.median(measured):,.0f} ({measured[0]:,.0f}-"
                f"{measured[-1]:,.0f}) | {ratio:.2f} ({low:.2f}-{high:.2f}) | {ratio / n:.0%} | "
                f"{verdict(low, high) if n > 1 else 'baseline'} |"
            )
    full = pooled[f"1 x {most} cores"]
    workers = pooled[f"{most} x 1 core"]
    ratio, low, high = versus(rates(workers, args.global_batch), rates(full, args.global_batch))
    print(
        f"\n{most} one-core workers / 1 process with {most} cores at global batch {args.global_batch}: "
        f"{ratio:.2f} ({low:.2f}-{high:.2f}), {verdict(low, high)}; process "
        f"{statistics.median(rates(full, args.global_batch)):,.0f} images/s"
    )
    sizes = sorted(int(s) for s in workers["link"])
    alpha, beta = fit_link(sizes, [statistics.median(workers["link"][str(s)]) for s in sizes])
    print(
        f"link between {most} workers: alpha {1e6 * alpha:.0f} us, beta {beta / 1e9:.3f} GB/s "
        f"(fit of {len(sizes)} sizes, {sizes[0] / 1024:.0f} KB to {sizes[-1] / 2**20:.0f} MB)"
    )
    for n in counts[1:]:
        compute = statistics.median(one["seconds"][str(args.global_batch // n)])
        measured = sorted(pooled[f"{n} x 1 core"]["seconds"][str(args.global_batch)])
        predicted = compute + ring_seconds(alpha, beta, gradient_bytes, n)
        print(
            f"{n} workers: predicted step {1000 * predicted:.1f} ms (compute {1000 * compute:.1f} + ring "
            f"{1000 * (predicted - compute):.1f}), measured {1000 * statistics.median(measured):.1f} ms "
            f"({1000 * measured[0]:.1f}-{1000 * measured[-1]:.1f}), error "
            f"{predicted / statistics.median(measured) - 1:+.0%}"
        )
    parts = {k: statistics.median(v) for k, v in workers["parts"].items()}
    step = statistics.median(workers["seconds"][str(args.global_batch)])
    print(
        f"parts of the {most}-worker step: compute {1000 * parts['compute']:.1f} ms, all-reduce "
        f"{1000 * parts['sync']:.1f} ms, whole step {1000 * step:.1f} ms (compute + all-reduce - step = "
        f"{1000 * (parts['compute'] + parts['sync'] - step):+.1f} ms)"
    )
    print("identical weights on every worker of each job:", all(job["identical"] for job in pooled.values()))
    for job_name, job in pooled.items():
        if job["training"]:
            points = list(zip(job["training"]["seconds"], job["training"]["accuracy"], strict=True))
            curve = ", ".join(f"{a:.3f} at {s / 60:.2f} min" for s, a in points)
            first = next((s / 60 for s, a in points if a >= args.target), None)
            print(
                f"training {job_name}: {curve}; "
                + (f"{args.target} at {first:.2f} min" if first else "target not reached")
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--models", nargs="+", default=["seed_cnn", "capstone_cnn"], choices=["seed_cnn", "capstone_cnn"]
    )
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--global-batch", type=int, default=128)
    parser.add_argument("--per-worker", type=int, default=128, help="weak scaling's batch per worker")
    parser.add_argument("--link-max-mb", type=int, default=64)
    parser.add_argument("--train", action="store_true", help="also time the seed CNN's training to --target")
    parser.add_argument("--target", type=float, default=0.4)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--train-samples", type=int, default=5000)
    parser.add_argument("--test-samples", type=int, default=1000)
    parser.add_argument("--data-path", default=None)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--timeout", type=float, default=3600)
    args = parser.parse_args(argv)
    from mgtutor.classroom.limits import lesson_plan

    plan = lesson_plan("14_pinned_workers", {
        "WORKER_COUNTS": None, "CORES_PER_WORKER": 1, "GLOBAL_BATCH": args.global_batch,
        "REPEATS": args.repeats,
        "BATCH_SIZE_PER_REPLICA": args.per_worker, "BENCH_STEPS": args.steps, "LINK_MAX_MB": args.link_max_mb,
        "TRAIN_SAMPLES": args.train_samples, "TEST_SAMPLES": args.test_samples, "EPOCHS": args.epochs,
        "TARGET_ACCURACY": args.target})  # fmt: skip
    counts = plan["worker_counts"]
    print(
        f"bench_workers: {platform.processor() or platform.machine()}, Python {sys.version.split()[0]}, "
        f"workers {counts} x 1 core and 1 process x {max(counts)} cores; started "
        f"{time.strftime('%Y-%m-%d %H:%M')}"
    )
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        worker = write_worker(work)
        files = save_networks(args.models, work, args)
        for name in args.models:
            path, gradient_bytes = files[name]
            pooled = run_jobs(worker, path, counts, args, train=args.train and name == "seed_cnn")
            report_network(name, pooled, counts, gradient_bytes, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
