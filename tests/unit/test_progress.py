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
        "loss 0.6931 - accuracy 0.5000 - learning_rate 0.001000 - val_loss 1 - val_accuracy 0.2500"
    )  # four significant figures, zeros kept: epoch lines stack in columns (0.2400 above 0.3816)
    assert format_logs({"seconds": 1234.6}) == "seconds 1235"  # no bare trailing point
    assert format_logs({"loss": float("nan")}) == "loss nan"
    assert format_logs(None) == ""


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"live": "yes"}, "live must be True, False or None"),
        ({"update_seconds": 0}, "update_seconds must be a number of seconds > 0"),
        ({"time_left": "yes"}, "time_left must be True or False"),
        ({"epoch_kinds": "32"}, "epoch_kinds must be a list with one label per epoch"),
    ],
)
def test_bad_options_are_refused(options, message):
    with pytest.raises(ValueError, match=message):
        ProgressBar(**options)


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _run_epochs(bar: ProgressBar, clock: _Clock, epochs: list[tuple[float, float]], steps: int = 10) -> None:
    """Drive `bar` through epochs of (first step, every other step) seconds, each with a 1 s test."""
    bar.set_params({"epochs": len(epochs), "steps": steps, "verbose": 0})
    bar.on_train_begin()
    for epoch, (first, step) in enumerate(epochs):
        bar.on_epoch_begin(epoch)
        for batch in range(steps):
            clock.now += first if batch == 0 else step
            bar.on_train_batch_end(batch)
        clock.now += 1.0  # the test after the epoch
        bar.on_epoch_end(epoch, {"loss": 1.0})


def test_time_left_expects_each_epoch_to_last_as_the_last_of_its_kind(monkeypatch, capsys):
    # Progressive resizing: an epoch at 16x16, two at 24x24, then three at 32x32, each kind's first step
    # tracing for 5 s more. A pace averaged over all epochs would be far too short once the epochs grow.
    clock = _Clock()
    monkeypatch.setattr(progress.time, "perf_counter", clock)
    sides = [16, 24, 24, 32, 32, 32]
    new = [i == 0 or side != sides[i - 1] for i, side in enumerate(sides)]  # the first of its kind: traces
    epochs = [(5 * n + s * s / 256, s * s / 256) for s, n in zip(sides, new, strict=True)]  # 1, 2.25, 4 s
    bar = ProgressBar(live=False, time_left=True, epoch_kinds=sides)
    _run_epochs(bar, clock, epochs)
    seconds = bar.epoch_seconds
    truth = {e: sum(seconds[later] for later in range(e + 1, 7)) / 60 for e in seconds}
    assert seconds[4] == pytest.approx(5 + 10 * 4 + 1) and seconds[5] == pytest.approx(10 * 4 + 1)
    # After the first epoch at full size: two more like it, its 5 s of tracing the only error (12 %).
    assert bar.minutes_left[4] == pytest.approx(2 * seconds[4] / 60)
    assert abs(bar.minutes_left[4] - truth[4]) / truth[4] < 0.2
    assert bar.minutes_left[5] == pytest.approx(truth[5]) and bar.minutes_left[6] == 0.0
    lines = capsys.readouterr().out.splitlines()
    assert lines[3].endswith(f"about {bar.minutes_left[4]:.1f} min left")
    # The pace of all the epochs so far (the small ones and every first step's tracing) is far too short.
    pace = sum(seconds[e] for e in (1, 2, 3, 4)) / 4 * 2 / 60
    assert (truth[4] - pace) / truth[4] > 0.2


def test_time_left_mid_epoch_and_before_any_epoch_ends(monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(progress.time, "perf_counter", clock)
    bar = ProgressBar(live=False, time_left=True, epoch_kinds=[1, 1, 2])
    bar.set_params({"epochs": 3, "steps": 10, "verbose": 0})
    bar.on_train_begin()
    bar.on_epoch_begin(0)
    assert bar._seconds_left(0) is None  # nothing measured yet
    clock.now = 5.0
    assert bar._seconds_left(5) == pytest.approx(5.0 / 0.5 * 2.5)  # half an epoch in 5 s: 2.5 epochs to go
    clock.now = 10.0
    bar.on_epoch_end(0, {})
    bar.on_epoch_begin(1)
    clock.now = 14.0  # epoch 2 is of epoch 1's kind: 6 s of it left; epoch 3's kind unseen: the mean, 10 s
    assert bar._seconds_left(4) == pytest.approx(6.0 + 10.0)
    with pytest.raises(ValueError, match="epoch_kinds has 3 labels for 4 epochs"):
        bar.set_params({"epochs": 4, "steps": 10, "verbose": 0})
