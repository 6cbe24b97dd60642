"""The child process of test_trainer.py: Trainer under MirroredStrategy on 2 simulated devices.

    python tests/unit/training/trainer_mirrored_child.py

Trainer against Keras fit and against one device, and the errors that need a
strategy. It reports its measurements with `report_result`; the parent asserts.
"""

import json
import os

import numpy as np

import mgtutor

mgtutor.setup_devices(2, verbose=False)
import keras  # noqa: E402

from mgtutor.data_parallel import copy_model, max_weight_difference, mirrored_strategy  # noqa: E402
from mgtutor.support.processes import report_result  # noqa: E402
from mgtutor.training.trainer import Trainer  # noqa: E402
from mgtutor.training.worker import multi_worker_strategy  # noqa: E402

rng = np.random.default_rng(0)
x = rng.random((96, 8, 8, 3), dtype=np.float32)
y = np.eye(4, dtype=np.float32)[rng.integers(0, 4, 96)]
x_val, y_val = x[:37], y[:37]
keras.utils.set_random_seed(1)
base = keras.Sequential([
    keras.Input((8, 8, 3)), keras.layers.Conv2D(4, 3, activation="relu"), keras.layers.Flatten(),
    keras.layers.Dense(4, activation="softmax", kernel_regularizer=keras.regularizers.L2(1e-3)),
])
strategy = mirrored_strategy()
ours, fitted = copy_model(base, strategy=strategy), copy_model(base, strategy=strategy)
single = copy_model(base)
with strategy.scope():
    fitted.compile(optimizer=keras.optimizers.SGD(0.1), loss="categorical_crossentropy", metrics=["accuracy"])
    optimizer = keras.optimizers.SGD(0.1)
run = dict(batch_size=16, epochs=2, shuffle=False, validation_data=(x_val, y_val), verbose=0)
expected = fitted.fit(x, y, **run).history
trainer = Trainer(ours, optimizer, "categorical_crossentropy", ["accuracy"], strategy=strategy)
history = trainer.fit(x, y, **run).history
one_device = Trainer(single, keras.optimizers.SGD(0.1), "categorical_crossentropy", ["accuracy"])
one_device_history = one_device.fit(x, y, **run).history

errors = {}
try:
    trainer.fit(x, y, batch_size=15, verbose=0)
except ValueError as err:
    errors["batch"] = str(err)
try:
    Trainer(copy_model(base), keras.optimizers.SGD(0.1), "mse", strategy=strategy)
except ValueError as err:
    errors["scope"] = str(err)
os.environ["TF_CONFIG"] = json.dumps(
    {"cluster": {"worker": ["localhost:1", "localhost:2"]}, "task": {"type": "worker", "index": 0}}
)
try:
    multi_worker_strategy()  # too late: TF has started in this process
except RuntimeError as err:
    errors["late"] = str(err)
report_result({
    "replicas": trainer.num_replicas,
    "vs_fit": max_weight_difference(ours, fitted),
    "vs_one_device": max_weight_difference(ours, single),
    "history": history, "expected": expected, "one_device": one_device_history,
    "errors": errors,
})
