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
