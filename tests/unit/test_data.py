"""mgtutor.data: every source format, the search order, the synthetic fallback, every bad input."""

from __future__ import annotations

import gzip
import pickle
import struct
import tarfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from mgtutor import data, prepare
from mgtutor import dataset as dataset_module

PER_BATCH = 7  # the official layout with any number of images per batch


def _cifar_batch(seed: int, n: int = PER_BATCH) -> tuple[dict, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8)
    labels = rng.integers(0, 10, n)
    # The official rows are channel-major: all red, then all green, then all blue.
    rows = images.transpose(0, 3, 1, 2).reshape(n, 3072)
    return {b"data": rows, b"labels": labels.tolist(), b"batch_label": b"x"}, images, labels


def _write_batches_folder(folder: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    folder.mkdir(parents=True)
    train_x, train_y = [], []
    for i in range(1, 6):
        batch, x, y = _cifar_batch(i)
        (folder / f"data_batch_{i}").write_bytes(pickle.dumps(batch))
        train_x.append(x)
        train_y.append(y)
    batch, test_x, test_y = _cifar_batch(99)
    (folder / "test_batch").write_bytes(pickle.dumps(batch))
    (folder / "batches.meta").write_bytes(pickle.dumps({b"label_names": []}))
    return np.concatenate(train_x), np.concatenate(train_y), test_x, test_y


def _archive(folder: Path, target: Path) -> Path:
    with tarfile.open(target, "w:gz") as tar:
        tar.add(folder, arcname="cifar-10-batches-py")
    return target


@pytest.fixture
def cifar_folder(tmp_path):
    folder = tmp_path / "src" / "cifar-10-batches-py"
    return folder, _write_batches_folder(folder)


def _assert_cifar(dataset: data.Dataset, expected) -> None:
    x_train, y_train, x_test, y_test = expected
    assert dataset.name == "cifar10" and not dataset.synthetic
    assert dataset.x_train.shape == (5 * PER_BATCH, 32, 32, 3)
    assert dataset.y_train.shape == (5 * PER_BATCH, 1) and dataset.y_train.dtype == np.uint8
    np.testing.assert_array_equal(dataset.x_train, x_train)
    np.testing.assert_array_equal(dataset.y_train[:, 0], y_train)
    np.testing.assert_array_equal(dataset.x_test, x_test)
    np.testing.assert_array_equal(dataset.y_test[:, 0], y_test)
    assert dataset.class_names[0] == "airplane" and dataset.num_classes == 10


def test_reads_extracted_folder_with_any_batch_size(cifar_folder, isolated_sources):
    folder, expected = cifar_folder
    _assert_cifar(data.load_cifar10(folder), expected)


def test_reads_official_tar_gz(cifar_folder, isolated_sources, tmp_path):
    folder, expected = cifar_folder
    archive = _archive(folder, tmp_path / "cifar-10-python.tar.gz")
    _assert_cifar(data.load_cifar10(archive), expected)


def test_reads_keras_npz(cifar_folder, isolated_sources, tmp_path):
    _, (x_train, y_train, x_test, y_test) = cifar_folder
    npz = tmp_path / "cifar10.npz"
    np.savez(npz, x_train=x_train, y_train=y_train[:, None], x_test=x_test, y_test=y_test[:, None])
    _assert_cifar(data.load_cifar10(npz), (x_train, y_train, x_test, y_test))


def test_unpacks_like_keras_load_data(cifar_folder, isolated_sources):
    folder, _ = cifar_folder
    (x_train, y_train), (x_test, y_test) = data.load_cifar10(folder)
    assert x_train.shape[1:] == (32, 32, 3) and y_test.shape == (PER_BATCH, 1)


@pytest.mark.parametrize(
    "layout",
    [
        "cifar-10-batches-py",  # Keras 2 and early Keras 3 cache
        "cifar-10-batches-py-target/cifar-10-batches-py",  # Keras 3.15 cache
        "cifar-10-batches-py-target_archive",  # Keras 3.15 downloaded archive, no suffix
    ],
)
def test_finds_every_keras_cache_layout(layout, cifar_folder, isolated_sources):
    folder, expected = cifar_folder
    target = isolated_sources / "datasets" / layout
    target.parent.mkdir(parents=True, exist_ok=True)
    if layout.endswith("_archive"):
        _archive(folder, target)
    else:
        folder.rename(target)
    dataset = data.load_cifar10()
    assert dataset.source == str(target)
    _assert_cifar(dataset, expected)


def test_sources_in_documented_order(cifar_folder, isolated_sources, tmp_path, monkeypatch):
    folder, _ = cifar_folder
    env_dir = tmp_path / "env"
    env_dir.mkdir()
    _archive(folder, env_dir / "cifar-10-python.tar.gz")
    cache = isolated_sources / "datasets"
    cache.mkdir()
    _archive(folder, cache / "cifar-10-batches-py.tar.gz")
    monkeypatch.setenv("MGTUTOR_DATA_DIR", str(env_dir))

    assert data.load_cifar10(folder).source == str(folder)  # explicit path first
    assert data.load_cifar10().source == str(env_dir / "cifar-10-python.tar.gz")  # then env var
    monkeypatch.delenv("MGTUTOR_DATA_DIR")
    assert data.load_cifar10().source == str(cache / "cifar-10-batches-py.tar.gz")  # then cache


def test_full_passes_over_a_subset_to_the_whole_data_set(isolated_sources, tmp_path, monkeypatch):
    # The fixture-sized "official" data set: 5 batches of 7 and a test batch of 7.
    monkeypatch.setattr(data, "FULL_SIZES", {**data.FULL_SIZES, "cifar10": (5 * PER_BATCH, PER_BATCH)})
    whole = tmp_path / "cache-src" / "cifar-10-batches-py"
    _write_batches_folder(whole)
    shipped = tmp_path / "shipped"
    shipped.mkdir()
    small = tmp_path / "small" / "cifar-10-batches-py"
    small.mkdir(parents=True)
    for name in ("data_batch_1", "test_batch"):  # a workshop's subset: fewer images than the official
        (small / name).write_bytes(pickle.dumps(_cifar_batch(3, n=3)[0]))
    _archive(small, shipped / "cifar-10-python.tar.gz")
    monkeypatch.setenv("MGTUTOR_DATA_DIR", str(shipped))

    assert data.load_cifar10().source == str(shipped / "cifar-10-python.tar.gz")  # the lessons: as before
    with pytest.raises(data.DataNotFoundError) as caught:
        data.load_cifar10(full=True)
    message = str(caught.value)
    assert "holds 3 training and 3 test images, not the full 35 and 7" in message
    assert "full=True takes only a copy of the whole data set" in message

    cache = isolated_sources / "datasets"
    cache.mkdir()
    _archive(whole, cache / "cifar-10-batches-py.tar.gz")
    found = data.load_dataset("cifar10", full=True)
    assert found.source == str(cache / "cifar-10-batches-py.tar.gz") and len(found.y_train) == 5 * PER_BATCH
    assert data.load_dataset("cifar10").source == str(shipped / "cifar-10-python.tar.gz")


def test_full_must_be_a_bool(isolated_sources):
    with pytest.raises(TypeError, match="full must be True"):
        data.load_dataset("cifar10", full="yes")


def test_nothing_found_lists_what_was_tried(isolated_sources, tmp_path):
    with pytest.raises(data.DataNotFoundError) as caught:
        data.load_cifar10()
    message = str(caught.value)
    assert "Keras cache" in message and "MGTUTOR_OFFLINE" in message
    assert "MGTUTOR_DATA_DIR" in message and "synthetic_fallback=True" in message


def test_explicit_folder_without_data_does_not_fall_through(isolated_sources, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(data.DataNotFoundError, match="path argument"):
        data.load_cifar10(empty)


def test_missing_path_names_the_parameter(isolated_sources, tmp_path, monkeypatch):
    with pytest.raises(data.DataError, match="path argument .* does not exist"):
        data.load_cifar10(tmp_path / "nope.tar.gz")
    monkeypatch.setenv("MGTUTOR_DATA_DIR", str(tmp_path / "nowhere"))
    with pytest.raises(data.DataError, match="MGTUTOR_DATA_DIR .* does not exist"):
        data.load_cifar10()


def test_truncated_archive_is_a_clear_error(cifar_folder, isolated_sources, tmp_path):
    folder, _ = cifar_folder
    archive = _archive(folder, tmp_path / "cifar-10-python.tar.gz")
    truncated = tmp_path / "cut" / "cifar-10-python.tar.gz"
    truncated.parent.mkdir()
    truncated.write_bytes(archive.read_bytes()[: archive.stat().st_size // 2])
    with pytest.raises(data.DataError, match=r"cut/cifar-10-python.tar.gz is not a readable") as caught:
        data.load_cifar10(truncated)
    assert "truncated or corrupt" in str(caught.value)


@pytest.mark.parametrize(
    "payload",
    [b"not a pickle at all", pickle.dumps({b"labels": [1]}), pickle.dumps({b"data": np.zeros((2, 5))})],
    ids=["garbage", "no-data-key", "wrong-width"],
)
def test_corrupt_batch_is_a_clear_error(payload, cifar_folder, isolated_sources):
    folder, _ = cifar_folder
    (folder / "data_batch_3").write_bytes(payload)
    with pytest.raises(data.DataError, match="not a readable CIFAR-10 file"):
        data.load_cifar10(folder)


def test_archive_without_batches_is_a_clear_error(isolated_sources, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "readme.txt").write_text("hello")
    archive = tmp_path / "cifar-10-python.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(other, arcname="x")
    with pytest.raises(data.DataError, match="no data_batch_N or test_batch"):
        data.load_cifar10(archive)


def test_fallback_is_synthetic_and_loud(isolated_sources, capsys):
    dataset = data.load_dataset("cifar10", synthetic_fallback=True)
    assert dataset.synthetic and dataset.input_shape == (32, 32, 3)
    warning = capsys.readouterr().err
    assert "SYNTHETIC" in warning and "No cifar10 data found" in warning
    with pytest.raises(data.DataNotFoundError):
        data.load_dataset("cifar10", synthetic_fallback=False)


def test_fallback_never_hides_a_damaged_file(isolated_sources, tmp_path):
    broken = tmp_path / "cifar-10-python.tar.gz"
    broken.write_bytes(b"\x1f\x8b broken")
    with pytest.raises(data.DataError, match="not a readable"):
        data.load_dataset("cifar10", broken, synthetic_fallback=True)


def test_load_dataset_rejects_unknown_name():
    with pytest.raises(ValueError, match="dataset name must be one of"):
        data.load_dataset("imagenet")


# --------------------------------------------------------------------------- MNIST


def _write_idx(path: Path, array: np.ndarray, *, truncate: bool = False) -> None:
    header = struct.pack(">HBB", 0, 8, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    body = array.astype(np.uint8).tobytes()
    with gzip.open(path, "wb") as handle:
        handle.write(header + (body[: len(body) // 2] if truncate else body))


@pytest.fixture
def mnist_folder(tmp_path):
    folder = tmp_path / "mnist-subset"
    folder.mkdir()
    rng = np.random.default_rng(0)
    arrays = {
        "x_train": rng.integers(0, 256, (12, 28, 28)),
        "y_train": rng.integers(0, 10, 12),
        "x_test": rng.integers(0, 256, (5, 28, 28)),
        "y_test": rng.integers(0, 10, 5),
    }
    for key, stem in data._IDX_FILES.items():
        _write_idx(folder / f"{stem}.gz", arrays[key])
    return folder, arrays


def test_reads_mnist_idx(mnist_folder, isolated_sources):
    folder, arrays = mnist_folder
    mnist = data.load_mnist(folder)
    assert mnist.x_train.shape == (12, 28, 28, 1) and mnist.y_test.shape == (5, 1)
    np.testing.assert_array_equal(mnist.x_train[..., 0], arrays["x_train"])
    np.testing.assert_array_equal(mnist.y_train[:, 0], arrays["y_train"])


def test_finds_mnist_in_a_subfolder_of_the_data_dir(mnist_folder, isolated_sources, monkeypatch):
    folder, _ = mnist_folder
    monkeypatch.setenv("MGTUTOR_DATA_DIR", str(folder.parent))
    assert data.load_mnist().source == str(folder)


def test_reads_keras_mnist_npz(mnist_folder, isolated_sources):
    _, arrays = mnist_folder
    cache = isolated_sources / "datasets"
    cache.mkdir()
    np.savez(cache / "mnist.npz", **arrays)  # Keras' layout: (N, 28, 28) and (N,)
    mnist = data.load_mnist()
    assert mnist.x_train.shape == (12, 28, 28, 1) and mnist.y_train.shape == (12, 1)


def test_truncated_idx_is_a_clear_error(mnist_folder, isolated_sources):
    folder, arrays = mnist_folder
    _write_idx(folder / "t10k-images-idx3-ubyte.gz", arrays["x_test"], truncate=True)
    with pytest.raises(data.DataError, match="t10k-images-idx3-ubyte.gz is not a readable MNIST"):
        data.load_mnist(folder)


def test_mnist_fallback_has_mnist_shape(isolated_sources):
    assert data.load_dataset("mnist").input_shape == (28, 28, 1)


# --------------------------------------------------------------------------- real data


@pytest.mark.needs_data
def test_real_cifar_subset_matches_the_full_jpeg_set(data_dir):
    exact = data.load_cifar10(data_dir / "cifar-10-python-subset.tar.gz")
    assert exact.x_train.shape == (5085, 32, 32, 3) and exact.x_test.shape == (1017, 32, 32, 3)
    lossy = data.load_cifar10(data_dir / "cifar10-jpeg-full.npz")
    assert lossy.x_train.shape == (50000, 32, 32, 3) and lossy.y_test.shape == (10000, 1)
    # Each subset batch is the first 1,017 images of its official batch of 10,000.
    starts = [i * 10000 for i in range(5)]
    lossy_prefix = np.concatenate([lossy.x_train[s : s + 1017] for s in starts])
    labels_prefix = np.concatenate([lossy.y_train[s : s + 1017] for s in starts])
    np.testing.assert_array_equal(exact.y_train, labels_prefix)
    error = np.abs(exact.x_train.astype(np.int16) - lossy_prefix).mean()
    assert 3 < error < 9, f"JPEG error {error:.2f}/255, README says about 5.8"


@pytest.mark.needs_data
def test_real_mnist_subset(data_dir):
    mnist = data.load_mnist(data_dir / "mnist-subset")
    assert mnist.x_train.shape == (17435, 28, 28, 1) and mnist.x_test.shape == (10000, 28, 28, 1)
    assert set(np.unique(mnist.y_test)) == set(range(10))
    assert mnist.x_train.max() == 255 and mnist.x_train.min() == 0


@pytest.mark.needs_data
def test_data_dir_env_prefers_exact_pixels(data_dir, monkeypatch):
    monkeypatch.setenv("MGTUTOR_DATA_DIR", str(data_dir))
    assert data.load_cifar10().source.endswith("cifar-10-python-subset.tar.gz")


@pytest.mark.needs_data
def test_full_takes_the_whole_jpeg_set_from_the_data_dir(data_dir, monkeypatch):
    monkeypatch.setenv("MGTUTOR_DATA_DIR", str(data_dir))
    full = data.load_dataset("cifar10", full=True, synthetic_fallback=False, allow_download=False)
    assert full.source.endswith("cifar10-jpeg-full.npz") and not full.synthetic
    assert full.x_train.shape == (50000, 32, 32, 3) and full.x_test.shape == (10000, 32, 32, 3)
    with pytest.raises(data.DataNotFoundError, match="17,435 training and 10,000 test images"):
        data.load_mnist(full=True, allow_download=False)  # the shipped MNIST: a prefix of the training split


# --------------------------------------------------------------------------- preparing


def test_synthetic_is_deterministic_and_balanced():
    first = dataset_module.synthetic_dataset(200, 50, seed=3)
    again = dataset_module.synthetic_dataset(200, 50, seed=3)
    other = dataset_module.synthetic_dataset(200, 50, seed=4)
    np.testing.assert_array_equal(first.x_train, again.x_train)
    assert not np.array_equal(first.x_train, other.x_train)
    counts = dataset_module.class_counts(np.concatenate([first.y_train, first.y_test]), 10)
    assert counts.tolist() == [25] * 10
    assert first.x_train.dtype == np.uint8 and first.synthetic


def test_synthetic_classes_differ_more_between_than_within():
    synthetic = dataset_module.synthetic_dataset(1000, 10, seed=0)
    # The spectrum's magnitude ignores phase and position: a class signature.
    spectra = np.abs(np.fft.fft2(synthetic.x_train.mean(-1) - 127.5))
    labels = synthetic.y_train[:, 0]
    centroids = np.stack([spectra[labels == k].mean(0) for k in range(10)])
    nearest = ((spectra[:, None] - centroids[None]) ** 2).sum((2, 3)).argmin(1)
    assert (nearest == labels).mean() > 0.9


def test_subset_is_balanced_reproducible_and_validated():
    x = np.arange(1000)
    y = np.repeat(np.arange(10), 100)[:, None]
    xs, ys = dataset_module.take_subset(x, y, 53, seed=1)
    counts = dataset_module.class_counts(ys, 10)
    assert counts.sum() == 53 and counts.max() - counts.min() <= 1
    np.testing.assert_array_equal(xs, dataset_module.take_subset(x, y, 53, seed=1)[0])
    assert not np.array_equal(xs, dataset_module.take_subset(x, y, 53, seed=2)[0])
    np.testing.assert_array_equal(y[xs], ys)  # images stay with their labels
    with pytest.raises(ValueError, match="train_samples=2000 but only 1000"):
        dataset_module.take_subset(x, y, 2000, parameter="train_samples")
    with pytest.raises(ValueError, match="n must be a whole number"):
        dataset_module.take_subset(x, y, 0)


def test_dataset_subset_keeps_metadata():
    small = dataset_module.synthetic_dataset(100, 40, seed=0).subset(20, None, seed=0)
    assert small.x_train.shape == (20, 32, 32, 3) and small.x_test.shape == (40, 32, 32, 3)
    assert small.synthetic and small.class_names[0] == "pattern-0"


def test_scale_and_one_hot_match_keras():
    import keras

    pixels = np.array([[0, 128, 255]], dtype=np.uint8)
    scaled = prepare.scale_images(pixels)
    assert scaled.dtype == np.float32
    np.testing.assert_allclose(scaled, [[0.0, 128 / 255, 1.0]], rtol=1e-7)
    labels = np.array([[3], [0], [9]])
    np.testing.assert_array_equal(prepare.one_hot(labels, 10), keras.utils.to_categorical(labels, 10))
    with pytest.raises(ValueError, match="Check num_classes"):
        prepare.one_hot(labels, 5)


def test_make_dataset_batches_globally():
    x = np.zeros((70, 4, 4, 3), np.float32)
    y = np.arange(70)
    batches = [b[1].numpy() for b in prepare.make_dataset(x, y, 32, seed=0)]
    assert [len(b) for b in batches] == [32, 32, 6]
    assert sorted(np.concatenate(batches).tolist()) == list(range(70))
    again = [b[1].numpy() for b in prepare.make_dataset(x, y, 32, seed=0)]
    np.testing.assert_array_equal(np.concatenate(batches), np.concatenate(again))
    dropped = list(prepare.make_dataset(x, y, 32, shuffle=False, drop_remainder=True))
    assert len(dropped) == 2
    endless = iter(prepare.make_dataset(x, y, 32, shuffle=False, drop_remainder=True, repeat=True))
    third = [next(endless) for _ in range(3)][2][1].numpy().tolist()
    assert third == [*range(64, 70), *range(26)]  # whole batches, read on past the end into the next pass


def test_prepared_scales_and_one_hots_both_splits():
    dataset = dataset_module.synthetic_dataset(20, 10, seed=0)
    (x_train, y_train), (x_test, y_test) = dataset.prepared()
    np.testing.assert_array_equal(x_train, prepare.scale_images(dataset.x_train))
    np.testing.assert_array_equal(y_test, prepare.one_hot(dataset.y_test, 10))
    assert x_test.dtype == np.float32 and y_train.shape == (20, 10)


def test_synthetic_stand_in_grows_to_any_subset_size():
    # Offline, every notebook's defaults must run: notebook 07 asks for 8,000 MNIST-shaped examples.
    stand_in = dataset_module.synthetic_dataset(100, 20, image_shape=(28, 28, 1), seed=5)
    grown = stand_in.subset(300, 50, seed=1)
    assert grown.x_train.shape == (300, 28, 28, 1) and grown.x_test.shape == (50, 28, 28, 1)
    assert grown.synthetic and grown.synthetic_seed == 5
    assert np.bincount(grown.y_train[:, 0]).tolist() == [30] * 10
    np.testing.assert_array_equal(grown.x_train, stand_in.subset(300, 50, seed=1).x_train)
    # Real data never grows: asking for more than exists stays an error naming the parameter.
    real_like = replace(stand_in, synthetic=False, synthetic_seed=None)
    with pytest.raises(ValueError, match="train_samples=300 but only 100"):
        real_like.subset(300, None)
    with pytest.raises(ValueError, match="test_samples must be a whole number"):
        stand_in.subset(10, "all")


def test_prepared_scales_or_standardizes_per_channel_with_training_statistics():
    dataset = dataset_module.synthetic_dataset(200, 50, seed=2)
    (x_train, y_train), (x_test, y_test) = dataset.prepared()
    assert x_train.dtype == np.float32 and 0.0 <= x_train.min() and x_train.max() <= 1.0
    assert y_train.shape == (200, 10) and y_test.shape == (50, 10)
    (s_train, _), (s_test, _) = dataset.prepared(standardize=True)
    assert s_train.dtype == np.float32
    np.testing.assert_allclose(s_train.mean(axis=(0, 1, 2), dtype=np.float64), 0.0, atol=1e-5)
    np.testing.assert_allclose(s_train.std(axis=(0, 1, 2), dtype=np.float64), 1.0, atol=1e-5)
    # The test split uses the TRAINING statistics: the same affine map, not its own.
    mean, std = x_train.mean(axis=(0, 1, 2), dtype=np.float64), x_train.std(axis=(0, 1, 2), dtype=np.float64)
    np.testing.assert_allclose(s_test, (x_test - mean) / std, atol=1e-5)
    with pytest.raises(TypeError, match="standardize must be True or False"):
        dataset.prepared(standardize="yes")
