"""A new user's overrides refused in the notebook itself, in its first cells, before any work.

tests/unit/classroom/test_limits.py checks the whole grid of common overrides against every
lesson's limits (cheap, nothing run). The quick run `make run EPOCHS=1 TRAIN_SAMPLES=512`
runs for real as the offline run of the two lessons whose step counts come from their
parameters (07, 09: QUICK_RUN_CHECKS in test_notebooks.py).
"""

from __future__ import annotations

import json

import papermill
import pytest

from tests.notebooks.test_notebooks import NOTEBOOKS, execute, kernel

BY_STEM = {nb.stem: nb for nb in NOTEBOOKS}


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
