"""The tf.data path: `ImageDataGenerator`'s augmentations as batched TF ops (``as_dataset``).

It runs the NumPy path's boundary code in TF ops, so the same parameters give the
same pixels in all four fill modes (to 2e-6); TF's ``ImageProjectiveTransformV3``
would not ('wrap' and 'constant' differ from SciPy) and was not faster on a CPU.
It draws transforms for the whole global batch before the split, so replicas never
share them (Keras 3's random layers under MirroredStrategy do: see augment_layers).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mgtutor.keras2.augment_checks import _fresh_seed, _GeneratorBase, _Shift
from mgtutor.keras2.augment_resample import _affine, _axis_lookup
from mgtutor.support.checks import check_seed
from mgtutor.support.tfdata import without_autotuner


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


def _tf_draw(generator: _GeneratorBase, n: Any, height: int, width: int, seed: Any) -> dict[str, Any]:
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


def _tf_apply(images: Any, params: dict[str, Any], generator: _GeneratorBase) -> Any:
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
    mode = generator.fill_mode
    theta, tx, ty = (tf.cast(params[key], tf.float64) for key in ("theta", "tx", "ty"))
    flip_h, flip_v = (tf.cast(params[key], tf.float64) for key in ("flip_horizontal", "flip_vertical"))
    a00, a01, a10, a11, o0, o1 = _affine(theta, tx, ty, flip_h, flip_v, height, width, tf)
    n = tf.shape(images)[0]
    rows = tf.range(height, dtype=tf.float64)[None, :, None]
    cols = tf.range(width, dtype=tf.float64)[None, None, :]

    def lerp(a: Any, b: Any, weight: Any) -> Any:
        return a + (b - a) * weight

    if not generator.rotation_range:
        r0, r1, wr, out_r = _axis_lookup(a00[:, None] * rows[..., 0] + o0[:, None], height, mode, tf)
        c0, c1, wc, out_c = _axis_lookup(a11[:, None] * cols[:, 0] + o1[:, None], width, mode, tf)
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
        r0, r1, wr, out_r = _axis_lookup(c[0] * rows + c[1] * cols + c[4], height, mode, tf)
        c0, c1, wc, out_c = _axis_lookup(c[2] * rows + c[3] * cols + c[5], width, mode, tf)
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


def _tf_augment(images: Any, seed: Any, generator: _GeneratorBase) -> Any:
    """Transform and standardise one batch with TF ops (the tf.data path)."""
    import tensorflow as tf

    images = tf.cast(images, tf.float32)
    if generator._geometric:
        height, width = int(images.shape[1]), int(images.shape[2])
        params = _tf_draw(generator, tf.shape(images)[0], height, width, seed)
        images = _tf_apply(images, params, generator)
    return _tf_standardize(images, generator)


def _tf_standardize(images: Any, generator: _GeneratorBase) -> Any:
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


def augment_dataset(dataset: Any, generator: _GeneratorBase, *, seed: int | None = None) -> Any:
    """Augment a batched ``tf.data.Dataset`` the way `generator` would, with TF ops.

    `dataset` yields batches of images (N, H, W, C), alone or first in a tuple
    such as ``(images, labels)``; the images come out float32, transformed and
    standardised, everything else unchanged. Runs with
    ``num_parallel_calls=AUTOTUNE`` and prefetches. Each batch's randomness comes
    from `seed` through ``tf.data.Dataset.random``, so the same seed gives the
    same augmentations, and each epoch new ones.
    """
    import tensorflow as tf

    if not isinstance(generator, _GeneratorBase):
        raise TypeError(f"generator must be an mgtutor ImageDataGenerator, got {type(generator).__name__}.")
    if not isinstance(dataset, tf.data.Dataset):
        raise TypeError(
            f"dataset must be a tf.data.Dataset, got {type(dataset).__name__}; for arrays use "
            "generator.as_dataset(x, y, batch_size)."
        )
    seed = check_seed(seed)
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
    return without_autotuner(augmented.prefetch(tf.data.AUTOTUNE))


def arrays_dataset(
    generator: _GeneratorBase, x: np.ndarray, y: Any, sample_weight: Any, batch_size: int,
    shuffle: bool, seed: int | None, drop_remainder: bool,
) -> Any:  # fmt: skip
    """`ImageDataGenerator.as_dataset` on checked arrays: shuffle each epoch, batch, augment."""
    import tensorflow as tf

    seed = seed if seed is not None else _fresh_seed()
    parts = [x] + [part for part in (y, sample_weight) if part is not None]
    dataset = tf.data.Dataset.from_tensor_slices(parts[0] if len(parts) == 1 else tuple(parts))
    if shuffle:
        dataset = dataset.shuffle(len(x), seed=seed, reshuffle_each_iteration=True)
    dataset = dataset.batch(batch_size, drop_remainder=drop_remainder)
    return augment_dataset(dataset, generator, seed=seed + 1)
