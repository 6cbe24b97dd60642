"""Keras 2's ``ImageDataGenerator`` on Keras 3: ``fit``, ``standardize``, ``flow`` (a ``PyDataset``
of whole batches transformed with vectorised NumPy), and two fast paths with the same
augmentations: ``as_dataset`` (``tf.data``) and ``as_layers`` (inside the model, per device).

Faithful to tf_keras 2.21 (tests/unit/keras2/test_augment.py compares pixel by pixel), except:
``width_shift_range`` shifts horizontally as documented (tf_keras swaps the axes, tf-keras#310);
rotation turns about the true centre; featurewise options before ``fit`` raise `NotFittedError`
instead of being skipped; the same seed gives the same (not tf_keras's) augmentations;
``next(flow)`` needs ``next(iter(flow))``. Shear, zoom, channel shift, brightness,
``preprocessing_function``, ``validation_split``, other interpolation orders and
``channels_first`` are accepted only at the value that turns them off.
Importing this module imports neither Keras nor TensorFlow.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from mgtutor.keras2.augment_checks import (
    _check_flag,
    _check_images,
    _check_keras2_options,
    _check_lengths,
    _check_settings,
    _fresh_seed,
    _GeneratorBase,
    _sample_shifts,
)
from mgtutor.keras2.augment_resample import _affine, _resample
from mgtutor.keras2.augment_stats import _FIT_CHUNK, _channel_std, _zca_matrix
from mgtutor.support.checks import check_seed, check_whole

if TYPE_CHECKING:
    from mgtutor.keras2.augment_flow import NumpyArrayIterator

# The d x d matrix ZCA needs: 16384 features (e.g. 73x73x3) is 2 GiB in float64.
MAX_ZCA_FEATURES = 16384
# Public names that moved out in the split, served here on first use so old imports work.
# Imported lazily: the flow, tf and layers modules import Keras.
_MOVED = {
    "FILL_MODES": "augment_checks",
    "SUPPORTED_ARGUMENTS": "augment_checks",
    "NumpyArrayIterator": "augment_flow",
    "augment_dataset": "augment_tf",
    "augmentation_layers": "augment_layers",
    "SamplewiseStandardization": "augment_layers",
    "ZCAWhitening": "augment_layers",
}


def __getattr__(name: str) -> Any:
    module = _MOVED.get(name)
    if module is None:
        raise AttributeError(f"module 'mgtutor.keras2.augment' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"mgtutor.keras2.{module}"), name)


class NotFittedError(RuntimeError):
    """A featurewise option needs the statistics of ``fit(x_train)``, which has not run."""


# --------------------------------------------------------------------------- generator


class ImageDataGenerator(_GeneratorBase):
    """Keras 2's ``ImageDataGenerator`` (channels_last), for Keras 3: see the module docstring.

    ``datagen.fit(x_train)`` computes the featurewise statistics;
    ``datagen.flow(x, y, batch_size)`` yields augmented float32 batches as a
    ``keras.utils.PyDataset``. ``as_dataset`` and ``as_layers`` give the same
    augmentations as a ``tf.data`` pipeline or as layers inside the model.

    Unlike Keras 2, using a featurewise option (``featurewise_center``,
    ``featurewise_std_normalization``, ``zca_whitening``) before ``fit`` raises
    `NotFittedError` instead of warning and skipping it.
    """

    def __init__(
        self,
        featurewise_center: bool = False,
        samplewise_center: bool = False,
        featurewise_std_normalization: bool = False,
        samplewise_std_normalization: bool = False,
        zca_whitening: bool = False,
        zca_epsilon: float = 1e-6,
        rotation_range: float = 0,
        width_shift_range: float | int | Sequence[float] = 0.0,
        height_shift_range: float | int | Sequence[float] = 0.0,
        *,
        fill_mode: str = "nearest",
        cval: float = 0.0,
        horizontal_flip: bool = False,
        vertical_flip: bool = False,
        rescale: float | None = None,
        data_format: str | None = None,
        **keras2_options: Any,
    ) -> None:
        _check_keras2_options(keras2_options)
        flags = {
            name: _check_flag(value, name)
            for name, value in (
                ("featurewise_center", featurewise_center),
                ("samplewise_center", samplewise_center),
                ("featurewise_std_normalization", featurewise_std_normalization),
                ("samplewise_std_normalization", samplewise_std_normalization),
                ("zca_whitening", zca_whitening),
                ("horizontal_flip", horizontal_flip),
                ("vertical_flip", vertical_flip),
            )
        }
        width_shift, height_shift = _check_settings(
            zca_epsilon, rotation_range, width_shift_range, height_shift_range, fill_mode, cval, rescale,
            data_format,
        )

        self.featurewise_center = flags["featurewise_center"]
        self.samplewise_center = flags["samplewise_center"]
        self.featurewise_std_normalization = flags["featurewise_std_normalization"]
        self.samplewise_std_normalization = flags["samplewise_std_normalization"]
        self.zca_whitening = flags["zca_whitening"]
        self.zca_epsilon = float(zca_epsilon)
        self.rotation_range = rotation_range
        self.width_shift_range = width_shift_range
        self.height_shift_range = height_shift_range
        self.fill_mode = fill_mode
        self.cval = float(cval)
        self.horizontal_flip = flags["horizontal_flip"]
        self.vertical_flip = flags["vertical_flip"]
        self.rescale = float(rescale) if rescale else None  # Keras 2: None and 0 both mean off
        self.data_format = "channels_last"
        self.dtype = "float32"
        self.channel_axis, self.row_axis, self.col_axis = 3, 1, 2
        self.mean: np.ndarray | None = None
        self.std: np.ndarray | None = None
        self.zca_whitening_matrix: np.ndarray | None = None
        self._width_shift, self._height_shift = width_shift, height_shift
        self._fit_shape: tuple[int, ...] | None = None

        self._keras2_overrides()

    def _keras2_overrides(self) -> None:
        """Keras 2's overrides between the standardisation flags, with its warnings."""
        if self.zca_whitening:
            if not self.featurewise_center:
                self.featurewise_center = True
                _warn("`zca_whitening`, which overrides setting of `featurewise_center`.")
            if self.featurewise_std_normalization:
                self.featurewise_std_normalization = False
                _warn("`zca_whitening` which overrides setting of `featurewise_std_normalization`.")
        if self.featurewise_std_normalization and not self.featurewise_center:
            self.featurewise_center = True
            _warn("`featurewise_std_normalization`, which overrides setting of `featurewise_center`.")
        if self.samplewise_std_normalization and not self.samplewise_center:
            self.samplewise_center = True
            _warn("`samplewise_std_normalization`, which overrides setting of `samplewise_center`.")

    # -- configuration

    @property
    def principal_components(self) -> np.ndarray | None:
        """Keras <= 2.2's name for `zca_whitening_matrix`."""
        return self.zca_whitening_matrix

    @property
    def _geometric(self) -> bool:
        return bool(
            self.rotation_range
            or self._width_shift.kind != "none"
            or self._height_shift.kind != "none"
            or self.horizontal_flip
            or self.vertical_flip
        )

    @property
    def _featurewise(self) -> bool:
        return self.featurewise_center or self.featurewise_std_normalization or self.zca_whitening

    def _check_fitted(self, where: str, image_shape: tuple[int, ...] | None = None) -> None:
        missing = [
            name
            for name, on, value in (
                ("featurewise_center", self.featurewise_center, self.mean),
                ("featurewise_std_normalization", self.featurewise_std_normalization, self.std),
                ("zca_whitening", self.zca_whitening, self.zca_whitening_matrix),
            )
            if on and value is None
        ]
        if missing:
            raise NotFittedError(
                f"{where}: {', '.join(missing)} need(s) statistics of the training data, and fit() "
                "has not run. Call datagen.fit(x_train) first. (Keras 2 only warned here and "
                "silently skipped the normalisation.)"
            )
        if image_shape is not None and self._featurewise and self._fit_shape is not None:
            fitted = self._fit_shape
            same = fitted == tuple(image_shape) if self.zca_whitening else fitted[-1] == image_shape[-1]
            if not same:
                raise ValueError(
                    f"{where}: images of shape {tuple(image_shape)} do not match the shape "
                    f"{fitted} that fit() saw; fit the generator on images like these."
                )

    # -- statistics

    def fit(self, x: Any, augment: bool = False, rounds: int = 1, seed: int | None = None) -> None:
        """Compute the featurewise statistics of `x` (rank 4), as Keras 2 does.

        Rescales first, then (with `augment`) fits on `rounds` randomly
        transformed copies. Per channel: ``mean`` over samples, rows and columns,
        ``std`` of the centred data; ZCA from the centred (and scaled) data. Only
        what the options need is computed.
        """
        x = _check_images(x, "x", "fit")
        augment = _check_flag(augment, "augment")
        rounds = check_whole("rounds", rounds, 1)
        seed = check_seed(seed)
        if not self._featurewise:
            return  # nothing to learn (Keras 2 copied the data and computed nothing)
        features = int(np.prod(x.shape[1:]))
        if self.zca_whitening:
            if features > MAX_ZCA_FEATURES:
                raise ValueError(
                    f"fit: ZCA whitening needs a {features} x {features} matrix for images of shape "
                    f"{x.shape[1:]} (more than {MAX_ZCA_FEATURES} features); resize the images or "
                    "turn zca_whitening off."
                )
            if len(x) * (rounds if augment else 1) < 2:
                raise ValueError("fit: ZCA whitening needs at least 2 images.")
        data = np.array(x, dtype=np.float32)
        if self.rescale:
            data *= self.rescale
        if augment:
            rng = np.random.default_rng(seed if seed is not None else _fresh_seed())
            data = np.concatenate(
                [
                    self._transform(data[start : start + _FIT_CHUNK].copy(), rng)
                    for _ in range(rounds)
                    for start in range(0, len(data), _FIT_CHUNK)
                ]
            )
        if self.featurewise_center:
            self.mean = data.mean(axis=(0, 1, 2), dtype=np.float64).astype(np.float32).reshape(1, 1, -1)
            data -= self.mean
        if self.featurewise_std_normalization:
            self.std = _channel_std(data).astype(np.float32).reshape(1, 1, -1)
            data /= self.std + 1e-6
        if self.zca_whitening:
            self.zca_whitening_matrix = _zca_matrix(data, self.zca_epsilon)
        self._fit_shape = tuple(int(d) for d in x.shape[1:])

    def standardize(self, x: Any) -> np.ndarray:
        """Keras 2's normalisation: rescale, samplewise, featurewise, ZCA, for one image or a batch.

        Works in place on a writable float32 array (as Keras 2 does) and returns
        it; other input is converted first. Samplewise statistics are per image
        even for a batch (Keras 2 pooled a whole batch given here).
        """
        if isinstance(x, np.ndarray) and x.dtype == np.float32 and x.flags.writeable:
            array = x
        else:
            array = np.array(x, dtype=np.float32)
        if array.ndim not in (3, 4):
            raise ValueError(
                f"standardize: x must be one image (height, width, channels) or a batch of them, "
                f"got shape {array.shape}."
            )
        self._check_fitted("standardize", array.shape[-3:])
        return self._standardize(array)

    def _standardize(self, x: np.ndarray) -> np.ndarray:
        if self.rescale:
            x *= self.rescale
        axes = (-3, -2, -1)
        if self.samplewise_center:
            x -= x.mean(axis=axes, keepdims=True)
        if self.samplewise_std_normalization:
            x /= x.std(axis=axes, keepdims=True) + 1e-6
        if self.featurewise_center:
            x -= self.mean
        if self.featurewise_std_normalization:
            x /= self.std + 1e-6
        if self.zca_whitening:
            features = int(np.prod(x.shape[-3:]))
            x = (x.reshape(-1, features) @ self.zca_whitening_matrix).reshape(x.shape)
        return x

    # -- random transforms

    def _draw(self, n: int, height: int, width: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
        """Transform parameters for `n` images, distributed as Keras 2's (see module docstring)."""
        return {
            "theta": rng.uniform(-self.rotation_range, self.rotation_range, n)
            if self.rotation_range
            else np.zeros(n),
            "tx": _sample_shifts(self._width_shift, width, n, rng),
            "ty": _sample_shifts(self._height_shift, height, n, rng),
            "flip_horizontal": rng.random(n) < 0.5 if self.horizontal_flip else np.zeros(n, bool),
            "flip_vertical": rng.random(n) < 0.5 if self.vertical_flip else np.zeros(n, bool),
        }

    def _apply(self, x: np.ndarray, params: dict[str, np.ndarray]) -> np.ndarray:
        """Apply per-image parameters to a float32 batch; may work in place."""
        theta, tx, ty = params["theta"], params["tx"], params["ty"]
        flip_h, flip_v = params["flip_horizontal"], params["flip_vertical"]
        if not (np.any(theta) or np.any(tx) or np.any(ty)):
            # Flips alone move whole pixels: reindex instead of resampling.
            if flip_h.any():
                x[flip_h] = x[flip_h, :, ::-1]
            if flip_v.any():
                x[flip_v] = x[flip_v, ::-1]
            return x
        height, width = x.shape[1:3]
        coefficients = _affine(theta, tx, ty, flip_h, flip_v, height, width, np)
        return _resample(x, coefficients, self.fill_mode, self.cval)

    def _transform(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        x = np.ascontiguousarray(x, dtype=np.float32)
        if not self._geometric:
            return x
        return self._apply(x, self._draw(len(x), x.shape[1], x.shape[2], rng))

    def get_random_transform(self, img_shape: Sequence[int], seed: int | None = None) -> dict[str, Any]:
        """Random parameters for one image of `img_shape` (height, width, channels), Keras 2's keys."""
        if len(img_shape) != 3:
            raise ValueError(f"img_shape must be (height, width, channels), got {tuple(img_shape)!r}.")
        seed = check_seed(seed)
        rng = np.random.default_rng(seed if seed is not None else _fresh_seed())
        drawn = self._draw(1, int(img_shape[0]), int(img_shape[1]), rng)
        return {
            "theta": float(drawn["theta"][0]),
            "tx": float(drawn["tx"][0]),
            "ty": float(drawn["ty"][0]),
            "shear": 0,
            "zx": 1,
            "zy": 1,
            "flip_horizontal": bool(drawn["flip_horizontal"][0]),
            "flip_vertical": bool(drawn["flip_vertical"][0]),
            "channel_shift_intensity": None,
            "brightness": None,
        }

    def apply_transform(self, x: Any, transform_parameters: dict[str, Any]) -> np.ndarray:
        """Transform one image (height, width, channels) by Keras 2's parameters.

        ``theta`` (degrees, counter-clockwise), ``tx`` (columns: the output at
        column c samples the input at c + tx), ``ty`` (rows), ``flip_horizontal``,
        ``flip_vertical``; the fill is this generator's `fill_mode` and `cval`.
        Keras 2's shear, zoom, channel shift and brightness must be absent or off.
        """
        image = np.asarray(x)
        if image.ndim != 3:
            raise ValueError(
                f"apply_transform: x must be one image (height, width, channels), got {image.shape}."
            )
        if not isinstance(transform_parameters, dict):
            raise TypeError(
                "transform_parameters must be a dict such as {'tx': 3}, got "
                f"{type(transform_parameters).__name__}."
            )
        for key, off in (
            ("shear", 0),
            ("zx", 1),
            ("zy", 1),
            ("channel_shift_intensity", None),
            ("brightness", None),
        ):
            value = transform_parameters.get(key, off)
            if value != off and not (off is None and value is None):
                raise ValueError(
                    f"apply_transform: {key}={value!r} is a Keras 2 transform this generator does not "
                    f"implement; leave it out or set it to {off!r}."
                )
        params = {
            "theta": np.array([float(transform_parameters.get("theta", 0))]),
            "tx": np.array([float(transform_parameters.get("tx", 0))]),
            "ty": np.array([float(transform_parameters.get("ty", 0))]),
            "flip_horizontal": np.array([bool(transform_parameters.get("flip_horizontal", False))]),
            "flip_vertical": np.array([bool(transform_parameters.get("flip_vertical", False))]),
        }
        out = self._apply(np.array(image[None], dtype=np.float32), params)[0]
        return out.astype(image.dtype) if np.issubdtype(image.dtype, np.floating) else out

    def random_transform(self, x: Any, seed: int | None = None) -> np.ndarray:
        """One image, randomly transformed (Keras 2's ``random_transform``)."""
        image = np.asarray(x)
        if image.ndim != 3:
            raise ValueError(
                f"random_transform: x must be one image (height, width, channels), got {image.shape}."
            )
        return self.apply_transform(image, self.get_random_transform(image.shape, seed))

    # -- the three paths

    def flow(
        self,
        x: Any,
        y: Any = None,
        batch_size: int = 32,
        shuffle: bool = True,
        *,
        seed: int | None = None,
        sample_weight: Any = None,
        **kwargs: Any,
    ) -> NumpyArrayIterator:
        """Augmented batches of `x` (and `y`, `sample_weight`) as a ``keras.utils.PyDataset``.

        ``workers``, ``use_multiprocessing`` and ``max_queue_size`` go to the
        PyDataset (Keras 3 reads them there). Yields ``x_batch`` float32, with
        ``y_batch`` (and ``sample_weight``) when given; ``len()`` is
        ``ceil(n / batch_size)``; reshuffles every epoch; the same `seed` gives
        the same batches and augmentations. `seed` and `sample_weight` are
        keyword-only: Keras 2 versions disagree on their positional order.
        """
        from mgtutor.keras2.augment_flow import NumpyArrayIterator

        return NumpyArrayIterator(
            x, y, self, batch_size=batch_size, shuffle=shuffle, seed=seed,
            sample_weight=sample_weight, **kwargs,
        )  # fmt: skip

    def as_dataset(
        self,
        x: Any,
        y: Any = None,
        batch_size: int = 32,
        shuffle: bool = True,
        *,
        seed: int | None = None,
        sample_weight: Any = None,
        drop_remainder: bool = False,
    ) -> Any:
        """The fast path: a ``tf.data.Dataset`` of augmented batches (see `augment_dataset`).

        Shuffles each epoch (seeded by `seed`), batches, augments whole batches
        with TF ops in parallel, and prefetches. Under a distribution strategy
        `batch_size` is the global batch.
        """
        from mgtutor.keras2.augment_tf import arrays_dataset

        x, y, sample_weight, batch_size, seed = self._check_flow_inputs(
            "as_dataset", x, y, sample_weight, batch_size, seed
        )
        shuffle = _check_flag(shuffle, "shuffle")
        drop_remainder = _check_flag(drop_remainder, "drop_remainder")
        return arrays_dataset(self, x, y, sample_weight, batch_size, shuffle, seed, drop_remainder)

    def as_layers(self, *, input_shape: tuple[int, int, int] | None = None, seed: int | None = None) -> Any:
        """The in-model path: a ``keras.Sequential`` of preprocessing layers (see `augmentation_layers`)."""
        from mgtutor.keras2.augment_layers import augmentation_layers

        return augmentation_layers(self, input_shape=input_shape, seed=seed)

    def _check_flow_inputs(self, where: str, x: Any, y: Any, sample_weight: Any, batch_size: Any, seed: Any):
        x = _check_images(x, "x", where)
        y = None if y is None else _as_targets(y)
        sample_weight = None if sample_weight is None else np.asarray(sample_weight, dtype=np.float32)
        _check_lengths(x, y, sample_weight, where)
        batch_size = check_whole("batch_size", batch_size, 1)
        seed = check_seed(seed)
        self._check_fitted(where, x.shape[1:])
        return x, y, sample_weight, batch_size, seed


def _warn(message: str) -> None:
    # The caller of ImageDataGenerator(...), past _keras2_overrides and __init__.
    warnings.warn(f"This ImageDataGenerator specifies {message}", UserWarning, stacklevel=4)


def _as_targets(y: Any) -> np.ndarray:
    targets = np.asarray(y)
    # Keras computes in float32; one-hot labels from to_categorical may be float64.
    return targets.astype(np.float32) if targets.dtype == np.float64 else targets
