"""The child process of test_data_parallel.py: the towers model against one device, on N simulated devices.

    python tests/unit/data_parallel_child.py N      # N = 2 or 4, one process each

TensorFlow fixes its devices once per process. It reports its measurements with
`report_result`; the parent asserts.
"""

import os
import sys
import tempfile
import warnings

import mgtutor.data_parallel as par
import mgtutor.keras2.towers as towers_module
from mgtutor.devices import setup_devices
from mgtutor.support.processes import report_result

N = int(sys.argv[1])
# Importing mgtutor.data_parallel must leave TF unstarted, else this raises.
setup_devices(N, verbose=False)

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

out = {"n": N, "devices": list(par.available_devices())}
rng = np.random.default_rng(0)
x = rng.random((96, 8, 8, 3), dtype=np.float32)
y = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 96)]
STEPS, BATCH = 3, 32


def cnn(batch_norm=False):
    layers = [keras.Input((8, 8, 3)), keras.layers.Conv2D(8, 3, activation="relu")]
    if batch_norm:  # and dropout: state updates and random masks inside towers and tf.cond
        layers += [keras.layers.BatchNormalization(), keras.layers.Dropout(0.2)]
    layers += [keras.layers.Flatten(), keras.layers.Dense(10, activation="softmax")]
    return keras.Sequential(layers)


def compile_sgd(model):
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="categorical_crossentropy",
                  jit_compile=False)


def biggest_change(before, model):
    return max(float(np.abs(a - b).max()) for a, b in zip(before, model.get_weights(), strict=True))


keras.utils.set_random_seed(0)
template = cnn()
initial = template.get_weights()
reference = par.copy_model(template)        # same weights, one device, no towers
towers = towers_module.multi_gpu_model(template, N)

# (d) shared weights: the wrapper's variables are the template's own objects
out["same_variables"] = [id(v) for v in towers.weights] == [id(v) for v in template.weights]
out["n_weights"] = [len(towers.weights), len(template.weights)]

# (a) forward
batch = x[:BATCH]
sizes = towers_module.split_sizes(BATCH, [1] * N)
by_slice = np.concatenate([template(s).numpy() for s in np.split(batch, np.cumsum(sizes)[:-1])])
out["forward_vs_slices"] = float(np.abs(towers(batch).numpy() - by_slice).max())
out["forward_vs_template"] = par.max_output_difference(towers, reference, x, batch_size=BATCH)

# (b) k steps of towers == k steps of the template alone
compile_sgd(towers)
compile_sgd(reference)
par.train_steps(towers, x, y, STEPS, BATCH)
par.train_steps(reference, x, y, STEPS, BATCH)
out["towers_vs_single"] = par.max_weight_difference(template, reference)
out["towers_update"] = biggest_change(initial, template)   # (d) the template itself trained

# (c) the same steps under MirroredStrategy over the N devices, from the same
# initial weights: it must land where the single-device reference did
strategy = par.mirrored_strategy()
out["replicas"] = strategy.num_replicas_in_sync
mirrored = par.copy_model(reference, strategy=strategy)
mirrored.set_weights(initial)
with strategy.scope():
    compile_sgd(mirrored)
par.train_steps(mirrored, x, y, STEPS, BATCH)
out["mirrored_vs_single"] = par.max_weight_difference(mirrored, reference)
out["mirrored_update"] = biggest_change(initial, mirrored)
try:
    par.mirrored_strategy(1)
    out["second_count_refused"] = ""
except RuntimeError as err:
    out["second_count_refused"] = str(err)

# (e) batches smaller than the towers, in eager, in a traced step with a known
# batch, and in one with an unknown batch (the dynamic tf.cond path)
small = x[:3]
out["split_of_3"] = towers_module.split_sizes(3, [1] * N)
out["small_eager"] = float(np.abs(towers(small).numpy() - template(small).numpy()).max())
dynamic = tf.function(lambda t: towers(t), input_signature=[tf.TensorSpec([None, 8, 8, 3])])
out["small_dynamic"] = float(np.abs(dynamic(small).numpy() - template(small).numpy()).max())
out["full_dynamic"] = float(np.abs(dynamic(batch).numpy() - template(batch).numpy()).max())
before = template.get_weights()
loss = towers.train_on_batch(small, y[:3])
out["small_step_loss"] = float(loss)
out["small_step_update"] = biggest_change(before, template)
# 35 = one batch of 32 and a last batch of 3 (dynamic path); BatchNormalization
# must not see an empty slice (it would write NaN into the shared moving statistics).
bn_template = cnn(batch_norm=True)
bn_towers = towers_module.multi_gpu_model(bn_template, N)
compile_sgd(bn_towers)
history = bn_towers.fit(x[:35], y[:35], batch_size=32, epochs=1, verbose=0, shuffle=False)
out["bn_loss"] = history.history["loss"][-1]
bn = bn_template.layers[1]
stats = [bn.moving_mean.numpy(), bn.moving_variance.numpy()]
out["bn_stats_finite"] = bool(all(np.isfinite(s).all() for s in stats))

if N == 2:
    uneven_template = cnn()
    uneven = towers_module.multi_gpu_model(uneven_template, [0, 1], split=[2, 1])
    out["uneven_sizes"] = towers_module.split_sizes(31, [2, 1])
    got, want = uneven(x[:31]).numpy(), uneven_template(x[:31]).numpy()
    out["uneven_predict"] = float(np.abs(got - want).max())
    compile_sgd(uneven)
    out["uneven_loss"] = float(uneven.train_on_batch(x[:31], y[:31]))

    # Multi-output template, dict losses by output name.
    inputs = keras.Input((8, 8, 3))
    flat = keras.layers.Flatten()(inputs)
    two = keras.Model(inputs, [keras.layers.Dense(10, activation="softmax", name="cls")(flat),
                               keras.layers.Dense(1, name="reg")(flat)])
    two_towers = towers_module.multi_gpu_model(two, 2)
    got, want = two_towers(x), two(x)
    out["multi_output_shapes"] = [list(g.shape) for g in got]
    out["multi_output_diff"] = max(float(np.abs(np.asarray(g) - np.asarray(w)).max())
                                   for g, w in zip(got, want, strict=True))
    two_towers.compile(optimizer="sgd", loss={"cls": "categorical_crossentropy", "reg": "mse"})
    history = two_towers.fit(x, {"cls": y, "reg": y[:, :1]}, batch_size=32, verbose=0)
    out["multi_output_loss"] = history.history["loss"][-1]

    # XLA would compile all towers for one device: jit_compile=True is turned off.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        uneven.compile(optimizer="sgd", loss="categorical_crossentropy", jit_compile=True)
    out["jit_compile"] = uneven.jit_compile
    out["jit_warning"] = any("jit_compile" in str(w.message) for w in caught)
    out["uneven_config_split"] = uneven.get_config()["split"]
    no_merge = towers_module.multi_gpu_model(uneven_template, 2, cpu_merge=False)
    out["no_merge_diff"] = float(np.abs(no_merge(batch).numpy() - uneven_template(batch).numpy()).max())

    # The Keras 2 alias, and a save/load round trip of the wrapper.
    def batches():
        while True:
            for i in range(0, 96, 32):
                yield x[i:i + 32], y[i:i + 32]
    history = towers.fit_generator(batches(), steps_per_epoch=3, epochs=2, verbose=0)
    out["alias_losses"] = history.history["loss"]
    path = os.path.join(tempfile.mkdtemp(), "towers.keras")
    towers.save(path)
    loaded = keras.saving.load_model(path)
    out["loaded_type"] = type(loaded).__name__
    out["loaded_diff"] = float(np.abs(loaded(x).numpy() - towers(x).numpy()).max())

report_result(out)
