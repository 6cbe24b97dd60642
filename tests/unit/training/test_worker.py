"""mgtutor.training.worker: a worker's TF_CONFIG and its result line (no TensorFlow needed)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from mgtutor.support.processes import RESULT_MARK, report_result
from mgtutor.training.worker import tf_config


def test_tf_config_names_the_cluster_and_this_task():
    assert tf_config([2222, "node1:2223"], 1) == {
        "cluster": {"worker": ["localhost:2222", "node1:2223"]},
        "task": {"type": "worker", "index": 1},
    }
    with pytest.raises(ValueError, match="index must be a worker number 0..1"):
        tf_config([1, 2], 2)
    with pytest.raises(ValueError, match="neither a port"):
        tf_config(["no-port"], 0)


def test_report_result_prints_one_json_line(capsys):
    report_result({"loss": np.float32(0.5), "weights": np.arange(2), "name": "w"})
    line = capsys.readouterr().out.strip()
    assert line.startswith(RESULT_MARK)
    assert json.loads(line[len(RESULT_MARK) :]) == {"loss": 0.5, "weights": [0, 1], "name": "w"}
    with pytest.raises(TypeError, match="not JSON-serializable"):
        report_result({"x": object()})
