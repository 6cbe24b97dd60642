"""cluster/train.py, the copyable script: its shards, its stream, its refusals, exact resume, parity.

The script imports no mgtutor, so it is loaded from its file. The quick tests use its functions; the
slow ones run it as a learner does, in child processes (one process with 2 devices, 2 pinned
workers from `mgtutor.training.cluster.launch`) and compare the weights each run saved.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from tests.conftest import ROOT

SCRIPT = ROOT / "cluster" / "train.py"


def _script():
    spec = importlib.util.spec_from_file_location("cluster_train", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


train = _script()


def _cfg(**changes):
    return SimpleNamespace(**{**train.CONFIG, **changes})


def _index(counts):
    return {"train": [{"name": f"s{k}", "count": c} for k, c in enumerate(counts)]}


def test_the_script_imports_no_mgtutor_and_no_framework_at_import():
    import ast

    tree = ast.parse(SCRIPT.read_text())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert "mgtutor" not in imported and {"keras", "tensorflow", "jax"} <= imported
    code = f"import importlib.util,sys; s=importlib.util.spec_from_file_location('t', {str(SCRIPT)!r}); " \
           "m=importlib.util.module_from_spec(s); s.loader.exec_module(m); " \
           "print(sorted(k for k in ('tensorflow','jax','keras','mgtutor') if k in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"  # the backend is chosen before any of them is imported


def test_each_replica_reads_every_rth_shard_and_no_other():
    index = _index([10] * 8)
    assert [s["name"] for s in train.replica_shards(index, "train", 0, 2)] == ["s0", "s2", "s4", "s6"]
    assert [s["name"] for s in train.replica_shards(index, "train", 1, 3)] == ["s1", "s4", "s7"]
    taken = [s["name"] for r in range(3) for s in train.replica_shards(index, "train", r, 3)]
    assert sorted(taken) == sorted(f"s{k}" for k in range(8))  # all of them, each once
    assert [train.count(index, "train", r, 3) for r in range(3)] == [30, 30, 20]


def test_the_batch_of_a_step_depends_on_seed_step_and_replica_alone():
    x = np.random.default_rng(0).integers(0, 255, (50, 8, 8, 3), dtype=np.uint8)
    y = np.arange(50) % 10
    stats = {"mean": [0.5] * 3, "std": [0.25] * 3}

    def stream(replica=0, seed=0):
        return train.Stream(x, y, 8, 6, replica, _cfg(seed=seed), stats)

    first = stream()
    later = [first(s) for s in range(14)]  # through two epoch boundaries (6 steps an epoch)
    again = stream()
    assert np.array_equal(again(13)[0], later[13][0]) and np.array_equal(again(2)[1], later[2][1])
    assert not np.array_equal(stream(replica=1)(3)[1], later[3][1])
    assert not np.array_equal(stream(seed=1)(3)[1], later[3][1])
    epoch = np.concatenate([later[s][1] for s in range(6)])
    assert len(set(np.concatenate([np.flatnonzero(y == v) for v in epoch]).tolist())) >= 48 // 5  # no repeats
    assert later[0][0].dtype == np.float32 and later[0][0].shape == (8, 8, 8, 3)


def test_prepare_writes_whole_shards_and_an_index_last(tmp_path):
    train.prepare("synthetic", str(tmp_path), 3)
    import json
    index = json.loads((tmp_path / "index.json").read_text())
    assert [s["count"] for s in index["train"]] == [683, 683, 682] and index["classes"] == 10
    assert not list(tmp_path.glob("*.tmp"))
    x = np.load(tmp_path / "train-00002-of-00003.x.npy")
    assert x.shape == (682, 32, 32, 3) and x.dtype == np.uint8


def test_prepare_reads_cifar10s_own_archive(data_dir, tmp_path):
    train.prepare(str(data_dir / "cifar-10-python-subset.tar.gz"), str(tmp_path), 2)
    y = np.concatenate([np.load(tmp_path / f"train-0000{k}-of-00002.y.npy") for k in range(2)])
    assert len(y) == 5085 and set(y.tolist()) == set(range(10))


@pytest.mark.parametrize(
    "argv, says",
    [
        (["train", "--data", "nowhere"], "run `python train.py prepare` first"),
        (["train", "--steps", "0"], "--steps 0: give 1 or more"),
        (["train", "--backend", "torch"], "give tensorflow or jax"),
        (["train", "--model", "resnet"], "give seed or capstone"),
        (["prepare", "--source", "what.csv"], "--source 'what.csv'"),
    ],
)
def test_bad_input_is_refused_before_any_work(argv, says, tmp_path):
    with pytest.raises(SystemExit) as refused:
        train.main([*argv, "--out", str(tmp_path / "out")])
    assert says in str(refused.value)
    assert not (tmp_path / "out").exists()


def _run(tmp_path, data, out, *args, env=None):
    environment = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", **(env or {})}
    argv = [sys.executable, str(SCRIPT), "train", "--data", str(data), "--out", str(tmp_path / out), *args]
    return subprocess.run(argv, capture_output=True, text=True, env=environment, timeout=600)


def _weights(path: Path) -> list[np.ndarray]:
    with np.load(path / "weights.npz") as saved:
        return [saved[f"v{i}"] for i in range(len(saved.files) - 1)]


def _largest_difference(a: Path, b: Path) -> float:
    return max(float(np.max(np.abs(u - v))) for u, v in zip(_weights(a), _weights(b), strict=True))


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    folder = tmp_path_factory.mktemp("shards")
    train.prepare("synthetic", str(folder), 4)
    return folder


@pytest.mark.slow
def test_more_replicas_than_shards_is_refused_naming_the_fix(shards, tmp_path):
    few = tmp_path / "few"
    train.prepare("synthetic", str(few), 1)
    done = _run(tmp_path, few, "out", "--devices", "2")
    assert done.returncode != 0 and "prepare with --shards 2 or more" in done.stderr


@pytest.mark.slow
def test_a_job_killed_mid_run_resumes_from_its_checkpoint_on_the_same_weights(shards, tmp_path):
    args = ("--steps", "30", "--checkpoint_every", "10", "--log_every", "5")
    straight = _run(tmp_path, shards, "straight", *args)
    assert straight.returncode == 0, straight.stderr[-2000:]
    environment = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    argv = [sys.executable, str(SCRIPT), "train", "--data", str(shards), "--out", str(tmp_path / "killed")]
    argv += args
    with subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=environment) as job:
        for line in job.stdout:
            if line.startswith("step 25/"):  # past the checkpoint of step 20, before the next
                job.kill()
                break
    assert job.wait() != 0 and not (tmp_path / "killed" / "weights.npz").exists()
    again = _run(tmp_path, shards, "killed", *args)
    assert "resumed from step 20" in again.stdout
    assert _largest_difference(tmp_path / "straight", tmp_path / "killed") == 0.0
    assert float(again.stdout.split("test accuracy ")[1].split(",")[0]) > 0.2  # synthetic: 10 classes


@pytest.fixture()
def without_tensorflow(tmp_path):
    """PYTHONPATH for a child on which `import tensorflow` fails, as on a machine with only JAX."""
    (tmp_path / "hidden" / "tensorflow").mkdir(parents=True)
    stub = tmp_path / "hidden" / "tensorflow" / "__init__.py"
    stub.write_text('raise ImportError("no TensorFlow here")\n')
    return str(tmp_path / "hidden")


@pytest.mark.slow
def test_the_jax_route_needs_no_tensorflow_and_trains_alike_on_one_process_and_two_workers(
    shards, tmp_path, without_tensorflow
):
    """JAX: XLA sizes its thread pool by the cores a process may use, so a pinned worker (one core)
    sums in another order than one process with 2 devices: float32 rounding, growing as training goes
    on. After 5 steps: 1.5e-8 on an Intel Xeon (2026-11-28), 2.6e-5 on an AVX2-only AMD EPYC (2026-11-30,
    another CPU's kernels); a gradient left out of the all-reduce moves weights by the learning rate (0.01)
    times a gradient's difference a step, orders above the bound of 1e-4."""
    hidden = {"PYTHONPATH": without_tensorflow}
    one = _run(tmp_path, shards, "one", "--steps", "5", "--devices", "2", "--backend", "jax", env=hidden)
    assert one.returncode == 0, one.stderr[-2000:]
    from mgtutor.training.cluster import launch

    args = ["train", "--data", str(shards), "--out", str(tmp_path / "two"), "--backend", "jax"]
    args += ["--steps", "5"]
    result = launch([sys.executable, str(SCRIPT)], 2, args=args, cores_per_worker=1, timeout=600,
                    stream=False, env=hidden)
    assert result.ok, result
    assert _largest_difference(tmp_path / "one", tmp_path / "two") <= 1e-4
    saved_model = str(tmp_path / "two" / "model.keras")
    saved = subprocess.run(
        [sys.executable, "-c", f"import keras, numpy as np; m = keras.saving.load_model({saved_model!r}); "
         "print(m.predict(np.zeros((2, 32, 32, 3)), verbose=0).shape)"],
        capture_output=True, text=True, env={**os.environ, **hidden, "KERAS_BACKEND": "jax"}, timeout=300,
    )
    assert saved.stdout.strip() == "(2, 10)", saved.stderr[-2000:]  # plain Keras loads it, no mgtutor


@pytest.mark.slow
def test_the_jax_route_resumes_exactly(shards, tmp_path, without_tensorflow):
    hidden = {"PYTHONPATH": without_tensorflow}
    args = ("--devices", "2", "--backend", "jax", "--checkpoint_every", "5")
    assert _run(tmp_path, shards, "straight", "--steps", "12", *args, env=hidden).returncode == 0
    assert _run(tmp_path, shards, "twice", "--steps", "7", *args, env=hidden).returncode == 0
    again = _run(tmp_path, shards, "twice", "--steps", "12", *args, env=hidden)
    assert "resumed from step 7" in again.stdout
    assert _largest_difference(tmp_path / "straight", tmp_path / "twice") == 0.0
