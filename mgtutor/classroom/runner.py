"""`make run`: every ``NN_topic.ipynb`` executed in order with papermill into ``runs/<timestamp>/``.

Each notebook gets its own kernel; ``index.html`` (for a teacher) and ``summary.json`` are kept up to date.
Overrides and each lesson's limits (`lessons`, `limits`) are checked before anything runs; a failure stops it.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

from mgtutor.classroom.lessons import check_overrides, find_notebooks, notebook_parameters, parse_value
from mgtutor.classroom.presets import NONE, SLOW_LAPTOP, apply_preset
from mgtutor.classroom.run_page import FAILED, NOT_RUN, OK, RUNNING, duration, estimated_for, index_html
from mgtutor.support.files import atomic_write
from mgtutor.support.records import MIME_TYPE, read_records
from mgtutor.support.system import machine as _machine

# Without a terminal, a progress line at most this often: one per slow cell, none for quick ones.
PROGRESS_LINE_SECONDS = 2.0
# Each kernel: none of its own log lines on the runner's terminal ("Kernel is running over TCP
# without encryption" at start; at times "KeyboardInterrupt caught in kernel" at the end, as
# jupyter_client interrupts every kernel it shuts down), and TensorFlow quieted before the
# notebook's first cell imports it. A notebook's failures still reach the report through papermill.
KERNEL_ARGUMENTS = (
    "--IPKernelApp.log_level=CRITICAL",
    "--IPKernelApp.exec_lines=import mgtutor.support.tflog as _tflog; _tflog.quiet_tensorflow(); del _tflog",
)
# What the series runs with unless told otherwise, for the lessons that have the parameter (each name is
# one lesson's, or means the same in each): the classroom defaults. They leave the 15-minute slot room for
# every lesson on the reference CPU (`estimate`); a slower laptop gets the slow-laptop preset above them.
SERIES_DEFAULTS = {
    # The capstone (16) trains its whole recipe by default, about 20 minutes; in the series a budget of
    # minutes, timing its arithmetic included (`make run MINUTES=None` trains it whole; `make capstone` does).
    "MINUTES": 1.0,
    # ... and its race of arithmetic inside that budget times float32 against bfloat16 without XLA, whose
    # compiles took most of the minute and left little to train. Without a budget (MINUTES=None: `make
    # capstone`, `make capstone-long`) the lesson races all four (`series_overrides`).
    "XLA": False,
    # Lesson 17's link sweep at one shaped rate (its own default adds the link unshaped: about 20 s more).
    "LINK_RATES": ["100mbit"],
    # Lesson 17's Slurm cluster needs root to start (most classroom laptops skip it whatever SLURM says):
    # the lesson prints the commands that run it; `make run SLURM=True` runs it where it can.
    "SLURM": False,
    # Timed blocks in 08, 13 and 14, speed repeats in 05 and 11: the fewest that give a spread (each
    # lesson's limit); the lessons' own defaults time more, for a tighter spread.
    "REPEATS": 2,
    "SPEED_REPEATS": 2,
    # Lesson 08's steps a timed block (14's default already): a warm step's rate needs no more.
    "BENCH_STEPS": 5,
    # Lesson 08's scaling study (strong and weak): half its images still time every device count.
    "STUDY_SAMPLES": 512,
}
# `make capstone-long` (--capstone-long): lesson 16's recipe for the 90 % aim, over the notebook's defaults:
# airbench's widths and more epochs at full size, no budget of minutes. The command line's -p still win.
CAPSTONE_LONG = {"WIDTHS": [64, 256, 256], "EPOCHS": 14, "FULL_SIZE_EPOCHS": 10, "MINUTES": None}
# A cell still running after this long is stopped and the lesson reported failed: a deadlocked
# collective (TensorFlow's all-reduce can hang on logical CPU devices) must not hang a class forever.
# Generous: the longest cell at defaults takes minutes, not an hour.
CELL_TIMEOUT_SECONDS = 3600


def _without_records(nb: Any) -> Any:
    """`nb` without `record` outputs: nothing to see, but each would leave an empty box in the page."""
    for cell in nb.cells:
        if "outputs" in cell:
            cell.outputs = [
                out for out in cell.outputs
                if not (MIME_TYPE in out.get("data", {}) and not "".join(out["data"].get("text/plain", "")))
            ]  # fmt: skip
    return nb


def render_html(executed: str | os.PathLike, target: str | os.PathLike) -> Path:
    """Render an executed notebook to one HTML file (plots embedded), written atomically."""
    import nbformat
    from nbconvert import HTMLExporter

    nb = _without_records(nbformat.read(executed, as_version=4))
    body, _ = HTMLExporter(embed_images=True).from_notebook_node(nb)
    target = Path(target)
    with atomic_write(target, ".html") as temp:
        temp.write_text(body, encoding="utf-8")
    return target


# --------------------------------------------------------------------------- progress


class _LinePerUpdate:
    """A file for tqdm that turns its carriage-return redraws into plain lines, for CI logs."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.last = ""

    def write(self, text: str) -> None:
        line = text.replace("\r", "").strip()
        if line and line != self.last:
            self.stream.write(f"    {line}\n")
            self.last = line

    def flush(self) -> None:
        self.stream.flush()


def _progress_bar() -> dict[str, Any]:
    """papermill's per-cell tqdm options: a live bar on a terminal, occasional lines otherwise."""
    if sys.stderr.isatty():
        return {"desc": "    cells", "leave": False, "file": sys.stderr}
    return {
        "file": _LinePerUpdate(sys.stdout),
        "mininterval": PROGRESS_LINE_SECONDS,
        "delay": PROGRESS_LINE_SECONDS,  # no "0/N" line before anything ran
        "bar_format": "{n_fmt}/{total_fmt} cells done, {elapsed} in this notebook",
        "leave": False,
    }


# --------------------------------------------------------------------------- the run


def _new_run_dir(runs_dir: Path) -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    for suffix in ["", *(f"-{n}" for n in range(2, 100))]:
        candidate = runs_dir / f"{stamp}{suffix}"
        try:
            candidate.mkdir(parents=True)
            return candidate
        except FileExistsError:
            continue  # two runs started in the same second
    raise FileExistsError(f"cannot create a new run folder for {stamp} in {runs_dir}.")


def series_overrides(overrides: dict[str, Any], defaults: dict[Path, dict]) -> dict[str, Any]:
    """`overrides`, with `SERIES_DEFAULTS` first for the names some notebook has and `overrides` lacks."""
    kept = {name: value for name, value in SERIES_DEFAULTS.items()
            if any(name in params for params in defaults.values())}  # fmt: skip
    if overrides.get("MINUTES", kept.get("MINUTES")) is None:  # the capstone whole: XLA races too
        kept.pop("XLA", None)
    return {**kept, **overrides}


def _chosen(notebooks_dir: str | os.PathLike, only: Sequence[str]) -> list[Path]:
    """The series' notebooks, or those `only` names by prefix; refuses a prefix list that matches none."""
    notebooks = find_notebooks(notebooks_dir)
    if only:
        notebooks = [nb for nb in notebooks if any(nb.name.startswith(prefix) for prefix in only)]
        if not notebooks:
            raise ValueError(f"--only {list(only)} matches no notebook in {notebooks_dir}.")
    return notebooks


def run_series(
    notebooks_dir: str | os.PathLike,
    runs_dir: str | os.PathLike,
    overrides: dict[str, Any] | None = None,
    *,
    kernel_name: str = "python3",
    only: Sequence[str] = (),
    command: str | None = None,
    preflight: bool = False,
    recipe: str | None = None,
    preset: str | None = None,
) -> Path:
    """Execute the series into a new timestamped folder and return that folder.

    A failing notebook stops the run with ``SystemExit(1)`` after its executed
    copy, its HTML and the reports are written. `preflight` puts `make check`'s
    checklist first (a FAIL line is shown, it does not stop the run). `recipe` names the overrides'
    origin in the summary (``"capstone-long"``), for `run_tables`. `preset` (`presets.PRESETS`) adds its
    per-lesson overrides below `overrides`.
    """
    notebooks = _chosen(notebooks_dir, only)
    defaults = {nb: notebook_parameters(nb) for nb in notebooks}
    started = datetime.now().isoformat(timespec="seconds")
    plan, found = _sized_plan(defaults, overrides or {}, preflight=preflight, recipe=recipe, preset=preset)
    run_dir = _new_run_dir(Path(runs_dir))
    report: dict[str, Any] = {
        "started": started,
        "status": RUNNING,
        "command": command or "mgtutor.classroom.runner.run_series(...)",
        "overrides": dict(overrides or {}),
        **({"recipe": recipe} if recipe else {}),
        **({"preset": preset} if preset and preset != NONE else {}),
        **({"only": list(only)} if only else {}),  # a part of the series: not what the whole needs
        "machine": _machine(),
        "notebooks": [
            {"notebook": nb.name, "status": NOT_RUN, "parameters": plan[nb], "defaults": defaults[nb]}
            for nb in notebooks
        ],
        **found,
    }
    clock = time.perf_counter()
    for position, (notebook, entry) in enumerate(zip(notebooks, report["notebooks"], strict=True), start=1):
        target = run_dir / notebook.name
        with_overrides = f" with {plan[notebook]}" if plan[notebook] else ""
        print(f"[{position}/{len(notebooks)}] {notebook.name}{with_overrides}", flush=True)
        entry["status"] = RUNNING
        _write_reports(run_dir, report, time.perf_counter() - clock)
        started = time.perf_counter()
        try:
            entry.update(_execute(notebook, target, plan[notebook], kernel_name, run_dir))
        except KeyboardInterrupt:
            entry.update(status=FAILED, error="interrupted (Ctrl-C)")
            report["status"] = FAILED
            _write_reports(run_dir, report, time.perf_counter() - clock)
            raise
        entry["seconds"] = round(time.perf_counter() - started, 1)
        if target.exists():
            entry["ipynb"] = target.name
            entry["records"] = _records_or_empty(target)
            entry.update(_render_or_warn(target))
        if entry["status"] != OK:
            report["status"] = FAILED
            _write_reports(run_dir, report, time.perf_counter() - clock)
            _explain_failure(entry, run_dir)
            raise SystemExit(1)
        _write_reports(run_dir, report, time.perf_counter() - clock)
        print(f"    done in {duration(entry['seconds'])}", flush=True)
    report["status"] = "complete"
    seconds = time.perf_counter() - clock
    if "estimate_seconds" in report and not only:  # after the clock: the estimate's step again, for its miss
        report.update(_reference_again(report["reference_images_per_s"]))
    _write_reports(run_dir, report, seconds)
    _say_done(report, notebooks, seconds, run_dir)
    return run_dir


def _say_done(report: dict[str, Any], notebooks: Sequence[Path], seconds: float, run_dir: Path) -> None:
    took = duration(seconds)
    if "estimate_seconds" in report:  # what make check would have said, beside what it took
        took += f" (estimated {duration(report['estimate_seconds'])} {estimated_for(report)})"
    print(f"All {len(notebooks)} notebooks ran in {took}.")
    if "reference_end" in report:
        print(report["reference_end"]["said"])
    slot = _slot_line(notebooks, seconds)
    if slot:
        print(slot)
    print(f"Report: {run_dir / 'index.html'}")


def _reference_again(before: float) -> dict[str, Any]:
    """{"reference_end": the reference step timed again after the last notebook, beside the preflight's}:
    the estimate from the first assumed the machine kept that speed, which a shared or throttled machine may
    not. Nothing when the step fails or hangs: the run is complete either way."""
    import subprocess

    from mgtutor.classroom.preflight import smoke_child  # TF only in its child

    try:
        _, result = smoke_child("reference", timeout=300)
    except subprocess.TimeoutExpired:
        return {}
    if result is None:
        return {}
    after = round(result["reference_images_per_s"], 1)  # as recorded: the line and the record agree
    said = (f"The reference step: {before:,.0f} images/s before the run, {after:,.0f} after it "
            f"({after / before:.2f}x). The estimate assumed the first throughout: a ratio far from 1 means "
            "the machine's speed changed during the run, and the estimate's error with it.")
    return {"reference_end": {"images_per_s": after, "said": said}}


def _slot_line(notebooks: Sequence[Path], seconds: float) -> str | None:
    """Whether a run of the whole series fit the 15-minute slot (None for a part of it)."""
    from mgtutor.classroom.estimate import REFERENCE, SLOT_SECONDS

    if not {nb.name[:2] for nb in notebooks} >= set(REFERENCE["seconds"]):
        return None
    if seconds <= SLOT_SECONDS:
        return f"Within the {SLOT_SECONDS // 60}-minute slot: {duration(SLOT_SECONDS - seconds)} to spare."
    return (f"Past the {SLOT_SECONDS // 60}-minute slot by {duration(seconds - SLOT_SECONDS)}: "
            "docs/teachers.md, \"The slowest laptop in the room\", says what to do.")


def _execute(
    notebook: Path, target: Path, parameters: dict[str, Any], kernel_name: str, run_dir: Path
) -> dict[str, str]:
    """Run one notebook with papermill into `target`: {"status": ...}, plus "error" when it failed."""
    import papermill

    from mgtutor.classroom.memory import ChildMemory

    memory = ChildMemory()
    try:
        with memory:
            papermill.execute_notebook(
                str(notebook), str(target), parameters=parameters, kernel_name=kernel_name,
                cwd=str(run_dir), progress_bar=_progress_bar(), extra_arguments=list(KERNEL_ARGUMENTS),
                execution_timeout=CELL_TIMEOUT_SECONDS, on_cell_executed=memory.mark,
            )  # fmt: skip
    except papermill.PapermillExecutionError as err:
        outcome = {"status": FAILED, "error": f"cell In [{err.exec_count}]: {err.ename}: {err.evalue}"}
    except Exception as err:  # a kernel that dies or never starts: still report, then stop
        outcome = {"status": FAILED, "error": f"{type(err).__name__}: {err}"}
    else:
        outcome = {"status": OK}
    return {**outcome, "peak_rss_mb": round(memory.peak_mb), "end_rss_mb": round(memory.last_mb)}


def _records_or_empty(executed: Path) -> dict[str, Any]:
    try:
        return read_records(executed)
    except ValueError as err:  # a notebook cut short mid-write still gets its row in the report
        print(f"    warning: {err}", file=sys.stderr)
        return {}


def _render_or_warn(executed: Path) -> dict[str, str]:
    """{"html": name} once rendered; a rendering problem is reported, not allowed to end the run."""
    try:
        return {"html": render_html(executed, executed.with_suffix(".html")).name}
    except Exception as err:
        problem = f"{type(err).__name__}: {err}"
        print(f"    warning: could not render {executed.name} to HTML ({problem})", file=sys.stderr)
        return {}


def _explain_failure(entry: dict[str, Any], run_dir: Path) -> None:
    lines = [f"FAILED {entry['notebook']} after {duration(entry['seconds'])}: {entry['error']}"]
    if "ipynb" in entry:
        lines.append(f"  executed notebook (the error cell is marked): {run_dir / entry['ipynb']}")
    if "html" in entry:
        lines.append(f"  rendered: {run_dir / entry['html']}")
    lines.append(f"  report:   {run_dir / 'index.html'}")
    print("\n".join(lines), file=sys.stderr, flush=True)


def _write_reports(run_dir: Path, report: dict[str, Any], elapsed: float) -> None:
    """summary.json (notebooks that ran) and index.html (all of them), each replaced atomically."""
    report["seconds"] = round(elapsed, 1)
    ran = [e for e in report["notebooks"] if e["status"] in (OK, FAILED)]
    with atomic_write(run_dir / "summary.json", ".json") as temp:
        temp.write_text(json.dumps({**report, "notebooks": ran}, indent=2))
    with atomic_write(run_dir / "index.html", ".html") as temp:
        temp.write_text(index_html(report), encoding="utf-8")


def _preflight() -> dict[str, Any]:
    """make check's list for the report, and the reference step's images/s when it ran."""
    from dataclasses import asdict

    from mgtutor.classroom.preflight import SMOKE, format_checklist, run_checks  # TF only in its child

    print("Preflight (make check):", flush=True)
    # the series runs on the synthetic stand-in too; lesson 16 times its own arithmetic
    checks = run_checks(allow_synthetic=True, arithmetic=False)
    print(format_checklist(checks, colour=sys.stdout.isatty()), flush=True)
    found = {"preflight": [asdict(check) for check in checks]}
    rate = next((c.value for c in checks if c.name == SMOKE), None)
    return found if not rate else {**found, "reference_images_per_s": round(rate, 1)}


def _sized_plan(defaults: dict[Path, dict], overrides: dict[str, Any], *, preflight: bool, recipe: str | None,
                preset: str | None) -> tuple[dict[Path, dict], dict[str, Any]]:  # fmt: skip
    """Each notebook's parameters, every choice checked before any work, and what the report records of the
    preflight (its checklist, run first) and of the sizing it allows (`size_to_laptop`)."""
    plan = check_overrides(series_overrides(overrides, defaults), defaults)
    # a series default that is the lesson's own is no override (14's BENCH_STEPS): not passed, not marked
    plan = {nb: {k: v for k, v in params.items() if k in overrides or v != defaults[nb][k]}
            for nb, params in plan.items()}  # fmt: skip
    planned = {preset or NONE: apply_preset(preset or NONE, plan, overrides, defaults)}
    if not preset and preflight and not recipe:  # the reference step may pick it
        planned.update(_slow_laptop_plan(plan, overrides, defaults))
    found = _preflight() if preflight else {}
    sized = {} if recipe else size_to_laptop(found, preset, planned, [nb.name[:2] for nb in defaults])
    return planned[sized.get("preset") or preset or NONE], {**found, **sized}


def _slow_laptop_plan(plan: dict[Path, dict], command_line: dict[str, Any],
                      defaults: dict[Path, dict]) -> dict[str, Any]:  # fmt: skip
    """{SLOW_LAPTOP: its plan}, or, where a lesson refuses the command line's values beside the preset's,
    {SLOW_LAPTOP: why}: then the run keeps the classroom defaults and says so."""
    try:
        return {SLOW_LAPTOP: apply_preset(SLOW_LAPTOP, plan, command_line, defaults)}
    except ValueError as err:
        return {SLOW_LAPTOP: str(err).splitlines()[0]}


def size_to_laptop(found: dict[str, Any], preset: str | None, planned: dict[str, Any],
                   lessons: list[str]) -> dict[str, Any]:  # fmt: skip
    """The sizing for the report from the preflight's reference step (`found`): with no preset named, the
    slow-laptop preset where the estimate at classroom defaults passes the target (one line says so), its
    estimate and why; a named preset is kept ("none": the defaults). Nothing without a reference step."""
    from dataclasses import asdict

    from mgtutor.classroom.estimate import TARGET_SECONDS, choose_preset

    rate = found.get("reference_images_per_s")
    if not rate:
        return {}
    sizing = choose_preset(rate, lessons)
    chosen = sizing.preset if preset is None else None if preset == NONE else preset
    said = (f"Sized to this laptop: {sizing.line()}." if preset is None
            else f"PRESET={preset} as asked; sized to this laptop it would be {sizing.line()}.")  # fmt: skip
    if chosen == SLOW_LAPTOP and isinstance(planned.get(SLOW_LAPTOP), str):
        chosen = None
        said += f" Not applied, the classroom defaults run: {planned[SLOW_LAPTOP]}"
    print(said, flush=True)
    estimate = {None: sizing.defaults_seconds, SLOW_LAPTOP: sizing.preset_seconds}.get(chosen)
    record = {"sizing": {**asdict(sizing), "target_seconds": TARGET_SECONDS, "said": said},
              **({"preset": chosen} if chosen else {})}  # fmt: skip
    return record if estimate is None else {**record, "estimate_seconds": round(estimate, 1)}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--notebooks", default="notebooks", help="folder with NN_topic.ipynb")
    parser.add_argument("--runs", default="runs", help="where run folders are created")
    parser.add_argument("--kernel", default="python3", help="Jupyter kernel name")
    parser.add_argument("--only", nargs="*", default=(), help="notebook prefixes, e.g. 00 01")
    parser.add_argument("--no-preflight", action="store_true", help="skip the make check list at the top")
    parser.add_argument("--capstone-long", action="store_true", help="lesson 16's recipe for 90 %%")
    parser.add_argument("--preset", metavar="NAME", help="per-lesson overrides below -p's, e.g. low-memory; "
                        "none: the classroom defaults (else the reference step may pick slow-laptop)")
    parser.add_argument(
        "-p", "--parameter", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
        help="override a notebook parameter, e.g. -p EPOCHS 5",
    )  # fmt: skip
    arguments = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(arguments)
    overrides = {name: parse_value(value) for name, value in args.parameter}
    if args.capstone_long:
        overrides = {**CAPSTONE_LONG, **overrides}
    command = shlex.join(["python", "-m", "mgtutor.classroom.runner", *arguments])
    try:
        run_series(args.notebooks, args.runs, overrides, kernel_name=args.kernel, only=args.only,
                   command=command, preflight=not args.no_preflight,
                   recipe="capstone-long" if args.capstone_long else None, preset=args.preset)  # fmt: skip
    except (ValueError, FileNotFoundError) as err:
        parser.exit(2, f"error: {err}\n")


if __name__ == "__main__":
    main()
