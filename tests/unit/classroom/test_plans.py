"""The guide's timed plans: run time counted, slack kept, 14 and 15 in the 3-hour plan."""

from __future__ import annotations

import pytest

from mgtutor.classroom.estimate import REFERENCE
from mgtutor.classroom.plans import PLANS, plan_table, plans_block, slack, slowest_kept

THREE_HOURS = next(name for name in PLANS if name.startswith("Three hours"))
NINETY = next(name for name in PLANS if name.startswith("Ninety minutes"))


def test_each_plan_keeps_its_slack_on_the_reference_run_with_run_time_counted():
    seconds = REFERENCE["seconds"]
    for plan, (length, least, slots) in PLANS.items():
        teaching = sum(minutes for _, _, minutes in slots)
        assert slack(plan, seconds) >= least, plan
        assert slack(plan, seconds) < length - teaching  # the notebooks' run time is counted
    assert PLANS[THREE_HOURS][:2] == (180, 15) and PLANS[NINETY][0] == 90


def test_the_three_hour_plan_keeps_lessons_14_and_15():
    lessons = {lesson for _, run, _ in PLANS[THREE_HOURS][2] for lesson in run}
    assert {"14", "15", "03", "05", "07", "08"} <= lessons


def test_a_slower_laptop_loses_slack_and_the_limit_says_where():
    seconds = REFERENCE["seconds"]
    times = slowest_kept(THREE_HOURS, seconds)
    assert times > 1.0
    slower = {lesson: 1.2 * times * value for lesson, value in seconds.items()}
    assert slack(THREE_HOURS, slower) < PLANS[THREE_HOURS][1]
    assert "short of the 15 min" in plan_table(THREE_HOURS, slower)


def test_a_run_without_a_plan_lesson_is_refused():
    partial = {lesson: value for lesson, value in REFERENCE["seconds"].items() if lesson != "14"}
    with pytest.raises(ValueError, match="the run holds no lesson 14"):
        slack(THREE_HOURS, partial)


def test_the_block_names_its_run_and_both_plans():
    entries = [{"notebook": f"{k}_x.ipynb", "seconds": v} for k, v in REFERENCE["seconds"].items()]
    summary = {"notebooks": entries}
    text = plans_block(summary, "THE RUN")
    assert text.startswith("Run times from THE RUN") and THREE_HOURS in text and NINETY in text
    assert text.count("| slack: ") == 2
