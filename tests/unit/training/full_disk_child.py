"""Checkpoints written on a disk that fills up, for real: a small tmpfs the test mounts in a mount namespace.

    unshare --mount sh -c 'mount -t tmpfs -o size=256k tmpfs DISK && python full_disk_child.py DISK'

Prints a JSON report: the error of the write that found the disk full, where the folder's state
still resumes from, the files left, and the up-front refusal of a state the disk cannot hold.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np

from mgtutor.training import checkpoints


class Value:
    """What the checkpoint engine reads of a variable: its shape and its values."""

    def __init__(self, array: np.ndarray) -> None:
        self.array, self.shape = array, array.shape

    def numpy(self) -> np.ndarray:
        return self.array


disk = Path(sys.argv[1])
folder = disk / "run"
groups = {"model": [Value(np.ones((100, 100), np.float32))]}  # 40,000 bytes
state = checkpoints.new_state({"batch_size": 32})
checkpoints.write_state(folder, {**state, "step": 2}, groups)  # the last good checkpoint
(disk / "filler").write_bytes(bytes(shutil.disk_usage(disk).free - 20_000))  # a disk nearly full
report = {}
try:
    checkpoints.write_state(folder, {**state, "step": 4}, groups)
except OSError as error:
    report.update(errno=error.errno, message=str(error))
report["resume_point"] = checkpoints.resume_point(folder)
report["files"] = sorted(os.listdir(folder))
try:
    more = {**groups, "optimizer": [Value(np.ones((100, 100), np.float32))]}  # more than the disk has left
    checkpoints.check_room(folder, more, "Trainer")
except OSError as error:
    report["refused"] = str(error)
print(json.dumps(report))
