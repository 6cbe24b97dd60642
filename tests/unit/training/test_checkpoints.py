"""mgtutor.training.checkpoints: the state file and the checks that resumable_fit and Trainer share.

The kill-and-resume runs themselves are in test_resume.py (Keras fit), test_trainer.py (the loop)
and test_cluster.py (two workers).
"""

from __future__ import annotations

import os

import keras
import numpy as np
import pytest

from mgtutor.support.files import ModelFileError
from mgtutor.training import checkpoints
from tests.conftest import ROOT, run_child


def _variables():
    return {"model": [keras.Variable(np.arange(6, dtype="float32").reshape(2, 3)), keras.Variable(1.5)],
            "optimizer": [keras.Variable(np.int64(7))]}  # fmt: skip


def test_state_round_trip_restores_every_value_and_the_position(tmp_path):
    groups = _variables()
    state = checkpoints.new_state({"batch_size": 4, "seed": 1}, replicas=2)
    state.update(epoch=1, step=3, history=[{"loss": 0.5}])
    checkpoints.write_state(tmp_path, state, groups)
    assert sorted(os.listdir(tmp_path)) == [checkpoints.STATE_FILE]  # no temp file left behind
    assert checkpoints.resume_point(tmp_path) == (1, 3)

    saved, values = checkpoints.read_state(tmp_path)
    assert saved["settings"] == {"batch_size": 4, "seed": 1} and saved["history"] == [{"loss": 0.5}]
    fresh = {"model": [keras.Variable(np.zeros((2, 3), "float32")), keras.Variable(0.0)],
             "optimizer": [keras.Variable(np.int64(0))]}  # fmt: skip
    for name, variables in fresh.items():
        checkpoints.restore(variables, values[name], name, tmp_path)
    for name in groups:
        for a, b in zip(groups[name], fresh[name], strict=True):
            np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_a_worker_that_does_not_write_leaves_no_file(tmp_path):
    checkpoints.write_state(tmp_path / "run", checkpoints.new_state({}), _variables(), write=False)
    assert not (tmp_path / "run").exists()
    assert checkpoints.resume_point(tmp_path / "run") is None


def test_another_run_model_or_format_is_refused_naming_the_difference(tmp_path):
    groups = _variables()
    checkpoints.write_state(tmp_path, checkpoints.new_state({"batch_size": 4, "data": "ab12"}), groups)
    saved, values = checkpoints.read_state(tmp_path)
    with pytest.raises(ValueError, match=r"batch_size: checkpoint 4, now 8; other x/y values"):
        checkpoints.check_same_settings(tmp_path, saved, {"batch_size": 8, "data": "ffff"})
    checkpoints.check_same_settings(tmp_path, saved, {"batch_size": 4, "data": "ab12"})  # the same run
    # A checkpoint from before accumulation_steps existed was written with its default, 1.
    same = {"batch_size": 4, "data": "ab12"}
    checkpoints.check_same_settings(tmp_path, saved, {**same, "accumulation_steps": 1})
    with pytest.raises(ValueError, match=r"accumulation_steps: checkpoint 1, now 2"):
        checkpoints.check_same_settings(tmp_path, saved, {**same, "accumulation_steps": 2})

    other = [keras.Variable(np.zeros((3, 2), "float32")), keras.Variable(0.0)]
    with pytest.raises(ValueError, match=r"shape \(2, 3\), this one \(3, 2\)"):
        checkpoints.check_shapes(other, values["model"], "model", tmp_path)
    with pytest.raises(ValueError, match="holds 2 model variables but this run has 1"):
        checkpoints.check_shapes(other[:1], values["model"], "model", tmp_path)

    (tmp_path / checkpoints.STATE_FILE).write_bytes(b"not an npz")
    with pytest.raises(ModelFileError, match="cannot be read.*Delete it to start the run over"):
        checkpoints.read_state(tmp_path)
    state = checkpoints.new_state({})
    state["format"] = checkpoints.FORMAT + 1
    checkpoints.write_state(tmp_path, state, groups)
    with pytest.raises(ModelFileError, match=f"has format {checkpoints.FORMAT + 1}"):
        checkpoints.read_state(tmp_path)


def test_other_replica_count_warns_that_the_result_is_not_bit_identical():
    with pytest.warns(UserWarning, match="written with 2 replica.*this run has 4"):
        checkpoints.warn_other_replicas({"replicas": 2}, 4, "Trainer")


def test_folder_arguments_are_checked_before_any_work(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotADirectoryError, match="log_dir .* is a file"):
        checkpoints.checkpoint_folder(tmp_path / "file", "log_dir")
    with pytest.raises(TypeError, match="checkpoint_dir must be a folder path.*e.g. checkpoint_dir='runs"):
        checkpoints.checkpoint_folder(b"bytes")
    assert checkpoints.checkpoint_folder(tmp_path / "a" / "b") == tmp_path / "a" / "b"
    assert not (tmp_path / "a").exists()  # checked, not created
    with pytest.raises(ValueError, match="BackupAndRestore.*Pass checkpoint_dir"):
        checkpoints.refuse_backup_and_restore([keras.callbacks.BackupAndRestore("b")], "Pass checkpoint_dir")


def test_metric_sums_resume_per_replica_to_the_last_bit(tmp_path):
    """A metric restored mid-epoch on 2 replicas logs the uninterrupted run's value exactly."""
    result = run_child(ROOT / "tests" / "unit" / "training" / "metric_parts_child.py", tmp_path)
    assert result["parts_shape"] == [2]  # the `total` sum, one part per replica
    assert result["saved parts"] == pytest.approx([1.9108851, 0.80936015], rel=1e-7)
    assert result["own parts"] == result["uninterrupted"]  # bit-identical
    # The total split evenly among the replicas (what a plain assign does) is one float32 ulp off here.
    assert result["total split evenly"] != result["uninterrupted"]
    assert result["total split evenly"] == pytest.approx(result["uninterrupted"], rel=1e-6)
