"""mgtutor.keras2.fit_generator keeps Keras 2's contract: steps_per_epoch batches every epoch.

Issue 12 §1: with ``flow()`` and steps_per_epoch below len(flow) Keras 3 trained
epoch 2 on the leftover batches ("Your input ran out of data"), and above it cut
every epoch to one pass. Measured before the fix (103 examples, batch 16, so 7
batches a pass; 3 epochs): flow, PyDataset and tf.data trained [5, 2, 5] batches
at steps 5 and [7, 7, 7] at steps 9; a Python generator was right.

The data: example ``i`` is an image whose pixels are all ``i``, so a recording
layer in an eagerly run model sees exactly which examples each step trained on.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from tests.conftest import background

N, BATCH, EPOCHS = 103, 16, 3
PASS = math.ceil(N / BATCH)  # 7 batches, the last one of 7 examples
KINDS = ["flow", "pydataset", "generator", "tf.data"]


def _images(n: int = N) -> tuple[np.ndarray, np.ndarray]:
    x = np.broadcast_to(np.arange(n, dtype=np.float32)[:, None, None, None], (n, 2, 2, 1)).copy()
    return x, (np.arange(n) % 2).astype(np.float32)


def _numbered(x: np.ndarray, y: np.ndarray):
    """A PyDataset whose batches carry, in pixel [0, 1], how many passes it has finished."""
    import keras

    class Numbered(keras.utils.PyDataset):
        def __init__(self):
            super().__init__()
            self.passes = 0

        def __len__(self):
            return PASS

        def __getitem__(self, index):
            batch = x[index * BATCH : (index + 1) * BATCH].copy()
            batch[:, 0, 1, 0] = self.passes
            return batch, y[index * BATCH : (index + 1) * BATCH]

        def on_epoch_end(self):
            self.passes += 1

    return Numbered()


def _source(kind: str):
    import tensorflow as tf

    from mgtutor.keras2.augment import ImageDataGenerator

    x, y = _images()
    if kind == "flow":
        return ImageDataGenerator().flow(x, y, batch_size=BATCH, seed=0)
    if kind == "pydataset":
        return _numbered(x, y)
    if kind == "tf.data":
        return tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH)

    def endless():
        while True:  # Keras 2 generators loop forever
            for i in range(0, N, BATCH):
                yield x[i : i + BATCH], y[i : i + BATCH]

    return endless()


def _model(seen: list | None = None):
    """A 5-weight model; with `seen`, run eagerly and record (id, pixel [0, 1]) of every trained image."""
    import keras

    class Record(keras.layers.Layer):
        def __init__(self):
            super().__init__()
            self.seen = lambda: seen  # a function: Keras would track (copy) a list attribute

        def call(self, inputs, training=None):
            if training and seen is not None:
                pixels = keras.ops.convert_to_numpy(inputs)
                self.seen().append([(int(p[0, 0, 0]), int(p[0, 1, 0])) for p in pixels])
            return inputs

    keras.utils.set_random_seed(0)
    layers = [keras.Input((2, 2, 1)), Record(), keras.layers.Flatten(), keras.layers.Dense(1)]
    model = keras.Sequential(layers)
    model.compile(optimizer="sgd", loss="mse", run_eagerly=seen is not None)
    return model


def _counter():
    """A callback counting the batches trained in each epoch."""
    import keras

    class Count(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.per_epoch = []
            self.per_evaluation = []

        def on_epoch_begin(self, epoch, logs=None):
            self.per_epoch.append(0)

        def on_train_batch_end(self, batch, logs=None):
            self.per_epoch[-1] += 1

        def on_test_begin(self, logs=None):
            self.per_evaluation.append(0)

        def on_test_batch_end(self, batch, logs=None):
            self.per_evaluation[-1] += 1

    return Count()


def _fit(data, steps, **kwargs):
    from mgtutor.keras2.fit_generator import fit_generator

    count = _counter()
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # no "input ran out of data"
        fit_generator(kwargs.pop("model", None) or _model(), data, steps, epochs=EPOCHS, verbose=0,
                      callbacks=[count], **kwargs)  # fmt: skip
    return count


@pytest.mark.parametrize("steps", [5, PASS, 9])
@pytest.mark.parametrize("kind", KINDS)
def test_every_epoch_trains_steps_per_epoch_batches(kind, steps):
    assert _fit(_source(kind), steps).per_epoch == [steps] * EPOCHS


@pytest.mark.parametrize(("kind", "workers"), [("flow", 1), ("pydataset", 1), ("pydataset", 2)])
def test_each_pass_trains_every_example_once(kind, workers):
    data = _source(kind)
    seen = []
    _fit(data, 9, model=_model(seen), workers=workers)  # 2: threads race at the pass boundaries
    assert len(seen) == 27  # 3 full passes of 7 batches, then 6 batches of a 4th
    passes = [sum(seen[start : start + PASS], []) for start in range(0, 27, PASS)]
    for ids in passes[:3]:
        assert sorted(i for i, _ in ids) == list(range(N))
    partial = [i for i, _ in passes[3]]
    assert len(set(partial)) == len(partial) == sum(len(batch) for batch in seen[21:])
    if kind == "pydataset":
        # on_epoch_end ran exactly at each pass boundary, not at Keras' epoch ends
        assert [{p for _, p in ids} for ids in passes] == [{0}, {1}, {2}, {3}]
        assert data.passes >= 3
    else:
        # flow reshuffles at each boundary: the passes order the examples differently
        orders = [[i for i, _ in ids] for ids in passes[:3]]
        assert orders[0] != orders[1] != orders[2]
        assert data.epoch >= 3


def test_shuffle_false_reads_the_batches_in_order_across_boundaries():
    seen = []
    _fit(_source("pydataset"), 9, model=_model(seen), shuffle=False)
    starts = [batch[0][0] for batch in seen]
    assert starts == [BATCH * (g % PASS) for g in range(27)]


def test_shuffle_orders_each_pass_differently():
    from mgtutor.keras2.streams import EndlessBatches

    stream = EndlessBatches(_source("pydataset"), shuffle=True, seed=3)
    orders = [stream.order(p).tolist() for p in range(3)]
    assert all(sorted(order) == list(range(PASS)) for order in orders)
    again = EndlessBatches(_source("pydataset"), shuffle=True, seed=3)
    assert orders[0] != orders[1] and orders[0] == again.order(0).tolist()  # the seed fixes them
    assert stream.num_batches is None  # infinite: Keras 3 keeps one iterator across epochs


def test_without_steps_an_epoch_is_one_pass():
    assert _fit(_source("flow"), None).per_epoch == [PASS] * EPOCHS
    assert _fit(_source("tf.data"), None).per_epoch == [PASS] * EPOCHS

    class Keras2Sequence:  # a Keras 2 / tf_keras Sequence: not a PyDataset
        def __init__(self):
            self.inner = _source("pydataset")

        def __len__(self):
            return len(self.inner)

        def __getitem__(self, index):
            return self.inner[index]

        def on_epoch_end(self):
            self.inner.on_epoch_end()

    assert _fit(Keras2Sequence(), None).per_epoch == [PASS] * EPOCHS
    assert _fit(Keras2Sequence(), 9).per_epoch == [9] * EPOCHS


@pytest.mark.parametrize("kind", ["flow", "tf.data"])
def test_validation_steps_work_the_same_way(kind):
    count = _fit(_source("generator"), 5, validation_data=_source(kind), validation_steps=9)
    assert count.per_epoch == [5] * EPOCHS and count.per_evaluation == [9] * EPOCHS


def test_a_finite_generator_that_runs_dry_is_an_error():
    x, y = _images()

    def one_pass():
        for i in range(0, N, BATCH):
            yield x[i : i + BATCH], y[i : i + BATCH]

    from mgtutor.keras2.fit_generator import fit_generator

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # Keras' own "ran out of data" comes first
        ran_out = r"ran out after 2 of the steps_per_epoch=5 batches of epoch 2.*while True"
        with pytest.raises(ValueError, match=ran_out):
            fit_generator(_model(), one_pass(), steps_per_epoch=5, epochs=EPOCHS, verbose=0)
        with pytest.raises(ValueError, match=r"validation data ran out after 7 of the validation_steps=9"):
            fit_generator(_model(), _source("generator"), 5, verbose=0, validation_data=one_pass(),
                          validation_steps=9)  # fmt: skip


def test_bad_inputs_are_refused_before_training():
    import tensorflow as tf

    from mgtutor.keras2.fit_generator import fit_generator
    from mgtutor.keras2.streams import EndlessBatches

    x, y = _images()
    endless = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH).repeat()
    with pytest.raises(ValueError, match="steps_per_epoch is required when generator is an infinite tf.data"):
        fit_generator(_model(), endless, epochs=1, verbose=0)
    with pytest.raises(ValueError, match="generator is an empty tf.data.Dataset"):
        fit_generator(_model(), endless.take(0), 5, verbose=0)

    class Empty:  # a Keras 2 Sequence without batches
        def __len__(self):
            return 0

        def __getitem__(self, index):
            raise IndexError(index)

        def on_epoch_end(self):
            pass

    with pytest.raises(ValueError, match=r"generator has no batches: len\(generator\) is 0"):
        fit_generator(_model(), Empty(), 5, verbose=0)
    with pytest.raises(TypeError, match="finite keras.utils.PyDataset"):
        EndlessBatches(iter([]))
    with pytest.raises(ValueError, match="seed must be a whole number >= 0"):
        EndlessBatches(_source("flow"), seed=-1)


def test_throughput_reports_steps_and_no_rate_for_a_cut_short_epoch(capsys):
    from mgtutor.progress import Throughput

    x, y = _images()

    def three_batches():
        for i in range(0, 3 * BATCH, BATCH):
            yield x[i : i + BATCH], y[i : i + BATCH]

    meter = Throughput(global_batch=BATCH, images_per_epoch=2 * BATCH)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # Keras 3: "Your input ran out of data"
        history = _model().fit(three_batches(), steps_per_epoch=2, epochs=2, verbose=0, callbacks=[meter])
    first, second = meter.epochs
    assert (first["steps"], first["complete"], first["images"]) == (2, True, 2 * BATCH)
    assert first["images_per_s"] == first["images"] / first["seconds"]
    assert (second["steps"], second["complete"], second["images_per_s"]) == (1, False, None)
    assert second["images"] == BATCH  # not images_per_epoch: the epoch did not cover it
    assert math.isnan(history.history["images_per_s"][1])
    out = capsys.readouterr().out
    assert "epoch 2:" in out and "cut short after 1 of 2 steps" in out
    assert out.count("images/s") == 1

    told = Throughput(global_batch=BATCH, steps_per_epoch=3, verbose=False)
    _model().fit(x[:32], y[:32], batch_size=BATCH, epochs=1, verbose=0, callbacks=[told])
    entry = told.epochs[0]
    assert (entry["steps"], entry["complete"], entry["images_per_s"]) == (2, False, None)  # 2 of the 3 told
    with pytest.raises(ValueError, match="steps_per_epoch must be a whole number"):
        Throughput(BATCH, steps_per_epoch=0)


def test_towers_fit_generator_trains_steps_per_epoch_batches(run_once):
    result = run_once("towers", background("towers"))["fit_generator"]
    assert result["towers"] == ["/device:CPU:0", "/device:CPU:1"]
    assert {k: result[k] for k in ("5", "7", "9")} == {"5": [5, 5, 5], "7": [7, 7, 7], "9": [9, 9, 9]}
    assert result["mirrored"] == [9, 9, 9]
