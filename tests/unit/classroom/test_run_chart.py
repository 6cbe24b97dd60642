"""The run report's picture and its short facts, from records as a run writes them."""

from __future__ import annotations

import re

import pytest

from mgtutor.classroom import estimate, run_chart
from mgtutor.classroom.run_page import index_html


def _entry(lesson: str, seconds: float, **records) -> dict:
    return {"notebook": f"{lesson}_lesson.ipynb", "status": "ok", "seconds": seconds, "parameters": {},
            "defaults": {}, "records": {"synthetic": False, **records}}  # fmt: skip


def test_the_shares_fill_the_slot_in_proportion_to_the_reference_run():
    reference = estimate.REFERENCE["seconds"]
    shares = {lesson: estimate.share_of_slot(lesson) for lesson in reference}
    assert sum(shares.values()) == pytest.approx(estimate.SLOT_SECONDS)
    assert shares["16"] / shares["02"] == pytest.approx(reference["16"] / reference["02"])
    assert estimate.share_of_slot("99") is None


def test_the_estimate_scales_the_reference_run_by_the_reference_step():
    # the reference run's lessons, and a lesson it lacks at its pending seconds
    rate = estimate.REFERENCE["images_per_s"]
    total = sum({**estimate.PENDING, **estimate.REFERENCE["seconds"]}.values())
    fixed = sum(estimate.fixed_seconds(lesson) for lesson in estimate.REFERENCE["seconds"])
    assert estimate.estimate_seconds(rate) == pytest.approx(total)
    # a CPU 2.5x slower: the part that grows 2.5-fold, the fixed part as it was
    assert estimate.estimate_seconds(rate / 2.5) == pytest.approx(fixed + 2.5 * (total - fixed))
    with pytest.raises(ValueError, match="images_per_s must be > 0"):
        estimate.estimate_seconds(0.0)


def test_facts_set_the_accuracy_beside_the_right_baseline_and_skip_missing_records():
    baseline = 0.432
    own = run_chart.facts(_entry("11", 40, bf16_val_accuracy=0.31, baseline_val_accuracy=0.35), baseline)
    assert own[0] == "Test accuracy 0.310; its one-device baseline 0.350."  # the lesson's own float32 run
    three = _entry("03", 20, val_accuracy=[0.3, 0.41], allreduce_vs_one_device=9.3e-8)
    shared = run_chart.facts(three, baseline)
    assert shared[:2] == ["Test accuracy 0.410; its one-device baseline 0.432.",
                          "Hand-made all-reduce against one device: 9.3e-08."]  # fmt: skip
    assert run_chart.facts(_entry("14", 80), baseline) == []  # an older run's records: nothing invented
    synthetic = _entry("02", 10, test_accuracy=0.1)
    synthetic["records"]["synthetic"] = True
    assert "synthetic stand-in" in run_chart.facts(synthetic, baseline)[0]


def test_no_lesson_gets_more_than_three_sentences():
    records = {"n_devices": 2, "device_kind": "cpu", "placement_ok": [True], "test_accuracy": 0.4,
               "allreduce_vs_one_device": 1e-8, "mistake_factor": 2.0}  # fmt: skip
    assert len(run_chart.facts(_entry("03", 1, **records), 0.4)) == 3


def test_the_picture_marks_a_lesson_over_its_share_and_an_accuracy_at_chance():
    entries = [_entry("02", 10, test_accuracy=0.43), _entry("11", 500, bf16_val_accuracy=0.11)]
    times = run_chart.time_panel(entries)
    assert times.count("#e08a00") == 1 and times.count("#4a7fb5") == 1  # only 11 is past its share
    accuracies = run_chart.accuracy_panel(entries)
    assert accuracies.count('fill="#b00020"') == 1 and accuracies.count('fill="#17692c"') == 1
    floor_x = re.findall(r'<line x1="([\d.]+)"[^>]*stroke-dasharray', accuracies)
    assert len(floor_x) == 1 and float(floor_x[0]) > run_chart._LABEL  # the floor drawn, right of the labels
    # each lesson's tick at its own baseline: 11's float32 run where it trains one, else lesson 02's
    eleven = _entry("11", 5, bf16_val_accuracy=0.3, baseline_val_accuracy=0.35)
    own = run_chart.accuracy_panel([entries[0], eleven])
    ticks = [float(x) for x in re.findall(r'<line x1="([\d.]+)"[^>]*stroke-width="2"', own)]
    scale = run_chart._WIDTH - run_chart._LABEL - 60
    assert ticks == pytest.approx([run_chart._LABEL + 0.43 * scale, run_chart._LABEL + 0.35 * scale], abs=0.1)
    assert run_chart.figure_html([]) == ""


def test_the_page_shows_sentences_not_raw_records():
    report = {"started": "2026-11-29T00:00:00", "status": "complete", "seconds": 30.0, "command": "make run",
              "overrides": {}, "machine": {"hostname": "h", "cpu_count": 2, "tensorflow": "2.21.0",
                                           "keras": "3.15.1", "python": "3.11"},
              "notebooks": [_entry("02", 10, test_accuracy=0.43, class_counts=list(range(500)))]}  # fmt: skip
    page = index_html(report)
    assert "Test accuracy 0.430" in page and "class_counts" not in page and "<svg" in page
