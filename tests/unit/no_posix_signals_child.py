"""Child of test_proctree.py: import the launcher as on Windows, where signal.SIGKILL and os.killpg
do not exist. Reports with `report_result`."""

import os
import signal

del signal.SIGKILL
del os.killpg

import mgtutor.training.cluster  # noqa: E402,F401
from mgtutor.support.processes import report_result  # noqa: E402
from mgtutor.training.proctree import hard_kill_signal  # noqa: E402

report_result({"imported": True, "hard_kill_signal": hard_kill_signal()})
