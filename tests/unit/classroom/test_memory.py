"""ChildMemory: the peak of a notebook's kernel, and what it held when its last cell finished."""

import subprocess
import sys
import time

from mgtutor.classroom.memory import ChildMemory

HOLD_MB = 200
# Allocates and touches HOLD_MB, says so, then waits to be told to exit.
CHILD = f"import sys; b = bytearray({HOLD_MB} * 2**20); print('held', flush=True); sys.stdin.readline()"


def test_mark_keeps_what_the_child_held_after_it_exits():
    with ChildMemory(interval=0.05) as memory:
        child = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 text=True)  # fmt: skip
        assert child.stdout.readline().strip() == "held"
        memory.mark(cell=None, cell_index=0, execute_reply=None)  # as nbclient's hook calls it
        marked = memory.last_mb
        child.communicate("\n", timeout=30)
        time.sleep(0.3)  # background samples now see no child: they must not replace the mark
    # A bare interpreter adds well under 100 MB; the bytearray is resident because bytearray zero-fills it.
    assert HOLD_MB <= marked < HOLD_MB + 100
    assert memory.last_mb == marked and memory.peak_mb >= marked


def test_never_marked_is_zero_not_a_guess():
    with ChildMemory(interval=0.05) as memory:
        subprocess.run([sys.executable, "-c", "pass"], check=True)
    assert memory.last_mb == 0.0
