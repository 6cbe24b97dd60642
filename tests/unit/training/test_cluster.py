"""The localhost launcher, and multi-worker training through it.

Launcher behaviour is tested with ``plain_worker.py`` (plain Python, no
TensorFlow, well under a second each). Two tests start TensorFlow workers running
``multiworker_job.py`` (a tiny CNN with BatchNormalization, whose per-worker
statistics `Trainer` averages across the workers): two workers train to the
weights of one process with two replicas, and a job whose worker is killed
resumes from its last checkpoint to the weights of the uninterrupted job.
Their workers run in a private network namespace where the machine allows it
(here, as root, always): one test reads the listening sockets from outside it and
compares its job with the same job run unisolated. Nothing connects anywhere but
loopback.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from mgtutor.support.processes import RESULT_MARK, parse_result
from mgtutor.training import netns
from mgtutor.training.checkpoints import resume_point
from mgtutor.training.cluster import LocalCluster, free_ports, launch
from mgtutor.training.job_result import ClusterError
from mgtutor.training.proctree import processes_in_group

ROOT = Path(__file__).resolve().parents[3]
JOB = ROOT / "tests" / "unit" / "training" / "multiworker_job.py"
PLAIN = ROOT / "tests" / "unit" / "training" / "plain_worker.py"  # launcher tests: no TensorFlow
# 2 workers x 1 replica against 1 process x 2 replicas: the same slices and the same sum of two
# gradients; each worker's BatchNormalization statistics come from its own slice until Trainer
# averages them. Measured 1.2e-7; the margin allows for other CPUs' kernels.
REPLICA_TOLERANCE = 1e-6


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def _assert_nothing_left(result, *extra_pids: int) -> None:
    """No process of any worker's group, nor any given pid, is alive (read from the process table)."""
    for pid in result.pids:
        assert processes_in_group(pid) == [], f"processes left in worker group {pid}"
        assert not _alive(pid)
    for pid in extra_pids:
        assert not _alive(pid), f"pid {pid} outlived the launcher"
    table = subprocess.run(["ps", "-eo", "pgid=,stat="], capture_output=True, text=True).stdout.split()
    live_groups = {int(pgid) for pgid, stat in zip(table[::2], table[1::2], strict=True) if "Z" not in stat}
    assert not live_groups & set(result.pids)  # zombies are dead; some containers reap them late


# --------------------------------------------------------------------------- pure helpers


def test_free_ports_are_distinct_and_bindable_on_localhost():
    ports = free_ports(3)
    assert len(set(ports)) == 3 and all(1024 <= p < 65536 for p in ports)
    for port in ports:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


def test_bad_arguments_are_refused_before_anything_starts(tmp_path):
    cases = [
        (dict(command=PLAIN, n_workers=0), ValueError, "n_workers must be a whole number >= 1"),
        (dict(command=PLAIN, timeout=0), ValueError, "timeout must be a number of seconds > 0"),
        (dict(command=PLAIN, timeout=float("inf")), ValueError, "timeout must be"),
        (dict(command=tmp_path / "missing.py"), FileNotFoundError, "no worker script"),
        (dict(command=PLAIN, kill_worker=1), ValueError, "kill_worker and kill_when go together"),
        (dict(command=PLAIN, kill_worker=2, kill_when="x"), ValueError, "kill_worker must be a worker"),
        (dict(command=PLAIN, kill_worker=0, kill_when="("), ValueError, "not a valid regular expression"),
        (dict(command=PLAIN, env={"A": 1}), TypeError, "env must be a dict of str -> str"),
        (dict(command=PLAIN, args="--epochs 2"), TypeError, "args must be a list"),
        (dict(command=[]), TypeError, "command must be a script path or a non-empty argv list"),
        (dict(command=PLAIN, isolate="yes"), TypeError, "isolate must be True, False or None"),
        (dict(command=PLAIN, isolate=1), TypeError, "isolate must be True, False or None"),
    ]
    for kwargs, error, message in cases:
        with pytest.raises(error, match=message):
            launch(**kwargs)


# --------------------------------------------------------------------------- launcher, plain workers


def test_streams_prefixed_output_and_collects_each_result(capsys):
    result = launch(PLAIN, 3, args=["echo", "--epochs", 2], env={"EXTRA": "yes"}, timeout=60, cwd=ROOT)

    assert result.ok and result.returncodes == [0, 0, 0] and not result.timed_out
    printed = capsys.readouterr().out
    for index in range(3):
        assert f"[worker {index}] hello from {index}" in printed
        reported = result.results[index]
        assert reported["index"] == index and reported["tf_config"]["task"]["index"] == index
        assert reported["args"] == ["--epochs", "2"] and reported["extra"] == "yes"
    clusters = {tuple(r["tf_config"]["cluster"]["worker"]) for r in result.results}
    assert len(clusters) == 1 and len(set(next(iter(clusters)))) == 3  # one cluster, 3 distinct ports
    assert result.metrics == result.results[0]
    assert RESULT_MARK not in printed  # result lines are collected, not shown
    assert "cudart_stub" not in printed  # TF's start-up chatter is dropped from the stream...
    assert "cudart_stub" in result.workers[0].log_tail[0]  # ...not from the log
    assert "/step" not in printed and "[worker 0] Epoch 1/2" in printed  # Keras's step line too, not "Epoch"
    assert result.workers[0].log_tail[2].startswith("78/78 - 9s - 110ms/step")
    _assert_nothing_left(result)


def test_a_failing_worker_stops_the_others_and_leaves_no_process(tmp_path):
    marker = tmp_path / "grandchild.pid"
    result = launch(PLAIN, 2, args=["fail_once_0_has_a_child", marker], timeout=60, stream=False)

    assert not result.ok and result.returncodes[1] == 3
    assert result.workers[0].returncode == -9 and result.workers[0].stopped_by_launcher
    assert "worker 1 failed (exit 3)" in result.reason
    assert result.workers[1].log_tail == ("worker 1 gives up",)
    assert "worker 0 (pid" in result.summary() and "exit 3" in result.summary()
    _assert_nothing_left(result, int(marker.read_text()))
    with pytest.raises(ClusterError, match="worker 1, exit 3") as caught:
        result.check()
    assert caught.value.result is result


def test_a_timeout_kills_every_worker():
    with pytest.raises(ClusterError, match="timeout after 1 s") as caught:
        launch(PLAIN, 2, args=["sleep"], timeout=1, stream=False, check=True)
    result = caught.value.result
    assert result.timed_out and result.returncodes == [-9, -9]
    assert all(worker.stopped_by_launcher for worker in result.workers)
    _assert_nothing_left(result)


def test_kill_when_kills_the_named_worker_once_the_line_appears():
    pattern = r"checkpoint saved: step \d"
    with LocalCluster(
        PLAIN, 2, args=["announce_then_sleep"], stream=False, kill_worker=1, kill_when=pattern
    ) as cluster:
        result = cluster.wait(timeout=60)
    assert result.returncodes == [-9, -9]
    assert result.reason.startswith("worker 1 killed by the launcher (kill_when matched)")
    _assert_nothing_left(result)


def test_leaving_the_block_on_ctrl_c_kills_every_worker():
    with pytest.raises(KeyboardInterrupt), LocalCluster(PLAIN, 2, args=["sleep"], stream=False) as cluster:
        pids = cluster.pids
        raise KeyboardInterrupt  # what Ctrl-C in a notebook cell raises
    for pid in pids:
        assert processes_in_group(pid) == [] and not _alive(pid)


def test_isolated_workers_share_one_private_namespace_and_talk_over_loopback():
    # isolate=True: where no namespace can be made this fails, saying why.
    result = launch(PLAIN, 2, args=["loopback_pair"], timeout=60, stream=False, isolate=True)

    assert result.ok and result.isolated, result.summary()
    assert "network: isolated (a private namespace with loopback only)" in result.summary()
    first, second = result.results
    assert first["netns"] == second["netns"] != os.readlink("/proc/self/ns/net")  # one, not the host's
    assert first["interfaces"] == second["interfaces"] == ["lo"]
    assert first["received"] == "hello from worker 1"  # through localhost, inside the namespace
    _assert_nothing_left(result)


def test_without_isolation_launch_says_once_what_is_exposed(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(netns, "_exposure_told", False)
    with monkeypatch.context() as patch:
        patch.setenv("PATH", str(tmp_path))  # no unshare, no nsenter: isolation is unavailable
        refused = LocalCluster(PLAIN, 2, args=["sleep"], stream=False, isolate=True)
        with pytest.raises(netns.IsolationUnavailable, match=r"isolate=True, but .*'nsenter' \(util-linux"):
            refused.start()
        assert refused.pids == [] and capsys.readouterr().out == ""  # refused before any worker started

        first = launch(PLAIN, 2, args=["loopback_pair"], timeout=60, stream=False)
        second = launch(PLAIN, 2, args=["loopback_pair"], timeout=60, stream=False)

    printed = capsys.readouterr().out
    assert first.ok and second.ok and not first.isolated and not second.isolated
    assert printed.count("Note: these workers are reachable from the network.") == 1  # once per process
    ports = first.results[0]["ports"]
    assert f"every network interface (ports {ports[0]}, {ports[1]})" in printed
    assert "'nsenter' (util-linux) is not installed" in printed and "answer deny" in printed
    assert first.results[0]["netns"] == os.readlink("/proc/self/ns/net")  # the host's namespace
    assert "network: not isolated" in first.summary()
    _assert_nothing_left(first)


# --------------------------------------------------------------------------- multi-worker training


def _weights(prefix: Path, worker: int) -> list[np.ndarray]:
    with np.load(f"{prefix}-worker{worker}.npz") as saved:
        return [saved[key] for key in sorted(saved.files, key=lambda k: int(k.split("_")[1]))]


def _max_difference(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    assert len(a) == len(b)
    return max(float(np.max(np.abs(x.astype(np.float64) - y))) for x, y in zip(a, b, strict=True))


def _listening(net: Path) -> set[int]:
    """The TCP ports in LISTEN state in one network namespace: ``/proc/self/net`` or ``/proc/PID/net``."""
    ports = set()
    for table in ("tcp", "tcp6"):
        path = net / table
        for line in path.read_text().splitlines()[1:] if path.exists() else []:
            fields = line.split()  # sl, local address:port (hex), remote, state (0A: LISTEN), ...
            if fields[3] == "0A":
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def _job_args(weights: Path, checkpoints: Path) -> list:
    # Checkpoints as the killed job below saves them: Trainer averages the workers' BatchNorm
    # statistics at every save, so the two jobs round them alike (1 ulp apart otherwise).
    return ["--weights-out", weights, "--checkpoint-dir", checkpoints, "--checkpoint-every", 2]


def _running(cluster: LocalCluster, deadline: float) -> bool:
    return time.monotonic() < deadline and all(map(_alive, cluster.pids))


def _run_watching_sockets(args: list, isolate: bool | None) -> dict:
    """Run the job; once both workers' ports listen (as worker 0 sees its network), read this machine's."""
    with LocalCluster(JOB, 2, args=args, cwd=ROOT, stream=False, isolate=isolate) as cluster:
        deadline, inside = time.monotonic() + 180, set()
        while not set(cluster.ports) <= inside and _running(cluster, deadline):
            inside = _listening(Path(f"/proc/{cluster.pids[0]}/net"))
            time.sleep(0.02)
        host = _listening(Path("/proc/self/net"))  # this test's namespace: the machine's own
        namespaces = {os.readlink(f"/proc/{pid}/ns/net") for pid in cluster.pids}
        ports = list(cluster.ports)
        result = cluster.wait(timeout=240)
    return {"result": result, "ports": ports, "inside": inside, "host": host, "namespaces": namespaces}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """Two localhost workers (isolated where possible), and beside them one process with 2 replicas."""
    folder = tmp_path_factory.mktemp("multiworker")
    reference = subprocess.Popen(
        [sys.executable, str(JOB), "--strategy", "mirrored", "--devices", "2",
         "--weights-out", str(folder / "reference")],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )  # fmt: skip
    try:
        watched = _run_watching_sockets(_job_args(folder / "workers", folder / "checkpoints"), isolate=None)
        output, _ = reference.communicate(timeout=240)
    finally:
        reference.kill()
        reference.wait()
    assert reference.returncode == 0, output[-3000:]
    reported = parse_result(output.strip().splitlines()[-1])
    return {**watched, "folder": folder, "reference": reported}


@pytest.mark.slow
def test_two_workers_train_identical_weights_equal_to_two_replicas(uninterrupted):
    result, folder = uninterrupted["result"], uninterrupted["folder"]
    assert result.ok, result.summary() + "\n" + "\n".join(result.workers[1].log_tail)
    first, second = result.results
    assert first["replicas"] == second["replicas"] == 2  # 2 workers x 1 CPU device
    assert first["digest"] == second["digest"]  # bit-identical on both workers
    assert _max_difference(_weights(folder / "workers", 0), _weights(folder / "workers", 1)) == 0.0
    reference = _weights(folder / "reference", 0)
    assert _max_difference(_weights(folder / "workers", 0), reference) <= REPLICA_TOLERANCE
    for key, values in uninterrupted["reference"]["history"].items():
        np.testing.assert_allclose(first["history"][key], values, atol=1e-5, err_msg=key)
    assert first["history"]["loss"][-1] < first["history"]["loss"][0]  # it learned something
    _assert_nothing_left(result)


@pytest.mark.slow
def test_isolated_workers_listen_on_no_port_of_this_machine_and_train_as_unisolated(uninterrupted, tmp_path):
    isolated = uninterrupted
    if not isolated["result"].isolated:
        pytest.fail(f"the job could not be isolated on this machine: {netns.availability()[1]}")
    ports = set(isolated["ports"])
    assert ports <= isolated["inside"], isolated["result"].summary()  # both listen, in worker 0's namespace
    assert not ports & isolated["host"]  # ...and on no interface of this machine
    assert len(isolated["namespaces"]) == 1 and os.readlink("/proc/self/ns/net") not in isolated["namespaces"]

    unisolated = _run_watching_sockets(_job_args(tmp_path / "open", tmp_path / "checkpoints"), isolate=False)

    assert unisolated["result"].ok and not unisolated["result"].isolated, unisolated["result"].summary()
    assert set(unisolated["ports"]) <= unisolated["host"]  # the same reading sees an unisolated job's ports
    for reported, reference in zip(isolated["result"].results, unisolated["result"].results, strict=True):
        assert reported["digest"] == reference["digest"]  # bit-identical weights
        assert reported["history"] == reference["history"]
    assert _max_difference(_weights(isolated["folder"] / "workers", 0), _weights(tmp_path / "open", 0)) == 0.0
    _assert_nothing_left(unisolated["result"])


# Mid-epoch in the first and in the second epoch (6 steps each): the restored metric sums and the
# resumed batch order both matter there; at an epoch's end only the weights do. One job killed at
# each, the second time after resuming from the first: a run resumed twice must still end exactly.
@pytest.mark.slow
def test_killed_twice_and_restarted_each_time_resumes_from_the_last_checkpoint(uninterrupted, tmp_path):
    checkpoints = tmp_path / "checkpoints"
    args = ["--checkpoint-dir", checkpoints, "--checkpoint-every", 2, "--step-seconds", 0.1,
            "--weights-out", tmp_path / "resumed"]  # fmt: skip
    last_saved = 0
    for kill_after in (4, 8):
        # Kill worker 1 like a crashed machine once the chief has saved step `kill_after` (of 12).
        # The chief's traceback after its peer's end can outrun launch's 40-line tail and push the
        # "resuming" line out of it (CI, Dec 1): keep its whole log.
        with LocalCluster(JOB, 2, args=args, cwd=ROOT, tail_lines=10_000, kill_worker=1,
                          kill_when=rf"saved: step {kill_after} ") as cluster:  # fmt: skip
            killed = cluster.wait(240)
        assert not killed.ok and killed.returncodes[1] == -9 and killed.returncodes[0] != 0, killed.summary()
        assert "worker 1 killed by the launcher" in killed.reason
        _assert_nothing_left(killed)
        if last_saved:  # this job started from the last kill's checkpoint
            tail = killed.workers[0].log_tail
            assert any("resuming" in line and f"(global step {last_saved})" in line for line in tail), tail
        epoch, batch = resume_point(checkpoints)
        last_saved = epoch * 6 + batch  # 192 samples / batch 32 = 6 steps per epoch
        assert last_saved >= kill_after and last_saved % 2 == 0  # after its checkpoint at step `kill_after`

    restarted = launch(JOB, 2, args=args, cwd=ROOT, timeout=240)

    assert restarted.ok, restarted.summary() + "\n" + "\n".join(restarted.workers[0].log_tail)
    for reported in restarted.results:
        epoch, batch = reported["resumed_from"]
        resumed_step = epoch * reported["steps_per_epoch"] + batch
        assert resumed_step == last_saved  # the latest checkpoint: only steps after it were lost
        assert reported["steps_trained"] == 2 * reported["steps_per_epoch"] - resumed_step
    assert restarted.results[0]["digest"] == restarted.results[1]["digest"]
    # Same data order, same restored state: the uninterrupted job's weights (measured bit-identical).
    whole = _weights(uninterrupted["folder"] / "workers", 0)
    assert _max_difference(_weights(tmp_path / "resumed", 0), whole) == 0.0
    # The epochs' logged means too, to the last bit: each replica gets back its own part of the
    # metric sums (restored as one total split evenly, a mean was one float32 ulp off).
    assert restarted.results[0]["history"] == uninterrupted["result"].results[0]["history"]
    assert not (checkpoints / ".worker-1-tmp").exists()  # non-chief temp checkpoints are deleted
    _assert_nothing_left(restarted)


# --------------------------------------------------------------------------- gradient accumulation

# 232 samples in global batches of 32: 7 batches per epoch (8 rows left out). accumulation_steps=2:
# updates of 2, 2, 2 and 1 batches, so 4 per epoch; checkpoints every 3 updates and at epoch ends.
ACCUMULATION_ARGS = ["--samples", 232, "--accumulation-steps", 2, "--checkpoint-every", 3]


@pytest.fixture(scope="module")
def accumulated(tmp_path_factory):
    """Two workers accumulating k=2 (uninterrupted), and one process with 2 replicas doing the same."""
    from tests.conftest import run_child

    folder = tmp_path_factory.mktemp("accumulation")
    reference = run_child(
        JOB, "--strategy", "mirrored", "--devices", 2, *ACCUMULATION_ARGS,
        "--checkpoint-dir", folder / "reference-checkpoints", "--weights-out", folder / "reference",
        timeout=240,
    )  # fmt: skip
    args = [*ACCUMULATION_ARGS, "--checkpoint-dir", folder / "checkpoints",
            "--weights-out", folder / "workers"]  # fmt: skip
    result = launch(JOB, 2, args=args, cwd=ROOT, timeout=240, stream=False)
    assert result.ok, result.summary() + "\n" + "\n".join(result.workers[1].log_tail)
    return {"result": result, "reference": reference, "folder": folder}


@pytest.mark.slow
def test_two_workers_accumulating_train_identical_weights_equal_to_two_replicas(accumulated):
    result, folder, reference = accumulated["result"], accumulated["folder"], accumulated["reference"]
    first, second = result.results
    assert first["replicas"] == second["replicas"] == reference["replicas"] == 2
    assert first["digest"] == second["digest"]  # bit-identical on both workers
    assert _max_difference(_weights(folder / "workers", 0), _weights(folder / "workers", 1)) == 0.0
    reference_weights = _weights(folder / "reference", 0)  # measured 1.2e-7 apart (float32 rounding)
    assert _max_difference(_weights(folder / "workers", 0), reference_weights) <= REPLICA_TOLERANCE
    # One all-reduce per update on each worker's replica: 2 epochs x ceil(7 / 2), not 14 (one per batch).
    assert first["all_reduces"] == second["all_reduces"] == [8] and reference["all_reduces"] == [8, 8]
    assert first["iterations"] == reference["iterations"] == 8
    assert first["steps_per_epoch"] == 4 and first["steps_trained"] == 8
    for key, values in reference["history"].items():
        np.testing.assert_allclose(first["history"][key], values, atol=1e-5, err_msg=key)
    _assert_nothing_left(result)


@pytest.mark.slow
def test_accumulating_workers_killed_and_restarted_resume_to_the_uninterrupted_weights(accumulated, tmp_path):
    checkpoints = tmp_path / "checkpoints"
    args = [*ACCUMULATION_ARGS, "--checkpoint-dir", checkpoints, "--step-seconds", 0.3,
            "--weights-out", tmp_path / "resumed"]  # fmt: skip
    # Killed once the chief has saved update 3 (after batch 6 of epoch 1): wherever the kill lands,
    # within a group or between two, the restart goes back to a group boundary.
    killed = launch(JOB, 2, args=args, cwd=ROOT, timeout=240, kill_worker=1, kill_when=r"saved: step 3 ")
    assert not killed.ok and killed.returncodes[1] == -9, killed.summary()
    epoch, batch = resume_point(checkpoints)
    assert batch % 2 == 0 or batch == 0  # only whole groups are ever saved
    last_saved = epoch * 4 + batch // 2  # in updates

    restarted = launch(JOB, 2, args=args, cwd=ROOT, timeout=240, stream=False)

    assert restarted.ok, restarted.summary() + "\n" + "\n".join(restarted.workers[0].log_tail)
    for reported in restarted.results:
        assert tuple(reported["resumed_from"]) == (epoch, batch)
        assert reported["steps_trained"] == 8 - last_saved >= 1
    whole = _weights(accumulated["folder"] / "workers", 0)
    assert _max_difference(_weights(tmp_path / "resumed", 0), whole) == 0.0  # measured: bit-identical
    assert _max_difference(_weights(tmp_path / "resumed", 1), whole) == 0.0
    _assert_nothing_left(killed)
    _assert_nothing_left(restarted)


def test_the_stream_shows_the_learners_lines_once_and_nothing_after_a_kill_on_purpose(capsys):
    from types import SimpleNamespace

    lost = [
        "Additional GRPC error information from remote target /job:worker/replica:0/task:1 while calling "
        "/tensorflow.WorkerService/RecvBuf:",
        ':UNKNOWN:Error received from peer  {grpc_status:14, grpc_message:"Socket closed"}',
    ]
    lines = [
        "step 0: loss 2.3", "\t [[{{node sgd/CollectiveReduceV2}}]] [Op:__inference_f_238]",
        "DeadlineExceededError: {{function_node __inference_f_238}} Collective has timed out.",
        *lost, *lost, "saved: step 3 (epoch 1)", "Traceback (most recent call last):", '  File "x.py"',
    ]  # fmt: skip
    cluster = LocalCluster([sys.executable, "-c", "pass"], 2, kill_worker=1, kill_when="saved: step 3 ")
    cluster._read(0, SimpleNamespace(stdout=iter(line + "\n" for line in lines)))  # no process to kill
    shown = [line.removeprefix("[worker 0] ") for line in capsys.readouterr().out.splitlines()]
    # Lesson 15: the node and op lines go, the graph function's name leaves the error, gRPC's report of a
    # lost peer (once per pending call) shows once; lesson 10: after the kill, a traceback cut anywhere
    # by the launcher's stop is timing, never shown. The tail keeps every line.
    assert shown == ["step 0: loss 2.3", "DeadlineExceededError: Collective has timed out.", *lost,
                     "saved: step 3 (epoch 1)"]  # fmt: skip
    assert cluster.tail(0) == lines
