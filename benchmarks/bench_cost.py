"""Where a data-parallel step's time goes, four pairs side by side in one process (notebook 11).

* float32 vs ``mixed_bfloat16``: one training step of the seed CNN on one device;
* gradient accumulation k = 1 vs k = 4: the same images per replica under
  MirroredStrategy, all-reduced after every micro-batch (k = 1) or once per 4;
* ring all-reduce by hand vs ``tf.add_n`` on one device, of the seed CNN's
  gradient over the logical devices;
* XLA ``jit_compile=True`` vs the default, one training step on one device.

Each pair's contenders are timed in turn, ``--repeats`` times (after an
untimed call each, which traces), so other load on the machine slows both
alike; printed: the median and the spread (min-max) of each, and the ratio of
medians with the range of the per-repeat ratios. Run from the repository root::

    python benchmarks/bench_cost.py --devices 4 --repeats 5

On logical CPU devices an all-reduce is a memory copy: the ring and the
accumulation ratios measure ops and synchronisation points, not a link.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def timed(function: Callable[[], object], calls: int) -> float:
    """Seconds per call of `function`, after one untimed call."""
    function()
    start = time.perf_counter()
    for _ in range(calls):
        function()
    return (time.perf_counter() - start) / calls


def compare(name: str, contenders: dict[str, Callable[[], object]], repeats: int, calls: int) -> str:
    """Time each contender `repeats` times, interleaved; one line per contender, one for the ratio."""
    seconds: dict[str, list[float]] = {label: [] for label in contenders}
    for function in contenders.values():
        function()  # tracing, not timed
    for _ in range(repeats):
        for label, function in contenders.items():
            seconds[label].append(timed(function, calls))
    (a, sa), (b, sb) = seconds.items()
    ratios = [x / y for x, y in zip(sa, sb, strict=True)]
    lines = [f"{name}"]
    for label, values in seconds.items():
        lines.append(f"  {label:<28} median {1000 * statistics.median(values):8.2f} ms  "
                     f"spread {1000 * min(values):.2f}-{1000 * max(values):.2f} ms")
    lines.append(f"  {a} / {b}: {statistics.median(sa) / statistics.median(sb):.2f}x "
                 f"(per-repeat ratios {min(ratios):.2f}-{max(ratios):.2f})")
    return "\n".join(lines)


def training_steps(policy: str, jit_compile: bool | str, batch: int, device: str) -> Callable[[], object]:
    import keras
    import numpy as np

    import mgtutor

    keras.mixed_precision.set_dtype_policy(policy)
    try:
        import tensorflow as tf

        with tf.device(device):
            model = mgtutor.build_model("seed_cnn", (32, 32, 3), 10, seed=0)
            model.compile(loss="categorical_crossentropy", optimizer=keras.optimizers.Adam(1e-3),
                          jit_compile=jit_compile)  # fmt: skip
    finally:
        keras.mixed_precision.set_dtype_policy("float32")
    rng = np.random.default_rng(0)
    x = rng.random((batch, 32, 32, 3), dtype=np.float32)
    y = np.eye(10, dtype=np.float32)[rng.integers(0, 10, batch)]
    return lambda: model.train_on_batch(x, y)


def accumulation_steps(strategy, k: int, per_replica: int, micro_batches: int) -> Callable[[], object]:
    """`micro_batches` micro-batches per replica, all-reduced once per `k` of them."""
    import keras
    import numpy as np
    import tensorflow as tf

    import mgtutor

    with strategy.scope():
        model = mgtutor.build_model("seed_cnn", (32, 32, 3), 10, seed=0, dropout=False)
    loss_fn = keras.losses.CategoricalCrossentropy(reduction=None)
    rng = np.random.default_rng(0)
    x = tf.constant(rng.random((micro_batches, per_replica, 32, 32, 3), dtype=np.float32))
    y = tf.constant(np.eye(10, dtype=np.float32)[rng.integers(0, 10, (micro_batches, per_replica))])

    def replica_step():
        context, reduced = tf.distribute.get_replica_context(), []
        total = [tf.zeros_like(v) for v in model.trainable_variables]
        for j in range(micro_batches):
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(loss_fn(y[j], model(x[j], training=True)))
            grads = tape.gradient(loss, model.trainable_variables)
            total = [t + g for t, g in zip(total, grads, strict=True)]
            if (j + 1) % k == 0:
                reduced.append(context.all_reduce(tf.distribute.ReduceOp.SUM, total))
                total = [tf.zeros_like(v) for v in model.trainable_variables]
        return tf.add_n([tf.reduce_sum(g) for r in reduced for g in r])

    step = tf.function(lambda: strategy.run(replica_step))
    return step


def ring_and_add_n(devices: list[str], size: int) -> dict[str, Callable[[], object]]:
    import numpy as np
    import tensorflow as tf

    n = len(devices)
    vectors = []
    for i, device in enumerate(devices):
        with tf.device(device):
            vectors.append(tf.constant(np.random.default_rng(i).random(size, dtype=np.float32)))
    sizes = [len(c) for c in np.array_split(np.arange(size), n)]

    @tf.function
    def ring():
        chunks = [list(tf.split(v, sizes)) for v in vectors]
        for rounds, add in ((range(n - 1), True), (range(n - 1), False)):
            for r in rounds:
                arrived = []
                for i in range(n):
                    c = (i - r) % n if add else (i + 1 - r) % n
                    with tf.device(devices[(i + 1) % n]):
                        arrived.append(((i + 1) % n, c, tf.identity(chunks[i][c])))
                for to, c, received in arrived:
                    with tf.device(devices[to]):
                        chunks[to][c] = chunks[to][c] + received if add else received
        return [tf.concat(c, 0) for c in chunks]

    @tf.function
    def add_n():
        with tf.device(devices[0]):
            total = tf.add_n(vectors)
        copies = []
        for device in devices:
            with tf.device(device):
                copies.append(tf.identity(total))  # every device gets the sum back
        return copies

    return {"ring by hand": lambda: [t.numpy() for t in ring()],
            "add_n on one device": lambda: [t.numpy() for t in add_n()]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=4, help="logical devices (default 4)")
    parser.add_argument("--repeats", type=int, default=3, help="timed repeats per contender (at least 3)")
    parser.add_argument("--calls", type=int, default=5, help="calls per timed repeat (default 5)")
    parser.add_argument("--batch", type=int, default=64, help="images per training step (default 64)")
    args = parser.parse_args(argv)
    if args.repeats < 3:
        parser.error("--repeats must be at least 3, so each ratio has a spread")
    if args.devices < 2 or args.calls < 1 or args.batch < 1:
        parser.error("--devices must be at least 2, --calls and --batch at least 1")
    sys.path.insert(0, str(ROOT))
    import mgtutor

    devices = list(mgtutor.setup_devices(args.devices, verbose=False))
    strategy = mgtutor.mirrored_strategy(devices)
    per_replica = max(1, args.batch // args.devices)
    print(f"{args.devices} logical CPU devices, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}, "
          f"{args.repeats} repeats x {args.calls} calls\n")
    pairs = {
        f"one training step, seed CNN, batch {args.batch}": {
            "float32": training_steps("float32", False, args.batch, devices[0]),
            "mixed_bfloat16": training_steps("mixed_bfloat16", False, args.batch, devices[0])},
        f"4 micro-batches of {per_replica} per replica, {args.devices} replicas": {
            "k=1 (all-reduce each)": accumulation_steps(strategy, 1, per_replica, 4),
            "k=4 (one all-reduce)": accumulation_steps(strategy, 4, per_replica, 4)},
        f"all-reduce of the seed CNN's gradient (1,250,858 floats), {args.devices} devices":
            ring_and_add_n(devices, 1_250_858),
        f"one training step, seed CNN, batch {args.batch}, XLA": {
            "jit_compile=True": training_steps("float32", True, args.batch, devices[0]),
            "default (auto: off on CPU)": training_steps("float32", "auto", args.batch, devices[0])},
    }
    for name, contenders in pairs.items():
        print(compare(name, contenders, args.repeats, args.calls), flush=True)
    print(f"\nload at the end {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
