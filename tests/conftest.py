"""Shared test set-up: where the real data is, and running code in a fresh Python process.

Device set-up happens once per process (TensorFlow fixes its devices when it
starts), so every test that needs N simulated devices runs a child program (a file
beside its test) through `run_child`.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_SHARED_DATA = ROOT.parent / "shared" / "data"

# Nothing may download at test time; TF's C++ logging is noise.
os.environ.setdefault("MGTUTOR_OFFLINE", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
if not os.environ.get("MGTUTOR_DATA_DIR") and _SHARED_DATA.is_dir():
    os.environ["MGTUTOR_DATA_DIR"] = str(_SHARED_DATA)


# Seconds the slow tests take on a 2-core machine under `make test-all`'s own load (its JUnit report, the CI
# rehearsal of 2026-11-30 00:31 on the Xeon with AMX: every test of 18 s or more), so that the longest start
# first and the workers end together; any other test takes about a second. Tests that read a background
# child's result (see BACKGROUND) come after the slow ones, when it is most likely there. Lesson 17 and the
# Slurm tests share one cluster lock: 17 starts first. The lessons' keys are read for the sweep's draw too.
SECONDS = {
    "again_on_the_real_data[17": 425, "any_data[15": 193, "again_on_the_real_data[07": 175,
    "script_on_two_nodes": 160, "again_on_the_real_data[16": 154, "again_on_the_real_data[10": 151,
    "again_on_the_real_data[08": 147, "again_on_the_real_data[14": 134, "again_on_the_real_data[12": 132,
    "solution_on_real_data[10": 102, "any_data[11": 91, "again_on_the_real_data[09": 89,
    "killed_twice_and_restarted": 130, "make_run_end_to_end": 78, "jax_route_needs_no_tensorflow": 76,
    "a_good_set_up_passes": 74, "cli_study_on_one_and_two": 72, "again_on_the_real_data[04": 69,
    "isolated_workers_listen_on_no_port": 63, "runs_killed_mid_epoch_resume": 60,
    "jax_route_resumes_exactly": 59, "the_shards_hold": 49, "any_data[13": 48,
    "solution_on_real_data[11": 44, "solution_on_real_data[08": 43, "again_on_the_real_data[06": 43,
    "solution_on_real_data[09": 42, "again_on_the_real_data[02": 42, "the_quick_tier": 42,
    "resumed_on_1_worker_after": 42, "any_data[05": 41, "resumed_on_4_replicas_after": 41,
    "one_device_gradients[GPipe-2-1]": 40, "solution_on_real_data[17": 40, "accumulating_workers_killed": 39,
    "solution_on_real_data[18": 39, "two_workers_accumulating": 38, "again_on_the_real_data[03": 38,
    "solution_on_real_data[15": 34, "solution_on_real_data[07": 34, "solution_on_real_data[12": 34,
    "two_workers_train_identical": 32, "solution_on_real_data[14": 31, "train_recipe_trains": 31,
    "two_replicas_accumulate": 31, "solution_on_real_data[13": 30, "seed_000_runs": 30,
    "jupyterlab_runs_notebook": 29, "any_data[18": 28, "the_whitening_bias": 28,
    "saved_on_1_device_loads_on_4": 28, "resumed_on_4_replicas_a_model": 28, "solution_on_real_data[16": 27,
    "a_save_killed": 26,
    "solution_on_real_data[06": 26, "mirrored_strategy_matches_keras": 26, "a_job_killed": 25,
    "be_imported[": 25, "frequency_one_equals_synchronous_training[sgd]": 25,
    "full_disk_names_the_folder_and_the_bytes_and_the_run": 25, "solution_on_real_data[03": 24,
    "solution_on_real_data[02": 23, "resumed_on_1_worker_a_model": 22, "doctor_runs_the_seeded_worker": 21,
    "a_second_run_on": 21, "solution_on_real_data[05": 21, "solution_on_real_data[04": 20,
    "again_on_the_real_data[01": 20, "one_step_compiled": 18, "every_stage_trains_like_data_parallelism": 18,
    "make_run_runs": 18,
}  # fmt: skip


# Two tiers, by marker: `make test` runs `-m "not slow"` (about 3 minutes), `make test-all` runs
# everything. Marked slow by hand: tests that execute a notebook, drive a browser or start TensorFlow
# in child processes; marked here: every test that reads a shared child (`run_once`).
QUICK_TIER = "not slow"
TIERS_FILE = "tiers.json"
_TIERS = pytest.StashKey[dict]()


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects: the marks added here count
def pytest_collection_modifyitems(config, items):
    for item in items:
        if "run_once" in item.fixturenames:
            item.add_marker(pytest.mark.slow)
    slow = sum(1 for item in items if item.get_closest_marker("slow"))
    tiers = {"quick": len(items) - slow, "slow": slow}
    config.stash[_TIERS] = tiers
    if os.environ.get("PYTEST_XDIST_WORKER") == "gw0":  # for the controller's summary
        (_shared_folder(config) / TIERS_FILE).write_text(json.dumps(tiers))

    readers = {module for _, modules in BACKGROUND.values() for module in modules}

    def seconds(item) -> float:
        if item.module is not None and item.module.__name__ in readers:
            return 2.0
        drawn = re.search(r"a_drawn_sample_of_the_taken_sets_runs\[seed\d+-(\d\d)_", item.nodeid)
        if drawn:  # one lesson offline: the drawn lesson's time (17's is 100 s; started mid-run it ran last)
            lesson = drawn.group(1)
            both = SECONDS.get(f"again_on_the_real_data[{lesson}")
            return SECONDS.get(f"any_data[{lesson}", both / 2 if both else 30.0)
        return next((v for k, v in SECONDS.items() if k in item.nodeid), 1.0)

    items.sort(key=seconds, reverse=True)  # stable: the rest keep their order


# One JAX compilation cache for the whole run, shared by both xdist workers and every process they start
# (kernels, scripts, workers): a program XLA compiled once (lesson 12's, the cluster script's JAX route
# in lesson 17 and its tests, the pipeline's and the shards' steps) is read back, not compiled again.
# Each run starts it empty in its basetemp, so the first compile of every program is still tested.
# Measured on the JAX tests (140, -n 2, Xeon with AMX): 545 -> 457 test-seconds, 292 -> 247 s.
# `make run` does not set it: the lessons' compile times are what they show.
JAX_CACHE = "jax-compilation-cache"


@pytest.hookimpl(trylast=True)  # after the tmpdir plugin has made the basetemp
def pytest_configure(config):
    os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", str(_shared_folder(config) / JAX_CACHE))


def _shared_folder(config) -> Path:
    """The folder every xdist worker and the controller see: this run's basetemp."""
    base = config._tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def pytest_terminal_summary(terminalreporter, config):
    if config.getoption("markexpr", "") != QUICK_TIER:
        return
    tiers = config.stash.get(_TIERS, None)
    if tiers is None:  # the xdist controller collects nothing itself
        path = _shared_folder(config) / TIERS_FILE
        tiers = json.loads(path.read_text()) if path.exists() else None
    if tiers:
        terminalreporter.write_line(
            f"make test: {tiers['quick']} tests in the quick tier; {tiers['slow']} more (marked slow) "
            "run in `make test-all`."
        )


WAIT_FOR_OTHER_WORKER = 1100  # s: longer than any child's own timeout, shorter than pytest's per-test one


class RunOnce:
    """A child's JSON result computed once per test run, shared by every xdist worker.

    Whichever worker claims a name first computes it, in the foreground (`__call__`) or in a
    background thread (`start`); the others read its result (and the files it wrote in
    `folder(name)`) once it is there, instead of running the same child again.
    """

    def __init__(self, shared: Path) -> None:
        self.shared = shared
        self.threads: list[threading.Thread] = []

    def folder(self, name: str) -> Path:
        return self.shared / name

    def __call__(self, name: str, compute) -> dict:
        """The result of `compute(folder)`: computed here unless some worker has started it."""
        if self._claim(name):
            self._compute(name, compute, reraise=True)
        return self._wait(name)

    def start(self, name: str, compute) -> None:
        """Compute it in a background thread of this process, unless some worker has started it."""
        if self._claim(name):
            thread = threading.Thread(target=self._compute, args=(name, compute), daemon=True)
            thread.start()
            self.threads.append(thread)

    def _claim(self, name: str) -> bool:
        try:
            os.close(os.open(self.shared / f"{name}.lock", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return False
        return True

    def _compute(self, name: str, compute, reraise: bool = False) -> None:
        self.folder(name).mkdir(parents=True, exist_ok=True)
        try:
            value = compute(self.folder(name))
        except BaseException as err:  # pytest.fail included: the waiting tests fail with it
            (self.shared / f"{name}.failed").write_text(f"{type(err).__name__}: {err}")
            if reraise:
                raise
            return
        temp = self.shared / f"{name}.tmp"
        temp.write_text(json.dumps(value))
        temp.replace(self.shared / f"{name}.json")  # whole or absent: a waiting test never reads half

    def _wait(self, name: str) -> dict:
        result, failed = self.shared / f"{name}.json", self.shared / f"{name}.failed"
        waited = time.monotonic()
        while not result.exists():
            if failed.exists():
                pytest.fail(f"{name}: its child failed: {failed.read_text()[-3000:]}")
            if time.monotonic() - waited > WAIT_FOR_OTHER_WORKER:
                pytest.fail(f"{name}: no result in {WAIT_FOR_OTHER_WORKER} s")
            time.sleep(0.5)
        return json.loads(result.read_text())


@pytest.fixture(scope="session")
def run_once(tmp_path_factory) -> Iterator[RunOnce]:
    base = tmp_path_factory.getbasetemp()
    # Under xdist every worker's basetemp sits in this run's folder; alone, basetemp is it.
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base / "run-once"
    shared.mkdir(exist_ok=True)
    runner = RunOnce(shared)
    yield runner
    for thread in runner.threads:  # no child outlives the session
        thread.join()


# The children that several tests read: name -> (its `compute(folder) -> dict`, the test modules that
# read it). They start in the background when the session starts (when a reader's tests are among
# those selected), so their minutes overlap other tests instead of a worker waiting for them.
BACKGROUND = {
    "batchnorm": ("tests.unit.test_batchnorm:children", ["tests.unit.test_batchnorm"]),
    "averaging": ("tests.unit.test_parameter_averaging:children", ["tests.unit.test_parameter_averaging"]),
    "parallel": ("tests.unit.test_data_parallel:children", ["tests.unit.test_data_parallel"]),
    "towers": ("tests.unit.speed.test_study:towers_children",
               ["tests.unit.speed.test_study", "tests.unit.keras2.test_fit_generator"]),
}  # fmt: skip


def background(name: str):
    """The compute function of a background child (for a reader in another module than its own)."""
    module, function = BACKGROUND[name][0].split(":")
    return getattr(importlib.import_module(module), function)


@pytest.fixture(scope="session", autouse=True)
def _start_background_children(request) -> None:
    # `run_once` looked up here, not named as an argument: only its readers list it among their
    # fixtures, which is what marks them slow.
    selected = {item.module.__name__ for item in request.session.items if "run_once" in item.fixturenames}
    for name, (_, readers) in BACKGROUND.items():
        if selected.intersection(readers):
            request.getfixturevalue("run_once").start(name, background(name))


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


def child_process(
    path: Path, *args: object, timeout: float = 300, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """Run the program at `path` with `args` in a fresh interpreter, mgtutor importable; its raw output."""
    command = [sys.executable, str(path), *map(str, args)]
    env = child_env(env)
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)


def run_child(path: Path, *args: object, timeout: float = 300, env: dict[str, str] | None = None) -> dict:
    """Run the program at `path` as a notebook does (`run_script`): the values it passed to `report_result`.

    A child that fails, or reports nothing, fails the test with its last lines.
    """
    from mgtutor.support.processes import run_script

    env = child_env(env)
    outcome = run_script(path, *args, cwd=ROOT, env=env, timeout=timeout, stream=False, check=False)
    if outcome.returncode != 0 or outcome.result is None:
        why = f"failed (exit {outcome.returncode})" if outcome.returncode else "reported no result"
        pytest.fail(f"{path.name} {why}:\n" + "\n".join(outcome.tail))
    return outcome.result


def child_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment with `env`; ROOT first on PYTHONPATH (a script's own folder is not ROOT)."""
    paths = [str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths), **(env or {})}
