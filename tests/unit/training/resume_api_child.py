"""The child process of test_resume.py's API test: resumable_fit in a fresh process.

    python tests/unit/training/resume_api_child.py CKPT

Trains an unbuilt model with checkpoints in CKPT, runs the same command again,
with more epochs, with other settings, data and model (refused), and a run an
EarlyStopping callback stopped. It reports its measurements with `report_result`; the parent asserts.
"""

import os
import sys

import keras
import numpy as np

from mgtutor.support.processes import report_result
from mgtutor.training.checkpoints import resume_point
from mgtutor.training.resume import resumable_fit

CKPT = sys.argv[1]
rng = np.random.default_rng(0)
x = rng.random((40, 8, 8, 3), dtype=np.float32)
y = np.eye(3, dtype=np.float32)[rng.integers(0, 3, 40)]
out = {}


def unbuilt_model():
    # No keras.Input: the model has no weights before fit (keras#20712's case).
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.layers.Conv2D(4, 3, activation="relu"), keras.layers.Flatten(),
                              keras.layers.Dense(3, activation="softmax")])
    model.compile(optimizer="adam", loss="categorical_crossentropy", metrics=["accuracy"],
                  jit_compile=False)
    return model


def fit(model, epochs, **kwargs):
    return resumable_fit(model, x, y, checkpoint_dir=CKPT, epochs=epochs, batch_size=8,
                         checkpoint_every_steps=2, seed=3, verbose=0, **kwargs)


model = unbuilt_model()
history = fit(model, 2)
final = model.get_weights()
out["first"] = {"epoch": history.epoch, "resumed_from": history.resumed_from,
                "keys": sorted(history.history), "files": sorted(os.listdir(CKPT)),
                "point": resume_point(CKPT)}
# best.weights.h5 holds the epoch with the lowest loss
best_epoch = int(np.argmin(history.history["loss"]))
a, b = unbuilt_model(), unbuilt_model()
a.build((None, 8, 8, 3)), b.build((None, 8, 8, 3))
a.load_weights(os.path.join(CKPT, "best.weights.h5"))
b.load_weights(os.path.join(CKPT, f"epoch-{best_epoch + 1:02d}.weights.h5"))
pairs = zip(a.get_weights(), b.get_weights(), strict=True)
out["best_is_lowest_loss"] = all(np.array_equal(u, v) for u, v in pairs)

# The same command again: nothing to train, the final weights come back.
again = unbuilt_model()
history = fit(again, 2)
out["again"] = {"epoch": history.epoch, "resumed_from": history.resumed_from,
                "same": all(np.array_equal(u, v) for u, v in zip(final, again.get_weights(), strict=True))}
# More epochs: it continues, the epoch numbers too.
more = unbuilt_model()
history = fit(more, 3)
out["more"] = {"epoch": history.epoch, "resumed_from": history.resumed_from,
               "point": resume_point(CKPT), "len": len(history.history["loss"])}
# Other settings, data or model in the same folder are refused, naming the difference,
# before the checkpoint changes.
state_file = os.path.join(CKPT, "resume-state.npz")
with open(state_file, "rb") as handle:
    state_before = handle.read()
try:
    resumable_fit(unbuilt_model(), x, y, checkpoint_dir=CKPT, epochs=3, batch_size=4, seed=3)
except ValueError as err:
    out["changed"] = str(err)
try:
    resumable_fit(unbuilt_model(), x + 1.0, y, checkpoint_dir=CKPT, epochs=4, batch_size=8, seed=3)
except ValueError as err:
    out["other_data"] = str(err)
other = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Flatten(), keras.layers.Dense(3)])
other.compile(optimizer="adam", loss="categorical_crossentropy")
try:
    resumable_fit(other, x, y, checkpoint_dir=CKPT, epochs=4, batch_size=8, seed=3)
except ValueError as err:
    out["other_model"] = str(err)
with open(state_file, "rb") as handle:
    out["state_unchanged"] = handle.read() == state_before
# A run a callback stopped is finished: re-running it does not train on.
stop_dir = CKPT + "-stopped"
stopper = keras.callbacks.EarlyStopping(monitor="loss", patience=0, min_delta=100.0)
history = resumable_fit(unbuilt_model(), x, y, checkpoint_dir=stop_dir, epochs=5, batch_size=8,
                        seed=3, verbose=0, callbacks=[stopper])
out["stopped"] = history.epoch
history = resumable_fit(unbuilt_model(), x, y, checkpoint_dir=stop_dir, epochs=5, batch_size=8,
                        seed=3, verbose=0, callbacks=[stopper])
out["stopped_again"] = history.epoch
report_result(out)
