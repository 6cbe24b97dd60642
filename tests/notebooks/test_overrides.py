"""A new user's overrides, the same for every lesson, as `make run EPOCHS=1 TRAIN_SAMPLES=512` gives them.

tests/unit/test_limits.py checks the whole grid of common overrides against every
lesson's limits (cheap, nothing run). Here the lessons run: the two whose step
counts come from their parameters (07's save and kill, 09's rounds) at the quick
run that used to stop them, with what those steps decide, and a refusal seen in the notebook
itself, in its first cells, before any work.
"""

from __future__ import annotations

import json

import papermill
import pytest

from tests.notebooks.test_notebooks import NOTEBOOKS, execute, kernel

QUICK = {"EPOCHS": 1, "TRAIN_SAMPLES": 512, "TEST_SAMPLES": 128}
BY_STEM = {nb.stem: nb for nb in NOTEBOOKS}


def overrides_for(stem: str, wanted: dict) -> dict:
    from mgtutor.classroom.runner import notebook_parameters

    defaults = notebook_parameters(BY_STEM[stem])
    return {name: value for name, value in wanted.items() if name in defaults}


@pytest.mark.slow
@pytest.mark.notebook
@pytest.mark.parametrize("stem", ["07_save_and_restore", "09_parameter_averaging"])
def test_quick_run_takes_the_steps_from_the_parameters(stem, tmp_path):
    parameters = overrides_for(stem, QUICK)
    with kernel(tmp_path) as km:
        records = execute(BY_STEM[stem], tmp_path / f"{stem}.ipynb", parameters, tmp_path, km)
    # What the steps decide; not the accuracy claims, which 8 steps of training cannot make.
    if stem == "07_save_and_restore":
        assert records["kill_at"] == [0, 5] and records["killed_at"] == [0, 4]  # saved every 2 of 8 batches
        assert records["resume_weight_difference"] == 0.0
        curves = records["loss_curves"]
        assert curves["interrupted"] == curves["uninterrupted"] and len(curves["uninterrupted"]) == 1
        assert records["reload_one_device_difference"] < 1e-6
    else:  # 512 images hold 8 rounds of 2 x 32: the seed's wrapper runs 6, two averagings
        assert records["seed_rounds"] == 6 and len(records["seed_wrapper_spreads"]) == 2
        assert records["spread_after_averaging"] == 0.0
        assert max(records["averaging_vs_allreduce"].values()) < 1e-5


@pytest.mark.slow
@pytest.mark.notebook
def test_one_device_is_refused_in_the_first_cells(tmp_path):
    stem = "04_multi_gpu_wrapping"
    output = tmp_path / f"{stem}.ipynb"
    with pytest.raises(papermill.PapermillExecutionError) as refused:
        with kernel(tmp_path) as km:
            execute(BY_STEM[stem], output, {"N_DEVICES": 1}, tmp_path, km)
    assert refused.value.ename == "ValueError"
    assert "N_DEVICES must be a whole number >= 2" in refused.value.evalue
    cells = json.loads(output.read_text())["cells"]
    ran = [cell.get("id") for cell in cells if cell["cell_type"] == "code" and cell.get("execution_count")]
    # imports, parameters, papermill's injected parameters, then the refusal: nothing else ran.
    assert ran[-1] == "nb04-plan" and len(ran) == 4, ran
