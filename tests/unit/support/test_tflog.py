"""mgtutor.support.tflog: TensorFlow's C++ log lines never reach a notebook; everything else does."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import pytest

from mgtutor.support.tflog import PEER_LOST, TF_NOISE, quiet_python_logs
from tests.conftest import ROOT

CHILD = ROOT / "tests" / "unit" / "support" / "tflog_child.py"

NOISE = [
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
    "I0000 00:00:1795454077.083047    5446 port.cc:153] oneDNN custom operations are on. You may see",
    "I0000 00:00:1795454077.083776    5446 cudart_stub.cc:31] Could not find cuda drivers on your machine",
    "E0000 00:00:1795454078.915999    5446 cuda_platform.cc:52] failed call to cuInit: INTERNAL: (303)",
    "W0000 00:00:1795454079.292351    5446 dataset.cc:997] Input of GeneratorDatasetOp::Dataset will not",
    "I0000 00:00:1795454077.124433    5446 cpu_feature_guard.cc:227] This TensorFlow binary is optimized",
    "To enable the following instructions: AVX2 FMA, in other operations, rebuild TensorFlow with the",
    "2024-01-09 10:00:00.123456: E external/local_xla/xla/stream_executor/cuda/cuda_dnn.cc:9261] Unable "
    "to register cuDNN factory: Attempting to register factory for plugin cuDNN when one has already",
    "E0000 00:00:1713.1 1 cuda_blas.cc:1418] Unable to register cuBLAS factory: Attempting to register",
    "This TensorFlow binary is optimized to use available CPU instructions in performance-critical ops.",
]
KEPT = [
    "setup_devices: using the CPU split into 2 logical CPU device(s)",
    "F0000 00:00:1795454079.1 5446 collective_ops.cc:1] Check failed: a fatal line explains a crash",
    "Traceback (most recent call last):",
    "RuntimeError: I0000 is not a log line here",
    "epoch 1/3 - 0.4 s - loss 0.69",
]


@pytest.mark.parametrize("line", NOISE)
def test_tf_noise_matches_tensorflow_log_lines(line):
    assert TF_NOISE.match(line)


@pytest.mark.parametrize("line", KEPT)
def test_tf_noise_leaves_other_lines(line):
    assert not TF_NOISE.match(line)


def _child(mode: str, **env: str) -> subprocess.CompletedProcess:
    unset = ("TF_CPP_MIN_LOG_LEVEL", "MGTUTOR_SHOW_TF_LOGS")  # as in a student's shell
    child_env = {k: v for k, v in os.environ.items() if k not in unset}
    return subprocess.run([sys.executable, str(CHILD), mode], capture_output=True, text=True, timeout=240,
                          cwd=ROOT, env={**child_env, "PYTHONPATH": str(ROOT), **env})  # fmt: skip


@pytest.mark.slow
def test_only_tensorflow_lines_are_dropped_from_fd_2():
    done = _child("lines")
    assert done.returncode == 1  # the RuntimeError at exit
    assert json.loads(done.stdout.splitlines()[-1]) == {"again": True, "level": "2"}
    lines = done.stderr.splitlines()
    assert lines[:6] == [
        "kept 1",
        "kept 2 without its newline, then the rest",
        "kept 3 from Python's sys.stderr",
        "kept 4 from a child",
        "I0000 00:00:1.0 1 restored.cc:1] shown once restored",
        "Traceback (most recent call last):",
    ], done.stderr
    assert lines[-1] == "RuntimeError: kept 5 at exit"
    assert not [line for line in lines if TF_NOISE.match(line) and "restored" not in line]


@pytest.mark.slow
def test_show_tf_logs_turns_the_filter_off():
    done = _child("lines", MGTUTOR_SHOW_TF_LOGS="1")
    assert json.loads(done.stdout.splitlines()[-1]) == {"again": False, "level": None}
    assert done.stderr.count("failed call to cuInit") == 3  # before the restore, from the child, at the end


@pytest.mark.slow
def test_setup_devices_starts_tensorflow_without_a_log_line_even_where_tf_logs_info():
    done = _child("tensorflow")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {  # the only line: no "INFO:tensorflow:Using MirroredStrategy"
        "devices": ["/device:CPU:0", "/device:CPU:1"], "total": 4.0, "tf_level": logging.WARNING,
    }  # fmt: skip
    assert done.stderr == ""


@pytest.mark.slow
def test_importing_a_keras_name_from_mgtutor_first_is_quiet_too():
    done = _child("keras-first")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["devices"] == 2
    assert done.stderr == ""  # without the filter: 8 start-up lines (absl, oneDNN, cuInit, ...)


def test_python_loggers_are_raised_never_lowered():
    tf_logger, absl_logger = logging.getLogger("tensorflow"), logging.getLogger("absl")
    saved = tf_logger.level, absl_logger.level
    try:
        tf_logger.setLevel(logging.INFO)
        absl_logger.setLevel(logging.CRITICAL)
        quiet_python_logs()
        assert tf_logger.level == logging.WARNING  # hides INFO:tensorflow; retracing warnings still show
        assert absl_logger.level == logging.CRITICAL  # the user's stricter choice stands
    finally:
        tf_logger.setLevel(saved[0])
        absl_logger.setLevel(saved[1])


def test_only_the_retracing_alarm_about_keras_own_training_functions_is_dropped(caplog):
    # The two messages as TensorFlow 2.21 logs them: many models, each tracing its own training
    # function once (same code), and a learner's function that really retraces.
    keras_models = ("5 out of the last 14 calls to <function TensorFlowTrainer._make_function.<locals>."
                    "multi_step_on_iterator at 0x7f> triggered tf.function retracing. Tracing is expensive")
    own_function = "5 out of the last 5 calls to <function step at 0x7f> triggered tf.function retracing."
    quiet_python_logs()
    quiet_python_logs()  # idempotent: one filter
    tf_logger = logging.getLogger("tensorflow")
    assert sum(type(f).__name__ == "_KerasModelsTracedOnce" for f in tf_logger.filters) == 1
    with caplog.at_level(logging.WARNING, logger="tensorflow"):
        tf_logger.warning(keras_models)
        tf_logger.warning(own_function)
    assert [r.getMessage() for r in caplog.records] == [own_function]


def test_a_vanished_peers_grpc_lines_are_recognised_and_nothing_else():
    # As a surviving worker printed them in lesson 10 after its peer was killed on purpose (TF 2.21).
    lost = [
        "Additional GRPC error information from remote target /job:worker/replica:0/task:1 while calling "
        "/tensorflow.WorkerService/RecvBuf:",
        ':UNKNOWN:Error received from peer  {grpc_message:"recvmsg:Connection reset by peer", '
        'grpc_status:14}',
    ]
    assert all(PEER_LOST.match(line) for line in lost)
    kept = ["Epoch 2/3", "checkpoint saved: step 116 (epoch 2, batch 38/78)", "ValueError: grpc_status is 14"]
    assert not any(PEER_LOST.match(line) for line in kept)


def test_a_shown_traceback_folds_the_frames_inside_installed_libraries_and_keeps_the_learners():
    from mgtutor.support.tflog import LibraryFrames

    lines = [
        "Traceback (most recent call last):",
        '  File "/course/work/15/uneven_worker.py", line 19, in <module>',
        "    train_step(xb, yb)",
        '  File "/v/site-packages/tensorflow/util/traceback_utils.py", line 167, in error_handler',
        "    raise e.with_traceback(filtered_tb) from None",
        '  File "/v/site-packages/tensorflow/eager/execute.py", line 53, in quick_execute',
        "    tensors = pywrap_tfe.TFE_Py_Execute(ctx._handle, device_name, op_name,",
        "  ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
        "tensorflow.python.framework.errors_impl.InvalidArgumentError: Matrix size-incompatible",
        "Thread 0x00007f2362de6b80 (most recent call first):",  # faulthandler's form: ", line 53 in f"
        '  File "/v/site-packages/tensorflow/eager/execute.py", line 53 in quick_execute',
        '  File "/course/work/15/drill_worker.py", line 23 in <module>',
        # Windows, and last in the stream: flush() folds it
        '  File "C:\\py\\Lib\\site-packages\\keras\\trainer.py", line 9 in fit',
    ]
    folding = LibraryFrames()
    shown = [out for line in lines for out in folding.shown(line)] + folding.flush()
    fold = "  … {} frame(s) inside installed libraries (TensorFlow, Keras) …"
    assert shown == [*lines[:3], fold.format(2), *lines[8:10], fold.format(1), lines[11], fold.format(1)]
    assert folding.flush() == []  # flushed once
