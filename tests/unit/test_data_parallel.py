"""mgtutor.data_parallel (MirroredStrategy), mgtutor.keras2.towers and mgtutor.keras2.fit_generator.

The parity checks need 2 and 4 devices, and TensorFlow fixes its devices once per
process, so each device count runs in its own child process (both at once, to
save wall time); the child does every check for its count and prints the measured
differences as JSON. Errors and fit_generator run in this process on one CPU.
"""

from __future__ import annotations

import math
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import ROOT, run_child

# Forward: a softmax output lies in [0, 1], so a few float32 ulps are ~1e-7
# (measured: 3e-8 at 2 devices, 4.5e-8 at 4).
# Conv2D/Dense kernels block their sums differently for a 16- and a 32-image
# batch, so the towers (smaller slices) differ from the whole batch in the last
# bits; against the template run slice by slice they are exact (== 0.0).
FORWARD_ATOL = 1e-6
# Training: after 3 SGD steps at lr 0.1 the weights agree to ~3e-8 (the per-tower
# and cross-replica gradient sums add in a different order). 1e-5 leaves 100x
# margin yet is >100x below one step's update (checked below), so a wrong
# gradient scale (sum instead of mean over replicas) or a skipped tower fails.
TRAIN_ATOL = 1e-5
MIN_UPDATE = 1e-3

CHILD = ROOT / "tests" / "unit" / "data_parallel_child.py"


def children(folder: Path) -> dict[str, dict]:
    """The 2- and the 4-device children side by side; their JSON by device count."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {n: pool.submit(run_child, CHILD, n) for n in (2, 4)}
        return {str(n): future.result() for n, future in futures.items()}


@pytest.fixture(scope="module")
def parity(run_once) -> dict[int, dict]:
    return {int(n): result for n, result in run_once("parallel", children).items()}


DEVICE_COUNTS = pytest.mark.parametrize("n", [2, 4])


@DEVICE_COUNTS
def test_towers_forward_equals_template(parity, n):
    result = parity[n]
    assert result["devices"] == [f"/device:CPU:{i}" for i in range(n)]
    assert result["forward_vs_slices"] == 0.0
    assert result["forward_vs_template"] <= FORWARD_ATOL


@DEVICE_COUNTS
def test_towers_training_equals_single_device(parity, n):
    result = parity[n]
    assert result["towers_update"] > MIN_UPDATE  # parity of a real change, not of nothing
    assert result["towers_vs_single"] <= TRAIN_ATOL


@DEVICE_COUNTS
def test_mirrored_training_equals_single_device(parity, n):
    result = parity[n]
    assert result["replicas"] == n
    assert result["mirrored_update"] > MIN_UPDATE
    assert result["mirrored_vs_single"] <= TRAIN_ATOL
    # A second device count would abort TF; the helper refuses it with the fix.
    assert f"over {n} device(s)" in result["second_count_refused"]
    assert "restart the kernel" in result["second_count_refused"]


@DEVICE_COUNTS
def test_towers_share_the_template_weights(parity, n):
    result = parity[n]
    assert result["same_variables"] is True
    assert result["n_weights"] == [4, 4]
    assert result["towers_update"] > MIN_UPDATE  # training the wrapper trained the template


@DEVICE_COUNTS
def test_batches_smaller_than_the_towers(parity, n):
    result = parity[n]
    assert sum(result["split_of_3"]) == 3
    for key in ("small_eager", "small_dynamic", "full_dynamic"):
        assert result[key] <= FORWARD_ATOL, key
    assert math.isfinite(result["small_step_loss"])
    assert result["small_step_update"] > 0.0
    assert math.isfinite(result["bn_loss"])
    assert result["bn_stats_finite"] is True


def test_uneven_split_multi_output_alias_and_saving(parity):
    result = parity[2]
    assert result["uneven_sizes"] == [20, 11]  # floor(31 x 2/3) = 20 on the first device
    assert result["uneven_predict"] <= FORWARD_ATOL
    assert math.isfinite(result["uneven_loss"])
    assert result["uneven_config_split"] == [2.0, 1.0]
    assert result["no_merge_diff"] <= FORWARD_ATOL
    assert result["jit_compile"] is False and result["jit_warning"] is True
    assert result["multi_output_shapes"] == [[96, 10], [96, 1]]
    assert result["multi_output_diff"] <= FORWARD_ATOL
    assert math.isfinite(result["multi_output_loss"])
    assert len(result["alias_losses"]) == 2
    assert result["alias_losses"][1] < result["alias_losses"][0]
    assert result["loaded_type"] == "TowersModel"
    assert result["loaded_diff"] == 0.0


# --------------------------------------------------------------------------- in this process


def tiny_cnn():
    import keras

    return keras.Sequential(
        [keras.Input((8, 8, 3)), keras.layers.Conv2D(8, 3), keras.layers.Flatten(),
         keras.layers.Dense(10, activation="softmax")]
    )  # fmt: skip


def test_split_sizes_sum_to_the_batch_and_follow_the_shares():
    from mgtutor.keras2.towers import split_sizes

    assert split_sizes(32, [1, 1]) == [16, 16]
    assert split_sizes(30, [2, 1]) == [20, 10]
    assert split_sizes(10, [0.6, 0.4]) == [6, 4]  # exact, no float rounding
    assert split_sizes(3, [1, 1, 1, 1]) == [0, 1, 1, 1]
    for batch in range(0, 40):
        sizes = split_sizes(batch, [3, 2, 1])
        assert sum(sizes) == batch
        assert all(abs(s - batch * w / 6) < 1 for s, w in zip(sizes, [3, 2, 1], strict=True))


def test_one_device_is_refused_with_the_reason():
    from mgtutor.keras2.towers import multi_gpu_model

    for gpus in (1, [0]):
        with pytest.raises(ValueError, match="at least 2 devices") as err:
            multi_gpu_model(tiny_cnn(), gpus)
        assert "nothing to split" in str(err.value)
        assert "fit the model itself" in str(err.value)


def test_more_devices_than_exist_lists_them_and_says_how_to_simulate():
    from mgtutor.devices import available_devices, resolve_devices
    from mgtutor.keras2.towers import multi_gpu_model

    available = available_devices()
    wanted = len(available) + 1
    with pytest.raises(ValueError) as err:
        multi_gpu_model(tiny_cnn(), wanted)
    message = str(err.value)
    assert f"has {len(available)}: {', '.join(available)}" in message
    assert f"mgtutor.setup_devices({wanted})" in message
    assert "restart the kernel" in message
    # Lists are checked one by one (minimum=1 here: this process has one device).
    with pytest.raises(ValueError, match=f"device index {wanted} is out of range"):
        resolve_devices([wanted], minimum=1)
    with pytest.raises(ValueError, match="no device '/gpu:7'"):
        resolve_devices(["/gpu:7"], minimum=1)
    assert resolve_devices(["/cpu:0"], minimum=1) == available[:1]
    with pytest.raises(TypeError, match="device count"):
        multi_gpu_model(tiny_cnn(), 2.5)


def test_bad_template_and_bad_split_are_refused_before_any_work():
    import keras

    from mgtutor.keras2.towers import multi_gpu_model

    with pytest.raises(TypeError, match="keras.Model"):
        multi_gpu_model(keras.layers.Dense(3), 2)
    unbuilt = keras.Sequential([keras.layers.Dense(3)])
    with pytest.raises(ValueError, match="not built"):
        multi_gpu_model(unbuilt, 2)
    with pytest.raises(ValueError, match="split has 1 entries but there are 2 devices"):
        multi_gpu_model(tiny_cnn(), 2, split=[1])
    for split in ([1, 0], [1, -2], [1, float("nan")], [1, True]):
        with pytest.raises(ValueError, match="positive numbers"):
            multi_gpu_model(tiny_cnn(), 2, split=split)
    with pytest.raises(TypeError, match="split must be a list"):
        multi_gpu_model(tiny_cnn(), 2, split="2:1")


def test_check_batch_divisible_states_the_rule_and_nearest_sizes():
    from mgtutor.data_parallel import check_batch_divisible, global_batch_size

    assert check_batch_divisible(128, 4) == 32
    with pytest.raises(ValueError) as err:
        check_batch_divisible(30, 4)
    message = str(err.value)
    assert "does not split evenly over 4 replicas" in message
    assert "builds the model from the first batch" in message
    assert "global batch = per-replica batch x replicas" in message
    assert "28 (7 per replica) or 32 (8 per replica)" in message
    with pytest.raises(ValueError, match=r"Nearest valid sizes: 4 \(1 per replica\);"):
        check_batch_divisible(3, 4)

    class FakeStrategy:
        num_replicas_in_sync = 4

    assert global_batch_size(32, 4) == 128
    assert global_batch_size(32, FakeStrategy()) == 128
    assert check_batch_divisible(64, FakeStrategy()) == 16
    with pytest.raises(ValueError, match="per_replica"):
        global_batch_size(0, 4)


def test_check_batch_divisible_refuses_an_uneven_last_batch_naming_the_fix():
    from mgtutor.data_parallel import check_batch_divisible

    # 200 = 3 x 64 + 8: a last batch of 8 splits over 2 and 4 devices, not over 3 (64 % 3 fails first).
    assert check_batch_divisible(64, 2, samples=200) == 32
    assert check_batch_divisible(64, 4, samples=256) == 16  # no short batch at all
    with pytest.raises(ValueError) as err:
        check_batch_divisible(64, 2, samples=129)  # 2 x 64 + 1
    message = str(err.value)
    assert "samples 129 in global batches of 64 leave a last batch of 1" in message
    assert "over 2 devices" in message and "keras#21167" in message
    assert "Train on 128 samples (x[:128]), so that every batch is a multiple of 2" in message
    wanted = r"Train on 128 samples \(x\[:128\]\), or on 132 \(x\[:132\], a last batch of 4\)"
    with pytest.raises(ValueError, match=wanted):
        check_batch_divisible(64, 4, samples=134)  # 2 x 64 + 6
    with pytest.raises(ValueError, match="samples must be a whole number >= 1"):
        check_batch_divisible(64, 2, samples=0)


def test_scaled_learning_rate_linear_rule_and_warmup():
    import keras

    from mgtutor.data_parallel import LinearWarmup, scaled_learning_rate

    assert scaled_learning_rate(0.1, 4) == pytest.approx(0.4)
    schedule = scaled_learning_rate(0.1, 4, warmup_steps=10)
    assert isinstance(schedule, keras.optimizers.schedules.LearningRateSchedule)
    values = {step: float(schedule(step)) for step in (0, 5, 10, 20)}
    assert values[0] == pytest.approx(0.1, abs=1e-7)
    assert values[5] == pytest.approx(0.25, abs=1e-7)
    assert values[10] == pytest.approx(0.4, abs=1e-7)
    assert values[20] == pytest.approx(0.4, abs=1e-7)
    # Serializable, alone and inside an optimizer's config.
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(schedule))
    assert isinstance(restored, LinearWarmup)
    assert restored.get_config() == {"initial": 0.1, "target": 0.4, "warmup_steps": 10}
    optimizer = keras.optimizers.deserialize(keras.optimizers.serialize(keras.optimizers.SGD(schedule)))
    saved = optimizer.get_config()["learning_rate"]
    assert (saved["class_name"], saved["config"]) == ("LinearWarmup", restored.get_config())
    for bad in ({"base_lr": 0}, {"replicas": 0}, {"warmup_steps": -1}):
        kwargs = {"base_lr": 0.1, "replicas": 4, "warmup_steps": 0, **bad}
        with pytest.raises(ValueError, match=next(iter(bad))):
            scaled_learning_rate(**kwargs)


def test_parity_helpers_refuse_different_architectures():
    import keras

    from mgtutor.data_parallel import copy_model, max_weight_difference, train_steps

    model = tiny_cnn()
    twin = copy_model(model)
    assert max_weight_difference(model, twin) == 0.0
    assert twin.weights[0] is not model.weights[0]
    other = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Flatten(), keras.layers.Dense(10)])
    with pytest.raises(ValueError, match="4 and 2 weight arrays"):
        max_weight_difference(model, other)
    with pytest.raises(ValueError, match="needs steps x batch_size = 64 examples but x has 10"):
        train_steps(model, np.zeros((10, 8, 8, 3)), np.zeros((10, 10)), steps=2, batch_size=32)


# --------------------------------------------------------------------------- fit_generator


def _data(n: int = 64):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 4)).astype(np.float32)
    return x, (x[:, :1] + 0.5 * x[:, 1:2] > 0).astype(np.float32)


def _batches(x, y, batch_size=16):
    while True:  # Keras 2 generators loop forever; steps_per_epoch ends the epoch
        for i in range(0, len(x), batch_size):
            yield x[i : i + batch_size], y[i : i + batch_size]


def _logistic():
    import keras

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer=keras.optimizers.SGD(0.5), loss="binary_crossentropy")
    return model


def test_fit_generator_trains_with_the_keras2_arguments():
    from mgtutor.keras2.fit_generator import fit_generator

    x, y = _data()
    model = _logistic()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # Keras 2 defaults must not trigger any warning
        history = fit_generator(
            model, _batches(x, y), steps_per_epoch=4, epochs=4, verbose=0, callbacks=None,
            validation_data=_batches(x, y), validation_steps=2, class_weight={0: 1.0, 1: 1.5},
            max_queue_size=10, workers=1, use_multiprocessing=False, shuffle=True,
            initial_epoch=0,
        )  # fmt: skip
    losses = history.history["loss"]
    assert len(losses) == 4 and len(history.history["val_loss"]) == 4
    assert losses[-1] < 0.8 * losses[0]


def test_fit_generator_needs_steps_for_a_generator():
    from mgtutor.keras2.fit_generator import fit_generator

    x, y = _data()
    with pytest.raises(ValueError, match="steps_per_epoch is required"):
        fit_generator(_logistic(), _batches(x, y))
    with pytest.raises(ValueError, match="validation_steps is required"):
        fit_generator(_logistic(), _batches(x, y), 4, validation_data=_batches(x, y))
    with pytest.raises(TypeError, match="model.fit"):
        fit_generator(_logistic(), (x, y), 4)


def test_fit_generator_loader_arguments_go_to_the_pydataset():
    import keras

    from mgtutor.keras2.fit_generator import fit_generator

    x, y = _data()
    seen = []

    class Batches(keras.utils.PyDataset):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)

        def __len__(self):
            return 4

        def __getitem__(self, index):
            seen.append(self.workers)
            return x[index * 16 : (index + 1) * 16], y[index * 16 : (index + 1) * 16]

    data = Batches()
    history = fit_generator(_logistic(), data, epochs=2, verbose=0, workers=2)
    assert len(history.history["loss"]) == 2
    assert 2 in seen and 1 not in seen  # read with the requested two workers
    assert data.workers == 1  # and the caller's object is left as it was
    with pytest.warns(UserWarning, match="workers=2 ignored.*PyDataset"):
        fit_generator(_logistic(), _batches(x, y), 4, verbose=0, workers=2)


def test_throughput_callback_counts_images_and_seconds():
    import keras

    from mgtutor.progress import Throughput

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2, activation="softmax")])
    model.compile(optimizer="sgd", loss="categorical_crossentropy")
    x = np.zeros((40, 4), np.float32)
    y = np.eye(2, dtype=np.float32)[np.arange(40) % 2]
    meter = Throughput(global_batch=16, verbose=False)
    history = model.fit(x, y, batch_size=16, epochs=2, verbose=0, callbacks=[meter])
    assert [e["epoch"] for e in meter.epochs] == [1, 2]
    assert all(e["images"] == 48 for e in meter.epochs)  # 3 steps x 16, last batch counted whole
    assert all(e["seconds"] > 0 and e["images_per_s"] == e["images"] / e["seconds"] for e in meter.epochs)
    assert history.history["images_per_s"] == [e["images_per_s"] for e in meter.epochs]
    exact = Throughput(global_batch=16, images_per_epoch=40, verbose=False)
    model.fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[exact])
    assert exact.epochs[0]["images"] == 40
    with pytest.raises(ValueError, match="global_batch must be a whole number"):
        Throughput(global_batch=0)
