"""The front door stays a front door (issue 54): a README read in five minutes, and pages that link
to what exists.

The README holds at most 250 lines; everything longer has a page of its own. Every relative link
of the README and the other pages resolves to a file, and a ``#anchor`` to a heading of that file.
docs/api.md lists exactly the names `mgtutor` exports, so it cannot go stale.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import mgtutor
from tests.conftest import ROOT
from tests.docs.figures import DOCUMENTS

README_LINES = 250
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCED = re.compile(r"^```.*?^```[ \t]*$", re.S | re.M)
PAGES = sorted({path for pattern in DOCUMENTS for path in ROOT.glob(pattern)})


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = FENCED.sub("", path.read_text(encoding="utf-8"))
    return {anchor(title) for title in re.findall(r"^#{1,6} (.+)$", text, flags=re.M)}


def broken_links(path: Path) -> list[str]:
    """Every relative link of the page at `path` whose file, or whose heading, does not exist."""
    broken = []
    for target in LINK.findall(FENCED.sub("", path.read_text(encoding="utf-8"))):
        if re.match(r"[a-z]+:", target):  # https:, mailto: ...: not a file of the repository
            continue
        file, _, fragment = target.partition("#")
        linked = (path.parent / file).resolve() if file else path
        if not linked.exists():
            broken.append(f"{target} (no file {linked})")
        elif fragment and linked.suffix == ".md" and fragment not in anchors(linked):
            broken.append(f"{target} (no heading #{fragment} in {linked.name})")
    return broken


def test_the_readme_is_read_in_five_minutes():
    lines = len((ROOT / "README.md").read_text(encoding="utf-8").splitlines())
    assert lines <= README_LINES, f"README.md has {lines} lines: move a part to a page of its own"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    assert broken_links(page) == []


def test_the_pages_include_the_readme_and_every_page_of_docs():
    names = {str(p.relative_to(ROOT)) for p in PAGES}
    assert {"README.md", "CONTRIBUTING.md", "benchmarks/README.md", "docs/results.md", "docs/api.md"} <= names
    assert {f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md")} <= names


def test_the_link_check_finds_a_missing_file_and_a_missing_heading(tmp_path):
    page = tmp_path / "page.md"
    (tmp_path / "other.md").write_text("# The capstone's time to accuracy\n\n## `make run`: seconds\n")
    page.write_text(
        "[a](other.md#the-capstones-time-to-accuracy) [b](other.md#make-run-seconds) [c](https://x.org/y)\n"
        "[d](missing.md) [e](other.md#nowhere) ![img](pic.png)\n```\n[f](in-code.md)\n```\n"
    )
    found = broken_links(page)
    assert len(found) == 2 and found[0].startswith("missing.md") and "#nowhere" in found[1]


def test_the_api_page_lists_exactly_the_public_names():
    text = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    section = text.split("## Public names", 1)[1].split("\n## ", 1)[0]
    listed = re.findall(r"^- [^:`]+: (.+)$", section, flags=re.M)
    names = [name for line in listed for name in re.findall(r"`(\w+)`", line)]
    assert sorted(names) == sorted(mgtutor.__all__), "docs/api.md and mgtutor/__init__.py's _EXPORTS differ"
    assert len(names) == len(set(names)), "a name listed twice in docs/api.md"
