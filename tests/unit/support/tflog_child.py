"""The child program of test_tflog: quiets its fd 2 as `setup_devices` does, then writes to it.

    python tests/unit/support/tflog_child.py lines        # TF-like and plain lines written with os.write
    python tests/unit/support/tflog_child.py tensorflow   # the real thing: setup_devices(2) starts TensorFlow
    python tests/unit/support/tflog_child.py keras-first  # `from mgtutor import <a Keras name>` first

It prints what it found out as one JSON line on stdout; the test reads its stderr.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

# Real lines from TensorFlow 2.21's start-up on a CPU machine.
TF_LINES = (
    b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
    b"I0000 00:00:1795454077.083047    5446 port.cc:153] oneDNN custom operations are on.\n"
    b"E0000 00:00:1795454078.915999    5446 cuda_platform.cc:52] failed call to cuInit: (303)\n"
)

mode = sys.argv[1]
if mode == "lines":
    from mgtutor.support.tflog import quiet_native_stderr, quiet_tensorflow, restore_native_stderr

    quiet_tensorflow()
    again = quiet_native_stderr()  # a second call changes nothing
    os.write(2, TF_LINES + b"kept 1\n")
    os.write(2, b"kept 2 without its newline, ")
    time.sleep(0.5)  # the filter passes a partial line on rather than holding it
    os.write(2, b"then the rest\n")
    print("kept 3 from Python's sys.stderr", file=sys.stderr, flush=True)
    # A program this one starts inherits the filtered fd 2.
    grandchild = f"import os; os.write(2, {TF_LINES!r} + b'kept 4 from a child\\n')"
    subprocess.run([sys.executable, "-c", grandchild], check=True)
    restore_native_stderr()
    os.write(2, b"I0000 00:00:1.0 1 restored.cc:1] shown once restored\n")
    print(json.dumps({"again": again, "level": os.environ.get("TF_CPP_MIN_LOG_LEVEL")}), flush=True)
    quiet_native_stderr()
    os.write(2, TF_LINES)
    # The traceback is written at exit, after the last Python line: it must still come through.
    raise RuntimeError("kept 5 at exit")
elif mode == "tensorflow":
    import logging

    # Interactive, as in a notebook: there TensorFlow's logger prints INFO lines to stdout.
    sys.ps1 = ">>> "
    from mgtutor import setup_devices

    devices = setup_devices(2, verbose=False)
    import tensorflow as tf

    strategy = tf.distribute.MirroredStrategy(list(devices))  # logs "Using MirroredStrategy" at INFO
    with strategy.scope():
        total = tf.Variable(tf.reduce_sum(tf.ones((4,))))  # the runtime really starts
    print(json.dumps({"devices": list(devices), "total": float(total.numpy()),
                      "tf_level": logging.getLogger("tensorflow").level}), flush=True)  # fmt: skip
elif mode == "keras-first":
    # A notebook's import cell: names that import Keras, before setup_devices.
    from mgtutor import ProgressBar, build_model, setup_devices

    devices = setup_devices(2, verbose=False)
    model = build_model("seed_cnn", (12, 12, 3), 3, seed=0)
    print(json.dumps({"devices": len(devices), "params": model.count_params(),
                      "bar": ProgressBar.__name__}), flush=True)  # fmt: skip
else:
    raise SystemExit(f"unknown mode {mode!r}: pass 'lines', 'tensorflow' or 'keras-first'")
