"""A checklist, as `make check` and `doctor` print it: each line ok, WARN or FAIL, and a FAIL's fix."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass
class Check:
    """One line of a checklist: `ok` or not, what was found, and what to do when it is not ok."""

    name: str
    ok: bool
    detail: str
    fix: str = ""
    warning: bool = False  # shown, not counted as a failure
    value: float | None = None  # a measured figure another line or report reads (make check's estimate)


def failed(checks: Sequence[Check]) -> bool:
    """True when any check failed (a warning is not a failure)."""
    return any(not c.ok and not c.warning for c in checks)


def format_checklist(checks: Sequence[Check], colour: bool = False) -> str:
    """One line per check (``  ok  name: detail``), and under each one not ok its ``fix:``."""
    marks = {"ok": "\033[32mok\033[0m", "WARN": "\033[33mWARN\033[0m", "FAIL": "\033[31mFAIL\033[0m"}
    lines = []
    for check in checks:
        word = "ok" if check.ok else ("WARN" if check.warning else "FAIL")
        lines.append(f"{marks[word] if colour else word:>4}  {check.name}: {check.detail}")
        if not check.ok and check.fix:
            lines.append(f"      fix: {check.fix}")
    return "\n".join(lines)
