"""What an executed notebook shows that its lesson did not print: log chatter, redrawn bars, warnings.

`noise_in(path)` lists the offending lines of every code cell's output (streams,
and the text of displays and results), and a bullet a markdown cell says twice; a
clean notebook gives ``[]``. Tracebacks of failing cells are not noise: the run
fails on them anyway.
"""

from __future__ import annotations

import json
import os
import re

from mgtutor.support.session import ANSI_ESCAPE
from mgtutor.support.tflog import KERAS_STEP_LINE, TF_NOISE

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
}
# Found anywhere in a line: terminal colour codes (text that reads "\x1b[1m" around every word), and
# redraws (a bar that rewinds with backspaces or carriage returns leaves all its frames in the file).
ANYWHERE = {"ANSI escape sequence": ANSI_ESCAPE, "redraw": re.compile(r"[\x08\r]")}
# Text cut inside a sentence: a word, then "…" or "..." where the text ends (the line, or a clause
# before ";", ")" or ","). Not an ellipsis after a comma ("1, 2, 4, …") or closing a bracket.
CUT_OFF = re.compile(r"[A-Za-z0-9'\"]\s?(?:…|\.\.\.)(?=\s*(?:$|[;)\]},]))")
# The launcher's prefix on a worker's relayed line: the line after it is judged as the worker's own.
RELAYED = re.compile(r"\[worker \d+\] ")
# A bullet ("* ", "- ", "• ", "1. ") long enough that saying it twice in one cell is a mistake, not a list
# of short items ("- ok"). A bullet that starts with the whole of an earlier one says it again too.
BULLET = re.compile(r"\s*(?:[*\-•]|\d+\.) (\S.{19,})")
MAX_LINE_CHARS = 200


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


def noise_in(path: str | os.PathLike) -> list[str]:
    """The output lines of executed notebook `path` that are noise, in order (``[]`` when clean)."""
    with open(path, encoding="utf-8") as file:
        nb = json.load(file)
    found = []
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "markdown":
            source = cell.get("source", "")
            found += repeated_bullets(("".join(source) if isinstance(source, list) else source).split("\n"))
            continue
        texts = [text for output in cell.get("outputs", []) for text in _texts(output)]
        lines = [line for text in texts for line in text.split("\n")]
        found += [_shown(line) for line in lines if noisy_line(line)]
        found += [_shown(line) for line in repeated_bullets(lines)]
    return found
