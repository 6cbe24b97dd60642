"""mgtutor.classroom.lessons: the series found in order, command-line values, a check that runs nothing."""

from __future__ import annotations

import pytest

from mgtutor.classroom.lessons import find_notebooks, parse_value
from mgtutor.classroom.lessons import main as lessons_main
from tests.conftest import ROOT

NOTEBOOKS = find_notebooks(ROOT / "notebooks")


def test_lessons_are_found_in_order_and_a_folder_without_them_is_refused(tmp_path):
    numbers = [int(nb.name[:2]) for nb in NOTEBOOKS]
    assert numbers == list(range(len(numbers)))  # 00, 01, ...: no lesson missing, none twice
    with pytest.raises(FileNotFoundError, match="pass --notebooks"):
        find_notebooks(tmp_path)


def test_command_line_values_are_python_literals_else_strings():
    assert parse_value("5") == 5 and parse_value("0.1") == 0.1
    assert parse_value("None") is None and parse_value("cifar10") == "cifar10"


def test_the_check_alone_runs_nothing(capsys):
    with pytest.raises(SystemExit) as stopped:
        lessons_main(["--notebooks", str(ROOT / "notebooks"), "N_DEVICES=1"])
    assert stopped.value.code == 2 and "04_multi_gpu_wrapping cannot run" in capsys.readouterr().err
    lessons_main(["--notebooks", str(ROOT / "notebooks"), "EPOCHS=1", "TRAIN_SAMPLES=512"])
    assert f"All {len(NOTEBOOKS)} notebooks accept these parameters" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        lessons_main(["--notebooks", str(ROOT / "notebooks"), "EPOCHS"])
    assert "NAME=VALUE" in capsys.readouterr().err
