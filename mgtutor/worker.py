"""What a worker script uses: its ``TF_CONFIG``, its place in the cluster, and its result line.

``TF_CONFIG`` tells each process of a ``MultiWorkerMirroredStrategy`` job the cluster and its own
index; worker 0 is the chief. Nothing here imports TensorFlow until a function needs it.
"""

from __future__ import annotations

import numbers
import re
from collections.abc import Sequence
from typing import Any

from mgtutor._checks import is_whole
from mgtutor.processes import RESULT_MARK, report_result  # noqa: F401  (one result line for every child)


def tf_config(addresses: Sequence[int | str], index: int, task_type: str = "worker") -> dict[str, Any]:
    """The ``TF_CONFIG`` of task `index` among workers at `addresses` (an int is a localhost port)."""
    if isinstance(addresses, (str, bytes)) or not isinstance(addresses, Sequence) or not addresses:
        raise ValueError(f"addresses must be a non-empty list of ports or 'host:port', got {addresses!r}.")
    workers = []
    for address in addresses:
        if isinstance(address, numbers.Integral) and not isinstance(address, bool) and 0 < address < 65536:
            workers.append(f"localhost:{int(address)}")
        elif isinstance(address, str) and re.fullmatch(r"[^:\s]+:\d{1,5}", address):
            workers.append(address)
        else:
            raise ValueError(f"addresses: {address!r} is neither a port (1-65535) nor 'host:port'.")
    if not is_whole(index) or not 0 <= index < len(workers):
        raise ValueError(f"index must be a worker number 0..{len(workers) - 1}, got {index!r}.")
    return {"cluster": {"worker": workers}, "task": {"type": task_type, "index": int(index)}}


def _current_strategy() -> Any:
    import tensorflow as tf  # only here: the launcher never loads TensorFlow

    return tf.distribute.get_strategy()


def is_chief(strategy: Any = None) -> bool:
    """True for the worker that writes checkpoints and logs (always, with one process)."""
    strategy = strategy or _current_strategy()
    return bool(strategy.extended.should_checkpoint)


def num_workers(strategy: Any = None) -> int:
    """How many processes train together under `strategy` (1 unless multi-worker)."""
    strategy = strategy or _current_strategy()
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None:
        return 1
    jobs = resolver.cluster_spec().as_dict()
    return max(1, sum(len(jobs.get(job, ())) for job in ("chief", "worker")))


def worker_index(strategy: Any = None) -> int:
    """This worker's task index in ``TF_CONFIG`` (0 with one process)."""
    strategy = strategy or _current_strategy()
    resolver = getattr(strategy, "cluster_resolver", None)
    return int(getattr(resolver, "task_id", None) or 0)
