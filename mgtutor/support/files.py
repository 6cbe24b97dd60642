"""Write a file or folder so that a crash never leaves half of it: `atomic_write`.

Every write goes to a hidden temporary sibling, which replaces the target in
one ``os.replace`` (atomic on one file system); temp files left by writers
that died are removed by the next write to the same path. It imports nothing
heavy: the series runner and the benchmarks write their reports with it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path

from mgtutor.support.system import pid_alive

_TEMP_MARK = ".tmp-"


class ModelFileError(ValueError):
    """A saved file (a model, a training state) exists but cannot be read: truncated, corrupt, or not
    what its name says."""


def _split_name(name: str, ext: str) -> str:
    return name[: -len(ext)] if ext and name.endswith(ext) else name


def _temp_path(path: Path, ext: str) -> Path:
    """A hidden sibling of `path` that keeps its extension (Keras picks the format from it)."""
    stem = _split_name(path.name, ext)
    return path.with_name(f".{stem}{_TEMP_MARK}{os.getpid()}-{secrets.token_hex(4)}{ext}")


def _remove_stale_temps(path: Path, ext: str) -> None:
    """Delete temp files that writers killed mid-save left next to `path`."""
    prefix = f".{_split_name(path.name, ext)}{_TEMP_MARK}"
    if not path.parent.is_dir():
        return
    for candidate in path.parent.iterdir():
        if not (candidate.name.startswith(prefix) and candidate.name.endswith(ext)):
            continue
        pid = candidate.name[len(prefix) :].split("-", 1)[0]
        # A live writer's temp file is its work in progress: leave it alone.
        if pid.isdigit() and not pid_alive(int(pid)):
            if candidate.is_dir():
                shutil.rmtree(candidate, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    candidate.unlink()


def _fsync(path: Path) -> None:
    # Without fsync a power cut after the rename can leave the new name pointing
    # at data still in the page cache, i.e. at nothing.
    paths = [path] if not path.is_dir() else [p for p in path.rglob("*") if p.is_file()] + [path]
    for item in paths:
        try:
            fd = os.open(item, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError:
            pass  # some file systems refuse fsync on folders; the rename is still atomic


def _fsync_folder(folder: Path) -> None:
    with contextlib.suppress(OSError):  # makes the rename itself durable, where supported
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, ext: str = "") -> Iterator[Path]:
    """Yield a temporary path next to `path`; on success it replaces `path` in one step.

    Write the file (or folder) at the yielded path. If the block raises, or the
    process dies, `path` keeps its old content and the temp file is removed
    (now, or by the next save to `path` once its writer is dead). `ext` is kept
    at the end of the temp name, for writers that choose the format from it.
    """
    path = Path(path)
    _remove_stale_temps(path, ext)
    temp = _temp_path(path, ext)
    try:
        yield temp
        if not temp.exists():
            raise RuntimeError(f"nothing was written to {temp}; {path} is unchanged.")
        _fsync(temp)
        if temp.is_dir() and path.is_dir():
            # A folder cannot be renamed over a non-empty folder: move the old one
            # aside first. For an instant neither exists, but never a half one.
            old = _temp_path(path, ext)
            os.replace(path, old)
            os.replace(temp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(temp, path)
        _fsync_folder(path.parent)
    finally:
        if temp.is_dir():
            shutil.rmtree(temp, ignore_errors=True)
        elif temp.exists():
            temp.unlink()
