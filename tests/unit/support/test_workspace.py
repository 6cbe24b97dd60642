"""mgtutor.support.workspace: each notebook writes into work/<notebook>, emptied on a fresh run."""

from __future__ import annotations

import pytest

from mgtutor.support.workspace import working_folder


def test_fresh_folder_is_emptied_and_kept_otherwise(tmp_path):
    folder = working_folder("07_save_and_restore", root=tmp_path / "work")
    assert folder == tmp_path / "work" / "07_save_and_restore" and folder.is_dir()
    (folder / "checkpoints").mkdir()
    (folder / "checkpoints" / "state.npz").write_bytes(b"x")
    (folder / "model.keras").write_bytes(b"y")
    kept = working_folder("07_save_and_restore", fresh=False, root=tmp_path / "work")
    kept_names = sorted(p.name for p in kept.iterdir() if not p.name.startswith("."))
    assert kept_names == ["checkpoints", "model.keras"]
    again = working_folder("07_save_and_restore", root=tmp_path / "work")
    assert [p.name for p in again.iterdir() if not p.name.startswith(".")] == []


def test_a_folder_it_did_not_make_is_never_emptied(tmp_path):
    foreign = tmp_path / "work" / "03_step"
    foreign.mkdir(parents=True)
    (foreign / "precious.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="was not made by working_folder"):
        working_folder("03_step", root=tmp_path / "work")
    assert (foreign / "precious.txt").read_text() == "mine"
    assert working_folder("03_step", fresh=False, root=tmp_path / "work") == foreign


@pytest.mark.parametrize("name", ["", "../escape", "a/b", 5, None])
def test_bad_names_are_refused_before_anything_is_made(tmp_path, name):
    with pytest.raises(ValueError, match="notebook must be a plain name"):
        working_folder(name, root=tmp_path / "work")
    assert not (tmp_path / "work").exists()
