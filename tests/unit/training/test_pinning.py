"""Workers pinned to cores of their own (`launch(..., cores_per_worker=k)`, `mgtutor.training.pinning`).

The launcher's pinning is tested with ``plain_worker.py`` (plain Python, no TensorFlow): each worker
reports the cores it may run on and the variables that size TensorFlow's thread pools. Too many
cores are refused before any worker starts; where a system cannot pin (macOS, Windows; simulated
here), the workers run unpinned after one note. Lesson 14 measures what pinning is for.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mgtutor.training import pinning
from mgtutor.training.cluster import LocalCluster, launch

ROOT = Path(__file__).resolve().parents[3]
PLAIN = ROOT / "tests" / "unit" / "training" / "plain_worker.py"
CORES = pinning.usable_cores()
THREADS = ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", "OMP_NUM_THREADS")


def test_usable_cores_are_this_process_affinity():
    assert CORES == sorted(os.sched_getaffinity(0)) and len(CORES) >= 1


def test_core_sets_hand_out_distinct_cores_in_order():
    assert pinning.core_sets(1, 1) == [(CORES[0],)]
    assert pinning.core_sets(1, len(CORES)) == [tuple(CORES)]  # one process with every core
    sets = pinning.core_sets(len(CORES), 1)
    assert sets == [(core,) for core in CORES]  # one core each, none shared


def test_more_cores_than_this_process_may_use_are_refused_naming_both_numbers():
    asked = len(CORES) + 1
    with pytest.raises(ValueError, match=rf"{asked} worker\(s\) x cores_per_worker=1 need {asked} cores, "
                                         rf"but this process may use {len(CORES)} \(cores "):  # fmt: skip
        pinning.core_sets(asked, 1)
    with pytest.raises(ValueError, match=
            rf"need {2 * len(CORES)} cores, but this process may use {len(CORES)} "):
        pinning.plan(2, len(CORES))


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "1"])
def test_cores_per_worker_must_be_none_or_a_whole_number(bad):
    with pytest.raises(ValueError, match="cores_per_worker must be None .* or a whole number >= 1"):
        pinning.plan(1, bad)
    assert pinning.plan(1, None) is None


def test_launch_refuses_too_many_cores_before_any_worker_starts():
    cluster_args = dict(args=["cores"], stream=False, cores_per_worker=1)
    with pytest.raises(ValueError, match=f"but this process may use {len(CORES)}"):
        LocalCluster(PLAIN, len(CORES) + 1, **cluster_args)
    with pytest.raises(ValueError, match="cores_per_worker must be None"):
        launch(PLAIN, 1, args=["cores"], cores_per_worker=0)


def test_the_pin_script_pins_itself_then_becomes_the_command():
    show = [sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"]
    command = pinning.pinned_command([(CORES[-1],)], 0, show)
    shown = subprocess.run(command, capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert shown.strip() == f"[{CORES[-1]}]"
    usage = subprocess.run([sys.executable, pinning.__file__, "0"], capture_output=True, text=True)
    assert usage.returncode != 0 and "usage: python pinning.py CORES -- command" in usage.stderr


def test_each_worker_runs_on_its_own_cores_with_thread_pools_to_match():
    per_worker = 1
    result = launch(PLAIN, len(CORES), args=["cores"], timeout=60, stream=False, cores_per_worker=per_worker)

    assert result.ok and result.cores == tuple((core,) for core in CORES)
    for index, reported in enumerate(result.results):
        assert reported["cores"] == [CORES[index]]
        assert reported["threads"] == {name: str(per_worker) for name in THREADS}
    assert f"worker 0 pinned to {CORES[0]}" in result.summary()


def test_one_worker_with_every_core_gets_pools_of_that_size():
    result = launch(PLAIN, 1, args=["cores"], timeout=60, stream=False, cores_per_worker=len(CORES))
    assert result.ok and result.results[0]["cores"] == CORES
    assert result.results[0]["threads"] == {name: str(len(CORES)) for name in THREADS}


def test_unpinned_by_default_as_lesson_10_launches():
    result = launch(PLAIN, 1, args=["cores"], timeout=60, stream=False)
    assert result.ok and result.cores is None and "cores:" not in result.summary()
    assert result.results[0]["cores"] == CORES
    assert all(os.environ.get(name) == value for name, value in result.results[0]["threads"].items())


def test_where_no_process_can_be_pinned_workers_run_unpinned_after_one_note(monkeypatch, capsys):
    monkeypatch.setattr(pinning, "CAN_PIN", False)  # as on macOS and Windows
    monkeypatch.setattr(pinning, "_unpinned_told", False)
    first = launch(PLAIN, 1, args=["cores"], timeout=60, stream=False, cores_per_worker=1)
    second = launch(PLAIN, 1, args=["cores"], timeout=60, stream=False, cores_per_worker=1)

    printed = capsys.readouterr().out
    assert printed.count("Note: the workers are not pinned to cores") == 1  # once per process
    assert "speed figures may share cores" in printed
    for result in (first, second):
        assert result.ok and result.results[0]["cores"] == CORES  # not pinned...
        assert result.results[0]["threads"] == {name: "1" for name in THREADS}  # ...but its pools sized
        assert "worker 0 NOT pinned (this system cannot), sized for" in result.summary()
