"""A training progress display whose saved form is one short line per epoch.

Keras's own bar redraws itself with backspaces and carriage returns; an
executed notebook keeps every redraw, thousands of characters per epoch.
`ProgressBar` shows the same figures but leaves only
``epoch 3/10 - 12.1 s - loss 1.23 - accuracy 0.45 - val_loss 1.31 - val_accuracy 0.41``.
"""

from __future__ import annotations

import math
import numbers
import time
from typing import Any

import keras

from mgtutor._session import in_jupyter

DEFAULT_UPDATE_SECONDS = 0.5


def _number(value: Any) -> str:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return str(value)
    if math.isfinite(value) and value == int(value) and abs(value) < 1e6:
        return str(int(value))
    return f"{value:.4g}"


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
    """

    def __init__(self, *, live: bool | None = None, update_seconds: float = DEFAULT_UPDATE_SECONDS) -> None:
        super().__init__()
        if live is not None and not isinstance(live, bool):
            raise ValueError(f"live must be True, False or None (decide from the session), got {live!r}.")
        if isinstance(update_seconds, bool) or not isinstance(update_seconds, numbers.Real) or not (
            update_seconds > 0
        ):
            raise ValueError(f"update_seconds must be a number of seconds > 0, got {update_seconds!r}.")
        self.live = live
        self._live = bool(live)  # decided again when training begins, in the session it runs in
        self.update_seconds = float(update_seconds)
        self.lines: list[str] = []  # every finished epoch's line, for tests and later reading
        self._handle: Any = None
        self._started = self._shown = 0.0
        self._epoch = 0

    # Keras calls this with fit's verbose, epochs and steps; verbose does not apply here.
    def set_params(self, params: dict[str, Any]) -> None:
        self.params = params
        self.epochs = params.get("epochs") or 1
        self.target = params.get("steps")

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        self.lines = []
        self._live = in_jupyter() if self.live is None else self.live

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self._epoch = epoch + 1
        self._handle = None
        self._started = self._shown = time.perf_counter()

    def _line(self, logs: dict[str, Any] | None, step: int | None = None) -> str:
        parts = [f"epoch {self._epoch}/{self.epochs}"]
        if step is not None:
            parts.append(f"step {step}/{self.target}" if self.target else f"step {step}")
        parts.append(f"{time.perf_counter() - self._started:.1f} s")
        figures = format_logs(logs)
        return " - ".join(parts + ([figures] if figures else []))

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
        line = self._line(logs)
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
