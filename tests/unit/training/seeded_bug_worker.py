"""A worker script with a seeded bug, as users write one: lesson 10's worker, then the chief alone evaluates.

    python -m mgtutor doctor tests/unit/training/seeded_bug_worker.py   # names its `if trainer.is_chief:`

`evaluate` sums its metrics over every worker (a collective), so the chief waits for workers that
never come: test_doctor runs `doctor` on this file, as a user would.
"""

from __future__ import annotations

import keras
import numpy as np

from mgtutor import Trainer, multi_worker_strategy, report_result, weights_digest

strategy = multi_worker_strategy()  # first: TF configures its collectives only at start-up
rng = np.random.default_rng(0)
x = rng.random((128, 8, 8, 3), dtype=np.float32)
y = np.eye(4, dtype=np.float32)[rng.integers(0, 4, 128)]
with strategy.scope():
    model = keras.Sequential(
        [keras.Input((8, 8, 3)), keras.layers.Conv2D(4, 3, activation="relu"), keras.layers.Flatten(),
         keras.layers.Dense(4, activation="softmax")]
    )  # fmt: skip
    optimizer = keras.optimizers.SGD(0.05)
trainer = Trainer(model, optimizer, "categorical_crossentropy", ["accuracy"], strategy=strategy)
trainer.fit(x, y, batch_size=32, epochs=1, verbose=2)
if trainer.is_chief:  # the seeded bug: only the chief evaluates
    print("test accuracy:", trainer.evaluate(x[:64], y[:64], batch_size=32)["accuracy"])
report_result({"digest": weights_digest(model)})
