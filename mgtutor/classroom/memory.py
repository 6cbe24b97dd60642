"""Peak resident memory of this process's children (a notebook's kernel and what it starts)."""

from __future__ import annotations

import threading
from types import TracebackType


class ChildMemory:
    """Samples the summed RSS of every descendant process while the block runs.

    ``peak_mb``: the largest sum seen; ``last_mb``: the last sample with a process alive (about
    what the kernel still held when its notebook finished, i.e. what an open kernel keeps).
    """

    def __init__(self, interval: float = 0.2) -> None:
        self.interval = interval
        self.peak_mb = 0.0
        self.last_mb = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        import psutil

        me = psutil.Process()
        while not self._stop.wait(self.interval):
            total = 0
            for child in me.children(recursive=True):
                try:
                    total += child.memory_info().rss
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    continue
            if total:
                self.last_mb = total / 2**20
                self.peak_mb = max(self.peak_mb, self.last_mb)

    def __enter__(self) -> ChildMemory:
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:  # fmt: skip
        self._stop.set()
        self._thread.join()
