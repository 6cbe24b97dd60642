"""`doctor` on worker scripts as a user runs it: the text read, the job run watched, findings with fixes."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from mgtutor.training import doctor as doctoring
from mgtutor.training.proctree import processes_in_group
from mgtutor.training.stacks import place_of
from tests.conftest import ROOT, child_env

HERE = ROOT / "tests" / "unit" / "training"
SEEDED = HERE / "seeded_bug_worker.py"
# Seconds a job may take here before doctor stops it: far beyond the seeded job's (about 30 s on a busy
# 2-core machine); without a collective timeout its chief would wait forever.
TIMEOUT, HANG_AFTER = 240.0, 60.0


def names_and_words(diagnosis) -> list[tuple[str, str]]:
    return [(c.name, "ok" if c.ok else "WARN" if c.warning else "FAIL") for c in diagnosis.checks]


def test_reading_the_seeded_worker_names_the_branch_and_its_collective():
    diagnosis = doctoring.doctor(SEEDED, run=False, verbose=False)
    lines = SEEDED.read_text().splitlines()
    branch = next(c for c in diagnosis.checks if c.name.startswith("branch at"))
    line = int(branch.name.rsplit(":", 1)[1])
    assert lines[line - 1].startswith("if trainer.is_chief:") and not branch.ok
    assert "`evaluate`" in branch.detail and "fix" not in branch.detail and "on every worker" in branch.fix
    assert ("collective timeout", "WARN") in names_and_words(diagnosis)  # a warning, not a failure
    assert ("Keras fit under MultiWorkerMirroredStrategy", "ok") in names_and_words(diagnosis)
    assert diagnosis.ok is False and diagnosis.run is None and diagnosis.places == ()


def test_a_clean_script_with_a_timeout_reads_ok(tmp_path):
    script = tmp_path / "clean.py"
    script.write_text("from mgtutor import multi_worker_strategy\n\nstrategy = multi_worker_strategy(600)\n")
    diagnosis = doctoring.doctor(script, run=False, verbose=False)
    assert diagnosis.ok and all(check.ok for check in diagnosis.checks)


def test_keras_fit_under_a_multi_worker_strategy_fails_with_the_issue(tmp_path):
    script = tmp_path / "fit.py"
    script.write_text(textwrap.dedent("""
        import tensorflow as tf
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
        model.compile("sgd", "mse")
        model.fit(x, y)
    """))  # fmt: skip
    check = next(c for c in doctoring.doctor(script, run=False, verbose=False).checks if "fit" in c.name)
    assert not check.ok and "line 5" in check.detail and "keras#20585" in check.detail
    assert "Trainer" in check.fix


@pytest.mark.parametrize(("arguments", "message"), [
    ({"script": "no_such_worker.py"}, "no worker script"),
    ({"workers": 0}, "workers must be a whole number >= 1"),
    ({"timeout": -1}, "timeout must be a number of seconds > 0"),
    ({"hang_after": float("nan")}, "hang_after must be a number of seconds > 0"),
    ({"args": "--epochs 1"}, "args must be a list"),
])  # fmt: skip
def test_bad_arguments_are_refused_before_anything_runs(arguments, message):
    arguments = {"script": SEEDED, "run": False, "verbose": False, **arguments}
    with pytest.raises((ValueError, TypeError, FileNotFoundError), match=message):
        doctoring.doctor(**arguments)


def test_the_command_line_reads_only_with_no_run_and_exits_1_on_a_failure():
    done = subprocess.run([sys.executable, "-m", "mgtutor", "doctor", str(SEEDED), "--no-run", "--", "x"],
                          capture_output=True, text=True, env=child_env(), timeout=60)  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "doctor: seeded_bug_worker.py (read only)" in done.stdout
    assert "FAIL  branch at seeded_bug_worker.py:" in done.stdout and "      fix: " in done.stdout
    usage = subprocess.run([sys.executable, "-m", "mgtutor"], capture_output=True, text=True, env=child_env())
    assert usage.returncode == 2 and "doctor" in usage.stderr


# --------------------------------------------------------------------------- reading a worker's output


def test_a_stack_dump_gives_the_innermost_frame_in_the_scripts_folder(tmp_path):
    (tmp_path / "job.py").write_text("import time\n\nx = 1\nfinish()\n")
    (tmp_path / "helpers.py").write_text("def finish():\n    while True:\n        time.sleep(0.1)\n")
    tail = [
        "worker 1 step 7: loss 2.31",
        "Timeout (0:00:03)!",
        "Thread 0x00007f1e5a006b80 (most recent call first):",
        f'  File "{tmp_path}/helpers.py", line 3 in finish',
        f'  File "{tmp_path}/job.py", line 4 in <module>',
    ]
    place = place_of(1, "running (stopped by doctor)", tail, tmp_path)
    assert (place.line, place.code, place.error) == (3, "time.sleep(0.1)", "")
    assert place.where() == "helpers.py:3: time.sleep(0.1)"


def test_a_traceback_gives_the_scripts_last_frame_and_the_error(tmp_path):
    (tmp_path / "job.py").write_text("a = 1\nb = 2\nstep(x)\n")
    tail = [
        "Traceback (most recent call last):",
        f'  File "{tmp_path}/job.py", line 3, in <module>',
        "    step(x)",
        '  File "/site-packages/tensorflow/python/eager/execute.py", line 53, in quick_execute',
        "tensorflow.python.framework.errors_impl.DeadlineExceededError: {{function_node __inference_238}} "
        "Collective has timed out during execution.",
        "\t [[{{node sgd/CollectiveReduceV2}}]]",
    ]
    place = place_of(0, "exit 1", tail, tmp_path)
    assert (place.line, place.code) == (3, "step(x)")
    assert place.error == "DeadlineExceededError: Collective has timed out during execution."


def test_output_without_a_stack_has_no_place(tmp_path):
    place = place_of(0, "exit 0", ["step 1", "done"], tmp_path)
    assert place.line is None and place.where() == "no frame of the script's files in its output"


def test_watched_runs_the_script_as_python_would_and_prints_its_stack_on_sigusr1():
    command = [sys.executable, "-m", "mgtutor.training.watched", str(HERE / "watched_child.py")]
    report = json.loads(subprocess.run([*command, "report"], capture_output=True, text=True, env=child_env(),
                                       timeout=60, check=True).stdout.splitlines()[0])  # fmt: skip
    assert report == {"argv": [str(HERE / "watched_child.py"), "report"], "name": "__main__",
                      "path0": str(HERE)}  # fmt: skip
    if not hasattr(signal, "SIGUSR1"):
        pytest.skip("no SIGUSR1 here: watched prints the stack on a timer instead (MGTUTOR_STACK_AFTER)")
    proc = subprocess.Popen([*command, "sleep"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=child_env())  # fmt: skip
    lines: list[str] = []
    try:
        assert proc.stdout.readline() and proc.stdout.readline().strip() == "waiting"
        reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
        reader.start()
        os.kill(proc.pid, signal.SIGUSR1)
        deadline = time.monotonic() + 30  # the dump comes at once; a busy machine may be slow to run it
        while time.monotonic() < deadline and not any("in wait_here" in line for line in lines):
            time.sleep(0.1)
    finally:
        proc.kill()
        proc.wait(timeout=30)
    output = "".join(lines)
    # The signal may land just after "waiting" is printed and before the sleep starts: line 16 or 17.
    innermost_first = (r'watched_child\.py", line 1[67] in wait_here\n'
                       r'.*watched_child\.py", line 22 in <module>')  # fmt: skip
    assert re.search(innermost_first, output, re.S), output  # wait_here, then the line that called it


# --------------------------------------------------------------------------- running it (slow)


@pytest.mark.slow
def test_doctor_runs_the_seeded_worker_and_says_where_each_worker_was():
    # As a new user would: the seeded worker as written, on 2 workers. The chief evaluates alone and
    # waits for workers that ended: doctor stops it and reads its place from its output.
    started = time.monotonic()
    diagnosis = doctoring.doctor(SEEDED, workers=2, timeout=TIMEOUT, hang_after=HANG_AFTER, verbose=False)
    assert time.monotonic() - started < TIMEOUT + 30
    lines = SEEDED.read_text().splitlines()
    chief, other = diagnosis.places
    assert chief.status != "exit 0" and "trainer.evaluate(" in lines[chief.line - 1]
    assert other.status == "exit 0"
    (job,) = [c for c in diagnosis.checks if c.name == "the job on 2 workers"]
    assert not job.ok
    (worker_0,) = [c for c in diagnosis.checks if c.name == "worker 0"]
    assert f"seeded_bug_worker.py:{chief.line}" in worker_0.detail
    assert "(in the branch at line" in worker_0.detail
    for pid in diagnosis.run.pids:  # nothing left behind
        assert processes_in_group(pid) == []
