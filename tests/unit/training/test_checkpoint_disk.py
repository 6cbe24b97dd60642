"""A checkpoint on a full disk, for real (a small tmpfs in a mount namespace): the folder and bytes named."""

from __future__ import annotations

import errno
import json
import shlex
import shutil
import subprocess
import sys

import pytest

from tests.conftest import ROOT, child_env

CHILD = ROOT / "tests" / "unit" / "training" / "full_disk_child.py"


def on_a_small_disk(tmp_path, size: str, script: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run the shell `script` with a tmpfs of `size` mounted at ``{disk}``, seen by that shell alone."""
    disk = tmp_path / "disk"
    disk.mkdir(parents=True)
    prefixes = (["unshare", "--mount"], ["unshare", "--user", "--map-root-user", "--mount"])
    usable = [p for p in prefixes if shutil.which("unshare") and subprocess.run([*p, "true"]).returncode == 0]
    if not usable:
        pytest.skip("no mount namespace here (unshare --mount, or a user namespace): no small disk to fill")
    mount = f"mount -t tmpfs -o size={size} tmpfs {shlex.quote(str(disk))}"
    command = f"{mount} && {script.format(disk=shlex.quote(str(disk)))}"
    return subprocess.run([*usable[0], "sh", "-c", command], capture_output=True, text=True, env=child_env(),
                          timeout=timeout, cwd=ROOT)  # fmt: skip


def test_a_full_disk_names_the_folder_and_the_bytes_and_keeps_the_last_state(tmp_path):
    done = on_a_small_disk(tmp_path, "256k", f"{shlex.join([sys.executable, str(CHILD)])} {{disk}}")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["errno"] == errno.ENOSPC
    message = report["message"]
    assert "no space left in checkpoint_dir '" in message
    assert "/disk/run' to write resume-state.npz" in message
    needed = int(message.split("it needs ")[1].split(" bytes")[0].replace(",", ""))
    assert 40_000 < needed < 50_000  # the 40,000 bytes of values, and the file's headers
    assert "The last checkpoint there (epoch 1, batch 2) is intact." in message
    assert report["resume_point"] == [0, 2]  # the state before the full disk, whole
    assert report["files"] == ["resume-state.npz"]  # no half-written temporary left
    assert report["refused"].startswith("[Errno 28] Trainer: no space left in checkpoint_dir")
