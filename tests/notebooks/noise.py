"""What an executed notebook shows that its lesson did not print: log chatter, redrawn bars, warnings.

`noise_in(path)` lists the offending lines of every code cell's output (streams,
and the text of displays and results), and a bullet a markdown cell says twice; output
said twice too: a line again in its cell, and a table or a bullet an earlier cell printed;
a clean notebook gives ``[]``. Tracebacks of failing cells are not noise: the run
fails on them anyway.
"""

from __future__ import annotations

import json
import os
import re

from mgtutor.support.session import ANSI_ESCAPE
from mgtutor.support.tflog import KERAS_STEP_LINE, TF_NOISE
from mgtutor.training.cluster import FUNCTION_NODE, TF_INTERNALS

# A line of output that the lesson did not print, each with why (matched at the line's start).
NOISE = {
    "TensorFlow C++ log line": TF_NOISE,
    "TensorFlow Python log line": re.compile(r"\s*(INFO|WARNING):tensorflow:"),
    # Not model.summary()'s table, whose borders use the same character.
    "Keras progress bar": re.compile(r".*(\d+/\d+.*━|━.*/step)"),
    "Keras step line": KERAS_STEP_LINE,
    "record() shown as text": re.compile(r"recorded \w+ = "),
    "tf.function retracing warning": re.compile(r".*triggered tf\.function retracing"),
    "Python warning": re.compile(r".*\b[A-Z]\w*Warning: |\s+warnings\.warn\("),
    "input ran out of data": re.compile(r".*Your input ran out of data"),
    "TensorFlow runtime internals": TF_INTERNALS,
}
# Found anywhere in a line: terminal colour codes (text that reads "\x1b[1m" around every word), and
# redraws (a bar that rewinds with backspaces or carriage returns leaves all its frames in the file).
ANYWHERE = {
    "ANSI escape sequence": ANSI_ESCAPE,
    "redraw": re.compile(r"[\x08\r]"),
    "TensorFlow graph function name": FUNCTION_NODE,
}
# Text cut inside a sentence: a word, then "…" or "..." where the text ends (the line, or a clause
# before ";", ")" or ","). Not an ellipsis after a comma ("1, 2, 4, …") or closing a bracket.
CUT_OFF = re.compile(r"[A-Za-z0-9'\"]\s?(?:…|\.\.\.)(?=\s*(?:$|[;)\]},]))")
# The launcher's prefix on a worker's relayed line: the line after it is judged as the worker's own.
RELAYED = re.compile(r"\[worker \d+\] ")
# A bullet ("* ", "- ", "• ", "1. ") long enough that saying it twice in one cell is a mistake, not a list
# of short items ("- ok"). A bullet that starts with the whole of an earlier one says it again too.
BULLET = re.compile(r"\s*(?:[*\-•]|\d+\.) (\S.{19,})")
MAX_LINE_CHARS = 200
# A line this long, a sentence (3 words or more, no columns aligned by runs of spaces), said twice in one
# cell's output is said again (a child's line and the cell's own print of it; a report repeated per pending
# call); short lines repeat, and so do the rows, borders and headers of two tables or checklists in a cell.
REPEAT_CHARS = 30
SENTENCE = re.compile(r"(?=(?:.*?\b[A-Za-z]{2,}\b){3})(?!.*\S {2,}\S)")
# This many lines in a row as an earlier cell printed them are that output printed again (a table; two
# tables of one kind share their two header lines and may share a row). A worker's relayed lines are its
# own (two drills print the same steps).
REPEAT_RUN = 4
# The stand-in data's warning, framed by these lines, is said at each load of data (offline, in the tests).
BANNER = re.compile(r"!{20,}$")


def _texts(output: dict) -> list[str]:
    if output.get("output_type") == "stream":
        text = output.get("text", "")
    elif output.get("output_type") in ("display_data", "execute_result"):
        text = output.get("data", {}).get("text/plain", "")
    else:
        return []
    return ["".join(text) if isinstance(text, list) else text]


def _shown(line: str) -> str:
    """`line` as a short, printable entry: escapes for backspace and carriage return, cut to length."""
    line = line.replace("\x08", "\\b").replace("\r", "\\r")
    return line if len(line) <= MAX_LINE_CHARS else line[: MAX_LINE_CHARS - 1] + "…"


def noisy_line(line: str) -> str | None:
    """Why output `line` is noise (a key of `NOISE` or `ANYWHERE`, or "cut off"); None if the lesson's."""
    for kind, pattern in ANYWHERE.items():
        if pattern.search(line.rstrip("\r")):
            return kind
    own = line[RELAYED.match(line).end() :] if RELAYED.match(line) else line
    for kind, pattern in NOISE.items():
        if pattern.match(own):
            return kind
    return "cut off" if CUT_OFF.search(own) else None


def repeated_bullets(lines: list[str]) -> list[str]:
    """The bullet lines of one cell that say an earlier bullet of it again: word for word, or it and more."""
    seen, again = [], []
    for line in lines:
        bullet = BULLET.fullmatch(line.rstrip())
        if bullet is None:
            continue
        text = bullet.group(1)
        if any(text.startswith(earlier) or earlier.startswith(text) for earlier in seen):
            again.append(line)
        seen.append(text)
    return again


# A worker's Python stack, dumped again: the watchdog's dump, then a fault's (SIGSEGV) of the same thread.
STACK_HEADER = re.compile(r"(\[worker \d+\] )?(Current )?[Tt]hread 0x[0-9a-f]+ \(most recent call first\):")


def repeated_lines(lines: list[str]) -> list[str]:
    """The long lines of one cell's output that it printed before."""
    seen: set[str] = set()
    again = []
    for line in lines:
        bullet = BULLET.fullmatch(line.rstrip())  # `repeated_bullets` reads those
        if STACK_HEADER.fullmatch(line.strip()):
            continue
        if len(line.strip()) >= REPEAT_CHARS and SENTENCE.match(line) and not bullet and line in seen:
            again.append(line)
        seen.add(line)
    return again


def outside_banners(lines: list[str]) -> list[str]:
    """`lines` without the stand-in data's framed warnings."""
    kept, inside = [], False
    for line in lines:
        if BANNER.match(line.strip()):
            inside = not inside
        elif not inside:
            kept.append(line)
    return kept


def printed_before(lines: list[str], earlier: list[list[str]]) -> list[str]:
    """The lines of a cell that earlier cells printed: a bullet word for word, or `REPEAT_RUN` in a row."""
    bullets = {line for cell in earlier for line in cell if BULLET.fullmatch(line.rstrip())}
    runs = {tuple(cell[i : i + REPEAT_RUN]) for cell in earlier for i in range(len(cell) - REPEAT_RUN + 1)}
    again = {i for i, line in enumerate(lines) if line in bullets}
    for i in range(len(lines) - REPEAT_RUN + 1):
        if tuple(lines[i : i + REPEAT_RUN]) in runs:
            again |= set(range(i, i + REPEAT_RUN))
    return [lines[i] for i in sorted(again)]


def noise_in(path: str | os.PathLike) -> list[str]:
    """The output lines of executed notebook `path` that are noise, in order (``[]`` when clean)."""
    with open(path, encoding="utf-8") as file:
        nb = json.load(file)
    found: list[str] = []
    earlier: list[list[str]] = []  # the non-blank output lines of each code cell so far
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "markdown":
            source = cell.get("source", "")
            found += repeated_bullets(("".join(source) if isinstance(source, list) else source).split("\n"))
            continue
        texts = [text for output in cell.get("outputs", []) for text in _texts(output)]
        lines = [line for text in texts for line in text.split("\n")]
        found += [_shown(line) for line in lines if noisy_line(line)]
        found += [_shown(line) for line in repeated_bullets(lines)]
        found += [_shown(line) for line in repeated_lines(lines)]
        printed = [line for line in outside_banners(lines) if line.strip() and not RELAYED.match(line)]
        found += [_shown(line) for line in printed_before(printed, earlier)]
        earlier.append(printed)
    return found
