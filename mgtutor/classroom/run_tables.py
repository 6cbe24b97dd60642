"""The generated blocks of docs/results.md and docs/teachers.md, from a run's summary.json.

``python -m mgtutor.classroom.run_tables runs/<timestamp>/summary.json`` rewrites the text
between ``<!-- generated:NAME begin -->`` and ``<!-- generated:NAME end -->``. In docs/results.md
the run writes its own CPU kind's column (`results_page`) and leaves the other CPUs' columns as
they are: from a `make run`, each notebook's seconds and test accuracy and lesson 14's workers;
from a `make capstone` or `make capstone-long`, lesson 16's time to accuracy. In docs/teachers.md
it writes the teacher's own run: memory, the timed plans (`plans`), every figure learners should
see (`learner_figures`), lesson 14's workers and lesson 15's drills (`breaks_page`). Every block
names the run's date and machine (its CPU model and AMX/AVX-512 flags), so no figure there is typed
by hand.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from mgtutor.classroom import results_page as page
from mgtutor.classroom.breaks_page import breaks_block, lesson_15
from mgtutor.classroom.learner_figures import learners_block
from mgtutor.classroom.plans import plan_lessons, plans_block
from mgtutor.support.files import atomic_write

BEGIN, END = "<!-- generated:{} begin -->", "<!-- generated:{} end -->"
RESULTS, TEACHERS = "docs/results.md", "docs/teachers.md"
_duration, _run_line, _table = page.duration, page.run_line, page.table


def _short(notebook: str) -> str:
    return notebook[:2]


def teachers_memory(summary: dict[str, Any]) -> str:
    """Peak and left-open memory per notebook, and what they mean for an 8 GB laptop."""
    entries = summary["notebooks"]
    header = ["notebook", *(_short(e["notebook"]) for e in entries)]
    peak = max(entries, key=lambda e: e["peak_rss_mb"])
    kept = max(entries, key=lambda e: e["end_rss_mb"])
    both = (peak["peak_rss_mb"] + kept["end_rss_mb"]) / 1000
    rows = [["run time", *(_duration(e["seconds"]) for e in entries)],
            ["peak MB", *(str(e["peak_rss_mb"]) for e in entries)],
            ["kernel left open afterwards, MB", *(str(e["end_rss_mb"]) for e in entries)]]  # fmt: skip
    return (
        f"Measured by {_run_line(summary)}; memory is the kernel and every process it starts, sampled every "
        f"0.2 s. All notebooks: {_duration(summary['seconds'])}.\n\n{_table(header, rows)}\n\n"
        f"The largest peak is {peak['peak_rss_mb'] / 1000:.2f} GB (notebook {_short(peak['notebook'])}); "
        f"a kernel left open keeps up to {kept['end_rss_mb'] / 1000:.2f} GB (notebook "
        f"{_short(kept['notebook'])}). One kernel left open plus the largest notebook needs {both:.2f} GB "
        "on top of the system and the browser: "
        "on an 8 GB laptop, have learners shut down each notebook's kernel before opening the next "
        "(File → Close and Shut Down Notebook). With JupyterLab open, add its server and the browser tab "
        "to that sum (`make check` prints what this laptop has available)."
    )


def pinned_workers(summary: dict[str, Any]) -> str:
    """Lesson 14 on the teacher's machine: the same rows as its column of docs/results.md."""
    entry = page.lesson_14(summary)
    p = {**entry.get("defaults", {}), **entry.get("parameters", {})}
    return (
        f"Measured by {_run_line(summary)}: lesson 14 at its parameters ({p.get('REPEATS')} blocks of "
        f"{p.get('BENCH_STEPS')} steps per configuration, each job's processes pinned to their cores; the "
        "seed CNN). Images/s are medians with their range; a speed-up over 1 worker x 1 core has the bounds "
        "of both ranges.\n\n" + _table(["lesson 14", "this run"], page.worker_rows(summary))
    )


def teachers_breaks(summary: dict[str, Any]) -> str:
    """Lesson 15: each drill's symptom, check and fix, and the reported bugs, from the run's records."""
    return breaks_block(summary, _run_line(summary))


def teachers_plans(summary: dict[str, Any]) -> str:
    """The 3-hour and 90-minute plans, each slot's run time from the run."""
    return plans_block(summary, _run_line(summary))


def teachers_learners(summary: dict[str, Any]) -> str:
    """Every lesson's figures that learners should see, from the run's records."""
    return learners_block(summary, _run_line(summary))


# The blocks of docs/teachers.md: one run's, the teacher's own.
GENERATORS: dict[str, Callable[[dict], str]] = {
    "memory": teachers_memory,
    "learners": teachers_learners,
    "workers": pinned_workers,
    "breaks": teachers_breaks,
    "plans": teachers_plans,
}
# The blocks of docs/results.md: one column per CPU kind. Each: its rows, its table's first header, its note.
_SAME_RUN = "`make run` as it sized itself to the CPU (each run line below says at what)"
COLUMNS: dict[str, tuple[Callable[[dict], list[tuple[str, str]]], str, str, str]] = {
    "series-by-cpu": (page.series_rows, "notebook: seconds", "make run", (
        "Seconds per notebook of `make run` as it sized itself to the CPU (the classroom defaults, or the "
        "slow-laptop preset where its reference step said the defaults would overrun the slot: each run "
        f"line below says which), and whether the whole series met the goal of {page.GOAL_SECONDS // 60} "
        "min on that CPU.")),
    "accuracy-by-cpu": (page.accuracy_rows, "notebook: test accuracy", "make run", (
        f"The test accuracy each notebook reaches in {_SAME_RUN}. 02 is the one-device baseline; 08's two "
        "figures are the large global batch at the same learning rate and with the linear rule plus warm-up, "
        "09's the range over its averaging variants (MNIST), 16's the capstone's recipe at the series' "
        "budget of minutes, on a share of the whole data set (not comparable with the baseline).")),
    "workers-by-cpu": (page.worker_rows, "lesson 14", "make run", (
        "Lesson 14's pinned workers (the seed CNN at the lesson's parameters, each job's processes pinned "
        "to their cores): images/s as medians with their range, each speed-up over 1 worker x 1 core with "
        "the bounds of both ranges and the lesson's reading; the one-process baseline taken apart; the "
        "link fitted as alpha + bytes / beta; lesson 11's ring model's step beside the measured one.")),
    "capstone-by-cpu": (page.capstone_rows, "make capstone", "make capstone", (
        "Lesson 16's whole recipe on all of CIFAR-10 (`make capstone`): the test accuracy reached by each "
        "budget of minutes (the test after each epoch counted), the saved model's, and the arithmetic the "
        "run picked by timing its candidates at its start.")),
    "capstone-long-by-cpu": (lambda s: page.capstone_rows(s, "capstone-long"), "make capstone-long",
                             "make capstone-long", (
        "The same for `make capstone-long`: airbench's widths (64/256/256), 14 epochs, 10 of them at full "
        "size, no budget of minutes.")),
}  # fmt: skip
TARGETS = {**{name: (TEACHERS,) for name in GENERATORS}, **{name: (RESULTS,) for name in COLUMNS}}


def _blocks_for(summary: dict[str, Any]) -> list[str]:
    """The blocks a summary can write: the series' from a series, the curve from a whole capstone."""
    names = []
    if any(e["notebook"].startswith("02_") for e in summary["notebooks"]):
        names += ["series-by-cpu", "accuracy-by-cpu", "memory", "learners"]
        if all(any(e["notebook"].startswith(n) for e in summary["notebooks"]) for n in plan_lessons()):
            names.append("plans")
    if page.whole_capstone(summary) is not None:
        names.append("capstone-by-cpu")
    if page.whole_capstone(summary, "capstone-long") is not None:
        names.append("capstone-long-by-cpu")
    if page.lesson_14(summary) is not None:
        names += ["workers", "workers-by-cpu"]
    if lesson_15(summary) is not None:
        names.append("breaks")
    if not names:
        raise ValueError(
            "the run holds neither the series (`make run`), nor the whole capstone (`make capstone`, "
            "`make capstone-long`), nor lesson 14 or 15."
        )
    return names


def replace_block(text: str, name: str, body: str, where: str = "text") -> str:
    """`text` with the lines between `name`'s markers replaced by `body`; refuses missing markers."""
    begin, end = BEGIN.format(name), END.format(name)
    pattern = re.compile(re.escape(begin) + r"\n.*?" + re.escape(end), re.S)
    if len(pattern.findall(text)) != 1:
        raise ValueError(f"{where} must hold exactly one {begin} ... {end} pair, on lines of their own.")
    return pattern.sub(lambda _: f"{begin}\n{body}\n{end}", text)


def block(text: str, name: str) -> str:
    """The generated text between `name`'s markers."""
    found = re.search(re.escape(BEGIN.format(name)) + r"\n(.*?)\n" + re.escape(END.format(name)), text, re.S)
    if found is None:
        raise ValueError(f"no generated block {name!r}")
    return found.group(1)


def parse_table(text: str) -> dict[str, list[str]]:
    """A markdown table's rows by their first cell: {"notebook": ["00", ...], "seconds": [...], ...}."""
    rows = [line.strip().strip("|").split("|") for line in text.splitlines() if line.startswith("|")]
    return {
        cells[0].strip(): [c.strip() for c in cells[1:]] for cells in rows if not set(cells[0]) <= {"-", " "}
    }


def load_summary(path: str | os.PathLike) -> dict[str, Any]:
    """A complete run's summary.json; refuses a failed or partial run, whose figures would be a mix."""
    summary = json.loads(Path(path).read_text())
    if summary.get("status") != "complete":
        raise ValueError(f"{path}: the run's status is {summary.get('status')!r}; use a complete `make run`.")
    return summary


def column_block(summary: dict[str, Any], name: str, old: str) -> str:
    """Block `name` of docs/results.md: `old` with the summary's CPU kind's column written."""
    rows, first, command, note = COLUMNS[name]
    line = _run_line(summary, command)
    return page.merge(old, page.cpu_kind(summary["machine"]), rows(summary), line, first, note)


def bodies(
    summary: dict[str, Any], only: Sequence[str] | None = None, root: str | os.PathLike = "."
) -> dict[str, str]:
    """Every block `summary` can write (or `only` those), by name; refuses a name it cannot write. A
    column block keeps the other CPUs' columns as the page under `root` holds them."""
    names = _blocks_for(summary)
    missing = sorted(set(only or ()) - set(names))
    if missing:
        raise ValueError(f"--blocks {' '.join(missing)}: this run writes only {', '.join(names)}.")
    written = {}
    for name in (n for n in names if not only or n in only):
        if name in COLUMNS:
            old = block((Path(root) / RESULTS).read_text(encoding="utf-8"), name)
            written[name] = column_block(summary, name, old)
        else:
            written[name] = GENERATORS[name](summary)
    return written


def rewrite(
    summary: dict[str, Any], root: str | os.PathLike = ".", only: Sequence[str] | None = None
) -> list[Path]:
    """Rewrite every generated block under `root` from `summary` (or `only` those), each file atomically."""
    texts: dict[Path, str] = {}
    for name, body in bodies(summary, only, root).items():
        for relative in TARGETS[name]:
            path = Path(root) / relative
            text = texts.get(path) or path.read_text(encoding="utf-8")
            texts[path] = replace_block(text, name, body, str(path))
    for path, text in texts.items():  # every block computed before any file is written
        with atomic_write(path, path.suffix) as temp:
            temp.write_text(text, encoding="utf-8")
    return list(texts)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "summary", help="runs/<timestamp>/summary.json of a complete make run, make capstone or capstone-long"
    )
    parser.add_argument("--root", default=".", help="the repository (docs/results.md, docs/teachers.md)")
    parser.add_argument("--blocks", nargs="+", choices=sorted(TARGETS), help="only these (default: all)")
    parser.add_argument(
        "--print", action="store_true",
        help="print the blocks instead of rewriting the files (a column block with the other CPUs' "
        "columns as the files hold them)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    try:
        if args.print:
            for name, body in bodies(load_summary(args.summary), args.blocks, args.root).items():
                print(f"{name} ({args.summary}):\n\n{body}\n")
            return
        for path in rewrite(load_summary(args.summary), args.root, args.blocks):
            print(f"rewrote the generated tables in {path}")
    except (ValueError, KeyError, FileNotFoundError) as err:
        parser.exit(2, f"error: {type(err).__name__}: {err}\n")


if __name__ == "__main__":
    main()
