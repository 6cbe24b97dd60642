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

# public name -> module that defines it
_EXPORTS = {
    "DeviceSetup": "devices",
    "DeviceSetupError": "devices",
    "setup_devices": "devices",
    "describe": "devices",
    "parameter_memory": "devices",
    "CIFAR10_CLASSES": "data",
    "MNIST_CLASSES": "data",
    "Dataset": "data",
    "DataError": "data",
    "DataNotFoundError": "data",
    "load_dataset": "data",
    "load_cifar10": "data",
    "load_mnist": "data",
    "synthetic_dataset": "data",
    "take_subset": "data",
    "scale_images": "data",
    "one_hot": "data",
    "class_counts": "data",
    "make_dataset": "data",
    "MODEL_BUILDERS": "models",
    "build_model": "models",
    "build_seed_cnn": "models",
    "build_lenet": "models",
    "build_minigooglenet": "models",
    "build_xception": "models",
    "seed_optimizer": "models",
    "TowersModel": "parallel",
    "multi_gpu_model": "parallel",
    "split_sizes": "parallel",
    "available_devices": "parallel",
    "mirrored_strategy": "parallel",
    "global_batch_size": "parallel",
    "check_batch_divisible": "parallel",
    "scaled_learning_rate": "parallel",
    "copy_model": "parallel",
    "max_weight_difference": "parallel",
    "max_output_difference": "parallel",
    "train_steps": "parallel",
    "fit_generator": "train",
    "Throughput": "train",
    "EndlessBatches": "streams",
    "ParallelWrapper": "averaging",
    "replica_spread": "averaging",
    "replica_copy_spread": "batchnorm",
    "average_replica_copies": "batchnorm",
    "AverageReplicaCopies": "batchnorm",
    "sync_batchnorm": "batchnorm",
    "batchnorm_layers": "batchnorm",
    "Trainer": "trainer",
    "multi_worker_strategy": "trainer",
    "weights_digest": "trainer",
    "is_chief": "cluster",
    "num_workers": "cluster",
    "worker_index": "cluster",
    "launch": "cluster",
    "LocalCluster": "cluster",
    "ClusterResult": "cluster",
    "WorkerResult": "cluster",
    "ClusterError": "cluster",
    "tf_config": "cluster",
    "free_ports": "cluster",
    "report_result": "cluster",
    "processes_in_group": "cluster",
    "ImageDataGenerator": "augment",
    "NotFittedError": "augment",
    "augment_dataset": "augment_tf",
    "augmentation_layers": "augment_layers",
    "pipeline_images_per_second": "throughput",
    "BenchmarkError": "throughput",
    "PIPELINES": "throughput",
    "measure_training": "throughput",
    "scaling_study": "bench",
    "with_speedups": "scaling",
    "read_scaling": "scaling",
    "format_table": "scaling",
    "amdahl_speedup": "amdahl",
    "parallel_fraction": "amdahl",
    "projected_scaling": "amdahl",
    "ModelFileError": "saving",
    "save_model": "saving",
    "load_model": "saving",
    "export_for_serving": "saving",
    "load_served": "saving",
    "resumable_fit": "resume",
    "resume_point": "resume",
    "record": "records",
    "read_records": "records",
    "show_images": "plots",
    "plot_class_counts": "plots",
    "plot_history": "plots",
    "plot_scaling": "plots",
    "plot_against_baseline": "plots",
    "working_folder": "workspace",
    "one_device_baseline": "baseline",
    "baseline_key": "baseline",
    "save_baseline": "baseline",
    "run_script": "processes",
    "ScriptError": "processes",
    "ProgressBar": "progress",
    "quiet_tensorflow": "_tflog",
    "quiet_native_stderr": "_tflog",
    "restore_native_stderr": "_tflog",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'mgtutor' has no attribute {name!r}")
    if "tensorflow" not in sys.modules:
        # Most names import Keras, and with it TensorFlow's start-up lines on stderr: quiet them
        # first (MGTUTOR_SHOW_TF_LOGS=1 keeps them), so a notebook's import cell prints nothing.
        from mgtutor._tflog import quiet_tensorflow

        quiet_tensorflow()
    value = getattr(importlib.import_module(f"mgtutor.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)
