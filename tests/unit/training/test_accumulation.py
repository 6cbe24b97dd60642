"""Trainer.fit(accumulation_steps=k): one update and one all-reduce per k batches, the exact mean, resumable.

One device in this process (the default strategy); 2 logical devices in a child process
(`accumulation_child.py`); 2 workers under MultiWorkerMirroredStrategy in test_cluster.py.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from mgtutor.data_parallel import copy_model, max_weight_difference
from mgtutor.training.accumulation import group_sizes
from mgtutor.training.checkpoints import resume_point
from mgtutor.training.trainer import Trainer
from mgtutor.training.worker import weights_digest
from tests.conftest import ROOT, run_child
from tests.unit.training import accumulation_cases as cases

# k batches of B against one batch of k·B: the same gradients summed in another order, float32 rounding
# only. Measured: 3.0e-8 on 1 device (also against the update by hand); on 2 replicas 1.5e-8 against the
# large batch and against 1 device, 3.0e-8 against the update by hand. The margin is for other CPUs.
PARITY_TOLERANCE = 1e-6


def _fit(model: keras.Model, k: int | None, batch: int, epochs: int = 2, **kwargs) -> tuple:
    optimizer = keras.optimizers.SGD(0.1, momentum=0.9)
    trainer = Trainer(model, optimizer, "categorical_crossentropy", ["accuracy"])
    calls = cases.count_all_reduces(trainer.strategy, optimizer)
    x, y = cases.data()
    extra = {} if k is None else {"accumulation_steps": k}
    history = trainer.fit(x, y, batch_size=batch, epochs=epochs, seed=3, verbose=0, **extra, **kwargs)
    return history, int(optimizer.iterations.numpy()), cases.per_replica(trainer.strategy, calls)


def test_group_sizes_end_with_what_is_left():
    assert group_sizes(12, 4) == [4, 4, 4]
    assert group_sizes(12, 5) == [5, 5, 2]
    assert group_sizes(3, 8) == [3]
    assert group_sizes(6, 1) == [1] * 6


def test_k_1_is_the_step_without_accumulation_bit_for_bit():
    base = cases.model()
    default, explicit = copy_model(base), copy_model(base)
    first, iterations, calls = _fit(default, None, 16)
    second, _, _ = _fit(explicit, 1, 16)
    assert weights_digest(default) == weights_digest(explicit)
    assert first.history == second.history
    assert iterations == 12 and calls == [12]  # 6 batches of 16 per epoch, one all-reduce each


def test_k_batches_of_b_equal_one_batch_of_k_b_with_one_all_reduce_per_update():
    base = cases.model()
    accumulated, large = copy_model(base), copy_model(base)
    history, iterations, calls = _fit(accumulated, 4, 8)  # 12 batches of 8 per epoch: 3 updates of 4
    reference, large_iterations, _ = _fit(large, 1, 32)  # 3 batches of 32: the same 96 rows, same order
    assert max_weight_difference(accumulated, large) <= PARITY_TOLERANCE
    assert iterations == large_iterations == 2 * 3
    assert calls == [2 * 3]  # = epochs x ceil(12 / 4), not one per batch (24)
    assert history.params["steps"] == 3 and history.steps_trained == 6
    # The logs average every example of the epoch, as the large batch's do.
    for key, values in reference.history.items():
        np.testing.assert_allclose(history.history[key], values, rtol=0, atol=1e-6, err_msg=key)


def test_a_short_last_group_applies_the_exact_mean_of_its_examples():
    base = cases.model()
    accumulated, reference = copy_model(base), copy_model(base)
    # 100 rows, batches of 8: 12 batches per epoch (4 rows left out), k=5: updates of 5, 5 and 2 batches.
    history, iterations, calls = _fit(accumulated, 5, 8)
    assert cases.by_hand(reference, 8, 5, 2) == iterations == 2 * 3 and calls == [6]
    assert max_weight_difference(accumulated, reference) <= PARITY_TOLERANCE
    assert history.params["steps"] == 3


def _resumable(folder, tripwire: int | None = None, k: int = 2) -> tuple:
    net = cases.model(dropout=0.5, tripwire=tripwire)  # dropout: its generator state is checkpointed too
    trainer = Trainer(net, keras.optimizers.RMSprop(1e-3), "categorical_crossentropy", ["accuracy"])
    x, y = cases.data()
    history = trainer.fit(
        x, y, batch_size=16, epochs=2, seed=7, verbose=0, checkpoint_dir=folder, checkpoint_every_steps=2,
        accumulation_steps=k,
    )  # fmt: skip
    return net, history


# 6 batches of 16 per epoch, k=2: 3 updates per epoch, checkpoints every 2 updates and at epoch ends:
# after batch 4 of epoch 1, at its end, after batch 2 of epoch 2. Batch 6 and batch 10 (the 4th of
# epoch 2) are each the 2nd of a group: the kill falls after its first batch was added up.
@pytest.mark.parametrize(("kill_at", "saved"), [(6, (0, 4)), (10, (1, 2))])
def test_a_run_killed_mid_group_resumes_to_the_uninterrupted_weights(tmp_path, kill_at, saved):
    uninterrupted, full = _resumable(tmp_path / "full")
    with pytest.raises(tf.errors.OpError, match=f"simulated kill at batch {kill_at}"):
        _resumable(tmp_path / "killed", tripwire=kill_at)
    assert resume_point(tmp_path / "killed") == saved

    with pytest.raises(ValueError, match="accumulation_steps: checkpoint 2, now 3"):
        _resumable(tmp_path / "killed", k=3)  # another k is another run
    resumed, history = _resumable(tmp_path / "killed")

    assert history.resumed_from == saved
    assert history.steps_trained == 6 - (saved[0] * 3 + saved[1] // 2)
    assert weights_digest(resumed) == weights_digest(uninterrupted)  # measured: bit-identical
    for key, values in full.history.items():
        np.testing.assert_allclose(history.history[key], values, rtol=0, atol=1e-6, err_msg=key)


def test_bad_accumulation_steps_are_refused_before_any_work(tmp_path):
    net = cases.model()
    before = weights_digest(net)
    trainer = Trainer(net, keras.optimizers.SGD(0.1), "categorical_crossentropy")
    x, y = cases.data()
    for bad in (0, -1, 2.5, True, "4"):
        with pytest.raises(ValueError, match=r"accumulation_steps must be a whole number >= 1.*steps=4"):
            trainer.fit(x, y, batch_size=8, accumulation_steps=bad, checkpoint_dir=tmp_path / "r", verbose=0)
    assert weights_digest(net) == before and not (tmp_path / "r").exists()


ACCUMULATION_CHILD = ROOT / "tests" / "unit" / "training" / "accumulation_child.py"


@pytest.mark.slow
def test_two_replicas_accumulate_locally_and_all_reduce_once_per_update():
    out = run_child(ACCUMULATION_CHILD, timeout=300)
    assert out["replicas"] == 2
    # 2 replicas x 4 batches of 8 against one batch of 32 split over the same 2 replicas.
    assert out["vs_large_batch"] <= PARITY_TOLERANCE
    assert out["vs_one_device"] <= PARITY_TOLERANCE
    # 12 batches of 8 per epoch, k=4, 2 epochs: each replica took part in 2 x 3 all-reduces, not 24.
    assert out["calls"] == [6, 6] and out["iterations"] == 6
    assert out["calls_without"] == [24, 24]
    # k=5: updates of 5, 5, 2 batches; the last one the exact mean of its 16 examples (by hand, 1 device).
    assert out["short_calls"] == [6, 6] and out["vs_by_hand"] <= PARITY_TOLERANCE
