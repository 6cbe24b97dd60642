"""The child process of test_batchnorm.py: BatchNormalization on 2 simulated devices.

    python tests/unit/batchnorm_child.py --folder EMPTY_FOLDER

TensorFlow fixes its devices once per process, so everything that needs a
MirroredStrategy over 2 devices runs here, in one process: MiniGoogLeNet
trained one epoch with plain and with synchronized BatchNormalization, the
averaging, the save refusal, the one-device references (the default strategy,
which may share a process with one MirroredStrategy), and tiny models through
the callback, Trainer, resumable_fit and the towers. It prints its
measurements as one JSON object, the last line of stdout; the parent asserts.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import time
from pathlib import Path

parser = argparse.ArgumentParser()
parser.add_argument("--folder", type=Path, required=True, help="an empty folder for the files written")
args = parser.parse_args()
folder: Path = args.folder

import mgtutor  # noqa: E402

mgtutor.setup_devices(2, verbose=False)

import keras  # noqa: E402
import numpy as np  # noqa: E402

from mgtutor import parallel  # noqa: E402
from mgtutor.batchnorm import (  # noqa: E402
    AverageReplicaCopies,
    average_replica_copies,
    batchnorm_layers,
    replica_copy_spread,
)
from mgtutor.resume import resumable_fit  # noqa: E402
from mgtutor.saving import export_for_serving, load_model, save_model  # noqa: E402
from mgtutor.trainer import Trainer  # noqa: E402

last = time.perf_counter()
strategy = parallel.mirrored_strategy()
out: dict = {"replicas": strategy.num_replicas_in_sync}

# 100 examples in batches of 32: three full batches and one of 4 (2 per replica).
N, BATCH = 100, 32
PARITY_ROWS = 36  # float64 is slow on a CPU: one batch of 32 and the uneven last one of 4
rng = np.random.default_rng(0)
x = rng.random((N, 32, 32, 3), dtype=np.float32)
y = np.eye(10, dtype=np.float32)[rng.integers(0, 10, N)]
x_small = rng.random((N, 8, 8, 3), dtype=np.float32)


def scope(distributed: bool):
    return strategy.scope() if distributed else contextlib.nullcontext()


def compile_sgd(model) -> None:
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="categorical_crossentropy", jit_compile=False)


def minigooglenet(synchronized: bool, distributed: bool, rows: int = N):
    """One epoch on the first `rows` examples, in order, from seed 0, in the current dtype policy.

    Without Dropout, whose masks differ with the device count.
    """
    with scope(distributed):
        model = mgtutor.build_minigooglenet(
            (32, 32, 3), 10, seed=0, synchronized=synchronized, dropout=False
        )
        compile_sgd(model)
    dtype = keras.config.dtype_policy().variable_dtype
    model.fit(x[:rows].astype(dtype), y[:rows].astype(dtype), batch_size=BATCH, epochs=1, shuffle=False,
              verbose=0)  # fmt: skip
    return model


def mark(section: str) -> None:
    """Seconds since the previous mark, to see what the run spends its time on."""
    global last
    now = time.perf_counter()
    out.setdefault("seconds", {})[section] = round(now - last, 1)
    last = now


def tiny():
    keras.utils.set_random_seed(1)
    return keras.Sequential([
        keras.Input((8, 8, 3)), keras.layers.Conv2D(8, 3), keras.layers.BatchNormalization(),
        keras.layers.Activation("relu"), keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(10, activation="softmax"),
    ])  # fmt: skip


def refusal(call) -> str:
    try:
        call()
    except ValueError as err:
        return str(err)
    return ""


# ---- plain BatchNormalization: the copies drift, and saving is refused
plain = minigooglenet(False, True)
out["plain_spread"] = replica_copy_spread(plain)
existing = folder / "drifted.keras"
existing.write_bytes(b"old content")
out["save_error"] = refusal(lambda: save_model(plain, existing, verbose=False))
out["weights_error"] = refusal(lambda: save_model(plain, folder / "drifted.weights.h5", verbose=False))
out["export_error"] = refusal(lambda: export_for_serving(plain, folder / "drifted_served", verbose=False))
out["files_after_refusals"] = sorted(os.listdir(folder))
out["existing_unchanged"] = existing.read_bytes() == b"old content"
existing.unlink()
# What the refused file would have been: replica 0's statistics in a one-device model.
out["live_vs_replica0"] = parallel.max_output_difference(plain, parallel.copy_model(plain), x, BATCH)

mark("plain")

# ---- averaged: one set of statistics, and the saved model predicts as the live one
out["average_returned"] = average_replica_copies(plain)
out["spread_after_average"] = replica_copy_spread(plain)
out["average_again"] = average_replica_copies(plain)
saved = save_model(plain, folder / "averaged.keras", verbose=False)
out["saved_vs_live"] = parallel.max_output_difference(load_model(saved), plain, x, BATCH)
mark("averaged")

# ---- synchronized: no drift, and the same training as one device
synced = minigooglenet(True, True)
out["synced_spread"] = replica_copy_spread(synced)
mark("synchronized")
# Parity in float64. In float32 the gradients of the kernels before a BatchNormalization carry
# rounding noise along the directions BatchNormalization cancels (measured: 1 device, plain vs
# synchronized formulas, 3% of the largest kernel gradient); it swamps what the parity shows.
keras.config.set_dtype_policy("float64")  # set_floatx alone is ignored once a layer exists
parity = {}
for synchronized in (True, False):
    two, one = (minigooglenet(synchronized, distributed, PARITY_ROWS) for distributed in (True, False))
    parity[synchronized] = (two, one)
    name = "synced" if synchronized else "plain"
    out[f"parity_{name}"] = parallel.max_weight_difference(two, one)
    out[f"parity_{name}_outputs"] = parallel.max_output_difference(two, one, x[:PARITY_ROWS], BATCH)
keras.config.set_dtype_policy("float32")
one_device = parity[False][1]
out["one_device_spread"] = replica_copy_spread(one_device)
out["one_device_average"] = average_replica_copies(one_device)
with strategy.scope():
    auto = mgtutor.build_minigooglenet((32, 32, 3), 10, seed=0)
out["auto_under_strategy"] = sorted({layer.synchronized for layer in batchnorm_layers(auto)})
out["auto_one_device"] = sorted(
    {layer.synchronized for layer in batchnorm_layers(mgtutor.build_minigooglenet((32, 32, 3), 10, seed=0))}
)
mark("parity")

# ---- tiny models: fit alone drifts; the callback, Trainer and resumable_fit do not
with strategy.scope():
    drifting = tiny()
    compile_sgd(drifting)
drifting.fit(x_small, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
out["tiny_fit_spread"] = replica_copy_spread(drifting)

callback = AverageReplicaCopies()
with strategy.scope():
    averaged = tiny()
    compile_sgd(averaged)
averaged.fit(x_small, y, batch_size=BATCH, epochs=2, shuffle=False, verbose=0, callbacks=[callback],
             validation_data=(x_small[:40], y[:40]))  # fmt: skip
out["callback_spreads"] = callback.spreads
out["callback_spread_after"] = replica_copy_spread(averaged)
mark("callback")

with strategy.scope():
    trained = tiny()
    optimizer = keras.optimizers.SGD(0.05)
trainer = Trainer(trained, optimizer, "categorical_crossentropy", strategy=strategy)
trainer.fit(x_small, y, batch_size=BATCH, epochs=1, verbose=0, checkpoint_dir=folder / "trainer",
            checkpoint_every_steps=1)  # fmt: skip
out["trainer_spread"] = replica_copy_spread(trained)
mark("trainer")

# ---- towers: one shared copy, updated once per tower per step
MOMENTUM = 0.9
x_towers = rng.normal(2.0, 3.0, (32, 4)).astype(np.float32)
inputs = keras.Input((4,))
normalized = keras.layers.BatchNormalization(momentum=MOMENTUM)(inputs)
template = keras.Model(inputs, keras.layers.Dense(1)(normalized))
towers = parallel.multi_gpu_model(template, 2)
towers.compile(optimizer=keras.optimizers.SGD(0.0), loss="mse", jit_compile=False)
towers.train_on_batch(x_towers, np.zeros((32, 1), np.float32))
moving_mean = template.layers[1].moving_mean.numpy()  # it started at 0
mean_0, mean_1 = x_towers[:16].mean(axis=0), x_towers[16:].mean(axis=0)
in_tower_order = MOMENTUM * (1 - MOMENTUM) * mean_0 + (1 - MOMENTUM) * mean_1
one_device = (1 - MOMENTUM) * x_towers.mean(axis=0)
out["towers_vs_tower_order"] = float(np.abs(moving_mean - in_tower_order).max())
out["towers_vs_one_device"] = float(np.abs(moving_mean - one_device).max())
out["towers_spread"] = replica_copy_spread(towers)
mark("towers")

# Last: resumable_fit turns op determinism on for the whole process.
class Killed(Exception):
    pass


class Interrupt(keras.callbacks.Callback):
    """Stands in for a kill in epoch 2, after the state of its 2nd batch was saved."""

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        if self.model.optimizer.iterations.numpy() == 6:  # 4 batches per epoch
            raise Killed


def resumable(checkpoints: str, interrupt: bool = False):
    with strategy.scope():
        model = tiny()
        compile_sgd(model)
    resumable_fit(model, x_small, y, checkpoint_dir=folder / checkpoints, epochs=2, batch_size=BATCH,
                  save_every_steps=1, verbose=0, callbacks=[Interrupt()] if interrupt else [])  # fmt: skip
    return model


uninterrupted = resumable("resume")
out["resume_spread"] = replica_copy_spread(uninterrupted)
out["resume_files"] = sorted(p.name for p in (folder / "resume").iterdir())
try:
    resumable("killed", interrupt=True)
except Killed:
    out["interrupted_at"] = mgtutor.resume_point(folder / "killed")
resumed = resumable("killed")


def every_copy(model) -> list[np.ndarray]:
    """Each replica's copy of each variable: get_weights() shows replica 0's only."""
    return [np.asarray(c.numpy()) for v in model.weights for c in getattr(v.value, "values", [v.value])]


pairs = zip(every_copy(resumed), every_copy(uninterrupted), strict=True)
out["resumed_vs_uninterrupted"] = max(float(np.abs(a - b).max()) for a, b in pairs if a.size)

mark("resumable_fit")
print(json.dumps(out))
