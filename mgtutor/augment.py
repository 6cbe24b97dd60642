"""Keras 2's ``ImageDataGenerator`` on Keras 3, plus two fast paths with the same augmentations.

Keras 3 removed ``keras.preprocessing.image.ImageDataGenerator``, which seed 000
(like most Keras 2 tutorials) trains with. The legacy ``tf_keras`` package still
has it, but it transforms one image at a time, in one Python thread, with SciPy
(not installed here: without it, tf_keras's ``flow`` fails on its first batch).
On a multi-GPU machine that thread, not the GPUs, sets the pace. This module
offers the same augmentations three ways:

1. `ImageDataGenerator` and its ``flow``: Keras 2's API and semantics. ``flow``
   returns a ``keras.utils.PyDataset`` (`NumpyArrayIterator`) that transforms a
   whole batch at once with vectorised NumPy, no SciPy, so ``workers`` and
   ``use_multiprocessing`` work the Keras 3 way.
2. `augment_dataset` / ``ImageDataGenerator.as_dataset``: a ``tf.data`` pipeline
   doing the same transforms as batched TF ops, in parallel and prefetched.
3. `augmentation_layers` / ``ImageDataGenerator.as_layers``: Keras 3
   preprocessing layers to put inside the model, so each device augments its own
   slice of the batch (only when ``training=True``) and the CPU never limits
   training.

Faithful to Keras 2 (``tf_keras`` 2.21; tests/unit/test_augment.py compares):
the shift forms (float < 1: fraction of the size; float >= 1: pixels; int n:
whole pixels ``-(n-1)..n-1``; list: a random element times a random sign,
fractions if all are < 1), rotation in degrees about the centre, flips with
probability 0.5, the four fill modes (the NumPy path reproduces
``scipy.ndimage.affine_transform(order=1)`` to float rounding, 'wrap' quirk
included), the order transform -> rescale -> samplewise -> featurewise -> ZCA,
``std + 1e-6`` divisors, and ``fit``'s per-channel mean/std and ZCA matrix
``u diag(sqrt(n) / (s + zca_epsilon)) u.T`` (tf_keras's formula; Keras <= 2.2.4
used ``1 / sqrt(s**2 / n + zca_epsilon)``, the same but for the epsilon).

Where it differs from Keras 2, and why:

- ``width_shift_range`` shifts horizontally by a fraction of the width and
  ``height_shift_range`` vertically, as documented. tf_keras swaps them
  (tf-keras issue #310); for square images and equal ranges (seed 000) the two
  agree exactly in distribution. Rotation turns about the true centre, where
  tf_keras swaps the centre's coordinates on non-square images.
- A featurewise option used before ``fit`` raises `NotFittedError`; Keras 2
  warned and silently skipped the normalisation.
- Random streams: the same seed gives the same augmentations here, not the same
  ones as tf_keras with that seed (the distributions are the same). Each batch
  draws from (seed, epoch, batch index), so worker scheduling cannot change it.
- ``flow`` returns a PyDataset, not a Python iterator: ``for batch in flow``
  cycles forever as in Keras 2 and ``flow.next()`` works, but ``next(flow)``
  does not (use ``next(iter(flow))``), because Keras 3 reads a Python iterator
  on one thread, ignoring ``workers``.
- Not implemented: shear, zoom, channel shift, brightness, a
  ``preprocessing_function``, ``validation_split``, interpolation orders other
  than 1, ``channels_first``. Each is accepted at the value that turns it off,
  so code spelling out every Keras 2 default still runs; any other value
  raises.

Between the paths (each seeded on its own): the tf.data path runs the NumPy
path's boundary code in TF ops (gathers, coordinates in float64), so the same
parameters give the same pixels in all four fill modes (to 2e-6). TF's own
``ImageProjectiveTransformV3`` would not: its 'wrap' repeats with period n, not
SciPy's n - 1, and its 'constant' blends the edge pixel into ``cval``; nor was
it faster on a CPU. The layers path uses Keras 3's ``RandomRotation`` then
``RandomTranslation``: two resamplings when both are on (a little more blur
than Keras 2's one), only the float shift form, and TF's fill semantics just
described ('nearest' and 'reflect' agree with SciPy). And under a
MirroredStrategy, Keras 3's random layers draw the same parameters on every
replica (their seed state is mirrored): image i of each replica's slice gets the
same transform, so a global batch holds only per-replica-batch distinct
transforms. The tf.data path draws for the whole global batch before it is
split, and the towers of `mgtutor.multi_gpu_model` call the layers one after
another, so neither has this coupling.

Importing this module imports Keras (and so TensorFlow) but starts nothing: no
tensor exists until a function runs, so `mgtutor.setup_devices` can follow.
"""

from __future__ import annotations

import difflib
import math
import numbers
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import keras
import numpy as np

from mgtutor._checks import check_whole, is_whole

FILL_MODES = ("nearest", "constant", "reflect", "wrap")
SUPPORTED_ARGUMENTS = (
    "featurewise_center", "samplewise_center", "featurewise_std_normalization",
    "samplewise_std_normalization", "zca_whitening", "zca_epsilon", "rotation_range",
    "width_shift_range", "height_shift_range", "fill_mode", "cval", "horizontal_flip",
    "vertical_flip", "rescale", "data_format",
)  # fmt: skip
# Keras 2 options not implemented here, with the values that switch them off.
_KERAS2_OFF = {
    "shear_range": "0",
    "zoom_range": "0 (or [1, 1])",
    "channel_shift_range": "0",
    "brightness_range": "None",
    "preprocessing_function": "None",
    "validation_split": "0",
    "interpolation_order": "1",
    "dtype": "None or 'float32'",
}
_FLOW_KERAS2_OFF = {
    "save_to_dir": None, "save_prefix": "", "save_format": "png",
    "ignore_class_split": False, "subset": None,
}  # fmt: skip
_PYDATASET_ARGUMENTS = ("workers", "use_multiprocessing", "max_queue_size")
# The d x d matrix ZCA needs: 16384 features (e.g. 73x73x3) is 2 GiB in float64.
MAX_ZCA_FEATURES = 16384
_FIT_CHUNK = 1024  # images per float64 step in fit (bounds its extra memory)


class NotFittedError(RuntimeError):
    """A featurewise option needs the statistics of ``fit(x_train)``, which has not run."""


# --------------------------------------------------------------------------- checks


def _is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool | np.bool_)


def _check_flag(value: Any, name: str) -> bool:
    if isinstance(value, bool | np.bool_) or (is_whole(value) and value in (0, 1)):
        return bool(value)
    raise ValueError(f"{name} must be True or False, got {value!r}.")


def _check_seed(seed: Any, name: str = "seed") -> int | None:
    if seed is None:
        return None
    if not is_whole(seed) or seed < 0:
        raise ValueError(f"{name} must be None or a whole number >= 0, got {seed!r}; pass e.g. {name}=0.")
    return int(seed)


def _fresh_seed() -> int:
    # Drawn from NumPy's global generator, as Keras 2 drew everything, so a
    # tutorial's np.random.seed(...) (or keras.utils.set_random_seed) still
    # makes an unseeded run repeatable.
    return int(np.random.randint(0, 2**31 - 1))


def _check_images(x: Any, name: str, where: str) -> np.ndarray:
    """A rank-4 channels_last batch of numbers, as an array (not copied)."""
    array = np.asarray(x)
    if array.ndim != 4:
        hint = " For one image pass x[None] (a batch of one)." if array.ndim == 3 else ""
        raise ValueError(
            f"{where}: {name} must be a batch of images shaped (samples, height, width, channels), "
            f"got shape {array.shape}.{hint}"
        )
    if not (np.issubdtype(array.dtype, np.number) and not np.issubdtype(array.dtype, np.complexfloating)):
        raise ValueError(
            f"{where}: {name} must hold numbers (e.g. uint8 or float32), got dtype {array.dtype}."
        )
    if len(array) == 0:
        raise ValueError(f"{where}: {name} is empty; pass at least one image.")
    if array.shape[1] in (1, 3, 4) and array.shape[3] not in (1, 3, 4):
        raise ValueError(
            f"{where}: {name} has shape {array.shape}, which looks channels_first (channels, then "
            "height and width). This ImageDataGenerator is channels_last only: pass "
            f"{name}.transpose(0, 2, 3, 1)."
        )
    return array


def _check_lengths(x: np.ndarray, y: Any, sample_weight: Any, where: str) -> None:
    for name, other in (("y", y), ("sample_weight", sample_weight)):
        if other is not None and len(other) != len(x):
            raise ValueError(
                f"{where}: x and {name} differ in length: {len(x)} images, {len(other)} {name} "
                "entries. Pass one per image."
            )


# --------------------------------------------------------------------------- shifts


@dataclass(frozen=True)
class _Shift:
    """One shift range in Keras 2's forms: none, uniform (float), int, or choice (list)."""

    kind: str
    values: tuple[float, ...] = ()

    @property
    def fraction(self) -> bool:
        # Keras 2: `if np.max(range) < 1: shift *= size`; an int n >= 1 is pixels.
        return self.kind in ("uniform", "choice") and max(self.values) < 1


def _parse_shift(value: Any, name: str) -> _Shift:
    fix = (
        f"pass a fraction of the {'width' if name.startswith('width') else 'height'} below 1 "
        "(e.g. 0.1), a number of pixels from 1 up, an int n (whole pixels -(n-1)..n-1), or a "
        "list of values to pick from"
    )
    if isinstance(value, bool | np.bool_) or isinstance(value, str):
        raise ValueError(f"{name} must be a number or a list of numbers, got {value!r}; {fix}.")
    if is_whole(value):
        if value < 0:
            raise ValueError(f"{name}={value} is negative; shifts already go both ways: {fix}.")
        return _Shift("int", (int(value),)) if value > 0 else _Shift("none")
    if _is_real(value):
        if not math.isfinite(value) or value < 0:
            raise ValueError(
                f"{name}={value!r} must be finite and >= 0 (shifts already go both ways); {fix}."
            )
        return _Shift("uniform", (float(value),)) if value > 0 else _Shift("none")
    if isinstance(value, Sequence | np.ndarray):
        array = np.asarray(value)
        if array.ndim != 1 or array.size == 0 or not all(_is_real(v) for v in array.tolist()):
            raise ValueError(f"{name} as a list must be a flat, non-empty list of numbers, got {value!r}.")
        values = tuple(float(v) for v in array.tolist())
        if not all(math.isfinite(v) for v in values):
            raise ValueError(f"{name} holds a non-finite value: {value!r}.")
        return _Shift("choice", values)
    raise ValueError(f"{name} must be a number or a list of numbers, got {type(value).__name__}; {fix}.")


def _sample_shifts(shift: _Shift, size: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """`n` shifts in pixels, drawn as Keras 2's get_random_transform draws one."""
    if shift.kind == "none":
        return np.zeros(n)
    if shift.kind == "uniform":
        drawn = rng.uniform(-shift.values[0], shift.values[0], n)
    else:
        # np.random.choice(int n) picks from range(n); a list, from its elements.
        options = np.arange(shift.values[0]) if shift.kind == "int" else np.asarray(shift.values)
        drawn = options[rng.integers(0, len(options), n)] * rng.choice([-1.0, 1.0], n)
    return drawn * size if shift.fraction else drawn.astype(np.float64)


# --------------------------------------------------------------------------- geometry


def _affine(theta: Any, tx: Any, ty: Any, flip_h: Any, flip_v: Any, height: int, width: int, xp: Any):
    """Per image, the map from an output pixel (row, col) to the input point it samples.

    Keras 2's matrix (shift, then rotation about the centre) with its flips,
    which Keras 2 applies to the result, folded in as index reversals, so one
    resampling does everything. `xp` is numpy or tensorflow; the flips are 0/1
    (bool arrays for NumPy, float tensors for TF). Returns
    ``a00, a01, a10, a11, o0, o1``: in_row = a00*row + a01*col + o0 and
    in_col = a10*row + a11*col + o1.
    """
    radians = theta * (math.pi / 180)
    cos, sin = xp.cos(radians), xp.sin(radians)
    sign_v, sign_h = 1.0 - 2.0 * flip_v, 1.0 - 2.0 * flip_h
    centre_r, centre_c = (height - 1) / 2, (width - 1) / 2
    u0 = flip_v * (height - 1.0) - centre_r + ty
    u1 = flip_h * (width - 1.0) - centre_c + tx
    return (
        cos * sign_v, sin * sign_h, -sin * sign_v, cos * sign_h,
        cos * u0 + sin * u1 + centre_r, -sin * u0 + cos * u1 + centre_c,
    )  # fmt: skip


@dataclass(frozen=True)
class _Ops:
    """The array functions the boundary handling needs, from NumPy or TF: one code for both paths."""

    where: Any
    floor: Any
    clip: Any
    maximum: Any
    trunc: Any
    to_index: Any
    to_float32: Any


_NUMPY_OPS = _Ops(
    np.where,
    np.floor,
    np.clip,
    np.maximum,
    np.trunc,
    lambda a: a.astype(np.intp),
    lambda a: a.astype(np.float32),
)


def _tf_ops() -> _Ops:
    import tensorflow as tf

    return _Ops(
        tf.where, tf.floor, tf.clip_by_value, tf.maximum,
        lambda a: tf.sign(a) * tf.floor(tf.abs(a)),
        lambda a: tf.cast(a, tf.int32), lambda a: tf.cast(a, tf.float32),
    )  # fmt: skip


def _map_coordinate(coords: Any, n: int, mode: str, ops: _Ops) -> tuple[Any, Any]:
    """SciPy's boundary handling (``ndimage``'s map_coordinate) of sample positions on an axis of n.

    Returns the positions mapped into the image and, for 'constant', which
    positions fall outside it (those get ``cval``).
    """
    if mode == "constant":
        return ops.clip(coords, 0, n - 1), (coords < 0) | (coords > n - 1)
    if n == 1 or mode == "nearest":
        return ops.clip(coords, 0, n - 1), None
    if mode == "reflect":  # half-sample symmetric: d c b a | a b c d | d c b a
        period = 2.0 * n
        c = ops.where(coords < -period, period * ops.trunc(-coords / period) + coords, coords)
        below = ops.where(c < -n, c + period, ops.maximum(-c, 1e-15) - 1)
        c = coords - period * ops.trunc(coords / period)
        above = ops.where(c >= n, period - c - 1, c)
    else:  # 'wrap': SciPy's legacy wrap repeats with period n - 1 (first and last samples overlap)
        period = n - 1.0
        below = coords + period * (ops.trunc(-coords / period) + 1)
        above = coords - period * ops.trunc(coords / period)
    return ops.where(coords < 0, below, ops.where(coords > n - 1, above, coords)), None


def _axis_lookup(coords: Any, n: int, mode: str, ops: _Ops = _NUMPY_OPS):
    """Neighbour indices, weight of the upper one, and the 'constant' outside mask, on one axis."""
    mapped, outside = _map_coordinate(coords, n, mode, ops)
    lower = ops.floor(mapped)
    weight = ops.to_float32(mapped - lower)
    lower = ops.to_index(lower)
    upper = lower + 1
    if n == 1:
        return lower * 0, upper * 0, weight, outside
    # After mapping, neighbours lie in [-1, n]; SciPy mirrors those two about the edge
    # sample ('reflect': about the edge itself). Their weight is 0 except for 'reflect'.
    below, above = (0, n - 1) if mode == "reflect" else (1, n - 2)
    return ops.where(lower < 0, below, lower), ops.where(upper >= n, above, upper), weight, outside


def _lerp(a: np.ndarray, b: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """a + (b - a) * weight, in place in `a` and `b` (fresh gathers)."""
    b -= a
    b *= weight
    a += b
    return a


def _resample(x: np.ndarray, coefficients: tuple, mode: str, cval: float) -> np.ndarray:
    """Bilinear resampling of a float32 batch (N, H, W, C), as ``scipy.ndimage.affine_transform``."""
    a00, a01, a10, a11, o0, o1 = coefficients
    n, height, width, channels = x.shape
    flat = x.reshape(-1, channels)
    if not (np.any(a01) or np.any(a10)):
        # No rotation: rows, then columns, resample separately (4x fewer gathers).
        r0, r1, wr, out_r = _axis_lookup(a00[:, None] * np.arange(height) + o0[:, None], height, mode)
        c0, c1, wc, out_c = _axis_lookup(a11[:, None] * np.arange(width) + o1[:, None], width, mode)
        image = np.arange(n)[:, None]
        rows = x[image, r0] if not wr.any() else _lerp(x[image, r0], x[image, r1], wr[:, :, None, None])
        flat = rows.reshape(-1, channels)
        base = (np.arange(n)[:, None, None] * height + np.arange(height)[None, :, None]) * width
        out = np.take(flat, base + c0[:, None, :], axis=0)
        if wc.any():
            out = _lerp(out, np.take(flat, base + c1[:, None, :], axis=0), wc[:, None, :, None])
        if out_r is not None:
            out[out_r[:, :, None] | out_c[:, None, :]] = cval
        return out
    rows, cols = np.arange(height)[None, :, None], np.arange(width)[None, None, :]
    coeff = [c[:, None, None] for c in coefficients]
    r0, r1, wr, out_r = _axis_lookup(coeff[0] * rows + coeff[1] * cols + coeff[4], height, mode)
    c0, c1, wc, out_c = _axis_lookup(coeff[2] * rows + coeff[3] * cols + coeff[5], width, mode)
    base = np.arange(n)[:, None, None] * (height * width)
    r0, r1 = base + r0 * width, base + r1 * width
    wc = wc[..., None]
    top = _lerp(np.take(flat, r0 + c0, axis=0), np.take(flat, r0 + c1, axis=0), wc)
    bottom = _lerp(np.take(flat, r1 + c0, axis=0), np.take(flat, r1 + c1, axis=0), wc)
    out = _lerp(top, bottom, wr[..., None])
    if out_r is not None:
        out[out_r | out_c] = cval
    return out


# --------------------------------------------------------------------------- generator


class ImageDataGenerator:
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
        if not _is_real(zca_epsilon) or not (math.isfinite(zca_epsilon) and zca_epsilon > 0):
            raise ValueError(
                f"zca_epsilon must be a positive number, got {zca_epsilon!r}; the default is 1e-6."
            )
        if not _is_real(rotation_range) or not 0 <= rotation_range <= 180:
            raise ValueError(
                f"rotation_range is in degrees, from 0 to 180, got {rotation_range!r}: rotations go "
                "both ways, so 180 already covers every angle. Pass e.g. rotation_range=15."
            )
        width_shift = _parse_shift(width_shift_range, "width_shift_range")
        height_shift = _parse_shift(height_shift_range, "height_shift_range")
        if fill_mode not in FILL_MODES:
            raise ValueError(f"fill_mode must be one of {FILL_MODES}, got {fill_mode!r}.")
        if not _is_real(cval) or not math.isfinite(cval):
            raise ValueError(
                f"cval must be a finite number (the fill for fill_mode='constant'), got {cval!r}."
            )
        if rescale is not None and (not _is_real(rescale) or not math.isfinite(rescale)):
            raise ValueError(f"rescale must be None or a finite number such as 1/255, got {rescale!r}.")
        if data_format not in (None, "channels_last"):
            raise ValueError(
                f"data_format={data_format!r} is not supported: this ImageDataGenerator is "
                "channels_last only (Keras 3's default). Keep images as (samples, height, width, "
                "channels): x.transpose(0, 2, 3, 1) converts channels_first data."
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

        # Keras 2's overrides, with its warnings.
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
        seed = _check_seed(seed)
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
        seed = _check_seed(seed)
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
        x, y, sample_weight, batch_size, seed = self._check_flow_inputs(
            "as_dataset", x, y, sample_weight, batch_size, seed
        )
        shuffle = _check_flag(shuffle, "shuffle")
        drop_remainder = _check_flag(drop_remainder, "drop_remainder")
        import tensorflow as tf

        seed = seed if seed is not None else _fresh_seed()
        parts = [x] + [part for part in (y, sample_weight) if part is not None]
        dataset = tf.data.Dataset.from_tensor_slices(parts[0] if len(parts) == 1 else tuple(parts))
        if shuffle:
            dataset = dataset.shuffle(len(x), seed=seed, reshuffle_each_iteration=True)
        dataset = dataset.batch(batch_size, drop_remainder=drop_remainder)
        return augment_dataset(dataset, self, seed=seed + 1)

    def as_layers(self, *, input_shape: tuple[int, int, int] | None = None, seed: int | None = None) -> Any:
        """The in-model path: a ``keras.Sequential`` of preprocessing layers (see `augmentation_layers`)."""
        return augmentation_layers(self, input_shape=input_shape, seed=seed)

    def _check_flow_inputs(self, where: str, x: Any, y: Any, sample_weight: Any, batch_size: Any, seed: Any):
        x = _check_images(x, "x", where)
        y = None if y is None else _as_targets(y)
        sample_weight = None if sample_weight is None else np.asarray(sample_weight, dtype=np.float32)
        _check_lengths(x, y, sample_weight, where)
        batch_size = check_whole("batch_size", batch_size, 1)
        seed = _check_seed(seed)
        self._check_fitted(where, x.shape[1:])
        return x, y, sample_weight, batch_size, seed


def _warn(message: str) -> None:
    warnings.warn(f"This ImageDataGenerator specifies {message}", UserWarning, stacklevel=3)


def _check_keras2_options(options: dict[str, Any]) -> None:
    for name, value in options.items():
        if name not in _KERAS2_OFF:
            close = difflib.get_close_matches(name, SUPPORTED_ARGUMENTS + tuple(_KERAS2_OFF), n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise TypeError(
                f"ImageDataGenerator got an unknown argument {name!r}.{hint} Supported: "
                f"{', '.join(SUPPORTED_ARGUMENTS)}."
            )
        if not _keras2_option_off(name, value):
            raise TypeError(
                f"ImageDataGenerator: {name}={value!r} is a Keras 2 option that mgtutor's "
                f"ImageDataGenerator does not implement; remove it or set it to {_KERAS2_OFF[name]}. "
                f"Supported: {', '.join(SUPPORTED_ARGUMENTS)}."
            )


def _keras2_option_off(name: str, value: Any) -> bool:
    if name in ("brightness_range", "preprocessing_function"):
        return value is None
    if name == "dtype":
        return value is None or _safe_dtype(value) == np.float32
    if name == "interpolation_order":
        return is_whole(value) and value == 1
    if name == "zoom_range" and isinstance(value, Sequence | np.ndarray) and not isinstance(value, str):
        return len(value) == 2 and all(_is_real(v) and v == 1 for v in value)
    return _is_real(value) and value == 0


def _safe_dtype(value: Any) -> Any:
    try:
        return np.dtype(value)
    except TypeError:
        return None


def _as_targets(y: Any) -> np.ndarray:
    targets = np.asarray(y)
    # Keras computes in float32; one-hot labels from to_categorical may be float64.
    return targets.astype(np.float32) if targets.dtype == np.float64 else targets


def _channel_std(data: np.ndarray) -> np.ndarray:
    """Per-channel std over samples, rows and columns, in float64 one chunk at a time.

    ``np.std(data, dtype=np.float64)`` would hold a float64 copy of the whole
    data set (1.2 GB for CIFAR-10's training images).
    """
    count = data.size // data.shape[-1]
    sums, squares = np.zeros(data.shape[-1]), np.zeros(data.shape[-1])
    for start in range(0, len(data), _FIT_CHUNK):
        chunk = data[start : start + _FIT_CHUNK].astype(np.float64).reshape(-1, data.shape[-1])
        sums += chunk.sum(axis=0)
        squares += np.einsum("ij,ij->j", chunk, chunk)
    mean = sums / count
    return np.sqrt(np.maximum(squares / count - mean**2, 0.0))


def _zca_matrix(data: np.ndarray, epsilon: float) -> np.ndarray:
    """tf_keras's ZCA matrix ``u diag(sqrt(n) / (s + eps)) u.T``, s the singular values of the data.

    Through the eigendecomposition of the Gram matrix (s**2 are its
    eigenvalues), summed in float64 over chunks: the same matrix as tf_keras's
    SVD of the (features x samples) data, at a fraction of the time and memory.
    Only the min(n, features) largest components are kept, as a thin SVD does.
    """
    n = len(data)
    flat = data.reshape(n, -1)
    gram = np.zeros((flat.shape[1],) * 2)
    for start in range(0, n, _FIT_CHUNK):
        chunk = flat[start : start + _FIT_CHUNK].astype(np.float64)
        gram += chunk.T @ chunk
    eigenvalues, vectors = np.linalg.eigh(gram)
    keep = min(n, flat.shape[1])
    singular = np.sqrt(np.clip(eigenvalues[::-1][:keep], 0, None))
    vectors = vectors[:, ::-1][:, :keep]
    return ((vectors * (math.sqrt(n) / (singular + epsilon))) @ vectors.T).astype(np.float32)


# --------------------------------------------------------------------------- PyDataset


class NumpyArrayIterator(keras.utils.PyDataset):
    """What `ImageDataGenerator.flow` returns: augmented batches of arrays, as a PyDataset.

    Batch `i` of epoch `e` draws its shuffle and transforms from
    ``(seed, e, i)``, so the batches do not depend on which worker makes them or
    in what order. `on_epoch_end` (called by ``fit``) moves to the next epoch's
    shuffle. Iterating cycles forever as Keras 2's iterator did; ``next()``
    returns the next batch.
    """

    def __init__(
        self,
        x: Any,
        y: Any,
        image_data_generator: ImageDataGenerator,
        batch_size: int = 32,
        shuffle: bool = True,
        seed: int | None = None,
        sample_weight: Any = None,
        **kwargs: Any,
    ) -> None:
        if not isinstance(image_data_generator, ImageDataGenerator):
            raise TypeError(
                "image_data_generator must be an mgtutor ImageDataGenerator, got "
                f"{type(image_data_generator).__name__}."
            )
        for name, value in list(kwargs.items()):
            if name in _FLOW_KERAS2_OFF:
                if value != _FLOW_KERAS2_OFF[name]:
                    raise TypeError(
                        f"flow: {name}={value!r} is a Keras 2 option not implemented here; remove it "
                        f"(or pass {_FLOW_KERAS2_OFF[name]!r})."
                    )
                del kwargs[name]
            elif name not in _PYDATASET_ARGUMENTS:
                raise TypeError(
                    f"flow got an unknown argument {name!r}. It takes x, y, batch_size, shuffle, seed, "
                    f"sample_weight and the keras.utils.PyDataset options {', '.join(_PYDATASET_ARGUMENTS)}."
                )
        x, y, sample_weight, batch_size, seed = image_data_generator._check_flow_inputs(
            "flow", x, y, sample_weight, batch_size, seed
        )
        super().__init__(**kwargs)
        self.x, self.y, self.sample_weight = x, y, sample_weight
        self.image_data_generator = image_data_generator
        self.n = len(x)
        self.batch_size = batch_size
        self.shuffle = _check_flag(shuffle, "shuffle")
        self.seed = seed
        self.dtype = "float32"
        self.epoch = 0
        self._base_seed = seed if seed is not None else _fresh_seed()
        self._order_cache: tuple[int, np.ndarray] | None = None
        self._cursor = 0

    def __len__(self) -> int:
        return math.ceil(self.n / self.batch_size)

    def _order(self) -> np.ndarray:
        cached = self._order_cache
        if cached is not None and cached[0] == self.epoch:
            return cached[1]
        if self.shuffle:
            order = np.random.default_rng([self._base_seed, self.epoch]).permutation(self.n)
        else:
            order = np.arange(self.n)
        self._order_cache = (self.epoch, order)
        return order

    def __getitem__(self, index: int) -> Any:
        if not is_whole(index) or not 0 <= index < len(self):
            raise IndexError(f"batch index {index!r} is out of range: this flow has {len(self)} batches.")
        chosen = self._order()[index * self.batch_size : (index + 1) * self.batch_size]
        rng = np.random.default_rng([self._base_seed, self.epoch, int(index), 1])
        generator = self.image_data_generator
        batch_x = generator._standardize(generator._transform(self.x[chosen], rng))
        if self.y is None:
            return batch_x
        if self.sample_weight is None:
            return batch_x, self.y[chosen]
        return batch_x, self.y[chosen], self.sample_weight[chosen]

    def on_epoch_end(self) -> None:
        self.epoch += 1

    def __iter__(self) -> Iterator[Any]:
        while True:  # Keras 2's iterators never ended; loops break out themselves
            for index in range(len(self)):
                yield self[index]
            self.on_epoch_end()

    def next(self) -> Any:
        """The next batch (Keras 2's ``iterator.next()``), moving to a new epoch after the last."""
        if self._cursor >= len(self):
            self._cursor = 0
            self.on_epoch_end()
        self._cursor += 1
        return self[self._cursor - 1]

    def reset(self) -> None:
        """Start `next` again from the first batch of the current epoch."""
        self._cursor = 0


# --------------------------------------------------------------------------- tf.data


def _tf_shifts(shift: _Shift, size: int, n: Any, seed: Any) -> Any:
    import tensorflow as tf

    if shift.kind == "none":
        return tf.zeros([n])
    if shift.kind == "uniform":
        drawn = tf.random.stateless_uniform([n], seed, -shift.values[0], shift.values[0])
    else:
        options = np.arange(shift.values[0]) if shift.kind == "int" else np.asarray(shift.values)
        pick_seed, sign_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
        picked = tf.random.stateless_uniform([n], pick_seed, 0, len(options), dtype=tf.int32)
        sign = tf.where(tf.random.stateless_uniform([n], sign_seed) < 0.5, -1.0, 1.0)
        drawn = tf.gather(tf.constant(options, tf.float32), picked) * sign
    return drawn * size if shift.fraction else drawn


def _tf_draw(generator: ImageDataGenerator, n: Any, height: int, width: int, seed: Any) -> dict[str, Any]:
    """Per-image transform parameters from a stateless seed, distributed as `ImageDataGenerator._draw`."""
    import tensorflow as tf

    seeds = tf.unstack(tf.random.experimental.stateless_split(seed, 5))
    limit = float(generator.rotation_range)
    theta = tf.random.stateless_uniform([n], seeds[0], -limit, limit) if limit else tf.zeros([n])
    no_flip = tf.zeros([n], tf.bool)
    flip_h = tf.random.stateless_uniform([n], seeds[3]) < 0.5 if generator.horizontal_flip else no_flip
    flip_v = tf.random.stateless_uniform([n], seeds[4]) < 0.5 if generator.vertical_flip else no_flip
    return {
        "theta": theta,
        "tx": _tf_shifts(generator._width_shift, width, n, seeds[1]),
        "ty": _tf_shifts(generator._height_shift, height, n, seeds[2]),
        "flip_horizontal": flip_h,
        "flip_vertical": flip_v,
    }


def _tf_apply(images: Any, params: dict[str, Any], generator: ImageDataGenerator) -> Any:
    """`ImageDataGenerator._apply` in TF ops: the same boundary code, so the same pixels.

    Coordinates in float64, as the NumPy path (and SciPy) computes them. Without
    rotation, rows then columns resample separately, as in `_resample`.
    """
    import tensorflow as tf

    height, width, channels = (int(d) for d in images.shape[1:])
    shifts = generator._width_shift.kind != "none" or generator._height_shift.kind != "none"
    if not (generator.rotation_range or shifts):  # flips alone move whole pixels
        if generator.horizontal_flip:
            images = tf.where(params["flip_horizontal"][:, None, None, None], tf.reverse(images, [2]), images)
        if generator.vertical_flip:
            images = tf.where(params["flip_vertical"][:, None, None, None], tf.reverse(images, [1]), images)
        return images
    ops, mode = _tf_ops(), generator.fill_mode
    theta, tx, ty = (tf.cast(params[key], tf.float64) for key in ("theta", "tx", "ty"))
    flip_h, flip_v = (tf.cast(params[key], tf.float64) for key in ("flip_horizontal", "flip_vertical"))
    a00, a01, a10, a11, o0, o1 = _affine(theta, tx, ty, flip_h, flip_v, height, width, tf)
    n = tf.shape(images)[0]
    rows = tf.range(height, dtype=tf.float64)[None, :, None]
    cols = tf.range(width, dtype=tf.float64)[None, None, :]

    def lerp(a: Any, b: Any, weight: Any) -> Any:
        return a + (b - a) * weight

    if not generator.rotation_range:
        r0, r1, wr, out_r = _axis_lookup(a00[:, None] * rows[..., 0] + o0[:, None], height, mode, ops)
        c0, c1, wc, out_c = _axis_lookup(a11[:, None] * cols[:, 0] + o1[:, None], width, mode, ops)
        rows_done = lerp(
            tf.gather(images, r0, axis=1, batch_dims=1),
            tf.gather(images, r1, axis=1, batch_dims=1),
            wr[:, :, None, None],
        )
        flat = tf.reshape(rows_done, [-1, channels])
        base = (tf.range(n)[:, None, None] * height + tf.range(height)[None, :, None]) * width
        out = lerp(
            tf.gather(flat, base + c0[:, None, :]),
            tf.gather(flat, base + c1[:, None, :]),
            wc[:, None, :, None],
        )
        outside = None if out_r is None else out_r[:, :, None] | out_c[:, None, :]
    else:
        c = [coefficient[:, None, None] for coefficient in (a00, a01, a10, a11, o0, o1)]
        r0, r1, wr, out_r = _axis_lookup(c[0] * rows + c[1] * cols + c[4], height, mode, ops)
        c0, c1, wc, out_c = _axis_lookup(c[2] * rows + c[3] * cols + c[5], width, mode, ops)
        flat = tf.reshape(images, [-1, channels])
        base = tf.range(n)[:, None, None] * (height * width)
        r0, r1, wc = base + r0 * width, base + r1 * width, wc[..., None]
        top = lerp(tf.gather(flat, r0 + c0), tf.gather(flat, r0 + c1), wc)
        bottom = lerp(tf.gather(flat, r1 + c0), tf.gather(flat, r1 + c1), wc)
        out = lerp(top, bottom, wr[..., None])
        outside = None if out_r is None else out_r | out_c
    if outside is not None:
        out = tf.where(outside[..., None], tf.constant(generator.cval, tf.float32), out)
    return out


def _tf_augment(images: Any, seed: Any, generator: ImageDataGenerator) -> Any:
    """Transform and standardise one batch with TF ops (the tf.data path)."""
    import tensorflow as tf

    images = tf.cast(images, tf.float32)
    if generator._geometric:
        height, width = int(images.shape[1]), int(images.shape[2])
        params = _tf_draw(generator, tf.shape(images)[0], height, width, seed)
        images = _tf_apply(images, params, generator)
    return _tf_standardize(images, generator)


def _tf_standardize(images: Any, generator: ImageDataGenerator) -> Any:
    import tensorflow as tf

    if generator.rescale:
        images = images * generator.rescale
    if generator.samplewise_center:
        images = images - tf.reduce_mean(images, axis=[1, 2, 3], keepdims=True)
    if generator.samplewise_std_normalization:
        images = images / (tf.math.reduce_std(images, axis=[1, 2, 3], keepdims=True) + 1e-6)
    if generator.featurewise_center:
        images = images - tf.constant(generator.mean)
    if generator.featurewise_std_normalization:
        images = images / tf.constant(generator.std + 1e-6)
    if generator.zca_whitening:
        shape = tf.shape(images)
        flat = tf.reshape(images, [shape[0], -1])
        images = tf.reshape(flat @ tf.constant(generator.zca_whitening_matrix), shape)
    return images


def augment_dataset(dataset: Any, generator: ImageDataGenerator, *, seed: int | None = None) -> Any:
    """Augment a batched ``tf.data.Dataset`` the way `generator` would, with TF ops.

    `dataset` yields batches of images (N, H, W, C), alone or first in a tuple
    such as ``(images, labels)``; the images come out float32, transformed and
    standardised, everything else unchanged. Runs with
    ``num_parallel_calls=AUTOTUNE`` and prefetches. Each batch's randomness comes
    from `seed` through ``tf.data.Dataset.random``, so the same seed gives the
    same augmentations, and each epoch new ones.
    """
    import tensorflow as tf

    if not isinstance(generator, ImageDataGenerator):
        raise TypeError(f"generator must be an mgtutor ImageDataGenerator, got {type(generator).__name__}.")
    if not isinstance(dataset, tf.data.Dataset):
        raise TypeError(
            f"dataset must be a tf.data.Dataset, got {type(dataset).__name__}; for arrays use "
            "generator.as_dataset(x, y, batch_size)."
        )
    seed = _check_seed(seed)
    spec = dataset.element_spec
    tuple_like = isinstance(spec, tuple)
    images_spec = spec[0] if tuple_like and spec else spec
    if not isinstance(images_spec, tf.TensorSpec):
        raise TypeError(
            "dataset must yield image batches, alone or first in a tuple such as (images, labels); "
            f"its elements are {spec}."
        )
    shape = images_spec.shape
    if shape.rank != 4:
        raise ValueError(
            f"dataset yields images of shape {shape}; augment_dataset works on whole batches "
            "(N, height, width, channels): batch the dataset first, e.g. dataset.batch(32)."
        )
    if None in shape[1:]:
        raise ValueError(f"dataset images need a known height, width and channels, got {shape}.")
    generator._check_fitted("augment_dataset", tuple(shape[1:]))
    seed = seed if seed is not None else _fresh_seed()

    def augment(batch: Any, pair: Any) -> Any:
        if tuple_like:
            return (_tf_augment(batch[0], pair, generator), *batch[1:])
        return _tf_augment(batch, pair, generator)

    seeds = tf.data.Dataset.random(seed=seed, rerandomize_each_iteration=True).batch(2)
    augmented = tf.data.Dataset.zip((dataset, seeds)).map(
        augment, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
    )
    return augmented.prefetch(tf.data.AUTOTUNE)


# --------------------------------------------------------------------------- layers


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


def augmentation_layers(
    generator: ImageDataGenerator,
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
    if not isinstance(generator, ImageDataGenerator):
        raise TypeError(f"generator must be an mgtutor ImageDataGenerator, got {type(generator).__name__}.")
    seed = _check_seed(seed)
    if input_shape is not None and (
        not isinstance(input_shape, tuple | list)
        or len(input_shape) != 3
        or not all(is_whole(v) and v >= 1 for v in input_shape)
    ):
        raise ValueError(f"input_shape must be (height, width, channels), got {input_shape!r}.")
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
