"""mgtutor.classroom.runner, the main job's runner, on small notebooks that need no TensorFlow."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from html import escape
from html.parser import HTMLParser
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from mgtutor.classroom import lessons, runner
from mgtutor.support.records import MIME_TYPE
from tests.conftest import ROOT

# A 1x1 PNG: the HTML rendering must embed images (the series' plots) in the page itself.
TINY_PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="


def _notebook(path, parameters: str, body: str) -> None:
    params = new_code_cell(parameters)
    params.metadata["tags"] = ["parameters"]
    nb = new_notebook(cells=[params, new_code_cell(body)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)


@pytest.fixture
def tiny_series(tmp_path):
    folder = tmp_path / "notebooks"
    folder.mkdir()
    _notebook(folder / "00_first.ipynb", "EPOCHS = 3\nRATE = 0.5",
              "import base64\nfrom IPython.display import Image, display\nfrom mgtutor import record\n"
              f"display(Image(data=base64.b64decode('{TINY_PNG}')))\n"
              "record('epochs_seen', EPOCHS * 2)\nrecord('accuracy', 2 / 3)\n"
              "record('history', list(range(1000)))")  # fmt: skip
    # TensorFlow's C++ logging writes to fd 2 from its first import: the kernel filters it from the start.
    _notebook(folder / "01_second.ipynb", "EPOCHS = 3\nNAME = 'x'",
              "import os, time\nfrom mgtutor import record\nrecord('name_seen', NAME)\n"
              "os.write(2, b'I0000 00:00:1.0 1 port.cc:153] oneDNN custom operations are on.\\n')\n"
              "os.write(2, b'kept on stderr\\n')\ntime.sleep(0.5)  # time to reach the notebook\n"
              "print('the lesson')")  # fmt: skip
    return folder


class _Table(HTMLParser):
    """index.html's table as {row id: [cell texts]}, plus every link target."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[str, list[str]] = {}
        self.links: list[str] = []
        self._row: str | None = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "tr" and attrs.get("id"):
            self._row = attrs["id"]
            self.rows[self._row] = []
        elif tag == "td" and self._row:
            self.rows[self._row].append("")
        elif tag == "a":
            self.links.append(attrs["href"])

    def handle_endtag(self, tag):
        if tag == "tr":
            self._row = None

    def handle_data(self, data):
        if self._row and self.rows[self._row]:
            self.rows[self._row][-1] += data


def _index(run_dir: Path) -> _Table:
    table = _Table()
    table.feed((run_dir / "index.html").read_text(encoding="utf-8"))
    return table


def test_runs_in_order_with_overrides_and_records(tiny_series, tmp_path, capfd, monkeypatch):
    monkeypatch.setattr(runner, "PROGRESS_LINE_SECONDS", 0)  # a progress line for every cell
    # Under pytest ipykernel leaves fd 2 alone (its output would reach no notebook): run as `make run` does.
    monkeypatch.delenv("PYTEST_CURRENT_TEST")
    name = "<y & 'z'>"
    run_dir = runner.run_series(tiny_series, tmp_path / "runs", {"EPOCHS": 5, "NAME": name})
    summary = json.loads((run_dir / "summary.json").read_text())
    entries = summary["notebooks"]
    assert [e["notebook"] for e in entries] == ["00_first.ipynb", "01_second.ipynb"]
    assert entries[0]["records"] == {"epochs_seen": 10, "accuracy": 2 / 3, "history": list(range(1000))}
    assert entries[1]["records"] == {"name_seen": name} and entries[1]["parameters"] == {
        "EPOCHS": 5, "NAME": name,
    }  # fmt: skip
    assert all(e["status"] == "ok" and e["seconds"] > 0 for e in entries)
    assert (run_dir / "01_second.ipynb").exists()
    out, err = capfd.readouterr()  # the kernels' own stderr too: they write to this process's fd 2
    assert "[1/2] 00_first.ipynb" in out and "[2/2] 01_second.ipynb" in out
    # Not a terminal here: papermill's per-cell progress arrives as plain lines (3 cells per notebook).
    assert re.search(r"^    3/3 cells done, \d\d:\d\d in this notebook$", out, re.MULTILINE), out
    # Only the runner's lines: no "Kernel is running over TCP without encryption" per kernel.
    own = re.compile(
        r"\[\d/2\] 0\d_\w+\.ipynb.*|    (\d/3 cells done,|done in) .*|All 2 notebooks ran in .*|Report: .*"
    )
    assert [line for line in out.splitlines() if not own.fullmatch(line)] == []
    assert "Kernel is running over TCP" not in err and "oneDNN" not in err, err
    # In the notebook: what the lesson printed, the stderr line that is not TensorFlow's, no log line.
    body = nbformat.read(run_dir / "01_second.ipynb", as_version=4).cells[-1]
    streams = [(out.name, out.text) for out in body.outputs if out.output_type == "stream"]
    assert streams == [("stderr", "kept on stderr\n"), ("stdout", "the lesson\n")]

    page = (run_dir / "index.html").read_text(encoding="utf-8")
    table = _index(run_dir)
    first, second = table.rows["00_first.ipynb"], table.rows["01_second.ipynb"]
    assert first[1] == second[1] == "ok"
    assert "EPOCHS = 5 (default 3)" in first[2] and "RATE = 0.5" in first[2]
    assert "RATE = 0.5 (default" not in first[2]  # only overrides are marked
    assert page.count('class="override"') == 3  # EPOCHS twice, NAME once
    assert re.fullmatch(r"\d+\.\d s", first[3]) and re.fullmatch(r"\d+\.\d s", second[3])
    assert "epochs_seen" not in page and first[6] == ""  # raw records stay in summary.json
    assert all(float(first[column]) > 30 for column in (4, 5))  # peak MB, kernel MB at the end
    assert f"NAME = {name!r}" in second[2]  # escaped on the page, read back as it was given
    assert "<y &" not in page and "&lt;y &amp; &#x27;z&#x27;&gt;" in page  # escaped
    assert "<script" not in page and "http" not in page.replace('lang="en"', "")  # self-contained
    assert "Command-line overrides: EPOCHS = 5, NAME = " in re.sub(r"<[^>]+>", "", page)
    assert f"{os.cpu_count()} cores" in page
    for link in table.links:
        assert (run_dir / link).is_file(), link
    assert {"00_first.html", "00_first.ipynb", "01_second.html", "summary.json"} <= set(table.links)
    rendered = (run_dir / "00_first.html").read_text(encoding="utf-8")
    assert f"data:image/png;base64,{TINY_PNG}" in rendered
    # Records are kept in the notebook with nothing to show, and left out of the page.
    executed = nbformat.read(run_dir / "00_first.ipynb", as_version=4)
    kept = [out for out in executed.cells[-1].outputs if MIME_TYPE in out.get("data", {})]
    assert [out.data["text/plain"] for out in kept] == ["", "", ""]
    assert "<pre></pre>" not in rendered and "recorded epochs_seen" not in rendered


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"EPOCH": 5}, "'EPOCH' is not in any notebook's parameters cell"),
        ({"EPOCHS": "five"}, "EPOCHS='five' does not fit 00_first.ipynb"),
        ({"RATE": True}, "RATE=True does not fit"),
    ],
)
def test_bad_override_is_refused_before_anything_runs(tiny_series, tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        runner.run_series(tiny_series, tmp_path / "runs", overrides)
    assert not (tmp_path / "runs").exists()


def test_bad_override_on_the_command_line_exits_2_listing_known_names(tiny_series, tmp_path, capsys):
    with pytest.raises(SystemExit) as stopped:
        runner.main(["--notebooks", str(tiny_series), "--runs", str(tmp_path / "runs"), "-p", "EPOCH", "5"])
    assert stopped.value.code == 2
    assert "known: ['EPOCHS', 'NAME', 'RATE']" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_a_preset_applies_below_the_command_line_and_is_recorded(tiny_series, tmp_path, monkeypatch):
    from mgtutor.classroom import presets

    monkeypatch.setitem(presets.PRESETS, "tiny", {"00_first": {"EPOCHS": (7, "a"), "RATE": (0.25, "b")},
                                                  "01_second": {"NAME": ("preset", "c")}})  # fmt: skip
    run_dir = runner.run_series(tiny_series, tmp_path / "runs", {"EPOCHS": 5}, preset="tiny")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["preset"] == "tiny" and summary["overrides"] == {"EPOCHS": 5}
    first, second = summary["notebooks"]
    assert first["parameters"] == {"EPOCHS": 5, "RATE": 0.25} and first["records"]["epochs_seen"] == 10
    assert second["parameters"] == {"EPOCHS": 5, "NAME": "preset"}
    assert second["records"] == {"name_seen": "preset"}
    header = re.sub(r"<[^>]+>", "", (run_dir / "index.html").read_text(encoding="utf-8")).split("Machine:")[0]
    assert "· total " in header and "· preset tiny\n · 2 ok" in header


def test_an_unknown_preset_is_refused_before_anything_runs_naming_the_known(tiny_series, tmp_path, capsys):
    with pytest.raises(SystemExit) as stopped:
        runner.main(["--notebooks", str(tiny_series), "--runs", str(tmp_path / "runs"),
                     "--preset", "low-memroy"])  # fmt: skip
    assert stopped.value.code == 2
    assert "PRESET='low-memroy' is not a preset; known: low-memory" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_failing_notebook_stops_the_run_and_keeps_what_completed(tiny_series, tmp_path, capsys):
    _notebook(tiny_series / "01_second.ipynb", "EPOCHS = 3", "raise RuntimeError('boom')")
    _notebook(tiny_series / "02_third.ipynb", "EPOCHS = 3", "pass")
    with pytest.raises(SystemExit) as stopped:
        runner.run_series(tiny_series, tmp_path / "runs", {})
    assert stopped.value.code == 1
    (run_dir,) = (tmp_path / "runs").iterdir()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert [e["status"] for e in summary["notebooks"]] == ["ok", "failed"]
    assert "RuntimeError: boom" in summary["notebooks"][1]["error"]
    assert not (run_dir / "02_third.ipynb").exists()

    # In [1] is the parameters cell, In [2] the failing one (no overrides: papermill injects no cell).
    err = capsys.readouterr().err
    assert "FAILED 01_second.ipynb" in err and "cell In [2]: RuntimeError: boom" in err
    assert str(run_dir / "01_second.ipynb") in err and str(run_dir / "01_second.html") in err
    assert "RuntimeError" in (run_dir / "01_second.html").read_text(encoding="utf-8")
    table = _index(run_dir)
    assert [cells[1] for cells in table.rows.values()] == ["ok", "failed", "not run"]
    assert "cell In [2]: RuntimeError: boom" in table.rows["01_second.ipynb"][6]
    assert table.rows["02_third.ipynb"][3] == ""  # no duration for what never ran
    assert "02_third" not in " ".join(table.links)
    assert all((run_dir / link).is_file() for link in table.links)


@pytest.mark.slow  # a kernel: 6 s; make test's 3 minutes: in make test-all
def test_a_hung_cell_is_stopped_at_the_cell_timeout_and_reported(tiny_series, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(runner, "CELL_TIMEOUT_SECONDS", 3)
    _notebook(tiny_series / "01_second.ipynb", "EPOCHS = 3", "import time\ntime.sleep(600)  # a deadlock")
    started = time.monotonic()
    with pytest.raises(SystemExit) as stopped:
        runner.run_series(tiny_series, tmp_path / "runs", {})
    assert stopped.value.code == 1
    assert time.monotonic() - started < 120  # stopped at the timeout, not after the 600 s sleep
    (run_dir,) = (tmp_path / "runs").iterdir()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert [e["status"] for e in summary["notebooks"]] == ["ok", "failed"]
    assert "3 seconds" in summary["notebooks"][1]["error"], summary["notebooks"][1]["error"]


def test_command_line_without_notebooks_stops():
    with pytest.raises(SystemExit) as stopped:
        runner.main(["--notebooks", "/nonexistent"])
    assert stopped.value.code == 2


# --------------------------------------------------------------------------- the Makefile


def _make(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """`make` in the repository, using this interpreter's environment and never reinstalling it."""
    if shutil.which("make") is None:
        pytest.skip("GNU make is not installed: apt-get install -y make")
    venv = Path(sys.prefix)
    # A parent `make test` passes its own command-line variables down through MAKEFLAGS.
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    return subprocess.run(
        ["make", "--no-print-directory", "-o", str(venv / ".mgtutor-installed"), f"VENV={venv}", *args],
        cwd=ROOT, capture_output=True, text=True, env=env, timeout=timeout,
    )  # fmt: skip


def _runner_parameters(dry_run: str) -> dict[str, str]:
    """The -p NAME VALUE pairs the shell would hand the runner, from `make -n run`'s command."""
    command = next(c for c in dry_run.replace("\\\n", " ").splitlines() if "mgtutor.classroom.runner" in c)
    words = shlex.split(command)
    return {words[i + 1]: words[i + 2] for i, word in enumerate(words) if word == "-p"}


def test_make_run_turns_command_line_variables_into_parameters():
    plain = _make("-n", "run", "EPOCHS=5", "N_DEVICES=4")
    assert plain.returncode == 0, plain.stderr
    assert "-p EPOCHS 5 -p N_DEVICES 4" in plain.stdout

    tricky = 'it\'s "quoted" & $HOME; two  spaces'
    result = _make("-n", "run", f"NAME={tricky}", "DATASET=mnist", "PORT=9999", "lower=1",
                   "RUN_ARGS=-p SEED 7")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert _runner_parameters(result.stdout) == {"NAME": tricky, "DATASET": "mnist", "SEED": "7"}
    assert "ignoring lower: notebook parameters are ALL_CAPS" in result.stderr
    preset = _make("-n", "run", "PRESET=low-memory", "EPOCHS=5")  # the Makefile's own variable, not a -p
    assert "--preset low-memory" in preset.stdout and _runner_parameters(preset.stdout) == {"EPOCHS": "5"}


def test_the_series_budgets_the_capstone_unless_told_otherwise():
    lessons_found = {nb: lessons.notebook_parameters(nb) for nb in lessons.find_notebooks(ROOT / "notebooks")}
    series = runner.SERIES_DEFAULTS
    assert series["MINUTES"] == 1.0 and series["LINK_RATES"] == ["100mbit"]  # 17's sweep at one shaped rate
    rest = {name: value for name, value in series.items() if name not in ("MINUTES", "XLA")}  # whole: 4 race
    assert runner.series_overrides({"EPOCHS": 1}, lessons_found) == {**series, "EPOCHS": 1}
    assert runner.series_overrides({"MINUTES": None}, lessons_found) == {**rest, "MINUTES": None}  # whole
    without = {nb: params for nb, params in lessons_found.items() if not set(series) & set(params)}
    assert runner.series_overrides({}, without) == {}  # a series without the capstone is not refused
    plan = lessons.check_overrides(runner.series_overrides({}, lessons_found), lessons_found)
    changed = {nb.stem: p for nb, p in plan.items() if p}
    assert changed["16_capstone"] == {"MINUTES": 1.0, "XLA": False}  # the race in its minute: no compiles
    assert changed["17_to_a_cluster"] == {"LINK_RATES": ["100mbit"], "SLURM": False}
    assert changed["08_scaling_study"] == {"REPEATS": 2, "BENCH_STEPS": 5, "STUDY_SAMPLES": 512}
    # each name is one lesson's, or the same thing in each lesson that has it: timed repeats and steps
    users = {name: sorted(stem[:2] for stem, p in changed.items() if name in p) for name in series}
    assert users == {"MINUTES": ["16"], "LINK_RATES": ["17"], "SLURM": ["17"],
                     "REPEATS": ["08", "13", "14", "18"], "SPEED_REPEATS": ["05", "11"],
                     "BENCH_STEPS": ["08", "14"], "STUDY_SAMPLES": ["08"], "XLA": ["16"]}
    # what make run passes and its report marks as an override: not a series default that is 14's own
    sized, _ = runner._sized_plan(lessons_found, {}, preflight=False, recipe=None, preset=None)
    sized = {nb.stem: p for nb, p in sized.items()}
    assert lessons_found[ROOT / "notebooks" / "14_pinned_workers.ipynb"]["BENCH_STEPS"] == 5
    assert "BENCH_STEPS" not in sized["14_pinned_workers"] and sized["08_scaling_study"]["BENCH_STEPS"] == 5
    told, _ = runner._sized_plan(lessons_found, {"BENCH_STEPS": 5}, preflight=False, recipe=None, preset=None)
    assert told[ROOT / "notebooks" / "14_pinned_workers.ipynb"]["BENCH_STEPS"] == 5  # asked for: kept


def test_make_capstone_runs_it_whole_unless_given_a_budget():
    alone = _make("-n", "capstone", "EPOCHS=8")
    assert alone.returncode == 0, alone.stderr
    assert _runner_parameters(alone.stdout) == {"EPOCHS": "8", "MINUTES": "None"}
    assert "--only 16" in alone.stdout
    assert _runner_parameters(_make("-n", "capstone", "MINUTES=5").stdout) == {"MINUTES": "5"}


@pytest.mark.slow
def test_make_run_end_to_end_and_refuses_a_bad_value(tiny_series, tmp_path):
    name = "a b 'c' \"d\""
    # make check's list comes first, its timed steps too: over 120 s on an AVX2-only CPU under test-all's load
    done = _make("run", f"NOTEBOOKS={tiny_series}", f"RUNS={tmp_path / 'runs'}", f"NAME={name}", "EPOCHS=5",
                 "RUN_ARGS=--only 01", timeout=900)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    (run_dir,) = (tmp_path / "runs").iterdir()
    (entry,) = json.loads((run_dir / "summary.json").read_text())["notebooks"]
    assert entry["parameters"] == {"EPOCHS": 5, "NAME": name} and entry["records"] == {"name_seen": name}
    assert (run_dir / "index.html").is_file() and (run_dir / "01_second.html").is_file()
    # make check's list heads the console output, the summary and the page (a FAIL would not stop the run)
    checks = json.loads((run_dir / "summary.json").read_text())["preflight"]
    names = ["python", "tensorflow", "keras", "jax", "package", "cpu", "2-device smoke step", "run time",
             "2-device JAX smoke step"]  # fmt: skip
    assert [c["name"] for c in checks][: len(names)] == names
    assert "capstone arithmetic" not in [c["name"] for c in checks]  # lesson 16 times it in the same run
    assert json.loads((run_dir / "summary.json").read_text())["estimate_seconds"] > 0  # the run-time line
    assert json.loads((run_dir / "summary.json").read_text())["only"] == ["01"]  # memory_need skips it
    assert "Preflight (make check):" in done.stdout and "2-device smoke step" in done.stdout
    page = (run_dir / "index.html").read_text()
    assert "<h2>Preflight</h2>" in page and "2-device smoke step" in page
    # Memory of the kernel and its children: more than a bare Python, and the peak bounds the end.
    assert 30 < entry["end_rss_mb"] <= entry["peak_rss_mb"] < 4096
    assert "<th>peak MB</th>" in page

    refused = _make("run", f"NOTEBOOKS={tiny_series}", f"RUNS={tmp_path / 'refused'}", "EPOCHS=five")
    assert refused.returncode != 0
    assert "EPOCHS='five' does not fit 00_first.ipynb" in refused.stderr
    assert not (tmp_path / "refused").exists()


@pytest.mark.slow
def test_make_run_runs_a_tensorflow_lesson_then_a_jax_lesson(tmp_path):
    # Lesson 12 sets KERAS_BACKEND=jax in its kernel; each notebook's own kernel keeps that from the next.
    folder = tmp_path / "notebooks"
    folder.mkdir()
    lesson = ("from mgtutor import record, setup_devices\ndevices = setup_devices(N_DEVICES{})\n"
              "import keras\nrecord('backend', keras.config.backend())\nrecord('devices', len(devices))\n"
              "record('sum', float(keras.ops.sum(keras.ops.ones((N_DEVICES,)))))")  # fmt: skip
    _notebook(folder / "01_tf.ipynb", "N_DEVICES = 2", lesson.format(""))
    _notebook(folder / "02_jax.ipynb", "N_DEVICES = 3", lesson.format(", backend='jax'"))
    _notebook(folder / "03_tf_again.ipynb", "N_DEVICES = 2", lesson.format(""))
    done = _make("run", f"NOTEBOOKS={folder}", f"RUNS={tmp_path / 'runs'}", "RUN_ARGS=--no-preflight")
    assert done.returncode == 0, done.stdout + done.stderr
    (run_dir,) = (tmp_path / "runs").iterdir()
    entries = json.loads((run_dir / "summary.json").read_text())["notebooks"]
    assert [e["records"] for e in entries] == [
        {"backend": "tensorflow", "devices": 2, "sum": 2.0},
        {"backend": "jax", "devices": 3, "sum": 3.0},
        {"backend": "tensorflow", "devices": 2, "sum": 2.0},
    ]


@pytest.mark.slow
def test_make_lab_opens_the_notebooks_with_the_python3_kernel():
    """`make lab` starts Jupyter from the venv; "python3" is the kernel Jupyter runs with its own Python."""
    kernels = {nb.name: json.loads(nb.read_text())["metadata"]["kernelspec"]["name"] for nb in
               lessons.find_notebooks(ROOT / "notebooks")}  # fmt: skip
    assert set(kernels.values()) == {"python3"}, kernels
    lab = _make("-n", "lab", "PORT=8899")
    assert lab.returncode == 0, lab.stderr
    assert f"{sys.prefix}/bin/python -m jupyter lab --ServerApp.root_dir=notebooks" in lab.stdout
    assert "--port=8899" in lab.stdout


@pytest.mark.slow
def test_the_reference_step_again_after_a_run_sits_beside_the_first():
    """make run's estimate assumed the preflight's step speed throughout; the step timed after the last
    notebook, and its ratio to the first, say whether the machine kept it. The page shows the line."""
    again = runner._reference_again(1000.0)["reference_end"]
    after = again["images_per_s"]
    assert 10 < after < 100_000  # lesson 02's CNN at batch 64 on one device, any CPU the series runs on
    assert f"1,000 images/s before the run, {after:,.0f} after it ({after / 1000:.2f}x)" in again["said"]
    report = {"started": "2026-11-29T23:00:00", "status": "complete", "command": "make run", "overrides": {},
              "machine": {"hostname": "h", "cpu_count": 2, "tensorflow": "2.21.0", "keras": "3.15.1",
                          "python": "3.11"}, "notebooks": [], "seconds": 1.0, "reference_end": again}
    assert escape(again["said"]) in runner.index_html(report)
