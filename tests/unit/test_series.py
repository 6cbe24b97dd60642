"""mgtutor.series, the main job's runner, on small notebooks that need no TensorFlow."""

from __future__ import annotations

import json

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from mgtutor import series


def _notebook(path, parameters: str, body: str) -> None:
    params = new_code_cell(parameters)
    params.metadata["tags"] = ["parameters"]
    nb = new_notebook(cells=[params, new_code_cell(body)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)


@pytest.fixture
def tiny_series(tmp_path):
    folder = tmp_path / "notebooks"
    folder.mkdir()
    _notebook(folder / "00_first.ipynb", "EPOCHS = 3\nRATE = 0.5",
              "from mgtutor import record\nrecord('epochs_seen', EPOCHS * 2)")  # fmt: skip
    _notebook(folder / "01_second.ipynb", "EPOCHS = 3\nNAME = 'x'",
              "from mgtutor import record\nrecord('name_seen', NAME)")  # fmt: skip
    return folder


def test_runs_in_order_with_overrides_and_records(tiny_series, tmp_path, capsys):
    run_dir = series.run_series(tiny_series, tmp_path / "runs", {"EPOCHS": 5, "NAME": "y"})
    summary = json.loads((run_dir / "summary.json").read_text())
    entries = summary["notebooks"]
    assert [e["notebook"] for e in entries] == ["00_first.ipynb", "01_second.ipynb"]
    assert entries[0]["records"] == {"epochs_seen": 10}
    assert entries[1]["records"] == {"name_seen": "y"} and entries[1]["parameters"] == {
        "EPOCHS": 5, "NAME": "y",
    }  # fmt: skip
    assert all(e["status"] == "ok" and e["seconds"] > 0 for e in entries)
    assert (run_dir / "01_second.ipynb").exists()
    assert "[2/2] 01_second.ipynb" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"EPOCH": 5}, "'EPOCH' is not in any notebook's parameters cell"),
        ({"EPOCHS": "five"}, "EPOCHS='five' does not fit 00_first.ipynb"),
        ({"RATE": True}, "RATE=True does not fit"),
    ],
)
def test_bad_override_is_refused_before_anything_runs(tiny_series, tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        series.run_series(tiny_series, tmp_path / "runs", overrides)
    assert not (tmp_path / "runs").exists()


def test_failing_notebook_stops_the_run_and_keeps_what_completed(tiny_series, tmp_path):
    _notebook(tiny_series / "01_second.ipynb", "EPOCHS = 3", "raise RuntimeError('boom')")
    _notebook(tiny_series / "02_third.ipynb", "EPOCHS = 3", "pass")
    with pytest.raises(SystemExit) as stopped:
        series.run_series(tiny_series, tmp_path / "runs", {})
    assert stopped.value.code == 1
    (run_dir,) = (tmp_path / "runs").iterdir()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert [e["status"] for e in summary["notebooks"]] == ["ok", "failed"]
    assert "RuntimeError: boom" in summary["notebooks"][1]["error"]
    assert not (run_dir / "02_third.ipynb").exists()


def test_command_line_parses_values():
    assert series.parse_value("5") == 5 and series.parse_value("0.1") == 0.1
    assert series.parse_value("None") is None and series.parse_value("cifar10") == "cifar10"
    with pytest.raises(SystemExit) as stopped:
        series.main(["--notebooks", "/nonexistent"])
    assert stopped.value.code == 2
