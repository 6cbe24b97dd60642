"""The worker script of the multi-worker tests: notebook 08's worker pattern, with knobs.

    python tests/unit/training/multiworker_job.py --strategy multi-worker ...   # under launch
    python tests/unit/training/multiworker_job.py --strategy mirrored --devices 2 ...   # 1-process reference

It trains a tiny CNN with BatchNormalization on seeded random data,
saves its final weights to ``--weights-out`` (``-worker<i>.npz`` appended),
and reports its history, position and weight digest with `report_result` (with
``--accumulation-steps``, also its optimizer iterations and gradient all-reduces, counted as they run).
"""

from __future__ import annotations

import argparse
import contextlib
import time

parser = argparse.ArgumentParser()
parser.add_argument("--strategy", choices=("multi-worker", "mirrored", "default"), default="multi-worker")
parser.add_argument("--devices", type=int, default=2)
parser.add_argument("--samples", type=int, default=192)
parser.add_argument("--batch-size", type=int, default=32)
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--checkpoint-dir")
parser.add_argument("--checkpoint-every", type=int)
parser.add_argument("--step-seconds", type=float, default=0.0)
parser.add_argument("--weights-out")
parser.add_argument("--accumulation-steps", type=int)  # given: Trainer accumulates, all-reduces are counted
args = parser.parse_args()

import mgtutor  # noqa: E402
from mgtutor.support.processes import report_result  # noqa: E402
from mgtutor.training.trainer import Trainer  # noqa: E402
from mgtutor.training.worker import multi_worker_strategy, weights_digest, worker_index  # noqa: E402

if args.strategy == "multi-worker":
    strategy = multi_worker_strategy()  # first: TF configures collectives only at start-up
else:
    mgtutor.setup_devices(args.devices, verbose=False)
    strategy = mgtutor.mirrored_strategy() if args.strategy == "mirrored" else None

import keras  # noqa: E402
import numpy as np  # noqa: E402

rng = np.random.default_rng(0)
x = rng.random((args.samples, 8, 8, 3), dtype=np.float32)
y = np.eye(4, dtype=np.float32)[rng.integers(0, 4, args.samples)]
x_val, y_val = x[:40], y[:40]


def build() -> keras.Model:
    keras.utils.set_random_seed(0)
    # BatchNormalization: each replica updates its own statistics, which the trainer averages across workers.
    return keras.Sequential(
        [
            keras.Input((8, 8, 3)),
            keras.layers.Conv2D(4, 3, activation="relu"),
            keras.layers.BatchNormalization(),
            keras.layers.Flatten(),
            keras.layers.Dense(4, activation="softmax"),
        ]
    )


class SlowDown(keras.callbacks.Callback):
    """Steps of a real model take time; this gives a tiny one that pace, so a kill lands mid-run."""

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        time.sleep(args.step_seconds)


scope = strategy.scope() if strategy is not None else contextlib.nullcontext()
with scope:
    model = build()
    optimizer = keras.optimizers.SGD(0.05, momentum=0.9)
trainer = Trainer(model, optimizer, "categorical_crossentropy", ["accuracy"], strategy=strategy)
counted = {}
if args.accumulation_steps:
    from accumulation_cases import count_all_reduces, per_replica  # this script's folder

    counted["accumulation_steps"] = args.accumulation_steps
    all_reduces = count_all_reduces(trainer.strategy, optimizer)
history = trainer.fit(
    x,
    y,
    batch_size=args.batch_size,
    epochs=args.epochs,
    validation_data=(x_val, y_val),
    callbacks=[SlowDown()] if args.step_seconds else [],
    checkpoint_dir=args.checkpoint_dir,
    checkpoint_every_steps=args.checkpoint_every,
    **counted,
)
index = worker_index(trainer.strategy)
counts = {}
if counted:
    counts["iterations"] = int(optimizer.iterations.numpy())
    counts["all_reduces"] = per_replica(trainer.strategy, all_reduces)
if args.weights_out:
    np.savez(f"{args.weights_out}-worker{index}.npz", *model.get_weights())
report_result(
    {
        "worker": index,
        "replicas": trainer.num_replicas,
        "digest": weights_digest(model),
        "history": history.history,
        "resumed_from": history.resumed_from,
        "steps_trained": history.steps_trained,
        "steps_per_epoch": history.params["steps"],
        **counts,
    }
)
