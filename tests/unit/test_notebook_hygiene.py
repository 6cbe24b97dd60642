"""Committed notebooks follow the house rules: stripped, one parameters cell, the teaching shape."""

from __future__ import annotations

import ast
import json
import re

import pytest

from mgtutor.classroom.lessons import find_notebooks, notebook_parameters
from tests.conftest import ROOT

NOTEBOOKS = find_notebooks(ROOT / "notebooks") + sorted((ROOT / "notebooks" / "solutions").glob("*.ipynb"))
# `from mgtutor... import (a, b)` or `from mgtutor... import a, b`, in cells and in the scripts they write
IMPORT_FROM_MGTUTOR = r"^\s*from (mgtutor\S*) import (?:\(([^)]*)\)|([\w, ]+)$)"
# The house rule is "about 2,000 words of prose and 4 objectives at most": 2,100 is "about", held.
MAX_PROSE_WORDS, MAX_OBJECTIVES = 2100, 4


@pytest.fixture(params=NOTEBOOKS, ids=[nb.stem for nb in NOTEBOOKS])
def notebook(request):
    return request.param, json.loads(request.param.read_text())


def test_committed_without_outputs(notebook):
    path, nb = notebook
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [] and cell["execution_count"] is None, path.name
    assert set(nb["metadata"]) <= {"kernelspec", "language_info"}, "strip editor metadata"
    # nbformat 4.5 gives every cell an id; without one, every execution warns (MissingIDFieldWarning).
    ids = [cell.get("id") for cell in nb["cells"]]
    assert all(ids) and len(set(ids)) == len(ids), f"{path.name}: a cell without an id, or one id twice"


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
    if path.parent.name == "solutions":
        check_solution_shape(path, markdown)
        return
    assert markdown[0].startswith(f"# {path.name[:2]} ·"), "title first, numbered like the file"
    assert "**Objectives**" in markdown[0]
    assert any(m.startswith("## Summary") for m in markdown)
    exercises = next(m for m in markdown if "## Exercises" in m)
    assert exercises.count("*Hint:*") >= 2, "2-3 exercises, each with a hint"
    code = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    assert max(len(c.splitlines()) for c in code) <= 25, "short cells"
    objectives = markdown[0].split("**Objectives**", 1)[1]
    assert len(re.findall(r"^\d+\. ", objectives, re.M)) <= MAX_OBJECTIVES, (
        f"{path.name}: at most 4 objectives"
    )
    words = sum(len(m.split()) for m in markdown)
    assert words <= MAX_PROSE_WORDS, f"{path.name}: {words:,} words of prose, over {MAX_PROSE_WORDS:,}"


def lesson_questions(lesson: dict) -> list[str]:
    """The lesson's exercises in order, each its question without the hint, as a solution quotes it."""
    asked = next("".join(c["source"]) for c in lesson["cells"] if "## Exercises" in "".join(c["source"]))
    items = re.findall(r"^\d+\. (.*)$", asked.split("## Exercises")[1], flags=re.M)
    return [unemphasized(item.split("*Hint:*")[0].strip()) for item in items]


def unemphasized(text: str) -> str:
    # An italic quote cannot nest the lesson's own *emphasis*; asterisks inside `code` stay.
    return "".join(p if p.startswith("`") else p.replace("*", "") for p in re.split(r"(`[^`]*`)", text))


def check_solution_shape(path, markdown):
    # A title linking the lesson, then per exercise a heading and the lesson's question in italics
    # (docs/teachers.md: "each exercise quoted"), so a solution reads without the lesson beside it.
    lesson_name = path.name.replace("_solutions", "")
    assert markdown[0].startswith(f"# {path.name[:2]} · Solutions"), "title first, numbered like the file"
    assert f"(../{lesson_name})" in markdown[0], "links its lesson"
    questions = lesson_questions(json.loads((path.parent.parent / lesson_name).read_text()))
    answered = [m for cell in markdown for m in re.finditer(r"^## Exercise (\d+).*\n*(.*)", cell, flags=re.M)]
    numbers = [int(m.group(1)) for m in answered]
    assert numbers == list(range(1, len(questions) + 1)), "a heading per lesson exercise, in order"
    for m, question in zip(answered, questions, strict=True):
        quote = f"*{question}*"
        after = m.group(2)
        assert after == quote or after.startswith(quote + " "), (
            f"{path.name}: exercise {m.group(1)} must open with its question from {lesson_name} in italics:"
            f" {quote!r}, not {after[: len(quote) + 20]!r}"
        )


def test_functions_are_small_lessons_and_the_rest_lives_in_mgtutor(notebook):
    # A notebook may define a small function where that function IS the lesson (the replica step,
    # a training helper read in full); anything longer, or shared, belongs in mgtutor.
    path, nb = notebook
    for cell in nb["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] != "code" or source.startswith("%%"):
            continue  # cell magics (%%writefile) hold scripts, not notebook code
        lines = [line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))]
        for node in ast.walk(ast.parse("\n".join(lines))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                length = node.end_lineno - node.lineno + 1
                assert length <= 30, f"{path.name}: {node.name} is {length} lines; move it to mgtutor"


def test_every_artifact_goes_to_the_working_folder(notebook):
    # Written files and TensorBoard logs belong under work/<notebook>, which git ignores.
    path, nb = notebook
    code = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    assert 'log_dir="logs' not in code and "log_dir='logs" not in code, f"{path.name}: log into WORK"
    if any(word in code for word in ("save_model(", "np.save(", "%%writefile", "log_dir=", "output=")):
        wanted = f'working_folder("{path.stem}"'
        assert wanted in code, f"{path.name}: make WORK = {wanted})"


def test_devices_are_set_up_before_keras_or_tensorflow_is_imported(notebook):
    # Logical devices exist only if configured before TensorFlow's runtime starts; importing it
    # first also prints its start-up lines in JupyterLab, where nothing filters them yet.
    path, nb = notebook
    code = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    first_setup = code.find("setup_devices(")
    assert first_setup >= 0, f"{path.name}: call mgtutor.setup_devices before training"
    early = re.findall(r"^(?:import|from) (?:keras|tensorflow)\b.*$", code[:first_setup], flags=re.M)
    assert not early, f"{path.name}: {early} before setup_devices"


def test_notebooks_use_only_the_public_api(notebook):
    # The README promises that the notebooks need nothing but `mgtutor`'s public names; the
    # worker scripts a notebook writes out count too, since learners copy them.
    import mgtutor

    path, nb = notebook
    used = set()
    for cell in nb["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] != "code":
            continue
        submodule = re.search(r"\bmgtutor\.(?!__version__)\w+", source)
        assert not submodule, f"{path.name}: {submodule.group(0)} is not the public API"
        for match in re.finditer(IMPORT_FROM_MGTUTOR, source, flags=re.M):
            where = match.group(1)
            assert where == "mgtutor", f"{path.name}: imports from {where}, not the public API"
            names = match.group(2) or match.group(3)
            used |= {name.strip() for name in names.split(",") if name.strip()}
    public = set(mgtutor.__all__)
    assert used <= public, f"{path.name}: not public: {sorted(used - public)}"


def test_the_series_leaves_the_solutions_out():
    # `make run` executes the lessons only: the worked solutions are for teachers and the tests.
    series = find_notebooks(ROOT / "notebooks")
    solutions = sorted((ROOT / "notebooks" / "solutions").glob("*.ipynb"))
    assert solutions and not set(series) & set(solutions)
    assert [nb.stem[:2] for nb in series] == [nb.stem[:2] for nb in solutions]  # one solutions notebook each
