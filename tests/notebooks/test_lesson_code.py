"""One source: the package's copy of a lesson's written-out code is generated from its #@save cells."""

from __future__ import annotations

import json

import pytest

from tools import lesson_code


def test_every_generated_module_is_what_its_lesson_gives():
    assert lesson_code.stale() == [], "edit the lesson, then run `make lesson-code`"


def test_a_change_in_a_saved_cell_reaches_the_module(tmp_path, monkeypatch):
    notebook, (target, doc) = next(iter(lesson_code.MODULES.items()))
    cells = json.loads((lesson_code.ROOT / notebook).read_text())
    saved = next(c for c in cells["cells"] if "".join(c["source"]).startswith(lesson_code.MARK))
    saved["source"] = "".join(saved["source"]) + "\n\n\ndef added_in_the_lesson() -> int:\n    return 1\n"
    (tmp_path / "notebooks").mkdir()
    (tmp_path / notebook).write_text(json.dumps(cells))
    monkeypatch.setattr(lesson_code, "ROOT", tmp_path)
    monkeypatch.setattr(lesson_code, "MODULES", {notebook: (target, doc)})
    text = lesson_code.generate(notebook, target, doc)
    assert "def added_in_the_lesson() -> int:" in text
    (tmp_path / target).parent.mkdir(parents=True)
    (tmp_path / target).write_text(text.replace("return 1", "return 2"))
    assert lesson_code.stale() == [target]  # an edit of the package alone is caught


def test_a_saved_cell_that_does_work_is_refused(tmp_path, monkeypatch):
    cell = {"cell_type": "code", "id": "x-1", "metadata": {}, "outputs": [], "execution_count": None,
            "source": "#@save\nimport numpy as np\n\nprint(np.pi)\n"}
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / "lesson.ipynb").write_text(json.dumps({"cells": [cell]}))
    monkeypatch.setattr(lesson_code, "ROOT", tmp_path)
    with pytest.raises(ValueError, match=r"cell x-1: .* only imports and definitions, not line 3"):
        lesson_code.generate("notebooks/lesson.ipynb", "mgtutor/lesson.py", "A lesson.")
