"""The series' lessons as `make run` sees them: found in order, parameters cells read, overrides checked.

`validate_overrides` refuses, before anything runs, a parameter no lesson has, a value of
another type than its default, or one a lesson cannot honour (`mgtutor.classroom.limits`).
``python -m mgtutor.classroom.lessons EPOCHS=1 TRAIN_SAMPLES=512`` asks it from the command line.
It imports nothing heavy.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mgtutor.classroom.limits import check_lessons

NOTEBOOK_GLOB = "[0-9][0-9]_*.ipynb"


def find_notebooks(folder: str | os.PathLike) -> list[Path]:
    """The series' notebooks in order (``00_environment.ipynb``, ``01_...``)."""
    found = sorted(Path(folder).glob(NOTEBOOK_GLOB))
    if not found:
        raise FileNotFoundError(f"no notebooks matching {NOTEBOOK_GLOB} in {folder}; pass --notebooks.")
    return found


def notebook_parameters(notebook: str | os.PathLike) -> dict[str, Any]:
    """The defaults in a notebook's ``parameters`` cell, as Python values."""
    import nbformat

    nb = nbformat.read(notebook, as_version=4)
    cells = [c for c in nb.cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    if len(cells) != 1:
        raise ValueError(f"{notebook} must have exactly one cell tagged 'parameters', has {len(cells)}.")
    values: dict[str, Any] = {}
    for node in ast.parse(cells[0].source).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name):
                values[target.id] = ast.literal_eval(node.value)
    return values


def parse_value(text: str) -> Any:
    """A command-line value as a Python literal (``5``, ``0.1``, ``None``), else a string."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def _same_kind(default: Any, value: Any) -> bool:
    if default is None or value is None:
        return True
    if isinstance(default, bool) or isinstance(value, bool):
        return isinstance(default, bool) and isinstance(value, bool)
    if isinstance(default, float):
        return isinstance(value, int | float)
    return isinstance(value, type(default))


def check_overrides(overrides: dict[str, Any], defaults: dict[Path, dict]) -> dict[Path, dict]:
    """Per notebook (its `defaults` given), the overrides it takes: known, of its type, within its limits."""
    known = {name for params in defaults.values() for name in params}
    for name, value in overrides.items():
        if name not in known:
            raise ValueError(
                f"parameter {name!r} is not in any notebook's parameters cell; known: {sorted(known)}."
            )
        for nb, params in defaults.items():
            if name in params and not _same_kind(params[name], value):
                raise ValueError(
                    f"parameter {name}={value!r} does not fit {nb.name}, whose default is "
                    f"{params[name]!r} ({type(params[name]).__name__}); pass a value of that type."
                )
    plan = {nb: {k: v for k, v in overrides.items() if k in params} for nb, params in defaults.items()}
    return check_lessons(plan, defaults)  # each lesson's own limits, the ones its first cell checks


def validate_overrides(overrides: dict[str, Any], notebooks: Sequence[Path]) -> dict[Path, dict]:
    """Per notebook, the overrides it takes; raises ValueError before any run on a bad one."""
    return check_overrides(overrides, {nb: notebook_parameters(nb) for nb in notebooks})


def main(argv: list[str] | None = None) -> None:
    """``python -m mgtutor.classroom.lessons EPOCHS=1 TRAIN_SAMPLES=512``: would `make run` take these?

    Runs nothing.
    """
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("overrides", nargs="*", metavar="NAME=VALUE", help="parameters, e.g. EPOCHS=1")
    parser.add_argument("--notebooks", default="notebooks", help="folder with NN_topic.ipynb")
    args = parser.parse_args(argv)
    try:
        pairs = [item.split("=", 1) for item in args.overrides]
        if any(len(pair) != 2 for pair in pairs):
            raise ValueError(f"give overrides as NAME=VALUE, got {args.overrides}.")
        notebooks = find_notebooks(args.notebooks)
        validate_overrides({name: parse_value(value) for name, value in pairs}, notebooks)
    except (ValueError, FileNotFoundError) as err:
        parser.exit(2, f"error: {err}\n")
    print(f"All {len(notebooks)} notebooks accept these parameters; nothing was run.")


if __name__ == "__main__":
    main()
