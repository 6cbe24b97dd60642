"""Keras 2's affine transform as one bilinear resampling, as ``scipy.ndimage.affine_transform(order=1)``.

The coordinate code (`_affine`, `_map_coordinate`, `_axis_lookup`) takes its array
module as `xp`, numpy or tensorflow, so the tf.data path (`mgtutor.keras2.augment_tf`) runs
this very code in TF ops and gives the same pixels: one copy of SciPy's rules, not two.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np


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


def _trunc(a: Any, xp: Any) -> Any:
    return xp.sign(a) * xp.floor(xp.abs(a))  # np.trunc's values; TF has no trunc for floats


def _map_coordinate(coords: Any, n: int, mode: str, xp: Any) -> tuple[Any, Any]:
    """SciPy's boundary handling (``ndimage``'s map_coordinate) of sample positions on an axis of n.

    Returns the positions mapped into the image and, for 'constant', which
    positions fall outside it (those get ``cval``).
    """
    if mode == "constant":
        return xp.minimum(xp.maximum(coords, 0), n - 1), (coords < 0) | (coords > n - 1)
    if n == 1 or mode == "nearest":
        return xp.minimum(xp.maximum(coords, 0), n - 1), None
    if mode == "reflect":  # half-sample symmetric: d c b a | a b c d | d c b a
        period = 2.0 * n
        c = xp.where(coords < -period, period * _trunc(-coords / period, xp) + coords, coords)
        below = xp.where(c < -n, c + period, xp.maximum(-c, 1e-15) - 1)
        c = coords - period * _trunc(coords / period, xp)
        above = xp.where(c >= n, period - c - 1, c)
    else:  # 'wrap': SciPy's legacy wrap repeats with period n - 1 (first and last samples overlap)
        period = n - 1.0
        below = coords + period * (_trunc(-coords / period, xp) + 1)
        above = coords - period * _trunc(coords / period, xp)
    return xp.where(coords < 0, below, xp.where(coords > n - 1, above, coords)), None


def _axis_lookup(coords: Any, n: int, mode: str, xp: Any = np):
    """Neighbour indices, weight of the upper one, and the 'constant' outside mask, on one axis."""
    mapped, outside = _map_coordinate(coords, n, mode, xp)
    lower = xp.floor(mapped)
    if xp is np:
        weight, lower = (mapped - lower).astype(np.float32), lower.astype(np.intp)
    else:  # int32: what tf.gather takes on every device
        weight, lower = xp.cast(mapped - lower, xp.float32), xp.cast(lower, xp.int32)
    upper = lower + 1
    if n == 1:
        return lower * 0, upper * 0, weight, outside
    # After mapping, neighbours lie in [-1, n]; SciPy mirrors those two about the edge
    # sample ('reflect': about the edge itself). Their weight is 0 except for 'reflect'.
    below, above = (0, n - 1) if mode == "reflect" else (1, n - 2)
    return xp.where(lower < 0, below, lower), xp.where(upper >= n, above, upper), weight, outside


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
