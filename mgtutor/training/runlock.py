"""One run per checkpoint folder: the lock a run holds on its ``checkpoint_dir`` while it trains.

Two runs started on one folder would both train, and each would overwrite the other's state. A
run takes ``checkpoint_dir/run.lock`` with the operating system's lock on an open file
(``fcntl.flock``; ``msvcrt.locking`` on Windows), held until it ends: the kernel drops it when the
process dies, so a killed run leaves a file that no process holds. The file says who took it
(process, host, command, start time). A second run while the first one lives is refused, naming
it; a run started after a kill takes the folder over, and says whose lock it found.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

LOCK_FILE = "run.lock"


class FolderInUse(RuntimeError):
    """Another live run holds this checkpoint folder; the message names it and what to do."""


@dataclass
class RunLock:
    """A checkpoint folder's lock, held by this run until `release`.

    `previous` is what the lock file said when it was taken: the owner of a run that ended without
    releasing it (killed), or None.
    """

    path: Path
    previous: dict[str, Any] | None
    handle: IO[str] | None  # None where the filesystem cannot lock: nothing held

    def stale_note(self, who: str) -> str:
        """The sentence saying whose lock this run found and took over ("" if none)."""
        if not self.previous:
            return ""
        return (
            f"{who}: {self.path.parent} held the lock of a run that no longer runs "
            f"({_owner_text(self.previous)}): it was stopped without ending, e.g. killed; this run takes "
            "the folder over."
        )

    def release(self) -> None:
        """Empty the file (a run that ended leaves no owner) and drop the lock. Idempotent."""
        if self.handle is None:
            return
        try:
            self.handle.seek(0)
            self.handle.truncate()
            self.handle.flush()
            _unlock(self.handle)
        finally:
            self.handle.close()
            self.handle = None


def command_text(argv: list[str], limit: int = 200) -> str:
    """The command as a reader recognises it: file names without their folders, and only whole words.

    Past `limit` characters the words left are counted, not cut ("[1 more argument: 231 characters]"):
    a JSON argument cut in the middle reads as a sentence cut off.
    """
    words = [os.path.basename(sys.executable), *(os.path.basename(a) for a in argv[:1]), *argv[1:]]
    words = [word for word in words if word]
    kept = 0
    while kept < len(words) and len(" ".join(words[: kept + 1])) <= limit:
        kept += 1
    kept = max(kept, min(2, len(words)))  # the program and its script, whatever their length
    if kept == len(words):
        return " ".join(words)
    rest = words[kept:]
    many = "s" if len(rest) > 1 else ""
    return f"{' '.join(words[:kept])} [{len(rest)} more argument{many}: {len(' '.join(rest))} characters]"


def _owner_text(owner: dict[str, Any]) -> str:
    return (
        f"process {owner.get('pid', '?')} on {owner.get('host', '?')}, started {owner.get('started', '?')}: "
        f"{owner.get('command', '?')}"
    )


def _lock(handle: IO[str]) -> bool:
    """Take the lock without waiting: True if this process holds it now, False if another one does."""
    try:
        import fcntl
    except ImportError:  # Windows
        import msvcrt

        handle.seek(0)
        try:
            msvcrt.locking(handle.fileno(), msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _unlock(handle: IO[str]) -> None:
    try:
        import fcntl
    except ImportError:
        import msvcrt

        handle.seek(0)
        msvcrt.locking(handle.fileno(), msvcrt.LK_UNLCK, 1)
        return
    fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _read(handle: IO[str]) -> dict[str, Any] | None:
    handle.seek(0)
    text = handle.read().strip()
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return {"command": f"an unreadable lock file ({text[:60]!r})"}


def take(folder: Path, who: str) -> RunLock:
    """This run's lock on `folder` (created if missing); `FolderInUse` if a live run holds it.

    `who` names the engine in the messages ("resumable_fit", "Trainer"). A filesystem that
    cannot lock files (some network ones) gives a warning and a lock that holds nothing.
    """
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOCK_FILE
    handle = open(path, "a+", encoding="utf-8")  # noqa: SIM115 (held for the whole run)
    try:
        held = _lock(handle)
    except OSError as error:  # ENOLCK, EOPNOTSUPP: this filesystem does not lock
        handle.close()
        warnings.warn(
            f"{who}: {folder} cannot be locked ({error}); a second run started on it would not be refused.",
            stacklevel=3,
        )
        return RunLock(path, None, None)
    if not held:
        owner = _read(handle)
        handle.close()
        raise FolderInUse(
            f"{who}: checkpoint_dir {str(folder)!r} is in use by another run "
            f"({_owner_text(owner or {})}). Two runs on one folder would each overwrite the other's "
            "checkpoints. Wait until it ends (or stop it), or give this run another checkpoint_dir."
        )
    previous = _read(handle)
    handle.seek(0)
    handle.truncate()
    owner = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.strftime("%Y-%m-%d %H:%M:%S"),
             "command": command_text(sys.argv)}  # fmt: skip
    handle.write(json.dumps(owner))
    handle.flush()
    return RunLock(path, previous, handle)
