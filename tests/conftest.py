"""Shared test set-up: where the real data is, and running code in a fresh Python process.

Device set-up happens once per process (TensorFlow fixes its devices when it
starts), so every test that needs N simulated devices runs its code in a child
process through `run_python`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_SHARED_DATA = ROOT.parent / "shared" / "data"

# Nothing may download at test time; TF's C++ logging is noise.
os.environ.setdefault("MGTUTOR_OFFLINE", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
if not os.environ.get("MGTUTOR_DATA_DIR") and _SHARED_DATA.is_dir():
    os.environ["MGTUTOR_DATA_DIR"] = str(_SHARED_DATA)


# Modules whose module-scoped fixtures run TensorFlow children for many tests: each stays on one
# xdist worker (`--dist loadgroup`), so a fixture runs once, not once per worker.
# Longest first (measured on 2 cores: 2.5 min for test_batchnorm down to seconds for test_datakit).
_SHARED_CHILDREN = ("test_batchnorm", "test_saving", "test_averaging", "test_cluster", "test_parallel",
                    "test_augment", "test_datakit")  # fmt: skip
# The longest single tests without such a fixture (kill-and-resume, a seed script in a child).
_LONG_ALONE = {"test_resume", "test_seed_scripts"}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    # Longest work first and the many sub-second unit tests last: two workers then end together
    # instead of one waiting while the other finishes a two-minute child.
    def module(item) -> str:
        return item.nodeid.split("::", 1)[0].rsplit("/", 1)[-1].removesuffix(".py")

    for item in items:
        if module(item) in _SHARED_CHILDREN:
            item.add_marker(pytest.mark.xdist_group(module(item)))

    def rank(item) -> int:
        if module(item) in _SHARED_CHILDREN:
            return _SHARED_CHILDREN.index(module(item))
        if module(item) in _LONG_ALONE or item.get_closest_marker("notebook"):
            return len(_SHARED_CHILDREN)
        return len(_SHARED_CHILDREN) + 1

    items.sort(key=rank)


@pytest.fixture
def data_dir() -> Path:
    """The folder with the real data sets (CI: ../shared/data)."""
    value = os.environ.get("MGTUTOR_DATA_DIR")
    if not value or not Path(value).is_dir():
        pytest.skip("real data not available: set MGTUTOR_DATA_DIR to the shared data folder")
    return Path(value)


@pytest.fixture
def isolated_sources(tmp_path, monkeypatch) -> Path:
    """No data anywhere: empty Keras cache, no MGTUTOR_DATA_DIR, offline."""
    home = tmp_path / "keras_home"
    home.mkdir()
    monkeypatch.setenv("KERAS_HOME", str(home))
    monkeypatch.delenv("MGTUTOR_DATA_DIR", raising=False)
    monkeypatch.setenv("MGTUTOR_OFFLINE", "1")
    return home


def run_python(code: str, *, timeout: float = 300, env: dict[str, str] | None = None) -> dict:
    """Run `code` in a fresh interpreter; it must print one JSON object as its last line.

    Returns that object. A failing child fails the test with its stderr tail.
    """
    return _json_result(_run([sys.executable, "-c", textwrap.dedent(code)], timeout, env))


def child_process(
    path: Path, *args: object, timeout: float = 300, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """Run the program at `path` with `args` (as strings) in a fresh interpreter, mgtutor importable."""
    return _run([sys.executable, str(path), *map(str, args)], timeout, env)


def run_child(path: Path, *args: object, timeout: float = 300, env: dict[str, str] | None = None) -> dict:
    """`run_python` for a program in a file: `child_process`, then the JSON object its stdout ends with."""
    return _json_result(child_process(path, *args, timeout=timeout, env=env))


def child_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment with `env`; ROOT first on PYTHONPATH (a script's own folder is not ROOT)."""
    paths = [str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths), **(env or {})}


def _run(command: list[str], timeout: float, env: dict[str, str] | None) -> subprocess.CompletedProcess:
    env = child_env(env)
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)


def _json_result(result: subprocess.CompletedProcess) -> dict:
    if result.returncode != 0:
        pytest.fail(f"child process failed ({result.returncode}):\n{result.stderr[-4000:]}")
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    try:
        return json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        pytest.fail(f"child printed no JSON last line:\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}")
