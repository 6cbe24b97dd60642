"""The package's copy of what a lesson writes out, generated from the lesson's cells (d2l's pattern).

A code cell whose first line is ``#@save`` holds only imports and definitions; the module named for
its notebook in `MODULES` is those cells, in order, imports first, under a header that says where it
came from. So the lesson and the package cannot drift: edit the lesson, then run

    python tools/lesson_code.py            # rewrite every generated module (make lesson-code)
    python tools/lesson_code.py --check    # exit 1 naming each stale one (tests/notebooks)
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARK = "#@save"
# notebook -> (the module it writes, that module's docstring)
MODULES = {
    "notebooks/01_prepare_data.ipynb": (
        "mgtutor/prepare.py",
        "Preparing arrays for training: scaled pixels, one-hot labels, a tf.data pipeline (lesson 01).",
    ),
    "notebooks/16_capstone.ipynb": (
        "mgtutor/training/capstone.py",
        "The capstone's recipe (lesson 16), for its benchmark, its tests and `make check`: the input\n"
        "stream (flips and crops of whole batches, alternating flips, progressive resizing), the network\n"
        "(a whitening first layer, convolutions that start as the identity), the one-cycle schedule,\n"
        "lookahead, the timing of the arithmetic, the time-to-accuracy record and the test-time views."
    ),
    "notebooks/14_pinned_workers.ipynb": (
        "mgtutor/speed/link.py",
        "The link between devices, measured (lesson 14): an all-reduce's time fitted as latency alpha\n"
        "+ bytes / bandwidth beta, each point weighted by 1 / its time (a fit of the relative error), and\n"
        "lesson 11's ring all-reduce on that link, (N - 1) alpha + 2(N - 1)/N bytes / beta, which is alpha\n"
        "+ bytes / beta for the 2 workers it was measured on. `benchmarks/bench_workers.py` uses both.\n"
        "Before them, how lesson 14 reads a ratio of two timed rates (`read_ratio`), which lesson 08's\n"
        "scaling study and docs/results.md print through too: one reading wherever a direction is printed.",
    ),
    "notebooks/11_where_time_goes.ipynb": (
        "mgtutor/training/accumulation.py",
        "Gradient accumulation for `Trainer`: one optimizer update, so one all-reduce, per k batches\n"
        "(lesson 11). Each replica adds up its own gradients of k batches in local variables, and only the\n"
        "group's last batch calls ``apply_gradients``, whose all-reduce sums the replicas' totals (PyTorch\n"
        "DDP's ``no_sync``). Every batch's loss is divided by the global batch, so a group's sum divided by\n"
        "its size is the gradient of the mean loss over all its examples, a short last group's included. A\n"
        "group runs from its first batch to the update without a checkpoint in between, and its first batch\n"
        "overwrites the sums, so a run killed mid-group resumes from the group's start with nothing stale.",
    ),
}
# What a saved cell may hold at its top level: the module must do no work when imported.
ALLOWED = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef, ast.Assign, ast.AnnAssign, ast.Expr)
HOW = "edit the lesson,\nthen `make lesson-code`. A test fails when this file and the lesson differ."


def saved_cells(notebook: Path) -> list[tuple[str, str]]:
    """(cell id, source without its mark) of each ``#@save`` cell, in order."""
    cells = json.loads(notebook.read_text())["cells"]
    found = []
    for cell in cells:
        source = "".join(cell["source"])
        if cell["cell_type"] == "code" and source.startswith(MARK):
            found.append((cell.get("id", "?"), source.split("\n", 1)[1] if "\n" in source else ""))
    return found


def _check_cell(where: str, tree: ast.Module) -> None:
    for node in tree.body:
        docstring = isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
        if not isinstance(node, ALLOWED) or (isinstance(node, ast.Expr) and not docstring):
            raise ValueError(f"{where}: a {MARK} cell holds only imports and definitions, not line "
                             f"{node.lineno} ({type(node).__name__}); move the rest to another cell.")


def generate(notebook: str, target: str, docstring: str) -> str:
    """The text of `target`, from `notebook`'s saved cells."""
    imports: list[str] = []
    bodies: list[str] = []
    for cell_id, source in saved_cells(ROOT / notebook):
        tree = ast.parse(source)
        _check_cell(f"{notebook} cell {cell_id}", tree)
        lines = source.splitlines()
        for node in tree.body:
            text = "\n".join(lines[node.lineno - 1 : node.end_lineno])
            if isinstance(node, ast.Import | ast.ImportFrom):
                if text not in imports:
                    imports.append(text)
                continue
            start = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))]) - 1
            while start > 0 and lines[start - 1].lstrip().startswith("#"):
                start -= 1  # a definition's comments stay with it
            bodies.append("\n".join(lines[start : node.end_lineno]))
    if not bodies:
        raise ValueError(f"{notebook} has no {MARK} cell: nothing to write into {target}.")
    source = f"Generated from {notebook} (its {MARK} cells) by tools/lesson_code.py"
    header = f'"""{docstring}\n\n{source}: {HOW}\n"""'
    text = "\n\n".join([header, "from __future__ import annotations", "\n".join(imports)]) + "\n\n\n"
    return _sorted_imports(text + "\n\n\n".join(bodies) + "\n", target)


def _sorted_imports(text: str, target: str) -> str:
    """`text` with its imports grouped and sorted as the project's ruff wants them."""
    done = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--select", "I", "--fix", "--quiet",
         "--stdin-filename", target, "-"],
        input=text, capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    return done.stdout or text


def stale() -> list[str]:
    """The generated modules whose file differs from what their lesson gives."""
    return [target for notebook, (target, doc) in MODULES.items()
            if not (ROOT / target).exists() or (ROOT / target).read_text() != generate(notebook, target, doc)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a module is stale")
    args = parser.parse_args(argv)
    if args.check:
        out_of_date = stale()
        for target in out_of_date:
            print(f"{target} differs from its lesson: run `make lesson-code` (python tools/lesson_code.py)")
        return 1 if out_of_date else 0
    for notebook, (target, doc) in MODULES.items():
        text, path = generate(notebook, target, doc), ROOT / target
        temp = path.with_name(f".{path.name}.tmp")
        temp.write_text(text)
        os.replace(temp, path)  # whole or not at all
        print(f"{target} <- {notebook}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
