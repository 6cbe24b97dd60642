"""Run a Python script in a child process, show its output, and collect the result it reports.

A child is how a notebook gets a fresh TensorFlow (another device count, a clean
reload) or a process it may kill. `run_script` streams the child's lines into the
notebook as they come (TensorFlow's start-up chatter left out), raises with the
child's last lines when it fails, and returns the values the child passed to
`report_result`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mgtutor.support.checks import is_real
from mgtutor.support.tflog import TF_NOISE, LibraryFrames

RESULT_MARK = "MGTUTOR_RESULT "
TAIL_LINES = 60


class ScriptError(RuntimeError):
    """A child script failed or timed out; the message holds its last lines."""


@dataclass(frozen=True)
class ScriptResult:
    """How a child ended: exit code, its last output lines, its reported values, its duration."""

    returncode: int
    tail: tuple[str, ...]
    result: dict[str, Any] | None
    seconds: float


def report_result(values: Mapping[str, Any]) -> None:
    """Print `values` as this process's result line, for `run_script` or `launch` to collect."""
    if not isinstance(values, Mapping):
        raise TypeError(f"values must be a dict of JSON-serializable values, got {type(values).__name__}.")

    def plain(value: Any) -> Any:
        tolist = getattr(value, "tolist", None)  # numpy scalars and arrays
        if callable(tolist):
            return tolist()
        raise TypeError(f"report_result: {value!r} ({type(value).__name__}) is not JSON-serializable.")

    print(RESULT_MARK + json.dumps(dict(values), default=plain), flush=True)


def parse_result(line: str) -> dict[str, Any] | None:
    """The values of a `report_result` line, or None for any other line."""
    if not line.startswith(RESULT_MARK):
        return None
    try:
        return json.loads(line[len(RESULT_MARK) :])
    except ValueError:
        return None


def _argv(script: Any, args: Sequence[Any]) -> list[str]:
    if isinstance(script, (str, os.PathLike)):
        path = Path(os.fspath(script))
        if not path.is_file():
            raise FileNotFoundError(f"script: no Python file {str(path)!r}; write it first (%%writefile).")
        command = [sys.executable, str(path)]
    elif isinstance(script, Sequence) and script and all(isinstance(a, (str, os.PathLike)) for a in script):
        command = [os.fspath(a) for a in script]
    else:
        raise TypeError(f"script must be a file path or an argv list of strings, got {script!r}.")
    for arg in args:
        if isinstance(arg, bool) or not isinstance(arg, (str, os.PathLike, int, float)):
            raise TypeError(f"args: {arg!r} is not a string, path or number.")
    return command + [os.fspath(a) if isinstance(a, os.PathLike) else str(a) for a in args]


def run_script(
    script: str | os.PathLike | Sequence[str],
    *args: Any,
    cwd: str | os.PathLike | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
    stream: bool = True,
    check: bool = True,
) -> ScriptResult:
    """Run `script` (a .py file, with this Python, or an argv list) with `args`; wait for it.

    Its output is printed line by line while it runs (`stream`), TensorFlow's
    C++ start-up lines left out. With `check`, a non-zero exit or `timeout`
    seconds raises `ScriptError` with the child's last lines.
    """
    argv = _argv(script, args)
    bad_timeout = not is_real(timeout) or timeout <= 0
    if timeout is not None and bad_timeout:
        raise ValueError(f"timeout must be a number of seconds > 0 or None, got {timeout!r}.")
    child_env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"),
                 "PYTHONUNBUFFERED": "1", **(env or {})}  # fmt: skip
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    found: list[dict[str, Any]] = []
    started = time.monotonic()
    process = subprocess.Popen(
        argv, cwd=cwd, env=child_env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, errors="replace", bufsize=1,
    )  # fmt: skip

    def read() -> None:
        assert process.stdout is not None
        folding = LibraryFrames()  # shown lines only: the tail keeps every frame
        for raw in process.stdout:
            line = raw.rstrip("\n")
            result = parse_result(line)
            if result is not None:
                found.append(result)
            elif not TF_NOISE.match(line):
                tail.append(line)
                for shown in folding.shown(line) if stream else []:
                    print(shown, flush=True)
        for shown in folding.flush() if stream else []:
            print(shown, flush=True)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        reader.join(timeout=5)
        late = f"{' '.join(argv[:2])} did not finish within {timeout:g} s; it was killed."
        raise ScriptError(late + " Its last lines:\n" + "\n".join(tail)) from None
    except BaseException:  # Ctrl-C in the notebook: the child must not outlive the cell
        process.kill()
        process.wait()
        raise
    reader.join(timeout=5)
    outcome = ScriptResult(process.returncode, tuple(tail), found[-1] if found else None,
                           time.monotonic() - started)  # fmt: skip
    if check and process.returncode != 0:
        raise ScriptError(
            f"{' '.join(argv[:2])} failed (exit {process.returncode}). Its last lines:\n" + "\n".join(tail)
        )
    return outcome
