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


#: A result cited by path: `bench/out/<...>`, and, for a run the tree no longer keeps, the commit
#: that still has it right after: `bench/out/user/container_2026-11-28c.md @ 36e3049`.
_CITED = re.compile(r"bench/out(?:/[\w.*-]+)*(?<![.])(`?\s*@\s*([0-9a-f]{7,40}))?")


def _citations():
    for doc in [DOCS.parent / "README.md", *sorted(DOCS.glob("*.md"))]:
        for m in _CITED.finditer(doc.read_text()):
            path = m.group(0).split("@")[0].strip().rstrip("`")
            yield doc.name, path, m.group(2)


def test_every_cited_result_is_in_the_tree_or_named_with_its_commit():
    """README and docs cite results by path (issue 53): a path without a commit is a record the
    tree keeps (bench/out holds the latest run of each step on each host); an older run is
    cited as `PATH @ COMMIT`, and that commit has that file."""
    import shutil
    import subprocess

    cited = list(_citations())
    missing = [f"{doc}: {p}" for doc, p, c in cited if not c and "*" not in p
               and not (DOCS.parent / p).exists()]
    assert not missing, "cited but not in the tree (cite it `@ <commit>`):\n" + "\n".join(missing)
    refs = sorted({f"{c}:{p}" for _, p, c in cited if c})
    if not refs or not shutil.which("git") or not (DOCS.parent / ".git").exists():
        return
    r = subprocess.run(["git", "-C", str(DOCS.parent), "cat-file", "--batch-check"],
                       input="\n".join(refs) + "\n", capture_output=True, text=True, timeout=60)
    gone = [line.split()[0] for line in r.stdout.splitlines() if line.endswith(" missing")]
    assert r.returncode == 0 and not gone, "no such file at that commit:\n" + "\n".join(gone)
