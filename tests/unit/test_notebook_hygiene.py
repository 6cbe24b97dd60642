"""Committed notebooks follow the house rules: stripped, one parameters cell, the teaching shape."""

from __future__ import annotations

import ast
import json

import pytest

from mgtutor.series import find_notebooks, notebook_parameters
from tests.conftest import ROOT

NOTEBOOKS = find_notebooks(ROOT / "notebooks")


@pytest.fixture(params=NOTEBOOKS, ids=[nb.stem for nb in NOTEBOOKS])
def notebook(request):
    return request.param, json.loads(request.param.read_text())


def test_committed_without_outputs(notebook):
    path, nb = notebook
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [] and cell["execution_count"] is None, path.name
    assert set(nb["metadata"]) <= {"kernelspec", "language_info"}, "strip editor metadata"


def test_one_parameters_cell_of_all_caps_literals(notebook):
    path, nb = notebook
    tagged = [c for c in nb["cells"] if "parameters" in c["metadata"].get("tags", [])]
    assert len(tagged) == 1, f"{path.name}: exactly one cell tagged 'parameters'"
    for node in ast.parse("".join(tagged[0]["source"])).body:
        assert isinstance(node, ast.Assign), f"{path.name}: only assignments in parameters"
        name = node.targets[0].id
        assert name.isupper(), f"{path.name}: parameter {name} must be ALL_CAPS"
        ast.literal_eval(node.value)  # papermill injects literals; defaults must be literals too
    assert notebook_parameters(path)


def test_teaching_shape(notebook):
    path, nb = notebook
    markdown = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown"]
    assert markdown[0].startswith(f"# {path.name[:2]} ·"), "title first, numbered like the file"
    assert "**Objectives**" in markdown[0]
    assert any(m.startswith("## Summary") for m in markdown)
    exercises = next(m for m in markdown if "## Exercises" in m)
    assert exercises.count("*Hint:*") >= 2, "2-3 exercises, each with a hint"
    code = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    assert max(len(c.splitlines()) for c in code) <= 25, "short cells"
    assert "def " not in "".join(code), "functions a notebook needs belong in mgtutor"

