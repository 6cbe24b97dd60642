"""What a worker script uses: its ``TF_CONFIG``, its place in the cluster, its weights' digest.

``TF_CONFIG`` tells each process of a ``MultiWorkerMirroredStrategy`` job the cluster and its own
index; worker 0 is the chief. Nothing here imports TensorFlow until a function needs it.
"""

from __future__ import annotations

import hashlib
import json
import numbers
import os
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from mgtutor.support.checks import is_whole


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


def multi_worker_strategy() -> Any:
    """A ``MultiWorkerMirroredStrategy`` for this worker, configured from ``TF_CONFIG``.

    Call it first, before anything else uses TensorFlow (`mgtutor.setup_devices`
    included): it starts the collective runtime, which TF can only configure at
    start-up. Each worker trains on all its GPUs, or on ONE CPU device: the
    strategy does not use logical CPU devices. Without ``TF_CONFIG`` it is a
    one-worker strategy, so the same script also runs alone.
    """
    import tensorflow as tf  # only here: calling it is what starts TensorFlow

    raw = os.environ.get("TF_CONFIG")
    if raw:
        try:
            config = json.loads(raw)
        except ValueError:
            config = None
        task = config.get("task") if isinstance(config, dict) else None
        if not (isinstance(task, dict) and "index" in task and isinstance(config.get("cluster"), dict)):
            raise ValueError(
                f"TF_CONFIG is not valid: {raw!r}. It must be JSON like "
                '{"cluster": {"worker": ["host1:port", "host2:port"]}, "task": {"type": "worker", '
                '"index": 0}}; mgtutor.training.cluster.tf_config(ports, index) writes it.'
            )
    try:
        return tf.distribute.MultiWorkerMirroredStrategy()
    except RuntimeError as err:
        if "startup" not in str(err):
            raise
        raise RuntimeError(
            "multi_worker_strategy() must run before anything else uses TensorFlow in this "
            "process (setup_devices, tensors, models, tf.config.list_logical_devices...): TF "
            "configures its collective ops only at start-up. Move it to the top of the worker "
            "script. Note that on a CPU each worker trains on one device whatever "
            "setup_devices() says; on a GPU machine it uses every GPU of the worker."
        ) from err


def weights_digest(model: Any) -> str:
    """A short SHA-256 of all of `model`'s weights: equal digests mean bit-identical weights."""
    digest = hashlib.sha256()
    for value in model.get_weights():
        array = np.ascontiguousarray(value)
        digest.update(f"{array.dtype}{array.shape}".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()[:16]
