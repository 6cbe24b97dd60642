"""Execute every notebook of the series with tiny parameters and check the values it records.

One kernel per notebook (device set-up is once per process), in a temp folder.
Each notebook has a check function below: a new notebook without one fails
`test_every_notebook_has_checks`. Notebooks with cells marked
``# NBVAL_CHECK_OUTPUT`` are also re-run by nbval (``--nbval-lax``), which
compares those cells' outputs with the papermill run: a determinism check.
"""

from __future__ import annotations

import math
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import nbformat
import papermill
import pytest

from mgtutor.records import read_records
from mgtutor.series import find_notebooks, notebook_parameters
from tests.conftest import ROOT

NOTEBOOKS = find_notebooks(ROOT / "notebooks")
TINY = {
    "N_DEVICES": 2,
    "EPOCHS": 1,
    "TRAIN_SAMPLES": 256,
    "TEST_SAMPLES": 128,
    "BATCH_SIZE_PER_REPLICA": 16,
    "SEED": 0,
}
TINY_PER_NOTEBOOK: dict[str, dict] = {
    # Enough steps that the dropout-heavy seed CNN measurably learns real CIFAR-10.
    "02_build_cnn": {"TRAIN_SAMPLES": 512, "TEST_SAMPLES": 256, "EPOCHS": 2},
    # Three training processes and a loader: keep each one short.
    "05_save_and_restore": {"RESUME_EPOCHS": 2, "SAVE_EVERY_STEPS": 3},
    # Two device counts, two pipelines, a few timed steps: the study's shape, not its speed.
    "06_scaling_study": {"DEVICE_COUNTS": [1, 2], "PIPELINES": ["synthetic", "in_memory"], "BENCH_STEPS": 3},
    # 30 rounds between evaluations (the frequencies' least common multiple) need 60 batches of 16.
    "07_parameter_averaging": {"TRAIN_SAMPLES": 1024, "EVALS": 2},
    # 8 steps of 2 workers x 16: killed after the checkpoint at step 4, the restart trains the other 4.
    "08_multi_worker": {"CHECKPOINT_EVERY_STEPS": 4, "KILL_AFTER_STEP": 4},
}
CHECKS: dict[str, Callable[[dict, dict], None]] = {}


def checks(stem: str):
    def register(function):
        CHECKS[stem] = function
        return function

    return register


def tiny_parameters(notebook: Path) -> dict:
    defaults = notebook_parameters(notebook)
    wanted = {**TINY, **TINY_PER_NOTEBOOK.get(notebook.stem, {})}
    return {name: value for name, value in wanted.items() if name in defaults}


def execute(notebook: Path, folder: Path, parameters: dict) -> tuple[Path, dict]:
    executed = folder / notebook.name
    papermill.execute_notebook(
        str(notebook), str(executed), parameters=parameters, kernel_name="python3",
        cwd=str(folder), progress_bar=False,
    )  # fmt: skip
    return executed, read_records(executed)


def code_of(notebook: Path) -> str:
    return "\n".join(cell.source for cell in nbformat.read(notebook, as_version=4).cells)


def nbval(executed: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--nbval-lax", "-q", "-p", "no:cacheprovider", executed.name],
        cwd=executed.parent, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, f"nbval found differing outputs:\n{result.stdout[-4000:]}"


@pytest.mark.notebook
@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[nb.stem for nb in NOTEBOOKS])
def test_notebook(notebook, tmp_path):
    parameters = tiny_parameters(notebook)
    executed, records = execute(notebook, tmp_path, parameters)
    CHECKS[notebook.stem](records, {**notebook_parameters(notebook), **parameters})
    # Every training cell logs for TensorBoard; an empty log folder would go unnoticed by a learner.
    for log_dir in re.findall(r'TensorBoard\(log_dir="(logs/[\w.-]+)"', code_of(notebook)):
        events = list((tmp_path / log_dir).rglob("events.out.tfevents.*"))
        assert events and all(e.stat().st_size > 0 for e in events), f"no TensorBoard events in {log_dir}"
    if "NBVAL_CHECK_OUTPUT" in notebook.read_text():
        nbval(executed)


def test_every_notebook_has_checks():
    assert sorted(CHECKS) == sorted(nb.stem for nb in NOTEBOOKS)


@pytest.mark.notebook
def test_prepare_data_offline_with_nothing_uses_synthetic(tmp_path, isolated_sources):
    notebook = ROOT / "notebooks" / "01_prepare_data.ipynb"
    executed, records = execute(notebook, tmp_path, tiny_parameters(notebook))
    assert records["synthetic"] is True and records["dataset_name"] == "synthetic"
    assert records["train_shape"] == [TINY["TRAIN_SAMPLES"], 32, 32, 3]
    assert "SYNTHETIC stand-in" in executed.read_text()


# --------------------------------------------------------------------------- per notebook


@checks("00_environment")
def _(records: dict, p: dict) -> None:
    assert records["n_devices"] == p["N_DEVICES"] == len(records["device_names"])
    assert records["device_kind"] in ("gpu", "logical-gpu", "logical-cpu")
    assert records["setup_is_idempotent"] is True and records["changing_n_refused"] is True
    assert records["placement_ok"] == [True] * p["N_DEVICES"]
    assert records["versions"]["tensorflow"].startswith("2.21")
    assert records["versions"]["keras"].startswith("3.")
    assert Path(records["kernel_python"]).resolve() == Path(sys.executable).resolve()
    assert records["param_count"] == 32 * 32 * 3 * 512 + 512 + 512 * 10 + 10
    assert records["param_bytes"] == records["allocated_bytes"] == 4 * records["param_count"]


@checks("01_prepare_data")
def _(records: dict, p: dict) -> None:
    n_train, n_test = p["TRAIN_SAMPLES"], p["TEST_SAMPLES"]
    assert records["train_shape"] == [n_train, 32, 32, 3]
    assert records["test_shape"] == [n_test, 32, 32, 3]
    counts = records["class_counts"]
    assert sum(counts) == n_train and max(counts) - min(counts) <= 1
    low, high = records["pixel_range"]
    assert 0.0 <= low < 0.1 and 0.9 < high <= 1.0
    assert records["one_hot_matches_keras"] is True
    per_replica = p["BATCH_SIZE_PER_REPLICA"]
    assert records["global_batch"] == per_replica * p["N_DEVICES"]
    assert records["per_replica_batch_sizes"] == [per_replica] * p["N_DEVICES"]
    assert records["steps_per_epoch"] == {
        "single": -(-n_train // per_replica), "replicated": -(-n_train // records["global_batch"]),
    }  # fmt: skip
    assert records["single_device_batch_shape"] == [per_replica, 32, 32, 3]
    if not records["synthetic"]:
        assert records["full_train_shape"][1:] == [32, 32, 3] and records["dataset_name"] == "cifar10"


CHANCE = 0.1  # ten balanced classes
UNIFORM_LOSS = 2.302585  # cross-entropy of guessing 1/10 for every class


@checks("02_build_cnn")
def _(records: dict, p: dict) -> None:
    assert records["param_count"] == 1_250_858
    assert records["param_bytes"] == records["allocated_bytes"] == 4 * 1_250_858
    losses = records["train_loss"]
    assert len(losses) == p["EPOCHS"] and losses[-1] < losses[0]
    # Measured at these parameters: test loss 2.20, accuracy 0.17 (seeds 0-2).
    assert records["test_loss"] < UNIFORM_LOSS - 0.05
    assert records["test_accuracy"] > CHANCE + 0.02


@checks("03_multi_gpu_wrapping")
def _(records: dict, p: dict) -> None:
    assert records["towers_share_weights"] is True
    assert records["template_changed_by_training"] is True
    # Towers see smaller batches than the template; CPU kernels may then sum in another order.
    assert records["towers_forward_difference"] < 1e-6
    assert records["uneven_forward_difference"] < 1e-6
    assert records["reloaded_difference"] == 0.0
    # Parity: k steps on N devices equal k steps on one, to float32 rounding,
    # while the weights themselves moved by orders of magnitude more.
    assert records["parity_weight_moved"] > 1e-3
    assert records["parity_max_difference"]["towers"] < 1e-5
    assert records["parity_max_difference"]["mirrored"] < 1e-5
    for key in ("towers_val_accuracy", "mirrored_val_accuracy"):
        assert 0.0 <= records[key] <= 1.0


@checks("05_save_and_restore")
def _(records: dict, p: dict) -> None:
    assert records["reload_one_device_difference"] == 0.0  # 1 device in a fresh process vs N
    assert records["served_difference"] <= 1e-6
    epoch, batch = records["killed_at"]
    assert 0 <= epoch < p["RESUME_EPOCHS"] and batch > 0  # really killed mid-epoch
    assert records["resume_weight_difference"] == 0.0
    curves = records["loss_curves"]
    assert curves["interrupted"] == curves["uninterrupted"]
    assert len(curves["uninterrupted"]) == p["RESUME_EPOCHS"]


@checks("04_augmented_training")
def _(records: dict, p: dict) -> None:
    assert records["augmented_batch_shape"] == [8, 32, 32, 3]
    assert records["fraction_changed"] > 0.9  # shifts of up to 3 px change almost every image
    losses, accuracies = records["train_loss"], records["val_accuracy"]
    assert len(losses) == len(accuracies) == p["EPOCHS"]
    assert all(0 < loss < UNIFORM_LOSS + 0.5 for loss in losses)
    assert all(0.0 <= accuracy <= 1.0 for accuracy in accuracies)
    assert records["training_images_per_s"] > 0
    speeds = records["pipeline_images_per_s"]
    assert set(speeds) == {"generator (flow)", "tf.data", "layers in model"}
    assert all(speed > 0 for speed in speeds.values())
    needed = records["training_images_per_s"]
    assert records["pipeline_headroom"] == pytest.approx({k: v / needed for k, v in speeds.items()})


@checks("06_scaling_study")
def _(records: dict, p: dict) -> None:
    runs = records["scaling_runs"]
    assert sorted((r["devices"], r["pipeline"]) for r in runs) == sorted(
        (n, pipeline) for n in p["DEVICE_COUNTS"] for pipeline in p["PIPELINES"]
    )
    for run in runs:
        assert run["images_per_s"] > 0
        assert run["global_batch"] == p["BATCH_SIZE_PER_REPLICA"] * run["devices"]
        assert run["efficiency"] == pytest.approx(run["speedup"] / run["devices"], rel=1e-9)
        if run["devices"] == 1:
            assert run["speedup"] == 1.0
    assert records["scaling_files"] == {"json": True, "plot": True}
    # Logical CPU devices share the cores: the notebook must not promise a speed-up.
    assert records["device_kind"] == "logical-cpu" and records["expected_speedup"] == "<= 1"
    headroom = records["input_headroom"]
    assert set(headroom) == set(p["PIPELINES"]) - {"synthetic"}
    assert all(h > 0 for per_count in headroom.values() for h in per_count.values())
    assert records["projected_4_gpu_speedup"] == pytest.approx(63 / 16)
    rules = records["lr_rules"]
    assert len(rules) == 4
    for result in rules.values():
        assert 0.0 <= result["val_accuracy"] <= 1.0 and 0 < result["loss"] < UNIFORM_LOSS + 1.0


@checks("07_parameter_averaging")
def _(records: dict, p: dict) -> None:
    # Workers drift apart between averagings and agree exactly right after one.
    assert len(records["seed_wrapper_spreads"]) == 12 // 3
    assert all(spread > 1e-4 for spread in records["seed_wrapper_spreads"])
    assert records["spread_after_averaging"] == 0.0
    curves, every = records["curves"], math.lcm(*p["FREQUENCIES"])
    steps = [every * (i + 1) for i in range(p["EVALS"])]
    assert len(curves) == len(p["FREQUENCIES"]) + 1
    for frequency in p["FREQUENCIES"]:
        assert curves[f"average every {frequency}"]["steps"] == steps
        assert curves[f"average every {frequency}"]["syncs"] == [s // frequency for s in steps]
    assert curves["all-reduce (MirroredStrategy)"]["syncs"] == steps
    spreads = records["max_spread"]
    assert spreads[str(max(p["FREQUENCIES"]))] > spreads[str(min(p["FREQUENCIES"]))] > 0
    for accuracy in records["final_accuracy"].values():
        # Measured on the MNIST subset at these parameters: 0.82-0.88 for every variant.
        assert accuracy > (0.5 if not records["synthetic"] else CHANCE)


@checks("08_multi_worker")
def _(records: dict, p: dict) -> None:
    assert records["n_workers"] == records["replicas"] == p["N_WORKERS"]
    assert records["worker_digests_identical"] is True
    assert len(records["val_accuracy"]) == p["EPOCHS"]
    assert all(code != 0 for code in records["crash_returncodes"])  # killed, and the other stopped
    steps = p["EPOCHS"] * (p["TRAIN_SAMPLES"] // (p["BATCH_SIZE_PER_REPLICA"] * p["N_WORKERS"]))
    assert records["resumed_from"] == [0, p["KILL_AFTER_STEP"]]
    assert records["steps_trained_after_restart"] == steps - p["KILL_AFTER_STEP"]
    assert records["restart_matches_uninterrupted"] is True
    assert records["restart_digests_identical"] is True
