"""Data-parallel training of a CNN from files: one process, N local workers, or a Slurm job.

A copy-and-go script in plain Keras 3: it imports no mgtutor. Two steps:

    python train.py prepare --source cifar10.npz --out data       # once: the data as .npy shards
    python train.py train --data data --out run                    # then train: 1 process
    python train.py train --data data --out run --devices 2        # 1 process, 2 devices
    srun python train.py train --data data --out run               # N workers under Slurm

The same file runs unchanged everywhere; it finds its cluster from TF_CONFIG (a local
multi-worker launcher writes it), else from Slurm's variables (SLURM_NTASKS > 1), else it is
alone. KERAS_BACKEND, or --backend, picks TensorFlow (MultiWorkerMirroredStrategy with a custom
step: Keras' fit fails under it, keras#20585) or JAX (keras.distribution.DataParallel with
jax.distributed; this route imports no TensorFlow, so it runs where only JAX is installed).

Every replica reads only its own shards, and its batch at step s is a function of the seed, s and
its number alone: so the same global batch over as many replicas trains the same weights on 1
process with 2 devices, on 2 workers or on 2 nodes (up to float32 rounding where they sum in
another order), and a job killed and restarted from its last checkpoint ends on the weights of
the job that was never killed.

What it leaves out of the series' mgtutor: the run lock (two jobs writing one folder), the
doctor (reading a hung or failed job's logs), gradient accumulation, BatchNorm statistics
averaged across replicas (here BatchNormalization is synchronized instead), mixed precision, a
private network namespace for the workers (TensorFlow's gRPC server listens on every interface,
unauthenticated: run it only on a network you trust), and the progress bars.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

# One dict of settings, as airbench's `hyp` and nanoGPT's config: each is a command-line flag.
CONFIG = {
    "data": "data",  # the folder `prepare` wrote
    "out": "run",  # checkpoints, the final model and its weights
    "backend": "",  # tensorflow or jax; "" takes KERAS_BACKEND, else tensorflow
    "model": "seed",  # seed: the Keras cifar10_cnn example; capstone: airbench's network
    "steps": 300,  # optimizer steps in all (a restarted job goes on to the same number)
    "global_batch": 64,  # images per step, over all replicas
    "lr": 0.01,
    "momentum": 0.9,
    "augment": True,  # random flips and 2-pixel crops, drawn from (seed, step, replica)
    "checkpoint_every": 50,  # steps between checkpoints
    "devices": 1,  # devices this process splits its CPU into (one process only)
    "seed": 0,
    "port": 23456,  # Slurm: the TF workers' port (JAX picks its coordinator's from the job id)
    "log_every": 50,
}

# --------------------------------------------------------------------------------- prepare


def load_source(source: str):
    """(x_train, y_train, x_test, y_test) as uint8 images and int labels, from `source`."""
    if source == "synthetic":  # a labelled stand-in: each class its own colour and stripe
        rng = np.random.default_rng(0)
        def make(n):
            y = rng.integers(0, 10, n)
            x = rng.normal(110, 30, (n, 32, 32, 3))
            x[np.arange(n), :, :, y % 3] += 60  # the class's colour
            x[np.arange(n), (y * 3) % 32] += 80  # and its row
            return np.clip(x, 0, 255).astype(np.uint8), y
        return (*make(2048), *make(512))
    if source == "keras":  # needs the internet once
        import keras
        (xa, ya), (xb, yb) = keras.datasets.cifar10.load_data()
        return xa, ya, xb, yb
    if not source.endswith((".npz", ".tar.gz", "cifar-10-batches-py")):
        raise SystemExit(f"--source {source!r}: give a .npz (keras layout), CIFAR-10's .tar.gz or its "
                         "cifar-10-batches-py folder, 'keras' (downloads) or 'synthetic'.")
    if not os.path.exists(source):
        raise SystemExit(f"--source {source}: no such file or folder.")
    if source.endswith(".npz"):  # keras.datasets' layout: x_train, y_train, x_test, y_test
        with np.load(source) as f:
            return f["x_train"], f["y_train"], f["x_test"], f["y_test"]
    import pickle  # CIFAR-10's python archive or folder
    import tarfile

    def batches(names):
        for name in names:
            if os.path.isdir(source):
                with open(os.path.join(source, name), "rb") as f:
                    yield pickle.load(f, encoding="bytes")
            else:
                with tarfile.open(source) as tar:
                    yield pickle.load(tar.extractfile(f"cifar-10-batches-py/{name}"), encoding="bytes")

    def split(names):
        parts = list(batches(names))
        x = np.concatenate([p[b"data"] for p in parts]).reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
        return x, np.concatenate([p[b"labels"] for p in parts])
    return (*split([f"data_batch_{i}" for i in range(1, 6)]), *split(["test_batch"]))


def save_atomic(path: str, array: np.ndarray) -> None:
    """Write `array` to `path` through a temporary file: a reader never sees half a file."""
    with open(path + ".tmp", "wb") as f:
        np.save(f, array)
    os.replace(path + ".tmp", path)


def prepare(source: str, out: str, shards: int) -> None:
    if shards < 1:
        raise SystemExit(f"--shards {shards}: give 1 or more (at least the number of replicas).")
    x_train, y_train, x_test, y_test = load_source(source)
    os.makedirs(out, exist_ok=True)
    index = {"shape": list(x_train.shape[1:]), "classes": int(y_train.max()) + 1,
             "mean": (x_train.mean((0, 1, 2)) / 255).tolist(), "std": (x_train.std((0, 1, 2)) / 255).tolist()}
    for split, x, y in (("train", x_train, y_train), ("test", x_test, y_test)):
        index[split] = []
        for k, part in enumerate(np.array_split(np.arange(len(x)), shards)):
            name = f"{split}-{k:05d}-of-{shards:05d}"
            save_atomic(os.path.join(out, name + ".x.npy"), np.ascontiguousarray(x[part], np.uint8))
            save_atomic(os.path.join(out, name + ".y.npy"), np.asarray(y[part], np.int32).reshape(-1))
            index[split].append({"name": name, "count": len(part)})
    with open(os.path.join(out, "index.json.tmp"), "w") as f:
        json.dump(index, f, indent=1)
    os.replace(os.path.join(out, "index.json.tmp"), os.path.join(out, "index.json"))  # last: the set is whole
    print(f"prepare: {len(x_train)} training and {len(x_test)} test images in {shards} shards each, in {out}")

# ------------------------------------------------------------------------------------ data


def replica_shards(index: dict, split: str, replica: int, replicas: int) -> list[dict]:
    """Replica r of R reads shards r, r + R, r + 2R, ... and no other."""
    return index[split][replica::replicas]


def count(index: dict, split: str, replica: int, replicas: int) -> int:
    return sum(s["count"] for s in replica_shards(index, split, replica, replicas))


def read(folder: str, shards: list[dict]):
    x = np.concatenate([np.load(os.path.join(folder, s["name"] + ".x.npy")) for s in shards])
    return x, np.concatenate([np.load(os.path.join(folder, s["name"] + ".y.npy")) for s in shards])


class Stream:
    """Replica r's batch at step s: a function of (seed, s, r), so any restart replays it exactly."""

    def __init__(self, x, y, batch, steps_per_epoch, replica, cfg, index):
        self.x, self.y, self.batch, self.steps_per_epoch, self.replica = x, y, batch, steps_per_epoch, replica
        self.seed, self.augment = cfg.seed, cfg.augment
        self.mean, self.std = np.float32(index["mean"]), np.float32(index["std"])
        self._epoch, self._order = -1, None

    def __call__(self, step: int):
        epoch, position = divmod(step, self.steps_per_epoch)
        if epoch != self._epoch:  # each epoch its own order
            self._epoch = epoch
            self._order = np.random.default_rng([self.seed, epoch, self.replica]).permutation(len(self.x))
        take = self._order[position * self.batch:(position + 1) * self.batch]
        x = self.x[take].astype(np.float32) / 255
        if self.augment:
            rng = np.random.default_rng([self.seed, step, self.replica, 1])
            x = np.where(rng.random(len(x))[:, None, None, None] < 0.5, x[:, :, ::-1], x)
            padded = np.pad(x, ((0, 0), (2, 2), (2, 2), (0, 0)), mode="reflect")
            dy, dx = rng.integers(0, 5, 2)  # one crop for the batch: cheap, and enough here
            x = padded[:, dy:dy + x.shape[1], dx:dx + x.shape[2]]
        return (x - self.mean) / self.std, self.y[take]

# ----------------------------------------------------------------------------------- model


def build_model(name: str, shape, classes: int, seed: int):
    import keras
    from keras import layers
    # Seeded initializers: every process draws the same first weights. (keras.utils.set_random_seed
    # would do it too, but it starts TensorFlow, which the JAX route must not need.)
    seeds = iter(range(1000 * seed, 1000 * seed + 1000))

    def seeded(**kwargs):
        return {**kwargs, "kernel_initializer": keras.initializers.GlorotUniform(next(seeds))}
    inputs = keras.Input(tuple(shape))
    if name == "seed":  # Keras' cifar10_cnn, the seed tutorial's model, less Dropout (masks differ by device)
        x = inputs
        for width in (32, 64):
            x = layers.Conv2D(width, 3, **seeded(padding="same", activation="relu"))(x)
            x = layers.Conv2D(width, 3, **seeded(activation="relu"))(x)
            x = layers.MaxPooling2D()(x)
        x = layers.Dense(512, **seeded(activation="relu"))(layers.Flatten()(x))
    else:  # capstone  # airbench's network with a learnt first layer; BatchNorm over all replicas
        x = layers.Conv2D(24, 2, **seeded(activation="gelu"))(inputs)
        for width in (64, 128, 128):
            for pool in (True, False):
                x = layers.Conv2D(width, 3, **seeded(padding="same", use_bias=False))(x)
                x = layers.MaxPooling2D()(x) if pool else x
                # Moments over the global batch: TensorFlow must be told; under jit JAX does it already
                # (and refuses the flag).
                synchronized = keras.backend.backend() == "tensorflow"
                x = layers.BatchNormalization(momentum=0.6, epsilon=1e-12, synchronized=synchronized)(x)
                x = layers.Activation("gelu")(x)
        x = layers.GlobalMaxPooling2D()(x)
    return keras.Model(inputs, layers.Dense(classes, **seeded())(x), name=f"{name}_cnn")  # logits


def make_optimizer(cfg):
    import keras
    return keras.optimizers.SGD(cfg.lr, momentum=cfg.momentum, nesterov=True)


def all_variables(model, optimizer) -> list:
    """What a checkpoint holds, in its order: the model's weights (trainable first), then the optimizer's."""
    return [*model.trainable_variables, *model.non_trainable_variables, *optimizer.variables]

# ---------------------------------------------------------------------------- TensorFlow


class TensorFlowRoute:
    """MultiWorkerMirroredStrategy across processes (MirroredStrategy within one), a custom step."""

    def __init__(self, cfg, index):
        import keras
        import tensorflow as tf
        self.tf = tf
        slurm = int(os.environ.get("SLURM_NTASKS", "1")) > 1
        if "TF_CONFIG" in os.environ or slurm:  # first, before TensorFlow starts its devices
            if "TF_CONFIG" in os.environ:
                resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
            else:  # with no GPU the defaults run nvidia-smi, and gpus_per_node=0 divides by zero
                gpus = len(tf.config.list_physical_devices("GPU"))
                tasks = int(os.environ.get("SLURM_NTASKS_PER_NODE", 1))
                resolver = tf.distribute.cluster_resolver.SlurmClusterResolver(
                    port_base=cfg.port, gpus_per_node=gpus or tasks, gpus_per_task=max(1, gpus // tasks),
                    auto_set_gpu=gpus > 0)
            self.strategy = tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=resolver)
            self.worker, self.workers = resolver.task_id, len(resolver.cluster_spec().as_dict()["worker"])
        else:
            if cfg.devices > 1:  # one CPU seen as several devices: they share its cores
                cpu = tf.config.list_physical_devices("CPU")[0]
                tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()]
                                                           * cfg.devices)
            gpus = [d.name for d in tf.config.list_logical_devices("GPU")]
            cpus = [d.name for d in tf.config.list_logical_devices("CPU")][:cfg.devices]
            self.strategy = tf.distribute.MirroredStrategy(gpus or cpus)
            self.worker, self.workers = 0, 1
        self.replicas = self.strategy.num_replicas_in_sync
        per_worker = self.replicas // self.workers
        self.local = list(range(self.worker * per_worker, (self.worker + 1) * per_worker))
        with self.strategy.scope():
            self.model = build_model(cfg.model, index["shape"], index["classes"], cfg.seed)
            self.optimizer = make_optimizer(cfg)
            self.optimizer.build(self.model.trainable_variables)
        self.loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
        self.global_batch = cfg.global_batch
        self._step, self._correct = tf.function(self._train_step), tf.function(self._count_correct)

    def _per_replica(self, arrays):
        """Replica r (its global number) gets arrays[r]: its own batch from its own shards."""
        by_id = dict(zip(self.local, arrays, strict=True))
        return self.strategy.experimental_distribute_values_from_function(
            lambda ctx: self.tf.constant(by_id[ctx.replica_id_in_sync_group]))

    def _train_step(self, x, y):
        tf, model = self.tf, self.model

        def step(x, y):
            with tf.GradientTape() as tape:  # each replica's sum over the GLOBAL batch: the sum of
                loss = tf.reduce_sum(self.loss(y, model(x, training=True))) / self.global_batch
            grads = tape.gradient(loss, model.trainable_variables)  # the replicas' gradients is the mean's
            self.optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))  # all-reduce
            return loss
        return self.strategy.reduce("SUM", self.strategy.run(step, (x, y)), axis=None)

    def _count_correct(self, x, y, keep):
        tf = self.tf

        def count(x, y, keep):
            guess = tf.argmax(self.model(x, training=False), -1, output_type=tf.int32)
            right = tf.cast(guess == y, tf.float32)
            return tf.stack([tf.reduce_sum(right * keep), tf.reduce_sum(keep)])
        return self.strategy.reduce("SUM", self.strategy.run(count, (x, y, keep)), axis=None)

    def step(self, batches) -> float:
        x, y = (self._per_replica([b[i] for b in batches]) for i in range(2))
        return float(self._step(x, y))

    def correct(self, batches):
        x, y, keep = ([b[i] for b in batches] for i in range(3))
        return self._correct(self._per_replica(x), self._per_replica(y), self._per_replica(keep)).numpy()

    def get(self) -> list[np.ndarray]:
        return [np.array(v.numpy()) for v in all_variables(self.model, self.optimizer)]

    def put(self, values) -> None:
        for v, value in zip(all_variables(self.model, self.optimizer), values, strict=True):
            v.assign(value)

    def sync_model(self) -> None:
        """The Keras variables are the trained ones already."""

# ----------------------------------------------------------------------------------- JAX


class JaxRoute:
    """keras.distribution.DataParallel over every process's devices; jit inserts the all-reduce."""

    def __init__(self, cfg, index):
        import jax
        import keras
        from jax.sharding import NamedSharding, PartitionSpec
        self.jax = jax
        if jax.config.jax_platforms in (None, "", "cpu"):  # CPU processes exchange through gloo
            jax.config.update("jax_cpu_collectives_implementation", "gloo")
        if "TF_CONFIG" in os.environ:  # the local launcher's description serves JAX too
            tf_config = json.loads(os.environ["TF_CONFIG"])
            workers = tf_config["cluster"]["worker"]
            jax.distributed.initialize(workers[0], len(workers), tf_config["task"]["index"])
        elif int(os.environ.get("SLURM_NTASKS", "1")) > 1:
            jax.distributed.initialize()  # JAX reads Slurm's variables itself
        self.worker, self.workers = jax.process_index(), jax.process_count()
        self.replicas = jax.device_count()
        self.local = [i for i, d in enumerate(jax.devices()) if d.process_index == self.worker]
        distribution = keras.distribution.DataParallel(devices=jax.devices())
        keras.distribution.set_distribution(distribution)
        self.model = build_model(cfg.model, index["shape"], index["classes"], cfg.seed)
        self.optimizer = make_optimizer(cfg)
        self.optimizer.build(self.model.trainable_variables)
        mesh = distribution.device_mesh.backend_mesh
        self.split = NamedSharding(mesh, PartitionSpec(distribution.batch_dim_name))
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        model, optimizer = self.model, self.optimizer

        def compute(trainable, fixed, x, y):
            logits, fixed = model.stateless_call(trainable, fixed, x, training=True)
            return loss(y, logits), fixed  # the mean over the GLOBAL batch: jit sums the replicas' parts

        def train_step(state, x, y):
            trainable, fixed, slots = state
            (value, fixed), grads = jax.value_and_grad(compute, has_aux=True)(trainable, fixed, x, y)
            trainable, slots = optimizer.stateless_apply(slots, grads, trainable)
            return value, (trainable, fixed, slots)

        def count(state, x, y, keep):
            logits, _ = model.stateless_call(state[0], state[1], x, training=False)
            right = (logits.argmax(-1) == y) * keep
            return jax.numpy.stack([right.sum(), keep.sum()])

        self._step, self._count = jax.jit(train_step, donate_argnums=0), jax.jit(count)
        self.state = self._gather_state()

    def _gather_state(self):
        return ([v.value for v in self.model.trainable_variables],
                [v.value for v in self.model.non_trainable_variables],
                [v.value for v in self.optimizer.variables])

    def _global(self, arrays):
        """One array over all processes: this process gives its replicas' parts, in replica order."""
        return self.jax.make_array_from_process_local_data(self.split, np.concatenate(arrays))

    def step(self, batches) -> float:
        x, y = self._global([b[0] for b in batches]), self._global([b[1] for b in batches])
        value, self.state = self._step(self.state, x, y)
        return float(value)

    def correct(self, batches):
        x, y, keep = (self._global([b[i] for b in batches]) for i in range(3))
        return np.asarray(self._count(self.state, x, y, keep))

    def get(self) -> list[np.ndarray]:  # replicated arrays: any local copy is the whole value
        return [np.array(a.addressable_data(0)) for part in self.state for a in part]

    def put(self, values) -> None:
        for v, value in zip(all_variables(self.model, self.optimizer), values, strict=True):
            v.assign(value)  # onto every device of every process, as the distribution lays it out
        self.state = self._gather_state()

    def sync_model(self) -> None:
        """The trained state back into the Keras variables, to save the model."""
        self.put(self.get())

# ------------------------------------------------------------------------------- training


def save_checkpoint(path: str, step: int, values) -> None:
    with open(path + ".tmp", "wb") as f:  # then renamed: a kill mid-write leaves the last one whole
        np.savez(f, step=step, **{f"v{i}": v for i, v in enumerate(values)})
    os.replace(path + ".tmp", path)


def evaluate(route, cfg, index) -> float:
    """Test accuracy, each replica on its own test shards, the counts summed over replicas."""
    per_replica = cfg.global_batch // route.replicas
    parts = {r: read(cfg.data, replica_shards(index, "test", r, route.replicas)) for r in route.local}
    longest = max(count(index, "test", r, route.replicas) for r in range(route.replicas))
    mean, std = np.float32(index["mean"]), np.float32(index["std"])
    right = total = 0
    # Every process takes as many steps (each is a collective); a replica whose images ran out pads, weight 0.
    for start in range(0, longest, per_replica):
        batches = []
        for r in route.local:
            x, y = parts[r][0][start:start + per_replica], parts[r][1][start:start + per_replica]
            keep, missing = np.ones(len(x), np.float32), per_replica - len(x)
            pad = ((0, missing),) + ((0, 0),) * (x.ndim - 1)
            x = (np.pad(x, pad).astype(np.float32) / 255 - mean) / std
            batches.append((x, np.pad(y, (0, missing)), np.pad(keep, (0, missing))))
        r_, t_ = route.correct(batches)
        right, total = right + r_, total + t_
    return right / total


def train(cfg) -> None:
    with open(os.path.join(cfg.data, "index.json")) as f:
        index = json.load(f)
    route = JaxRoute(cfg, index) if cfg.backend == "jax" else TensorFlowRoute(cfg, index)
    me = f"worker {route.worker}/{route.workers}"
    if cfg.global_batch % route.replicas:
        raise SystemExit(f"--global_batch {cfg.global_batch} does not split over {route.replicas} replicas: "
                         f"give a multiple of {route.replicas}.")
    if len(index["train"]) < route.replicas:
        raise SystemExit(f"{len(index['train'])} training shards for {route.replicas} replicas: "
                         f"prepare with --shards {route.replicas} or more.")
    per_replica = cfg.global_batch // route.replicas
    sizes = [count(index, "train", r, route.replicas) for r in range(route.replicas)]
    steps_per_epoch = min(sizes) // per_replica  # every replica steps together; extra images wait a turn
    streams = {}
    for r in route.local:
        shards = replica_shards(index, "train", r, route.replicas)
        names = ", ".join(s["name"] for s in shards)
        print(f"{me}: replica {r} reads {names} ({sizes[r]} images)", flush=True)
        streams[r] = Stream(*read(cfg.data, shards), per_replica, steps_per_epoch, r, cfg, index)
    os.makedirs(cfg.out, exist_ok=True)
    checkpoint, start = os.path.join(cfg.out, "checkpoint.npz"), 0
    if os.path.exists(checkpoint):  # a restarted job goes on from its last checkpoint
        with np.load(checkpoint) as saved:
            start = int(saved["step"])
            route.put([saved[f"v{i}"] for i in range(len(saved.files) - 1)])
        print(f"{me}: resumed from step {start}", flush=True)
    clock, since = time.perf_counter(), start  # each log line times the steps since the last one
    for step in range(start, cfg.steps):
        loss = route.step([streams[r](step) for r in route.local])
        done = step + 1
        if done % cfg.log_every == 0 and route.worker == 0:
            took, clock, since = (time.perf_counter() - clock) / (done - since), time.perf_counter(), done
            print(f"step {done}/{cfg.steps}: loss {loss:.4f}, {took * 1000:.0f} ms a step", flush=True)
        if done % cfg.checkpoint_every == 0 or done == cfg.steps:
            values = route.get()  # every process: on TensorFlow a read may be a collective
            if route.worker == 0:
                save_checkpoint(checkpoint, done, values)
    accuracy = evaluate(route, cfg, index)
    route.sync_model()
    if route.worker == 0:
        weights = [np.asarray(v) for v in route.get()[:len(route.model.variables)]]
        save_checkpoint(os.path.join(cfg.out, "weights.npz"), cfg.steps, weights)
        route.model.save(os.path.join(cfg.out, "model.tmp.keras"))
        os.replace(os.path.join(cfg.out, "model.tmp.keras"), os.path.join(cfg.out, "model.keras"))
        print(f"done: {cfg.steps} steps, test accuracy {accuracy:.4f}, model in {cfg.out}/model.keras",
              flush=True)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    prep = commands.add_parser("prepare", help="write a data set as .npy shards with an index")
    prep.add_argument("--source", required=True)
    prep.add_argument("--out", default="data")
    prep.add_argument("--shards", type=int, default=8)
    run = commands.add_parser("train", help="train from the shards")
    for key, default in CONFIG.items():  # every setting a flag of its type
        kind = (lambda s: s.lower() in ("1", "true", "yes")) if isinstance(default, bool) else type(default)
        run.add_argument(f"--{key}", type=kind, default=default)
    cfg = parser.parse_args(argv)
    if cfg.command == "prepare":
        return prepare(cfg.source, cfg.out, cfg.shards)
    tasks = int(os.environ.get("SLURM_NTASKS", 1))
    if tasks > 1 and "SLURM_STEP_ID" not in os.environ and "TF_CONFIG" not in os.environ:
        raise SystemExit(f"this is the batch script of a Slurm job of {tasks} tasks, not one of its tasks: "
                         "start train.py with srun (cluster/slurm/train.sbatch does); alone it would wait "
                         "for its peers forever.")
    cfg.backend = cfg.backend or os.environ.get("KERAS_BACKEND", "tensorflow")
    if cfg.backend not in ("tensorflow", "jax"):
        raise SystemExit(f"--backend {cfg.backend!r}: give tensorflow or jax.")
    if cfg.model not in ("seed", "capstone"):
        raise SystemExit(f"--model {cfg.model!r}: give seed or capstone.")
    for key in ("steps", "global_batch", "checkpoint_every", "devices", "log_every"):
        if getattr(cfg, key) < 1:
            raise SystemExit(f"--{key} {getattr(cfg, key)}: give 1 or more.")
    if not os.path.exists(os.path.join(cfg.data, "index.json")):
        raise SystemExit(f"--data {cfg.data}: no index.json there; run `python train.py prepare` first.")
    os.environ["KERAS_BACKEND"] = cfg.backend  # before Keras is imported
    if cfg.backend == "jax" and cfg.devices > 1:  # one process, a CPU seen as several devices
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                                   f" --xla_force_host_platform_device_count={cfg.devices}")
    train(cfg)


if __name__ == "__main__":
    main(sys.argv[1:])
