"""The child process of test_accumulation.py: Trainer(accumulation_steps=k) on 2 simulated devices.

    python tests/unit/training/accumulation_child.py

Accumulation on 2 replicas against one batch of k·B on the same replicas, against one device, and
against the update written by hand; each run's gradient all-reduces counted per replica as they run.
It reports its measurements with `report_result`; the parent asserts.
"""

import contextlib

import mgtutor

mgtutor.setup_devices(2, verbose=False)
import keras  # noqa: E402

from mgtutor.data_parallel import copy_model, max_weight_difference, mirrored_strategy  # noqa: E402
from mgtutor.support.processes import report_result  # noqa: E402
from mgtutor.training.trainer import Trainer  # noqa: E402
from tests.unit.training import accumulation_cases as cases  # noqa: E402

strategy = mirrored_strategy()
base = cases.model()


def fit(k: int, batch: int, under=strategy) -> tuple:
    """The copy of `base` trained 2 epochs with accumulation_steps=k; its iterations and all-reduces."""
    net = copy_model(base, strategy=under)
    with under.scope() if under is not None else contextlib.nullcontext():
        optimizer = keras.optimizers.SGD(0.1, momentum=0.9)
    trainer = Trainer(net, optimizer, "categorical_crossentropy", ["accuracy"], strategy=under)
    calls = cases.count_all_reduces(trainer.strategy, optimizer)
    x, y = cases.data()
    trainer.fit(x, y, batch_size=batch, epochs=2, seed=3, verbose=0, accumulation_steps=k)
    return net, int(optimizer.iterations.numpy()), cases.per_replica(trainer.strategy, calls)


accumulated, iterations, calls = fit(4, 8)  # 12 batches of 8 (4 per replica) per epoch: 3 updates
large, _, _ = fit(1, 32)  # 3 batches of 32 (16 per replica): the same rows in the same order
one_device, _, _ = fit(4, 8, under=None)
_, _, calls_without = fit(1, 8)
short, _, short_calls = fit(5, 8)  # updates of 5, 5 and 2 batches
by_hand = copy_model(base)
cases.by_hand(by_hand, 8, 5, 2)
report_result({
    "replicas": strategy.num_replicas_in_sync,
    "vs_large_batch": max_weight_difference(accumulated, large),
    "vs_one_device": max_weight_difference(accumulated, one_device),
    "iterations": iterations, "calls": calls, "calls_without": calls_without,
    "short_calls": short_calls, "vs_by_hand": max_weight_difference(short, by_hand),
})  # fmt: skip
