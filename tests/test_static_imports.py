"""Every import resolves for a static analyzer, as it must in an editor (issue 24).

An editor's "go to definition" is pyright (VS Code) or a tool like it: it reads files and
`.pth` path lines and never runs an import hook.  Under the old package-dir mapping, setuptools'
editable install was such a hook, and not one cross-floor `provmap.*` import resolved.  These
tests run basedpyright, pinned in `[dev]`, with type checking off and only its import rules on
(`[tool.basedpyright]` in pyproject.toml): once over the repository as an editor opens it, and
once from a directory outside it, where only the installed package can answer."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
IMPORT_RULES = {"reportMissingImports", "reportMissingModuleSource"}


def _basedpyright() -> str:
    exe = shutil.which("basedpyright", path=str(Path(sys.executable).parent)) or \
        shutil.which("basedpyright")
    assert exe, "basedpyright is not installed: it is in the [dev] extra (pip install -e '.[dev]')"
    return exe


def _unresolved(cwd: Path, *args: str) -> tuple[dict, list[str]]:
    r = subprocess.run([_basedpyright(), "--outputjson", "--pythonpath", sys.executable, *args],
                       cwd=cwd, capture_output=True, text=True, timeout=600)
    try:
        report = json.loads(r.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"basedpyright gave no report (exit {r.returncode}): {r.stderr[-2000:]}")
    bad = [f"{Path(d['file']).relative_to(cwd) if d['file'].startswith(str(cwd)) else d['file']}:"
           f"{d['range']['start']['line'] + 1}: {d['message']}"
           for d in report["generalDiagnostics"] if d.get("rule") in IMPORT_RULES]
    return report["summary"], bad


def test_every_import_in_the_repository_resolves():
    summary, bad = _unresolved(ROOT)
    assert summary["filesAnalyzed"] > 100, summary  # the config's include really covered the tree
    assert not bad, f"{len(bad)} unresolved import(s):\n" + "\n".join(bad)


def test_the_installed_package_resolves_from_outside_the_checkout(tmp_path):
    """What another project's editor sees: every provmap module named by its import path,
    resolved through the environment alone (the editable install's .pth line, or a wheel)."""
    from test_layers import modules

    names = sorted(modules()) + ["provmap", "provmap.cli.main"]
    (tmp_path / "user.py").write_text("".join(f"import {n}\n" for n in names))
    (tmp_path / "pyrightconfig.json").write_text(json.dumps(
        {"typeCheckingMode": "off", "reportMissingImports": "error",
         "reportMissingModuleSource": "error"}))
    summary, bad = _unresolved(tmp_path, "user.py")
    assert summary["filesAnalyzed"] == 1, summary
    assert not bad, f"{len(bad)} of {len(names)} provmap modules unresolved:\n" + "\n".join(bad)


def test_the_check_sees_an_unresolved_import(tmp_path):
    """The check is worth something only if a broken import makes it fail."""
    (tmp_path / "user.py").write_text("import provmap.no_such_floor\nfrom provmap import cli\n")
    (tmp_path / "pyrightconfig.json").write_text(json.dumps(
        {"typeCheckingMode": "off", "reportMissingImports": "error"}))
    _, bad = _unresolved(tmp_path, "user.py")
    assert len(bad) == 1 and "provmap.no_such_floor" in bad[0], bad
