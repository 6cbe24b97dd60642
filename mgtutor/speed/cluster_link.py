"""The link between the two Slurm nodes, measured: all-reduce seconds against size, fit to alpha, beta.

On the cluster of `mgtutor.training.slurm` (node1 and node2, one veth pair), one task per node
all-reduces float32 tensors of each size with TensorFlow's MultiWorkerMirroredStrategy (found by
SlurmClusterResolver), repeats, and the median per size goes to `mgtutor.speed.link.fit_link`::

    with slurm.start_cluster() as cluster:
        for rate in (None, "10gbit", "1gbit", "100mbit"):
            print(rate, sweep(cluster, rate))

Run under srun, ``python -m mgtutor.speed.cluster_link task SIZES REPEATS`` is one task; rank 0
prints one JSON line {size: median seconds}. TensorFlow is imported only there.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from mgtutor.speed.link import fit_link, ring_seconds

SIZES = tuple(4096 * 4**k for k in range(7))  # 4 KB ... 16 MB
PORT_BASE = 23500


def task(sizes: Sequence[int], repeats: int) -> dict[int, float]:
    """One worker's part (in a Slurm step of one task per node): {bytes: median seconds per all-reduce}."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf

    # Without GPUs the resolver must be told there is one "GPU" slot per task and not to set
    # CUDA_VISIBLE_DEVICES; left to itself it runs nvidia-smi and fails (tensorflow#51760).
    per_node = int(os.environ.get("SLURM_NTASKS_PER_NODE", "1"))
    resolver = tf.distribute.cluster_resolver.SlurmClusterResolver(
        port_base=PORT_BASE, gpus_per_node=per_node, gpus_per_task=1, auto_set_gpu=False
    )
    strategy = tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=resolver)

    @tf.function
    def all_reduce(value):
        def reduce(v):
            # identity: the replica's copy gets its device; a function argument has none, and
            # all_reduce would fail with "destinations can not be empty".
            return tf.distribute.get_replica_context().all_reduce("sum", tf.identity(v))

        return strategy.run(reduce, args=(value,))

    medians = {}
    for size in sizes:
        value = tf.ones([size // 4], tf.float32)
        for _ in range(2):  # tracing, and the collective's first-use setup
            all_reduce(value).numpy()
        seconds = []
        for _ in range(repeats):
            start = time.perf_counter()
            all_reduce(value).numpy()  # .numpy(): waits for the result
            seconds.append(time.perf_counter() - start)
        medians[size] = statistics.median(seconds)
    return medians


def sweep(
    cluster, rate: str | None, sizes: Sequence[int] = SIZES, repeats: int = 10, timeout: float = 900
) -> dict:
    """All-reduce times on `cluster` with its link shaped to `rate` (None: unshaped), and their fit."""
    if not sizes or any(int(size) < 4 or int(size) % 4 for size in sizes):
        raise ValueError(f"sizes must be byte counts, multiples of 4, not {sizes!r}")
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, not {repeats!r}")
    cluster.shape(rate)
    try:
        argv = ["srun", "-N2", "-n2", "--kill-on-bad-exit=1", sys.executable, "-m", __name__, "task",
                ",".join(str(int(size)) for size in sizes), str(repeats)]  # fmt: skip
        done = cluster.run(argv, timeout=timeout)
    finally:
        cluster.shape(None)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"the all-reduce sweep failed ({done.returncode}): {done.stderr[-2000:]}")
    medians = {int(size): seconds for size, seconds in json.loads(lines[0]).items()}
    alpha, beta = fit_link(list(medians), list(medians.values()))
    return {"rate": rate, "seconds": medians, "alpha": alpha, "beta": beta}


# ------------------------------------------------------------------ the training step, per link speed

SCRIPT = Path(__file__).resolve().parents[2] / "cluster" / "train.py"
_STEP_LINE = re.compile(r"^step (\d+)/\d+: loss \S+, (\d+(?:\.\d+)?) ms a step", re.M)


def window_ms(log: str) -> list[float]:
    """The "ms a step" of each log line of cluster/train.py but the first (its window holds the trace)."""
    return [float(ms) for _, ms in _STEP_LINE.findall(log)][1:]


def _train_args(data_dir: Path, out: Path, steps: int, log_every: int, batch: int, model: str) -> list[str]:
    return ["--data", str(data_dir), "--out", str(out), "--steps", str(steps), "--log_every", str(log_every),
            "--checkpoint_every", str(steps), "--global_batch", str(batch), "--model", model,
            "--backend", "tensorflow"]  # fmt: skip


def _alone(cluster, node: str, args: list[str], env: dict, timeout: float) -> list[float]:
    """cluster/train.py as one task on `node` (its one core, Slurm's pinning, no peer): the windows' ms."""
    argv = ["srun", "-N1", "-n1", "-w", node, sys.executable, str(SCRIPT), "train", *args]
    done = cluster.run(argv, env=env, timeout=timeout)
    windows = window_ms(done.stdout)
    if done.returncode != 0 or not windows:
        raise RuntimeError(f"the one-core run on {node} failed ({done.returncode}): {done.stderr[-2000:]}")
    return windows


def _two_nodes(cluster, args: list[str], env: dict, cwd: Path, timeout: float) -> list[float]:
    """cluster/train.py under train.sbatch, one task per node: the windows' ms (worker 0's lines)."""
    job = cluster.submit(args=args, env=env, cwd=cwd)
    state = cluster.wait(job, timeout=timeout)
    log = cwd / f"slurm-{job}.out"
    text = log.read_text() if log.exists() else ""
    windows = window_ms(text)
    if state != "COMPLETED" or not windows:
        raise RuntimeError(f"the two-node job {job} ended {state}: {text[-2000:]}")
    return windows


def gradient_bytes(weights_file: str | os.PathLike) -> int:
    """4 x the values in a weights.npz of cluster/train.py (every model variable; for the seed model,
    which has no BatchNorm statistics, exactly its trainable ones: its gradient in float32)."""
    import numpy as np

    with np.load(weights_file) as saved:
        return 4 * sum(int(saved[name].size) for name in saved.files if name != "step")


def step_sweep(cluster, data_dir: str | os.PathLike, work_dir: str | os.PathLike,
               rates: Sequence[str | None] = (None, "1gbit", "100mbit"), steps: int = 12, log_every: int = 3,
               global_batch: int = 64, batch_multiples: Sequence[int] = (1, 4), repeats: int = 2,
               model: str = "seed", link_sizes: Sequence[int] = (4096, 1 << 18, 1 << 20, 4 << 20, 16 << 20),
               link_repeats: int = 3, timeout: float = 300) -> list[dict]:  # fmt: skip
    """Two nodes' training step at each link rate, beside lesson 11's prediction; one row per (rate, k).

    Alone first: cluster/train.py as one task on one node's core at the per-replica batch k x B/2,
    for each k of `batch_multiples` (the two nodes at once, one k each where they can). The
    gradient's bytes come from the weights it writes. Then for each rate: the link shaped, alpha and
    beta fitted (`sweep`), and cluster/train.py under train.sbatch at the global batch k x B, `repeats`
    times. Measured: the median of the steady windows (each log line but the first), with their
    range. Predicted: k x compute(B/2) + ring_seconds(alpha, beta, bytes, 2), the cost of accumulating
    k micro-batches with one all-reduce per update; comm share: ring / predicted.

    `link_sizes` reach past the gradient (the seed model's: 5.0 MB): tbf lets a bucket of 4 ms of
    traffic (at least 128 KB) through at full speed, so below a few MB a shaped link looks faster than
    its rate. Measured at 1gbit: 1 MB all-reduced in 8.8 ms (7.9 unshaped), 5 MB in 52 ms; fitted up to
    4 MB, beta came out 150 MB/s and the ring 37 ms; with 16 MB, 128 MB/s and 42 ms.
    """
    if steps < 2 * log_every or log_every < 1:
        raise ValueError(f"steps must be at least 2 x log_every (a window past the traced one), not "
                         f"steps={steps!r}, log_every={log_every!r}")  # fmt: skip
    if global_batch < 2 or global_batch % 2:
        raise ValueError(f"global_batch must be an even number (2 replicas), not {global_batch!r}")
    if not batch_multiples or any(int(k) < 1 for k in batch_multiples):
        raise ValueError(f"batch_multiples must be whole numbers >= 1, not {batch_multiples!r}")
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, not {repeats!r}")
    data_dir, work = Path(data_dir).resolve(), Path(work_dir).resolve()
    if not (data_dir / "index.json").is_file():
        raise ValueError(f"data_dir must hold cluster/train.py's shards (index.json), not {data_dir!r}")
    work.mkdir(parents=True, exist_ok=True)
    env = {"MGTUTOR_ROOT": str(SCRIPT.parents[1]), "PYTHON": sys.executable, "ATTEMPTS": "1",
           "TF_CPP_MIN_LOG_LEVEL": "3"}  # fmt: skip
    multiples = sorted({1, *map(int, batch_multiples)})  # compute(B/2) is every prediction's unit

    def alone(k: int, node: str) -> list[float]:
        out = work / f"alone-k{k}"
        shutil.rmtree(out, ignore_errors=True)  # else it would resume from its checkpoint
        args = _train_args(data_dir, out, steps, log_every, k * global_batch // 2, model)
        return _alone(cluster, node, args, env, timeout)

    compute: dict[int, list[float]] = {}
    for first in range(0, len(multiples), 2):  # one k per node, both at once
        pair = multiples[first : first + 2]
        with ThreadPoolExecutor(len(pair)) as pool:
            found = list(pool.map(alone, pair, cluster.nodes[: len(pair)]))
        compute.update(zip(pair, found, strict=True))
    size = gradient_bytes(work / "alone-k1" / "weights.npz")
    unit = statistics.median(compute[1]) / 1000
    rows = []
    for rate in rates:
        link = sweep(cluster, rate, link_sizes, link_repeats, timeout)
        ring = ring_seconds(link["alpha"], link["beta"], size, 2)
        measured: dict[int, list[float]] = {int(k): [] for k in batch_multiples}
        cluster.shape(rate)
        try:
            for repeat in range(repeats):
                for k in measured if repeat % 2 == 0 else list(measured)[::-1]:
                    out = work / f"job-{rate or 'unshaped'}-k{k}-{repeat}"
                    shutil.rmtree(out, ignore_errors=True)
                    args = _train_args(data_dir, out, steps, log_every, k * global_batch, model)
                    measured[k] += _two_nodes(cluster, args, env, work, timeout)
        finally:
            cluster.shape(None)
        for k, windows in measured.items():
            predicted = k * unit + ring
            middle = statistics.median(windows) / 1000
            rows.append({"rate": rate or "unshaped", "alpha": link["alpha"], "beta": link["beta"], "k": k,
                         "global_batch": k * global_batch, "gradient_bytes": size,
                         "measured": middle, "low": min(windows) / 1000, "high": max(windows) / 1000,
                         "windows": len(windows), "alone": statistics.median(compute[k]) / 1000,
                         "compute": k * unit, "ring": ring, "predicted": predicted,
                         "comm_share": ring / predicted, "ratio": middle / predicted,
                         "per_image": middle / (k * global_batch),
                         "predicted_per_image": predicted / (k * global_batch)})  # fmt: skip
    return rows


def format_link_table(rows: Sequence[dict]) -> str:
    """The rows of `step_sweep` as a Markdown table: ms a step, measured (median, range) and predicted."""
    head = ("| link | alpha ms | beta MB/s | k | batch | measured ms/step (range) | predicted ms/step "
            "| measured/predicted | k x compute ms | alone at k x B/2 ms | ring ms | comm share "
            "| us/image measured | us/image predicted |")  # fmt: skip
    lines = [head, "|" + " --- |" * head.count(" | ") + " --- |"]
    for row in rows:
        lines.append(
            f"| {row['rate']} | {row['alpha'] * 1e3:.2f} | {row['beta'] / 1e6:.1f} | {row['k']} "
            f"| {row['global_batch']} | {row['measured'] * 1e3:.0f} ({row['low'] * 1e3:.0f}-"
            f"{row['high'] * 1e3:.0f}) | {row['predicted'] * 1e3:.0f} | {row['ratio']:.2f} "
            f"| {row['compute'] * 1e3:.0f} | {row['alone'] * 1e3:.0f} | {row['ring'] * 1e3:.0f} "
            f"| {row['comm_share']:.0%} | {row['per_image'] * 1e6:.0f} "
            f"| {row['predicted_per_image'] * 1e6:.0f} |"
        )
    return "\n".join(lines)


if __name__ == "__main__" and sys.argv[1:2] == ["task"]:
    result = task([int(size) for size in sys.argv[2].split(",")], int(sys.argv[3]))
    if os.environ.get("SLURM_PROCID") == "0":
        print(json.dumps(result), flush=True)
