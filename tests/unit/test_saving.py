"""mgtutor.saving: files that load anywhere and survive crashes.

TensorFlow fixes its devices once per process, so everything that needs 4
simulated devices runs in a child process (saving_four_devices_child.py): a
model is saved in one process and loaded in another with a different device
count. The crash test really kills a process (SIGKILL, killed_save_child.py)
in the middle of writing a .keras file. Bad inputs are checked in this
process. The resume tests (mgtutor.training.resume) are in test_resume.py.
"""

from __future__ import annotations

import os
import signal
import zipfile
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import ROOT, child_process, run_child

# A model saved on N devices and loaded on M, called on the same batch, runs the
# same kernels on the same values: bit-identical, so the tolerance is 0.
LOAD_ATOL = 0.0
# The SavedModel's serve function is the same graph: measured 0.0, 1e-6 allowed.
SERVE_ATOL = 1e-6


# --------------------------------------------------------------------------- cross-device

FOUR_DEVICE_CHILD = ROOT / "tests" / "unit" / "saving_four_devices_child.py"


def _worst(a, b) -> float:
    return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))


@pytest.mark.slow
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

    four = run_child(FOUR_DEVICE_CHILD, tmp_path)

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

KILLED_SAVE_CHILD = ROOT / "tests" / "unit" / "killed_save_child.py"


@pytest.mark.slow
def test_a_save_killed_midway_leaves_the_old_file_loadable(tmp_path):
    result = child_process(KILLED_SAVE_CHILD, tmp_path, timeout=300)
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
