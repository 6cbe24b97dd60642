"""The callbacks the notebooks train with: `ProgressBar` and `Throughput`; TensorBoard epoch scalars.

`ProgressBar` saves one short line per epoch (Keras's own bar saves every redraw);
`Throughput` measures images/s and seconds per epoch.
"""

from __future__ import annotations

import math
import numbers
import time
from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Any

import keras

from mgtutor.support.checks import check_whole
from mgtutor.support.session import in_jupyter

DEFAULT_UPDATE_SECONDS = 0.5


def _number(value: Any) -> str:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return str(value)
    if math.isfinite(value) and value == int(value) and abs(value) < 1e6:
        return str(int(value))
    return f"{value:#.4g}".rstrip(".")  # '#': 0.2400 beside 0.3816, not 0.24


def format_logs(logs: dict[str, Any] | None) -> str:
    """Keras logs as ``loss 0.69 - accuracy 0.5 - val_loss 0.7``: loss first, validation last."""
    logs = logs or {}

    def order(name: str) -> tuple[bool, bool]:
        base = name.removeprefix("val_")
        return name.startswith("val_"), base != "loss"

    return " - ".join(f"{name} {_number(logs[name])}" for name in sorted(logs, key=order))


class ProgressBar(keras.callbacks.ProgbarLogger):
    """Training progress as one line per epoch: ``model.fit(..., verbose=0, callbacks=[ProgressBar()])``.

    In Jupyter the epoch's line is a display updated in place (step, time, running
    loss) at most every `update_seconds`, and left as the epoch's summary, so the
    saved notebook holds one short line per epoch. Elsewhere (a terminal, a log)
    it prints just that line at the end of each epoch. `live` forces either way.

    Being a ``ProgbarLogger``, it replaces Keras's bar whatever `verbose` is (Keras
    adds its own only when none is given); ``verbose=0`` says so in the call.
    Only ``fit`` shows anything: ``evaluate`` and ``predict`` stay silent.
    ``time_left=True`` ends each line with the minutes the whole ``fit`` has left
    (evaluation included), and keeps what each epoch's last line said in
    ``minutes_left`` (epoch number -> minutes) and each epoch's seconds in
    ``epoch_seconds``. An epoch to come is expected to last as long as the last
    finished epoch of its kind: `epoch_kinds` gives one label per epoch (e.g. the
    image side of progressive resizing; None: all alike). Before any epoch of its
    kind has finished, the mean of the finished epochs (the epoch under way: the
    pace of its own steps); before any, the pace of the steps so far.
    """

    def __init__(
        self,
        *,
        live: bool | None = None,
        update_seconds: float = DEFAULT_UPDATE_SECONDS,
        time_left: bool = False,
        epoch_kinds: Sequence[Hashable] | None = None,
    ) -> None:
        super().__init__()
        if epoch_kinds is not None and (
            isinstance(epoch_kinds, str) or not isinstance(epoch_kinds, Sequence)
        ):
            raise ValueError(
                f"epoch_kinds must be a list with one label per epoch, or None, got {epoch_kinds!r}."
            )
        self.epoch_kinds = None if epoch_kinds is None else list(epoch_kinds)
        if live is not None and not isinstance(live, bool):
            raise ValueError(f"live must be True, False or None (decide from the session), got {live!r}.")
        if not isinstance(time_left, bool):
            raise ValueError(f"time_left must be True or False, got {time_left!r}.")
        self.time_left = time_left
        if (
            isinstance(update_seconds, bool)
            or not isinstance(update_seconds, numbers.Real)
            or not (update_seconds > 0)
        ):
            raise ValueError(f"update_seconds must be a number of seconds > 0, got {update_seconds!r}.")
        self.live = live
        self._live = bool(live)  # decided again when training begins, in the session it runs in
        self.update_seconds = float(update_seconds)
        self.lines: list[str] = []  # every finished epoch's line, for tests and later reading
        self._handle: Any = None
        self._started = self._shown = 0.0
        self._epoch = 0
        self._fit_started, self._first_epoch = 0.0, None
        self.minutes_left: dict[int, float] = {}  # epoch number -> what its last line said
        self.epoch_seconds: dict[int, float] = {}  # epoch number -> seconds, its evaluation included

    # Keras calls this with fit's verbose, epochs and steps; verbose does not apply here.
    def set_params(self, params: dict[str, Any]) -> None:
        self.params = params
        self.epochs = params.get("epochs") or 1
        self.target = params.get("steps")
        if self.epoch_kinds is not None and len(self.epoch_kinds) < self.epochs:
            raise ValueError(f"epoch_kinds has {len(self.epoch_kinds)} labels for {self.epochs} epochs: "
                             "give one label per epoch.")  # fmt: skip

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        self.lines, self.minutes_left, self.epoch_seconds = [], {}, {}
        self._fit_started = time.perf_counter()
        self._first_epoch = None  # a resumed fit (BackupAndRestore) begins at a later epoch
        self._live = in_jupyter() if self.live is None else self.live

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self._epoch = epoch + 1
        if self._first_epoch is None:
            self._first_epoch = epoch
        self._handle = None
        self._started = self._shown = time.perf_counter()

    def _line(self, logs: dict[str, Any] | None, step: int | None = None) -> str:
        parts = [f"epoch {self._epoch}/{self.epochs}"]
        if step is not None:
            parts.append(f"step {step}/{self.target}" if self.target else f"step {step}")
        parts.append(f"{time.perf_counter() - self._started:.1f} s")
        figures = format_logs(logs)
        return " - ".join(parts + ([figures] if figures else []) + self._left(step))

    def _left(self, step: int | None) -> list[str]:
        """``["about 3.2 min left"]``; [] when not asked or not yet known (`step` None: the epoch ended)."""
        if not self.time_left:
            return []
        seconds = self._seconds_left(step)
        return [] if seconds is None else [f"about {seconds / 60:.1f} min left"]

    def _kind(self, epoch: int) -> Hashable:
        return None if self.epoch_kinds is None else self.epoch_kinds[epoch - 1]

    def _seconds_left(self, step: int | None) -> float | None:
        finished = self.epoch_seconds  # this fit's finished epochs, by number
        if not finished:  # nothing finished: the pace of the steps so far
            done = step / self.target if step and self.target else 0
            if not done:
                return None
            elapsed = time.perf_counter() - self._fit_started
            return elapsed / done * ((self.epochs - (self._first_epoch or 0)) - done)

        def expected(epoch: int) -> float | None:  # the last finished epoch of its kind
            same = [s for e, s in finished.items() if self._kind(e) == self._kind(epoch)]
            return same[-1] if same else None

        mean = sum(finished.values()) / len(finished)
        later = sum(expected(e) or mean for e in range(self._epoch + 1, self.epochs + 1))
        if step is None:  # the epoch `self._epoch` just ended
            return later
        elapsed = time.perf_counter() - self._started
        this = expected(self._epoch) or (elapsed / step * self.target if step and self.target else mean)
        return later + max(0.0, this - elapsed)

    def _show(self, line: str) -> None:
        from IPython.display import display

        bundle = {"text/plain": line}
        if self._handle is None:
            self._handle = display(bundle, raw=True, display_id=True)
        else:
            self._handle.update(bundle, raw=True)

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        if not self._live:
            return
        now = time.perf_counter()
        if now - self._shown >= self.update_seconds:
            self._shown = now
            self._show(self._line(logs, step=batch + 1))

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self.epoch_seconds[epoch + 1] = time.perf_counter() - self._started
        line = self._line(logs)
        if self.time_left:
            self.minutes_left[epoch + 1] = self._seconds_left(None) / 60
        self.lines.append(line)
        if self._live:
            self._show(line)
        else:
            print(line, flush=True)

    # fit's validation passes and evaluate/predict: nothing to show.
    def on_test_begin(self, logs: dict[str, Any] | None = None) -> None:
        pass

    def on_test_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        pass

    def on_test_end(self, logs: dict[str, Any] | None = None) -> None:
        pass

    def on_predict_begin(self, logs: dict[str, Any] | None = None) -> None:
        pass

    def on_predict_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        pass

    def on_predict_end(self, logs: dict[str, Any] | None = None) -> None:
        pass


class Throughput(keras.callbacks.Callback):
    """Images/s and seconds per epoch, the numbers seed 001 quotes (63 s -> 16 s per epoch).

    Counts ``global_batch`` images per training step; the last, smaller batch
    of an epoch counts in full unless ``images_per_epoch`` gives the exact
    number. Keeps every epoch in ``.epochs``: ``epoch``, ``seconds``,
    ``steps`` (batches trained), ``complete`` (``steps`` reached the expected
    count: `steps_per_epoch`, else the ``steps`` Keras announces; None if
    unknown), ``images`` and ``images_per_s``, None for an epoch cut short (its
    rate would describe a different workload). Adds ``images_per_s`` (NaN when
    None) and ``epoch_seconds`` to the epoch logs, so they appear in ``History``.
    The first epoch includes graph tracing: compare the later ones.
    """

    def __init__(
        self,
        global_batch: int,
        images_per_epoch: int | None = None,
        verbose: bool = True,
        steps_per_epoch: int | None = None,
    ) -> None:
        super().__init__()
        for name, value in (
            ("global_batch", global_batch),
            ("images_per_epoch", images_per_epoch),
            ("steps_per_epoch", steps_per_epoch),
        ):
            if value is None and name != "global_batch":
                continue
            check_whole(name, value, 1)
        self.global_batch = global_batch
        self.images_per_epoch = images_per_epoch
        self.steps_per_epoch = steps_per_epoch
        self.verbose = verbose
        self.epochs: list[dict[str, Any]] = []
        self._steps = 0
        self._start = 0.0

    def _expected_steps(self) -> int | None:
        if self.steps_per_epoch is not None:
            return self.steps_per_epoch
        steps = (self.params or {}).get("steps")
        return int(steps) if steps else None

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        self._steps = 0
        self._start = time.perf_counter()

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        self._steps = batch + 1  # the last step of the execution (steps_per_execution > 1)

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        # Keras validates inside the epoch; that time counts, as in seed 001's figures.
        seconds = time.perf_counter() - self._start
        expected = self._expected_steps()
        complete = None if expected is None else self._steps >= expected
        exact = self.images_per_epoch if complete is not False else None
        images = exact or self._steps * self.global_batch
        rate = None if complete is False or seconds <= 0 else images / seconds
        entry = {
            "epoch": epoch + 1,
            "seconds": seconds,
            "steps": self._steps,
            "complete": complete,
            "images": images,
            "images_per_s": rate,
        }
        self.epochs.append(entry)
        if logs is not None:
            logs["images_per_s"] = float("nan") if rate is None else rate
            logs["epoch_seconds"] = seconds
        if not self.verbose:
            return
        if rate is None:
            print(f"epoch {epoch + 1}: {seconds:.1f} s, cut short after {self._steps} of {expected} steps")
        else:
            print(f"epoch {epoch + 1}: {seconds:.1f} s, {rate:,.0f} images/s")


class EpochSummaries:
    """Epoch scalars for TensorBoard, laid out as Keras' TensorBoard callback does (train/, validation/)."""

    def __init__(self, log_dir: Path) -> None:
        import tensorflow as tf

        self.writers = {
            "": tf.summary.create_file_writer(str(log_dir / "train")),
            "val_": tf.summary.create_file_writer(str(log_dir / "validation")),
        }

    def write(self, epoch: int, logs: dict[str, float]) -> None:
        import tensorflow as tf

        for prefix, writer in self.writers.items():
            with writer.as_default(step=epoch):
                for key, value in logs.items():
                    if key.startswith("val_") == (prefix == "val_"):
                        tf.summary.scalar(f"epoch_{key[len(prefix) :]}", value)
            writer.flush()

    def close(self) -> None:
        for writer in self.writers.values():
            writer.close()
