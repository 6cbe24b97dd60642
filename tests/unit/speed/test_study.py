"""mgtutor.speed: measure (throughput), reading, amdahl (the GPU projection) and study (the scaling study).

Child processes (TensorFlow fixes its devices once per process): two for the
command-line study (one per device count) and one for the towers strategy and
the augmented pipelines on 2 devices. Everything else runs here without
TensorFlow: argument errors, the reading of known numbers, the plot, Amdahl.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from mgtutor.speed import amdahl, measure, study
from mgtutor.speed.figure import plot_scaling
from mgtutor.speed.link import read_ratio
from mgtutor.speed.measure import Run, pipeline_images_per_second
from mgtutor.speed.reading import SHARED_BOUND, read_scaling, speedups
from tests.conftest import ROOT, run_child

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
LENET_PARAMS_32X32X3 = 657_080  # build_lenet((32, 32, 3), 10).count_params()
EXACT = 1e-9  # speed-up and efficiency are ratios of the same floats: only rounding differs


def slow_batches(size: int, delay: float):
    while True:
        time.sleep(delay)
        yield np.zeros((size, 2)), np.zeros(size)


def test_rate_matches_a_known_producer():
    # 10 batches of 50 images at 20 ms each: about 2,500 images/s, never more.
    rate = pipeline_images_per_second(slow_batches(50, 0.02), 10, warmup=2)
    assert 1500 < rate <= 2500


def test_accepts_a_tf_data_dataset_shorter_than_asked():
    import tensorflow as tf

    dataset = tf.data.Dataset.from_tensor_slices(np.zeros((25, 3), np.float32)).batch(10)
    assert pipeline_images_per_second(dataset, 5, warmup=0) > 0


def test_too_few_batches_and_bad_counts_are_clear_errors():
    with pytest.raises(ValueError, match="ran out after the 1 warm-up"):
        pipeline_images_per_second([np.zeros((4, 1))], 3, warmup=1)
    with pytest.raises(ValueError, match="n_batches must be a whole number >= 1"):
        pipeline_images_per_second([], 0)


# --------------------------------------------------------------------------- the study, end to end


@pytest.mark.slow
def test_cli_study_on_one_and_two_devices(tmp_path):
    from mgtutor.data import load_dataset

    out = tmp_path / "out"
    command = [
        sys.executable, "-m", "mgtutor.speed.study", "--devices", "1", "2", "--model", "lenet",
        "--pipelines", "synthetic", "in_memory", "--steps", "3", "--warmup-steps", "1",
        "--samples", "128", "--batch-size-per-replica", "16", "--repeats", "2", "--out", str(out),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "speed-up" in done.stdout and "logical CPU device(s) share" in done.stdout

    results = json.loads((out / "scaling.json").read_text())
    runs = {(run["devices"], run["pipeline"]): run for run in results["runs"]}
    assert sorted(runs) == [(1, "in_memory"), (1, "synthetic"), (2, "in_memory"), (2, "synthetic")]
    epoch_images = len(load_dataset("cifar10").x_train)  # the whole training split, not the 128 used
    for (n, pipeline), run in runs.items():
        assert run["device_kind"] == "logical-cpu"
        assert len(run["device_names"]) == n and all("CPU" in name for name in run["device_names"])
        assert run["global_batch"] == 16 * n
        assert run["strategy"] == ("mirrored" if n > 1 else "none (one device)")
        assert run["images_per_s"] > 0 and run["pipeline_images_per_s"] > 0
        # 2 blocks of 3 steps: the rate is their median (their mean), the whole span's rate between them.
        low, high = run["images_per_s_low"], run["images_per_s_high"]
        assert run["repeats"] == 2 and 0 < low <= high
        assert run["images_per_s"] == pytest.approx((low + high) / 2, rel=EXACT)
        assert low * (1 - EXACT) <= 2 * 3 * 16 * n / run["timed_seconds"] <= high * (1 + EXACT)
        assert run["epoch_images"] == epoch_images and run["train_images"] == 128
        assert run["seconds_per_epoch"] == pytest.approx(epoch_images / run["images_per_s"], rel=EXACT)
        assert run["model_params"] == LENET_PARAMS_32X32X3
        # 4 steps of a 10-class softmax from random weights: the loss is finite and near ln(10).
        assert 1.0 < run["final_loss"] < 5.0
        base = runs[(1, pipeline)]
        assert run["speedup"] == pytest.approx(run["images_per_s"] / base["images_per_s"], rel=EXACT)
        if n > 1:  # bounded by the two runs' spreads
            assert run["speedup_low"] == pytest.approx(low / base["images_per_s_high"], rel=EXACT)
            assert run["speedup_low"] <= run["speedup"] <= run["speedup_high"]
        assert abs(run["efficiency"] - run["speedup"] / n) < EXACT
        assert run["cpu_affinity"] == len(os.sched_getaffinity(0))
    assert runs[(1, "synthetic")]["speedup"] == 1.0 and runs[(1, "in_memory")]["speedup"] == 1.0
    # One process per device count: its pipelines share it, the counts do not.
    assert runs[(1, "synthetic")]["pid"] == runs[(1, "in_memory")]["pid"] != runs[(2, "synthetic")]["pid"]

    reading = results["reading"]  # the JSON: a dict
    cores = len(os.sched_getaffinity(0))
    assert reading["device_kind"] == "logical-cpu" and reading["shared_hardware"] is True
    assert reading["expected_speedup"] == "<= cores / cores one device keeps busy"
    assert reading["cores_per_device"] == {"1": cores, "2": cores / 2}
    assert set(reading["input_bound"]) == {"in_memory"}
    assert reading["gap_vs_synthetic"]["in_memory"]["2"] == pytest.approx(
        1 - runs[(2, "in_memory")]["images_per_s"] / runs[(2, "synthetic")]["images_per_s"], rel=EXACT
    )
    assert results["settings"]["devices"] == [1, 2] and results["files"]["plot"] == str(out / "scaling.png")

    png = (out / "scaling.png").read_bytes()
    assert png[:8] == PNG_MAGIC
    import matplotlib.image

    height, width, _ = matplotlib.image.imread(out / "scaling.png").shape
    assert width > 600 and height > 300
    assert sorted(p.name for p in out.iterdir()) == ["scaling.json", "scaling.png"]  # no temp files left


def towers_children(folder: Path) -> dict:
    """towers_child.py: these runs, and keras2/test_fit_generator.py's, in one 2-device process."""
    return run_child(ROOT / "tests" / "unit" / "speed" / "towers_child.py", timeout=600)


def test_towers_with_the_augmented_pipelines_on_two_devices(run_once):
    runs = run_once("towers", towers_children)["pipelines"]
    assert [run["pipeline"] for run in runs] == ["flow", "tf.data", "layers"]
    for run in runs:
        assert run["strategy"] == "towers" and run["devices"] == 2 and len(run["device_names"]) == 2
        assert run["global_batch"] == 16 and run["train_images"] == 64
        assert run["images_per_s"] > 0 and run["pipeline_images_per_s"] > 0
        # The augmentation layers hold no weights: the template's count is the model's.
        assert run["model_params"] == LENET_PARAMS_32X32X3
        assert 1.0 < run["final_loss"] < 5.0


# --------------------------------------------------------------------------- bad arguments


def _no_children(*args, **kwargs):
    raise AssertionError("a child process started although the arguments were bad")


@pytest.mark.parametrize(
    ("argv", "flag", "fix"),
    [
        (["--devices", "0"], "--devices", "whole numbers >= 1"),
        (["--devices", "2", "2"], "--devices", "twice"),
        (["--model", "resnet"], "--model", "lenet"),
        (["--pipelines", "synthetic", "disk"], "--pipelines", "tf.data"),
        (["--strategy", "nccl"], "--strategy", "towers"),
        (["--batch-size-per-replica", "0"], "--batch-size-per-replica", ">= 1"),
        (["--steps", "0"], "--steps", ">= 1"),
        (["--repeats", "0"], "--repeats", "3 shows the spread"),
        (["--warmup-steps", "0"], "--warmup-steps", "traces the graph"),
        (["--devices", "1", "4", "--samples", "100"], "--samples", "samples >= 128"),
        (["--samples", "10000000"], "--samples", "between 128"),
        (["--timeout", "0"], "--timeout", "positive"),
        (["--devices", "one"], "--devices", "invalid int"),
    ],
)
def test_bad_arguments_exit_before_any_child(argv, flag, fix, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(study, "_run_child", _no_children)
    with pytest.raises(SystemExit) as exit_info:
        study.main([*argv, "--out", str(tmp_path / "out")])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err
    assert flag in error and fix in error
    assert not (tmp_path / "out").exists()


def test_an_output_that_is_a_file_is_refused_by_the_real_command(tmp_path):
    taken = tmp_path / "scaling"
    taken.write_text("not a folder")
    command = [sys.executable, "-m", "mgtutor.speed.study", "--devices", "1", "--out", str(taken)]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 2
    assert "--out" in done.stderr and "is a file" in done.stderr
    assert taken.read_text() == "not a folder"


def test_measure_training_checks_before_starting_tensorflow():
    with pytest.raises(ValueError, match="n_devices must be a whole number >= 1"):
        measure.measure_training(0)
    with pytest.raises(ValueError, match="pipeline must be one of synthetic, in_memory, flow"):
        measure.measure_training(1, pipeline="disk")
    with pytest.raises(ValueError, match="warmup_steps must be a whole number >= 1"):
        measure.measure_training(1, warmup_steps=0)
    with pytest.raises(ValueError, match="repeats must be a whole number >= 1"):
        measure.measure_training(1, repeats=1.5)


def test_a_failing_or_slow_child_is_reported_with_its_last_lines(monkeypatch, tmp_path):
    # A child's output reaches BenchmarkError as run_script collects it (TensorFlow's C++ lines
    # left out, tested in test_processes); here the child command is replaced by a script that fails
    # as a worker would, then by one that hangs.
    broken, slow = tmp_path / "broken.py", tmp_path / "slow.py"
    broken.write_text("import sys\nsys.exit('ValueError: samples: 40 cannot fill one global batch of 64')\n")
    slow.write_text("import time\nprint('started', flush=True)\ntime.sleep(60)\n")
    from mgtutor.support import processes

    real_run_script = processes.run_script

    def run_instead(script):
        def run(command, **kwargs):
            assert command[1:3] == ["-m", "mgtutor.speed.measure"]
            assert "PYTHONPATH" in kwargs["env"] and kwargs["stream"] is False
            return real_run_script([sys.executable, str(script)], **kwargs)

        return run

    monkeypatch.setattr(processes, "run_script", run_instead(broken))
    with pytest.raises(measure.BenchmarkError) as error:
        study._run_child(4, ["flow"], {"model": "lenet"}, timeout=10)
    assert "4-device run (flow) failed (exit code 1)" in str(error.value)
    assert "cannot fill one global batch of 64" in str(error.value)
    monkeypatch.setattr(processes, "run_script", run_instead(slow))
    late = r"within timeout=1 s; pass a larger timeout(.|\n)*started"
    with pytest.raises(measure.BenchmarkError, match=late):
        study._run_child(1, ["synthetic"], {}, timeout=1)


# --------------------------------------------------------------------------- reading known numbers


def _run(n: int, pipeline: str, rate: float, alone: float, kind: str = "gpu", per_replica: int = 32) -> Run:
    return Run(
        batch_size_per_replica=per_replica, global_batch=n * per_replica,
        devices=n, pipeline=pipeline, images_per_s=rate, pipeline_images_per_s=alone,
        device_kind=kind, cpu_affinity=8, strategy="mirrored" if n > 1 else "none (one device)",
        seconds_per_epoch=50_000 / rate, model="seed_cnn", cores_used=7.5,
    )  # fmt: skip


GPU_RUNS = [
    _run(1, "synthetic", 1000.0, 1e6), _run(2, "synthetic", 1900.0, 1e6), _run(4, "synthetic", 3600.0, 1e6),
    _run(1, "in_memory", 990.0, 1e5), _run(2, "in_memory", 1880.0, 1e5), _run(4, "in_memory", 3550.0, 1e5),
    _run(1, "flow", 950.0, 2000.0), _run(2, "flow", 1500.0, 2000.0), _run(4, "flow", 1600.0, 2000.0),
]  # fmt: skip


def test_speedup_efficiency_and_the_input_verdict_from_known_numbers():
    runs = {(p.devices, p.pipeline): p for p in speedups(GPU_RUNS)}
    assert runs[(4, "synthetic")].speedup == pytest.approx(3.6, abs=EXACT)
    assert runs[(4, "synthetic")].efficiency == pytest.approx(0.9, abs=EXACT)
    assert runs[(4, "synthetic")].ideal_images_per_s == pytest.approx(4000.0, abs=EXACT)
    assert runs[(4, "flow")].speedup == pytest.approx(1600 / 950, abs=EXACT)
    assert all(runs[(1, p)].speedup == 1.0 for p in ("synthetic", "in_memory", "flow"))

    reading = read_scaling(GPU_RUNS)
    assert reading.device_kind == "gpu" and reading.shared_hardware is False
    assert reading.expected_speedup == "up to n"
    # flow alone makes 2,000 images/s; the GPUs take 3,600 at 4 devices: it cannot keep ahead.
    assert reading.input_headroom["flow"]["4"] == pytest.approx(2000 / 3600, abs=EXACT)
    assert reading.input_bound == {"in_memory": False, "flow": True}
    assert reading.gap_vs_synthetic["flow"]["4"] == pytest.approx(1 - 1600 / 3600, abs=EXACT)
    assert any("flow trains 56% slower" in line and "input-bound" in line for line in reading.lines)
    assert reading.pipelines["synthetic"]["efficiency_at_most_devices"] == pytest.approx(0.9, abs=EXACT)


def test_a_speedup_is_a_difference_only_outside_the_spreads_of_both_runs():
    def run(n: int, low: float, median: float, high: float) -> Run:
        return replace(_run(n, "synthetic", median, 1e6, "logical-cpu"), repeats=3, images_per_s_low=low,
                       images_per_s_high=high)  # fmt: skip

    # 1,000 (950-1,050) vs 930 (900-960): 0.93, but 900/1,050 = 0.86 to 960/950 = 1.01 holds 1.
    within = {p.devices: p for p in speedups([run(1, 950, 1000, 1050), run(2, 900, 930, 960)])}
    assert within[1].speedup_low == within[1].speedup_high == 1.0  # the baseline is the reference
    assert within[2].speedup == pytest.approx(0.93, abs=EXACT)
    bounds = (within[2].speedup_low, within[2].speedup_high)
    assert bounds == pytest.approx((900 / 1050, 960 / 950), abs=EXACT)
    reading = read_scaling([run(1, 950, 1000, 1050), run(2, 900, 930, 960)])
    assert "speed-up 0.93 (0.86-1.01), within the spread" in reading.lines[0]
    assert "950-1,050" in reading.table() and "spread" in reading.table().splitlines()[0]
    # Tight spreads: the same 0.93 is a slowdown.
    tight = read_scaling([run(1, 995, 1000, 1005), run(2, 925, 930, 935)])
    assert "0.93 (0.92-0.94), slower" in tight.lines[0]
    # A run from before repeats (no low/high): its one rate is its spread.
    old = speedups([_run(1, "synthetic", 1000.0, 1e6), _run(2, "synthetic", 900.0, 1e6)])
    assert old[1].speedup_low == old[1].speedup_high == pytest.approx(0.9, abs=EXACT)


def test_the_reading_on_shared_cores_and_without_a_one_device_run():
    runs = [
        _run(n, pipeline, rate, alone, "logical-cpu")
        for n, pipeline, rate, alone in ((2, "synthetic", 500.0, 1e6), (4, "synthetic", 450.0, 1e6),
                                         (2, "layers", 400.0, 1e5), (4, "layers", 300.0, 1e5),
                                         (4, "tf.data", 440.0, 2000.0))
    ]  # fmt: skip
    speeds = {(p.devices, p.pipeline): p for p in speedups(runs)}
    # The baseline is the fewest devices measured: 2, so 4 devices ideally double.
    assert speeds[(2, "synthetic")].speedup == 1.0
    assert speeds[(4, "synthetic")].ideal_speedup == 2.0
    assert speeds[(4, "synthetic")].efficiency == pytest.approx(0.9 / 2, abs=EXACT)
    reading = read_scaling(runs)
    assert reading.expected_speedup == SHARED_BOUND and reading.cores_per_device == {"2": 4.0, "4": 2.0}
    # Augmentation layers cost compute on the devices; they never make the devices wait for input.
    # tf.data keeps 2000 / 450 = 4.4x ahead, but on shared cores its work takes ~23 % of them.
    assert reading.input_bound == {"layers": False, "tf.data": True}
    assert reading.input_headroom["tf.data"] == {"4": pytest.approx(2000 / 450, abs=EXACT)}
    # The same headroom beside separate GPUs is plenty: the input runs alongside the training.
    on_gpus = read_scaling([replace(run, device_kind="gpu") for run in runs])
    assert on_gpus.input_bound["tf.data"] is False
    assert "share 8 core(s)" in reading.lines[0]
    with pytest.raises(ValueError, match="runs is empty"):
        read_scaling([])


def _logical(rates: dict[int, float], global_batch: int | None) -> list[Run]:
    """Logical-CPU runs at fixed global batch (strong) or fixed 32 per replica (weak)."""
    runs = [_run(n, "in_memory", rate, 1e6, "logical-cpu") for n, rate in rates.items()]
    if global_batch:
        runs = [replace(r, global_batch=global_batch, batch_size_per_replica=global_batch // r.devices)
                for r in runs]  # fmt: skip
    return runs


def test_the_reading_never_contradicts_the_numbers():
    slower = read_scaling(_logical({1: 600.0, 2: 320.0, 4: 260.0}, global_batch=64))
    assert slower.scaling == "strong"
    assert "on 4 devices (in_memory, global batch 64): speed-up 0.43" in slower.lines[0]  # and its batch
    assert "a loss: the strategy's work each step" in slower.lines[0]
    assert "this study does not separate the two." in slower.lines[0]
    # Weak scaling on the same cores can show a speed-up: the words must explain it, not deny it.
    faster = read_scaling(_logical({1: 460.0, 2: 600.0}, global_batch=None))
    assert faster.scaling == "weak"
    assert "on 2 devices (in_memory, global batch 64): speed-up 1.30" in faster.lines[0]  # the most devices
    # One verdict a measurement: the devices' is strong scaling's; weak scaling's mixes in the batch.
    assert "no verdict on the devices alone" in faster.lines[0] and "stream filled" not in faster.lines[0]
    assert "grew from 32 to 64" in faster.lines[1]
    assert not any("at most 1" in line for line in faster.lines)
    # A strong-scaling speed-up on shared cores, read with the cores line in proportion: busier cores carry
    # at most their own ratio of speed (7.5 / 6.0 = x1.25 beside a speed-up of 1.12: all of it)...
    busier = [replace(r, cores_used=6.0) if r.devices == 1 else r for r in _logical({1: 500.0, 2: 560.0}, 64)]
    odd = read_scaling(busier)
    assert "speed-up 1.12" in odd.lines[0] and "x1.25 busier, as much as the speed-up:" in odd.lines[0]
    assert "can account for it" in odd.lines[0]
    cores = "Cores kept busy during the timed steps, of 8: 1 device(s) 6.00"
    assert any(line.startswith(cores) for line in odd.lines)
    # ...a little busier (7.3 -> 7.5, x1.03) carries only that much: the rest is less CPU time per image...
    little = read_scaling([replace(r, cores_used=7.3) if r.devices == 1 else r
                           for r in _logical({1: 500.0, 2: 560.0}, 64)])  # fmt: skip
    assert "only x1.03 busier, below the speed-up's range (from 1.12)" in little.lines[0]
    assert "each image took less CPU time" in little.lines[0] and "can account" not in little.lines[0]
    # ...and with no busier cores the words do not claim them as the cause.
    same_cores = read_scaling(_logical({1: 500.0, 2: 560.0}, global_batch=64))  # 7.5 cores each
    line = same_cores.lines[0]
    assert "shows no busier cores (x1.00)" in line and "each image took less CPU time" in line
    unmeasured = read_scaling([replace(r, cores_used=None) for r in _logical({1: 500.0, 2: 560.0}, 64)])
    assert "does not separate what made it faster" in unmeasured.lines[0]
    # The words never call a speed-up that its spread holds 1 in a difference.
    noisy = [replace(r, images_per_s_low=r.images_per_s * 0.8, images_per_s_high=r.images_per_s * 1.2)
             for r in _logical({1: 500.0, 2: 520.0}, global_batch=64)]  # fmt: skip
    even = read_scaling(noisy)
    assert "no difference measured" in even.lines[0]
    gpu_runs = [replace(run, device_kind="gpu") for run in _logical({1: 500.0, 2: 950.0}, 64)]
    on_gpus = read_scaling(gpu_runs)
    assert "Real GPUs" in on_gpus.lines[0] and "speed-up 1.90" in on_gpus.lines[0]


def test_strong_scaling_study_rejects_a_global_batch_that_does_not_divide():
    message = r"global_batch=66 does not divide over \[4\] device\(s\); pass a multiple of 4"
    with pytest.raises(ValueError, match=message):
        study.scaling_study((1, 2, 4), ("synthetic",), global_batch=66, steps=1, warmup_steps=1)


def test_plot_scaling_draws_the_ideal_line_and_the_efficiency():
    import matplotlib.pyplot as plt

    figure = plot_scaling(read_scaling(GPU_RUNS))
    try:
        rate_axis, efficiency_axis = figure.axes
        lines = rate_axis.get_lines()
        ideal = {tuple(line.get_ydata()) for line in lines if line.get_linestyle() == "--"}
        assert (1000.0, 2000.0, 4000.0) in ideal and (950.0, 1900.0, 3800.0) in ideal
        curves = {line.get_label(): list(line.get_ydata()) for line in efficiency_axis.get_lines()}
        assert curves["synthetic"] == pytest.approx([100.0, 95.0, 90.0], abs=1e-9)
        assert curves["ideal (100 %)"] == [100, 100]
        assert "logical" not in figure.texts[0].get_text()  # real GPUs: no shared-hardware caveat
    finally:
        plt.close(figure)
    with pytest.raises(TypeError, match="what scaling_study returns"):
        plot_scaling({"runs": GPU_RUNS})  # a dict is no reading: the plot reads nothing itself


# --------------------------------------------------------------------------- real GPUs


def test_projection_reproduces_seed_001_and_follows_amdahl():
    projection = {row["devices"]: row for row in amdahl.projected_scaling((1, 2, 4, 8))}
    # Fitted to seed 001's two measurements, it must give them back.
    assert projection[1]["epoch_seconds"] == pytest.approx(63.0, abs=1e-9)
    assert projection[4]["epoch_seconds"] == pytest.approx(16.0, abs=1e-9)
    assert projection[4]["speedup"] == pytest.approx(63 / 16, abs=1e-9)
    assert projection[4]["efficiency"] == pytest.approx(63 / 64, abs=1e-9)
    fraction = (1 - 16 / 63) / (1 - 1 / 4)
    assert projection[8]["parallel_fraction"] == pytest.approx(fraction, abs=1e-12)
    assert projection[8]["epoch_seconds"] == pytest.approx(63 * ((1 - fraction) + fraction / 8), abs=1e-9)
    assert 1 < projection[2]["speedup"] < 2 and projection[8]["efficiency"] < projection[4]["efficiency"]

    assert amdahl.amdahl_speedup(4, 1.0) == 4.0 and amdahl.amdahl_speedup(4, 0.0) == 1.0
    assert amdahl.amdahl_speedup(2, 0.5) == pytest.approx(4 / 3, abs=1e-12)
    assert amdahl.parallel_fraction(amdahl.amdahl_speedup(6, 0.8), 6) == pytest.approx(0.8, abs=1e-12)
    with pytest.raises(ValueError, match="parallel_fraction must lie between 0 and 1"):
        amdahl.amdahl_speedup(2, 1.5)
    with pytest.raises(ValueError, match="speedup must lie between 1 and n_devices=4"):
        amdahl.parallel_fraction(5.0, 4)
    with pytest.raises(ValueError, match="must map 1 and one other device count"):
        amdahl.projected_scaling((2,), {4: 16.0, 8: 9.0})
    assert math.isclose(amdahl.projected_scaling((3,), {1: 10.0, 2: 5.0})[0]["epoch_seconds"], 10 / 3)


def test_a_study_reuses_an_earlier_studys_run_of_the_very_same_settings_and_measures_the_rest(monkeypatch):
    # Strong scaling at 64 and weak at 32 per replica measure the same thing on 2 devices (32 each).
    measured = []

    def measure_instead(n, group, settings, timeout):
        per_replica = settings["batch_size_per_replica"]
        measured.append((n, per_replica))
        return [replace(_run(n, p, 100.0 * len(measured), 1e6, "logical-cpu", per_replica=per_replica),
                        global_batch=n * per_replica) for p in group]  # fmt: skip

    monkeypatch.setattr(study, "_run_child", measure_instead)
    strong = study.scaling_study([1, 2], ["in_memory"], global_batch=64, samples=256, verbose=False)
    assert measured == [(1, 64), (2, 32)]
    weak = study.scaling_study([1, 2], ["in_memory"], batch_size_per_replica=32, samples=256, reuse=strong,
                               verbose=False)  # fmt: skip
    assert measured[2:] == [(1, 32)]  # 2 devices x 32 was measured by the strong study: taken, not measured
    assert [run.images_per_s for run in weak.runs] == [300.0, 200.0]
    study.scaling_study([1, 2], ["in_memory"], batch_size_per_replica=32, samples=256, seed=1, reuse=strong,
                        verbose=False)  # fmt: skip
    assert measured[3:] == [(1, 32), (2, 32)]  # another seed: nothing is the same measurement
    with pytest.raises(TypeError, match="reuse must be a Study"):
        study.scaling_study([1], ["in_memory"], samples=256, reuse="strong", verbose=False)


def test_a_ratio_is_read_with_its_direction_and_no_bound_shows_as_1_00_beside_one():
    assert read_ratio(1.65, 1.60, 1.66) == "1.65 (1.60-1.66), faster"
    assert read_ratio(0.96, 0.93, 0.9981) == "0.96 (0.93-0.998), slower"  # not "0.93-1.00), slower"
    assert read_ratio(1.03, 1.0021, 1.08) == "1.03 (1.002-1.08), faster"
    assert read_ratio(1.0, 0.99, 1.01) == "1.00 (0.99-1.01), within the spread"  # exactly 1 stays 1.00
    assert read_ratio(1.001, 1.0004, 1.002) == "1.001 (1.0004-1.002), faster"  # 4 where 3 would still show 1
    assert read_ratio(0.996, 0.99, 1.003) == "0.996 (0.99-1.003), within the spread"


def test_a_run_taken_from_an_earlier_study_is_read_once_there():
    strong = _logical({1: 600.0, 2: 540.0}, global_batch=64)
    weak = [_run(1, "in_memory", 500.0, 1e6, "logical-cpu"), strong[1]]  # 2 x 32 is strong's 2-device run
    first, again = read_scaling(strong), read_scaling(weak, reused=[strong[1]])
    assert "no verdict on the devices alone" in again.lines[0]
    assert not set(first.lines) & set(again.lines), "a line of the earlier reading said again"
    assert not any("MirroredStrategy" in line or "pipeline alone" in line for line in again.lines)
    said = "\n".join(again.lines)
    assert "\n2 device(s) at global batch 64: the earlier study's run (the same settings" in said
    assert said.endswith("\nCores kept busy during the timed steps, of 8: 1 device(s) 7.50.")  # no comparing
    assert not any("2 device(s) 7.50" in line for line in again.lines)  # read there
    # Without reuse the same runs are read in full.
    assert any("MirroredStrategy" in line for line in read_scaling(weak).lines)
