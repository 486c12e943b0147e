"""Every Python example in the docs runs as written (a documented call that returns [] is a bug)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"
# Fragments of the plugin walkthrough are exercised by tests/test_plugin_backend.py instead.
RUNNABLE = ["artifact.md", "map-schema.md", "../README.md"]


def _blocks(name):
    text = (DOCS / name).read_text()
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


@pytest.mark.parametrize("name", RUNNABLE)
def test_python_examples_run(name, tmp_path, monkeypatch):
    blocks = _blocks(name)
    assert blocks, f"docs/{name} has no Python example"
    monkeypatch.chdir(tmp_path)
    for code in blocks:
        exec(compile(code, f"docs/{name}", "exec"), {"__name__": "docs_example"})


def test_readme_is_a_front_page_and_the_tables_live_in_docs():
    """README stays a front page (issue 34): short, its doc table names every docs/*.md that
    exists, and the bench tables `provmap bench --readme` rewrites are in docs/results.md, whose
    image link resolves from docs/."""
    from provmap.bench.report import END, START

    readme = (DOCS.parent / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    named = set(re.findall(r"`docs/([\w-]+\.md)`", readme))
    assert named == {p.name for p in DOCS.glob("*.md")}, named ^ {p.name for p in DOCS.glob("*.md")}
    assert "<!-- ci: setup -->" in readme and "<!-- ci: test -->" in readme
    assert START not in readme and END not in readme
    results = (DOCS / "results.md").read_text()
    assert results.count(START) == 1 and results.count(END) == 1
    block = results.split(START, 1)[1].split(END, 1)[0]
    [image] = re.findall(r"!\[[^]]*\]\(([^)]+)\)", block)
    assert (DOCS / image).resolve().is_file(), image
