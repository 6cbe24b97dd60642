"""The guide's "when a learner's job breaks" block: lesson 15's records as tables, written by run_tables."""

from __future__ import annotations

import json
import shutil

import pytest

from mgtutor.classroom.breaks_page import breaks_block
from mgtutor.classroom.run_tables import block, main, parse_table
from tests.conftest import ROOT

DRILL = {"drill": "a hang (one worker skips a step)", "symptom": "no error for 6 s | or forever",
         "check": "collective timeout", "found": "worker 1 ahead at step 5", "fix": "decide a skip together",
         "after": "[7, 7] steps per worker"}  # fmt: skip
ISSUES = {"keras#19891": {"status": "not reproduced", "figure": "1 vs 2 replicas differ by 0.0e+00"},
          "tensorflow#72686": {"status": "reproduced (a hang)", "figure": "stuck: no step in 20 s"}}


def summary(records: dict) -> dict:
    return {
        "started": "2026-11-27T04:00:00", "status": "complete", "overrides": {}, "seconds": 95.0,
        "machine": {"hostname": "vm", "cpu_count": 2, "platform": "Linux-x86_64", "python": "3.11.7",
                    "tensorflow": "2.21.0", "keras": "3.15.1",
                    "cpu": {"model": "AMD EPYC", "features": ["avx2", "avx512f", "avx512_bf16"]}},
        "notebooks": [{"notebook": "15_when_it_breaks.ipynb", "seconds": 95.0, "peak_rss_mb": 1500,
                       "end_rss_mb": 900, "records": records}],
    }  # fmt: skip


def test_each_drill_and_each_report_is_a_row_as_the_lesson_recorded_it():
    drills = [DRILL, {**DRILL, "drill": "silent drift"}]
    text = breaks_block(summary({"drills": drills, "issues": ISSUES}), "a run")
    drills, issues = (parse_table(part) for part in text.split("The bugs users report")[:2])
    assert drills["drill"] == ["what the learner sees", "the check that finds it", "found", "the fix",
                               "after the fix"]  # fmt: skip
    assert "| no error for 6 s \\| or forever |" in text  # a pipe in a cell is escaped
    assert "silent drift" in drills
    assert issues["report"][0] == "on Keras 3.15.1, TensorFlow 2.21.0"
    assert issues["tensorflow#72686"] == ["reproduced (a hang)", "stuck: no step in 20 s"]
    assert text.startswith("Measured by a run: lesson 15 at its parameters")


def test_a_run_without_lesson_15_is_refused():
    with pytest.raises(ValueError, match="no lesson 15"):
        breaks_block(summary({"something": 1}), "a run")


def test_run_tables_writes_the_block_from_a_run_of_lesson_15_alone(tmp_path, capsys):
    (tmp_path / "docs").mkdir()
    for relative in ("docs/results.md", "docs/teachers.md"):
        shutil.copy(ROOT / relative, tmp_path / relative)
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(summary({"drills": [DRILL], "issues": ISSUES})))
    main([str(path), "--root", str(tmp_path)])
    text = block((tmp_path / "docs" / "teachers.md").read_text(), "breaks")
    assert "one `make run` started 2026-11-27 04:00:00" in text and "keras#19891" in text
    results = (tmp_path / "docs" / "results.md").read_text()
    assert results == (ROOT / "docs" / "results.md").read_text()  # nothing else written
    assert "rewrote the generated tables in" in capsys.readouterr().out
