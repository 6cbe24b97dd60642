"""mgtutor.training.plan: one fit's arguments, keyword-only and checked once, as both engines read them."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from mgtutor.training.plan import FitPlan, plan_fit


def _data(n: int = 10) -> tuple[np.ndarray, np.ndarray]:
    return np.zeros((n, 3), np.float32), np.zeros((n, 2), np.float32)


def test_the_steps_of_an_epoch_depend_on_the_engine_with_a_size_not_a_multiple_of_the_batch():
    x, y = _data(10)
    # Trainer: only full global batches, 10 // 4 = 2; resumable_fit: the last batch holds what is left, 3.
    whole = plan_fit(replicas=2, x=x, y=y, batch_size=4, epochs=1, whole_batches=True)
    partial = plan_fit(replicas=2, x=x, y=y, batch_size=4, epochs=1, whole_batches=False)
    assert (whole.steps_per_epoch, partial.steps_per_epoch) == (2, 3)
    assert whole.num_examples == partial.num_examples == 10
    assert plan_fit(replicas=1, x=x, y=y, batch_size=4, epochs=1, whole_batches=True,
                    steps_per_epoch=1).steps_per_epoch == 1  # fmt: skip


def test_the_settings_identify_the_run_and_change_with_the_data():
    x, y = _data(10)
    first = plan_fit(replicas=1, x=x, y=y, batch_size=5, epochs=3, seed=7, whole_batches=True)
    again = plan_fit(replicas=1, x=x.copy(), y=y.copy(), batch_size=5, epochs=3, seed=7, whole_batches=True)
    assert first.settings == again.settings
    assert first.settings == {"batch_size": 5, "steps_per_epoch": 2, "seed": 7, "shuffle": True,
                              "num_examples": 10, "data": first.settings["data"],
                              "accumulation_steps": 1}  # fmt: skip
    other = plan_fit(replicas=1, x=x + 1, y=y, batch_size=5, epochs=3, seed=7, whole_batches=True)
    assert other.settings["data"] != first.settings["data"]


def test_it_is_keyword_only_frozen_and_refuses_bad_arguments_naming_them(tmp_path):
    x, y = _data(8)
    with pytest.raises(TypeError):
        plan_fit(1, x, y, 4, 1)  # positional arguments are refused
    plan = plan_fit(replicas=1, x=x, y=y, batch_size=4, epochs=1, whole_batches=True)
    assert isinstance(plan, FitPlan)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.epochs = 2
    base = dict(replicas=2, x=x, y=y, batch_size=4, epochs=1, whole_batches=True)
    cases = [
        (dict(batch_size=3), ValueError, "global batch 3 does not split evenly over 2 replicas"),
        (dict(epochs=0), ValueError, "epochs must be a whole number >= 1"),
        (dict(y=y[:7]), ValueError, "as many examples.*x: 8.*y: 7"),
        (dict(shuffle="yes"), TypeError, "shuffle must be True or False"),
        (dict(verbose=3), ValueError, "verbose must be 'auto', 0, 1 or 2"),
        (dict(save_every_steps=2), ValueError, "checkpoint_every_steps needs checkpoint_dir"),
        (dict(save_every_steps=2, save_every_name="save_every_steps"), ValueError, "save_every_steps needs"),
        (dict(validation_data=x), TypeError, "validation_data must be a tuple"),
        (dict(x=list(x), plain_arrays=True), TypeError, "fit: x must be a NumPy array"),
        (dict(checkpoint_dir=tmp_path / "f", save_every_steps=0), ValueError, "checkpoint_every_steps"),
        *[(dict(accumulation_steps=bad, checkpoint_dir=tmp_path / "f"), ValueError,
           rf"accumulation_steps must be a whole number >= 1, got {re.escape(repr(bad))}\. Pass a whole "
           r"number such as accumulation_steps=4") for bad in (0, -1, 2.5, True, "4")],
        (dict(accumulation_steps=2, accumulation_refused="no: use X"), ValueError,
         "accumulation_steps=2: no: use X"),
    ]
    for change, error, pattern in cases:
        with pytest.raises(error, match=pattern):
            plan_fit(**(base | change))
    assert not (tmp_path / "f").exists()  # checked, not created


def test_accumulation_groups_an_epoch_into_updates_and_is_part_of_the_settings():
    x, y = _data(100)
    # 100 rows in batches of 8: 12 whole batches (4 rows left out); k=5 makes updates of 5, 5 and 2 batches.
    plan = plan_fit(replicas=2, x=x, y=y, batch_size=8, epochs=1, whole_batches=True, accumulation_steps=5)
    assert (plan.steps_per_epoch, plan.accumulation_steps, plan.updates_per_epoch) == (12, 5, 3)
    assert plan.settings["accumulation_steps"] == 5
    one = plan_fit(replicas=2, x=x, y=y, batch_size=8, epochs=1, whole_batches=True)
    assert (one.accumulation_steps, one.updates_per_epoch) == (1, 12)
    # An engine that cannot accumulate still takes the default.
    assert plan_fit(replicas=1, x=x, y=y, batch_size=8, epochs=1, whole_batches=False,
                    accumulation_refused="no").updates_per_epoch == 13  # fmt: skip
