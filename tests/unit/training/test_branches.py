"""`read_script` finds the worker-dependent branches that part a job's collectives, and only those."""

from __future__ import annotations

import textwrap

import pytest

from mgtutor.training.branches import read_script, uses
from tests.conftest import ROOT


def branches_of(tmp_path, source: str, **neighbours: str):
    for name, text in neighbours.items():
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(text))
    script = tmp_path / "worker.py"
    script.write_text(textwrap.dedent(source))
    return read_script(script)


STEPS = """
    import tensorflow as tf


    def make_steps(strategy):
        step = tf.function(lambda x: strategy.run(lambda v: v, (x,)))
        everyone = tf.function(lambda v: strategy.gather(strategy.run(tf.reshape, (v, [1])), axis=0))
        return step, everyone
"""


def test_a_skip_on_one_worker_is_named_with_its_line_and_what_it_skips(tmp_path):
    found = branches_of(tmp_path, """
        import tensorflow as tf
        from steps import make_steps

        strategy = tf.distribute.MultiWorkerMirroredStrategy()
        worker = strategy.cluster_resolver.task_id
        train_step, everyone = make_steps(strategy)
        for step in range(8):
            bad = worker == 1 and step == 5
            if bad:
                continue
            train_step(step)
    """, steps=STEPS)  # fmt: skip
    assert [(b.line, b.test, b.collective_line) for b in found] == [(10, "bad", 12)]
    assert "skips the rest of the loop" in found[0].what and "`train_step` (line 12)" in found[0].what


def test_a_skip_decided_by_every_worker_together_is_not_a_bug(tmp_path):
    found = branches_of(tmp_path, """
        import tensorflow as tf
        from steps import make_steps

        strategy = tf.distribute.MultiWorkerMirroredStrategy()
        worker = strategy.cluster_resolver.task_id
        train_step, everyone = make_steps(strategy)
        for step in range(8):
            bad = worker == 1 and step == 5
            if max(everyone(tf.constant(int(bad))).numpy()):  # gathered: the same on every worker
                continue
            train_step(step)
    """, steps=STEPS)  # fmt: skip
    assert found == []


def test_a_collective_only_the_chief_makes_is_named(tmp_path):
    found = branches_of(tmp_path, """
        from mgtutor import Trainer, multi_worker_strategy

        strategy = multi_worker_strategy()
        trainer = Trainer(model, optimizer, "mse", strategy=strategy)
        trainer.fit(x, y, batch_size=32)
        if trainer.is_chief:
            print(trainer.evaluate(x, y, batch_size=32))
            model.save("model.keras")
    """)  # fmt: skip
    assert [(b.line, b.test, b.collective_line) for b in found] == [(7, "trainer.is_chief", 8)]
    assert "calls `evaluate` (line 8)" in found[0].what


@pytest.mark.parametrize("body", [
    "np.save('w.npy', model.get_weights())",  # a chief's own file: no collective
    "print('done')",
    "json.dump(history, open('h.json', 'w'))",
])  # fmt: skip
def test_what_only_the_chief_writes_is_fine(tmp_path, body):
    found = branches_of(tmp_path, f"""
        import json
        import numpy as np
        import tensorflow as tf

        strategy = tf.distribute.MultiWorkerMirroredStrategy()
        if strategy.cluster_resolver.task_id == 0:
            {body}
    """)
    assert found == []


def test_a_loop_whose_length_depends_on_the_worker_is_named(tmp_path):
    found = branches_of(tmp_path, """
        import json
        import os

        index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
        rows = [100, 60][index]
        for step in range(rows // 16):
            strategy.run(step_fn, args=(step,))
    """)  # fmt: skip
    assert [(b.line, b.test) for b in found] == [(7, "range(rows // 16)")]
    assert found[0].what.startswith("runs a number of times that depends on the worker")


def test_the_series_own_worker_scripts_are_clean():
    for script in ("multiworker_job.py", "plain_worker.py"):
        assert read_script(ROOT / "tests" / "unit" / "training" / script) == []


def test_the_seeded_bug_worker_is_found_where_it_is():
    script = ROOT / "tests" / "unit" / "training" / "seeded_bug_worker.py"
    lines = script.read_text().splitlines()
    (branch,) = read_script(script)
    assert lines[branch.line - 1].startswith("if trainer.is_chief:")
    assert "trainer.evaluate(" in lines[branch.collective_line - 1]


def test_uses_names_the_first_line_of_each_call(tmp_path):
    script = tmp_path / "s.py"
    script.write_text("a = 1\nmodel.fit(x)\nmodel.fit(y)\nTrainer()\n")
    assert uses(script, {"fit", "Trainer", "evaluate"}) == {"fit": 2, "Trainer": 4}


def test_a_script_that_is_not_python_is_refused_with_its_line(tmp_path):
    script = tmp_path / "broken.py"
    script.write_text("x = 1\nif x\n")
    with pytest.raises(SyntaxError) as error:
        read_script(script)
    assert error.value.lineno == 2 and "broken.py" in str(error.value.filename)
