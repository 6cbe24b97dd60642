"""The layers path: `ImageDataGenerator`'s augmentations as Keras 3 layers inside the model (``as_layers``).

Keras 3's ``RandomRotation`` then ``RandomTranslation``: two resamplings when both
are on (a little more blur than Keras 2's one), only the float shift form, and TF's
fill modes ('nearest' and 'reflect' agree with SciPy; 'wrap' and 'constant' do not).
Under MirroredStrategy these layers draw the same transforms on every replica (their
seed state is mirrored); the towers of `multi_gpu_model` call them one after another.
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np

from mgtutor.keras2.augment_checks import _GeneratorBase
from mgtutor.support.checks import check_seed, is_whole


@keras.saving.register_keras_serializable(package="mgtutor")
class SamplewiseStandardization(keras.layers.Layer):
    """Keras 2's samplewise_center / samplewise_std_normalization as a layer (every call)."""

    def __init__(self, center: bool = True, scale: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.center, self.scale = bool(center), bool(scale)

    def call(self, inputs: Any) -> Any:
        x = keras.ops.cast(inputs, self.compute_dtype)
        if self.center:
            x = x - keras.ops.mean(x, axis=(-3, -2, -1), keepdims=True)
        if self.scale:
            x = x / (keras.ops.std(x, axis=(-3, -2, -1), keepdims=True) + 1e-6)
        return x

    def compute_output_shape(self, input_shape: Any) -> Any:
        return input_shape

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "center": self.center, "scale": self.scale}


@keras.saving.register_keras_serializable(package="mgtutor")
class ZCAWhitening(keras.layers.Layer):
    """Multiply each flattened image by a fixed ZCA matrix (a weight, saved with the model)."""

    def __init__(self, features: int, matrix: Any = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.features = int(features)
        self._initial = None if matrix is None else np.asarray(matrix, dtype=np.float32)

    def build(self, input_shape: Any) -> None:
        initial = self._initial
        self.matrix = self.add_weight(
            shape=(self.features, self.features),
            initializer=(lambda shape, dtype=None: initial) if initial is not None else "zeros",
            trainable=False,
            name="zca_matrix",
        )

    def call(self, inputs: Any) -> Any:
        x = keras.ops.cast(inputs, self.compute_dtype)
        flat = keras.ops.reshape(x, (-1, self.features))
        return keras.ops.reshape(keras.ops.matmul(flat, self.matrix), keras.ops.shape(x))

    def compute_output_shape(self, input_shape: Any) -> Any:
        return input_shape

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "features": self.features}


def _translation_factors(generator: _GeneratorBase, input_shape: Any) -> list[float]:
    """The (height, width) shifts as the fractions of the image ``RandomTranslation`` takes."""
    factors = []
    for shift, parameter, axis in ((generator._height_shift, "height_shift_range", 0),
                                   (generator._width_shift, "width_shift_range", 1)):  # fmt: skip
        if shift.kind in ("int", "choice"):
            raise ValueError(
                f"augmentation_layers: {parameter}={getattr(generator, parameter)!r} picks whole "
                "values, which keras.layers.RandomTranslation cannot; pass a float range (e.g. 0.1), "
                "or use generator.flow() or generator.as_dataset(), which support every Keras 2 form."
            )
        if shift.kind == "none":
            factors.append(0.0)
        elif shift.fraction:
            factors.append(shift.values[0])
        elif input_shape is None:
            raise ValueError(
                f"augmentation_layers: {parameter}={shift.values[0]} is in pixels, and the layers "
                "need a fraction of the image: pass input_shape=(height, width, channels)."
            )
        else:
            factors.append(min(shift.values[0] / input_shape[axis], 1.0))
    return factors


def augmentation_layers(
    generator: _GeneratorBase,
    *,
    input_shape: tuple[int, int, int] | None = None,
    seed: int | None = None,
    name: str = "augmentation",
) -> Any:
    """`generator`'s augmentations as Keras 3 layers, to run inside the model on its device.

    ``RandomRotation``, ``RandomTranslation`` and ``RandomFlip`` (active only
    when ``training=True``), then the standardisation, which applies always:
    ``Rescaling``, `SamplewiseStandardization`, ``Normalization`` with the
    featurewise mean and ``std + 1e-6`` from ``fit``, `ZCAWhitening`. So do not
    standardise the validation or test data yourself. Shifts must be floats
    (Keras 2's int and list forms raise); pixel ranges (>= 1) need
    `input_shape`. Put it first: ``keras.Sequential([augmentation, model])``.
    Under a MirroredStrategy every replica draws the same parameters for its
    slice (see the module docstring); prefer `augment_dataset` there if that matters.
    """
    if not isinstance(generator, _GeneratorBase):
        raise TypeError(f"generator must be an mgtutor ImageDataGenerator, got {type(generator).__name__}.")
    seed = check_seed(seed)
    if input_shape is not None and (
        not isinstance(input_shape, tuple | list)
        or len(input_shape) != 3
        or not all(is_whole(v) and v >= 1 for v in input_shape)
    ):
        raise ValueError(f"input_shape must be (height, width, channels), got {input_shape!r}.")
    factors = _translation_factors(generator, input_shape)
    generator._check_fitted("augmentation_layers", None if input_shape is None else tuple(input_shape))

    def seeded(offset: int) -> int | None:
        return None if seed is None else seed + offset

    fill = {"fill_mode": generator.fill_mode, "fill_value": generator.cval, "interpolation": "bilinear"}
    layers: list[Any] = [keras.Input(shape=tuple(input_shape))] if input_shape is not None else []
    if generator.rotation_range:
        layers.append(keras.layers.RandomRotation(generator.rotation_range / 360, seed=seeded(0), **fill))
    if any(factors):
        layers.append(keras.layers.RandomTranslation(factors[0], factors[1], seed=seeded(1), **fill))
    if generator.horizontal_flip:
        layers.append(keras.layers.RandomFlip("horizontal", seed=seeded(2)))
    if generator.vertical_flip:  # a separate layer: "horizontal_and_vertical" flips both or neither
        layers.append(keras.layers.RandomFlip("vertical", seed=seeded(3)))
    if generator.rescale:
        layers.append(keras.layers.Rescaling(generator.rescale))
    if generator.samplewise_center:
        layers.append(SamplewiseStandardization(True, generator.samplewise_std_normalization))
    if generator.featurewise_center:
        channels = generator.mean.shape[-1]
        # Normalization divides by sqrt(variance): Keras 2 divides by std + 1e-6.
        if generator.featurewise_std_normalization:
            variance = ((generator.std + 1e-6) ** 2).reshape(channels)
        else:
            variance = np.ones(channels, np.float32)
        layers.append(
            keras.layers.Normalization(axis=-1, mean=generator.mean.reshape(channels), variance=variance)
        )
    if generator.zca_whitening:
        matrix = generator.zca_whitening_matrix
        layers.append(ZCAWhitening(matrix.shape[0], matrix))
    if len(layers) == (input_shape is not None):
        layers.append(keras.layers.Identity())
    return keras.Sequential(layers, name=name)
