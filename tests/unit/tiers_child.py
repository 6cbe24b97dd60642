"""The child program of test_tiers.py: the suite collected three ways in one process (nothing runs).

    python tests/unit/tiers_child.py "not slow" slow

Reports the test ids pytest collects with no marker expression (key "all") and with each one given.
One process, so TensorFlow and the test modules are imported once for the three collections.
"""

import contextlib
import io
import sys

import pytest

from mgtutor.support.processes import report_result


class Collected:
    def __init__(self) -> None:
        self.ids: list[str] = []

    def pytest_collection_finish(self, session) -> None:
        self.ids = [item.nodeid for item in session.items]


def collect(*expression: str) -> list[str]:
    plugin = Collected()
    arguments = ["--collect-only", "-q", "-p", "no:cacheprovider", "-p", "no:xdist"]
    with contextlib.redirect_stdout(io.StringIO()):
        code = pytest.main([*arguments, *(["-m", expression[0]] if expression else [])], plugins=[plugin])
    if code != 0:
        raise SystemExit(f"collection {expression or 'all'} failed with exit {code}")
    return plugin.ids


report_result({"all": collect(), **{expression: collect(expression) for expression in sys.argv[1:]}})
