"""mgtutor.training.resume: resumable_fit, and runs killed mid-epoch that resume.

Bad arguments and Keras' own BackupAndRestore are checked in this process. The
API runs in a fresh process (resume_api_child.py). The crash test really kills
training runs (SIGKILL, resume_train_child.py) in the middle of an epoch, on 1
device and on 2 (MirroredStrategy), and starts them again with the same
command.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from mgtutor.support.processes import parse_result
from tests.conftest import ROOT, child_env, run_child

# Resumed vs uninterrupted training with op determinism: measured 0.0 for the
# weights and the logged history, on 1 device and on 2 (MirroredStrategy).
RESUME_ATOL = 0.0
RUN_TIMEOUT = 300  # seconds for one training run (they take ~10)


# --------------------------------------------------------------------------- bad arguments, in this process


def test_resumable_fit_refuses_bad_arguments_before_any_work(tmp_path):
    import keras

    from mgtutor.training.resume import resumable_fit

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    x, y = np.zeros((10, 4), np.float32), np.zeros((10, 2), np.float32)
    ckpt = tmp_path / "ckpt"
    with pytest.raises(ValueError, match="not compiled"):
        resumable_fit(model, x, y, checkpoint_dir=ckpt, epochs=1, batch_size=2)
    model.compile(optimizer="sgd", loss="mse")
    cases = [
        (dict(epochs=0), ValueError, "epochs must be a whole number >= 1"),
        (dict(batch_size=2.0), ValueError, "batch_size must be a whole number"),
        (dict(checkpoint_every_steps=0), ValueError, "checkpoint_every_steps must be a whole number"),
        # Issue 39: one name in both engines; the old one still works (with a FutureWarning) but not both.
        (dict(save_every_steps=3, checkpoint_every_steps=2), TypeError, "one option.*old name"),
        (dict(seed=None), ValueError, "seed must be"),
        (dict(shuffle=True), TypeError, "shuffles each epoch itself"),
        (dict(initial_epoch=3), TypeError, "comes from the checkpoint"),
        (dict(validation_split=0.1), TypeError, "validation_data="),
        (dict(workers=4), TypeError, "unexpected argument.*workers"),
        (dict(callbacks=[keras.callbacks.BackupAndRestore(str(tmp_path / "b"))]), ValueError,
         "Remove the BackupAndRestore"),
        (dict(mode="largest"), ValueError, "mode must be"),
        (dict(accumulation_steps=0), ValueError, "accumulation_steps must be a whole number >= 1, got 0"),
        (dict(accumulation_steps="4"), ValueError, "accumulation_steps must be a whole number >= 1, got '4'"),
        # Refused on any replica count (Keras' own fails under MirroredStrategy fit), naming the fix.
        (dict(accumulation_steps=2), ValueError,
         r"accumulation_steps=2: resumable_fit does not accumulate.*keras#20582.*"
         r"Trainer\(.*\)\.fit\(.*accumulation_steps=k"),
    ]  # fmt: skip
    for change, error, pattern in cases:
        arguments = dict(checkpoint_dir=ckpt, epochs=1, batch_size=2) | change
        with pytest.raises(error, match=pattern):
            resumable_fit(model, x, y, **arguments)
    with pytest.warns(FutureWarning, match="save_every_steps is now called checkpoint_every_steps"):
        with pytest.raises(ValueError, match="checkpoint_every_steps must be a whole number"):
            resumable_fit(model, x, y, checkpoint_dir=ckpt, epochs=1, batch_size=2, save_every_steps=0)
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
    """What mgtutor.training.resume's docstring says of Keras 3.15's BackupAndRestore, measured.

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

RESUME_API_CHILD = ROOT / "tests" / "unit" / "training" / "resume_api_child.py"


@pytest.mark.slow
def test_resumable_fit_builds_continues_and_keeps_keras_named_checkpoints(tmp_path):
    out = run_child(RESUME_API_CHILD, tmp_path / "ckpt")
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

TRAIN_CHILD = ROOT / "tests" / "unit" / "training" / "resume_train_child.py"


def _run_until_paused_or_done(command: list[str], log: Path) -> tuple[str, object]:
    """Run `command`; SIGKILL it when it prints PAUSED. ('killed', resume point) or ('done', result)."""
    env = child_env({"TF_CPP_MIN_LOG_LEVEL": "2"})
    with open(log, "a") as stderr:  # a file, not a pipe: a full pipe would block the child
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr, text=True, cwd=ROOT, env=env)
    watchdog = threading.Timer(RUN_TIMEOUT, proc.kill)  # a hung run fails the test, not the suite
    watchdog.start()
    reported = None
    try:
        for line in proc.stdout:
            if line.startswith("PAUSED"):
                proc.kill()  # SIGKILL: no Python cleanup, no callbacks, like a pulled plug
                proc.wait(timeout=60)
                return "killed", json.loads(line.split(" ", 1)[1])
            reported = parse_result(line.rstrip("\n")) or reported
        proc.wait(timeout=60)
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
    if proc.returncode != 0:
        pytest.fail(f"training run failed ({proc.returncode}):\n{log.read_text()[-4000:]}")
    assert reported is not None, f"the training run reported nothing:\n{log.read_text()[-4000:]}"
    return "done", reported


def _kill_and_resume(folder: Path, n_devices: int, pauses: list[int]) -> dict:
    def command(name: str, pause_list: list[int]) -> list[str]:
        return [sys.executable, str(TRAIN_CHILD), str(n_devices), str(folder / f"{name}-ckpt"),
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


@pytest.mark.slow
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
