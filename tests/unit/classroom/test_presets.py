"""mgtutor.classroom.presets: every override a lesson takes, the command line above it, unknown names refused,
and the low-memory preset held to its stated ceiling by a run of its heaviest lesson."""

from __future__ import annotations

import re

import pytest

from mgtutor.classroom import presets
from mgtutor.classroom.estimate import PENDING
from mgtutor.classroom.lessons import check_overrides, find_notebooks, notebook_parameters
from mgtutor.classroom.limits import lesson_plan
from mgtutor.classroom.runner import SERIES_DEFAULTS, series_overrides
from tests.conftest import ROOT

NOTEBOOKS = {nb.stem: nb for nb in find_notebooks(ROOT / "notebooks")}
DEFAULTS = {nb: notebook_parameters(nb) for nb in NOTEBOOKS.values()}


@pytest.mark.parametrize(("name", "lesson"), [(n, lesson) for n, lessons in presets.PRESETS.items()
                                              for lesson in lessons])  # fmt: skip
def test_each_override_is_a_parameter_of_its_lesson_that_it_takes(name, lesson):
    assert lesson in NOTEBOOKS, f"{name} names {lesson}, which is no notebook"
    notebook = NOTEBOOKS[lesson]
    params = presets.preset_overrides(name)[lesson]
    assert set(params) <= set(DEFAULTS[notebook]) and params
    # make run's own check, the lesson's alone: types against its defaults, then its limits
    assert check_overrides(params, {notebook: DEFAULTS[notebook]}) == {notebook: params}
    lesson_plan(lesson, {**DEFAULTS[notebook], **params})
    assert all(why.strip() and "\n" not in why for _, why in presets.PRESETS[name][lesson].values())


@pytest.mark.parametrize("name", sorted(presets.PRESETS))
def test_the_whole_series_takes_each_preset_above_its_own_defaults(name):
    plan = check_overrides(series_overrides({}, DEFAULTS), DEFAULTS)
    merged = presets.apply_preset(name, plan, {}, DEFAULTS)
    by_lesson = {nb.stem: params for nb, params in merged.items()}
    wanted = presets.preset_overrides(name)
    for lesson, params in by_lesson.items():
        assert params == {**plan[NOTEBOOKS[lesson]], **wanted.get(lesson, {})}, lesson
        lesson_plan(lesson, {**DEFAULTS[NOTEBOOKS[lesson]], **params})  # the lesson's own check, at once
    budget = wanted.get("16_capstone", {}).get("MINUTES", SERIES_DEFAULTS["MINUTES"])
    assert by_lesson["16_capstone"]["MINUTES"] == budget  # the series' budget, unless the preset sets one


def test_the_slow_laptop_preset_shrinks_or_says_why_a_lesson_keeps_its_size():
    shrunk, kept = presets.PRESETS[presets.SLOW_LAPTOP], presets.KEPT[presets.SLOW_LAPTOP]
    pending = {stem for stem in NOTEBOOKS if stem[:2] in PENDING}  # kept until a reference run measures it
    assert not set(shrunk) & set(kept) and set(shrunk) | set(kept) | pending == set(NOTEBOOKS)
    assert all(why.strip() and "\n" not in why for why in kept.values())
    assert presets.preset_overrides(presets.NONE) == {}  # PRESET=none: the classroom defaults


def test_the_command_line_beats_the_preset_and_a_refusal_names_the_preset():
    notebook = NOTEBOOKS["13_sharding"]
    lesson = {notebook: DEFAULTS[notebook]}
    command_line = {"N_DEVICES": 8, "WIDTH": 256}
    planned = check_overrides(command_line, lesson)
    merged = presets.apply_preset(presets.LOW_MEMORY, planned, command_line, lesson)
    preset = presets.preset_overrides(presets.LOW_MEMORY)["13_sharding"]
    assert merged[notebook] == {**preset, **command_line}
    # the drill's 600 images fit lesson 15's 1,024, not the preset's 512: the refusal names the preset
    notebook = NOTEBOOKS["15_when_it_breaks"]
    lesson, alone = {notebook: DEFAULTS[notebook]}, {"OOM_BATCH": 600}
    refusal = r"TRAIN_SAMPLES=512 is too few[\s\S]*with the low-memory preset's \{'15_when_it_breaks'"
    with pytest.raises(ValueError, match=refusal):
        presets.apply_preset(presets.LOW_MEMORY, check_overrides(alone, lesson), alone, lesson)


def test_an_unknown_preset_or_a_parameter_a_lesson_lacks_is_refused(monkeypatch):
    with pytest.raises(ValueError, match=r"PRESET='tiny' is not a preset; known: low-memory"):
        presets.preset_overrides("tiny")
    monkeypatch.setitem(presets.PRESETS, "stale", {"13_sharding": {"WORKERS": (1, "gone")}})
    notebook = NOTEBOOKS["13_sharding"]
    with pytest.raises(ValueError, match=r"sets \['WORKERS'\] for 13_sharding.ipynb.*out of date"):
        presets.apply_preset("stale", {notebook: {}}, {}, {notebook: DEFAULTS[notebook]})


def test_the_guide_states_the_ceiling_the_preset_aims_at():
    guide = (ROOT / "docs" / "teachers.md").read_text()
    section = guide.split("\n## Memory\n", 1)[1].split("\n## ", 1)[0]
    memory = section.split("<!-- generated:memory end -->", 1)[1]  # the prose, not the run's table
    assert "make run PRESET=low-memory" in memory
    assert f"aims at a peak of at most {presets.LOW_MEMORY_PEAK_MB:,} MiB" in memory  # make run counts MiB
    for lesson in presets.PRESETS[presets.LOW_MEMORY]:
        assert re.search(rf"\b{lesson[:2]}\b", memory), lesson


def test_the_guide_prints_the_slow_laptop_preset_as_presets_py_holds_it():
    guide = (ROOT / "docs" / "teachers.md").read_text()
    start, end = "<!-- slow-laptop preset -->\n", "\n<!-- slow-laptop preset end -->"
    table = guide.split(start, 1)[1].split(end, 1)[0]
    assert table == presets.reason_table(presets.SLOW_LAPTOP)
    assert table.count("| its size |") == len(presets.KEPT[presets.SLOW_LAPTOP])
