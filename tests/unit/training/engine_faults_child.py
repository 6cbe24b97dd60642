"""A resumable_fit run for test_engine_faults.py: the faults that lose work, made for real.

    python engine_faults_child.py DEVICES FOLDER OUT [--epochs 2] [--dropout] [--pause-after N]
                                  [--fill-disk-after N] [--other-replicas] [--verbose 2]

A small CNN (no BatchNormalization; Dropout with --dropout) trains on seeded random data with
resumable_fit on DEVICES logical devices, global batch 32. --pause-after N prints PAUSED after
batch N and sleeps (a live run, for a second one to meet); --fill-disk-after N fills the
checkpoint folder's disk after batch N, leaving less than a checkpoint. It reports its weights
file, History and position, or the error that stopped it (type and message), with report_result.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import time
from pathlib import Path

parser = argparse.ArgumentParser()
parser.add_argument("devices", type=int)
parser.add_argument("folder")
parser.add_argument("out")
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--dropout", action="store_true")
parser.add_argument("--pause-after", type=int)
parser.add_argument("--fill-disk-after", type=int)
parser.add_argument("--other-replicas", action="store_true")
parser.add_argument("--verbose", type=int, default=0)
args = parser.parse_args()

from mgtutor.devices import setup_devices  # noqa: E402

setup_devices(args.devices, verbose=False)

import keras  # noqa: E402
import numpy as np  # noqa: E402

from mgtutor.data_parallel import mirrored_strategy  # noqa: E402
from mgtutor.support.processes import report_result  # noqa: E402
from mgtutor.training.checkpoints import resume_point  # noqa: E402
from mgtutor.training.resume import resumable_fit  # noqa: E402

rng = np.random.default_rng(0)
x = rng.random((320, 8, 8, 3), dtype=np.float32)  # 10 batches of 32
y = np.eye(4, dtype=np.float32)[rng.integers(0, 4, 320)]
strategy = mirrored_strategy() if args.devices > 1 else None
with strategy.scope() if strategy else contextlib.nullcontext():
    keras.utils.set_random_seed(0)
    dropout = [keras.layers.Dropout(0.3)] if args.dropout else []
    model = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Conv2D(8, 3, activation="relu"),
                              keras.layers.Flatten(), *dropout, keras.layers.Dense(4, activation="softmax")])
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="categorical_crossentropy", jit_compile=False)


class Faults(keras.callbacks.Callback):
    batches = 0

    def on_train_batch_end(self, batch, logs=None):
        Faults.batches += 1
        if Faults.batches == args.fill_disk_after:
            disk = Path(args.folder).parent
            (disk / "filler").write_bytes(bytes(max(0, shutil.disk_usage(disk).free - 4096)))
        if Faults.batches == args.pause_after:
            print("PAUSED", flush=True)
            time.sleep(120)


try:
    history = resumable_fit(model, x, y, checkpoint_dir=args.folder, epochs=args.epochs, batch_size=32,
                            checkpoint_every_steps=2, seed=7, strategy=strategy, callbacks=[Faults()],
                            verbose=args.verbose, resume_on_other_replicas=args.other_replicas)  # fmt: skip
except (OSError, RuntimeError, ValueError) as error:
    report_result({"error": type(error).__name__, "message": str(error),
                   "resume_point": resume_point(args.folder)})  # fmt: skip
else:
    np.savez(args.out, *model.get_weights())
    report_result({"history": history.history, "resumed_from": history.resumed_from,
                   "batches": Faults.batches})  # fmt: skip
