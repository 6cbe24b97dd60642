"""mgtutor.saving and mgtutor.resume: files that load anywhere, survive crashes, and runs that resume.

TensorFlow fixes its devices once per process, so everything that needs 4
simulated devices, or a MirroredStrategy, runs in a child process: a model is
saved in one child and loaded in another with a different device count. The
crash tests really kill processes (SIGKILL): one in the middle of writing a
.keras file, and training runs in the middle of an epoch, which are then
started again with the same command. Bad inputs are checked in this process.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import ROOT, run_python

# A model saved on N devices and loaded on M, called on the same batch, runs the
# same kernels on the same values: bit-identical, so the tolerance is 0.
LOAD_ATOL = 0.0
# The SavedModel's serve function is the same graph: measured 0.0, 1e-6 allowed.
SERVE_ATOL = 1e-6
# Resumed vs uninterrupted training with op determinism: measured 0.0 for the
# weights and the logged history, on 1 device and on 2 (MirroredStrategy).
RESUME_ATOL = 0.0
RUN_TIMEOUT = 300  # seconds for one training run (they take ~10)


# --------------------------------------------------------------------------- cross-device

FOUR_DEVICE_CHILD = """
import contextlib
import io
import json
import os

# Importing these must leave TensorFlow unstarted, else setup_devices raises.
import mgtutor.resume as resume
import mgtutor.saving as saving
from mgtutor.devices import setup_devices

FOLDER = __FOLDER__
setup_devices(4, verbose=False)

import keras
import numpy as np
import tensorflow as tf

from mgtutor.models import build_seed_cnn
from mgtutor.parallel import mirrored_strategy, multi_gpu_model

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
out["trained_change"] = max(worst(a, b) for a, b in zip(before, model.get_weights()))
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
print(json.dumps(out))
"""


def _worst(a, b) -> float:
    return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))


def test_saved_on_1_device_loads_on_4_and_saved_on_4_loads_on_1(tmp_path):
    # This process is the 1-device side (one CPU, nothing split); a child has 4 devices.
    import keras
    import tensorflow as tf

    from mgtutor.models import build_seed_cnn
    from mgtutor.saving import load_model, load_served, save_model

    rng = np.random.default_rng(0)
    x = rng.random((64, 16, 16, 3), dtype=np.float32)
    y = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 64)]
    probe = rng.random((40, 16, 16, 3), dtype=np.float32)
    np.savez(tmp_path / "inputs.npz", x=x, y=y, probe=probe)
    assert len(tf.config.list_logical_devices("CPU")) == 1
    single = build_seed_cnn((16, 16, 3), 10, seed=2)
    single.compile(
        optimizer=keras.optimizers.RMSprop(1e-3), loss="categorical_crossentropy", jit_compile=False
    )
    single.fit(x, y, batch_size=32, epochs=1, verbose=0)
    save_model(single, tmp_path / "single.keras")
    single_outputs = np.asarray(single(probe, training=False))

    four = run_python(FOUR_DEVICE_CHILD.replace("__FOLDER__", repr(str(tmp_path))))

    # 1 -> 4: created in the strategy's scope, one copy per replica, same outputs, trains there.
    assert four["replicas"] == 4 and four["mirrored_variables"]
    assert _worst(four["loaded_outputs"], single_outputs) <= LOAD_ATOL
    assert four["trained_change"] > 1e-4

    # 4 -> 1: saved outside and inside the strategy's scope, the Keras 3 file and the weights.
    saved = np.load(tmp_path / "outputs_four.npz")
    for name in ("mirrored.keras", "mirrored_in_scope.keras"):
        model = load_model(tmp_path / name)
        assert type(model).__name__ == "Sequential", name
        assert isinstance(model.optimizer, keras.optimizers.RMSprop), name  # compile state travels too
        assert _worst(model(probe, training=False), saved["mirrored"]) <= LOAD_ATOL, name
        # predict() runs batches of 8, not one of 40: float32 ulps only.
        assert _worst(model.predict(probe, batch_size=8, verbose=0), saved["mirrored"]) < 1e-6, name
    fresh = build_seed_cnn((16, 16, 3), 10, seed=9)
    fresh.load_weights(tmp_path / "mirrored.weights.h5")
    assert _worst(fresh(probe, training=False), saved["mirrored"]) <= LOAD_ATOL

    # A towers model is saved as its template, with the reason printed.
    message = four["towers_message"]
    assert "saving its template 'seed_cnn'" in message and "wrapper" in message
    assert "any number of devices" in message
    towers = load_model(tmp_path / "towers.keras")
    assert type(towers).__name__ == "Sequential" and towers.name == "seed_cnn"
    assert _worst(towers(probe, training=False), saved["towers"]) <= LOAD_ATOL

    # The SavedModel exported on 4 devices serves the same outputs on 1.
    served = load_served(tmp_path / "mirrored_served")
    assert type(served).__name__ == "TFSMLayer"
    assert _worst(served(probe), saved["mirrored"]) <= SERVE_ATOL
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]  # no temp file left over

    # resumable_fit refuses a global batch the replicas cannot split, before writing anything.
    message = four["batch_error"]
    assert "30" in message and "4 replicas" in message and "28" in message and "32" in message
    assert not four["ckpt_written"]


# --------------------------------------------------------------------------- crash mid-save

KILLED_SAVE_CHILD = """
import json
import os
import signal
import zipfile

import numpy as np

from mgtutor import saving
from mgtutor.models import build_seed_cnn

FOLDER = __FOLDER__
target = os.path.join(FOLDER, "model.keras")
model = build_seed_cnn((16, 16, 3), 10, seed=0)
saving.save_model(model, target)  # the good file
probe = np.random.default_rng(0).random((8, 16, 16, 3), dtype=np.float32)
np.save(os.path.join(FOLDER, "good.npy"), np.asarray(model(probe, training=False)))
model.set_weights([w + 1.0 for w in model.get_weights()])  # another model, saved over it

real_writestr = zipfile.ZipFile.writestr


def writestr_then_die(self, *args, **kwargs):
    # Keras writes the weights into the archive, then the zip index at close:
    # dying in between leaves a file with most bytes written but no index.
    real_writestr(self, *args, **kwargs)
    self.fp.flush()
    os.kill(os.getpid(), signal.SIGKILL)


zipfile.ZipFile.writestr = writestr_then_die
print("saving", flush=True)
saving.save_model(model, target)
print("survived", flush=True)
"""


def test_a_save_killed_midway_leaves_the_old_file_loadable(tmp_path):
    code = textwrap.dedent(KILLED_SAVE_CHILD.replace("__FOLDER__", repr(str(tmp_path))))
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert result.returncode == -signal.SIGKILL, result.stderr[-3000:]
    assert "saving" in result.stdout and "survived" not in result.stdout

    from mgtutor import saving

    # The half-written file is the hidden temp, not the target ...
    leftovers = [p for p in tmp_path.iterdir() if p.name.startswith(".model.tmp-")]
    assert len(leftovers) == 1 and leftovers[0].stat().st_size > 0
    assert not zipfile.is_zipfile(leftovers[0])
    # ... and loading such a file says what happened and what to do.
    with pytest.raises(saving.ModelFileError, match="truncated by an interrupted save"):
        saving.load_model(leftovers[0])
    # The target still holds the old model, whole.
    model = saving.load_model(tmp_path / "model.keras")
    probe = np.random.default_rng(0).random((8, 16, 16, 3), dtype=np.float32)
    assert np.array_equal(np.asarray(model(probe, training=False)), np.load(tmp_path / "good.npy"))
    # The next save to that name clears the dead writer's temp file.
    saving.save_model(model, tmp_path / "model.keras")
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".model.tmp-")]


# --------------------------------------------------------------------------- bad input, in this process


@pytest.fixture(scope="module")
def small_model():
    from mgtutor.models import build_seed_cnn

    return build_seed_cnn((16, 16, 3), 10, seed=0, dropout=False)


def _listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


@pytest.mark.parametrize(
    ("name", "pattern"),
    [
        ("model", "no extension.*'model.keras'.*'model.weights.h5'"),
        ("model.pt", "'.pt'.*'model.keras'"),
        ("model.h5", "legacy HDF5 format of Keras 2.*'my_model.keras'.*legacy_h5=True"),
        ("model.hdf5", "legacy HDF5"),
    ],
)
def test_save_refuses_a_missing_or_wrong_extension(tmp_path, small_model, name, pattern):
    from mgtutor.saving import save_model

    with pytest.raises(ValueError, match=pattern):
        save_model(small_model, tmp_path / name)
    assert _listing(tmp_path) == []


def test_legacy_h5_only_when_asked(tmp_path, small_model):
    from mgtutor.saving import load_model, save_model

    save_model(small_model, tmp_path / "seed001.h5", legacy_h5=True)
    loaded = load_model(tmp_path / "seed001.h5")
    probe = np.random.default_rng(1).random((4, 16, 16, 3), dtype=np.float32)
    assert np.array_equal(np.asarray(loaded(probe)), np.asarray(small_model(probe)))


def test_save_refuses_a_missing_folder_a_file_as_folder_and_an_existing_file(tmp_path, small_model):
    from mgtutor.saving import save_model

    with pytest.raises(FileNotFoundError, match="does not exist. Create it first.*os.makedirs"):
        save_model(small_model, tmp_path / "no" / "such" / "model.keras")
    (tmp_path / "afile").write_text("x")
    with pytest.raises(NotADirectoryError, match="is a file, not a folder"):
        save_model(small_model, tmp_path / "afile" / "model.keras")
    (tmp_path / "dir.keras").mkdir()
    with pytest.raises(IsADirectoryError, match="is a folder; give a file name"):
        save_model(small_model, tmp_path / "dir.keras")
    (tmp_path / "old.keras").write_bytes(b"keep me")
    with pytest.raises(FileExistsError, match="overwrite=True"):
        save_model(small_model, tmp_path / "old.keras", overwrite=False)
    assert (tmp_path / "old.keras").read_bytes() == b"keep me"
    assert _listing(tmp_path) == ["afile", "dir.keras", "old.keras"]


def test_save_refuses_a_folder_it_cannot_write(tmp_path, small_model, monkeypatch):
    from mgtutor.saving import save_model

    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    if os.access(locked, os.W_OK):  # root ignores permission bits: deny as a normal user would see
        real_access = os.access
        monkeypatch.setattr(
            os, "access", lambda p, mode: False if Path(p) == locked else real_access(p, mode)
        )
    try:
        with pytest.raises(PermissionError, match="not writable by this user. Save to a folder you own"):
            save_model(small_model, locked / "model.keras")
        assert _listing(locked) == []
    finally:
        locked.chmod(0o700)


def test_save_refuses_what_is_not_a_built_model(tmp_path):
    import keras

    from mgtutor.saving import save_model

    with pytest.raises(TypeError, match="must be a keras.Model"):
        save_model("my_model", tmp_path / "m.keras")
    unbuilt = keras.Sequential([keras.layers.Dense(2)])
    with pytest.raises(ValueError, match="not built.*keras.Input"):
        save_model(unbuilt, tmp_path / "m.keras")
    with pytest.raises(TypeError, match="file path"):
        save_model(unbuilt, 42)
    assert _listing(tmp_path) == []


def test_weights_only_round_trip_and_overwrite(tmp_path, small_model):
    from mgtutor.models import build_seed_cnn
    from mgtutor.saving import save_model

    first = save_model(small_model, tmp_path / "w.weights.h5")
    save_model(small_model, tmp_path / "w.weights.h5")  # overwrite=True is the default
    fresh = build_seed_cnn((16, 16, 3), 10, seed=3, dropout=False)
    fresh.load_weights(first)
    for a, b in zip(fresh.get_weights(), small_model.get_weights(), strict=True):
        assert np.array_equal(a, b)
    assert _listing(tmp_path) == ["w.weights.h5"]


def test_load_explains_missing_corrupt_and_wrong_files(tmp_path, small_model):
    from mgtutor.saving import ModelFileError, load_model, save_model

    save_model(small_model, tmp_path / "good.keras")
    with pytest.raises(FileNotFoundError, match="no file.*Model files in .*good.keras"):
        load_model(tmp_path / "god.keras")
    whole = (tmp_path / "good.keras").read_bytes()
    (tmp_path / "cut.keras").write_bytes(whole[: len(whole) // 2])  # a copy cut short
    with pytest.raises(ModelFileError, match="not a complete zip archive.*Save the model again"):
        load_model(tmp_path / "cut.keras")
    (tmp_path / "noise.h5").write_bytes(os.urandom(2048))
    with pytest.raises(ModelFileError, match="not a readable HDF5 file"):
        load_model(tmp_path / "noise.h5")
    with zipfile.ZipFile(tmp_path / "empty.keras", "w") as archive:
        archive.writestr("metadata.json", "{}")
    with pytest.raises(ModelFileError, match="no config.json"):
        load_model(tmp_path / "empty.keras")
    save_model(small_model, tmp_path / "only.weights.h5")
    with pytest.raises(ValueError, match="weights only.*model.load_weights"):
        load_model(tmp_path / "only.weights.h5")
    (tmp_path / "model.pt").write_bytes(b"")
    with pytest.raises(ValueError, match="reads '.keras' files"):
        load_model(tmp_path / "model.pt")
    with pytest.raises(TypeError, match="tf.distribute strategy"):
        load_model(tmp_path / "good.keras", strategy="mirrored")


def test_serving_round_trip_and_its_errors(tmp_path, small_model):
    from mgtutor.saving import ModelFileError, export_for_serving, load_model, load_served

    with pytest.raises(ValueError, match="a SavedModel export is a folder"):
        export_for_serving(small_model, tmp_path / "served.keras")
    folder = export_for_serving(small_model, tmp_path / "served", verbose=False)
    export_for_serving(small_model, folder, verbose=False)  # replacing an export works too
    probe = np.random.default_rng(2).random((6, 16, 16, 3), dtype=np.float32)
    served = load_served(folder)
    assert float(np.max(np.abs(np.asarray(served(probe)) - np.asarray(small_model(probe))))) <= SERVE_ATOL
    assert _listing(tmp_path) == ["served"]
    with pytest.raises(ValueError, match="SavedModel export, not a Keras model file.*load_served"):
        load_model(folder)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelFileError, match="no saved_model.pb"):
        load_served(tmp_path / "empty")
    with pytest.raises(FileNotFoundError):
        load_served(tmp_path / "missing")


def test_resumable_fit_refuses_bad_arguments_before_any_work(tmp_path):
    import keras

    from mgtutor.resume import resumable_fit

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    x, y = np.zeros((10, 4), np.float32), np.zeros((10, 2), np.float32)
    ckpt = tmp_path / "ckpt"
    with pytest.raises(ValueError, match="not compiled"):
        resumable_fit(model, x, y, checkpoint_dir=ckpt, epochs=1, batch_size=2)
    model.compile(optimizer="sgd", loss="mse")
    cases = [
        (dict(epochs=0), ValueError, "epochs must be a whole number >= 1"),
        (dict(batch_size=2.0), ValueError, "batch_size must be a whole number"),
        (dict(save_every_steps=0), ValueError, "save_every_steps"),
        (dict(seed=None), ValueError, "seed must be"),
        (dict(shuffle=True), TypeError, "shuffles each epoch itself"),
        (dict(initial_epoch=3), TypeError, "comes from the checkpoint"),
        (dict(validation_split=0.1), TypeError, "validation_data="),
        (dict(workers=4), TypeError, "unexpected argument.*workers"),
        (dict(callbacks=[keras.callbacks.BackupAndRestore(str(tmp_path / "b"))]), ValueError,
         "Remove the BackupAndRestore"),
        (dict(mode="largest"), ValueError, "mode must be"),
    ]  # fmt: skip
    for change, error, pattern in cases:
        arguments = dict(checkpoint_dir=ckpt, epochs=1, batch_size=2) | change
        with pytest.raises(error, match=pattern):
            resumable_fit(model, x, y, **arguments)
    averaging = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    averaging.compile(optimizer=keras.optimizers.SGD(use_ema=True), loss="mse")
    with pytest.raises(ValueError, match="use_ema=True.*Compile with use_ema=False"):
        resumable_fit(averaging, x, y, checkpoint_dir=ckpt, epochs=1, batch_size=2)
    with pytest.raises(ValueError, match="as many examples.*x: 10.*y: 9"):
        resumable_fit(model, x, y[:9], checkpoint_dir=ckpt, epochs=1, batch_size=2)
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotADirectoryError, match="is a file; give a folder"):
        resumable_fit(model, x, y, checkpoint_dir=tmp_path / "file", epochs=1, batch_size=2)
    assert not ckpt.exists()


# --------------------------------------------------------------------------- Keras' own BackupAndRestore


def test_keras_backup_and_restore_does_not_resume_mid_epoch(tmp_path):
    """What mgtutor.resume's docstring says of Keras 3.15's BackupAndRestore, measured.

    If this fails after a Keras upgrade, Keras changed: update that docstring.
    An exception from a callback stands in for the kill (fit does not clean up
    either way: no on_train_end, the backup stays).
    """
    import h5py
    import keras

    x, y = np.arange(40, dtype=np.float32).reshape(20, 2), np.zeros((20, 1), np.float32)
    backup = str(tmp_path / "backup")

    class Interrupt(keras.callbacks.Callback):
        def __init__(self, at):
            super().__init__()
            self.at, self.seen = at, []

        def on_epoch_begin(self, epoch, logs=None):
            self.seen.append([epoch, 0])

        def on_train_batch_end(self, batch, logs=None):
            self.seen[-1][1] += 1
            if (self.seen[-1][0], batch) == self.at:
                raise RuntimeError("killed")

    def run(at=None):
        model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
        spy = Interrupt(at)
        callbacks = [keras.callbacks.BackupAndRestore(backup, save_freq=2), spy]
        with pytest.raises(RuntimeError) if at else contextlib.nullcontext():
            model.fit(x, y, batch_size=4, epochs=3, verbose=0, shuffle=False, callbacks=callbacks)
        return spy.seen, int(model.optimizer.iterations.numpy())

    def metadata():
        return json.loads((tmp_path / "backup" / "training_metadata.json").read_text())

    run(at=(1, 2))  # 5 batches per epoch; killed in epoch 1 after its 3rd batch, saved there
    assert metadata() == {"epoch": 1, "batch": 2}
    seen, _ = run(at=(1, 1))  # restart: the epoch counter is restored ...
    assert seen[0][0] == 1
    assert seen[0][1] == 2  # (killed again after 2 batches)
    # ... but the epoch restarts at its first batch: the recorded batch is never read, and
    # killed again during that first resumed epoch, it records epoch 0 (keras#19179's kin).
    assert metadata()["epoch"] == 0
    seen, iterations = run()
    assert seen[0] == [0, 5] and iterations > 15  # back to epoch 0, on already-trained weights

    # Its weights file holds no random-generator state: Dropout masks differ after a restart.
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dropout(0.5), keras.layers.Dense(1)])
    assert any("seed_generator" in v.path for v in model.variables)
    model.save_weights(tmp_path / "b.weights.h5")
    with h5py.File(tmp_path / "b.weights.h5") as weights:
        assert len(weights["layers/dropout/vars"]) == 0

    # keras#20712: a model without weights yet is refused.
    unbuilt = keras.Sequential([keras.layers.Dense(1)])
    unbuilt.compile(optimizer="sgd", loss="mse")
    with pytest.raises(ValueError, match="must be built"):
        unbuilt.fit(x, y, verbose=0, callbacks=[keras.callbacks.BackupAndRestore(str(tmp_path / "u"))])


# --------------------------------------------------------------------------- resume: the API

RESUME_API_CHILD = """
import json
import os

import keras
import numpy as np

from mgtutor.resume import resume_point, resumable_fit

CKPT = __CKPT__
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
                         save_every_steps=2, seed=3, verbose=0, **kwargs)


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
out["best_is_lowest_loss"] = all(np.array_equal(u, v) for u, v in zip(a.get_weights(), b.get_weights()))

# The same command again: nothing to train, the final weights come back.
again = unbuilt_model()
history = fit(again, 2)
out["again"] = {"epoch": history.epoch, "resumed_from": history.resumed_from,
                "same": all(np.array_equal(u, v) for u, v in zip(final, again.get_weights()))}
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
print(json.dumps(out))
"""


def test_resumable_fit_builds_continues_and_keeps_keras_named_checkpoints(tmp_path):
    out = run_python(RESUME_API_CHILD.replace("__CKPT__", repr(str(tmp_path / "ckpt"))))
    first = out["first"]
    assert first["epoch"] == [0, 1] and first["resumed_from"] is None
    assert first["keys"] == ["accuracy", "loss"]
    assert first["files"] == ["best.weights.h5", "epoch-01.weights.h5", "epoch-02.weights.h5",
                              "resume-state.npz"]  # fmt: skip
    assert first["point"] == [2, 0]
    assert out["best_is_lowest_loss"]
    assert out["again"] == {"epoch": [0, 1], "resumed_from": [2, 0], "same": True}
    assert out["more"] == {"epoch": [0, 1, 2], "resumed_from": [2, 0], "point": [3, 0], "len": 3}
    assert "batch_size: checkpoint 8, now 4" in out["changed"] and "another checkpoint_dir" in out["changed"]
    assert "other x/y values" in out["other_data"]
    assert "different model" in out["other_model"] and "Build the same model" in out["other_model"]
    assert out["state_unchanged"]
    assert out["stopped"] == [0, 1] and out["stopped_again"] == [0, 1]


# --------------------------------------------------------------------------- resume: killed runs

TRAIN_SCRIPT = """
# One training run, resumable. The test starts it, SIGKILLs it mid-epoch and
# starts it again with the very same command line.
import contextlib
import json
import os
import sys
import time

from mgtutor.devices import setup_devices

n_devices, ckpt, out, pauses = int(sys.argv[1]), sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
setup_devices(n_devices, verbose=False)

import keras
import numpy as np

from mgtutor.models import build_seed_cnn
from mgtutor.parallel import mirrored_strategy
from mgtutor.resume import resumable_fit, resume_point

# The k-th start of this command stops for the kill after pauses[k] batches.
starts_log = out + ".starts"
starts = len(open(starts_log).read().split()) if os.path.exists(starts_log) else 0
with open(starts_log, "a") as log:
    log.write("start\\n")
pause_after = pauses[starts] if starts < len(pauses) else None

rng = np.random.default_rng(0)
x = rng.random((300, 16, 16, 3), dtype=np.float32)  # 10 batches of 32, the last one of 12
y = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 300)]
x_val = rng.random((64, 16, 16, 3), dtype=np.float32)
y_val = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 64)]
strategy = mirrored_strategy() if n_devices > 1 else None
with strategy.scope() if strategy else contextlib.nullcontext():
    model = build_seed_cnn((16, 16, 3), 10, seed=0)  # with Dropout: its random state must resume too
    model.compile(optimizer=keras.optimizers.RMSprop(1e-3), loss="categorical_crossentropy",
                  metrics=["accuracy"], jit_compile=False)


class PauseForKill(keras.callbacks.Callback):
    batches = 0

    def on_train_batch_end(self, batch, logs=None):
        PauseForKill.batches += 1
        if PauseForKill.batches == pause_after:
            print("PAUSED", json.dumps(resume_point(ckpt)), flush=True)
            time.sleep(300)


history = resumable_fit(model, x, y, checkpoint_dir=ckpt, epochs=3, batch_size=32, save_every_steps=2,
                        seed=7, strategy=strategy, callbacks=[PauseForKill()], verbose=0,
                        validation_data=(x_val, y_val))
np.savez(out + ".npz", *model.get_weights())
print(json.dumps({"epoch": history.epoch, "history": history.history,
                  "resumed_from": history.resumed_from, "batches": PauseForKill.batches}), flush=True)
"""


def _run_until_paused_or_done(command: list[str], log: Path) -> tuple[str, object]:
    """Run `command`; SIGKILL it when it prints PAUSED. ('killed', resume point) or ('done', result)."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    with open(log, "a") as stderr:  # a file, not a pipe: a full pipe would block the child
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr, text=True, cwd=ROOT, env=env)
    watchdog = threading.Timer(RUN_TIMEOUT, proc.kill)  # a hung run fails the test, not the suite
    watchdog.start()
    last = ""
    try:
        for line in proc.stdout:
            if line.startswith("PAUSED"):
                proc.kill()  # SIGKILL: no Python cleanup, no callbacks, like a pulled plug
                proc.wait(timeout=60)
                return "killed", json.loads(line.split(" ", 1)[1])
            if line.strip():
                last = line
        proc.wait(timeout=60)
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
    if proc.returncode != 0:
        pytest.fail(f"training run failed ({proc.returncode}):\n{log.read_text()[-4000:]}")
    return "done", json.loads(last)


def _kill_and_resume(folder: Path, n_devices: int, pauses: list[int]) -> dict:
    script = folder / "train.py"
    script.write_text(textwrap.dedent(TRAIN_SCRIPT))

    def command(name: str, pause_list: list[int]) -> list[str]:
        return [sys.executable, str(script), str(n_devices), str(folder / f"{name}-ckpt"),
                str(folder / name), json.dumps(pause_list)]  # fmt: skip

    with ThreadPoolExecutor(max_workers=1) as pool:
        reference = pool.submit(
            _run_until_paused_or_done, command("uninterrupted", []), folder / "uninterrupted.log"
        )
        kills = []
        for _ in range(len(pauses) + 1):  # the same command every time
            status, result = _run_until_paused_or_done(
                command("interrupted", pauses), folder / "interrupted.log"
            )
            if status == "done":
                break
            kills.append(result)
        else:
            pytest.fail(f"the interrupted run did not finish after {len(kills)} kills")
        _, uninterrupted = reference.result()
    weights_a = np.load(folder / "uninterrupted.npz")
    weights_b = np.load(folder / "interrupted.npz")
    diff = max(float(np.max(np.abs(weights_a[k] - weights_b[k]))) for k in weights_a.files)
    return {"kills": kills, "resumed": result, "uninterrupted": uninterrupted, "weight_diff": diff}


def test_runs_killed_mid_epoch_resume_to_the_uninterrupted_weights(tmp_path):
    """1 and 2 devices side by side; 10 batches per epoch, 3 epochs, state saved every 2 batches.

    1 device, killed twice: after batch 15 (epoch 1, batch 5; last save after batch 4),
    then 3 batches into the restart (epoch 1, batch 7; last save after batch 6): the case
    where Keras' BackupAndRestore falls back to epoch 0. 2 devices (MirroredStrategy):
    killed once. One test for both, so that pytest-xdist does not split the pair.
    """
    plans = {1: [15, 3], 2: [15]}
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {}
        for n, pauses in plans.items():
            (tmp_path / f"{n}-devices").mkdir()
            futures[n] = pool.submit(_kill_and_resume, tmp_path / f"{n}-devices", n, pauses)
        runs = {n: future.result() for n, future in futures.items()}

    for n, run in runs.items():
        # Each kill fell mid-epoch (epoch >= 1), after a save with step > 0.
        assert run["kills"] == ([[1, 4], [1, 6]] if n == 1 else [[1, 4]]), n
        assert run["resumed"]["resumed_from"] == run["kills"][-1], n
        # The last start trained only what was left: the rest of epoch 1, then epoch 2.
        assert run["resumed"]["batches"] == 20 - run["kills"][-1][1], n
        assert run["weight_diff"] <= RESUME_ATOL, (n, run["weight_diff"])
        # The History covers the whole run with the right epoch numbers and matches the
        # uninterrupted one, the interrupted epoch's averages included.
        assert run["resumed"]["epoch"] == run["uninterrupted"]["epoch"] == [0, 1, 2], n
        resumed, uninterrupted = run["resumed"]["history"], run["uninterrupted"]["history"]
        assert sorted(resumed) == ["accuracy", "loss", "val_accuracy", "val_loss"], n
        for key in uninterrupted:
            assert np.allclose(resumed[key], uninterrupted[key], rtol=0, atol=RESUME_ATOL), (n, key)
