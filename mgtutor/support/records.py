"""Record named values from a notebook so that tests and the run report can read them back.

`record("test_accuracy", 0.61)` stores the value in the cell's output under a
private MIME type, so the executed `.ipynb` itself carries its metrics (the
idea of scrapbook's `glue`, without the dependency). The output's visible part
is empty: JupyterLab, the HTML pages and papermill show only what the lesson
prints. `read_records(path)` collects the values from an executed notebook.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from mgtutor.support.session import in_jupyter

MIME_TYPE = "application/vnd.mgtutor.record+json"


def _jsonable(value: Any) -> Any:
    """Plain JSON types only: numpy scalars and arrays, tuples and NaN made explicit."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # JSON has no NaN/inf; keep them visible as strings
    if value is None or isinstance(value, bool | int | float | str):
        return value
    raise TypeError(
        f"record() stores JSON values (numbers, strings, lists, dicts); got {type(value).__name__}. "
        "Convert it first, e.g. float(x) or x.tolist()."
    )


def record(name: str, value: Any) -> None:
    """Keep `value` under `name` in the notebook's output, invisibly, for `read_records`.

    Returns None, so a cell ending in ``record(...)`` shows no ``Out[]``. Outside a
    Jupyter kernel there is no output to keep it in: the name and value are
    checked, and nothing is shown or stored.
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"record name must be an identifier such as 'test_accuracy', got {name!r}.")
    stored = _jsonable(value)
    if in_jupyter():
        from IPython.display import display

        # Frontends draw the text/plain fallback of a MIME type they don't know: empty, it draws nothing.
        display({MIME_TYPE: {name: stored}, "text/plain": ""}, raw=True)


def read_records(notebook: str | Path) -> dict[str, Any]:
    """All values recorded in an executed notebook, later records of a name winning."""
    path = Path(notebook)
    try:
        nb = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ValueError(f"cannot read executed notebook {path}: {err}") from err
    found: dict[str, Any] = {}
    for cell in nb.get("cells", []):
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if MIME_TYPE in data:
                found.update(data[MIME_TYPE])
    return found
