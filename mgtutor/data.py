"""Load CIFAR-10 and MNIST from wherever they are, offline included: `load_dataset`.

Looked for in this order: the ``path`` argument, ``MGTUTOR_DATA_DIR``, the Keras cache
(``$KERAS_HOME/datasets``), then the Keras download unless ``MGTUTOR_OFFLINE`` is set. Failing
all, the notebooks get a labelled synthetic stand-in; asked for real data only, `DataError`
lists what was tried. The classroom data kit (downloads, checksums) is `mgtutor.classroom.datakit`.
With ``full=True`` only a copy holding the whole official splits will do (`FULL_SIZES`): the
exact CIFAR-10 subset a workshop ships is passed over, with the reason in the error if nothing else is found.
"""

from __future__ import annotations

import gzip
import os
import pickle
import socket
import struct
import sys
import tarfile
import zipfile
import zlib
from pathlib import Path

import numpy as np

from mgtutor.dataset import Dataset, synthetic_dataset

# Each data set's images as the loaders give them (the synthetic stand-in takes CIFAR-10's); the lessons'
# limits (mgtutor.classroom.limit_checks) size their drills from it.
IMAGE_SHAPES = {"cifar10": (32, 32, 3), "mnist": (28, 28, 1)}

DATA_DIR_ENV = "MGTUTOR_DATA_DIR"
OFFLINE_ENV = "MGTUTOR_OFFLINE"
DATASET_NAMES = ("cifar10", "mnist", "synthetic")
# The official (train, test) sizes: what `full=True` asks of a copy.
FULL_SIZES = {"cifar10": (50_000, 10_000), "mnist": (60_000, 10_000)}

CIFAR10_CLASSES = (
    "airplane", "automobile", "bird", "cat", "deer",
    "dog", "frog", "horse", "ship", "truck",
)  # fmt: skip
MNIST_CLASSES = tuple(str(digit) for digit in range(10))

# Names as the official archive, older and newer Keras caches and our shared
# folder spell them; exact pixels before the JPEG-lossy npz.
_CIFAR_NAMES = (
    "cifar-10-batches-py",
    "cifar-10-batches-py-target/cifar-10-batches-py",
    "cifar-10-python.tar.gz",
    "cifar-10-batches-py-target_archive",
    "cifar-10-batches-py.tar.gz",
    "cifar-10-python*.tar.gz",
    "cifar10*.npz",
    "cifar-10*.npz",
)
_MNIST_NAMES = ("mnist", "mnist-subset", "mnist*", "mnist.npz")
_IDX_FILES = {
    "x_train": "train-images-idx3-ubyte",
    "y_train": "train-labels-idx1-ubyte",
    "x_test": "t10k-images-idx3-ubyte",
    "y_test": "t10k-labels-idx1-ubyte",
}
_DOWNLOAD_HOSTS = {"cifar10": "www.cs.toronto.edu", "mnist": "storage.googleapis.com"}
# What goes wrong inside a damaged archive, whatever the layer that notices.
_READ_ERRORS = (
    tarfile.TarError, EOFError, OSError, pickle.UnpicklingError, zlib.error,
    zipfile.BadZipFile, KeyError, ValueError, IndexError, struct.error, TypeError,
)  # fmt: skip


class DataError(RuntimeError):
    """The data could not be found or read; the message says what was tried and the fix."""


class DataNotFoundError(DataError):
    """No source had the data set (as opposed to a source that had it damaged)."""


# --------------------------------------------------------------------------- finding


def keras_cache_dir() -> Path:
    """Where Keras keeps downloaded data sets (``$KERAS_HOME/datasets``)."""
    return Path(os.environ.get("KERAS_HOME", Path.home() / ".keras")).expanduser() / "datasets"


def _matches(folder: Path, patterns: tuple[str, ...]) -> list[Path]:
    found: list[Path] = []
    for pattern in patterns:
        hits = sorted(folder.glob(pattern)) if "*" in pattern else [folder / pattern]
        found.extend(hit for hit in hits if hit.exists() and hit not in found)
    return found


def _locations(path: str | os.PathLike | None, patterns: tuple[str, ...]) -> list[tuple[str, list[Path]]]:
    """(description, candidate paths) per source, in the documented order."""
    sources: list[tuple[str, list[Path]]] = []
    for label, given in (("path argument", path), (DATA_DIR_ENV, os.environ.get(DATA_DIR_ENV))):
        if given in (None, ""):
            continue
        where = Path(given).expanduser()
        if not where.exists():
            hint = "pass an existing file or folder" if label == "path argument" else (
                f"point {DATA_DIR_ENV} at the folder holding the data, or unset it"
            )
            raise DataError(f"{label} {str(where)!r} does not exist; {hint}.")
        # A folder may be the data itself (an extracted batches folder) or hold it.
        candidates = [where, *_matches(where, patterns)] if where.is_dir() else [where]
        sources.append((f"{label} {where}", candidates))
    cache = keras_cache_dir()
    sources.append((f"Keras cache {cache}", _matches(cache, patterns) if cache.is_dir() else []))
    return sources


def _download_allowed(name: str, allow_download: bool) -> tuple[bool, str]:
    if not allow_download:
        return False, "download not allowed (allow_download=False)"
    if os.environ.get(OFFLINE_ENV, "") not in ("", "0"):
        return False, f"download skipped ({OFFLINE_ENV} is set)"
    try:
        socket.create_connection((_DOWNLOAD_HOSTS[name], 443), timeout=3).close()
    except OSError as err:
        return False, f"download impossible: {_DOWNLOAD_HOSTS[name]} unreachable ({err})"
    return True, ""


def _short_of_full(name: str, data: Dataset) -> str | None:
    """Why `data` is not the whole official data set, or None if it is."""
    sizes, full = (len(data.y_train), len(data.y_test)), FULL_SIZES[name]
    if sizes == full:
        return None
    return (f"{data.source} holds {sizes[0]:,} training and {sizes[1]:,} test images, "
            f"not the full {full[0]:,} and {full[1]:,}")


def _load(name: str, path, allow_download: bool, patterns, reader, downloader, full: bool = False) -> Dataset:
    tried: list[str] = []
    for description, candidates in _locations(path, patterns):
        short = []
        for candidate in candidates:
            if reader(candidate, probe=True):
                data = reader(candidate, probe=False)
                why = _short_of_full(name, data) if full else None
                if why is None:
                    return data
                short.append(why)
        tried.extend(f"{description}: {why}" for why in short)
        if not short:
            tried.append(f"{description}: nothing for {name}")
        if description.startswith("path argument"):
            break  # an explicit path is what the caller wants; other sources would surprise
    explicit = path not in (None, "")
    allowed, why_not = (False, "") if explicit else _download_allowed(name, allow_download)
    if allowed:
        return downloader()
    if why_not:
        tried.append(why_not)
    raise DataNotFoundError(
        f"No {name} data found. Tried, in order:\n  - "
        + "\n  - ".join(tried)
        + ("\nfull=True takes only a copy of the whole data set." if full else "")
        + f"\nFix: set {DATA_DIR_ENV} to a folder holding the data (or pass path=...), "
        "or connect to the internet once so Keras can download and cache it, "
        "or use load_dataset(..., synthetic_fallback=True) for a synthetic stand-in."
    )


def _unreadable(path: Path, err: BaseException, name: str) -> DataError:
    return DataError(
        f"{path} is not a readable {name} file ({type(err).__name__}: {err}). It is probably "
        "truncated or corrupt: delete it and fetch it again, or point the loader elsewhere."
    )


# --------------------------------------------------------------------------- CIFAR-10


def _cifar_batches_from(path: Path) -> dict[str, bytes]:
    """Raw bytes of each ``data_batch_N`` / ``test_batch`` in a folder or tar archive."""
    wanted = {f"data_batch_{i}" for i in range(1, 6)} | {"test_batch"}
    if path.is_dir():
        return {p.name: p.read_bytes() for p in sorted(path.iterdir()) if p.name in wanted}
    with tarfile.open(path, "r:*") as archive:
        members = [m for m in archive.getmembers() if m.isfile() and Path(m.name).name in wanted]
        return {Path(m.name).name: archive.extractfile(m).read() for m in members}


def _decode_cifar_batch(raw: bytes) -> tuple[np.ndarray, np.ndarray]:
    batch = pickle.loads(raw, encoding="bytes")
    data = np.asarray(batch[b"data"], dtype=np.uint8)
    labels = np.asarray(batch[b"labels"], dtype=np.uint8).reshape(-1, 1)
    if data.ndim != 2 or data.shape[1] != 3072 or len(data) != len(labels):
        raise ValueError(f"batch has data {data.shape} and {len(labels)} labels, not N x 3072")
    # Rows are channel-major (R plane, G plane, B plane); Keras layout is NHWC.
    return data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1), labels


def _is_npz(path: Path) -> bool:
    return path.is_file() and path.suffix == ".npz"


def _read_npz(path: Path, name: str, class_names: tuple[str, ...], probe: bool):
    if probe:
        return _is_npz(path)
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in ("x_train", "y_train", "x_test", "y_test")}
    except _READ_ERRORS as err:
        raise _unreadable(path, err, name) from err
    if name == "mnist" and arrays["x_train"].ndim == 3:
        arrays = {k: (v[..., None] if k.startswith("x") else v) for k, v in arrays.items()}
    for key in ("y_train", "y_test"):
        arrays[key] = arrays[key].astype(np.uint8).reshape(-1, 1)
    return Dataset(name, **arrays, class_names=class_names, source=str(path))


def _read_cifar(path: Path, probe: bool):
    if _is_npz(path):
        return _read_npz(path, "cifar10", CIFAR10_CLASSES, probe)
    is_archive = path.is_file() and (path.suffix in (".gz", ".tgz", ".tar") or "archive" in path.name)
    is_folder = path.is_dir() and (path / "test_batch").exists()
    if probe:
        return is_archive or is_folder
    try:
        raw = _cifar_batches_from(path)
        if "test_batch" not in raw or not any(k.startswith("data_batch") for k in raw):
            raise KeyError("no data_batch_N or test_batch inside")
        train = [_decode_cifar_batch(raw[k]) for k in sorted(raw) if k.startswith("data_batch")]
        x_test, y_test = _decode_cifar_batch(raw["test_batch"])
    except _READ_ERRORS as err:
        raise _unreadable(path, err, "CIFAR-10") from err
    return Dataset(
        "cifar10",
        np.concatenate([x for x, _ in train]),
        np.concatenate([y for _, y in train]),
        x_test,
        y_test,
        CIFAR10_CLASSES,
        source=str(path),
    )


def _download_cifar10() -> Dataset:
    import keras

    (x_train, y_train), (x_test, y_test) = keras.datasets.cifar10.load_data()
    return Dataset("cifar10", x_train, y_train, x_test, y_test, CIFAR10_CLASSES, "Keras download")


def load_cifar10(
    path: str | os.PathLike | None = None, *, allow_download: bool = True, full: bool = False
) -> Dataset:
    """Real CIFAR-10 from the first source that has it (see the module docstring).

    Reads the official ``cifar-10-python.tar.gz``, its extracted
    ``cifar-10-batches-py/`` folder (any number of images per batch) and
    Keras-layout ``.npz`` files; with `full`, only a copy of all 60,000 images.
    Raises `DataError` when nothing is found.
    """
    return _load("cifar10", path, allow_download, _CIFAR_NAMES, _read_cifar, _download_cifar10, full)


# --------------------------------------------------------------------------- MNIST


def _idx_file(folder: Path, stem: str) -> Path | None:
    for candidate in (folder / f"{stem}.gz", folder / stem):
        if candidate.is_file():
            return candidate
    return None


def _parse_idx(path: Path) -> np.ndarray:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as handle:
        content = handle.read()
    zero, dtype_code, ndim = struct.unpack(">HBB", content[:4])
    if zero != 0 or dtype_code != 0x08:
        raise ValueError(f"bad IDX magic {content[:4].hex()} (want 0000 08 0N for unsigned bytes)")
    shape = struct.unpack(f">{ndim}I", content[4 : 4 + 4 * ndim])
    body = np.frombuffer(content, dtype=np.uint8, offset=4 + 4 * ndim)
    if body.size != int(np.prod(shape)):
        raise ValueError(f"header says {shape} but the file holds {body.size} values")
    return body.reshape(shape)


def _read_mnist(path: Path, probe: bool):
    if _is_npz(path):
        return _read_npz(path, "mnist", MNIST_CLASSES, probe)
    files = {key: _idx_file(path, stem) for key, stem in _IDX_FILES.items()} if path.is_dir() else {}
    if probe:
        return bool(files) and all(files.values())
    arrays = {}
    for key, file in files.items():
        try:
            arrays[key] = _parse_idx(file)
        except _READ_ERRORS as err:
            raise _unreadable(file, err, "MNIST IDX") from err
    for split in ("train", "test"):
        x, y = arrays[f"x_{split}"], arrays[f"y_{split}"]
        if x.ndim != 3 or len(x) != len(y):
            raise DataError(f"MNIST {split} files in {path} disagree: images {x.shape}, labels {y.shape}.")
        arrays[f"x_{split}"], arrays[f"y_{split}"] = x[..., None], y.reshape(-1, 1)
    return Dataset("mnist", **arrays, class_names=MNIST_CLASSES, source=str(path))


def _download_mnist() -> Dataset:
    import keras

    (x_train, y_train), (x_test, y_test) = keras.datasets.mnist.load_data()
    return Dataset(
        "mnist", x_train[..., None], y_train.reshape(-1, 1), x_test[..., None],
        y_test.reshape(-1, 1), MNIST_CLASSES, "Keras download",
    )  # fmt: skip


def load_mnist(
    path: str | os.PathLike | None = None, *, allow_download: bool = True, full: bool = False
) -> Dataset:
    """Real MNIST, images (N, 28, 28, 1), from the official IDX files or Keras' ``mnist.npz``.

    With `full`, only a copy of all 70,000 images.
    """
    return _load("mnist", path, allow_download, _MNIST_NAMES, _read_mnist, _download_mnist, full)


def load_dataset(
    name: str = "cifar10",
    path: str | os.PathLike | None = None,
    *,
    synthetic_fallback: bool = True,
    allow_download: bool = True,
    seed: int = 0,
    full: bool = False,
) -> Dataset:
    """The notebooks' entry point: ``"cifar10"``, ``"mnist"`` or ``"synthetic"``.

    With ``synthetic_fallback`` (the default), a real data set that cannot be had
    is replaced by `synthetic_dataset` of the same shape, with a loud warning.
    With ``full``, only a copy of the whole official data set is taken (never the
    workshop's subset); the synthetic stand-in keeps its size (`Dataset.subset` grows it).
    """
    if name not in DATASET_NAMES:
        raise ValueError(f"dataset name must be one of {DATASET_NAMES}, got {name!r}.")
    if not isinstance(full, bool):
        raise TypeError(f"full must be True (the whole official data set only) or False, got {full!r}.")
    shape = IMAGE_SHAPES["mnist" if name == "mnist" else "cifar10"]
    if name == "synthetic":
        return synthetic_dataset(image_shape=shape, seed=seed)
    loader = load_cifar10 if name == "cifar10" else load_mnist
    try:
        return loader(path, allow_download=allow_download, full=full)
    except DataNotFoundError as err:
        if not synthetic_fallback:
            raise
        banner = "!" * 78
        print(
            f"{banner}\nWARNING: real {name} data is not available, so this run uses a SYNTHETIC "
            f"stand-in.\nAccuracies below are not {name} accuracies.\n{err}\n{banner}",
            file=sys.stderr,
        )
        return synthetic_dataset(image_shape=shape, seed=seed)

