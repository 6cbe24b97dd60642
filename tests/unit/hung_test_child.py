"""A test that never ends: `test_tiers` runs pytest on this file alone to see the suite's timeout stop it.

Not named ``test_*.py``, so the suite itself never collects it.
"""

import time


def test_sleeps_like_a_deadlocked_collective():
    time.sleep(600)
