"""mgtutor: the helpers behind the notebook series on multi-GPU data-parallel training.

Import what you need by name (``from mgtutor import setup_devices``). Nothing is
loaded until first use, so ``import mgtutor`` never starts TensorFlow: device
set-up must come before TensorFlow's runtime starts.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

__version__ = "0.1.0"

# The public API: what the notebooks and users import, grouped as docs/api.md lists it; at most 62
# names (tests/unit/test_packaging.py says why). public name -> module that defines it. Everything
# else in the modules is internal.
_EXPORTS = {
    # devices and data
    "setup_devices": "devices",
    "DeviceSetupError": "devices",
    "describe": "devices",
    "parameter_memory": "devices",
    "load_dataset": "data",
    "DataError": "data",
    # models
    "build_model": "models",
    "seed_optimizer": "models",
    # Keras 2 APIs that Keras 3 removed, rebuilt
    "multi_gpu_model": "keras2.towers",
    "split_sizes": "keras2.towers",
    "fit_generator": "keras2.fit_generator",
    "ImageDataGenerator": "keras2.augment",
    # data parallelism with tf.distribute
    "mirrored_strategy": "data_parallel",
    "global_batch_size": "data_parallel",
    "check_batch_divisible": "data_parallel",
    "scaled_learning_rate": "data_parallel",
    "copy_model": "data_parallel",
    "train_steps": "data_parallel",
    "max_weight_difference": "data_parallel",
    "max_output_difference": "data_parallel",
    # BatchNorm under replicas
    "replica_copy_spread": "batchnorm",
    "average_replica_copies": "batchnorm",
    "sync_batchnorm": "batchnorm",
    # parameter averaging
    "ParallelWrapper": "training.parameter_averaging",
    "replica_spread": "training.parameter_averaging",
    # multi-worker
    "Trainer": "training.trainer",
    "multi_worker_strategy": "training.worker",
    "weights_digest": "training.worker",
    "launch": "training.cluster",
    "doctor": "training.doctor",
    "start_cluster": "training.slurm",
    "report_result": "support.processes",
    # saving and resuming
    "save_model": "saving",
    "load_model": "saving",
    "ModelFileError": "support.files",
    "export_for_serving": "saving",
    "load_served": "saving",
    "resumable_fit": "training.resume",
    "resume_point": "training.checkpoints",
    # speed
    "scaling_study": "speed.study",
    "projected_scaling": "speed.amdahl",
    "pipeline_images_per_second": "speed.measure",
    "step_sweep": "speed.cluster_link",
    "format_link_table": "speed.cluster_link",
    "Throughput": "progress",
    "ProgressBar": "progress",
    # notebook plumbing and plots
    "record": "support.records",
    "working_folder": "support.workspace",
    "lesson_plan": "classroom.limits",
    "one_device_baseline": "baseline",
    "run_script": "support.processes",
    "show_images": "plots",
    "plot_history": "plots",
    "plot_against_baseline": "plots",
    "plot_scaling": "speed.figure",
    # sharding on JAX devices: bytes per device, collectives, ZeRO stages, the decision table
    "bytes_per_device": "sharding",
    "compiled_memory": "sharding",
    "bytes_sent": "sharding",
    "memory_formula": "sharding",
    "stage_shardings": "sharding",
    "stage_layout_map": "sharding",
    "decision_table": "sharding",
    # pipeline parallelism: the schedules in slots, and stages run in pinned workers
    "pipeline_schedule": "training.pipeline",
    "Pipeline": "training.pipeline",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'mgtutor' has no attribute {name!r}")
    if "tensorflow" not in sys.modules:
        # Most names import Keras, and with it TensorFlow's start-up lines on stderr: quiet them
        # first (MGTUTOR_SHOW_TF_LOGS=1 keeps them), so a notebook's import cell prints nothing.
        from mgtutor.support.tflog import quiet_tensorflow

        quiet_tensorflow()
    value = getattr(importlib.import_module(f"mgtutor.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)
