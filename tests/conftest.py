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
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_SHARED_DATA = ROOT.parent / "shared" / "data"

# Nothing may download at test time; TF's C++ logging is noise.
os.environ.setdefault("MGTUTOR_OFFLINE", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
if not os.environ.get("MGTUTOR_DATA_DIR") and _SHARED_DATA.is_dir():
    os.environ["MGTUTOR_DATA_DIR"] = str(_SHARED_DATA)


# The longest work first and the many sub-second unit tests last, so that the two workers end
# together instead of one waiting while the other finishes a two-minute child.
_LONGEST_FIRST = ("test_batchnorm", "test_resume", "test_averaging", "test_saving", "test_seed_scripts",
                  "test_cluster", "test_parallel")  # fmt: skip


def pytest_collection_modifyitems(config, items):
    def rank(item) -> int:
        module = item.nodeid.split("::", 1)[0].rsplit("/", 1)[-1].removesuffix(".py")
        if module in _LONGEST_FIRST:
            return _LONGEST_FIRST.index(module)
        return len(_LONGEST_FIRST) + (0 if item.get_closest_marker("notebook") else 1)

    items.sort(key=rank)


WAIT_FOR_OTHER_WORKER = 1800  # s: longer than any child's own timeout


class RunOnce:
    """A child's JSON result computed once per test run, by whichever xdist worker asks first.

    A module-scoped fixture runs once per worker that gets one of the module's tests, and
    pytest-xdist splits modules; the other workers wait for the result (and the files the
    child wrote in `folder(name)`) instead of running the same child again.
    """

    def __init__(self, shared: Path) -> None:
        self.shared = shared

    def folder(self, name: str) -> Path:
        return self.shared / name

    def __call__(self, name: str, compute) -> dict:
        result, failed = self.shared / f"{name}.json", self.shared / f"{name}.failed"
        try:
            os.close(os.open(self.shared / f"{name}.lock", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:  # another worker computes it
            waited = time.monotonic()
            while not result.exists():
                if time.monotonic() - waited > WAIT_FOR_OTHER_WORKER:
                    pytest.fail(f"{name}: no result from the worker running it in {WAIT_FOR_OTHER_WORKER} s")
                if failed.exists():
                    pytest.fail(f"{name}: failed in the worker that ran it: {failed.read_text()[-3000:]}")
                time.sleep(0.5)
            return json.loads(result.read_text())
        self.folder(name).mkdir(parents=True, exist_ok=True)
        try:
            value = compute(self.folder(name))
        except BaseException as err:
            failed.write_text(repr(err))
            raise
        temp = result.with_suffix(".tmp")
        temp.write_text(json.dumps(value))
        temp.replace(result)  # whole or absent: a waiting worker never reads half of it
        return value


@pytest.fixture(scope="session")
def run_once(tmp_path_factory) -> RunOnce:
    base = tmp_path_factory.getbasetemp()
    # Under xdist every worker's basetemp sits in this run's folder; alone, basetemp is it.
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base / "run-once"
    shared.mkdir(exist_ok=True)
    return RunOnce(shared)


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
