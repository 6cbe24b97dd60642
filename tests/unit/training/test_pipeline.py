"""Pipeline parallelism (mgtutor.training.pipeline, lesson 18): the schedules counted slot by slot here;
the step itself in a child (pipeline_child.py), where Keras runs on JAX and each stage in a worker.

Tolerance of the gradients: float32 rounding. The pipeline adds the microbatches' gradients where the
one-device step sums the batch at once, so the two differ only in the order of the sums; each array
must match to 1e-6 of the largest gradient (float32's epsilon is 1.2e-7; the sums here run over at
most 64 terms).
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys

import pytest

from mgtutor.training.pipeline import (
    KINDS,
    PipelineStep,
    check_microbatches,
    cut,
    pipeline_schedule,
    stage_orders,
)
from tests.conftest import ROOT, run_child

CHILD = ROOT / "tests" / "unit" / "training" / "pipeline_child.py"
CASES = list(itertools.product(KINDS, (1, 2, 3, 4), (1, 2, 4, 8)))


@pytest.mark.parametrize("kind, p, m", CASES)
def test_the_bubble_is_p_minus_1_over_m_plus_p_minus_1_in_slots(kind, p, m):
    schedule = pipeline_schedule(kind, p, m)
    assert len(schedule.slots) == 2 * (m + p - 1)  # m forwards and m backwards, plus p - 1 slots each way
    assert schedule.idle_slots() == [2 * (p - 1)] * p
    assert all(idle * (m + p - 1) == (p - 1) * len(schedule.slots) for idle in schedule.idle_slots())
    assert schedule.formula == (p - 1) / (m + p - 1)


@pytest.mark.parametrize("kind, p, m", CASES)
def test_every_step_runs_once_after_the_step_it_waits_for(kind, p, m):
    when = {step: t for t, slot in enumerate(pipeline_schedule(kind, p, m).slots) for step in slot}
    assert sorted(when) == sorted((s, op, i) for s in range(p) for op in "FB" for i in range(m))
    for (stage, op, i), t in when.items():
        if op == "F" and stage > 0:
            assert when[(stage - 1, "F", i)] < t
        if op == "B":
            assert when[(stage + 1, "B", i) if stage < p - 1 else (stage, "F", i)] < t
    for t, slot in enumerate(pipeline_schedule(kind, p, m).slots):
        assert len({stage for stage, _, _ in slot}) == len(slot), f"a stage runs two steps in slot {t}"


@pytest.mark.parametrize("p, m", list(itertools.product((1, 2, 3, 4), (1, 2, 4, 8))))
def test_1f1b_holds_at_most_p_microbatches_gpipe_all_m(p, m):
    assert pipeline_schedule("GPipe", p, m).in_flight() == [m] * p
    held = pipeline_schedule("1F1B", p, m).in_flight()
    assert held == [min(p - s, m) for s in range(p)] and max(held) <= p


def test_1f1b_alternates_after_its_warm_up():
    assert stage_orders("1F1B", 2, 3) == [
        [("F", 0), ("F", 1), ("B", 0), ("F", 2), ("B", 1), ("B", 2)],
        [("F", 0), ("B", 0), ("F", 1), ("B", 1), ("F", 2), ("B", 2)],
    ]


class _Layer:
    def __init__(self, size):
        self.size = size

    def count_params(self):
        return self.size


def test_cut_balances_parameters_and_gives_each_stage_a_layer():
    sizes = lambda stages: [[layer.size for layer in stage] for stage in stages]  # noqa: E731
    assert sizes(cut([_Layer(s) for s in (30, 10, 10, 10, 1)], 2)) == [[30], [10, 10, 10, 1]]
    assert sizes(cut([_Layer(s) for s in (100, 1, 1)], 3)) == [[100], [1], [1]]
    assert sizes(cut([_Layer(5)] * 4, 4)) == [[5]] * 4


def test_busy_time_and_idle_fractions_read_the_timelines():
    # One microbatch from t = 10 s to 15 s: stage 0 computes 1 + 2 s, stage 1 1 + 1 s; idle 2/5 and 3/5.
    timelines = [[("F", 0, 10.0, 11.0), ("B", 0, 13.0, 15.0)], [("F", 0, 11.0, 12.0), ("B", 0, 12.0, 13.0)]]
    step = PipelineStep(pipeline_schedule("GPipe", 2, 1), [], 0.0, timelines, [0, 0])
    assert step.seconds == 5.0 and step.busy_seconds() == [3.0, 2.0]
    assert step.idle_fractions() == pytest.approx([0.4, 0.6])


@pytest.mark.parametrize("call, message", [
    (lambda: pipeline_schedule("zigzag", 2, 4), "kind must be one of 'GPipe', '1F1B', got 'zigzag'"),
    (lambda: pipeline_schedule("GPipe", 0, 4), "p must be a whole number >= 1"),
    (lambda: pipeline_schedule("1F1B", 2, 0), "m must be a whole number >= 1"),
    (lambda: check_microbatches(30, 4), "microbatches=4 does not divide the batch of 30 examples"),
    (lambda: check_microbatches(30, 4), "pass microbatches=3 or 5"),
    (lambda: check_microbatches(7, 8), "pass microbatches=7,"),
    (lambda: cut([_Layer(1)] * 2, 3), "p = 3 stages need at least 3 layers"),
])  # fmt: skip
def test_refusals_name_the_value_and_the_fix(call, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        call()


@pytest.fixture(scope="module")
def child():
    return run_child(CHILD, timeout=600)


@pytest.mark.slow
@pytest.mark.parametrize("kind, p, m", list(itertools.product(KINDS, (2, 4), (1, 4))))
def test_the_pipeline_step_gives_the_one_device_gradients(child, kind, p, m):
    step = child[f"p{p} {kind} m{m}"]
    assert all(step["shapes_equal"]) and len(step["difference"]) == 10
    assert max(step["difference"]) <= 1e-6 * child["largest_gradient"]
    assert step["loss"] == pytest.approx(child["loss"], rel=1e-6)
    assert step["seconds"] >= step["longest_compute"] > 0 and all(0 <= f < 1 for f in step["idle"])
    # Every stage computed each microbatch's forward and backward once.
    assert step["computes"] == [sorted([op, i] for op in "FB" for i in range(m))] * p


@pytest.mark.slow
def test_stored_activations_follow_the_schedule(child):
    # Stage s of 1F1B holds min(p - s, m) microbatches at its peak, GPipe all m: bytes in that ratio.
    for p in (2, 4):
        gpipe, one_f_one_b = child[f"p{p} GPipe m4"]["peak_bytes"], child[f"p{p} 1F1B m4"]["peak_bytes"]
        for stage in range(p):
            assert one_f_one_b[stage] * 4 == gpipe[stage] * min(p - stage, 4)
    assert child["p2_stages"] == [2, 3] and child["p4_stages"] == [1, 1, 1, 2]


@pytest.mark.slow
def test_a_batch_m_does_not_divide_is_refused_before_any_work(child):
    for p in (2, 4):
        assert child[f"p{p}_refused"].startswith("microbatches=4 does not divide the batch of 30 examples")


@pytest.mark.slow
def test_a_killed_worker_is_an_error_naming_the_stage_not_a_hang(child):
    killed = child["killed"]
    assert "stage 1 exit code -9" in killed["error"] and "Make a new Pipeline" in killed["error"]
    # Returned at all: before, the step waited forever on the dead worker. The seconds are the live stage's
    # start (importing JAX, compiling: 32 s here beside a test-all run) and up to 5 s joining it.
    assert killed["seconds"] < 120
    # No stage outlives the error: one still starting would print its traceback below the fix (CI, Dec 1).
    assert killed["alive_after"] == [False, False]


NO_GUARD = """
import os
os.environ["KERAS_BACKEND"] = "jax"
import keras
from mgtutor.training.pipeline import Pipeline
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(4), keras.layers.Dense(2)])
Pipeline(model, 2, cores_per_worker=None).step("GPipe", [[0.0] * 4] * 2, [[1.0, 0.0]] * 2, 1)
"""


@pytest.mark.slow
def test_a_script_without_the_main_guard_is_told_to_add_it(tmp_path):
    # The workers are spawned: each imports the script again, which makes a Pipeline again and dies.
    script = tmp_path / "no_guard.py"
    script.write_text(NO_GUARD)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 1
    assert "if __name__ == \"__main__\":" in done.stderr.splitlines()[-1], done.stderr[-2000:]
