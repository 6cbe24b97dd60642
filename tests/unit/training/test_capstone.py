"""mgtutor.training.capstone, generated from lesson 16's #@save cells: the stream, the network, the
schedule, the whitening bias's epochs, lookahead, the timing of the arithmetic, the time-to-accuracy
record, test views."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from mgtutor.training.capstone import (
    HYP,
    TTA_WEIGHTS,
    Lookahead,
    OneCycle,
    TimeToAccuracy,
    WhiteningBias,
    build_capstone_cnn,
    compile_for_training,
    epoch_sides,
    evaluation_stream,
    flip_and_crop,
    float32_gelu,
    race_arithmetic,
    start_as_identity,
    step_rate,
    train_recipe,
    training_stream,
    tta_view,
    whitening_filters,
)


def _correlated_images(n: int = 64, seed: int = 0) -> np.ndarray:
    # Smooth images: neighbouring pixels and channels strongly correlated, as in photographs.
    rng = np.random.default_rng(seed)
    noise = rng.normal(size=(n, 17, 17, 1)).astype(np.float32)
    images = np.kron(noise, np.ones((1, 2, 2, 1), np.float32))[:, :32, :32]  # 2x2 blocks of one value
    return np.concatenate([images, 0.5 * images, images + 0.1 * rng.normal(size=images.shape)], axis=-1)


def test_whitening_filters_decorrelate_the_patches_as_a_convolution_applies_them():
    import tensorflow as tf

    images = _correlated_images()
    kernel = whitening_filters(images, eps=5e-4)
    assert kernel.shape == (2, 2, 3, 24)
    np.testing.assert_array_equal(kernel[..., 12:], -kernel[..., :12])  # both signs
    # Applied as Keras applies a kernel: the outputs' second moments are diagonal, each below 1.
    out = tf.nn.conv2d(images, kernel[..., :12], strides=1, padding="VALID").numpy().reshape(-1, 12)
    moments = out.T.astype(np.float64) @ out / len(out)
    off_diagonal = np.abs(moments - np.diag(np.diag(moments))).max()
    assert off_diagonal < 1e-3  # float32 convolution of inputs up to ~1e3 after whitening's scaling
    assert np.all(np.diag(moments) <= 1.0 + 1e-3) and np.diag(moments).max() > 0.99
    before = np.corrcoef(images[:, :-1, :, 0].ravel(), images[:, 1:, :, 0].ravel())[0, 1]
    assert before > 0.4  # the input was correlated: the test means something


def test_the_network_has_the_lessons_parameters_and_starts_as_the_identity():
    import keras

    images = _correlated_images()
    kernel = whitening_filters(images)
    model = build_capstone_cnn(whitening=kernel, seed=0)
    assert model.count_params() == 570_296  # notebook 16's count, asserted by its checks too
    assert not model.get_layer("whitening").trainable and not model.get_layer("whitening_bias").trainable
    np.testing.assert_array_equal(model.get_layer("whitening").kernel.numpy(), kernel)
    convolutions = [
        layer for layer in model.layers if isinstance(layer, keras.layers.Conv2D) and layer.trainable
    ]
    assert len(convolutions) == 6
    for layer in convolutions:
        k = layer.kernel.numpy()
        n = min(k.shape[2:])
        np.testing.assert_array_equal(k[1, 1, :n, :n], np.eye(n))
        assert np.all(k[..., :n].sum(axis=(0, 1)) == np.eye(n))  # nothing but the centre tap
        assert k.shape[3] == n or np.any(k[..., n:] != 0)  # the other filters keep their random start
    assert start_as_identity(model) == 6
    learnt = build_capstone_cnn(seed=0, identity=False)
    assert learnt.get_layer("whitening").trainable
    assert not np.array_equal(learnt.layers[3].kernel.numpy()[1, 1, :24, :24], np.eye(24))
    again = build_capstone_cnn(seed=0, whitening=kernel)
    for a, b in zip(again.get_weights(), model.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)  # the same network, the same start
    x = np.random.default_rng(1).normal(size=(2, 32, 32, 3)).astype(np.float32)
    assert model.predict(x, verbose=0).shape == (2, 10)
    wide = build_capstone_cnn(whitening=kernel, widths=(64, 256, 256), seed=0)  # airbench's widths
    assert [layer.kernel.shape[-1] for layer in wide.layers if isinstance(layer, keras.layers.Conv2D)] == [
        24, 64, 64, 256, 256, 256, 256]


def test_the_schedule_warms_up_from_a_fifth_and_ends_at_seven_percent():
    schedule = OneCycle(1.5, total=100, warmup=23)
    rates = [float(schedule(step)) for step in (0, 23, 100)]
    assert rates == pytest.approx([0.3, 1.5, 0.105], rel=1e-6)
    assert float(schedule(60)) == pytest.approx(1.5 * (1 - 0.93 * 37 / 77), rel=1e-6)
    config = schedule.get_config()
    assert OneCycle.from_config(config).get_config() == config  # what a saved model's optimizer reloads


def _windows(padded: np.ndarray, size: int) -> np.ndarray:
    # Every size x size window of each padded image, as (n, offsets, size, size, channels).
    windows = np.lib.stride_tricks.sliding_window_view(padded, (size, size), axis=(1, 2))
    return windows.transpose(0, 1, 2, 4, 5, 3).reshape(len(padded), -1, size, size, padded.shape[-1])


def test_flip_and_crop_cuts_each_image_its_own_window_mirrored_or_not():
    rng = np.random.default_rng(0)
    padded = rng.integers(0, 256, size=(200, 12, 12, 3), dtype=np.uint8)  # 8x8 images padded by 2
    flip = rng.random(200) < 0.5
    cut = np.asarray(flip_and_crop(padded, flip, [0, 7], pad=2))
    assert cut.shape == (200, 8, 8, 3) and cut.dtype == np.uint8  # exact pixels, no interpolation
    windows = _windows(padded, 8)
    same = np.all(windows == cut[:, None], axis=(2, 3, 4))
    mirrored = np.all(windows[:, :, :, ::-1] == cut[:, None], axis=(2, 3, 4))
    assert np.all(same.sum(axis=1) + mirrored.sum(axis=1) == 1)  # random pixels: exactly one match each
    np.testing.assert_array_equal(mirrored.any(axis=1), flip)  # mirrored exactly where asked
    offsets = np.argmax(same | mirrored, axis=1)
    assert len(set(offsets.tolist())) == 25  # every offset of 0..4 x 0..4 drawn among 200 images
    np.testing.assert_array_equal(np.asarray(flip_and_crop(padded, flip, [0, 7], pad=2)), cut)  # same key
    assert not np.array_equal(np.asarray(flip_and_crop(padded, flip, [0, 8], pad=2)), cut)  # another key


def test_the_same_seed_gives_the_same_stream_whichever_thread_makes_each_batch():
    # Two threads make batches at once: a random op with its own state would give a batch whichever
    # numbers it asked for first, and the same seed other images.
    rng = np.random.default_rng(3)
    images = rng.integers(0, 256, size=(300, 32, 32, 3), dtype=np.uint8)
    labels = np.eye(300, dtype=np.float32)
    statistics = (np.full(3, 127.5, np.float32), np.full(3, 64.0, np.float32))

    def first_batches(seed: int, alternate: bool = True) -> np.ndarray:
        stream = training_stream(images, labels, 32, statistics, seed=seed, sides=[24], alternate=alternate)
        return np.concatenate([np.asarray(x).ravel() for x, _ in stream.take(20)])  # 10 small, 10 full-size

    for alternate in (True, False):
        np.testing.assert_array_equal(first_batches(0, alternate), first_batches(0, alternate))
    assert not np.array_equal(first_batches(0), first_batches(1))


def test_the_training_stream_is_endless_whole_batches_each_pass_every_image_once_flips_alternating():
    rng = np.random.default_rng(1)
    images = rng.integers(0, 256, size=(1000, 32, 32, 3), dtype=np.uint8)
    labels = np.eye(1000, dtype=np.float32)  # image i's label names it: the stream can be traced
    statistics = (np.full(3, 127.5, np.float32), np.full(3, 64.0, np.float32))
    stream = training_stream(images, labels, 64, statistics, seed=0)
    batches = list(stream.take(32))  # two epochs of ceil(1000 / 64) = 16 steps
    assert [len(x) for x, _ in batches] == [64] * 32  # whole batches: the 17th carries on into pass two
    assert all(x.dtype.name == "float32" and x.shape[1:] == (32, 32, 3) for x, _ in batches)
    pixels = np.concatenate([np.asarray(x) for x, _ in batches]) * 64.0 + 127.5
    # standardized uint8 values: nothing blended between pixels
    np.testing.assert_allclose(pixels, np.round(pixels), atol=1e-3)
    order = np.concatenate([np.argmax(y, 1) for _, y in batches])
    assert sorted(order[:1000]) == list(range(1000)) == sorted(order[1000:2000])  # each pass: all, once
    assert not np.array_equal(order[:1000], order[1000:2000])  # reshuffled
    padded = np.pad(images, ((0, 0), (2, 2), (2, 2), (0, 0)), mode="reflect")
    cut = np.round(pixels).astype(np.uint8)
    mirrored = np.array([np.all(_windows(padded[i : i + 1, :, ::-1], 32)[0] == c, axis=(1, 2, 3)).any()
                         for i, c in zip(order, cut, strict=True)])  # fmt: skip
    first, second = np.zeros(1000, bool), np.zeros(1000, bool)
    first[order[:1000]], second[order[1000:2000]] = mirrored[:1000], mirrored[1000:2000]
    assert 400 < first.sum() < 600  # about half mirrored in the first pass (binomial: 6 sigma either side)
    assert np.all(first != second)  # alternating: each image mirrored in exactly one of the two passes
    random = training_stream(images, labels, 64, statistics, seed=0, alternate=False)
    batches = list(random.take(32))
    cut = np.round(np.concatenate([np.asarray(x) for x, _ in batches]) * 64.0 + 127.5).astype(np.uint8)
    order = np.concatenate([np.argmax(y, 1) for _, y in batches])
    mirrored = np.array([np.all(_windows(padded[i : i + 1, :, ::-1], 32)[0] == c, axis=(1, 2, 3)).any()
                         for i, c in zip(order, cut, strict=True)])  # fmt: skip
    first[order[:1000]], second[order[1000:2000]] = mirrored[:1000], mirrored[1000:2000]
    assert 400 < np.sum(first == second) < 600  # random flips: about half the images the same way twice
    assert stream.options().autotune.enabled is False  # no autotuner for a dropped iterator to wait on
    tested = list(evaluation_stream(images, labels, 64, statistics))
    assert [len(x) for x, _ in tested] == [64] * 15 + [40]  # the test set once, in order
    np.testing.assert_allclose(np.asarray(tested[0][0]), (images[:64] - 127.5) / 64.0, rtol=1e-6)


def test_the_first_epochs_are_shrunk_whole_and_a_resumed_stream_counts_on_from_its_epoch():
    import tensorflow as tf

    rng = np.random.default_rng(2)
    images = rng.integers(0, 256, size=(100, 32, 32, 3), dtype=np.uint8)  # 100: not a multiple of the batch
    labels = np.eye(100, dtype=np.float32)
    statistics = (np.full(3, 127.5, np.float32), np.full(3, 64.0, np.float32))
    stream = training_stream(images, labels, 32, statistics, sides=[16, 24])
    sides = [x.shape[1:3] for x, _ in stream.take(4 * 4)]  # ceil(100 / 32) = 4 steps an epoch
    assert sides == [(16, 16)] * 4 + [(24, 24)] * 4 + [(32, 32)] * 8
    resumed = training_stream(images, labels, 32, statistics, sides=[16, 24], first_epoch=1)
    assert [x.shape[1] for x, _ in resumed.take(8)] == [24] * 4 + [32] * 4  # epoch 2 small, epoch 3 full
    # A small image is one of its 50 augmented 32x32 windows (mirrored or not, 25 offsets) shrunk whole.
    stream = training_stream(images, labels, 32, statistics, sides=[24])
    ((x_small, y_small),) = stream.take(1)
    padded = np.pad(images, ((0, 0), (2, 2), (2, 2), (0, 0)), mode="reflect")
    for shrunk, index in zip(np.asarray(x_small)[:8], np.argmax(y_small, 1)[:8], strict=True):
        windows = np.concatenate([_windows(padded[index : index + 1], 32)[0],
                                  _windows(padded[index : index + 1, :, ::-1], 32)[0]])  # fmt: skip
        candidates = tf.image.resize((windows.astype(np.float32) - 127.5) / 64.0, [24, 24], antialias=True)
        assert np.abs(np.asarray(candidates) - shrunk).max(axis=(1, 2, 3)).min() < 1e-5


def test_each_epochs_side_keeps_the_last_full_size_epochs_and_drops_the_first_small_sizes():
    assert epoch_sides(7, 3, [16, 24, 24, 24], 32) == [16, 24, 24, 24, 32, 32, 32]  # the lesson's default
    assert epoch_sides(4, 3, [16, 24, 24, 24], 32) == [24, 32, 32, 32]  # fewer epochs: the first sizes go
    assert epoch_sides(2, 3, [16, 24], 32) == [32, 32]  # fewer than FULL_SIZE_EPOCHS: all full size
    assert epoch_sides(5, 1, [16, 24], 32) == [16, 16, 16, 24, 32]  # more: the first size again
    assert epoch_sides(3, 0, [], 32) == [32, 32, 32]  # no small sizes


def test_lookahead_pulls_every_fifth_step_and_ends_on_its_average():
    import keras

    rng = np.random.default_rng(4)
    x = rng.normal(size=(7 * 8, 4)).astype(np.float32)  # 7 batches of 8: the last step is not a 5th
    y = x @ rng.normal(size=(4, 1)).astype(np.float32)

    class Seen(keras.callbacks.Callback):  # the weights each step left, before lookahead (after it) pulls
        def on_train_begin(self, logs=None):
            self.weights = []

        def on_train_batch_end(self, batch, logs=None):
            self.weights.append(self.model.get_weights())

    def trained(steps: int, callbacks: list) -> tuple[list, list]:
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3), keras.layers.BatchNormalization(),
                                  keras.layers.Dense(1)])  # fmt: skip
        model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
        start = model.get_weights()
        model.fit(x[: 8 * steps], y[: 8 * steps], batch_size=8, shuffle=False, verbose=0, callbacks=callbacks)
        return start, model.get_weights()

    seen, callback = Seen(), Lookahead(total_steps=7)
    start, final = trained(7, [seen, callback])
    _, plain = trained(5, [])  # the same five steps without lookahead
    assert callback.pulls == 2  # at step 5 (a multiple of 5) and at step 7 (the last)
    decay = 0.95**5 * (5 / 7) ** 3
    # No pull before step 5, so its average moved from the start by (1 - decay) of the plain run's way.
    # The last pull (decay 0.95**5) moves it that share of the way to step 7's weights, which the model
    # takes: steps 6 and 7 count (a copy of the average alone would drop them), BatchNorm's statistics too.
    for begun, fifth, without, seventh, ended in zip(start, seen.weights[4], plain, seen.weights[6], final,
                                                     strict=True):  # fmt: skip
        np.testing.assert_allclose(fifth, without, rtol=0, atol=1e-6)
        average = begun + (1 - decay) * (without - begun)
        np.testing.assert_allclose(ended, average + (1 - 0.95**5) * (seventh - average), rtol=0, atol=1e-6)
    assert any(not np.allclose(b, w) for b, w in zip(start, plain, strict=True))  # the steps moved weights
    assert any(not np.allclose(a, b) for a, b in zip(final, seen.weights[4], strict=True))  # 6 and 7 count


def test_the_network_takes_any_side_and_its_global_pool_is_the_old_3x3_pool_at_32():
    import keras

    model = build_capstone_cnn(seed=0)
    rng = np.random.default_rng(3)
    for side in (10, 16, 24, 32):
        assert model.predict(rng.normal(size=(2, side, side, 3)), verbose=0).shape == (2, 10)
    # At 32 the last feature map is 3x3, so the global max is the 3x3 max-pool (and flatten) it replaced.
    features = keras.Model(model.input, model.get_layer(index=-4).output)  # before the global pool
    maps = features.predict(rng.normal(size=(2, 32, 32, 3)), verbose=0)
    assert maps.shape[1:3] == (3, 3)
    pooled = keras.layers.Flatten()(keras.layers.MaxPooling2D(3)(maps)).numpy()
    np.testing.assert_array_equal(pooled, maps.max(axis=(1, 2)))


def test_the_test_views_mirror_and_shift_by_one_pixel():
    images = np.arange(2 * 4 * 4 * 1, dtype=np.float32).reshape(2, 4, 4, 1)
    assert TTA_WEIGHTS == (2, 2, 1, 1, 1, 1)
    same, mirrored, down_right, _, up_left, up_left_mirrored = (
        np.asarray(tta_view(images, None, which)[0]) for which in range(6)
    )
    np.testing.assert_array_equal(same, images)
    np.testing.assert_array_equal(mirrored, images[:, :, ::-1])
    np.testing.assert_array_equal(
        down_right[:, 1:, 1:], images[:, :-1, :-1]
    )  # moved one pixel down and right
    np.testing.assert_array_equal(up_left[:, :-1, :-1], images[:, 1:, 1:])
    np.testing.assert_array_equal(up_left_mirrored, up_left[:, :, ::-1])


@pytest.mark.slow  # XLA compiles the whole step: about half a minute
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_float32_gelu_is_kerass_gelu_in_float32_to_the_bit_with_the_exact_derivative(dtype):
    import math

    import keras
    import tensorflow as tf

    x = np.concatenate([np.linspace(-8, 8, 2001), [0.0, -0.0, 1e-30, -40.0, 40.0]]).astype(np.float32)
    inputs = tf.cast(x, dtype)  # bfloat16: the inputs rounded, as a bfloat16 layer hands them on
    with tf.GradientTape() as tape:
        tape.watch(inputs)
        values = float32_gelu(inputs)
    upstream = np.linspace(0.5, 1.5, len(x)).astype(np.float32)  # the chain rule, not the derivative alone
    gradients = tape.gradient(values, inputs, output_gradients=tf.cast(upstream, dtype))
    assert values.dtype == gradients.dtype == inputs.dtype
    # What portable's copy computes: Keras's gelu in a float32 layer, then the next layer's cast.
    copy = tf.cast(keras.activations.gelu(tf.cast(inputs, tf.float32)), dtype)
    np.testing.assert_array_equal(values.numpy(), copy.numpy())
    # The derivative Phi(x) + x phi(x), in float64 from the same (rounded) inputs, times the upstream.
    t = tf.cast(inputs, tf.float64).numpy()
    root = math.sqrt(2)
    exact = np.array([0.5 * (1 + math.erf(v / root)) + v * math.exp(-v * v / 2) / (root * math.sqrt(math.pi))
                      for v in t]) * upstream.astype(np.float64)  # fmt: skip
    # float32: a few units in the last place of a value up to 1.6; bfloat16: one rounding of 8 bits.
    tolerance = 2e-6 if dtype == "float32" else 2.0**-8
    np.testing.assert_allclose(tf.cast(gradients, tf.float64).numpy(), exact, rtol=tolerance, atol=tolerance)


def test_a_model_with_float32_gelu_saves_and_loads_back_with_the_same_predictions(tmp_path):
    import keras

    # A saved model names its activation; a custom-gradient object (not a function) could not be loaded back.
    layers = keras.layers
    model = keras.Sequential([keras.Input((6,)), layers.Dense(5), layers.Activation(float32_gelu)])
    model.save(tmp_path / "gelu.keras")
    loaded = keras.saving.load_model(tmp_path / "gelu.keras")
    assert loaded.layers[-1].activation is float32_gelu
    x = np.random.default_rng(0).normal(size=(4, 6)).astype(np.float32)
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), model.predict(x, verbose=0))


def test_one_step_compiled_by_xla_updates_the_weights_as_the_plain_step():

    rng = np.random.default_rng(0)
    x = rng.normal(size=(16, 32, 32, 3)).astype(np.float32)
    y = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 16)]
    images = _correlated_images()
    weights = {}
    for xla in (False, True):
        model = build_capstone_cnn(whitening=whitening_filters(images), seed=0)
        compile_for_training(model, xla, HYP, rate=0.1)  # as the lesson trains it
        model.train_on_batch(x, y)
        weights[xla] = model.get_weights()
    start = build_capstone_cnn(whitening=whitening_filters(images), seed=0).get_weights()
    relative = []  # each variable's XLA difference against how far the plain step moved it
    for plain, xla, before in zip(weights[False], weights[True], start, strict=True):
        moved = float(np.abs(plain - before).max())
        if moved > 0:  # the frozen whitening layer does not move
            relative.append(float(np.abs(plain - xla).max()) / moved)
    assert len(relative) == 25  # 6 kernels, 6 x (beta, moving mean, moving variance), the dense kernel
    # XLA fuses and reorders float32 sums: measured at most 4.2e-5 of the move (the first convolution).
    assert max(relative) < 1e-3


def _toy_batch(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.normal(size=(32, 8)).astype(np.float32), np.eye(4, dtype=np.float32)[rng.integers(0, 4, 32)]


def _logged_build(steps: list[str], slow_bfloat16: float = 0.0, sizes: list[int] | None = None):
    """A small Dense model's builder whose every training step logs the format it was made in, and its images
    in `sizes` (for `mixed_bfloat16` it sleeps `slow_bfloat16` s more: a choice far behind the other)."""
    import time

    import keras

    def build():
        made = keras.mixed_precision.global_policy().name
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4), keras.layers.Activation(
            "linear", dtype="float32")])  # fmt: skip
        train = model.train_on_batch

        def step(*args, **kwargs):
            steps.append(made)
            (sizes if sizes is not None else []).append(len(args[0]))
            time.sleep(slow_bfloat16 if made == "mixed_bfloat16" else 0)
            return train(*args, **kwargs)

        model.train_on_batch = step
        return model

    return build


def test_step_rate_times_the_step_in_the_format_asked_and_leaves_it_set():
    import keras

    x, y = _toy_batch(5)
    steps = []
    try:
        for precision in ("float32", "mixed_bfloat16"):
            rate, tracing = step_rate(_logged_build(steps), x, y, precision, xla=False, steps=2)
            assert rate > 0 and tracing >= 0 and steps[-1] == precision  # the probe made under its format
            assert keras.mixed_precision.global_policy().name == precision  # for the model to come
    finally:
        keras.mixed_precision.set_global_policy("float32")


def test_race_arithmetic_times_the_choices_in_turn_each_in_its_format():
    import keras

    x, y = _toy_batch(7)
    steps = []  # (the format the model was made in), in the order the steps ran
    choices = [("float32", False), ("mixed_bfloat16", False)]
    try:
        timed = race_arithmetic(_logged_build(steps), x, y, choices, rounds=3, keep_above=0.0)  # all rounds
        assert keras.mixed_precision.global_policy().name == "mixed_bfloat16"  # the last choice's
    finally:
        keras.mixed_precision.set_global_policy("float32")
    # each made in its format; its first step and a warm-up each, then 3 timed rounds, taking turns
    assert steps == ["float32"] * 2 + ["mixed_bfloat16"] * 2 + ["float32", "mixed_bfloat16"] * 3
    assert list(timed) == choices
    for rate, tracing, rounds in timed.values():
        assert len(rounds) == 3 and min(rounds) > 0 and rate == float(np.median(rounds)) and tracing >= 0


def test_race_arithmetic_never_trains_a_whole_batch_of_a_choice_far_behind_on_the_screen():
    import keras

    x, y = _toy_batch(8)
    steps, sizes = [], []  # the bfloat16 model's every step takes 0.2 s more: far slower than float32's here
    choices = [("float32", False), ("mixed_bfloat16", False)]
    try:
        build = _logged_build(steps, slow_bfloat16=0.2, sizes=sizes)
        timed = race_arithmetic(build, x, y, choices, rounds=3, keep_above=0.5, screen=4)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    # two steps each on the screen's 4 images; then float32 alone: its first step, warm-up and 3 rounds
    assert steps == ["float32"] * 2 + ["mixed_bfloat16"] * 2 + ["float32"] * 5
    assert sizes == [4] * 4 + [32] * 5
    (fast, _, fast_rounds), (slow, tracing, slow_rounds) = timed.values()
    assert len(fast_rounds) == 3 and fast == float(np.median(fast_rounds))
    assert len(slow_rounds) == 1 and slow == slow_rounds[0] < 4 / 0.2 < 0.5 * fast  # its screened step's rate
    assert tracing >= 0


def test_race_arithmetic_without_a_screen_times_a_choice_far_behind_in_its_warm_up_no_more():
    import keras

    x, y = _toy_batch(11)
    steps, sizes = [], []
    choices = [("float32", False), ("mixed_bfloat16", False)]
    try:
        timed = race_arithmetic(_logged_build(steps, 0.2, sizes), x, y, choices, rounds=3, keep_above=0.5)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    # a first step and a warm-up each on the whole batch; then the timed rounds for float32 alone
    assert steps == ["float32"] * 2 + ["mixed_bfloat16"] * 2 + ["float32"] * 3 and sizes == [32] * 7
    (fast, _, _), (slow, _, slow_rounds) = timed.values()
    assert len(slow_rounds) == 1 and slow == slow_rounds[0] < 32 / 0.2 < 0.5 * fast  # its warm-up's rate


def test_race_arithmetic_of_one_choice_screens_nothing():
    import keras

    x, y = _toy_batch(10)
    steps, sizes = [], []
    try:
        build = _logged_build(steps, sizes=sizes)
        timed = race_arithmetic(build, x, y, [("float32", False)], rounds=2, screen=4)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert sizes == [32] * 4 and len(timed["float32", False][2]) == 2  # first step, warm-up, 2 rounds


def test_race_arithmetic_compiles_each_model_as_training_will():

    x, y = _toy_batch(9)
    steps, compiled = [], []

    def compile_model(model, xla):  # the lesson's, noting the compiler it was given
        compiled.append(xla)
        compile_for_training(model, xla, HYP)

    models = []

    def build():
        models.append(_logged_build(steps)())
        return models[-1]

    choices = [("float32", False), ("float32", True)]
    timed = race_arithmetic(build, x, y, choices, 2, keep_above=0.0, compile_model=compile_model)
    assert compiled == [False, True] and list(timed) == choices  # once each, with its choice's compiler
    for model, (_, xla) in zip(models, choices, strict=True):
        optimizer = model.optimizer
        assert optimizer.momentum == HYP["momentum"] and optimizer.nesterov and model.jit_compile == xla
        assert model.optimizer.weight_decay == HYP["weight_decay"] and model.loss.label_smoothing == 0.2
        assert int(model.optimizer.iterations) == 4  # its first step, the warm-up and 2 rounds, all with it
    assert all(rate > 0 for rate, _, _ in timed.values())


def test_the_time_to_accuracy_record_survives_a_restart_in_its_file(tmp_path):
    import keras

    rng = np.random.default_rng(6)
    x, y = rng.normal(size=(64, 4)).astype(np.float32), rng.integers(0, 2, 64).astype(np.float32)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1, activation="sigmoid")])
    model.compile("sgd", "binary_crossentropy", metrics=["accuracy"])
    path = tmp_path / "curve.json"
    first = TimeToAccuracy(path, finished=0)
    model.fit(x, y, epochs=3, validation_data=(x, y), verbose=0, callbacks=[first])
    assert [p["epoch"] for p in first.curve] == [1, 2, 3] and not list(tmp_path.glob("*.tmp"))
    assert all(0 < a["minutes"] < b["minutes"] for a, b in zip(first.curve, first.curve[1:], strict=False))
    # Restarted after epoch 2 (BackupAndRestore's record): the file's first two points, then its own.
    again = TimeToAccuracy(path, finished=2)
    assert again.curve == first.curve[:2]
    model.fit(x, y, epochs=3, initial_epoch=2, validation_data=(x, y), verbose=0, callbacks=[again])
    assert [p["epoch"] for p in again.curve] == [1, 2, 3]
    assert again.curve[2]["minutes"] > first.curve[1]["minutes"]  # minutes carried over the restart
    assert again.last_test is not None and again.last_test >= again.started  # when its last test ended


@pytest.mark.slow  # trains, saves and resumes: 17 s; make test's 3 minutes: in make test-all
def test_the_whitening_bias_learns_for_its_epochs_then_freezes_and_a_resumed_run_keeps_it_frozen(tmp_path):
    import keras

    images = _correlated_images(48)
    labels = keras.utils.to_categorical(np.arange(48) % 10, 10)
    filters = whitening_filters(images)

    def run(epochs: int, callbacks: list) -> list[tuple[np.ndarray, np.ndarray]]:
        """The bias learning for 2 epochs of `epochs`; the first layer's filters and bias after each epoch."""
        nonlocal model
        model = build_capstone_cnn((32, 32, 3), whitening=filters, widths=(8, 8, 8), seed=0)
        bias_epochs, seen = WhiteningBias(model, 2), []
        layer, bias = model.get_layer("whitening"), model.get_layer("whitening_bias")
        model.compile(optimizer=keras.optimizers.SGD(0.2, momentum=0.85, weight_decay=0.05),
                      loss=keras.losses.CategoricalCrossentropy(from_logits=True))  # fmt: skip
        after = keras.callbacks.LambdaCallback(
            on_epoch_end=lambda e, logs: seen.append((layer.kernel.numpy(), bias.bias.numpy())))
        model.fit(images, labels, batch_size=16, epochs=epochs, shuffle=False, verbose=0,
                  callbacks=[*callbacks, bias_epochs, after])  # fmt: skip
        return seen

    model = None
    kernels, biases = zip(*run(4, []), strict=True)
    assert all(np.array_equal(kernel, filters) for kernel in kernels)  # the filters never move
    assert np.abs(biases[0]).max() > 1e-4 and np.abs(biases[1] - biases[0]).max() > 1e-5  # epochs 1, 2 learn
    # From epoch 3 frozen: no gradient, no weight decay, no momentum carried over from epoch 2's steps.
    assert np.array_equal(biases[2], biases[1]) and np.array_equal(biases[3], biases[1])
    # Saved and reloaded with its optimizer: the same trainable variables, so every momentum loads (Keras
    # warns and skips them all if the counts differ, as they would with the bias's trainability per variable)
    model.save(tmp_path / "model.keras")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        reloaded = keras.saving.load_model(tmp_path / "model.keras")
    for a, b in zip(reloaded.optimizer.variables, model.optimizer.variables, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())

    class Kill(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            if epoch == 3:
                raise KeyboardInterrupt  # after epoch 3's backup: the bias frozen a whole epoch already

    backup = str(tmp_path / "backup")
    with pytest.raises(KeyboardInterrupt):
        run(4, [keras.callbacks.BackupAndRestore(backup), Kill()])
    # Resumed at epoch 4: the backup's optimizer, built with the bias trainable, loads into one built so
    # too (a mismatch would refuse to load), and the bias is frozen from the first step.
    [(kernel, bias)] = run(4, [keras.callbacks.BackupAndRestore(backup)])
    assert np.array_equal(kernel, filters) and np.array_equal(bias, biases[1])


def test_lesson_16s_parameters_default_to_the_recipe_in_hyp():
    from pathlib import Path

    from mgtutor.classroom.lessons import notebook_parameters

    defaults = notebook_parameters(Path(__file__).resolve().parents[3] / "notebooks" / "16_capstone.ipynb")
    tied = {key: defaults[key.upper()] for key in HYP if key.upper() in defaults}
    assert len(tied) == 11  # every parameter of the recipe; the lesson's others (devices, data, time) are not
    assert tied == {key: list(HYP[key]) if isinstance(HYP[key], tuple) else HYP[key] for key in tied}


@pytest.mark.slow  # 12 s; make test's 3 minutes: in make test-all
def test_train_recipe_trains_by_hyp_its_bias_for_its_epochs_lookahead_to_the_last_step():
    import keras
    import tensorflow as tf

    images = _correlated_images(64)
    labels = keras.utils.to_categorical(np.arange(64) % 10, 10)
    stream = tf.data.Dataset.from_tensor_slices((images, labels)).repeat().batch(16)
    hyp = {**HYP, "batch_size": 16, "epochs": 3, "whitening_bias_epochs": 1, "widths": (8, 8, 8)}
    model = build_capstone_cnn((32, 32, 3), whitening=whitening_filters(images), widths=hyp["widths"], seed=0)
    seen = []
    after = keras.callbacks.LambdaCallback(on_epoch_end=lambda epoch, logs: seen.append(
        model.get_layer("whitening_bias").bias.numpy()))  # fmt: skip
    recipe = train_recipe(model, stream, hyp, 4, then=[after])
    assert [type(callback) for callback in recipe] == [WhiteningBias, Lookahead]
    optimizer = model.optimizer
    assert int(optimizer.iterations) == 12 and recipe[1].pulls == 3  # steps 5, 10 and the last, 12
    schedule = keras.saving.deserialize_keras_object(optimizer.get_config()["learning_rate"])
    assert isinstance(schedule, OneCycle) and schedule.peak == pytest.approx(0.375 * 16 / 256)  # linear rule
    assert (schedule.total, schedule.warmup, schedule.start, schedule.end) == (12, int(0.23 * 12), 0.2, 0.07)
    assert float(optimizer.learning_rate) == pytest.approx(0.07 * schedule.peak)  # where it ended
    assert optimizer.momentum == 0.85 and optimizer.nesterov and optimizer.weight_decay == 0.009
    assert model.loss.label_smoothing == 0.2
    # learnt in epoch 1, frozen after it: lookahead's pull at step 5 sets it to its average, and then nothing
    # moves it (its average and it stay equal)
    assert np.abs(seen[0]).max() > 0 and np.array_equal(seen[2], seen[1])
    learnt = build_capstone_cnn((32, 32, 3), widths=hyp["widths"], seed=0)  # no whitening: no Bias layer
    assert [type(c) for c in train_recipe(learnt, stream, {**hyp, "epochs": 1, "lookahead": False}, 2)] == []
