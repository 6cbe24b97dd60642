"""A script for `mgtutor.training.watched`'s tests: it reports how it was run, then sleeps if asked.

    python -m mgtutor.training.watched watched_child.py report     # argv, __name__, sys.path[0]
    python -m mgtutor.training.watched watched_child.py sleep      # ... then sleeps (in a named function)
"""

from __future__ import annotations

import json
import os
import sys
import time


def wait_here() -> None:
    print("waiting", flush=True)
    time.sleep(60)


print(json.dumps({"argv": sys.argv, "name": __name__, "path0": os.path.abspath(sys.path[0])}), flush=True)
if sys.argv[1:] == ["sleep"]:
    wait_here()
