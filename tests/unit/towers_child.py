"""The child process of test_bench.py: measure_training with the towers strategy on 2 devices.

    python tests/unit/towers_child.py

One LeNet run per augmented pipeline (flow, tf.data, layers); it prints the
list of the three runs' measurements as JSON, the last line of stdout; the
parent asserts.
"""

import json

from mgtutor.throughput import measure_training

runs = [
    measure_training(2, model="lenet", pipeline=pipeline, strategy="towers", batch_size_per_replica=8,
                     steps=2, warmup_steps=1, samples=64, seed=0)
    for pipeline in ("flow", "tf.data", "layers")
]
print(json.dumps(runs))
