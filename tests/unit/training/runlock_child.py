"""Holds a checkpoint folder's run lock, as a training run does, until killed (`test_runlock`).

    python runlock_child.py FOLDER   # prints "held", then sleeps
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from mgtutor.training import runlock

lock = runlock.take(Path(sys.argv[1]), "a run")
print("held", flush=True)
time.sleep(120)
