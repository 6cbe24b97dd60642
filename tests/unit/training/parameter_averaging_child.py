"""The child process of test_parameter_averaging.py: ParallelWrapper on 2 simulated devices.

    python tests/unit/training/parameter_averaging_child.py

TensorFlow fixes its devices once per process, so everything that needs two
devices runs here: argument errors before any TensorFlow work, parity with
synchronous training, the averaging schedule and log, optimizer-state
averaging, the data forms, LeNet on real MNIST (if the data is there). It
reports its measurements with `report_result`; the parent asserts.
"""

import os
import tempfile
import warnings

import mgtutor.training.parameter_averaging as avg
from mgtutor.devices import setup_devices

# Argument errors come before any TensorFlow work: setup_devices(2) would refuse to run
# after a started runtime.
early = []
for kwargs in ({"workers": 0}, {"averaging_frequency": 0}, {"prefetch_buffer": 0}):
    try:
        avg.ParallelWrapper(None, **kwargs)
    except ValueError as err:
        early.append(str(err))
setup_devices(2, verbose=False)

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from mgtutor import ImageDataGenerator  # noqa: E402
from mgtutor.data import DataNotFoundError, load_mnist  # noqa: E402
from mgtutor.data_parallel import copy_model, max_weight_difference  # noqa: E402
from mgtutor.models import build_lenet  # noqa: E402
from mgtutor.support.processes import report_result  # noqa: E402

out = {"early": early}
rng = np.random.default_rng(0)
x = rng.random((64, 6, 6, 1), dtype=np.float32)
y = np.eye(3, dtype=np.float32)[rng.integers(0, 3, 64)]


def net(batch_norm=False):
    keras.utils.set_random_seed(0)
    layers = [keras.Input((6, 6, 1)), keras.layers.Conv2D(4, 3, activation="relu")]
    layers += [keras.layers.BatchNormalization()] if batch_norm else []
    return keras.Sequential(layers + [keras.layers.Flatten(), keras.layers.Dense(3, activation="softmax")])


def compiled(model, optimizer):
    model.compile(optimizer=optimizer, loss="categorical_crossentropy", metrics=["accuracy"],
                  jit_compile=False)
    return model


def float_spread(groups):
    worst = 0.0
    for group in groups:
        values = np.stack([np.asarray(v, np.float64) for v in group])
        if values.size and np.issubdtype(values.dtype, np.floating):
            worst = max(worst, float(np.max(values.max(0) - values.min(0))))
    return worst


# 1 and 3: frequency 1 equals synchronous training on the concatenated batches.
for name, make_optimizer in (
    ("sgd", lambda: keras.optimizers.SGD(0.5)),
    ("nesterov", lambda: keras.optimizers.SGD(0.1, momentum=0.9, nesterov=True)),
):
    model = compiled(net(), make_optimizer())
    reference = compiled(copy_model(model), make_optimizer())
    initial = model.get_weights()
    wrapper = avg.ParallelWrapper(model, workers=2, averaging_frequency=1)
    history = wrapper.fit((x, y), batch_size=8, shuffle=False, verbose=0)
    # Worker 0 gets rows start..+8, worker 1 the next 8. train_on_batch resets the metrics:
    # each logs one batch of 16, and the 4 batches weigh the same.
    logs = [reference.train_on_batch(x[start:start + 16], y[start:start + 16], return_dict=True)
            for start in range(0, 64, 16)]
    pairs = zip(model.optimizer.variables, reference.optimizer.variables, strict=True)
    out[name] = {
        "weights": max_weight_difference(model, reference),
        "update": max(float(np.abs(a - b).max()) for a, b in zip(initial, model.get_weights(), strict=True)),
        "optimizer_state": float_spread([(a.numpy(), b.numpy()) for a, b in pairs]),
        "iterations": [int(model.optimizer.iterations.numpy()), int(reference.optimizer.iterations.numpy())],
        "loss": [history.history["loss"][0], float(np.mean([step["loss"] for step in logs]))],
        "accuracy": [history.history["accuracy"][0], float(np.mean([step["accuracy"] for step in logs]))],
        "steps": wrapper.steps, "syncs": wrapper.synchronizations,
        "devices": [w.weights[0].value.device for w in wrapper.worker_models],
    }

# 2: frequency 3 with BatchNormalization, validation and TensorBoard.
model = compiled(net(batch_norm=True), keras.optimizers.SGD(0.1))
initial = model.get_weights()
wrapper = avg.ParallelWrapper(model, workers=2, averaging_frequency=3)
before, after = [], []
synchronize = wrapper._synchronize


def watched(window, writer):
    before.append(avg.replica_spread(wrapper.worker_models))
    synchronize(window, writer)
    after.append(avg.replica_spread(wrapper.worker_models))


wrapper._synchronize = watched
log_dir = tempfile.mkdtemp()
history = wrapper.fit((x[:56], y[:56]), batch_size=4, shuffle=False, verbose=0,
                      validation_data=(x[56:], y[56:]), log_dir=log_dir)  # 14 batches: 7 rounds
events = {}
for root, _, files in os.walk(log_dir):
    for file in files:
        for event in tf.compat.v1.train.summary_iterator(os.path.join(root, file)):
            for value in event.summary.value:
                events.setdefault(value.tag, []).append([event.step, float(tf.make_ndarray(value.tensor))])
moving_mean = [i for i, w in enumerate(model.weights) if "moving_mean" in w.path][0]
out["freq3"] = {
    "log": wrapper.averaging_log, "before": before, "after": after,
    "steps": wrapper.steps, "syncs": wrapper.synchronizations,
    "final_spread": avg.replica_spread(wrapper.worker_models),
    "model_vs_worker": max_weight_difference(model, wrapper.worker_models[1]),
    "moving_mean_change": float(np.abs(model.get_weights()[moving_mean] - initial[moving_mean]).max()),
    "history": history.history,
    "evaluate": model.evaluate(x[56:], y[56:], verbose=0, return_dict=True),
    "events": events,
}

# 3b: averaging the optimizer state or not (Adam's moments are per worker without it).
for flag in (True, False):
    model = compiled(net(), keras.optimizers.Adam(0.01))
    wrapper = avg.ParallelWrapper(model, workers=2, averaging_frequency=2, average_optimizer_state=flag)
    wrapper.fit((x, y), batch_size=8, shuffle=False, verbose=0)
    out[f"adam_{flag}"] = {
        "optimizer_spread": float_spread(
            zip(*(w.optimizer.variables for w in wrapper.worker_models), strict=True)
        ),
        "weight_spread": avg.replica_spread(wrapper.worker_models),
    }

# Data forms: the same 8 batches as arrays, a list, a generator, tf.data and a PyDataset.
batches = [(x[i:i + 8], y[i:i + 8]) for i in range(0, 64, 8)]
forms = {
    "list": lambda: batches,
    "generator": lambda: (b for b in batches),
    "tf.data": lambda: tf.data.Dataset.from_tensor_slices((x, y)).batch(8),
    "PyDataset": lambda: ImageDataGenerator().flow(x, y, batch_size=8, shuffle=False),
}
base = compiled(net(), keras.optimizers.SGD(0.5))
avg.ParallelWrapper(base, averaging_frequency=2).fit((x, y), batch_size=8, shuffle=False, verbose=0)
out["forms"] = {}
for name, make in forms.items():
    model = compiled(net(), keras.optimizers.SGD(0.5))
    avg.ParallelWrapper(model, averaging_frequency=2).fit(make(), verbose=0)
    out["forms"][name] = max_weight_difference(model, base)
# A trailing partial round (5 batches, 2 workers) is left out, with a warning.
model = compiled(net(), keras.optimizers.SGD(0.5))
wrapper = avg.ParallelWrapper(model, workers=2, averaging_frequency=2)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    wrapper.fit(batches[:5], verbose=0)
out["partial"] = {"steps": wrapper.steps, "warnings": [str(w.message) for w in caught]}
for name, call in (
    ("too_many_workers", lambda: avg.ParallelWrapper(model, workers=3)),
    ("steps_not_multiple", lambda: wrapper.fit(batches, steps_per_epoch=3)),
    ("too_few_batches", lambda: wrapper.fit(batches[:1])),
):
    try:
        call()
        out[name] = None
    except ValueError as err:
        out[name] = str(err)

# 4: the seed's LeNet on real MNIST, 2 workers averaging every 3 rounds.
try:
    mnist = load_mnist(allow_download=False)
except DataNotFoundError:
    report_result(out)
    raise SystemExit(0) from None
(x_train, y_train), (x_test, y_test) = mnist.subset(1536, 1000).prepared()
lenet = build_lenet(seed=0)
compiled(lenet, keras.optimizers.SGD(0.05, momentum=0.9, nesterov=True))
wrapper = avg.ParallelWrapper(lenet, workers=2, averaging_frequency=3)
wrapper.fit((x_train, y_train), batch_size=32, seed=0, verbose=0)
out["lenet"] = {
    "accuracy": lenet.evaluate(x_test, y_test, verbose=0, return_dict=True)["accuracy"],
    "steps": wrapper.steps, "syncs": wrapper.synchronizations,
    "spread": [entry["spread"] for entry in wrapper.averaging_log],
}
report_result(out)
