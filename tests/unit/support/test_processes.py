"""mgtutor.support.processes: a child script's output reaches the caller, and so does its failure."""

from __future__ import annotations

import sys

import pytest

from mgtutor.support.processes import ScriptError, report_result, run_script


def test_streams_output_drops_tf_noise_and_returns_the_reported_values(tmp_path, capsys):
    script = tmp_path / "child.py"
    script.write_text(
        "import sys\n"
        "from mgtutor.support.processes import report_result\n"
        "print('I0000 00:00:1795361908.774556   10469 cudart_stub.cc:31] Could not find cuda drivers')\n"
        "print('training: epoch 1', sys.argv[1:])\n"
        "report_result({'accuracy': 0.5, 'args': sys.argv[1:]})\n"
    )
    outcome = run_script(script, "a", 2, tmp_path)
    printed = capsys.readouterr().out
    assert printed.splitlines() == [f"training: epoch 1 ['a', '2', '{tmp_path}']"]
    assert outcome.returncode == 0 and outcome.result == {"accuracy": 0.5, "args": ["a", "2", str(tmp_path)]}
    assert outcome.tail == (f"training: epoch 1 ['a', '2', '{tmp_path}']",)


def test_a_failing_child_raises_with_its_last_lines(tmp_path):
    script = tmp_path / "broken.py"
    script.write_text("print('loading...')\nraise ValueError('EPOCHS must be >= 1, got 0')\n")
    with pytest.raises(ScriptError, match=r"failed \(exit 1\)(.|\n)*EPOCHS must be >= 1, got 0"):
        run_script(script, stream=False)
    outcome = run_script(script, stream=False, check=False)
    assert outcome.returncode == 1 and outcome.result is None


def test_timeout_kills_the_child(tmp_path):
    script = tmp_path / "slow.py"
    script.write_text("import time\nprint('started', flush=True)\ntime.sleep(60)\n")
    with pytest.raises(ScriptError, match=r"did not finish within 1 s(.|\n)*started"):
        run_script(script, timeout=1, stream=False)


def test_bad_arguments_are_refused_before_starting(tmp_path):
    with pytest.raises(FileNotFoundError, match="no Python file"):
        run_script(tmp_path / "missing.py")
    with pytest.raises(TypeError, match="is not a string, path or number"):
        run_script([sys.executable, "-c", "pass"], {"a": 1})
    with pytest.raises(ValueError, match="timeout must be"):
        run_script([sys.executable, "-c", "pass"], timeout=0)
    with pytest.raises(TypeError, match="values must be a dict"):
        report_result([1, 2])
