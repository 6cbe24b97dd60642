"""The capstone's recipe (notebook 16), lifted from its cells for its solutions and its benchmark.

`whitening_filters` computes the first layer from the data, `build_capstone_cnn` builds the
network (airbench's, in Keras), `one_cycle` its learning-rate schedule, `epoch_sides` and
`capstone_pipeline` its input (progressive resizing), `lookahead` its weight averaging, and
`tta_view` the test-time augmentation. Notebook 16 writes each out in cells; this is the same
code, once.
Importing this module does not import TensorFlow.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from mgtutor.support.checks import check_seed, check_whole

if TYPE_CHECKING:
    import keras

CAPSTONE_WIDTHS = (64, 128, 128)
LOGIT_SCALE = 1 / 9  # small logits at the start: the softmax is not saturated before anything is learnt


def whitening_filters(images: np.ndarray, size: int = 2, eps: float = 5e-4) -> np.ndarray:
    """Filters (size, size, channels, 2 * size * size * channels) that whiten size x size patches.

    The eigenvectors of the patches' (uncentred) second-moment matrix, scaled by
    1/sqrt(eigenvalue + eps): their outputs are uncorrelated with mean square ~1. Both
    signs, as the GELU after them keeps only half of each.
    """
    size = check_whole("size", size, 1, "Pass e.g. size=2.")
    images = np.asarray(images, dtype=np.float32)
    if images.ndim != 4 or images.shape[1] < size or images.shape[2] < size:
        raise ValueError(f"images must be a batch (n, height, width, channels) of at least {size}x{size}, "
                         f"got shape {images.shape}.")  # fmt: skip
    windows = np.lib.stride_tricks.sliding_window_view(images, (size, size), axis=(1, 2))
    flat = windows.transpose(0, 1, 2, 4, 5, 3).reshape(-1, size * size * images.shape[-1]).astype(np.float64)
    values, vectors = np.linalg.eigh(flat.T @ flat / len(flat))
    kernel = (vectors / np.sqrt(values + eps)).reshape(size, size, images.shape[-1], -1)
    return np.concatenate([kernel, -kernel], axis=-1).astype(np.float32)


def start_as_identity(model: keras.Model) -> int:
    """Make the first filters of every trainable 3x3 convolution pass their input channel through.

    Returns how many convolutions it set. The other filters keep their random start.
    """
    import keras

    count = 0
    for layer in model.layers:
        if isinstance(layer, keras.layers.Conv2D) and layer.trainable and layer.kernel.shape[:2] == (3, 3):
            kernel = np.array(layer.kernel.numpy())
            n = min(kernel.shape[2:])
            kernel[..., :n] = 0
            kernel[1, 1, np.arange(n), np.arange(n)] = 1
            layer.kernel.assign(kernel)
            count += 1
    return count


def build_capstone_cnn(
    input_shape: tuple[int | None, int | None, int] = (None, None, 3),
    num_classes: int = 10,
    *,
    whiten_with: np.ndarray | None = None,
    widths: tuple[int, ...] = CAPSTONE_WIDTHS,
    identity: bool = True,
    seed: int | None = None,
) -> keras.Model:
    """Notebook 16's network: frozen whitening, blocks conv-pool-BN-GELU, conv-BN-GELU, a global max-pool.

    `whiten_with`: standardized images to compute the first layer from (`whitening_filters`);
    None learns a random 2x2 first layer instead (the ablation). ``identity=False`` leaves the
    convolutions random. BatchNorm is synchronized, without its scale, momentum 0.6. The global
    max-pool takes images of any side from 10 up (the default `input_shape` leaves it open).
    """
    whitening = None if whiten_with is None else whitening_filters(whiten_with)
    seed = check_seed(seed)
    import keras

    layers = keras.layers
    if seed is not None:
        keras.utils.set_random_seed(seed)
    inputs = keras.Input(tuple(input_shape))
    if whitening is None:
        x = layers.Conv2D(2 * 2 * 2 * input_shape[-1], 2, name="whitening")(inputs)
    else:
        x = layers.Conv2D(whitening.shape[-1], whitening.shape[0], trainable=False, name="whitening",
                          kernel_initializer=keras.initializers.Constant(whitening))(inputs)  # fmt: skip
    x = layers.Activation("gelu")(x)
    for width in widths:
        for pool in (True, False):
            x = layers.Conv2D(width, 3, padding="same", use_bias=False)(x)
            x = layers.MaxPooling2D()(x) if pool else x
            x = layers.BatchNormalization(momentum=0.6, epsilon=1e-12, scale=False, synchronized=True)(x)
            x = layers.Activation("gelu")(x)
    x = layers.GlobalMaxPooling2D()(x)
    logits = layers.Rescaling(LOGIT_SCALE)(layers.Dense(num_classes, use_bias=False)(x))
    model = keras.Model(inputs, logits, name="capstone_cnn")
    if identity:
        start_as_identity(model)
    return model


def one_cycle(peak: float, total: int, warmup: int, start: float = 0.2, end: float = 0.07) -> Any:
    """Notebook 16's schedule: linear from start*peak to peak over `warmup` steps, then down to end*peak."""
    import keras
    import tensorflow as tf

    class OneCycle(keras.optimizers.schedules.LearningRateSchedule):
        def __call__(self, step):
            step = tf.cast(step, tf.float32)
            up = start + (1 - start) * step / max(1, warmup)
            down = 1 - (1 - end) * (step - warmup) / max(1, total - warmup)
            return peak * tf.where(step < warmup, up, down)

        def get_config(self) -> dict:
            return {"peak": peak, "total": total, "warmup": warmup, "start": start, "end": end}

    return OneCycle()


def channel_statistics(images: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each channel's mean and standard deviation over `images` (n, height, width, channels), float32."""
    mean = images.mean(axis=(0, 1, 2), dtype=np.float64).astype(np.float32)
    return mean, images.std(axis=(0, 1, 2), dtype=np.float64).astype(np.float32)


def flip_and_crop(padded: Any, pad: int = 2, flip: Any = None) -> Any:
    """Notebook 16's augmentation of a whole batch at once: each image of `padded` (reflect-padded by
    `pad` pixels) mirrored where `flip` is true (None: with probability 1/2), then cut at a random
    offset of 0..2*pad each way."""
    import tensorflow as tf

    count = tf.shape(padded)[0]
    if flip is None:
        flip = tf.random.uniform([count]) < 0.5
    images = tf.where(flip[:, None, None, None], tf.reverse(padded, [2]), padded)
    rows = tf.random.uniform([count, 1], 0, 2 * pad + 1, tf.int32) + tf.range(padded.shape[1] - 2 * pad)
    columns = tf.random.uniform([count, 1], 0, 2 * pad + 1, tf.int32) + tf.range(padded.shape[2] - 2 * pad)
    images = tf.gather(images, rows, axis=1, batch_dims=1)
    return tf.gather(images, columns, axis=2, batch_dims=1)


def epoch_sides(epochs: int, full_size_epochs: int, small_sizes: Sequence[int], full_size: int) -> list[int]:
    """The image side of each of `epochs` epochs: the last `full_size_epochs` at `full_size`, the ones
    before them the last entries of `small_sizes` (its first repeated if there are more of them).

    ``epoch_sides(7, 3, [16, 24, 24, 24], 32)`` is ``[16, 24, 24, 24, 32, 32, 32]``; with fewer
    epochs the first sizes go (``epoch_sides(4, 3, ...)`` is ``[24, 32, 32, 32]``).
    """
    epochs = check_whole("epochs", epochs, 1, "Pass e.g. 7.")
    full_size_epochs = check_whole("full_size_epochs", full_size_epochs, 0, "Pass e.g. 3.")
    small = max(0, epochs - full_size_epochs) if len(small_sizes) else 0
    widened = list(small_sizes[:1]) * max(0, small - len(small_sizes)) + list(small_sizes)
    return [int(side) for side in widened[len(widened) - small :]] + [full_size] * (epochs - small)


def capstone_pipeline(
    images: np.ndarray, labels: np.ndarray, batch_size: int, statistics: tuple[np.ndarray, np.ndarray], *,
    augment: bool, seed: int = 0, alternate: bool = True, sides: Sequence[int] = (), first_epoch: int = 0,
) -> Any:  # fmt: skip
    """Notebook 16's `tf.data` input. With `augment`: uint8 images reflect-padded by 2 pixels once,
    reshuffled each pass, repeated without end (every batch whole: give `fit` a `steps_per_epoch`),
    each batch flipped and cropped by `flip_and_crop`. The flips alternate (airbench's): half the
    images, drawn once, are mirrored in odd passes, the other half in even ones (``alternate=False``:
    each image with probability 1/2 every time, the ablation). Epoch i's batches (of
    ceil(n / batch_size)) are shrunk to ``sides[i]`` pixels a side (progressive resizing,
    `epoch_sides`); epochs past the end of `sides` keep the images' own size. `first_epoch` starts
    the count there (a resumed run). Without `augment`: the images once, in order. Both
    standardized by `statistics` (the training set's `channel_statistics`)."""
    import tensorflow as tf

    batch_size = check_whole("batch_size", batch_size, 1, "Pass e.g. batch_size=512.")
    sides = [check_whole(f"sides[{i}]", side, 10, "Pass sides of 10 or more (the network's least).")
             for i, side in enumerate(sides)]  # fmt: skip
    first_epoch = check_whole("first_epoch", first_epoch, 0, "Pass the number of epochs already trained.")
    mean, std = statistics

    def standardize(x, y):
        return (tf.cast(x, tf.float32) - mean) / std, y

    if not augment:
        dataset = tf.data.Dataset.from_tensor_slices((images, labels)).batch(batch_size)
        return dataset.map(standardize).prefetch(2)
    padded = np.pad(images, ((0, 0), (2, 2), (2, 2), (0, 0)), mode="reflect")
    first = np.random.default_rng(seed).random(len(images)) < 0.5  # mirrored in the first pass
    dataset = tf.data.Dataset.from_tensor_slices((padded, labels, first))
    dataset = dataset.shuffle(len(images), seed=seed).repeat()
    full = images.shape[1]
    side_of_epoch = tf.constant([*sides, full], tf.int32)  # the last entry: every later epoch

    def augment_batch(index, batch):
        x, y, first_pass = batch
        passes = (index * batch_size + tf.range(tf.shape(x)[0], dtype=tf.int64)) // len(images)
        flip = tf.math.logical_xor(first_pass, passes % 2 == 1) if alternate else None
        x, y = standardize(flip_and_crop(x, flip=flip), y)
        side = side_of_epoch[tf.minimum(index // steps, len(sides))]
        return tf.cond(side != full, lambda: tf.image.resize(x, [side, side], antialias=True), lambda: x), y

    steps = -(-len(images) // batch_size)  # one epoch of the stream
    dataset = dataset.batch(batch_size).enumerate(first_epoch * steps)
    return dataset.map(augment_batch, num_parallel_calls=2).prefetch(2)


def lookahead(total_steps: int, every: int = 5, strength: float = 0.95**5) -> keras.callbacks.Callback:
    """Notebook 16's lookahead (airbench's), a callback: every `every` steps the weights (BatchNorm's
    statistics too) move to an average that lags behind them, and take its value. The average's decay
    grows as ``strength * (step / total_steps) ** 3``: none early, strong as the rate falls. At step
    `total_steps` the model takes the average itself. Put it after `BackupAndRestore` in the list."""
    import keras

    total_steps = check_whole("total_steps", total_steps, 1, "Pass the run's number of steps.")
    every = check_whole("every", every, 1, "Pass e.g. 5.")

    class Lookahead(keras.callbacks.Callback):
        pulls = 0  # how many times the weights took the average's value

        def on_train_begin(self, logs=None):
            self.average = self.model.get_weights()  # a resumed run starts from the restored weights
            self.step = int(self.model.optimizer.iterations.numpy())

        def on_train_batch_end(self, batch, logs=None):
            self.step += 1
            if self.step == total_steps:
                self.pull(1.0)  # the average unmoved: the model takes it
            elif self.step % every == 0:
                self.pull(strength * (self.step / total_steps) ** 3)

        def pull(self, decay: float) -> None:
            weights = self.model.get_weights()
            self.average = [a + (1 - decay) * (w - a) for a, w in zip(self.average, weights, strict=True)]
            self.model.set_weights(self.average)
            self.pulls += 1

    return Lookahead()


TTA_WEIGHTS = (2.0, 2.0, 1.0, 1.0, 1.0, 1.0)  # airbench's: the unshifted pair counts twice


def tta_view(images: Any, labels: Any, which: int) -> tuple[Any, Any]:
    """View `which` of a batch for test-time augmentation, for ``dataset.map(partial(tta_view, which=i))``.

    0 as is, 1 mirrored; 2 and 3 shifted one pixel down-right (reflected at the border), then
    the same mirrored; 4 and 5 shifted one pixel up-left, and mirrored.
    """
    import tensorflow as tf

    if which >= 2:
        by = 0 if which < 4 else 2
        padded = tf.pad(images, [[0, 0], [1, 1], [1, 1], [0, 0]], mode="REFLECT")
        images = padded[:, by : by + images.shape[1], by : by + images.shape[2]]
    return (tf.reverse(images, [2]) if which % 2 else images), labels
