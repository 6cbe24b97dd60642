"""mgtutor.training.plan: one fit's options, one typed record both engines build, checked once."""

from __future__ import annotations

import dataclasses
import inspect
import re

import numpy as np
import pytest

from mgtutor.training.plan import ACCUMULATION_REFUSED, RESUMABLE_FIT, TRAINER, FitOptions, FitPlan, plan_fit


def _data(n: int = 10) -> tuple[np.ndarray, np.ndarray]:
    return np.zeros((n, 3), np.float32), np.zeros((n, 2), np.float32)


def _plan(engine=TRAINER, replicas: int = 1, **options) -> FitPlan:
    return plan_fit(FitOptions(**options), engine=engine, replicas=replicas)


def test_the_steps_of_an_epoch_depend_on_the_engine_with_a_size_not_a_multiple_of_the_batch():
    x, y = _data(10)
    # Trainer: only full global batches, 10 // 4 = 2; resumable_fit: the last batch holds what is left, 3.
    whole = _plan(TRAINER, 2, x=x, y=y, batch_size=4, epochs=1)
    partial = _plan(RESUMABLE_FIT, 2, x=x, y=y, batch_size=4, epochs=1)
    assert (whole.steps_per_epoch, partial.steps_per_epoch) == (2, 3)
    assert whole.num_examples == partial.num_examples == 10
    assert _plan(x=x, y=y, batch_size=4, epochs=1, steps_per_epoch=1).steps_per_epoch == 1


def test_the_settings_identify_the_run_and_change_with_the_data():
    x, y = _data(10)
    first = _plan(x=x, y=y, batch_size=5, epochs=3, seed=7)
    again = _plan(x=x.copy(), y=y.copy(), batch_size=5, epochs=3, seed=7)
    assert first.settings == again.settings
    assert first.settings == {"batch_size": 5, "steps_per_epoch": 2, "seed": 7, "shuffle": True,
                              "num_examples": 10, "data": first.settings["data"],
                              "accumulation_steps": 1}  # fmt: skip
    other = _plan(x=x + 1, y=y, batch_size=5, epochs=3, seed=7)
    assert other.settings["data"] != first.settings["data"]


def test_options_are_one_typed_record_and_no_function_takes_text_for_its_errors():
    # Issue 39: one name per idea (checkpoint_every_steps in both engines), and error-message text does
    # not travel as parameters: what an engine cannot do is a property of the Engine.
    assert list(inspect.signature(plan_fit).parameters) == ["options", "engine", "replicas"]
    fields = {f.name for f in dataclasses.fields(FitOptions)}
    assert "checkpoint_every_steps" in fields and "save_every_steps" not in fields
    with pytest.raises(TypeError):
        FitOptions(save_every_steps=2)  # the old name is no field


def test_it_is_frozen_and_refuses_bad_options_naming_them(tmp_path):
    x, y = _data(8)
    with pytest.raises(TypeError):
        plan_fit(FitOptions(x=x, y=y, batch_size=4, epochs=1), TRAINER, 1)  # engine and replicas by name
    plan = _plan(x=x, y=y, batch_size=4, epochs=1)
    assert isinstance(plan, FitPlan)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.epochs = 2
    base = dict(x=x, y=y, batch_size=4, epochs=1)
    cases = [
        (dict(batch_size=3), ValueError, "global batch 3 does not split evenly over 2 replicas"),
        (dict(epochs=0), ValueError, "epochs must be a whole number >= 1"),
        (dict(y=y[:7]), ValueError, "as many examples.*x: 8.*y: 7"),
        (dict(shuffle="yes"), TypeError, "shuffle must be True or False"),
        (dict(verbose=3), ValueError, "verbose must be 'auto', 0, 1 or 2"),
        (dict(checkpoint_every_steps=2), ValueError, "checkpoint_every_steps needs checkpoint_dir"),
        (dict(validation_data=x), TypeError, "validation_data must be a tuple"),
        (dict(x=list(x)), TypeError, "fit: x must be a NumPy array"),
        (dict(checkpoint_dir=tmp_path / "f", checkpoint_every_steps=0), ValueError, "checkpoint_every_steps"),
        *[(dict(accumulation_steps=bad, checkpoint_dir=tmp_path / "f"), ValueError,
           rf"accumulation_steps must be a whole number >= 1, got {re.escape(repr(bad))}\. Pass a whole "
           r"number such as accumulation_steps=4") for bad in (0, -1, 2.5, True, "4")],
    ]
    for change, error, pattern in cases:
        with pytest.raises(error, match=pattern):
            _plan(TRAINER, 2, **(base | change))
    with pytest.raises(ValueError, match=re.escape(f"accumulation_steps=2: {ACCUMULATION_REFUSED}")):
        _plan(RESUMABLE_FIT, 2, **base, accumulation_steps=2)
    assert not (tmp_path / "f").exists()  # checked, not created


def test_accumulation_groups_an_epoch_into_updates_and_is_part_of_the_settings():
    x, y = _data(100)
    # 100 rows in batches of 8: 12 whole batches (4 rows left out); k=5 makes updates of 5, 5 and 2 batches.
    plan = _plan(TRAINER, 2, x=x, y=y, batch_size=8, epochs=1, accumulation_steps=5)
    assert (plan.steps_per_epoch, plan.accumulation_steps, plan.updates_per_epoch) == (12, 5, 3)
    assert plan.settings["accumulation_steps"] == 5
    one = _plan(TRAINER, 2, x=x, y=y, batch_size=8, epochs=1)
    assert (one.accumulation_steps, one.updates_per_epoch) == (1, 12)
    # An engine that cannot accumulate still takes the default.
    assert _plan(RESUMABLE_FIT, x=x, y=y, batch_size=8, epochs=1).updates_per_epoch == 13
