"""Run the whole notebook series, in order, into a fresh run folder: the project's main job.

``python -m mgtutor.series --notebooks notebooks --runs runs -p EPOCHS 2``
executes every ``NN_topic.ipynb`` with papermill (one kernel each, as device
set-up is once per process) into ``runs/<timestamp>/`` and writes
``summary.json`` with each notebook's parameters, duration and recorded values.
Overrides are checked against the notebooks' ``parameters`` cells before
anything runs; the first failing notebook stops the run, and what completed
stays in the folder.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import sys
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from mgtutor.records import read_records

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


def validate_overrides(overrides: dict[str, Any], notebooks: Sequence[Path]) -> dict[Path, dict]:
    """Per notebook, the overrides it takes; raises ValueError before any run on a bad one."""
    defaults = {nb: notebook_parameters(nb) for nb in notebooks}
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
    return {nb: {k: v for k, v in overrides.items() if k in params} for nb, params in defaults.items()}


def run_series(
    notebooks_dir: str | os.PathLike,
    runs_dir: str | os.PathLike,
    overrides: dict[str, Any] | None = None,
    *,
    kernel_name: str = "python3",
    only: Sequence[str] = (),
) -> Path:
    """Execute the series into a new timestamped folder and return that folder."""
    import papermill

    notebooks = find_notebooks(notebooks_dir)
    if only:
        notebooks = [nb for nb in notebooks if any(nb.name.startswith(prefix) for prefix in only)]
        if not notebooks:
            raise ValueError(f"--only {list(only)} matches no notebook in {notebooks_dir}.")
    plan = validate_overrides(overrides or {}, notebooks)
    run_dir = Path(runs_dir) / datetime.now().strftime("%Y%m%d-%H%M%S")
    run_dir.mkdir(parents=True, exist_ok=False)
    summary: dict[str, Any] = {"started": datetime.now().isoformat(), "notebooks": []}
    for position, notebook in enumerate(notebooks, start=1):
        target = run_dir / notebook.name
        print(f"[{position}/{len(notebooks)}] {notebook.name} {plan[notebook] or ''}", flush=True)
        started = time.perf_counter()
        entry: dict[str, Any] = {"notebook": notebook.name, "parameters": plan[notebook]}
        try:
            papermill.execute_notebook(
                str(notebook), str(target), parameters=plan[notebook], kernel_name=kernel_name,
                cwd=str(run_dir), progress_bar=False,
            )  # fmt: skip
            entry["status"] = "ok"
        except papermill.PapermillExecutionError as err:
            entry["status"] = "failed"
            entry["error"] = f"cell {err.exec_count}: {err.ename}: {err.evalue}"
        entry["seconds"] = round(time.perf_counter() - started, 1)
        if target.exists():
            entry["records"] = read_records(target)
        summary["notebooks"].append(entry)
        _write_json(run_dir / "summary.json", summary)
        if entry["status"] != "ok":
            print(f"FAILED {notebook.name} ({entry['error']}); see {target}", file=sys.stderr)
            raise SystemExit(1)
        print(f"    done in {entry['seconds']} s", flush=True)
    print(f"All {len(notebooks)} notebooks ran; executed copies in {run_dir}")
    return run_dir


def _write_json(path: Path, payload: Any) -> None:
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(payload, indent=2))
    temporary.replace(path)  # a reader never sees half a file


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--notebooks", default="notebooks", help="folder with NN_topic.ipynb")
    parser.add_argument("--runs", default="runs", help="where run folders are created")
    parser.add_argument("--kernel", default="python3", help="Jupyter kernel name")
    parser.add_argument("--only", nargs="*", default=(), help="notebook prefixes, e.g. 00 01")
    parser.add_argument(
        "-p", "--parameter", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
        help="override a notebook parameter, e.g. -p EPOCHS 5",
    )  # fmt: skip
    args = parser.parse_args(argv)
    overrides = {name: parse_value(value) for name, value in args.parameter}
    try:
        run_series(args.notebooks, args.runs, overrides, kernel_name=args.kernel, only=args.only)
    except (ValueError, FileNotFoundError) as err:
        parser.exit(2, f"error: {err}\n")


if __name__ == "__main__":
    main()
