"""The child processes of test_batchnorm.py: BatchNormalization on 2, then 4 simulated devices.

    python tests/unit/batchnorm_child.py --folder FOLDER                # 2 devices, FOLDER empty
    python tests/unit/batchnorm_child.py --folder FOLDER --devices 4    # then this

TensorFlow fixes its devices once per process, so each device count is one process. On 2
devices: MiniGoogLeNet (16x16x3, float64) trained one epoch with plain and with synchronized
BatchNormalization, under the strategy and on one device (the default strategy may share a
process with one MirroredStrategy); the drift, the save refusal, the averaging, reloads with and
without a strategy, Trainer; then tiny models through the callback, Trainer, resumable_fit and the
towers. On 4 devices: the synchronized parity against the 2-device run's one-device weights, and
the files saved on 2 replicas and on one device reloaded under a 4-replica strategy. Each prints
its measurements with `report_result`; the parent asserts.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from pathlib import Path

parser = argparse.ArgumentParser()
parser.add_argument("--folder", type=Path, required=True, help="the folder for the files written and read")
parser.add_argument("--devices", type=int, choices=(2, 4), default=2, help="run 2 first, then 4")
args = parser.parse_args()
folder: Path = args.folder
DEVICES: int = args.devices

import mgtutor  # noqa: E402

mgtutor.setup_devices(DEVICES, verbose=False)

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from mgtutor import data_parallel as parallel  # noqa: E402
from mgtutor import models  # noqa: E402
from mgtutor.batchnorm import (  # noqa: E402
    AverageReplicaCopies,
    average_replica_copies,
    batchnorm_layers,
    replica_copy_spread,
)
from mgtutor.keras2.towers import multi_gpu_model  # noqa: E402
from mgtutor.saving import export_for_serving, load_model, save_model  # noqa: E402
from mgtutor.support.processes import report_result  # noqa: E402
from mgtutor.training.resume import resumable_fit  # noqa: E402
from mgtutor.training.trainer import Trainer  # noqa: E402

last = time.perf_counter()
strategy = parallel.mirrored_strategy() if DEVICES > 1 else None
out: dict = {"replicas": strategy.num_replicas_in_sync if strategy else 1}

# 100 examples in batches of 32: three full batches and one of 4 (2 per replica).
N, BATCH = 100, 32
rng = np.random.default_rng(0)
# MiniGoogLeNet (every BatchNorm claim is made on it) at 16x16: a quarter of 32x32's compute, and
# the same layers, drift and parity.
SIZE = 16
x = rng.random((N, SIZE, SIZE, 3), dtype=np.float32)
y = np.eye(10, dtype=np.float32)[rng.integers(0, 10, N)]
x_small = rng.random((N, 8, 8, 3), dtype=np.float32)

# Written by the 2-device run, read by the 4-device run.
AVERAGED = folder / "averaged.keras"
AVERAGED_PREDICTIONS = folder / "averaged.predictions.npy"  # the live 2-device model's, on x
REFERENCE = folder / "parity_reference.npz"  # 1 device, synchronized, float64, after the parity epoch
ONE_DEVICE = folder / "one_device.keras"
ONE_DEVICE_PREDICTIONS = folder / "one_device.predictions.npy"


def scope(distributed: bool):
    return strategy.scope() if distributed else contextlib.nullcontext()


def compile_sgd(model, eager: bool = False) -> None:
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="categorical_crossentropy", jit_compile=False,
                  run_eagerly=eager)  # fmt: skip


def build_minigooglenet(synchronized: bool):
    """From seed 0, in the current dtype policy, without Dropout (its masks differ with the device count)."""
    return models.build_minigooglenet((SIZE, SIZE, 3), 10, seed=0, synchronized=synchronized, dropout=False)


def minigooglenet(synchronized: bool, distributed: bool, callbacks=(), eager: bool = False):
    """One epoch on x, in order."""
    with scope(distributed):
        model = build_minigooglenet(synchronized)
        compile_sgd(model, eager)
    dtype = keras.config.dtype_policy().variable_dtype
    model.fit(x.astype(dtype), y.astype(dtype), batch_size=BATCH, epochs=1, shuffle=False,
              verbose=0, callbacks=list(callbacks))  # fmt: skip
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


def predictions(model, eager: bool = False) -> np.ndarray:
    """On all of x in batches of 32: under a strategy the last batch of 4 is split over the replicas too.

    A one-device model is called eagerly (as `max_output_difference` does); `eager` runs
    ``predict`` under the strategy eagerly too: the same arithmetic without a trace per model.
    """
    model.run_eagerly = eager
    return np.concatenate(parallel._predictions(model, x, BATCH))


def largest_difference(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape:
        raise ValueError(f"shapes {a.shape} and {b.shape} differ")
    return float(np.abs(a - b).max())


def replica_copies(model) -> int:
    """How many copies each variable of `model` has (1: a plain variable)."""
    counts = {len(getattr(v.value, "values", [v.value])) for v in model.weights}
    if len(counts) != 1:
        raise ValueError(f"the variables have different numbers of copies: {sorted(counts)}")
    return counts.pop()


def on_four_devices() -> None:
    """Synchronized: 4 devices train like 1 (float64); both files load under the 4-replica strategy."""
    keras.config.set_dtype_policy("float64")
    # Eagerly: tracing synchronized BatchNormalization on 4 replicas took 100 s per batch shape on
    # 2 cores (15 s eagerly, the same arithmetic); the 2-device run checks the traced fit.
    four = minigooglenet(True, True, eager=True)
    mark("parity fit")
    one = build_minigooglenet(True)  # the weights the 2-device run's one-device fit ended with
    with np.load(REFERENCE) as reference:
        one.set_weights([reference[f"arr_{i}"] for i in range(len(reference.files))])
    out["parity_four"] = parallel.max_weight_difference(four, one)
    out["parity_four_outputs"] = parallel.max_output_difference(four, one, x, BATCH)
    out["parity_four_spread"] = replica_copy_spread(four)
    out["parity_four_copies"] = replica_copies(four)
    keras.config.set_dtype_policy("float32")
    mark("parity outputs")
    files = {"two": (AVERAGED, AVERAGED_PREDICTIONS), "one": (ONE_DEVICE, ONE_DEVICE_PREDICTIONS)}
    for name, (path, expected) in files.items():
        model = load_model(path, strategy=strategy)
        # Eagerly: a traced predict on 4 replicas costs 5 s per model; the 2-device run traces one.
        out[f"{name}_on_four"] = largest_difference(predictions(model, eager=True), np.load(expected))
        out[f"{name}_on_four_copies"] = replica_copies(model)
        out[f"{name}_on_four_spread"] = replica_copy_spread(model)
    # The two files hold differently trained models: the comparisons above tell models apart.
    two, one = (np.load(expected) for _, expected in files.values())
    out["two_vs_one_predictions"] = largest_difference(two, one)
    mark("load both files")


if DEVICES == 4:
    on_four_devices()
    report_result(out)
    sys.exit(0)

# ---- MiniGoogLeNet, one epoch, plain and synchronized, on 2 replicas and on 1 device. In float64:
# in float32 the gradients of the kernels before a BatchNormalization carry rounding noise along the
# directions BatchNormalization cancels (measured: 1 device, plain vs synchronized formulas, 3% of
# the largest kernel gradient); it swamps what the parity shows.
keras.config.set_dtype_policy("float64")  # set_floatx alone is ignored once a layer exists


class FirstStep(keras.callbacks.Callback):
    """The weights after the first batch, what Trainer (full batches only) is compared with."""

    weights: list = []

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        if batch == 0:
            self.weights = self.model.get_weights()


first_step = FirstStep()
# The 2-replica fits traced, as learners run them; their one-device references eagerly (the same
# float64 arithmetic, without two traces per model: measured 1.4e-15 either way).
plain, plain_one = minigooglenet(False, True), minigooglenet(False, False, eager=True)
synced = minigooglenet(True, True)
synced_one = minigooglenet(True, False, callbacks=[first_step], eager=True)
for name, (two, one) in {"plain": (plain, plain_one), "synced": (synced, synced_one)}.items():
    out[f"parity_{name}"] = parallel.max_weight_difference(two, one)
    out[f"parity_{name}_outputs"] = parallel.max_output_difference(two, one, x, BATCH)
out["synced_spread"] = replica_copy_spread(synced)
mark("parity")

# ---- plain BatchNormalization: the copies drift, and saving is refused
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

# ---- averaged: one set of statistics, and the saved model predicts as the live one, here without
# a strategy (one device) as under it; the 4-device run reloads the file too
out["average_returned"] = average_replica_copies(plain)
out["spread_after_average"] = replica_copy_spread(plain)
out["average_again"] = average_replica_copies(plain)
saved = save_model(plain, AVERAGED, verbose=False)
live = predictions(plain)
np.save(AVERAGED_PREDICTIONS, live)
reloaded = load_model(saved, strategy=strategy)
out["saved_vs_live"] = largest_difference(predictions(reloaded, eager=True), live)
two_on_one = load_model(saved)
out["two_on_one"] = largest_difference(predictions(two_on_one), live)
out["two_on_one_copies"] = replica_copies(two_on_one)
np.savez(REFERENCE, *synced_one.get_weights())  # the 4-device run's one-device reference
# ---- saved on one device (no strategy), for the 4-device run to reload
save_model(plain_one, ONE_DEVICE, verbose=False)
np.save(ONE_DEVICE_PREDICTIONS, predictions(plain_one))
mark("averaged")

# Trainer's loop under the 2-replica strategy trains synchronized layers as fit does: one step of 32.
with strategy.scope():
    synced_trained = build_minigooglenet(True)
    optimizer = keras.optimizers.SGD(0.05)
# Its step eagerly: one traced step of synchronized MiniGoogLeNet costs 20 s here, and the traced
# loop is checked by test_trainer and notebook 10.
tf.config.run_functions_eagerly(True)
Trainer(synced_trained, optimizer, "categorical_crossentropy", strategy=strategy).fit(
    x[:BATCH].astype(np.float64), y[:BATCH].astype(np.float64), batch_size=BATCH, epochs=1, shuffle=False,
    verbose=0,
)  # fmt: skip
tf.config.run_functions_eagerly(False)
pairs = zip(synced_trained.get_weights(), first_step.weights, strict=True)
out["trainer_parity_synced"] = max(largest_difference(a, b) for a, b in pairs if a.size)
out["trainer_synced_spread"] = replica_copy_spread(synced_trained)
keras.config.set_dtype_policy("float32")
out["one_device_spread"] = replica_copy_spread(plain_one)
out["one_device_average"] = average_replica_copies(plain_one)
with strategy.scope():
    auto = models.build_minigooglenet((SIZE, SIZE, 3), 10, seed=0)
auto_one_device = models.build_minigooglenet((SIZE, SIZE, 3), 10, seed=0)
out["auto_under_strategy"] = sorted({layer.synchronized for layer in batchnorm_layers(auto)})
out["auto_one_device"] = sorted({layer.synchronized for layer in batchnorm_layers(auto_one_device)})
mark("trainer synchronized")

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
towers = multi_gpu_model(template, 2)
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
                  checkpoint_every_steps=1, verbose=0,
                  callbacks=[Interrupt()] if interrupt else [])  # fmt: skip
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
report_result(out)
