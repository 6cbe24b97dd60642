"""The child program of test_checkpoints.py: a metric's per-replica sums saved and restored on 2 devices.

    python tests/unit/training/metric_parts_child.py FOLDER

Replica 0 adds A0 then A1 to a Mean, replica 1 adds B0 then B1. A run "killed" after the first
values saves its state; a fresh metric restores it (each replica's own part, and the naive way: the
total assigned across replicas), adds the second values, and reports all three means.
"""

import sys
from pathlib import Path

from mgtutor import setup_devices
from mgtutor.support.processes import report_result

setup_devices(2, verbose=False)

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from mgtutor.training import checkpoints  # noqa: E402

# float32 values where (A0 + A1) + (B0 + B1) differs from ((A0 + B0) / 2 + A1) + ((A0 + B0) / 2 + B1)
# in the last bit (IEEE float32 round-to-nearest, the same on every machine).
FIRST = [1.9108851, 0.80936015]
SECOND = [0.12292057, 0.049582906]

folder = Path(sys.argv[1])
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])


def new_mean() -> keras.metrics.Mean:
    with strategy.scope():
        return keras.metrics.Mean(name="loss")


@tf.function
def add(metric: keras.metrics.Mean, values: tf.Tensor) -> None:
    def own(values: tf.Tensor) -> None:
        metric.update_state(tf.gather(values, tf.distribute.get_replica_context().replica_id_in_sync_group))

    strategy.run(own, args=(values,))


def step(metric: keras.metrics.Mean, values: list[float]) -> None:
    add(metric, tf.constant(values, tf.float32))


uninterrupted = new_mean()
step(uninterrupted, FIRST)
groups = {"metrics": uninterrupted.variables,
          "metric_replicas": checkpoints.replica_parts(strategy, uninterrupted.variables)}  # fmt: skip
checkpoints.write_state(folder, checkpoints.new_state({}), groups)
step(uninterrupted, SECOND)

_, values = checkpoints.read_state(folder)
parts_shape = list(values["metric_replicas"][0].shape)
results = {"uninterrupted": float(uninterrupted.result()), "parts_shape": parts_shape}
for name, parts in (("own parts", values["metric_replicas"]), ("total split evenly", None)):
    restored = new_mean()
    assert checkpoints.restore_metrics(restored.variables, values["metrics"], parts, folder, strategy)
    step(restored, SECOND)
    results[name] = float(restored.result())
results["saved parts"] = [float(v) for v in np.ravel(values["metric_replicas"][0])]
report_result(results)
