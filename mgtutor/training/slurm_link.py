"""The link between the two Slurm nodes, measured: all-reduce seconds against size, fit to alpha, beta.

On the cluster of `mgtutor.training.slurm` (node1 and node2, one veth pair), one task per node
all-reduces float32 tensors of each size with TensorFlow's MultiWorkerMirroredStrategy (found by
SlurmClusterResolver), repeats, and the median per size goes to `mgtutor.speed.link.fit_link`::

    with slurm.up() as cluster:
        for rate in (None, "10gbit", "1gbit", "100mbit"):
            print(rate, sweep(cluster, rate))

Run under srun, ``python -m mgtutor.training.slurm_link task SIZES REPEATS`` is one task; rank 0
prints one JSON line {size: median seconds}. TensorFlow is imported only there.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from collections.abc import Sequence

from mgtutor.speed.link import fit_link

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


if __name__ == "__main__" and sys.argv[1:2] == ["task"]:
    result = task([int(size) for size in sys.argv[2].split(",")], int(sys.argv[3]))
    if os.environ.get("SLURM_PROCID") == "0":
        print(json.dumps(result), flush=True)
