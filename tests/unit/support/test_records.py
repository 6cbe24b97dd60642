"""mgtutor.support.records: values recorded in a notebook come back from the executed file."""

from __future__ import annotations

import json

import numpy as np
import pytest

from mgtutor.support import records
from mgtutor.support.records import MIME_TYPE, _jsonable, read_records, record


def test_values_become_plain_json():
    assert _jsonable({"a": np.float32(0.5), "b": np.arange(3), "c": (1, "x")}) == {
        "a": 0.5, "b": [0, 1, 2], "c": [1, "x"],
    }  # fmt: skip
    assert _jsonable(float("nan")) == "nan"
    with pytest.raises(TypeError, match="record\\(\\) stores JSON values"):
        _jsonable(object())


def test_record_returns_none_and_is_silent_outside_notebooks(capsys):
    assert record("accuracy", 0.25) is None  # a cell ending in record(...) echoes no Out[]
    assert capsys.readouterr() == ("", "")
    with pytest.raises(ValueError, match="record name must be an identifier"):
        record("not valid", 1)
    with pytest.raises(TypeError, match="record\\(\\) stores JSON values"):
        record("thing", object())  # checked even where nothing is kept


def test_in_a_notebook_the_record_is_an_output_with_nothing_to_show(tmp_path, monkeypatch, capsys):
    shown = []
    monkeypatch.setattr(records, "in_jupyter", lambda: True)
    monkeypatch.setattr("IPython.display.display", lambda bundle, raw: shown.append((bundle, raw)))
    assert record("accuracy", np.float64(0.25)) is None
    assert shown == [({MIME_TYPE: {"accuracy": 0.25}, "text/plain": ""}, True)]
    assert capsys.readouterr() == ("", "")

    notebook = tmp_path / "run.ipynb"
    output = {"output_type": "display_data", "data": shown[0][0], "metadata": {}}
    notebook.write_text(json.dumps({"cells": [{"cell_type": "code", "outputs": [output]}]}))
    assert read_records(notebook) == {"accuracy": 0.25}


def test_read_records_collects_every_cell_later_wins(tmp_path):
    def cell(values):
        return {"cell_type": "code", "outputs": [{"output_type": "display_data",
                                                  "data": {MIME_TYPE: values}}]}  # fmt: skip

    notebook = tmp_path / "run.ipynb"
    notebook.write_text(json.dumps({"cells": [cell({"a": 1}), cell({"b": 2}), cell({"a": 3})]}))
    assert read_records(notebook) == {"a": 3, "b": 2}
    with pytest.raises(ValueError, match="cannot read executed notebook"):
        read_records(tmp_path / "missing.ipynb")
