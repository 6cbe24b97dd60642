"""Peak resident memory of this process's children (a notebook's kernel and what it starts)."""

from __future__ import annotations

import threading
from types import TracebackType


class ChildMemory:
    """Samples the summed RSS of every descendant process while the block runs.

    ``peak_mb``: the largest sum seen. ``last_mb``: the sum when ``mark`` was last called (the
    runner calls it as each cell finishes, so it ends as what the kernel held after the last cell,
    i.e. what a kernel left open keeps); 0 if never marked. It is not the last background sample:
    that one can fall while the kernel shuts down and frees its memory.
    """

    def __init__(self, interval: float = 0.2) -> None:
        self.interval = interval
        self.peak_mb = 0.0
        self.last_mb = 0.0
        self._stop = threading.Event()
        # The sampler and `mark` both raise peak_mb: unlocked, a sample read before a mark could write
        # its smaller peak back over the mark's (seen: peak 127 MB below a mark of 210).
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    @staticmethod
    def _children_mb() -> float:
        import psutil

        total = 0
        for child in psutil.Process().children(recursive=True):
            try:
                total += child.memory_info().rss
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        return total / 2**20

    def _sample(self) -> None:
        while not self._stop.wait(self.interval):
            sampled = self._children_mb()
            with self._lock:
                self.peak_mb = max(self.peak_mb, sampled)

    def mark(self, **_hook_arguments: object) -> None:
        """Sample now and keep it as ``last_mb`` (usable as nbclient's ``on_cell_executed`` hook)."""
        sampled = self._children_mb()
        with self._lock:
            self.last_mb = sampled
            self.peak_mb = max(self.peak_mb, sampled)

    def __enter__(self) -> ChildMemory:
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:  # fmt: skip
        self._stop.set()
        self._thread.join()
