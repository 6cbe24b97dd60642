"""One run per checkpoint folder: a second live run is refused, naming the first; a killed run is not."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from mgtutor.training import runlock
from tests.conftest import ROOT, child_env

HOLDER = ROOT / "tests" / "unit" / "training" / "runlock_child.py"


def hold_in_another_process(folder):
    """A process holding `folder`'s lock, as a live run does; it has taken it when this returns."""
    proc = subprocess.Popen([sys.executable, str(HOLDER), str(folder)], stdout=subprocess.PIPE, text=True,
                            env=child_env())  # fmt: skip
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_run_takes_the_folder_says_who_it_is_and_leaves_it_free(tmp_path):
    lock = runlock.take(tmp_path / "run", "resumable_fit")
    owner = json.loads((tmp_path / "run" / runlock.LOCK_FILE).read_text())
    assert owner["pid"] > 0 and owner["host"] and owner["started"] and lock.previous is None
    lock.release()
    lock.release()  # twice is fine
    assert (tmp_path / "run" / runlock.LOCK_FILE).read_text() == ""  # ended: no owner left
    again = runlock.take(tmp_path / "run", "resumable_fit")
    assert again.previous is None and again.stale_note("resumable_fit") == ""
    again.release()


def test_a_second_run_while_the_first_lives_is_refused_naming_it(tmp_path):
    first = hold_in_another_process(tmp_path)
    try:
        with pytest.raises(runlock.FolderInUse) as refused:
            runlock.take(tmp_path, "Trainer")
        message = str(refused.value)
        assert f"checkpoint_dir {str(tmp_path)!r} is in use by another run (process {first.pid} on" in message
        assert "another checkpoint_dir" in message  # the fix
    finally:
        first.kill()
        first.wait()


def test_in_one_process_a_second_take_is_refused_too(tmp_path):
    lock = runlock.take(tmp_path, "resumable_fit")
    try:
        with pytest.raises(runlock.FolderInUse):
            runlock.take(tmp_path, "resumable_fit")
    finally:
        lock.release()


def test_a_killed_runs_lock_does_not_block_a_restart_which_says_whose_it_was(tmp_path):
    killed = hold_in_another_process(tmp_path)
    killed.kill()  # SIGKILL: no chance to release; the kernel drops the lock
    killed.wait()
    lock = runlock.take(tmp_path, "resumable_fit")
    try:
        assert lock.previous["pid"] == killed.pid
        note = lock.stale_note("resumable_fit")
        assert f"process {killed.pid} on" in note and "no longer runs" in note
        assert "takes the folder over" in note
    finally:
        lock.release()


def test_the_owners_command_names_its_files_without_folders_and_counts_what_it_leaves_out():
    python = runlock.os.path.basename(sys.executable)
    short = runlock.command_text(["/home/someone/course/work/worker.py", "--fast"])
    assert short == f"{python} worker.py --fast"
    settings = json.dumps({f"key{i}": i for i in range(60)})
    long = runlock.command_text(["/tmp/x/train.py", "--fast", settings, "again"], limit=80)
    # Whole words only: a JSON argument cut in the middle would read as a sentence cut off.
    assert long == f"{python} train.py --fast [2 more arguments: {len(settings) + 6} characters]"
    assert runlock.command_text(["/tmp/x/" + "t" * 90 + ".py", settings], limit=40) == (
        f"{python} {'t' * 90}.py [1 more argument: {len(settings)} characters]"  # the script, however long
    )
