"""``python -m mgtutor COMMAND ...``: the package's commands for users' own jobs.

    python -m mgtutor doctor worker.py [--workers 2] [--no-run] [-- ARGS...]   # lesson 15's checks

Each command lives in its room and is loaded only when asked for, so this file imports nothing.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

COMMANDS = {"doctor": ("mgtutor.training.doctor", "read a worker script, run it watched, say what broke")}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in COMMANDS:
        listed = "\n".join(f"  {name}: {why}" for name, (_, why) in COMMANDS.items())
        print(f"usage: python -m mgtutor COMMAND [ARGS...]\ncommands:\n{listed}", file=sys.stderr)
        return 2
    return importlib.import_module(COMMANDS[argv[0]][0]).main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
