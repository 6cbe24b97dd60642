"""Record named values from a notebook so that tests and the run report can read them back.

`record("test_accuracy", 0.61)` shows the value in the notebook and stores it in
the cell's output under a private MIME type, so the executed `.ipynb` itself
carries its metrics (the idea of scrapbook's `glue`, without the dependency).
`read_records(path)` collects them from an executed notebook.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

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


def record(name: str, value: Any) -> Any:
    """Show `name = value` in the notebook and keep it in the output for later reading."""
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"record name must be an identifier such as 'test_accuracy', got {name!r}.")
    stored = _jsonable(value)
    try:
        from IPython.display import display

        display(
            {MIME_TYPE: {name: stored}, "text/plain": f"recorded {name} = {stored!r}"},
            raw=True,
        )
    except ImportError:  # plain Python, no notebook: printing is the record
        print(f"recorded {name} = {stored!r}")
    return value


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
