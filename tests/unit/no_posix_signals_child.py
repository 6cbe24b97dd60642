"""Child of test_proctree.py: import the launcher as on Windows, where signal.SIGKILL and os.killpg
do not exist. Prints one JSON object."""

import json
import os
import signal

del signal.SIGKILL
del os.killpg

import mgtutor.cluster  # noqa: E402,F401
from mgtutor._proctree import hard_kill_signal  # noqa: E402

print(json.dumps({"imported": True, "hard_kill_signal": hard_kill_signal()}))
