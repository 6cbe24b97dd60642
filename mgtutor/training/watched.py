"""A worker script run as `doctor` runs it: ``python -m mgtutor.training.watched script.py args...``.

The script runs unchanged, as ``python script.py args...`` would run it (its folder first on
``sys.path``, ``__name__ == "__main__"``), with one thing added: the standard library's
`faulthandler` prints every thread's Python stack when the process gets ``SIGUSR1`` (POSIX),
or once, ``MGTUTOR_STACK_AFTER`` seconds after the start (Windows, where there is no such
signal). `doctor` sends the signal to a job that stopped moving, and reads where each worker
was from the stacks.
"""

from __future__ import annotations

import faulthandler
import os
import runpy
import signal
import sys
from collections.abc import Sequence

STACK_AFTER = "MGTUTOR_STACK_AFTER"


def main(argv: Sequence[str]) -> None:
    if not argv or not os.path.isfile(argv[0]):
        sys.exit(f"usage: python -m mgtutor.training.watched SCRIPT.py [ARGS...] (no script {argv[:1]})")
    if hasattr(signal, "SIGUSR1"):
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    elif float(os.environ.get(STACK_AFTER, "0") or 0) > 0:
        faulthandler.dump_traceback_later(float(os.environ[STACK_AFTER]))
    script = os.path.abspath(argv[0])
    sys.argv = [script, *argv[1:]]
    sys.path[0] = os.path.dirname(script)  # as `python script.py` sets it
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
