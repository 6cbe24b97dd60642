"""The capstone's recipe (lesson 16), for its benchmark, its tests and `make check`: the input
stream (flips and crops of whole batches, alternating flips, progressive resizing), the network
(a whitening first layer, convolutions that start as the identity), the one-cycle schedule,
lookahead, the timing of the arithmetic, the time-to-accuracy record and the test-time views.

Generated from notebooks/16_capstone.ipynb (its #@save cells) by tools/lesson_code.py: edit the lesson,
then `make lesson-code`. A test fails when this file and the lesson differ.
"""

from __future__ import annotations

import json
import time

import keras
import numpy as np
import tensorflow as tf

HYP = {  # the recipe in one place, as airbench keeps its `hyp`: the parameters above default to these values
    "batch_size": 512,  # global
    "peak_learning_rate": 0.375,  # for a global batch of reference_batch; the linear rule scales it
    "reference_batch": 256,
    "warmup_fraction": 0.23,  # of the steps: from rate_start x the peak up to it, then down to rate_end x it
    "rate_start": 0.2,
    "rate_end": 0.07,
    "momentum": 0.85,  # Nesterov's
    "weight_decay": 0.009,  # decoupled
    "label_smoothing": 0.2,
    "epochs": 9,
    "full_size_epochs": 5,
    "small_sizes": (16, 24, 24, 24),
    "widths": (64, 128, 128),
    "whitening_images": 2000,  # the patches the first layer's filters are computed from
    "whitening_bias_epochs": 3,
    "lookahead": True,
}


def channel_statistics(images: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each channel's mean and standard deviation over `images` (n, height, width, channels), float32."""
    mean = images.mean(axis=(0, 1, 2), dtype=np.float64).astype(np.float32)
    return mean, images.std(axis=(0, 1, 2), dtype=np.float64).astype(np.float32)


def standardize(images, statistics: tuple[np.ndarray, np.ndarray]):
    """`images` as float32, each channel centred and scaled by the training set's `channel_statistics`."""
    return (tf.cast(images, tf.float32) - statistics[0]) / statistics[1]


def flip_and_crop(padded, flip, key, pad: int = 2):
    """A whole batch: image i mirrored if flip[i], then cut at its own offset (0..2*pad), drawn from `key`."""
    count = tf.shape(padded)[0]
    images = tf.where(flip[:, None, None, None], tf.reverse(padded, [2]), padded)
    rows, columns = tf.unstack(tf.random.stateless_uniform([2, count, 1], key, 0, 2 * pad + 1, tf.int32))
    rows, columns = rows + tf.range(padded.shape[1] - 2 * pad), columns + tf.range(padded.shape[2] - 2 * pad)
    images = tf.gather(images, rows, axis=1, batch_dims=1)  # image i keeps its rows rows[i]
    return tf.gather(images, columns, axis=2, batch_dims=1)


def training_stream(images: np.ndarray, labels, batch_size: int, statistics, *, seed: int = 0, sides=(),
                    first_epoch: int = 0, alternate: bool = True) -> tf.data.Dataset:
    """Endless whole batches, flipped and cropped; epoch i's shrunk to sides[i] (later epochs: full size)."""
    padded = np.pad(images, ((0, 0), (2, 2), (2, 2), (0, 0)), mode="reflect")  # once, for every epoch
    first = np.random.default_rng(seed).random(len(images)) < 0.5  # which images the first pass mirrors
    dataset = tf.data.Dataset.from_tensor_slices((padded, labels, first)).shuffle(len(images), seed=seed)
    steps, full = -(-len(images) // batch_size), images.shape[1]  # batches per epoch; the images' own side
    side_of_epoch = tf.constant([*sides, full])  # epoch i's side; the last entry: every later epoch

    def augment_batch(index, batch):  # batch `index` holds the stream's images index*batch_size onwards
        x, y, mirrored_first = batch
        passes = (index * batch_size + tf.range(tf.shape(x)[0], dtype=tf.int64)) // len(images)
        flip = tf.math.logical_xor(mirrored_first, passes % 2 == 1)  # the other way from the pass before
        key = tf.stack([tf.constant(seed, tf.int64), index])  # this batch's draws, whichever thread makes it
        if not alternate:  # the benchmark's ablation: each image mirrored with probability 1/2, every pass
            flip = tf.random.stateless_uniform([tf.shape(x)[0]], key[::-1]) < 0.5
        x = standardize(flip_and_crop(x, flip, key), statistics)
        side = side_of_epoch[tf.minimum(index // steps, len(sides))]  # this batch's epoch's side
        return tf.cond(side != full, lambda: tf.image.resize(x, [side, side], antialias=True), lambda: x), y
    # Endless, so every batch is whole; a resumed run counts on. No autotuner: a dropped stream waits.
    dataset = dataset.repeat().batch(batch_size).enumerate(first_epoch * steps)
    options = tf.data.Options()
    options.autotune.enabled = False
    return dataset.map(augment_batch, num_parallel_calls=2).prefetch(2).with_options(options)


def evaluation_stream(images: np.ndarray, labels, batch_size: int, statistics) -> tf.data.Dataset:
    """The test set once, in order, standardized."""
    dataset = tf.data.Dataset.from_tensor_slices((images, labels)).batch(batch_size)
    return dataset.map(lambda x, y: (standardize(x, statistics), y)).prefetch(2)


def epoch_sides(epochs: int, full_size_epochs: int, small_sizes, full_size: int) -> list[int]:
    """Each epoch's image side: the last `full_size_epochs` at `full_size`, the ones before them from the end
    of `small_sizes` (more of them: its first size again; fewer: its first sizes go)."""
    small = max(0, epochs - full_size_epochs) if len(small_sizes) else 0
    widened = list(small_sizes[:1]) * max(0, small - len(small_sizes)) + list(small_sizes)
    return [int(side) for side in widened[len(widened) - small :]] + [full_size] * (epochs - small)


def whitening_filters(images: np.ndarray, size: int = 2, eps: float = 5e-4) -> np.ndarray:
    """Filters whose outputs on `images`' patches are uncorrelated: the eigenvectors of the patches' second
    moments, scaled by 1/sqrt(eigenvalue + eps). Both signs: the GELU after them keeps half of each."""
    windows = np.lib.stride_tricks.sliding_window_view(images, (size, size), axis=(1, 2))
    flat = windows.transpose(0, 1, 2, 4, 5, 3).reshape(-1, size * size * images.shape[-1]).astype(np.float64)
    values, vectors = np.linalg.eigh(flat.T @ flat / len(flat))
    kernel = (vectors / np.sqrt(values + eps)).reshape(size, size, images.shape[-1], -1)
    return np.concatenate([kernel, -kernel], axis=-1).astype(np.float32)


@keras.saving.register_keras_serializable(package="capstone")
class Bias(keras.layers.Layer):
    """One learnt offset per channel, added: the whitening layer's bias, a layer apart from its filters."""

    def build(self, input_shape):
        self.bias = self.add_weight(shape=(input_shape[-1],), initializer="zeros", name="bias")

    def call(self, x):
        return x + self.bias


class WhiteningBias(keras.callbacks.Callback):
    """The whitening layer's `Bias` learns for the first `epochs` epochs, then freezes: `fit` traces its step
    again without it, and the later steps skip the gradient through the first layer."""

    def __init__(self, model: keras.Model, epochs: int):
        super().__init__()
        self.layer, self.epochs = model.get_layer("whitening_bias"), epochs
        self.layer.trainable = epochs > 0  # before compile: the optimizer and a saved model see it

    def on_epoch_begin(self, epoch, logs=None):
        if epoch >= self.epochs and self.layer.trainable and self.layer.bias.trainable:
            self.layer.bias.trainable = False  # the variable, not the layer: see above
            self.model.make_train_function(force=True)  # `fit` calls the new one from the next step on


def start_as_identity(model: keras.Model) -> int:
    """Every 3x3 convolution's first filters pass their input channels through (the others keep their random
    start); how many convolutions it set."""
    count = 0
    for layer in model.layers:
        if isinstance(layer, keras.layers.Conv2D) and tuple(layer.kernel.shape[:2]) == (3, 3):
            kernel = layer.kernel.numpy()
            n = min(kernel.shape[2:])
            kernel[..., :n] = 0
            kernel[1, 1, np.arange(n), np.arange(n)] = 1
            layer.kernel.assign(kernel)
            count += 1
    return count


@tf.function(jit_compile=True)
def _gelu_backward(x, upstream):
    x32 = tf.cast(x, tf.float32)  # float32 inside: one pass in, one out, whatever the format outside
    cdf = 0.5 * (1 + tf.math.erf(x32 * 0.7071067811865476))  # Phi(x)
    density = tf.exp(-0.5 * x32 * x32) * 0.3989422804014327  # phi(x)
    return tf.cast(tf.cast(upstream, tf.float32) * (cdf + x32 * density), x.dtype)


@tf.custom_gradient
def _gelu_with_gradient(x):
    forward = tf.cast(keras.activations.gelu(tf.cast(x, tf.float32)), x.dtype)
    return forward, lambda upstream: _gelu_backward(x, upstream)


@keras.saving.register_keras_serializable(package="capstone")  # a plain function: a saved model names it
def float32_gelu(x):
    """Keras's exact GELU, x * Phi(x), in float32 and rounded once to x's format: what Keras's `gelu` computes
    in a float32 layer, to the bit (`portable` saves it so). Its gradient: one XLA-compiled pass."""
    return _gelu_with_gradient(x)


def build_capstone_cnn(input_shape=(None, None, 3), num_classes: int = 10, *, whitening=None,
                       widths=(64, 128, 128), identity: bool = True, seed: int | None = None) -> keras.Model:
    """airbench's network: a frozen first layer (`whitening_filters`, its `Bias` apart; None: a learnt one),
    blocks conv-pool-BN-GELU, conv-BN-GELU, a global max-pool (any side from 10 up), logits / 9 in float32."""
    if seed is not None:
        keras.utils.set_random_seed(seed)
    layers = keras.layers
    inputs = keras.Input(tuple(input_shape))  # (None, None, 3): any side, as the first epochs' are smaller
    first = (layers.Conv2D(8 * input_shape[-1], 2, name="whitening") if whitening is None  # learnt: ablation
             else layers.Conv2D(whitening.shape[-1], whitening.shape[0], use_bias=False, trainable=False,
                                name="whitening", kernel_initializer=keras.initializers.Constant(whitening)))
    bias = Bias(trainable=False, name="whitening_bias")  # frozen unless `WhiteningBias` lets it learn
    x = layers.Activation(float32_gelu)(first(inputs) if whitening is None else bias(first(inputs)))
    for width in widths:
        for pool in (True, False):
            x = layers.Conv2D(width, 3, padding="same", use_bias=False)(x)
            x = layers.MaxPooling2D()(x) if pool else x
            x = layers.BatchNormalization(momentum=0.6, epsilon=1e-12, scale=False, synchronized=True)(x)
            x = layers.Activation(float32_gelu)(x)
    logits = layers.Dense(num_classes, use_bias=False)(layers.GlobalMaxPooling2D()(x))
    model = keras.Model(inputs, layers.Rescaling(1 / 9, dtype="float32")(logits), name="capstone_cnn")
    if identity:
        start_as_identity(model)
    return model


def one_step_rate(model: keras.Model, images, labels) -> float:
    """One training step of `model` on the batch: its images per second."""
    started = time.perf_counter()
    model.train_on_batch(images, labels)
    return len(images) / (time.perf_counter() - started)


def compile_plain(model: keras.Model, xla: bool) -> None:
    """Plain SGD and cross-entropy: a step to time where training's own compile is not at hand."""
    model.compile(optimizer=keras.optimizers.SGD(0.01), jit_compile=xla,
                  loss=keras.losses.CategoricalCrossentropy(from_logits=True))


def screen_choices(models: dict, images, labels, keep_above: float) -> tuple[dict, dict, list]:
    """Each compiled model of `models` (by choice) trains two steps on `images`, the second timed: a choice
    under `keep_above` of the fastest's pace there is left out before more of it costs the most (bfloat16
    with no bfloat16 instructions). The first steps' seconds, the timed rates, the choices kept."""
    first, rates = {}, {}
    for choice, model in models.items():
        first[choice] = len(images) / one_step_rate(model, images, labels)  # it traces
        rates[choice] = one_step_rate(model, images, labels)
    return first, rates, [choice for choice in models if rates[choice] >= keep_above * max(rates.values())]


def race_arithmetic(build, images, labels, choices, rounds: int = 3, keep_above: float = 0.5,
                    compile_model=compile_plain, screen: int | None = None) -> dict:
    """Each (precision, xla) of `choices`: a model from `build()`, compiled by `compile_model(model, xla)` as
    training will be (its first step then traces what training's will), trained on one batch: a first step
    and a warm-up, then `rounds` timed rounds of one step, the choices in turn (a change of the machine's pace
    slows all alike). Those `screen_choices` leaves out after their warm-up, on the first `screen` images
    (None, or one choice: the batch), are timed no more: their one round is that step. Per choice: the median
    images/s, the first step's extra seconds (it traces; with XLA, compiles), each round's rate."""
    models, part = {}, min(screen or len(images), len(images)) if len(choices) > 1 else len(images)
    for precision, xla in choices:
        keras.mixed_precision.set_global_policy(precision)  # the layers `build` makes compute in it
        models[precision, xla] = model = build()
        compile_model(model, xla)
    first, warm, kept = screen_choices(models, images[:part], labels[:part], keep_above)
    for choice in kept if part < len(images) else ():  # the whole batch's shapes trace anew; a warm-up
        first[choice] = len(images) / one_step_rate(models[choice], images, labels)
        one_step_rate(models[choice], images, labels)
    rates = {choice: [] if choice in kept else [warm[choice]] for choice in models}
    for _ in range(rounds):
        for choice in kept:
            rates[choice].append(one_step_rate(models[choice], images, labels))
    medians = {choice: float(np.median(each)) for choice, each in rates.items()}
    size = {choice: len(images) if choice in kept else part for choice in models}  # of its first step
    return {c: (medians[c], max(0.0, first[c] - size[c] / medians[c]), rates[c]) for c in models}


def step_rate(build, images, labels, precision: str, xla: bool, steps: int = 3,
              compile_model=compile_plain) -> tuple[float, float]:
    """One choice alone: its images/s over `steps` steps, and its first step's extra seconds. Leaves the
    global policy at `precision`, for the model to come."""
    timed = race_arithmetic(build, images, labels, [(precision, xla)], steps, compile_model=compile_model)
    return timed[precision, xla][:2]


def compile_for_training(model: keras.Model, xla: bool, hyp: dict, rate=0.01, optimizer=keras.optimizers.SGD):
    """As the recipe `hyp` trains, in the model's strategy's scope: SGD with Nesterov momentum and decoupled
    weight decay, cross-entropy with label smoothing, accuracy; `rate` a number or section 5's schedule."""
    with model.distribute_strategy.scope():
        model.compile(optimizer=optimizer(rate, momentum=hyp["momentum"], nesterov=True,
                                          weight_decay=hyp["weight_decay"]),
                      loss=keras.losses.CategoricalCrossentropy(from_logits=True,
                                                                label_smoothing=hyp["label_smoothing"]),
                      metrics=["accuracy"], jit_compile=xla)


@keras.saving.register_keras_serializable(package="capstone")
class OneCycle(keras.optimizers.schedules.LearningRateSchedule):
    """Linear from start*peak up to `peak` over `warmup` steps, then linear down to end*peak at `total`."""

    def __init__(self, peak: float, total: int, warmup: int, start: float = 0.2, end: float = 0.07):
        self.peak, self.total, self.warmup, self.start, self.end = peak, total, max(1, warmup), start, end

    def __call__(self, step):
        step = tf.cast(step, tf.float32)
        up = self.start + (1 - self.start) * step / self.warmup
        down = 1 - (1 - self.end) * (step - self.warmup) / max(1, self.total - self.warmup)
        return self.peak * tf.where(step < self.warmup, up, down)

    def get_config(self):
        return {"peak": self.peak, "total": self.total, "warmup": self.warmup, "start": self.start,
                "end": self.end}


def one_cycle(hyp: dict, total_steps: int) -> OneCycle:
    """The recipe's schedule over `total_steps`: the linear rule's peak for hyp's batch, and its warm-up."""
    peak = hyp["peak_learning_rate"] * hyp["batch_size"] / hyp["reference_batch"]  # the linear rule
    warmup = int(hyp["warmup_fraction"] * total_steps)
    return OneCycle(peak, total_steps, warmup, hyp["rate_start"], hyp["rate_end"])


class Lookahead(keras.callbacks.Callback):
    """Every `every` steps the weights (BatchNorm's statistics too) move to an average that lags behind them;
    its decay grows as strength * (step / total_steps)**3. The model ends on it, the last step pulled in."""

    def __init__(self, total_steps: int, every: int = 5, strength: float = 0.95**5):
        super().__init__()
        self.total_steps, self.every, self.strength, self.pulls = total_steps, every, strength, 0

    def on_train_begin(self, logs=None):
        self.average = self.model.get_weights()  # BatchNorm's statistics too; a resumed run's restored ones
        self.step = int(self.model.optimizer.iterations.numpy())

    def on_train_batch_end(self, batch, logs=None):
        self.step += 1
        if self.step == self.total_steps:  # the model takes the average, pulled as at any pull, so that the
            self.pull(self.strength)  # steps since the last one count (airbench's copy drops up to 4 of ~970)
        elif self.step % self.every == 0:
            self.pull(self.strength * (self.step / self.total_steps) ** 3)

    def pull(self, decay: float):
        weights = self.model.get_weights()
        self.average = [a + (1 - decay) * (w - a) for a, w in zip(self.average, weights, strict=True)]
        self.model.set_weights(self.average)
        self.pulls += 1


class TimeToAccuracy(keras.callbacks.Callback):
    """After each epoch: minutes of training (evaluation included) and test accuracy, kept in a file."""

    def __init__(self, path, finished: int):
        super().__init__()
        self.path = path
        self.curve = (json.loads(path.read_text()) if path.exists() else [])[:finished]  # fit goes on here
        self.started = self.last_test = None

    def on_train_batch_begin(self, batch, logs=None):
        if self.started is None:  # minutes already trained before a restart carry over
            self.started = time.perf_counter() - 60 * (self.curve[-1]["minutes"] if self.curve else 0)

    def on_epoch_end(self, epoch, logs=None):
        minutes = (time.perf_counter() - self.started) / 60
        self.curve.append({"epoch": epoch + 1, "minutes": minutes, "accuracy": float(logs["val_accuracy"])})
        self.last_test = time.perf_counter()  # when this epoch's test ended
        self.path.with_suffix(".tmp").write_text(json.dumps(self.curve))
        self.path.with_suffix(".tmp").replace(self.path)  # atomically: a kill never leaves half a file


def train_recipe(model: keras.Model, train_data, hyp: dict, steps_per_epoch: int, *, xla: bool = False,
                 first=(), then=(), optimizer=keras.optimizers.SGD, **fit_options) -> list:
    """Trains `model` by the recipe `hyp` for hyp["epochs"] epochs of `steps_per_epoch` batches of the endless
    `train_data`: its whitening bias learning for its epochs, `one_cycle`'s schedule, lookahead if hyp says.
    Callbacks `first` run before the recipe's (a BackupAndRestore: they start from what it restores), `then`
    after them. Returns the recipe's callbacks: `WhiteningBias` (if the model has the layer), `Lookahead`."""
    total = hyp["epochs"] * steps_per_epoch
    layers = {layer.name for layer in model.layers}  # a learnt first layer (an ablation) has no Bias
    recipe = [WhiteningBias(model, hyp["whitening_bias_epochs"])] if "whitening_bias" in layers else []
    compile_for_training(model, xla, hyp, one_cycle(hyp, total), optimizer)  # after WhiteningBias: it sees it
    recipe += [Lookahead(total)] if hyp["lookahead"] else []
    model.fit(train_data, epochs=hyp["epochs"], steps_per_epoch=steps_per_epoch, shuffle=False, verbose=0,
              callbacks=[*first, *recipe, *then], **fit_options)
    return recipe


TTA_WEIGHTS = (2, 2, 1, 1, 1, 1)  # airbench's: the unshifted pair counts twice


def tta_view(images, labels, which: int):
    """View `which` of a batch: 0 as is, 1 mirrored; 2 and 3 shifted one pixel down-right (mirrored at the
    border), then mirrored; 4 and 5 shifted one pixel up-left, then mirrored."""
    if which >= 2:
        by = 0 if which < 4 else 2
        padded = tf.pad(images, [[0, 0], [1, 1], [1, 1], [0, 0]], mode="REFLECT")
        images = padded[:, by : by + images.shape[1], by : by + images.shape[2]]
    return (tf.reverse(images, [2]) if which % 2 else images), labels


def portable(model: keras.Model) -> keras.Model:
    """A copy of `model` made of Keras's own layers, for a file that loads where mgtutor is not installed: the
    frozen `Bias` folded into the whitening convolution's own bias, `float32_gelu` as Keras's `gelu` in a
    float32 layer (the same sums, the same predictions)."""
    def without_bias(layer, *args, **kwargs):  # the copy's graph skips the `Bias` layer
        return args[0] if isinstance(layer, Bias) else layer(*args, **kwargs)

    def built_in(layer):
        config = layer.get_config()
        if isinstance(layer, keras.layers.Conv2D) and layer.name == "whitening":
            config["use_bias"] = True
        if isinstance(layer, keras.layers.Activation) and layer.activation is float32_gelu:
            config.update(activation="gelu", dtype="float32")  # Keras's own: the same numbers
        return layer.__class__.from_config(config)

    copy = keras.models.clone_model(model, clone_function=built_in, call_function=without_bias)
    for layer in (layer for layer in copy.layers if layer.weights):
        weights = model.get_layer(layer.name).get_weights()
        if layer.name == "whitening" and len(weights) == 1:  # its filters; the Bias layer's values: its bias
            weights.append(model.get_layer("whitening_bias").get_weights()[0])
        layer.set_weights(weights)
    return copy
