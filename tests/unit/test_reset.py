"""`make reset`: notebooks/ back to its committed state, in a clone of this repository."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.conftest import ROOT


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_reset_restores_notebooks_and_lists_what_it_reset(tmp_path):
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    shutil.copy(ROOT / "Makefile", clone / "Makefile")  # this checkout's, committed or not
    notebook = clone / "notebooks" / "00_environment.ipynb"
    committed = notebook.read_bytes()
    notebook.write_text("{}")  # a learner's edit
    (clone / "notebooks" / "work" / "00_environment").mkdir(parents=True)
    (clone / "notebooks" / "work" / "00_environment" / "model.keras").write_bytes(b"x")
    (clone / "notebooks" / ".ipynb_checkpoints").mkdir()
    (clone / "notebooks" / "Untitled.ipynb").write_text("{}")
    done = subprocess.run(["make", "-s", "reset"], cwd=clone, capture_output=True, text=True, check=True)
    assert notebook.read_bytes() == committed
    assert not (clone / "notebooks" / "work").exists()
    assert not (clone / "notebooks" / ".ipynb_checkpoints").exists()
    assert not (clone / "notebooks" / "Untitled.ipynb").exists()
    for listed in ("00_environment.ipynb", "notebooks/work/", "Untitled.ipynb"):
        assert listed in done.stdout
    status = subprocess.run(["git", "status", "--porcelain", "--ignored", "--", "notebooks"], cwd=clone,
                            capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert status == ""
