"""The seeds' models rebuilt in Keras 3, layer for layer, behind `build_model`; and `seed_optimizer`.

Every builder checks its arguments before touching Keras, takes ``seed`` (two runs start from
identical weights) and returns a built model. Importing this module does not import TensorFlow.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mgtutor.support.checks import check_seed, is_real, is_whole

if TYPE_CHECKING:
    import keras

# Smallest height/width each model accepts: below it a "valid" convolution or a
# pooling layer would shrink the feature map to nothing.
SEED_CNN_MIN_SIZE = 10
LENET_MIN_SIZE = 16
MINIGOOGLENET_MIN_SIZE = 7
XCEPTION_MIN_SIZE = 71  # what keras.applications.Xception itself demands


# --------------------------------------------------------------------------- checks


def _check_input_shape(input_shape: Any, min_size: int, model: str) -> tuple[int, int, int]:
    if (
        not isinstance(input_shape, (tuple, list))
        or len(input_shape) != 3
        or not all(is_whole(v) and v >= 1 for v in input_shape)
    ):
        raise ValueError(
            "input_shape must be a tuple of 3 positive whole numbers (height, width, channels), "
            f"got {input_shape!r}; pass e.g. input_shape=(32, 32, 3)."
        )
    height, width, channels = (int(v) for v in input_shape)
    if height < min_size or width < min_size:
        raise ValueError(
            f"input_shape {input_shape!r} is too small for {model}: height and width must be "
            f"at least {min_size}; resize the images or pick another model."
        )
    return height, width, channels


def _check_num_classes(num_classes: Any) -> int:
    if not is_whole(num_classes) or num_classes < 2:
        raise ValueError(
            f"num_classes must be a whole number >= 2, got {num_classes!r}; "
            "pass e.g. num_classes=10 for CIFAR-10 or MNIST."
        )
    return int(num_classes)


def _apply_seed(seed: int | None) -> None:
    """Seed Python, NumPy and TensorFlow when asked.

    Keras 3 initializers and Dropout layers made without an explicit seed draw
    one from Python's `random`, so seeding globally just before building fixes
    every initial weight (and the dropout masks that follow).
    """
    if seed is not None:
        import keras

        keras.utils.set_random_seed(seed)


# --------------------------------------------------------------------------- seed 000 CNN


def build_seed_cnn(
    input_shape: tuple[int, int, int] = (32, 32, 3),
    num_classes: int = 10,
    *,
    seed: int | None = None,
    dropout: bool = True,
) -> keras.Model:
    """The CNN of Keras' ``cifar10_cnn`` example, the seed tutorial's model.

    Kept as a ``Sequential`` with separate ``Activation`` layers, exactly as the
    Keras 2 example wrote it, so ``model.summary()`` reads like the seed's. On
    32x32x3 input with 10 classes it has 1,250,858 parameters. Initializers are
    the Keras defaults (glorot_uniform kernels, zero biases), as in Keras 2.

    ``dropout=False`` leaves out the three Dropout layers (the parameters are
    the same): without random masks, single- and multi-device training can be
    compared number for number.
    """
    _check_input_shape(input_shape, SEED_CNN_MIN_SIZE, "build_seed_cnn")
    num_classes = _check_num_classes(num_classes)
    seed = check_seed(seed)
    if not isinstance(dropout, bool):
        raise ValueError(f"dropout must be True or False, got {dropout!r}.")
    import keras
    from keras import layers

    _apply_seed(seed)

    def maybe_dropout(rate: float) -> list:
        return [layers.Dropout(rate)] if dropout else []

    return keras.Sequential(
        [
            keras.Input(shape=tuple(input_shape)),
            layers.Conv2D(32, (3, 3), padding="same"),
            layers.Activation("relu"),
            layers.Conv2D(32, (3, 3)),
            layers.Activation("relu"),
            layers.MaxPooling2D(pool_size=(2, 2)),
            *maybe_dropout(0.25),
            layers.Conv2D(64, (3, 3), padding="same"),
            layers.Activation("relu"),
            layers.Conv2D(64, (3, 3)),
            layers.Activation("relu"),
            layers.MaxPooling2D(pool_size=(2, 2)),
            *maybe_dropout(0.25),
            layers.Flatten(),
            layers.Dense(512),
            layers.Activation("relu"),
            *maybe_dropout(0.5),
            layers.Dense(num_classes),
            layers.Activation("softmax"),
        ],
        name="seed_cnn",
    )


def seed_optimizer(learning_rate: float = 1e-4, decay: float = 1e-6) -> keras.optimizers.Optimizer:
    """The seed's ``keras.optimizers.rmsprop(lr=0.0001, decay=1e-6)`` in Keras 3.

    Keras 2's ``decay`` lowered the rate every update: lr_t = lr / (1 + decay * t),
    t the number of updates so far. Keras 3 dropped the argument; the same
    curve is ``InverseTimeDecay(lr, decay_steps=1, decay_rate=decay)``. With
    ``decay=0`` the rate is a plain constant (which callbacks may then change).

    t counts batches, not epochs: a larger global batch (more devices) makes
    fewer updates per epoch, so the rate decays more slowly per epoch.

    The other settings match: Keras 3's RMSprop defaults are rho=0.9 and
    epsilon=1e-7, Keras 2.1+'s were rho=0.9 and epsilon=K.epsilon()=1e-7
    (Keras 2.0 used 1e-8). One difference remains: Keras 2 divided by
    ``sqrt(v) + epsilon``, Keras 3 by ``sqrt(v + epsilon)``; they part only for
    gradients so small (|g| ~ 3e-4 or less) that epsilon is not negligible.
    """
    if not is_real(learning_rate) or not (
        learning_rate > 0
    ):
        raise ValueError(
            f"learning_rate must be a number > 0, got {learning_rate!r}; the seed used 1e-4."
        )
    if not is_real(decay) or not (decay >= 0):
        raise ValueError(f"decay must be a number >= 0, got {decay!r}; the seed used 1e-6.")
    import keras

    if decay == 0:
        return keras.optimizers.RMSprop(learning_rate=float(learning_rate))
    schedule = keras.optimizers.schedules.InverseTimeDecay(
        float(learning_rate), decay_steps=1, decay_rate=float(decay)
    )
    return keras.optimizers.RMSprop(learning_rate=schedule)


# --------------------------------------------------------------------------- DL4J LeNet


def build_lenet(
    input_shape: tuple[int, int, int] = (28, 28, 1),
    num_classes: int = 10,
    *,
    seed: int | None = None,
) -> keras.Model:
    """The DL4J seed's LeNet for MNIST (431,080 parameters on 28x28x1, 10 classes).

    Its convolutions are linear (DL4J ``Activation.IDENTITY``): the max pooling
    after each is the only non-linearity until the Dense layer. DL4J's
    ``WeightInit.XAVIER`` draws from a Gaussian of variance 2 / (fan_in + fan_out);
    Keras' ``glorot_normal`` (a truncated normal rescaled to that same variance)
    is the nearest match, so every layer uses it. DL4J's regularisation and
    updater are training settings, not part of the model, and are not copied.
    """
    _check_input_shape(input_shape, LENET_MIN_SIZE, "build_lenet")
    num_classes = _check_num_classes(num_classes)
    seed = check_seed(seed)
    import keras
    from keras import layers

    _apply_seed(seed)
    init = "glorot_normal"
    return keras.Sequential(
        [
            keras.Input(shape=tuple(input_shape)),
            layers.Conv2D(20, (5, 5), strides=1, activation="linear", kernel_initializer=init),
            layers.MaxPooling2D(pool_size=(2, 2), strides=2),
            layers.Conv2D(50, (5, 5), strides=1, activation="linear", kernel_initializer=init),
            layers.MaxPooling2D(pool_size=(2, 2), strides=2),
            layers.Flatten(),
            layers.Dense(500, activation="relu", kernel_initializer=init),
            layers.Dense(num_classes, activation="softmax", kernel_initializer=init),
        ],
        name="lenet",
    )


# --------------------------------------------------------------------------- MiniGoogLeNet


def _conv_module(x, filters: int, kx: int, ky: int, stride: int, sync: bool, padding: str = "same"):
    from keras import layers

    x = layers.Conv2D(filters, (kx, ky), strides=stride, padding=padding)(x)
    x = layers.BatchNormalization(axis=-1, synchronized=sync)(x)
    return layers.Activation("relu")(x)


def _inception_module(x, num_1x1: int, num_3x3: int, sync: bool):
    from keras import layers

    branch_1x1 = _conv_module(x, num_1x1, 1, 1, 1, sync)
    branch_3x3 = _conv_module(x, num_3x3, 3, 3, 1, sync)
    return layers.concatenate([branch_1x1, branch_3x3], axis=-1)


def _downsample_module(x, filters: int, sync: bool):
    from keras import layers

    conv = _conv_module(x, filters, 3, 3, 2, sync, padding="valid")
    pool = layers.MaxPooling2D((3, 3), strides=(2, 2))(x)
    return layers.concatenate([conv, pool], axis=-1)


def _replicas_in_scope() -> int:
    """Replicas of the strategy whose scope we are in (1 outside any)."""
    import tensorflow as tf

    return int(tf.distribute.get_strategy().num_replicas_in_sync) if tf.distribute.has_strategy() else 1


def build_minigooglenet(
    input_shape: tuple[int, int, int] = (32, 32, 3),
    num_classes: int = 10,
    *,
    seed: int | None = None,
    synchronized: bool | None = None,
    dropout: bool = True,
) -> keras.Model:
    """MiniGoogLeNet from PyImageSearch's "Multi-GPU training with Keras".

    The network behind that post's 63 s -> 16 s per epoch on 1 -> 4 GPUs.
    On 32x32 input the last feature map is 7x7 and the original 7x7
    ``AveragePooling2D`` is used; on any other size (down to 7x7 input) a
    ``GlobalAveragePooling2D(keepdims=True)`` takes its place, which on a 7x7
    map computes the same thing, so Dropout and Flatten follow unchanged.

    `synchronized` sets its 19 BatchNormalization layers' flag. None (the
    default) means True when built inside the scope of a strategy with more
    than one replica, else False: unsynchronized, each replica keeps its own
    moving statistics, they drift apart and ``save_model`` refuses the model
    (see `mgtutor.batchnorm`). Synchronized costs three all-reduces per layer
    per step and trains like one device with the global batch. The seed's
    Keras 2 ``multi_gpu_model`` had no such option; a towers model cannot
    synchronize. ``dropout=False`` leaves out the Dropout layer (no weights),
    for number-for-number comparisons of one and several devices.
    """
    _check_input_shape(input_shape, MINIGOOGLENET_MIN_SIZE, "build_minigooglenet")
    num_classes = _check_num_classes(num_classes)
    seed = check_seed(seed)
    if synchronized is not None and not isinstance(synchronized, bool):
        raise ValueError(
            f"synchronized must be True, False or None (automatic: True under a strategy with "
            f"more than one replica), got {synchronized!r}."
        )
    if not isinstance(dropout, bool):
        raise ValueError(f"dropout must be True or False, got {dropout!r}.")
    import keras
    from keras import layers

    sync = _replicas_in_scope() > 1 if synchronized is None else synchronized
    _apply_seed(seed)
    inputs = keras.Input(shape=tuple(input_shape))
    x = _conv_module(inputs, 96, 3, 3, 1, sync)
    x = _inception_module(x, 32, 32, sync)
    x = _inception_module(x, 32, 48, sync)
    x = _downsample_module(x, 80, sync)
    x = _inception_module(x, 112, 48, sync)
    x = _inception_module(x, 96, 64, sync)
    x = _inception_module(x, 80, 80, sync)
    x = _inception_module(x, 48, 96, sync)
    x = _downsample_module(x, 96, sync)
    x = _inception_module(x, 176, 160, sync)
    x = _inception_module(x, 176, 160, sync)
    if tuple(x.shape[1:3]) == (7, 7):
        x = layers.AveragePooling2D((7, 7))(x)
    else:
        x = layers.GlobalAveragePooling2D(keepdims=True)(x)
    if dropout:
        x = layers.Dropout(0.5)(x)
    x = layers.Flatten()(x)
    x = layers.Dense(num_classes)(x)
    outputs = layers.Activation("softmax")(x)
    return keras.Model(inputs, outputs, name="minigooglenet")


# --------------------------------------------------------------------------- Xception


def build_xception(
    input_shape: tuple[int, int, int] = (71, 71, 3),
    num_classes: int = 10,
    *,
    seed: int | None = None,
) -> keras.Model:
    """Seed 001's template: ``keras.applications.Xception(weights=None, ...)``.

    Randomly initialised (no ImageNet weights, nothing downloaded). Xception
    needs height and width of at least 71; CIFAR-10 images must be resized up.
    """
    _check_input_shape(input_shape, XCEPTION_MIN_SIZE, "build_xception")
    num_classes = _check_num_classes(num_classes)
    seed = check_seed(seed)
    import keras

    _apply_seed(seed)
    return keras.applications.Xception(
        weights=None, input_shape=tuple(input_shape), classes=num_classes
    )


# --------------------------------------------------------------------------- by name


MODEL_BUILDERS: dict[str, Callable[..., Any]] = {
    "seed_cnn": build_seed_cnn,
    "lenet": build_lenet,
    "minigooglenet": build_minigooglenet,
    "xception": build_xception,
}


def build_model(
    name: str,
    input_shape: tuple[int, int, int],
    num_classes: int,
    *,
    seed: int | None = None,
    **options: Any,
) -> keras.Model:
    """Build one of `MODEL_BUILDERS` by name, e.g. ``build_model("lenet", (28, 28, 1), 10)``.

    `options` go to that model's builder, e.g. ``dropout=False`` for ``"seed_cnn"``.
    """
    if not isinstance(name, str) or name not in MODEL_BUILDERS:
        raise ValueError(
            f"model name must be one of {', '.join(sorted(MODEL_BUILDERS))}; got {name!r}."
        )
    builder = MODEL_BUILDERS[name]
    accepted = set(inspect.signature(builder).parameters) - {"input_shape", "num_classes", "seed"}
    unknown = sorted(set(options) - accepted)
    if unknown:
        raise TypeError(
            f"build_model({name!r}, ...) got unknown option(s) {', '.join(unknown)}; "
            f"{name} accepts: {', '.join(sorted(accepted)) or 'no options'}."
        )
    return builder(input_shape, num_classes, seed=seed, **options)
