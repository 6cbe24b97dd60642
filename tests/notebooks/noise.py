"""What an executed notebook shows that its lesson did not print: log chatter, redrawn bars, warnings.

`noise_in(path)` lists the offending lines of every code cell's output (streams,
and the text of displays and results); a clean notebook gives ``[]``. Tracebacks
of failing cells are not noise: the run fails on them anyway.
"""

from __future__ import annotations

import json
import os
import re

from mgtutor.support.tflog import TF_NOISE

# A line of output that the lesson did not print, each with why.
NOISE = {
    "TensorFlow C++ log line": TF_NOISE,
    "TensorFlow Python log line": re.compile(r"\s*(INFO|WARNING):tensorflow:"),
    # Not model.summary()'s table, whose borders use the same character.
    "Keras progress bar": re.compile(r".*(\d+/\d+.*━|━.*/step)"),
    "record() shown as text": re.compile(r"recorded \w+ = "),
    "tf.function retracing warning": re.compile(r".*triggered tf\.function retracing"),
    "Python warning": re.compile(r".*\b[A-Z]\w*Warning: |\s+warnings\.warn\("),
    "input ran out of data": re.compile(r".*Your input ran out of data"),
}
# Redraws: a bar that rewinds with backspaces or carriage returns leaves all its frames in the file.
REDRAW = re.compile(r"[\x08\r]")
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


def noise_in(path: str | os.PathLike) -> list[str]:
    """The output lines of executed notebook `path` that are noise, in order (``[]`` when clean)."""
    with open(path, encoding="utf-8") as file:
        nb = json.load(file)
    found = []
    for cell in nb.get("cells", []):
        for output in cell.get("outputs", []):
            for text in _texts(output):
                for line in text.split("\n"):
                    if REDRAW.search(line.rstrip("\r")) or any(p.match(line) for p in NOISE.values()):
                        found.append(_shown(line))
    return found

