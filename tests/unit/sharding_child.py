"""The child program of test_sharding.py: mgtutor.sharding on 4 JAX devices, in a fresh process.

    python tests/unit/sharding_child.py

JAX takes its device count once, when it starts, so the test runs here. A small MLP is trained
for 3 Adam steps under every ZeRO stage (mgtutor.stage_shardings), each against data
parallelism; its arrays are counted (bytes_per_device) against memory_formula; its compiled
step is read (compiled_memory, collectives); ZeRO-3's LayoutMap (stage_layout_map) is built
under Keras' ModelParallel; and a Megatron block in shard_map is set against one device. It
reports what it saw with `report_result`; the parent asserts.
"""

import numpy as np

from mgtutor import (
    bytes_per_device,
    bytes_sent,
    compiled_memory,
    memory_formula,
    report_result,
    setup_devices,
    stage_layout_map,
    stage_shardings,
)

N = 4
setup_devices(N, backend="jax", verbose=False)
import jax  # noqa: E402
import keras  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec  # noqa: E402

mesh = jax.sharding.Mesh(jax.devices(), ("batch",))
split_batch = NamedSharding(mesh, PartitionSpec("batch"))
rng = np.random.default_rng(0)
x = rng.standard_normal((3, 32, 48)).astype("float32")  # 3 batches of 32 examples
y = np.eye(10, dtype="float32")[rng.integers(0, 10, (3, 32))]


def mlp() -> keras.Model:
    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((48,)), keras.layers.Dense(64, activation="gelu", name="hidden"),
                             keras.layers.Dense(10, name="logits")], name="mlp")  # fmt: skip


model = mlp()
optimizer = keras.optimizers.Adam(1e-2)
optimizer.build(model.trainable_variables)
start_weights = [np.asarray(v.value) for v in model.trainable_variables]
start_slots = [np.asarray(v.value) for v in optimizer.variables]
shapes = {"weights": [w.shape for w in start_weights], "gradients": [w.shape for w in start_weights],
          "optimizer": [s.shape for s in start_slots]}  # fmt: skip


def loss(weights, xb, yb):
    logits, _ = model.stateless_call(weights, [], xb, training=True)
    return keras.ops.mean(keras.losses.categorical_crossentropy(yb, logits, from_logits=True))


def train(stage: str) -> dict:
    weights_at, grads_at, slots_at = (stage_shardings(stage, arrays, part, mesh) for arrays, part in
                                      ((start_weights, "weights"), (start_weights, "gradients"),
                                       (start_slots, "optimizer")))  # fmt: skip

    def step(weights, slots, xb, yb):
        value, grads = jax.value_and_grad(loss)(weights, xb, yb)
        grads = jax.lax.with_sharding_constraint(grads, grads_at)
        weights, slots = optimizer.stateless_apply(slots, grads, weights)
        return value, weights, slots, grads

    jitted = jax.jit(step, out_shardings=(None, weights_at, slots_at, grads_at), donate_argnums=(0, 1))
    weights, slots = jax.device_put(start_weights, weights_at), jax.device_put(start_slots, slots_at)
    batches = [jax.device_put((x[i], y[i]), split_batch) for i in range(3)]
    compiled = jitted.lower(weights, slots, *batches[0]).compile()
    for xb, yb in batches:
        _, weights, slots, grads = compiled(weights, slots, xb, yb)
    memory = compiled_memory(compiled)
    return {"after": [np.asarray(w) for w in weights], "formula": memory_formula(stage, shapes, N),
            "measured": {"weights": bytes_per_device(weights), "gradients": bytes_per_device(grads),
                         "optimizer": bytes_per_device(slots)},
            "arguments": memory.arguments, "peak": memory.peak, "moved": bytes_sent(compiled)}


results = {stage: train(stage) for stage in ("DP", "ZeRO-1", "ZeRO-2", "ZeRO-3", "FSDP")}
reference = results["DP"]["after"]


def largest_difference(these: list, those: list) -> float:
    return max(float(np.abs(a - b).max()) for a, b in zip(these, those, strict=True))


stages = {stage: {"vs_dp": largest_difference(r.pop("after"), reference), **r}
          for stage, r in results.items()}  # fmt: skip
moved = largest_difference(reference, start_weights)

# ZeRO-3 through Keras' own API: the package's LayoutMap under ModelParallel, and the layouts it gave.
device_mesh = keras.distribution.DeviceMesh((N,), ["batch"], jax.devices())
layout_map = stage_layout_map("ZeRO-3", model.trainable_variables, device_mesh)
with keras.distribution.ModelParallel(layout_map=layout_map, batch_dim_name="batch").scope():
    sharded = mlp()
    sharded_optimizer = keras.optimizers.Adam(1e-2)
    sharded_optimizer.build(sharded.trainable_variables)
zero3_at = stage_shardings("ZeRO-3", start_weights, "weights", mesh)
as_jax = all(v.value.sharding.is_equivalent_to(s, len(v.shape))
             for v, s in zip(sharded.trainable_variables, zero3_at, strict=True))  # fmt: skip
layout_bytes = {"weights": bytes_per_device([v.value for v in sharded.trainable_variables]),
                "optimizer": bytes_per_device([v.value for v in sharded_optimizer.variables])}
refusals = []
for stage in ("ZeRO-1", "ZeRO-2"):
    try:
        stage_layout_map(stage, model.trainable_variables, device_mesh)
    except ValueError as err:
        refusals.append(str(err))

# Megatron's block: columns of w1, rows of w2, one psum; against one device.
w1, b1 = start_weights[0], start_weights[1]
w2 = rng.standard_normal((64, 48)).astype("float32") / 8
model_mesh = jax.sharding.Mesh(jax.devices(), ("model",))


def block(xb, w1, b1, w2):
    return jax.lax.psum(keras.activations.gelu(xb @ w1 + b1) @ w2, "model")


P = PartitionSpec
specs = (P(), P(None, "model"), P("model"), P("model", None))
split_block = jax.jit(jax.shard_map(block, mesh=model_mesh, in_specs=specs, out_specs=P()))
one = np.asarray(keras.activations.gelu(x[0] @ w1 + b1) @ w2)
megatron = float(np.abs(np.asarray(split_block(x[0], w1, b1, w2)) - one).max())
block_moved = bytes_sent(split_block.lower(x[0], w1, b1, w2).compile())

report_result({"stages": stages, "moved": moved, "layout_map_as_jax": as_jax,
               "layout_map_bytes": layout_bytes, "refusals": refusals, "megatron": megatron,
               "megatron_largest": float(np.abs(one).max()), "megatron_moved": block_moved,
               "devices": len(jax.devices())})  # fmt: skip
