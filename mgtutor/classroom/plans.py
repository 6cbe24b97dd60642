"""The teacher's guide's timed plans: teaching minutes fixed here, each lesson's run time from a run.

A learner runs each notebook in the class, so its run time counts inside the plan; a plan must leave
`MIN_SLACK` minutes over. `plans_block` writes both plans as docs/teachers.md shows them (generated
by `run_tables` from the teacher's own `make run`), with each slot's start, its teaching and run
minutes, and the slack left on that run's laptop.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

# (slot, the lessons learners run in it, minutes of teaching). A slot with no lesson runs nothing.
Slot = tuple[str, tuple[str, ...], int]
PLANS: dict[str, tuple[int, int, tuple[Slot, ...]]] = {
    # name: (length in minutes, minimum slack in minutes, slots)
    "Three hours (a half-day, breaks included)": (180, 15, (
        ("setup and `make check`", (), 15),
        ("00 and 02: devices first, then the baseline", ("00", "02"), 15),
        ("03: the data-parallel step by hand", ("03",), 20),
        ("04, sections 1-4: towers and MirroredStrategy", ("04",), 12),
        ("05: what replicas do not share (BatchNorm)", ("05",), 12),
        ("break", (), 10),
        ("07: a run killed mid-epoch resumes", ("07",), 12),
        ("08: the scaling study", ("08",), 12),
        ("14: workers that own their cores", ("14",), 15),
        ("break", (), 8),
        ("15: when it breaks, two drills", ("15",), 15),
        ("16: the capstone, from the teacher's `make capstone` run", (), 6),
    )),
    "Ninety minutes (make check done the day before)": (90, 10, (
        ("setup: open the notebooks", (), 5),
        ("00 and 02: devices first, then the baseline", ("00", "02"), 10),
        ("03: the data-parallel step by hand", ("03",), 20),
        ("05: what replicas do not share (BatchNorm)", ("05",), 10),
        ("08: the scaling study", ("08",), 10),
        ("14: workers that own their cores", ("14",), 12),
    )),
}  # fmt: skip


def plan_lessons() -> set[str]:
    """Every lesson some plan runs."""
    return {lesson for _, _, slots in PLANS.values() for _, lessons, _ in slots for lesson in lessons}


def run_minutes(lessons: Sequence[str], seconds: Mapping[str, float]) -> int:
    """Whole minutes the lessons' notebooks ran for, rounded up; refuses a lesson the run lacks."""
    missing = [lesson for lesson in lessons if lesson not in seconds]
    if missing:
        raise ValueError(f"the run holds no lesson {', '.join(missing)}: plans need a complete `make run`.")
    return math.ceil(sum(seconds[lesson] for lesson in lessons) / 60)


def slack(plan: str, seconds: Mapping[str, float]) -> int:
    """Minutes left of `plan` once every slot's teaching and its lessons' run time are counted."""
    length, _, slots = PLANS[plan]
    return length - sum(teaching + run_minutes(lessons, seconds) for _, lessons, teaching in slots)


def slowest_kept(plan: str, seconds: Mapping[str, float]) -> float:
    """How many times slower than this run a laptop may be (its run times multiplied) and keep the slack."""
    length, least, slots = PLANS[plan]
    teaching = sum(minutes for _, _, minutes in slots)
    running = sum(seconds[lesson] for _, lessons, _ in slots for lesson in lessons) / 60
    return (length - least - teaching) / running


def plan_table(plan: str, seconds: Mapping[str, float]) -> str:
    """One plan as a markdown table: start, slot, teaching, run time on this run's laptop."""
    length, least, slots = PLANS[plan]
    rows, start = ["| start | slot | teaching | run time here |", "| --- | --- | --- | --- |"], 0
    for name, lessons, teaching in slots:
        run = run_minutes(lessons, seconds)
        ran = f"{run} min" if lessons else "—"
        rows.append(f"| {start // 60}:{start % 60:02d} | {name} | {teaching} min | {ran} |")
        start += teaching + run
    left = length - start
    verdict = "at least" if left >= least else "short of"
    kept = f"slack: {left} min, {verdict} the {least} min this plan keeps"
    rows.append(f"| {start // 60}:{start % 60:02d} | {kept} | | |")
    return "\n".join(rows)


def plans_block(summary: Mapping[str, Any], run_line: str) -> str:
    """Both plans, timed by the run in `summary` (its notebooks' seconds)."""
    seconds = {e["notebook"][:2]: e["seconds"] for e in summary["notebooks"]}
    parts = [f"Run times from {run_line}; each rounded up to whole minutes."]
    for plan in PLANS:
        times, least = slowest_kept(plan, seconds), PLANS[plan][1]
        kept = (f"A laptop whose reference step takes up to {times:.1f} times this run's keeps the {least} "
                "min of slack (`make check`'s run-time line prints that ratio for yours).")
        parts.append(f"**{plan}**\n\n{plan_table(plan, seconds)}\n\n{kept}")
    return "\n\n".join(parts)
