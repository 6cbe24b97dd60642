"""True on every machine (issue 38): no figure or direction from a measurement in the prose.

The notebooks' markdown, README.md and docs/teachers.md may say how to read an output, never
what it will be on the reader's machine: a measured figure lives in a cell's output or in a block
generated from a run. `tests/docs/allowed.py` lists the laws, settings, citations and bounds that
may stay, each with its reason. ``python -m tests.docs.figures`` prints what this test would.
"""

from __future__ import annotations

import re

import pytest

from tests.docs.allowed import ALLOWED
from tests.docs.figures import KINDS, findings, not_allowed, prose_sources, run_blocks, unused


@pytest.fixture(scope="module")
def found():
    return findings()


def test_no_figure_or_direction_from_a_measurement_in_prose(found):
    left = not_allowed(found, ALLOWED)
    assert not left, (
        "Prose states what a run measures. Print it from the cell that computes it (or generate it with "
        "python -m mgtutor.classroom.run_tables), say how to read the output instead, or, for a law, a "
        "setting or a citation, add it to tests/docs/allowed.py with its reason:\n"
        + "\n".join(str(f) for f in left)
    )


def test_every_allowance_covers_something_and_says_why(found):
    assert not unused(found, ALLOWED), "remove these entries with the sentences they were for"
    for entry in ALLOWED:
        assert entry.kind in KINDS and len(entry.reason.split()) >= 3, entry
        re.compile(entry.text)


def test_pasted_output_names_its_date_and_cpu():
    # A program's output pasted as printed is a record of one machine on one day: it must say which.
    printed = [(where, name, body) for where, text in prose_sources()
               for kind, name, body in run_blocks(text) if kind == "printed"]  # fmt: skip
    for where, name, body in printed:
        assert re.search(r"\b20\d\d-\d\d-\d\d\b", body), f"{where}: printed block {name} names no date"
        assert re.search(r"\b(AMD|Intel|Apple|Arm|ARM)\b", body), (
            f"{where}: printed block {name} names no CPU"
        )


def _found_in(text: str) -> list[str]:
    return [f.token for f in findings([("example.md", text)])]


def test_the_scan_finds_figures_and_directions():
    assert _found_in("bfloat16 is 1.54× faster than float32.") == ["1.54×", "faster"]
    assert _found_in("It took 14 min 55 s; the gap is 0.044 (4.4 %).") == ["14 min", "55 s", "0.044", "4.4 %"]
    assert _found_in("The step differs by 3.0e-08 and runs at x0.21.") == ["3.0e-08", "x0.21"]
    assert _found_in("Three epochs take well under a minute on this CPU.") == [
        "well under a minute",
        "on this CPU",
    ]
    assert _found_in("One device already keeps every core busy.") == ["keeps every core busy"]
    assert _found_in("It reaches the baseline's accuracy at a measured cost.") == [
        "baseline's accuracy",
        "measured cost",
    ]


def test_the_scan_leaves_readings_code_and_run_blocks_alone():
    assert _found_in("If the ratio is above 1, the second device is faster.") == []  # how to read an output
    assert _found_in("Is bfloat16 faster here? The cell answers.") == []  # a question
    assert _found_in("Run `make run EPOCHS=2.5` with 32×32 images, 32 × *N* per step.") == []  # code, sizes
    assert _found_in("```\nepoch 1: 0.452 after 0.8 min\n```") == []  # a fenced transcript
    generated = "<!-- generated:results begin -->\n0.472 in 16 s\n<!-- generated:results end -->\n"
    printed = "<!-- printed:bench begin -->\n2026-11-27, AMD EPYC: x1.10\n<!-- printed:bench end -->\n"
    assert _found_in(generated + printed + "Read the table above.") == []
    assert _found_in("See [the run](runs/2026/0.472.html).") == []  # a link's target


def test_an_allowance_covers_only_its_own_span():
    from tests.docs.figures import Allowed

    found = findings([("README.md", "Seed 001: 63 s → 16 s per epoch; ours took 12 s.")])
    citation = Allowed("README.md", r"63 s → 16 s", "citation", "seed 001's published figures")
    assert [f.token for f in not_allowed(found, [citation])] == ["12 s"]
    elsewhere = Allowed("docs/*", r"63 s → 16 s", "citation", "seed 001's published figures")
    assert len(not_allowed(found, [elsewhere])) == 3
