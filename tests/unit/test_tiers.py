"""`make test` and `make test-all`: no test falls between the two tiers, and the quick one keeps its musts.

The tiers are the Makefile's own pytest marker expressions, read from its recipes; a child process
collects the suite with each (collection only: nothing runs).
"""

from __future__ import annotations

import re
import shlex

from tests.conftest import QUICK_TIER, ROOT, run_child


def _marker_expression(target: str) -> str | None:
    """The `-m EXPR` of `make TARGET`'s pytest line, or None when it selects everything."""
    recipe = re.search(rf"^{re.escape(target)}:.*\n((?:\t.*\n)+)", (ROOT / "Makefile").read_text(), re.M)
    assert recipe, f"the Makefile has no {target} target"
    words = shlex.split(recipe.group(1))
    assert "pytest" in words, f"make {target} runs no pytest"
    options = words[words.index("pytest") + 1 :]  # after `python -m pytest`
    return options[options.index("-m") + 1] if "-m" in options else None


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
