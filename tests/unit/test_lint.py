"""`make lint` stays clean: ruff over the package, tests, notebooks and benchmarks."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT


def test_ruff_check_is_clean():
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "mgtutor", "tests", "notebooks", "benchmarks", "tools",
         "cluster"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "All checks passed!" in result.stdout
