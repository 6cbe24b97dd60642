"""mgtutor.progress: one short line per epoch, never Keras's redrawn bar."""

from __future__ import annotations

import re

import keras
import numpy as np
import pytest

from mgtutor import progress
from mgtutor.progress import ProgressBar, format_logs

LINE = re.compile(
    r"epoch (\d)/3 - \d+\.\d s - loss \S+ - accuracy \S+ - val_loss \S+ - val_accuracy \S+"
)


def _fit(callback, **fit_options):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 4)).astype("float32")
    y = (x[:, 0] > 0).astype("float32")
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1, activation="sigmoid")])
    model.compile("sgd", "binary_crossentropy", metrics=["accuracy"])
    history = model.fit(x, y, batch_size=16, epochs=3, validation_split=0.25, callbacks=[callback],
                        **fit_options)  # fmt: skip
    return model, history, x, y


@pytest.mark.parametrize("verbose", [0, "auto", 1, 2])
def test_one_line_per_epoch_whatever_keras_verbose_is(capsys, verbose):
    bar = ProgressBar(live=False)
    _, history, _, _ = _fit(bar, verbose=verbose)
    out = capsys.readouterr().out
    assert "\x08" not in out and "\r" not in out and "━" not in out  # no Keras bar beside it
    lines = out.splitlines()
    assert len(lines) == 3 and lines == bar.lines
    assert [int(LINE.fullmatch(line).group(1)) for line in lines] == [1, 2, 3]
    # The figures are the epoch's own, as History keeps them.
    last_loss = float(re.search(r" - loss (\S+)", lines[-1]).group(1))
    assert last_loss == pytest.approx(history.history["loss"][-1], rel=1e-3)


def test_time_left_ends_each_line_and_reaches_zero_at_the_last_epoch(capsys):
    bar = ProgressBar(live=False, time_left=True)
    _fit(bar, verbose=0)
    lines = capsys.readouterr().out.splitlines()
    assert lines == bar.lines and len(lines) == 3
    left = [float(re.search(r" - about (\d+\.\d) min left$", line).group(1)) for line in lines]
    assert all(minutes >= 0 for minutes in left) and left[-1] == 0.0
    assert all(LINE.fullmatch(line.rsplit(" - about", 1)[0]) for line in lines)  # the rest unchanged


def test_evaluate_and_predict_stay_silent(capsys):
    bar = ProgressBar(live=False)
    model, _, x, y = _fit(bar, verbose=0)
    capsys.readouterr()
    model.evaluate(x, y, verbose=0, callbacks=[bar])
    model.predict(x, verbose=0, callbacks=[bar])
    assert capsys.readouterr().out == ""


class _FakeHandle:
    def __init__(self, shown: list) -> None:
        self.shown = shown

    def update(self, bundle, raw):
        assert raw
        self.shown[-1].append(bundle["text/plain"])


def test_in_jupyter_each_epoch_is_one_display_updated_in_place(capsys, monkeypatch):
    displays: list[list[str]] = []

    def display(bundle, raw, display_id):
        assert raw and display_id is True and set(bundle) == {"text/plain"}
        displays.append([bundle["text/plain"]])
        return _FakeHandle(displays)

    monkeypatch.setattr("IPython.display.display", display)
    monkeypatch.setattr(progress, "in_jupyter", lambda: True)
    bar = ProgressBar(update_seconds=1e-9)  # every batch updates the display
    _fit(bar, verbose=0)
    assert capsys.readouterr().out == ""
    assert len(displays) == 3  # one per epoch, each left showing the epoch's line
    assert [shown[-1] for shown in displays] == bar.lines
    for epoch, shown in enumerate(displays, start=1):
        # 64 samples, 16 held out: 3 steps of 16; the live line counts them.
        assert [re.match(r"epoch \d/3 - step (\d)/3 - ", s).group(1) for s in shown[:-1]] == ["1", "2", "3"]
        assert LINE.fullmatch(shown[-1]).group(1) == str(epoch)


def test_format_logs_puts_loss_first_and_validation_last():
    logs = {"accuracy": 0.5, "val_accuracy": np.float32(0.25), "loss": 0.693147, "val_loss": 1.0,
            "learning_rate": 0.001}  # fmt: skip
    assert format_logs(logs) == (
        "loss 0.6931 - accuracy 0.5 - learning_rate 0.001 - val_loss 1 - val_accuracy 0.25"
    )
    assert format_logs({"loss": float("nan")}) == "loss nan"
    assert format_logs(None) == ""


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"live": "yes"}, "live must be True, False or None"),
        ({"update_seconds": 0}, "update_seconds must be a number of seconds > 0"),
        ({"time_left": "yes"}, "time_left must be True or False"),
    ],
)
def test_bad_options_are_refused(options, message):
    with pytest.raises(ValueError, match=message):
        ProgressBar(**options)
