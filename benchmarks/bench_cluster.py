"""The two-node training step at each link speed, beside lesson 11's prediction, and what a larger
batch (or accumulation: k micro-batches, one all-reduce) buys back.

    sudo .venv/bin/python benchmarks/bench_cluster.py [--rates unshaped 1gbit 100mbit] [--multiples 1 4]
        [--steps 12] [--log-every 3] [--global-batch 64] [--repeats 2]

Brings up the namespace cluster of `mgtutor.training.slurm` (node1 and node2, one core each, one
veth pair), refusing with the reason where it cannot; runs `mgtutor.speed.cluster_link.step_sweep`
with the seed model of cluster/train.py on synthetic shards; prints one row per (link, k): the
fitted alpha and beta, the measured step (median of the steady log windows and their range over
every repeat), the predicted one (k x the one-core step at B/2 + the ring all-reduce of the
gradient), their ratio, the ring's share of the prediction and the time per image; then brings the
cluster down. It takes the lock the cluster tests take (/tmp/mgtutor-slurm-test.lock), so it waits
for them, and refuses if another cluster is up.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOCK = Path("/tmp/mgtutor-slurm-test.lock")
# Not under a private temporary folder: munged runs as the munge user, which cannot enter root's 0700 ones.
STATE_DIR = Path("/tmp/mgtutor-slurm-bench")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", nargs="+", default=["unshaped", "1gbit", "100mbit"],
                        help="link rates (tc tbf), unshaped for none")  # fmt: skip
    parser.add_argument("--multiples", nargs="+", type=int, default=[1, 4], help="k: global batch k x B")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--log-every", type=int, default=3, help="steps per timed window")
    parser.add_argument("--global-batch", type=int, default=64, help="B, at k = 1")
    parser.add_argument("--repeats", type=int, default=2, help="jobs per (link, k); windows pool over them")
    parser.add_argument("--timeout", type=float, default=300, help="seconds for one job")
    args = parser.parse_args(argv)
    for name in ("steps", "log_every", "global_batch", "repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    sys.path.insert(0, str(ROOT))
    from mgtutor.speed import cluster_link as slurm_link
    from mgtutor.support.system import cpu, describe_cpu
    from mgtutor.training import slurm

    reason = slurm.unavailable()
    if reason:
        print(f"bench_cluster.py: the two-node cluster cannot be made here: {reason}", file=sys.stderr)
        return 2
    rates = [None if rate == "unshaped" else rate for rate in args.rates]
    print(f"bench_cluster.py, {datetime.now():%Y-%m-%d %H:%M}, {os.cpu_count()} cores, {describe_cpu(cpu())}",
          flush=True)  # fmt: skip
    with LOCK.open("w") as lock, tempfile.TemporaryDirectory(prefix="bench-cluster-", dir="/tmp") as work:
        waited = time.perf_counter()
        fcntl.flock(lock, fcntl.LOCK_EX)  # a cluster test's cluster goes down first
        waited = time.perf_counter() - waited
        if slurm.namespaces():
            print(f"bench_cluster.py: a cluster is already up ({slurm.namespaces()}): sudo make cluster-down",
                  file=sys.stderr)  # fmt: skip
            return 2
        os.chmod(work, 0o755)  # slurmd's tasks write the job's log here
        data = Path(work) / "data"
        prepare = [sys.executable, str(ROOT / "cluster" / "train.py"), "prepare", "--source", "synthetic",
                   "--out", str(data), "--shards", "4"]  # fmt: skip
        subprocess.run(prepare, check=True, capture_output=True)
        # A fresh state: slurmctld -i still recovers the jobs of a run that ended while they ran, and
        # its nodes would stay allocated to them.
        shutil.rmtree(STATE_DIR, ignore_errors=True)
        started = time.perf_counter()
        cluster = slurm.start_cluster(STATE_DIR)
        try:
            up = time.perf_counter() - started
            rows = slurm_link.step_sweep(
                cluster, data, Path(work) / "runs", rates=rates, steps=args.steps, log_every=args.log_every,
                global_batch=args.global_batch, batch_multiples=args.multiples, repeats=args.repeats,
                timeout=args.timeout)  # fmt: skip
            swept = time.perf_counter() - started - up
        finally:
            cluster.down()
    size = rows[0]["gradient_bytes"]
    print(f"seed model: {size / 4:,.0f} parameters, a {size / 1e6:.2f} MB gradient; B = {args.global_batch}, "
          f"{args.steps} steps a job, windows of {args.log_every} (the first dropped), {args.repeats} job(s) "
          f"per row")  # fmt: skip
    print(slurm_link.format_link_table(rows))
    print(f"waited {waited:.0f} s for the lock; cluster up in {up:.0f} s; the sweep took {swept:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
