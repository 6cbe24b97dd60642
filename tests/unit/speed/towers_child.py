"""The child process of the towers tests on 2 devices: speed/test_study.py and keras2/test_fit_generator.py.

    python tests/unit/speed/towers_child.py

"pipelines": one `measure_training` run of LeNet with the towers strategy per
augmented pipeline (flow, tf.data, layers). "fit_generator": the towers model's
Keras 2 ``fit_generator`` (and `fit_generator` under a MirroredStrategy) fed
from an ImageDataGenerator stream of 103 examples in batches of 16, the batches
trained in each of 3 epochs. It reports both with `report_result`; the parents assert.
"""

from mgtutor.devices import setup_devices

setup_devices(2, verbose=False)

import keras  # noqa: E402
import numpy as np  # noqa: E402

from mgtutor.data_parallel import mirrored_strategy  # noqa: E402
from mgtutor.keras2.augment import ImageDataGenerator  # noqa: E402
from mgtutor.keras2.fit_generator import fit_generator  # noqa: E402
from mgtutor.keras2.towers import multi_gpu_model  # noqa: E402
from mgtutor.progress import Throughput  # noqa: E402
from mgtutor.speed.measure import measure_training  # noqa: E402
from mgtutor.support.processes import report_result  # noqa: E402

runs = [
    measure_training(2, model="lenet", pipeline=pipeline, strategy="towers", batch_size_per_replica=8,
                     steps=2, warmup_steps=1, samples=64, seed=0).as_dict()
    for pipeline in ("flow", "tf.data", "layers")
]  # fmt: skip

N, BATCH = 103, 16
x = np.broadcast_to(np.arange(N, dtype=np.float32)[:, None, None, None], (N, 2, 2, 1)).copy()
y = (np.arange(N) % 2).astype(np.float32)
keras.utils.set_random_seed(0)
template = keras.Sequential([keras.Input((2, 2, 1)), keras.layers.Flatten(), keras.layers.Dense(1)])
towers = multi_gpu_model(template, 2)
towers.compile(optimizer="sgd", loss="mse")
trained = {}
for steps in (5, 7, 9):
    meter = Throughput(BATCH, verbose=False)
    flow = ImageDataGenerator().flow(x, y, batch_size=BATCH, seed=0)
    towers.fit_generator(flow, steps_per_epoch=steps, epochs=3, verbose=0, callbacks=[meter])
    trained[str(steps)] = [e["steps"] for e in meter.epochs]
trained["towers"] = list(towers.tower_devices)

# Under a strategy Keras reads a batch to build the model before training: the
# stream must still start at the first pass.
with mirrored_strategy().scope():
    mirrored = keras.Sequential([keras.Input((2, 2, 1)), keras.layers.Flatten(), keras.layers.Dense(1)])
    mirrored.compile(optimizer="sgd", loss="mse")
meter = Throughput(BATCH, verbose=False)
flow = ImageDataGenerator().flow(x, y, batch_size=BATCH, seed=0)
fit_generator(mirrored, flow, steps_per_epoch=9, epochs=3, verbose=0, callbacks=[meter])
trained["mirrored"] = [e["steps"] for e in meter.epochs]
report_result({"pipelines": runs, "fit_generator": trained})
