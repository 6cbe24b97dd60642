"""Keep TensorFlow's log chatter out of notebook outputs, so they show only what the lesson prints.

Two kinds of chatter reach a notebook. TensorFlow's C++ code writes log lines
("I0000 00:00:17... port.cc:153] oneDNN custom operations are on", the absl
banner, "failed call to cuInit") straight to file descriptor 2, so neither
Python's ``sys.stderr`` nor ``TF_CPP_MIN_LOG_LEVEL`` (ignored by the lines
printed before absl's logging starts) stops them: `quiet_native_stderr` puts a
pipe on fd 2 and a thread forwards every line but those matching `TF_NOISE`.
Its Python logger prints "INFO:tensorflow:Using MirroredStrategy ...":
`quiet_python_logs` raises it to WARNING, so real warnings still show, and drops one
false alarm about Keras' own training functions (see `_KerasModelsTracedOnce`).
`quiet_tensorflow` does both; `setup_devices` calls it before TensorFlow starts.
Set ``MGTUTOR_SHOW_TF_LOGS=1`` to see everything again (e.g. when a kernel dies).
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import select
import sys
import threading

from mgtutor.support.session import plain_rich_text

SHOW_ENV = "MGTUTOR_SHOW_TF_LOGS"
# One log line of TensorFlow's C++ side (and absl's own banner). Fatal ("F...") lines are
# kept: they explain a crash. Match whole lines with `TF_NOISE.match(line)`.
TF_NOISE = re.compile(
    r"\s*(?:"
    r"[IWE]\d{4} \S+\s+\d+ \S+:\d+\]"  # absl: "I0000 00:00:1795.08 5446 port.cc:153] ..."
    r"|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IWE] \S+:\d+\]"  # TF < 2.17: "2024-01-01 12:00:00.1: W ..."
    r"|WARNING: All log messages before absl::InitializeLog\(\) is called"
    r"|This TensorFlow binary is optimized to use available CPU instructions"
    r"|To enable the following instructions: .*rebuild TensorFlow"
    r"|.*Unable to register (?:cuDNN|cuFFT|cuBLAS) factory"
    r")"
)
# Keras's own line for an epoch or a step count (``fit(verbose=2)``, what a worker's fit prints when its
# output is not a terminal): "78/78 - 9s - 110ms/step - accuracy: 0.23 - loss: 2.04". A lesson prints its
# own figures; match whole lines with `KERAS_STEP_LINE.match(line)`.
KERAS_STEP_LINE = re.compile(r"\s*\d+/\d+ .*\d(?:s|ms|us|µs)/step\b")
# What gRPC prints in a worker whose peer vanished: after a worker killed on purpose, the survivor's
# report of the crash that was caused, not news (launch keeps it back then, and only then).
PEER_LOST = re.compile(
    r"\s*(?:Additional GRPC error information from remote target \S+ while calling"
    r"|:UNKNOWN:Error received from peer .*grpc_status:14)"
)
# A traceback frame inside an installed library (TensorFlow, Keras): its "File" line, in a traceback's
# form (", line 53, in f") or faulthandler's (", line 53 in f").
_LIBRARY_FRAME = re.compile(r"(\s*)File \"[^\"]*[/\\](?:site|dist)-packages[/\\][^\"]*\", line \d+,? in ")


class LibraryFrames:
    """Fold a shown traceback's frames inside installed libraries into one line.

    A child's traceback names the learner's own lines and then a dozen frames of
    TensorFlow's internals; `shown(line)` gives the lines to show instead of `line`:
    none while library frames (and their code and caret lines) run on, then one
    "… N frame(s) inside installed libraries …" line before the next line of interest.
    The full lines stay wherever the caller keeps them (a job's tail, for one).
    """

    def __init__(self) -> None:
        self.indent: str | None = None  # a folded frame's indent, while frames are being folded
        self.count = 0

    def shown(self, line: str) -> list[str]:
        frame = _LIBRARY_FRAME.match(line)
        if frame:
            self.indent, self.count = frame.group(1), self.count + 1
            return []
        if self.indent is not None:
            source = line.startswith(self.indent + " ") and not line.strip().startswith("File ")
            carets = line.strip() and not line.strip(" ^~")
            if source or carets:
                return []  # the folded frame's source line, or the carets under it
        return [*self.flush(), line]

    def flush(self) -> list[str]:
        """The fold's line for the frames folded so far (none if none), to show before what follows."""
        if not self.count:
            return []
        folded = f"{self.indent}… {self.count} frame(s) inside installed libraries (TensorFlow, Keras) …"
        self.indent, self.count = None, 0
        return [folded]


# A partial line is held this long for the rest of it before being passed on as it is.
_PARTIAL_LINE_SECONDS = 0.2
_MAX_LINE_BYTES = 65536
# At exit, how long to wait for the last lines to be passed on.
_DRAIN_SECONDS = 2.0


class _StderrFilter:
    """fd 2 -> pipe -> a reader thread that writes the lines not matching `pattern` to the old fd 2."""

    def __init__(self, pattern: re.Pattern[str], fd: int = 2) -> None:
        self.pattern, self.fd = pattern, fd
        self.original = os.dup(fd)  # where kept lines go
        self.read_end, write_end = os.pipe()
        os.dup2(write_end, fd)  # C++ writes to fd 2 by number: it now feeds the pipe
        os.close(write_end)
        self.thread = threading.Thread(target=self._pump, name="mgtutor-stderr-filter", daemon=True)
        self.thread.start()

    def _forward(self, data: bytes) -> None:
        while data:
            try:
                data = data[os.write(self.original, data) :]
            except OSError:  # the real stderr is gone: nothing left to show lines on
                return

    def _keep(self, lines: list[bytes]) -> bytes:
        return b"".join(
            line + b"\n" for line in lines if not self.pattern.match(line.decode("utf-8", "replace"))
        )

    def _pump(self) -> None:
        pending = b""
        try:
            while True:
                # A prompt without a newline must not wait forever for the rest of its line.
                if pending and not select.select([self.read_end], [], [], _PARTIAL_LINE_SECONDS)[0]:
                    self._forward(pending)
                    pending = b""
                    continue
                chunk = os.read(self.read_end, 65536)
                if not chunk:  # every write end is closed: the process is finishing
                    self._forward(pending)
                    return
                *lines, pending = (pending + chunk).split(b"\n")
                self._forward(self._keep(lines))
                if len(pending) > _MAX_LINE_BYTES:  # no log line is this long: pass it on unchecked
                    self._forward(pending)
                    pending = b""
        except Exception:  # never leave writers blocked on a full pipe: pass the rest on unfiltered
            self._forward(pending)
            while chunk := os.read(self.read_end, 65536):
                self._forward(chunk)

    def close(self) -> None:
        """Give fd 2 back and pass on what is still in the pipe."""
        try:
            sys.stderr.flush()
        except (AttributeError, OSError, ValueError):
            pass
        if os.path.sameopenfile(self.fd, self.read_end):  # (pytest's capture may have replaced it)
            os.dup2(self.original, self.fd)  # closes the pipe's write end this process held
        # Children forked meanwhile may hold the write end open too: don't wait on them forever.
        self.thread.join(_DRAIN_SECONDS)
        if not self.thread.is_alive():
            os.close(self.read_end)
            os.close(self.original)


_filter: _StderrFilter | None = None
_lock = threading.Lock()


def _shown() -> bool:
    return os.environ.get(SHOW_ENV, "").strip() not in ("", "0")


def quiet_native_stderr() -> bool:
    """Drop TensorFlow's C++ log lines (`TF_NOISE`) from this process's fd 2; other lines pass.

    Idempotent; lasts until `restore_native_stderr` or exit (where the last lines
    are still passed on). Returns whether the filter is on: False on Windows, with
    no fd 2, or with ``MGTUTOR_SHOW_TF_LOGS=1``. A hard crash may lose the lines
    written just before it: rerun with ``MGTUTOR_SHOW_TF_LOGS=1`` to see them.
    """
    global _filter
    with _lock:
        if _filter is not None:
            return True
        if sys.platform == "win32" or _shown():
            return False
        try:
            _filter = _StderrFilter(TF_NOISE)
        except OSError:  # no fd 2 to filter (a daemon, pythonw)
            return False
        atexit.register(restore_native_stderr)
        return True


def restore_native_stderr() -> None:
    """Undo `quiet_native_stderr`: fd 2 is the original stream again. Harmless when not quieted."""
    global _filter
    with _lock:
        if _filter is None:
            return
        _filter, active = None, _filter
        atexit.unregister(restore_native_stderr)
        active.close()


class _KerasModelsTracedOnce(logging.Filter):
    """Drops "N out of the last M calls to <...TensorFlowTrainer...> triggered tf.function retracing".

    TensorFlow counts traces per function *code*, and every Keras model builds its own
    training function from the same code: a lesson (or a second run of it in the same
    kernel) that trains ten small models, each tracing once, reads as one function
    retracing. A learner's own ``tf.function`` that retraces still warns.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not ("triggered tf.function retracing" in message and "TensorFlowTrainer." in message)


def quiet_python_logs() -> None:
    """Raise (never lower) the ``tensorflow`` and ``absl`` loggers to WARNING.

    That hides "INFO:tensorflow:Using MirroredStrategy ...", the per-fit collective
    and "Reduce to ..." lines. Warnings still show, except TensorFlow's retracing alarm
    about Keras' per-model training functions (`_KerasModelsTracedOnce`). TensorFlow sets
    its logger to INFO on first use in a notebook, so this acts again once it is
    imported (`setup_devices` and `mirrored_strategy` call it then).
    """
    if _shown():
        return
    tf = sys.modules.get("tensorflow")
    if tf is not None and hasattr(tf, "get_logger"):
        tf.get_logger()  # its one-time set-up first, or it would lower the level again later
    for name, level in (("tensorflow", logging.WARNING), ("absl", logging.WARNING)):
        logger = logging.getLogger(name)
        if logger.getEffectiveLevel() < level:
            logger.setLevel(level)
    tf_logger = logging.getLogger("tensorflow")
    if not any(isinstance(f, _KerasModelsTracedOnce) for f in tf_logger.filters):
        tf_logger.addFilter(_KerasModelsTracedOnce())


def quiet_tensorflow() -> None:
    """Everything above, before TensorFlow starts: C++ log level 2 unless set, loggers, fd-2 filter.

    In a Jupyter kernel, Keras's summary tables are saved without colour codes too (`plain_rich_text`;
    not log lines, so ``MGTUTOR_SHOW_TF_LOGS`` keeps them plain). Returns None so that a notebook cell
    ending with it shows nothing.
    """
    plain_rich_text()
    if _shown():
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    quiet_python_logs()
    quiet_native_stderr()
