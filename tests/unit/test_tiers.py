"""`make test` and `make test-all`: no test falls between the two tiers, and the quick one keeps its musts.

The tiers are the Makefile's own pytest marker expressions, read from its recipes; a child process
collects the suite with each (collection only: nothing runs).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time

import pytest

from tests.conftest import QUICK_TIER, ROOT, run_child


def _marker_expression(target: str) -> str | None:
    """The `-m EXPR` of `make TARGET`'s pytest line, or None when it selects everything."""
    recipe = re.search(rf"^{re.escape(target)}:.*\n((?:\t.*\n)+)", (ROOT / "Makefile").read_text(), re.M)
    assert recipe, f"the Makefile has no {target} target"
    words = shlex.split(recipe.group(1))
    assert "pytest" in words, f"make {target} runs no pytest"
    options = words[words.index("pytest") + 1 :]  # after `python -m pytest`
    return options[options.index("-m") + 1] if "-m" in options else None


@pytest.mark.slow  # collects the suite twice in a child: 20 s; make test's 3 minutes: in make test-all
def test_the_quick_tier_and_the_slow_marker_make_the_whole_suite():
    quick, everything = _marker_expression("test"), _marker_expression("test-all")
    assert quick == QUICK_TIER and everything is None  # test-all selects every test
    # Not as an xdist worker: the child is a pytest run of its own.
    child, alone = ROOT / "tests" / "unit" / "tiers_child.py", {"PYTEST_XDIST_WORKER": ""}
    collected = run_child(child, quick, "slow", env=alone)
    ids = {"all": set(collected["all"]), "quick": set(collected[quick]), "slow": set(collected["slow"])}
    assert len(ids["all"]) == len(collected["all"])  # no id twice

    assert ids["quick"] | ids["slow"] == ids["all"]
    assert not ids["quick"] & ids["slow"]
    assert len(ids["quick"]) > 300 and len(ids["slow"]) > 50  # both tiers hold tests (562 in all here)
    # What the quick tier must still catch: lint, hygiene, one lesson end to end, a child process.
    must = ["tests/unit/test_lint.py::", "tests/unit/test_notebook_hygiene.py::",
            "test_lesson_offline_then_again_on_the_real_data[03_data_parallel_step]",
            "test_metric_sums_resume_per_replica_to_the_last_bit", "tests/unit/test_data.py::",
            "tests/unit/keras2/test_augment.py::", "tests/unit/training/test_checkpoints.py::"]  # fmt: skip
    for part in must:
        assert any(part in test for test in ids["quick"]), part
    assert not any("test_solution_on_real_data" in test for test in ids["quick"])


@pytest.mark.slow  # a pytest child: 6 s; make test's 3 minutes: in make test-all
def test_a_hung_test_fails_at_the_suites_timeout_with_its_stack():
    # The suite's own configuration (pyproject's `timeout`), shortened: a test that hangs (a
    # deadlocked all-reduce) must fail with its stack, not hang the run until CI's limit.
    child = ROOT / "tests" / "unit" / "hung_test_child.py"
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-o", "timeout=2", str(child)],
        capture_output=True, text=True, cwd=ROOT, timeout=120, env={**os.environ, "PYTEST_XDIST_WORKER": ""},
    )  # fmt: skip
    assert time.monotonic() - started < 60, "the 600 s sleep was not stopped"
    said = done.stdout + done.stderr
    assert done.returncode != 0, said[-2000:]
    # pytest-timeout's thread method dumps every thread's stack, then ends the process (an xdist
    # worker: xdist reports it crashed in this test and starts another for the rest).
    assert "+ Timeout +" in said and "in test_sleeps_like_a_deadlocked_collective" in said, said[-2000:]
    assert "time.sleep(600)" in said
