"""The child process of test_saving.py's cross-device test: the 4-device side.

    python tests/unit/saving_four_devices_child.py FOLDER

FOLDER holds ``single.keras`` and ``inputs.npz`` from the 1-device parent. On 4
simulated devices it loads that model, trains it, and saves models (mirrored,
in scope, towers, SavedModel) and their outputs in FOLDER for the parent to
load on 1 device; it also checks resumable_fit's global-batch refusal. It
reports its measurements with `report_result`.
"""

import contextlib
import io
import os
import sys

import mgtutor.saving as saving

# Importing these must leave TensorFlow unstarted, else setup_devices raises.
import mgtutor.training.resume as resume
from mgtutor.devices import setup_devices

FOLDER = sys.argv[1]
setup_devices(4, verbose=False)

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from mgtutor.data_parallel import mirrored_strategy  # noqa: E402
from mgtutor.keras2.towers import multi_gpu_model  # noqa: E402
from mgtutor.models import build_seed_cnn  # noqa: E402
from mgtutor.support.processes import report_result  # noqa: E402

inputs = np.load(os.path.join(FOLDER, "inputs.npz"))
x, y, probe = inputs["x"], inputs["y"], inputs["probe"]
out = {}


def path(name):
    return os.path.join(FOLDER, name)


def outputs(model):
    # One direct call on the whole batch: the same kernels on any device count.
    return np.asarray(model(probe, training=False))


def compiled(model):
    model.compile(optimizer=keras.optimizers.RMSprop(1e-3), loss="categorical_crossentropy",
                  jit_compile=False)
    return model


def worst(a, b):
    return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))


strategy = mirrored_strategy()

# 1 -> 4: what the one-device parent saved, loaded into the strategy: mirrored, same outputs.
model = saving.load_model(path("single.keras"), strategy=strategy)
out["replicas"] = strategy.num_replicas_in_sync
out["mirrored_variables"] = all(isinstance(w.value, tf.distribute.DistributedValues) for w in model.weights)
out["loaded_outputs"] = outputs(model).tolist()

# It trains there; then 4 -> 1: saved from outside and from inside the strategy's scope.
before = model.get_weights()
model.fit(x, y, batch_size=32, epochs=1, verbose=0)
out["trained_change"] = max(worst(a, b) for a, b in zip(before, model.get_weights(), strict=True))
saving.save_model(model, path("mirrored.keras"))
with strategy.scope():
    saving.save_model(model, path("mirrored_in_scope.keras"))
saving.save_model(model, path("mirrored.weights.h5"))
saving.export_for_serving(model, path("mirrored_served"), verbose=False)

# A towers model is saved as its template (its weights; training it changes nothing here).
template = build_seed_cnn((16, 16, 3), 10, seed=1)
towers = compiled(multi_gpu_model(template, 4))
printed = io.StringIO()
with contextlib.redirect_stdout(printed):
    saving.save_model(towers, path("towers.keras"))
out["towers_message"] = printed.getvalue()
np.savez(path("outputs_four.npz"), mirrored=outputs(model), towers=outputs(template))

# The global batch must split over the replicas: refused before anything is written.
try:
    resume.resumable_fit(model, x, y, checkpoint_dir=path("ckpt"), epochs=1, batch_size=30,
                         strategy=strategy)
except ValueError as err:
    out["batch_error"] = str(err)
out["ckpt_written"] = os.path.exists(path("ckpt"))
report_result(out)
