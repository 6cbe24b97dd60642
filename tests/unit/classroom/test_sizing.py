"""make run sizes the series to the laptop: the slow-laptop preset where the reference step's estimate at
classroom defaults passes the target, what the command line names winning, and the choice recorded."""

from __future__ import annotations

import html
import json

import pytest

from mgtutor.classroom import estimate, presets, runner
from mgtutor.classroom.estimate import REFERENCE, SLOT_SECONDS, TARGET_SECONDS, choose_preset
from mgtutor.classroom.presets import NONE, SLOW_LAPTOP
from tests.unit.classroom.test_runner import tiny_series  # noqa: F401 (a fixture)

RATE = REFERENCE["images_per_s"]


def _rate_at(estimate_seconds: float, lessons=None) -> float:
    """The reference step's images/s at which the classroom defaults' estimate is `estimate_seconds`."""
    return estimate.rate_for(estimate_seconds, None, lessons)


def test_the_estimate_counts_a_lesson_the_reference_run_lacks_at_its_pending_seconds(monkeypatch):
    monkeypatch.setattr(estimate, "PENDING", {"98": 60.0})
    whole = estimate.series_seconds()
    assert whole == pytest.approx({**REFERENCE["seconds"], "98": 60.0})  # on the reference CPU: as measured
    # 98 has no fixed part (the calibration lacks it): it grows whole, twice as long on a CPU twice as slow
    assert estimate.series_seconds(None, ["98"], RATE / 2) == {"98": 120.0}
    some = estimate.series_seconds(None, ["16", "98", "99"])
    assert some == pytest.approx({"16": REFERENCE["seconds"]["16"], "98": 60.0})
    preset = estimate.series_seconds(SLOW_LAPTOP)
    assert set(preset) == set(whole)  # measured lessons from the preset's run, the rest from the defaults'
    with pytest.raises(ValueError, match=r"no reference run of the low-memory preset"):
        estimate.series_seconds(presets.LOW_MEMORY)


def test_a_lesson_splits_into_a_part_that_stays_and_a_part_that_grows_with_the_step():
    calibration = estimate.CALIBRATION
    k = estimate.slowdown(calibration["images_per_s"])
    for lesson, fast in calibration["reference_seconds"].items():
        fixed, slow = estimate.fixed_seconds(lesson), calibration["seconds"][lesson]
        assert 0 <= fixed <= fast
        if slow >= fast:  # the calibration's two runs, each reproduced by its part that stays and the rest
            assert fixed + k * (fast - fixed) == pytest.approx(slow)
    assert estimate.fixed_seconds("99") == 0.0
    # the whole series: less than the step's ratio slower on the slower CPU, as the two runs measured
    fast, slow = sum(calibration["reference_seconds"].values()), sum(calibration["seconds"].values())
    assert 1 < slow / fast < k
    # the preset's estimate is its run where it was measured, wherever that was
    run = REFERENCE["presets"][SLOW_LAPTOP]
    where_measured = estimate.estimate_seconds(run["images_per_s"], SLOW_LAPTOP)
    assert where_measured == pytest.approx(sum(run["seconds"].values()))
    assert estimate.estimate_seconds(RATE) == pytest.approx(sum(REFERENCE["seconds"].values()))
    with pytest.raises(ValueError, match=r"seconds must be > \d+, the part of the estimate no reference"):
        estimate.rate_for(10.0)


def test_the_defaults_within_the_target_and_the_preset_past_it():
    within = choose_preset(_rate_at(0.95 * TARGET_SECONDS))
    assert within.preset is None and within.defaults_seconds == pytest.approx(0.95 * TARGET_SECONDS)
    assert within.seconds == within.defaults_seconds and within.fits
    assert within.line().startswith("the classroom defaults: about 13 min 18 s here, within the 14-minute")
    past = choose_preset(_rate_at(1.05 * TARGET_SECONDS))
    assert past.preset == SLOW_LAPTOP and past.seconds == past.preset_seconds
    assert past.slowdown == pytest.approx(RATE / _rate_at(1.05 * TARGET_SECONDS))
    assert past.preset_seconds == pytest.approx(estimate.estimate_seconds(RATE / past.slowdown, SLOW_LAPTOP))
    assert past.preset_seconds < past.defaults_seconds
    assert "where the classroom defaults would take about 14 min 42 s, past the 14-minute" in past.line()
    assert f"{past.slowdown:.2f}x the reference CPU's time" in past.line()


def test_a_preset_still_over_the_slot_says_so_and_points_to_the_guide():
    over = choose_preset(estimate.rate_for(1.01 * SLOT_SECONDS, SLOW_LAPTOP))
    assert over.preset == SLOW_LAPTOP and not over.fits
    assert over.line().endswith("Even the preset is over the 15-minute slot: docs/teachers.md, "
                                "'The slowest laptop in the room'")  # fmt: skip


def test_the_choice_is_made_for_the_lessons_that_run():
    lessons = ["16", "17"]
    rate = _rate_at(1.05 * TARGET_SECONDS, lessons)
    assert choose_preset(rate, lessons).preset == SLOW_LAPTOP
    assert choose_preset(rate).preset == SLOW_LAPTOP  # the whole series is longer still
    assert choose_preset(_rate_at(0.95 * TARGET_SECONDS, lessons), lessons).preset is None


@pytest.mark.parametrize(("named", "recorded"), [(None, SLOW_LAPTOP), (NONE, None),
                                                 (presets.LOW_MEMORY, presets.LOW_MEMORY)])  # fmt: skip
def test_a_named_preset_wins_over_the_sizing(named, recorded, capsys):
    found = {"reference_images_per_s": _rate_at(2 * TARGET_SECONDS)}
    sized = runner.size_to_laptop(found, named, {SLOW_LAPTOP: {}}, list(estimate.series_seconds()))
    assert sized.get("preset") == recorded
    assert sized["sizing"]["preset"] == SLOW_LAPTOP and sized["sizing"]["target_seconds"] == TARGET_SECONDS
    assert sized["sizing"]["defaults_seconds"] == pytest.approx(2 * TARGET_SECONDS)
    said = capsys.readouterr().out.strip()
    assert said == sized["sizing"]["said"]
    if named is None:
        assert said.startswith("Sized to this laptop: the slow-laptop preset: about ")
        assert sized["estimate_seconds"] == round(sized["sizing"]["preset_seconds"], 1)
    else:
        assert said.startswith(f"PRESET={named} as asked; sized to this laptop it would be the slow-laptop")
    if named == NONE:
        assert sized["estimate_seconds"] == round(2 * TARGET_SECONDS, 1)  # the defaults' estimate
    if named == presets.LOW_MEMORY:
        assert "estimate_seconds" not in sized  # no reference run of that preset to estimate from


def test_no_reference_step_no_sizing_and_a_refused_mix_keeps_the_defaults(capsys):
    assert runner.size_to_laptop({}, None, {}, ["00"]) == {}
    found = {"reference_images_per_s": _rate_at(2 * TARGET_SECONDS)}
    why = "TRAIN_SAMPLES=100 must be a multiple of 64 (with the slow-laptop preset's ...)"
    sized = runner.size_to_laptop(found, None, {SLOW_LAPTOP: why}, list(estimate.series_seconds()))
    assert "preset" not in sized and sized["estimate_seconds"] == round(2 * TARGET_SECONDS, 1)
    assert sized["sizing"]["said"].endswith(f"Not applied, the classroom defaults run: {why}")


def _slow_laptop_tiny(monkeypatch, seconds: float) -> None:
    """The tiny series' lessons (00, 01) estimated at `seconds` here, and a slow-laptop preset for them."""
    monkeypatch.setitem(presets.PRESETS, SLOW_LAPTOP, {"00_first": {"EPOCHS": (1, "a")},
                                                       "01_second": {"NAME": ("slow", "b")}})  # fmt: skip
    rate = _rate_at(seconds, ["00", "01"])
    monkeypatch.setattr(runner, "_preflight", lambda: {"preflight": [], "reference_images_per_s": rate})


@pytest.mark.slow  # a tiny series in kernels: 6-17 s; make test's 3 minutes: in make test-all
def test_make_run_takes_the_preset_past_the_target_below_the_command_line_and_records_it(
    tiny_series, tmp_path, monkeypatch, capsys  # noqa: F811
):
    _slow_laptop_tiny(monkeypatch, 1.5 * TARGET_SECONDS)
    run_dir = runner.run_series(tiny_series, tmp_path / "runs", {"NAME": "mine"}, preflight=True)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["preset"] == SLOW_LAPTOP and summary["sizing"]["preset"] == SLOW_LAPTOP
    assert summary["sizing"]["defaults_seconds"] == pytest.approx(1.5 * TARGET_SECONDS)
    assert summary["estimate_seconds"] == round(summary["sizing"]["preset_seconds"], 1)
    first, second = summary["notebooks"]
    assert first["parameters"] == {"EPOCHS": 1} and first["records"]["epochs_seen"] == 2
    assert second["parameters"] == {"NAME": "mine"}  # the command line beats the preset
    out = capsys.readouterr().out
    assert "Sized to this laptop: the slow-laptop preset: about " in out
    assert "with the slow-laptop preset)" in out.split("All 2 notebooks ran in ", 1)[1]
    assert html.escape(summary["sizing"]["said"]) in (run_dir / "index.html").read_text(encoding="utf-8")


@pytest.mark.slow  # a tiny series in kernels: 6-17 s; make test's 3 minutes: in make test-all
@pytest.mark.parametrize("preset", [None, NONE])
def test_make_run_keeps_the_defaults_within_the_target_or_when_told(
    tiny_series, tmp_path, monkeypatch, preset  # noqa: F811
):
    _slow_laptop_tiny(monkeypatch, 0.5 * TARGET_SECONDS if preset is None else 2 * TARGET_SECONDS)
    run_dir = runner.run_series(tiny_series, tmp_path / "runs", {}, preflight=True, preset=preset)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert "preset" not in summary and [e["parameters"] for e in summary["notebooks"]] == [{}, {}]
    assert summary["estimate_seconds"] == round(summary["sizing"]["defaults_seconds"], 1)


@pytest.mark.slow  # a tiny series in kernels: 6-17 s; make test's 3 minutes: in make test-all
def test_a_recipe_or_no_preflight_is_never_sized(tiny_series, tmp_path, monkeypatch):  # noqa: F811
    _slow_laptop_tiny(monkeypatch, 2 * TARGET_SECONDS)
    for run_dir in (runner.run_series(tiny_series, tmp_path / "plain", {}),
                    runner.run_series(tiny_series, tmp_path / "recipe", {}, preflight=True, recipe="long")):
        summary = json.loads((run_dir / "summary.json").read_text())
        assert "sizing" not in summary and "preset" not in summary
        assert [e["parameters"] for e in summary["notebooks"]] == [{}, {}]


def test_a_whole_series_run_says_whether_it_fit_the_slot_and_a_part_says_nothing():
    from pathlib import Path

    whole = [Path(f"{lesson}_topic.ipynb") for lesson in REFERENCE["seconds"]]
    assert runner._slot_line(whole, SLOT_SECONDS - 30) == "Within the 15-minute slot: 30.0 s to spare."
    past = runner._slot_line(whole, SLOT_SECONDS + 8)
    assert past.startswith("Past the 15-minute slot by 8.0 s:") and "The slowest laptop in the room" in past
    assert runner._slot_line(whole[:-1], SLOT_SECONDS + 8) is None  # --only: the slot is the whole series'
