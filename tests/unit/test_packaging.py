"""The package's promises: pip and conda lists agree, and importing it does no work."""

from __future__ import annotations

import re

import tomllib

import mgtutor
from tests.conftest import ROOT, run_child


def _normalise(requirement: str) -> str:
    return re.sub(r"\s+", "", requirement).lower()


def test_environment_yml_lists_the_same_packages_as_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = {_normalise(r) for r in project["dependencies"] + project["optional-dependencies"]["dev"]}
    lines = (ROOT / "environment.yml").read_text().splitlines()
    pip_section = lines[lines.index("  - pip:") + 1 :]
    listed = {_normalise(line.split("- ", 1)[1]) for line in pip_section if line.strip().startswith("- ")}
    assert listed - {"-e."} == wanted
    assert "-e." in listed  # conda users get mgtutor itself too


def test_import_starts_nothing_heavy():
    loaded = run_child(ROOT / "tests" / "unit" / "light_import_child.py", "mgtutor")["loaded"]
    assert loaded == []


def test_every_public_name_resolves():
    for name in mgtutor.__all__:
        assert getattr(mgtutor, name) is not None, name
    assert "setup_devices" in dir(mgtutor)


def test_the_public_api_is_small_and_the_readme_lists_it():
    # Issue 15: at most 50 names, each listed once in the README's "Public API" section, so
    # a newcomer sees the whole surface in one place; everything else is internal. Issue 24 adds
    # lesson_plan, the check every notebook's first cell makes (notebooks import only public names).
    assert len(mgtutor.__all__) <= 51
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Public API", 1)[1].split("\n## ", 1)[0]
    listed = re.findall(r"`(\w+)`", section)
    assert sorted(set(listed) & set(mgtutor.__all__)) == sorted(mgtutor.__all__)


def test_every_module_is_small_and_in_the_readme_map():
    # Issue 15: one job per module, under 500 lines, each with its line in "How the code is organised".
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## How the code is organised", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"`(\w+)`", section))
    modules = sorted((ROOT / "mgtutor").rglob("*.py"))
    for path in modules:
        lines = len(path.read_text().splitlines())
        assert lines < 500, f"{path.relative_to(ROOT)} has {lines} lines: split it by job"
    unnamed = [p.stem for p in modules if p.stem not in named and p.stem != "__main__"]
    assert not unnamed, f"modules missing from the README's map: {unnamed}"
