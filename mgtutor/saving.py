"""Saving that loads anywhere and never loses a good file: `save_model`, `load_model`, `export_for_serving`.

A towers model is saved as its template; a file loads on any device count (``strategy=``);
every write is atomic; a model with drifted BatchNorm copies is refused (`mgtutor.batchnorm`).
Keras is imported inside the functions, so importing this starts nothing.
"""

from __future__ import annotations

import contextlib
import os
import zipfile
from pathlib import Path
from typing import Any

from mgtutor.support.files import ModelFileError, atomic_write

# Extension -> what is written. ".weights.h5" must be matched before ".h5".
KERAS_EXT = ".keras"
WEIGHTS_EXT = ".weights.h5"
LEGACY_EXTS = (".h5", ".hdf5")
SAVEDMODEL_FILE = "saved_model.pb"


# --------------------------------------------------------------------------- checks


def _as_path(path: Any, parameter: str = "path") -> Path:
    if isinstance(path, bytes) or not isinstance(path, (str, os.PathLike)) or str(path) == "":
        raise TypeError(f"{parameter} must be a file path (str or pathlib.Path), got {path!r}.")
    return Path(os.fspath(path)).expanduser()


def _kind_of(path: Path) -> str:
    name = path.name.lower()
    if name.endswith(WEIGHTS_EXT):
        return "weights"
    if name.endswith(KERAS_EXT):
        return "keras"
    if name.endswith(LEGACY_EXTS):
        return "legacy"
    return "unknown"


def _is_writable(folder: Path) -> bool:
    return os.access(folder, os.W_OK | os.X_OK)


def _check_folder(path: Path, parameter: str = "path") -> None:
    folder = path.parent
    if not folder.exists():
        raise FileNotFoundError(
            f"{parameter}: the folder {str(folder)!r} does not exist. Create it first "
            f"(os.makedirs({str(folder)!r}, exist_ok=True)) or save somewhere that exists."
        )
    if not folder.is_dir():
        raise NotADirectoryError(
            f"{parameter}: {str(folder)!r} is a file, not a folder, so {path.name!r} cannot be "
            "saved inside it. Pick a path inside a folder."
        )
    if not _is_writable(folder):
        raise PermissionError(
            f"{parameter}: the folder {str(folder)!r} is not writable by this user. Save to a "
            "folder you own (e.g. under your home directory or the notebook's folder)."
        )


def _check_target(path: Path, overwrite: bool, parameter: str = "path", folder: bool = False) -> None:
    if not isinstance(overwrite, bool):
        raise TypeError(f"overwrite must be True or False, got {overwrite!r}.")
    _check_folder(path, parameter)
    if path.exists():
        if not folder and path.is_dir():
            raise IsADirectoryError(
                f"{parameter}: {str(path)!r} is a folder; give a file name inside it, "
                f"e.g. {str(path / 'model.keras')!r}."
            )
        if folder and not path.is_dir():
            raise FileExistsError(
                f"{parameter}: {str(path)!r} is a file; a SavedModel export is a folder. "
                "Choose another path or delete the file."
            )
        if not overwrite:
            raise FileExistsError(
                f"{parameter}: {str(path)!r} already exists and overwrite=False. Pass "
                "overwrite=True to replace it, or choose another name."
            )


def _save_extension_error(path: Path) -> ValueError:
    kind = _kind_of(path)
    if kind == "legacy":
        return ValueError(
            f"path {str(path)!r}: '{path.suffix}' is the legacy HDF5 format of Keras 2 (what seed "
            "001's model.save('my_model.h5') wrote). Keras 3 keeps it only for old files, and it "
            "loses things: it drops the optimizer's per-weight state (RMSprop's and Adam's "
            "averages), and some compiled models (e.g. loss='mse') cannot be loaded back from "
            "it. Save to 'my_model.keras' (architecture + weights + optimizer state) or "
            "'my_model.weights.h5' (weights only); pass legacy_h5=True only if an old tool "
            "needs HDF5."
        )
    suffix = f"'{path.suffix}'" if path.suffix else "no extension"
    return ValueError(
        f"path {str(path)!r} has {suffix}; the extension picks what is saved. Use "
        f"'{path.stem or 'model'}.keras' for the whole model (Keras 3 format) or "
        f"'{path.stem or 'model'}.weights.h5' for the weights only."
    )


def template_of(model: Any, *, verbose: bool = False) -> Any:
    """The model to save or serve: a `TowersModel`'s template, anything else unchanged.

    Raises if `model` is not a built Keras model (a model without weights saves
    as an empty shell).
    """
    import keras

    if not isinstance(model, keras.Model):
        raise TypeError(
            f"model must be a keras.Model, got {type(model).__name__}. Pass the model you "
            "built (or the wrapper multi_gpu_model returned)."
        )
    from mgtutor.keras2.towers import TowersModel

    if isinstance(model, TowersModel):
        if verbose:
            print(
                f"save: {model.name!r} is a multi_gpu_model wrapper; saving its template "
                f"{model.template.name!r} instead. The wrapper only holds the template plus "
                f"the device names {', '.join(model.tower_devices)}, so saved as itself it "
                "would load only where those devices exist; the template's weights are the "
                "ones it trained, and it loads on any number of devices."
            )
        model = model.template
    if not model.built or not model.weights:
        raise ValueError(
            f"model {model.name!r} is not built, so it has no weights to save. Build it first: "
            "start it with keras.Input(shape=...), call model.build(input_shape), or call it "
            "on a batch of data."
        )
    return model


def check_replica_copies(model: Any) -> None:
    """Refuse a model whose replicas hold different copies of a variable (BatchNorm statistics).

    Keras saves replica 0's copy only: such a file would predict unlike the
    model that was trained. Raises before anything is written.
    """
    from mgtutor.batchnorm import DRIFT_TOLERANCE, largest_drift

    spread, where = largest_drift(model)
    if spread > DRIFT_TOLERANCE:
        raise ValueError(
            f"model {model.name!r}: the replica copies of its BatchNormalization statistics differ "
            f"by up to {spread:.3g} (in {where}). Under a MirroredStrategy each replica updates "
            "its own copy of the moving mean and variance from its own slice of the batch, and "
            "Keras would save replica 0's copy only, so the file would predict unlike the model "
            "you trained. Either call mgtutor.average_replica_copies(model) before saving (the "
            "mgtutor.batchnorm.AverageReplicaCopies() callback does it at each epoch end), or build the "
            "model with BatchNormalization(synchronized=True) (mgtutor.sync_batchnorm(model) "
            "switches an existing model before training; build_minigooglenet does it under a "
            "strategy). Nothing was written."
        )


# --------------------------------------------------------------------------- save / load


def save_model(
    model: Any,
    path: str | os.PathLike,
    *,
    overwrite: bool = True,
    legacy_h5: bool = False,
    verbose: bool = True,
) -> Path:
    """Save `model` atomically; the extension of `path` says what is written.

    ``.keras``: the whole model, Keras 3 format (architecture, weights, compile
    and optimizer state). ``.weights.h5``: the weights only, for
    ``model.load_weights``. ``.h5``: Keras 2's legacy HDF5, only with
    ``legacy_h5=True``. A `TowersModel` is saved as its template (said so when
    `verbose`); a model built under a ``MirroredStrategy`` saves as a plain
    one, inside or outside the strategy's scope. A model whose replicas' copies
    of its BatchNormalization statistics differ is refused before anything is
    written (`check_replica_copies`). Returns the path written.
    """
    path = _as_path(path)
    if not isinstance(legacy_h5, bool):
        raise TypeError(f"legacy_h5 must be True or False, got {legacy_h5!r}.")
    kind = _kind_of(path)
    if kind == "unknown" or (kind == "legacy" and not legacy_h5):
        raise _save_extension_error(path)
    _check_target(path, overwrite)
    model = template_of(model, verbose=verbose)
    check_replica_copies(model)

    ext = {"keras": KERAS_EXT, "weights": WEIGHTS_EXT}.get(kind, path.suffix)
    with atomic_write(path, ext) as temp:
        if kind == "weights":
            model.save_weights(temp, overwrite=True)
        else:
            model.save(temp, overwrite=True)
    return path


def _check_readable(path: Path, kind: str) -> None:
    """Cheap structural checks, so a truncated file gets a clear message, not a zip/HDF5 trace."""
    if kind == "keras":
        if not zipfile.is_zipfile(path):
            raise _corrupt(path, "it is not a complete zip archive (a .keras file is one)")
        try:
            with zipfile.ZipFile(path) as archive:
                names = set(archive.namelist())
        except (zipfile.BadZipFile, OSError, EOFError) as err:
            raise _corrupt(path, f"{type(err).__name__}: {err}") from err
        if "config.json" not in names:
            raise _corrupt(path, "it has no config.json (the model architecture)")
    else:
        import h5py

        if not h5py.is_hdf5(path):
            raise _corrupt(path, "it is not a readable HDF5 file")


def _corrupt(path: Path, why: str) -> ModelFileError:
    return ModelFileError(
        f"{str(path)!r} cannot be read: {why}. It is probably truncated by an interrupted save "
        "or copy. Save the model again, or load an earlier copy (resumable_fit keeps "
        "epoch-NN.weights.h5 and best.weights.h5 checkpoints)."
    )


def _nearby_models(path: Path) -> str:
    folder = path.parent if path.parent.is_dir() else None
    if folder is None:
        return f"The folder {str(path.parent)!r} does not exist either."
    found = sorted(
        p.name
        for p in folder.iterdir()
        if not p.name.startswith(".") and (_kind_of(p) != "unknown" or (p / SAVEDMODEL_FILE).exists())
    )
    if not found:
        return f"No model files in {str(folder)!r}."
    return f"Model files in {str(folder)!r}: {', '.join(found[:10])}."


def _check_existing(path: Path) -> None:
    if not path.exists():
        raise FileNotFoundError(
            f"path: no file {str(path)!r}. Check the name and the working directory "
            f"({os.getcwd()}). {_nearby_models(path)}"
        )


def load_model(
    path: str | os.PathLike,
    *,
    strategy: Any = None,
    compile: bool = True,
    custom_objects: dict[str, Any] | None = None,
) -> Any:
    """Load a ``.keras`` (or legacy ``.h5``) model on whatever devices this process has.

    With `strategy` (a ``tf.distribute`` strategy) the model is created in its
    scope, its variables mirrored on every replica, ready to ``fit`` there.
    The file does not remember where it was trained: one saved on 4 devices
    loads on 1 and the reverse, with the same predictions.
    """
    path = _as_path(path)
    if strategy is not None and not callable(getattr(strategy, "scope", None)):
        raise TypeError(
            f"strategy must be a tf.distribute strategy (e.g. mgtutor.mirrored_strategy()) or "
            f"None, got {type(strategy).__name__}."
        )
    _check_existing(path)
    if path.is_dir():
        if (path / SAVEDMODEL_FILE).exists():
            raise ValueError(
                f"path {str(path)!r} is a TensorFlow SavedModel export, not a Keras model file: "
                "it has a serving function but no Keras layers. Open it with "
                "load_served(path), or load the .keras file it was exported from."
            )
        raise IsADirectoryError(f"path {str(path)!r} is a folder; give the .keras file inside it.")
    kind = _kind_of(path)
    if kind == "weights":
        raise ValueError(
            f"path {str(path)!r} holds weights only, no architecture. Build the same model "
            "(e.g. build_seed_cnn(...)), then call model.load_weights(path)."
        )
    if kind == "unknown":
        raise ValueError(
            f"path {str(path)!r}: load_model reads '.keras' files (or legacy '.h5'); "
            f"'{path.suffix or 'no extension'}' is neither."
        )
    _check_readable(path, kind)

    import keras

    # Registers the layers of ImageDataGenerator.as_layers(), so a model holding them loads
    # without the caller having built one first (importing mgtutor.keras2.augment no longer does).
    import mgtutor.keras2.augment_layers  # noqa: F401

    scope = strategy.scope() if strategy is not None else contextlib.nullcontext()
    try:
        with scope:
            return keras.saving.load_model(path, compile=compile, custom_objects=custom_objects)
    except (zipfile.BadZipFile, EOFError, OSError, KeyError) as err:
        raise _corrupt(path, f"{type(err).__name__}: {err}") from err


# --------------------------------------------------------------------------- serving


def export_for_serving(
    model: Any, path: str | os.PathLike, *, overwrite: bool = True, verbose: bool = True
) -> Path:
    """Export `model` as a TensorFlow SavedModel folder (``model.export``), atomically.

    The SavedModel holds a ``serve`` function and the weights, no Keras code:
    what TF Serving, TFLite converters and `load_served` read. A `TowersModel`
    exports its template (serving runs on one device). Like `save_model`, it
    refuses a model whose replicas' BatchNormalization statistics differ.
    Returns the folder.
    """
    path = _as_path(path)
    if _kind_of(path) != "unknown":
        raise ValueError(
            f"path {str(path)!r}: a SavedModel export is a folder, not a '{path.suffix}' file. "
            f"Give a folder name such as {str(path.with_name(path.name.split('.')[0] + '_served'))!r}."
        )
    _check_target(path, overwrite, folder=True)
    model = template_of(model, verbose=verbose)
    check_replica_copies(model)
    with atomic_write(path) as temp:
        model.export(str(temp), format="tf_saved_model", verbose=verbose)
    return path


def load_served(path: str | os.PathLike) -> Any:
    """The exported SavedModel's ``serve`` function as a Keras layer (``keras.layers.TFSMLayer``).

    Call it on a batch like a model: ``load_served(path)(x)``. It is inference
    only; to train again, load the ``.keras`` file with `load_model`.
    """
    path = _as_path(path)
    _check_existing(path)
    if not path.is_dir():
        hint = " Use load_model(path) for it." if _kind_of(path) in ("keras", "legacy") else ""
        raise ValueError(
            f"path {str(path)!r} is a file; a SavedModel export is a folder made by export_for_serving.{hint}"
        )
    if not (path / SAVEDMODEL_FILE).is_file():
        raise ModelFileError(
            f"{str(path)!r} has no {SAVEDMODEL_FILE}, so it is not a (complete) SavedModel. "
            "Export it again with export_for_serving(model, path)."
        )
    import keras

    try:
        return keras.layers.TFSMLayer(str(path), call_endpoint="serve")
    except (OSError, ValueError) as err:
        raise ModelFileError(
            f"{str(path)!r} could not be opened as a SavedModel ({type(err).__name__}: {err}). "
            "Export it again with export_for_serving(model, path)."
        ) from err
