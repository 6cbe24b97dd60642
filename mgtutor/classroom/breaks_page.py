"""The teacher's guide's "when a learner's job breaks": lesson 15's drills and reported bugs, from one run.

`breaks_block(summary, run_line)` writes, from what lesson 15 records with `mgtutor.record`
(a run's summary.json), one row per drill: what the learner sees, the check that finds the
cause, what it found, the fix, and the fixed run's figure; then each reported Keras or
TensorFlow bug as it behaved on that run's versions. ``python -m mgtutor.classroom.run_tables``
puts it between the guide's ``<!-- generated:breaks begin -->`` and ``end`` markers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

LESSON = "15_"
DRILL_COLUMNS = ("drill", "symptom", "check", "found", "fix", "after")
HEADER = ("drill", "what the learner sees", "the check that finds it", "found", "the fix", "after the fix")


def lesson_15(summary: dict[str, Any]) -> dict[str, Any] | None:
    """The run's lesson 15 entry when it recorded its drills, else None."""
    for entry in summary["notebooks"]:
        if entry["notebook"].startswith(LESSON) and "drills" in entry.get("records", {}):
            return entry
    return None


def _cell(text: Any) -> str:
    """A table cell: one line, its pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    return "\n".join(lines + ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows])


def breaks_block(summary: dict[str, Any], run_line: str) -> str:
    """The guide's block: the drills' table and the reported bugs', with the run they come from."""
    entry = lesson_15(summary)
    if entry is None:
        raise ValueError("the run holds no lesson 15: use `make run` (or `make run RUN_ARGS='--only 15'`).")
    records = entry["records"]
    machine = summary["machine"]
    drills = _table(HEADER, [[drill[c] for c in DRILL_COLUMNS] for drill in records["drills"]])
    versions = f"on Keras {machine['keras']}, TensorFlow {machine['tensorflow']}"
    issues = _table(
        ("report", versions, "what the lesson printed"),
        [[name, found["status"], found["figure"]] for name, found in records["issues"].items()],
    )
    return (
        f"Measured by {run_line}: lesson 15 at its parameters, each drill's cells as the learner runs them."
        f"\n\n{drills}\n\nThe bugs users report, reproduced by the lesson's section 5:\n\n{issues}"
    )
