"""True on every machine: the figures and directions in prose that only a run can give.

A figure (a decimal, a ratio such as ``1.54x``, a percentage, a quantity with a unit of time,
memory or speed) or a direction (faster, slower, as fast, the same accuracy, ...) that comes from
a measurement belongs in a cell's output, or in a block generated from a run
(``<!-- generated:NAME begin -->`` ... ``end``, written by ``python -m mgtutor.classroom.run_tables``),
or in a program's output pasted as printed (``<!-- printed:NAME begin -->`` ... ``end``, which must
name its date and its CPU). Prose says how to read an output, never what it will be.

`findings()` lists every figure and direction in the notebooks' markdown and the project's pages
(`DOCUMENTS`: the README, CONTRIBUTING.md, benchmarks/README.md and every page of docs/) outside
those blocks, code and links. A direction inside a sentence that reads
an output ("if the ratio is above 1, ...", "whether ...", a question) is a reading, not a claim.
What may stay (laws, settings, citations, bounds the tests assert) is listed, each with its reason,
in `tests/docs/allowed.py`. ``python -m tests.docs.figures`` prints what is not allowed.
"""

from __future__ import annotations

import fnmatch
import json
import re
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Every page a reader meets: a new page under docs/ is scanned without being named here.
DOCUMENTS = ("README.md", "CONTRIBUTING.md", "benchmarks/README.md", "docs/*.md")

# Blocks whose figures come from a run: generated from one, or a program's output pasted as printed.
RUN_BLOCK = re.compile(r"<!-- (generated|printed):(\S+) begin -->\n(.*?)<!-- \1:\2 end -->", re.S)
FENCED = re.compile(r"^```.*?^```[ \t]*$", re.S | re.M)
COMMENT = re.compile(r"<!--.*?-->", re.S)
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1", re.S)
LINK_TARGET = re.compile(r"\]\([^)\s]*\)")
IMAGE = re.compile(r"!\[[^\]]*\]\([^)]*\)")

_NUMBER = r"\d[\d,]*(?:\.\d+)?"
_UNIT = (
    r"(?:ms|s|sec|seconds?|min|minutes?|h|hours?|days?|[kKMGT]i?B(?:/s)?|[MG]bit/s|GT/s|"
    r"images/s|img/s|steps/s|it/s)"
)
FIGURE = re.compile(
    rf"""(?x)
      (?<![\w.])\d+(?:\.\d+)?[eE][-+−]?\d+(?!\w|\.\d)                 # 3.0e-08, 1e-5
    | (?<![\w.]){_NUMBER}\s?%                                       # 10 %, 98%
    | (?<![\w.×])\d+(?:\.\d+)?[×x](?![\w×\d])                       # 1.54×, 2x (not 32×32, not 32 × N)
    | (?<![\w.])[×x]\s?\d+\.\d+(?!\w|\.\d)                            # x1.10 (a printed ratio)
    | (?<![\w.])(?:\d+\s?h\s)?{_NUMBER}\s?{_UNIT}(?![\w/])           # 16 s, 4 h 10 min, 783 MB, 1.3 GB/s
    | (?<![\w.])\d+\.\d+(?!\w|\.\d)                              # 0.472 (not a version x.y.z)
    | \b(?:(?:well\s+)?(?:under|within|in|about|over|less\s+than|more\s+than)\s+)
       (?:a|one|half\s+an?)\s+(?:minute|second|hour)\b              # under a minute
    """
)
DIRECTION = re.compile(
    r"""(?xi)\b(?:
      faster|slower|quicker|speeds?\s+(?:it\s+)?up|slows?\s+(?:it\s+)?down|as\s+fast|as\s+slow|
      cannot\s+speed\s+up|no\s+speed-?up|cheaper|costlier|more\s+expensive|dwarfs?|outperforms?|
      several\s+times|no\s+faster|no\s+slower|the\s+same\s+speed|
      measured\s+cost|costs?\s+(?:nothing|little|almost\s+nothing)|
      (?:the\s+)?same\s+accuracy|baseline's\s+accuracy|(?:the\s+)?one-device\s+accuracy|
      keeps?\s+(?:every|all|both|the)\s+cores?\s+busy|
      (?:is|are|was|were)\s+(?:not\s+)?the\s+bottleneck|
      within\s+the\s+(?:spread|noise)|beyond\s+the\s+spread|
      (?:on|for)\s+this\s+CPU|this\s+CPU's
    )\b"""
)
# A sentence that says how to read an output rather than what it will be.
READING = re.compile(r"(?i)\b(?:if|whether|when|unless|where|until)\b|\?")


@dataclass(frozen=True)
class Finding:
    """A figure or a direction in prose: where, the sentence (or table row), and the span in it."""

    where: str
    sentence: str
    start: int
    end: int
    kind: str  # "figure" or "direction"

    @property
    def token(self) -> str:
        return self.sentence[self.start : self.end]

    def __str__(self) -> str:
        return f"{self.where}: {self.kind} {self.token!r} in: {self.sentence}"


def prose_sources(root: Path = ROOT) -> Iterator[tuple[str, str]]:
    """(where, markdown) for every lesson's and solution's markdown cell and every page of `DOCUMENTS`."""
    notebooks = sorted((root / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    notebooks += sorted((root / "notebooks" / "solutions").glob("[0-9][0-9]_*.ipynb"))
    for path in notebooks:
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        for index, cell in enumerate(cells):
            if cell["cell_type"] == "markdown":
                yield f"{path.relative_to(root)}#{index}", "".join(cell["source"])
    for pattern in DOCUMENTS:
        for path in sorted(root.glob(pattern)):
            yield str(path.relative_to(root)), path.read_text(encoding="utf-8")


def run_blocks(text: str) -> list[tuple[str, str, str]]:
    """Every (kind, name, body) block of `text` whose figures come from a run."""
    return RUN_BLOCK.findall(text)


def prose(text: str) -> str:
    """`text` without what is not prose: run blocks, fenced code, comments, inline code, link targets."""
    for pattern, replacement in ((RUN_BLOCK, "\n\n"), (FENCED, "\n\n"), (COMMENT, " "), (IMAGE, " "),
                                 (INLINE_CODE, "`…`"), (LINK_TARGET, "]")):  # fmt: skip
        text = pattern.sub(replacement, text)
    return text


def sentences(text: str) -> Iterator[str]:
    """Table rows, list items and sentences of prose `text`, each on one line."""
    for block in re.split(r"\n\s*\n", text):
        lines = block.splitlines()
        if lines and all(line.lstrip().startswith("|") for line in lines):
            yield from (" ".join(line.split()) for line in lines if not set(line) <= set("|-: "))
            continue
        items = re.split(r"\n(?=\s*(?:[*-]|\d+\.)\s)", block)
        for item in items:
            flat = " ".join(item.split())
            yield from (s for s in re.split(r"(?<=[.!?])\s+(?=[A-Z*_(\"“])", flat) if s)


def findings_in(where: str, text: str) -> Iterator[Finding]:
    """The figures and the unread directions of one source's prose."""
    for sentence in sentences(prose(text)):
        for match in FIGURE.finditer(sentence):
            yield Finding(where, sentence, match.start(), match.end(), "figure")
        if not READING.search(sentence):
            for match in DIRECTION.finditer(sentence):
                yield Finding(where, sentence, match.start(), match.end(), "direction")


def findings(sources: Iterable[tuple[str, str]] | None = None) -> list[Finding]:
    """Every figure and direction in the prose of `sources` (default: the series and its documents)."""
    return [
        f
        for where, text in (prose_sources() if sources is None else sources)
        for f in findings_in(where, text)
    ]


@dataclass(frozen=True)
class Allowed:
    """A figure or direction that may stay in prose: `text` (a regex) covers it in files matching `where`."""

    where: str
    text: str
    kind: str  # "law", "setting", "citation", "bound" (a limit the tests assert), "reading"
    reason: str

    def covers(self, finding: Finding) -> bool:
        if not fnmatch.fnmatch(finding.where.split("#")[0], self.where):
            return False
        return any(
            m.start() <= finding.start and finding.end <= m.end()
            for m in re.finditer(self.text, finding.sentence)
        )


KINDS = {"law", "setting", "citation", "bound", "reading"}


def not_allowed(found: Iterable[Finding], allowed: Iterable[Allowed]) -> list[Finding]:
    """The findings no entry of `allowed` covers."""
    allowed = list(allowed)
    return [f for f in found if not any(entry.covers(f) for entry in allowed)]


def unused(found: Iterable[Finding], allowed: Iterable[Allowed]) -> list[Allowed]:
    """The entries of `allowed` that cover nothing: stale, to be removed."""
    found = list(found)
    return [entry for entry in allowed if not any(entry.covers(f) for f in found)]


def main() -> int:
    from tests.docs.allowed import ALLOWED

    found = findings()
    left = not_allowed(found, ALLOWED)
    for finding in left:
        print(finding)
    for entry in unused(found, ALLOWED):
        print(f"unused allow-list entry: {entry}")
    print(f"{len(found)} figures and directions in prose, {len(left)} not allowed", file=sys.stderr)
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
