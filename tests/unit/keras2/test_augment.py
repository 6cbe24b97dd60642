"""mgtutor.keras2.augment: Keras 2's ImageDataGenerator, checked against tf_keras's, and its fast paths.

Parity runs against the legacy ``tf_keras`` package's ImageDataGenerator. Its
transforms call ``scipy.ndimage.affine_transform``, and SciPy is not installed
here (tf_keras's ``flow`` then fails on its first batch), so when SciPy is
missing tf_keras is given `_NdimageStandIn`: a plain float64 transcription of
SciPy's order-1 resampling, which agreed with SciPy 1.17.1 to 1e-14 over 12,000
random affine transforms in the four fill modes. Everything else on tf_keras's
side (the random draws, the matrices, the centring, the flips) is its own code.

Seed 000's training cell runs in test_seed_scripts.py, with the rest of its code.
"""

from __future__ import annotations

import math
import types
import warnings

import keras
import numpy as np
import pytest

from mgtutor.keras2.augment import ImageDataGenerator, NotFittedError, augment_dataset
from mgtutor.keras2.augment_tf import _tf_apply

DRAWS = 2000  # images per rate/distribution check: a 0.5 rate lands in 0.45..0.55 with p > 0.9999
SIZE = 32
SHIFT = 0.1  # seed 000's width/height_shift_range: up to 3.2 px on 32 px
MAX_PX = SHIFT * SIZE
UNIFORM_STD = MAX_PX / math.sqrt(3)  # std of U(-3.2, 3.2): 1.848


# --------------------------------------------------------------------------- helpers


class _NdimageStandIn:
    """SciPy's ``ndimage.affine_transform(order=1)`` for tf_keras when SciPy is not installed."""

    @staticmethod
    def _map(c: np.ndarray, n: int, mode: str) -> tuple[np.ndarray, np.ndarray]:
        """SciPy's map_coordinate: the sample position mapped into [0, n - 1] (or just below)."""
        if mode == "constant":
            return np.clip(c, 0, n - 1), (c < 0) | (c > n - 1)
        outside = np.zeros(c.shape, bool)
        if mode == "nearest" or n == 1:
            return np.clip(c, 0, n - 1), outside
        out, low, high = c.copy(), c < 0, c > n - 1
        if mode == "reflect":
            period = 2 * n
            m = c[low]
            m = np.where(m < -period, period * np.trunc(-m / period) + m, m)
            out[low] = np.where(m < -n, m + period, np.where(m > -1e-15, 1e-15, -m) - 1)
            m = c[high] - period * np.trunc(c[high] / period)
            out[high] = np.where(m >= n, period - m - 1, m)
        else:  # 'wrap', SciPy's legacy one: period n - 1
            period = n - 1
            out[low] = c[low] + period * (np.trunc(-c[low] / period) + 1)
            out[high] = c[high] - period * np.trunc(c[high] / period)
        return out, outside

    @classmethod
    def affine_transform(cls, image, matrix, offset, order=1, mode="constant", cval=0.0):
        assert order == 1, "tf_keras's default interpolation_order is 1"
        h, w = image.shape
        r, c = np.meshgrid(np.arange(h, dtype=float), np.arange(w, dtype=float), indexing="ij")
        lookups, mask = [], np.zeros((h, w), bool)
        for coords, n in (
            (matrix[0][0] * r + matrix[0][1] * c + offset[0], h),
            (matrix[1][0] * r + matrix[1][1] * c + offset[1], w),
        ):
            mapped, outside = cls._map(coords, n, mode)
            lo = np.floor(mapped).astype(int)
            # neighbours just outside: SciPy mirrors them ('reflect': reflects)
            below, above = (0, n - 1) if mode == "reflect" else (min(1, n - 1), max(n - 2, 0))
            lookups.append((np.where(lo < 0, below, lo), np.where(lo + 1 >= n, above, lo + 1), mapped - lo))
            mask |= outside
        (r0, r1, fr), (c0, c1, fc) = lookups
        top = (1 - fc) * image[r0, c0] + fc * image[r0, c1]
        bottom = (1 - fc) * image[r1, c0] + fc * image[r1, c1]
        return np.where(mask, cval, (1 - fr) * top + fr * bottom).astype(image.dtype)


@pytest.fixture(scope="module")
def legacy():
    """tf_keras's ImageDataGenerator class, able to transform (SciPy or its stand-in)."""
    try:
        from tf_keras.src.preprocessing import image as legacy_image
    except ImportError as err:  # pragma: no cover - tf_keras is in the dev extras
        pytest.skip(f"tf_keras cannot be imported ({err}); the parity tests compare against it")
    with pytest.MonkeyPatch.context() as patch:
        if getattr(legacy_image, "scipy", None) is None:
            stand_in = types.SimpleNamespace(
                interpolation=_NdimageStandIn, affine_transform=_NdimageStandIn.affine_transform
            )
            patch.setattr(legacy_image, "scipy", types.SimpleNamespace(ndimage=stand_in), raising=False)
            patch.setattr(legacy_image, "ndimage", stand_in, raising=False)
        yield legacy_image.ImageDataGenerator


def _point_images(n: int, size: int = SIZE, row: int = 16, col: int = 16) -> np.ndarray:
    """`n` black images, one bright pixel: its centroid after a transform shows the transform."""
    x = np.zeros((n, size, size, 1), np.float32)
    x[:, row, col, 0] = 1.0
    return x


def _probes(n: int) -> np.ndarray:
    """Channel 0 a bright pixel at (16, 16) (shifts), channel 1 a left-to-right ramp (flips)."""
    ramp = np.broadcast_to(np.linspace(0, 1, SIZE, dtype=np.float32), (n, SIZE, SIZE))
    return np.concatenate([_point_images(n), ramp[..., None]], axis=-1)


def _flips_and_shifts(images: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """From transformed `_probes`: which were mirrored, and their vertical and horizontal shifts.

    The shift comes first, then the flip (Keras 2's order): mirrored, the point
    at column 16 - tx lands at 31 - (16 - tx) = 15 + tx.
    """
    images = np.asarray(images)
    flipped = images[..., : SIZE // 2, 1].mean(axis=(1, 2)) > images[..., SIZE // 2 :, 1].mean(axis=(1, 2))
    rows, cols = _centroids(images[..., :1])
    return flipped, 16 - rows, np.where(flipped, cols - 15, 16 - cols)


def _centroids(images: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Intensity-weighted (row, col) of each image; bilinear resampling keeps a point's centroid."""
    weights = np.asarray(images, np.float64)[..., 0]
    total = weights.sum(axis=(1, 2))
    rows = (weights.sum(axis=2) * np.arange(weights.shape[1])).sum(axis=1) / total
    cols = (weights.sum(axis=1) * np.arange(weights.shape[2])).sum(axis=1) / total
    return rows, cols


def _ramps(n: int, size: int = 8) -> np.ndarray:
    """Images increasing left to right (so a horizontal flip is visible), with their index on top."""
    x = np.tile(np.arange(size, dtype=np.float32), (n, size, 1))[..., None]
    return x + np.arange(n, dtype=np.float32)[:, None, None, None] * 100


def _flipped(batch: np.ndarray) -> np.ndarray:
    """Which images of a batch of `_ramps` are mirrored left-right."""
    return np.asarray(batch)[:, 0, 0, 0] > np.asarray(batch)[:, 0, -1, 0]


def _collect(flow) -> np.ndarray:
    """All images of one epoch of a flow, in batch order."""
    batches = (flow[i] for i in range(len(flow)))
    return np.concatenate([batch[0] if isinstance(batch, tuple) else batch for batch in batches])


def _check_uniform_shifts(shifts: np.ndarray, label: str) -> None:
    assert np.all(np.abs(shifts) <= MAX_PX + 1e-3), f"{label}: a shift beyond {MAX_PX} px"
    assert np.abs(shifts).max() > 0.97 * MAX_PX, f"{label}: the range is not used to its end"
    assert abs(shifts.mean()) < 0.15, f"{label}: shifts are not centred on 0"
    assert abs(shifts.std() - UNIFORM_STD) < 0.06 * UNIFORM_STD, f"{label}: not uniform over the range"
    counts = np.histogram(shifts, bins=8, range=(-MAX_PX, MAX_PX))[0]
    assert counts.min() > 0.75 * len(shifts) / 8, f"{label}: histogram {counts} is not flat"


# --------------------------------------------------------------------------- arguments


def test_unknown_argument_is_a_type_error_naming_it_and_listing_the_supported_ones():
    with pytest.raises(
        TypeError, match=r"'widht_shift_range'.*Did you mean 'width_shift_range'.*rotation_range"
    ):
        ImageDataGenerator(widht_shift_range=0.1)
    with pytest.raises(TypeError, match=r"zoom_range=0.2 is a Keras 2 option .* set it to 0"):
        ImageDataGenerator(zoom_range=0.2)
    # Keras 2 code that spells out every default (Keras' cifar10_cnn.py does) still runs.
    generator = ImageDataGenerator(
        zca_epsilon=1e-06, shear_range=0.0, zoom_range=0.0, channel_shift_range=0.0,
        fill_mode="nearest", cval=0.0, rescale=None, preprocessing_function=None,
        data_format=None, validation_split=0.0,
    )  # fmt: skip
    assert generator.data_format == "channels_last"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"width_shift_range": -0.1}, r"width_shift_range=-0.1 must be finite and >= 0 .*both ways"),
        ({"height_shift_range": -2}, r"height_shift_range=-2 is negative"),
        ({"height_shift_range": float("inf")}, r"height_shift_range=inf must be finite"),
        ({"width_shift_range": [[1, 2]]}, r"flat, non-empty list"),
        ({"rotation_range": 270}, r"rotation_range is in degrees, from 0 to 180"),
        ({"rotation_range": -10}, r"from 0 to 180"),
        ({"fill_mode": "mirror"}, r"fill_mode must be one of \('nearest', 'constant', 'reflect', 'wrap'\)"),
        ({"data_format": "channels_first"}, r"channels_last only.*transpose\(0, 2, 3, 1\)"),
        ({"horizontal_flip": "yes"}, r"horizontal_flip must be True or False"),
        ({"zca_epsilon": 0}, r"zca_epsilon must be a positive number"),
    ],
)
def test_out_of_range_values_are_value_errors_with_the_fix(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ImageDataGenerator(**kwargs)


def test_featurewise_options_before_fit_raise_instead_of_warning():
    generator = ImageDataGenerator(featurewise_center=True, featurewise_std_normalization=True)
    x = np.zeros((4, 8, 8, 3), np.float32)
    for use in (
        lambda: generator.flow(x, batch_size=2),
        lambda: generator.standardize(x[0]),
        lambda: generator.as_dataset(x, batch_size=2),
        lambda: generator.as_layers(),
    ):
        with pytest.raises(
            NotFittedError, match=r"featurewise_center, featurewise_std_normalization.*datagen\.fit"
        ):
            use()
    generator.fit(np.random.default_rng(0).random((20, 8, 8, 3)))
    with pytest.raises(ValueError, match=r"do not match the shape \(8, 8, 3\) that fit\(\) saw"):
        generator.flow(np.zeros((4, 8, 8, 1)))


def test_flow_rejects_bad_input_before_any_work():
    generator = ImageDataGenerator()
    cases = [
        ((np.zeros((8, 8, 3)),), {}, ValueError, r"shaped \(samples, height, width, channels\).*x\[None\]"),
        ((np.zeros((4, 3, 8, 8)),), {}, ValueError, r"looks channels_first.*transpose\(0, 2, 3, 1\)"),
        ((np.zeros((4, 8, 8, 3)), np.zeros(3)), {}, ValueError, r"4 images, 3 y entries"),
        ((np.zeros((4, 8, 8, 3)),), {"batch_size": 0}, ValueError, r"batch_size must be a whole number >= 1"),
        ((np.zeros((4, 8, 8, 3)),), {"seed": -1}, ValueError, r"seed must be None or a whole number"),
        (
            (np.zeros((4, 8, 8, 3)),),
            {"save_to_dir": "out"},
            TypeError,
            r"save_to_dir='out' is a Keras 2 option",
        ),
        (
            (np.zeros((4, 8, 8, 3)),),
            {"num_workers": 2},
            TypeError,
            r"unknown argument 'num_workers'.*workers",
        ),
    ]
    for args, kwargs, error, message in cases:
        with pytest.raises(error, match=message):
            generator.flow(*args, **kwargs)


# --------------------------------------------------------------------------- the numpy path


def test_flow_is_a_pydataset_of_float32_batches_covering_each_epoch_once():
    n, batch = 100, 32
    x = np.broadcast_to(np.arange(n, dtype=np.uint8)[:, None, None, None], (n, 4, 4, 3)).copy()
    y = np.arange(n)
    flow = ImageDataGenerator().flow(x, y, batch_size=batch, seed=1, workers=2, max_queue_size=4)
    assert isinstance(flow, keras.utils.PyDataset) and (flow.workers, flow.max_queue_size) == (2, 4)
    assert len(flow) == math.ceil(n / batch) == 4
    batches = [flow[i] for i in range(len(flow))]
    assert [len(b[0]) for b in batches] == [32, 32, 32, 4]
    assert all(b[0].dtype == np.float32 and b[0].shape[1:] == (4, 4, 3) for b in batches)
    first = np.concatenate([b[1] for b in batches])
    assert sorted(first) == list(range(n)) and list(first) != list(range(n))  # all, once, shuffled
    assert all(np.array_equal(b[0][:, 0, 0, 0], b[1]) for b in batches)  # images travel with labels
    flow.on_epoch_end()
    second = np.concatenate([flow[i][1] for i in range(len(flow))])
    assert sorted(second) == list(range(n)) and list(second) != list(first)  # reshuffled
    weighted = ImageDataGenerator().flow(x, y, batch_size=batch, sample_weight=np.ones(n), shuffle=False)
    assert len(weighted[0]) == 3 and np.array_equal(weighted[0][1], np.arange(32))
    alone = ImageDataGenerator().flow(x, batch_size=batch)[3]
    assert isinstance(alone, np.ndarray) and alone.shape == (4, 4, 4, 3)


def test_same_seed_same_augmentations_whatever_the_order_batches_are_made():
    x = _ramps(64)
    generator = ImageDataGenerator(rotation_range=20, width_shift_range=0.2, height_shift_range=2,
                                   horizontal_flip=True, vertical_flip=True)  # fmt: skip
    a, b = generator.flow(x, batch_size=16, seed=7), generator.flow(x, batch_size=16, seed=7)
    forward = [a[i] for i in range(4)]
    backward = [b[i] for i in reversed(range(4))][::-1]  # workers may make batches in any order
    assert all(np.array_equal(f, g) for f, g in zip(forward, backward, strict=True))
    assert not np.array_equal(generator.flow(x, batch_size=16, seed=8)[0], forward[0])
    assert not np.array_equal(forward[0], x[:16])  # it did transform
    it = generator.flow(x, batch_size=16, seed=7)
    assert np.array_equal(it.next(), forward[0]) and np.array_equal(next(iter(it)), forward[0])


def test_standardize_follows_keras2_order_per_image():
    rng = np.random.default_rng(0)
    x = rng.random((6, 5, 5, 3)).astype(np.float32) * 255
    generator = ImageDataGenerator(rescale=1 / 255, samplewise_center=True, samplewise_std_normalization=True)
    out = generator.standardize(x.copy())
    assert out.dtype == np.float32
    np.testing.assert_allclose(out.mean(axis=(1, 2, 3)), 0, atol=1e-5)
    np.testing.assert_allclose(out.std(axis=(1, 2, 3)), 1, atol=1e-4)
    single = generator.standardize(x[2].copy())
    np.testing.assert_allclose(single, out[2], atol=1e-5)


# --------------------------------------------------------------------------- parity with tf_keras


def test_fit_statistics_match_tf_keras(legacy):
    rng = np.random.default_rng(0)
    x = rng.random((600, 6, 6, 3)).astype(np.float32)  # 108 features < 600 images: ZCA is well defined
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # both warn that zca_whitening overrides featurewise_center
        for kwargs in (
            {"featurewise_center": True, "featurewise_std_normalization": True},
            {"zca_whitening": True, "zca_epsilon": 1e-6},
            {"featurewise_center": True, "featurewise_std_normalization": True, "rescale": 2.0},
        ):
            old, new = legacy(**kwargs), ImageDataGenerator(**kwargs)
            old.fit(x)
            new.fit(x)
            for name in ("mean", "std"):
                if getattr(old, name) is not None:
                    assert getattr(new, name).shape == (1, 1, 3)
                    np.testing.assert_allclose(getattr(new, name), getattr(old, name), rtol=1e-5, atol=1e-6)
            if old.zca_whitening_matrix is not None:
                scale = np.abs(old.zca_whitening_matrix).max()
                assert new.zca_whitening_matrix.shape == (108, 108)
                assert np.abs(new.zca_whitening_matrix - old.zca_whitening_matrix).max() < 1e-4 * scale
            np.testing.assert_allclose(
                new.standardize(x[:8].copy()), old.standardize(x[:8].copy()), atol=1e-4
            )


def test_horizontal_flip_rate_is_one_half_like_tf_keras(legacy):
    x = _ramps(DRAWS)
    ours = _collect(ImageDataGenerator(horizontal_flip=True).flow(x, batch_size=500, shuffle=False, seed=0))
    theirs = next(iter(legacy(horizontal_flip=True).flow(x, batch_size=DRAWS, shuffle=False, seed=0)))
    for label, batch in (("ours", ours), ("tf_keras", theirs)):
        rate = _flipped(batch).mean()
        assert 0.45 <= rate <= 0.55, f"{label}: flip rate {rate}"
        # a flip moves whole pixels: every image is the original or its mirror image
        mirror = np.where(_flipped(batch)[:, None, None, None], x[:, :, ::-1], x)
        np.testing.assert_array_equal(batch, mirror)


def test_shifts_are_uniform_over_the_range_like_tf_keras(legacy):
    """seed 000's shifts recovered image by image from where a bright pixel lands."""
    x = _point_images(DRAWS)
    kwargs = {"width_shift_range": SHIFT, "height_shift_range": SHIFT}
    ours = _collect(ImageDataGenerator(**kwargs).flow(x, batch_size=500, shuffle=False, seed=0))
    theirs = next(iter(legacy(**kwargs).flow(x, batch_size=DRAWS, shuffle=False, seed=0)))
    shifts = {}
    for label, batch in (("ours", ours), ("tf_keras", theirs)):
        rows, cols = _centroids(batch)
        np.testing.assert_allclose(np.asarray(batch).sum(axis=(1, 2, 3)), 1, atol=1e-5)  # nothing lost
        for axis, moved in (("vertical", 16 - rows), ("horizontal", 16 - cols)):
            _check_uniform_shifts(moved, f"{label} {axis}")
            shifts[label, axis] = np.sort(moved)
    for axis in ("vertical", "horizontal"):  # same distribution: quantiles agree
        quantiles = np.linspace(0.05, 0.95, 19)
        gap = np.abs(
            np.quantile(shifts["ours", axis], quantiles) - np.quantile(shifts["tf_keras", axis], quantiles)
        )
        assert gap.max() < 0.35, f"{axis}: quantiles differ by up to {gap.max():.2f} px"


def test_shift_forms_draw_the_values_tf_keras_draws(legacy):
    """Float, int and list forms; tf_keras draws width_shift_range into 'ty' (its axis swap)."""
    shape = (16, 24, 1)  # non-square: a fraction of the width (24) and of the height differ
    for form, expected in (
        (2, {-1.0, 0.0, 1.0}),
        ([1, 3], {-3.0, -1.0, 1.0, 3.0}),
        ((0.125, 0.25), {-6.0, -3.0, 3.0, 6.0}),
    ):
        ours = {
            ImageDataGenerator(width_shift_range=form).get_random_transform(shape, seed=s)["tx"]
            for s in range(200)
        }
        theirs = {float(legacy(width_shift_range=form).get_random_transform(shape)["ty"]) for _ in range(200)}
        assert ours == theirs == expected, form
    for form, limit in ((0.25, 6.0), (2.0, 2.0)):  # fraction of 24 px; 2.0 px as a float
        ours = [
            ImageDataGenerator(width_shift_range=form).get_random_transform(shape, seed=s)["tx"]
            for s in range(300)
        ]
        theirs = [legacy(width_shift_range=form).get_random_transform(shape)["ty"] for _ in range(300)]
        for drawn in (ours, theirs):
            assert max(np.abs(drawn)) <= limit and max(np.abs(drawn)) > 0.9 * limit and len(set(drawn)) == 300
    # The one difference: ours moves a width shift sideways, as documented; tf_keras
    # moves it up or down (tf-keras issue #310). [3]: 3 px, random sign.
    image = _point_images(1, 16, row=8, col=8)[0]
    for seed in range(4):
        rows, cols = _centroids(
            ImageDataGenerator(width_shift_range=[3]).random_transform(image, seed=seed)[None]
        )
        assert rows[0] == 8 and abs(cols[0] - 8) == 3
        rows, cols = _centroids(legacy(width_shift_range=[3]).random_transform(image, seed=seed)[None])
        assert abs(rows[0] - 8) == 3 and cols[0] == 8


def test_rotation_stays_within_its_range_like_tf_keras(legacy):
    n, limit = 600, 30
    x = _point_images(n, row=16, col=26)  # 10 px right of the centre (15.5, 15.5) rows... and 0.5 below
    ours = _collect(ImageDataGenerator(rotation_range=limit).flow(x, batch_size=300, shuffle=False, seed=0))
    theirs = next(iter(legacy(rotation_range=limit).flow(x, batch_size=n, shuffle=False, seed=0)))
    start = math.atan2(-(16 - 15.5), 26 - 15.5)
    for label, batch in (("ours", ours), ("tf_keras", theirs)):
        rows, cols = _centroids(batch)
        angles = np.degrees(np.arctan2(-(rows - 15.5), cols - 15.5) - start)
        assert np.all(np.abs(angles) <= limit + 1.0), f"{label}: rotated {np.abs(angles).max():.1f} deg"
        assert np.abs(angles).max() > limit - 2 and abs(angles.mean()) < 2.5, label
        assert abs(angles.std() - limit / math.sqrt(3)) < 0.1 * limit / math.sqrt(3), label


@pytest.mark.parametrize("fill_mode", ["constant", "nearest", "reflect", "wrap"])
def test_apply_transform_matches_tf_keras(legacy, fill_mode):
    x = np.random.default_rng(1).random((9, 9, 3)).astype(np.float32)
    old, new = legacy(fill_mode=fill_mode, cval=0.7), ImageDataGenerator(fill_mode=fill_mode, cval=0.7)
    exact = {"tx": 3}  # whole pixels: no interpolation, the same pixels filled with cval
    np.testing.assert_array_equal(new.apply_transform(x, exact), old.apply_transform(x, exact))
    if fill_mode == "constant":
        assert np.all(new.apply_transform(x, exact)[:, -3:] == np.float32(0.7))
    for params in (
        {"tx": 1.5, "ty": -2.25},
        {"theta": 33.0, "tx": -1.2, "flip_horizontal": True, "flip_vertical": True},
    ):
        np.testing.assert_allclose(new.apply_transform(x, params), old.apply_transform(x, params), atol=1e-5)


# --------------------------------------------------------------------------- the fast paths


def test_tf_data_path_flips_and_shifts_like_the_original():
    import tensorflow as tf

    x, y = _probes(DRAWS), np.arange(DRAWS)
    generator = ImageDataGenerator(width_shift_range=SHIFT, height_shift_range=SHIFT, horizontal_flip=True)
    dataset = generator.as_dataset(x, y, batch_size=500, seed=3, shuffle=False)
    assert isinstance(dataset, tf.data.Dataset)
    batches = list(dataset.as_numpy_iterator())
    images = np.concatenate([b[0] for b in batches])
    assert images.shape == x.shape and images.dtype == np.float32
    assert np.array_equal(np.concatenate([b[1] for b in batches]), y)
    flipped, vertical, horizontal = _flips_and_shifts(images)
    assert 0.45 <= flipped.mean() <= 0.55
    _check_uniform_shifts(vertical, "tf.data vertical")
    _check_uniform_shifts(horizontal, "tf.data horizontal")
    again = np.concatenate([b[0] for b in generator.as_dataset(x, y, batch_size=500, seed=3, shuffle=False)])
    np.testing.assert_array_equal(again, images)  # same seed, same augmentations
    assert not np.array_equal(np.concatenate([b[0] for b in dataset]), images)  # new draws each epoch
    with pytest.raises(ValueError, match=r"batch the dataset first"):
        augment_dataset(tf.data.Dataset.from_tensor_slices(x), generator)


@pytest.mark.parametrize("fill_mode", ["nearest", "reflect", "constant", "wrap"])
@pytest.mark.parametrize("rotation_range", [0, 40])
def test_tf_data_resampling_equals_the_numpy_path(fill_mode, rotation_range):
    import tensorflow as tf

    rng = np.random.default_rng(2)
    x = rng.random((16, 12, 12, 2)).astype(np.float32)
    params = {
        "theta": rng.uniform(-rotation_range, rotation_range, 16),
        "tx": rng.uniform(-15, 15, 16),  # beyond the 12 px image: every boundary rule is used
        "ty": rng.uniform(-15, 15, 16),
        "flip_horizontal": rng.random(16) < 0.5,
        "flip_vertical": rng.random(16) < 0.5,
    }
    generator = ImageDataGenerator(
        rotation_range=rotation_range, width_shift_range=4.0, fill_mode=fill_mode, cval=-1.0
    )
    expected = generator._apply(x.copy(), params)
    got = _tf_apply(tf.constant(x), {key: tf.constant(value) for key, value in params.items()}, generator)
    np.testing.assert_allclose(got.numpy(), expected, atol=2e-6)


def test_layers_path_flips_and_shifts_only_when_training():
    x = _probes(DRAWS)
    generator = ImageDataGenerator(width_shift_range=SHIFT, height_shift_range=SHIFT, horizontal_flip=True)
    layers = generator.as_layers(input_shape=(SIZE, SIZE, 2), seed=0)
    assert isinstance(layers, keras.Sequential)
    assert [type(layer).__name__ for layer in layers.layers] == ["RandomTranslation", "RandomFlip"]
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(layers(x, training=False)), x)
    images = keras.ops.convert_to_numpy(layers(x, training=True))
    assert images.shape == x.shape and images.dtype == np.float32
    flipped, vertical, horizontal = _flips_and_shifts(images)
    assert 0.45 <= flipped.mean() <= 0.55
    _check_uniform_shifts(vertical, "layers vertical")
    _check_uniform_shifts(horizontal, "layers horizontal")
    first, again = (
        generator.as_layers(input_shape=(SIZE, SIZE, 2), seed=5)(x[:64], training=True) for _ in range(2)
    )
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(first), keras.ops.convert_to_numpy(again))


def test_layers_path_standardizes_like_standardize():
    rng = np.random.default_rng(4)
    x = rng.random((300, 6, 6, 3)).astype(np.float32)  # more images than features, for ZCA
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for kwargs in ({"featurewise_std_normalization": True, "rescale": 0.5},
                       {"zca_whitening": True, "samplewise_center": True}):  # fmt: skip
            generator = ImageDataGenerator(**kwargs)
            generator.fit(x)
            layers = generator.as_layers(input_shape=(6, 6, 3))
            for training in (False, True):  # standardisation applies in both
                got = keras.ops.convert_to_numpy(layers(x[:8], training=training))
                np.testing.assert_allclose(got, generator.standardize(x[:8].copy()), atol=2e-5)
    with pytest.raises(ValueError, match=r"picks whole values.*float range"):
        ImageDataGenerator(width_shift_range=2).as_layers()
    with pytest.raises(ValueError, match=r"in pixels.*input_shape"):
        ImageDataGenerator(width_shift_range=3.0).as_layers()
