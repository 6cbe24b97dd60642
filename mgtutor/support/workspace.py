"""One ignored working folder per notebook: everything a notebook writes goes there."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

WORK_ROOT = "work"  # ignored by .gitignore wherever it appears
_MARKER = ".mgtutor-work"  # only folders made here are ever emptied
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def working_folder(notebook: str, *, fresh: bool = True, root: str | os.PathLike = WORK_ROOT) -> Path:
    """``work/<notebook>`` beside the running notebook, created if missing.

    With `fresh` (the default) it is emptied first, so running a notebook again
    from the top shows the same lesson instead of resuming the last run's
    leftovers. Pass ``fresh=False`` to keep them (e.g. to resume a killed run).
    """
    if not isinstance(notebook, str) or not _NAME.fullmatch(notebook):
        raise ValueError(
            f"notebook must be a plain name such as '07_save_and_restore' (letters, digits, _ . -), "
            f"got {notebook!r}."
        )
    if not isinstance(fresh, bool):
        raise TypeError(f"fresh must be True or False, got {fresh!r}.")
    folder = Path(os.fspath(root)).expanduser() / notebook
    if folder.exists() and not folder.is_dir():
        raise NotADirectoryError(f"{str(folder)!r} is a file; move it away so the notebook can use it.")
    if fresh and folder.is_dir() and any(folder.iterdir()):
        if not (folder / _MARKER).exists():
            raise FileExistsError(
                f"{str(folder)!r} exists but was not made by working_folder, so it is not emptied. Move it "
                "away, or pass fresh=False to write into it as it is."
            )
        for entry in folder.iterdir():
            if entry.name != _MARKER:
                shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / _MARKER).touch()
    return folder
