"""Argument checks and Keras 2's shift forms, shared by the three augmentation paths."""

from __future__ import annotations

import difflib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mgtutor.support.checks import is_real, is_whole

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


class _GeneratorBase:
    """The base of `mgtutor.keras2.augment.ImageDataGenerator`, and nothing else.

    The flow, tf.data and layers modules check (and annotate) their generator argument
    with this class, so they need not import `mgtutor.keras2.augment`, which imports them.
    """

    __slots__ = ()


def _check_flag(value: Any, name: str) -> bool:
    if isinstance(value, bool | np.bool_) or (is_whole(value) and value in (0, 1)):
        return bool(value)
    raise ValueError(f"{name} must be True or False, got {value!r}.")


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
    if is_real(value):
        if not math.isfinite(value) or value < 0:
            raise ValueError(
                f"{name}={value!r} must be finite and >= 0 (shifts already go both ways); {fix}."
            )
        return _Shift("uniform", (float(value),)) if value > 0 else _Shift("none")
    if isinstance(value, Sequence | np.ndarray):
        array = np.asarray(value)
        if array.ndim != 1 or array.size == 0 or not all(is_real(v) for v in array.tolist()):
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


def _check_settings(
    zca_epsilon: Any, rotation_range: Any, width_shift_range: Any, height_shift_range: Any,
    fill_mode: Any, cval: Any, rescale: Any, data_format: Any,
) -> tuple[_Shift, _Shift]:  # fmt: skip
    """`ImageDataGenerator`'s numeric and mode arguments, checked in its order; the parsed shifts."""
    if not is_real(zca_epsilon) or not (math.isfinite(zca_epsilon) and zca_epsilon > 0):
        raise ValueError(f"zca_epsilon must be a positive number, got {zca_epsilon!r}; the default is 1e-6.")
    if not is_real(rotation_range) or not 0 <= rotation_range <= 180:
        raise ValueError(
            f"rotation_range is in degrees, from 0 to 180, got {rotation_range!r}: rotations go "
            "both ways, so 180 already covers every angle. Pass e.g. rotation_range=15."
        )
    shifts = (
        _parse_shift(width_shift_range, "width_shift_range"),
        _parse_shift(height_shift_range, "height_shift_range"),
    )
    if fill_mode not in FILL_MODES:
        raise ValueError(f"fill_mode must be one of {FILL_MODES}, got {fill_mode!r}.")
    if not is_real(cval) or not math.isfinite(cval):
        raise ValueError(f"cval must be a finite number (the fill for fill_mode='constant'), got {cval!r}.")
    if rescale is not None and (not is_real(rescale) or not math.isfinite(rescale)):
        raise ValueError(f"rescale must be None or a finite number such as 1/255, got {rescale!r}.")
    if data_format not in (None, "channels_last"):
        raise ValueError(
            f"data_format={data_format!r} is not supported: this ImageDataGenerator is "
            "channels_last only (Keras 3's default). Keep images as (samples, height, width, "
            "channels): x.transpose(0, 2, 3, 1) converts channels_first data."
        )
    return shifts


# --------------------------------------------------------------------------- Keras 2 options


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
        return len(value) == 2 and all(is_real(v) and v == 1 for v in value)
    return is_real(value) and value == 0


def _safe_dtype(value: Any) -> Any:
    try:
        return np.dtype(value)
    except TypeError:
        return None
