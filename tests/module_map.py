"""Writes the table of tests/README.md: for every provmap module, the test files that use it.

A newcomer looking for a module's tests should not have to guess from names (about one module
in five has a test_<module>.py).  The table is read from the tests themselves, so it says what
they use, not what someone once meant them to: a test file counts for a module it imports
(`import`, `from ... import`, also inside functions) or names as a string (`-m provmap.cli.main`,
a `monkeypatch.setattr("provmap.x.y.name", ...)` target).  Helper modules (cli_runner,
backend_cases, ...) are listed beside the test files, with how many test files import them.

    python3 tests/module_map.py           # print the table
    python3 tests/module_map.py --write   # replace the table in tests/README.md

Reads the source with `ast` (through test_layers, which knows the folders), so it needs no
backend installed.  The README is a plain file: no test checks it against this script.
"""

from __future__ import annotations

import ast
import re
import sys
from collections import defaultdict
from pathlib import Path

from test_layers import ROOT, imports_of, modules

TESTS = Path(__file__).resolve().parent
README = TESTS / "README.md"
BEGIN, END = "<!-- module-map: begin -->", "<!-- module-map: end -->"
NOT_HELPERS = {"conftest.py", Path(__file__).name}
#: Checks of the whole tree (the floors, every import resolving): they name every package, so
#: listing them beside each module would say nothing.  README says what they check.
WHOLE_TREE = {"test_layers.py", "test_static_imports.py"}
MOST = 6  # names in one cell


def all_modules() -> dict[str, Path]:
    """Every provmap module: the floors (as test_layers reads them) and the top package."""
    mods = {"provmap": ROOT / "provmap" / "__init__.py",
            "provmap.__main__": ROOT / "provmap" / "__main__.py"}
    mods.update(modules())
    return {m: p for m, p in mods.items() if p.is_file() and not _only_a_docstring(p)}


def _only_a_docstring(path: Path) -> bool:
    """A package's __init__.py that holds nothing to test (it only marks the folder)."""
    body = ast.parse(path.read_text()).body
    return all(isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant) for n in body)


def _named_in_strings(path: Path, known: dict[str, Path]) -> set[str]:
    """Modules a string literal names whole, or names with one attribute after a module file,
    or imports as code run by another interpreter (`python -c "from provmap.cli.main import
    main; ..."`)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
            continue
        s = node.value
        found |= {m for m in re.findall(r"(?:from|import)\s+(provmap[\w.]*)", s) if m in known}
        if s in known:
            found.add(s)
            continue
        mod, _, attr = s.rpartition(".")
        if mod in known and known[mod].name != "__init__.py" and attr.isidentifier():
            found.add(mod)
    return found


def subcommands(known: dict[str, Path]) -> dict[str, str]:
    """CLI subcommand -> the provmap.cli module that defines it (`sub.add_parser("trust", ...)`)."""
    out = {}
    for m, path in known.items():
        if not m.startswith("provmap.cli."):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "add_parser" and node.args
                    and isinstance(node.args[0], ast.Constant)):
                out[node.args[0].value] = m
    return out


def _commands_run(path: Path, commands: dict[str, str]) -> set[str]:
    """The CLI modules whose subcommands a test runs: a call whose first argument is a
    subcommand's name, alone or first in a list (`provmap("trust", "--list")`,
    `main(["compile", ...])`), or a subcommand after the module in an argv list
    (`[sys.executable, "-m", "provmap.cli.main", "inspect", ...]`)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        first = None
        if isinstance(node, ast.Call) and node.args:
            first = node.args[0]
            if isinstance(first, (ast.List, ast.Tuple)) and first.elts:
                first = first.elts[0]
        elif isinstance(node, (ast.List, ast.Tuple)):
            consts = [e.value if isinstance(e, ast.Constant) else None for e in node.elts]
            if "provmap.cli.main" in consts[:-1]:
                first = node.elts[consts.index("provmap.cli.main") + 1]
        if isinstance(first, ast.Constant) and first.value in commands:
            found.add(commands[first.value])
    return found


def uses(path: Path, known: dict[str, Path], commands: dict[str, str]) -> set[str]:
    """The provmap modules one file of tests/ imports or names, and the CLI modules of the
    subcommands it runs (when it runs the CLI at all)."""
    imported = {t for t, _ in imports_of(path.stem, path, set(known)) if t in known}
    used = imported | _named_in_strings(path, known)
    runs_cli = "provmap.cli.main" in used or any(
        t == "cli_runner" for t, _ in imports_of(path.stem, path, set()))
    return used | (_commands_run(path, commands) if runs_cli else set())


def importers_of(known: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the provmap modules that import it (an untested module may still run under
    the tests of one of those)."""
    out: dict[str, set[str]] = defaultdict(set)
    for m, path in known.items():
        for t, _ in imports_of(m, path, set(known)):
            if t in known and t != m:
                out[t].add(m)
    return out


def nearest_tested(m: str, importers: dict[str, set[str]], users) -> set[str]:
    """The tested modules through which an untested one runs: up its importers, stopping at
    each tested one (`provmap.cli.trust` runs under the tests of `provmap.cli.main`)."""
    found, seen, todo = set(), {m}, [m]
    while todo:
        for i in importers[todo.pop()]:
            if i in seen:
                continue
            seen.add(i)
            (found.add if users[i] else todo.append)(i)
    return found


def helper_users() -> dict[str, int]:
    """Helper module -> how many test files import it."""
    helpers = {p.stem for p in TESTS.glob("*.py")
               if not p.name.startswith("test_") and p.name not in NOT_HELPERS}
    count: dict[str, int] = defaultdict(int)
    for path in TESTS.glob("test_*.py"):
        for t, _ in imports_of(path.stem, path, set()):
            if t.split(".")[0] in helpers:
                count[t.split(".")[0]] += 1
    return {h: count.get(h, 0) for h in helpers}


def table() -> str:
    known = all_modules()
    commands = subcommands(known)
    users: dict[str, list[str]] = defaultdict(list)
    for path in sorted(TESTS.glob("test_*.py")):
        if path.name in WHOLE_TREE:
            continue
        for m in uses(path, known, commands):
            users[m].append(f"`{path.name}`")
    counts = helper_users()
    for h in sorted(counts):
        for m in uses(TESTS / f"{h}.py", known, commands):
            users[m].append(f"`{h}.py` (helper, {counts[h]} files)")
    importers = importers_of(known)
    rows = ["| module | source | tests |", "|---|---|---|"]
    for m in sorted(known):
        src = known[m].relative_to(ROOT)
        named = re.compile(rf"`test_{_stem(m)}(_\w+)?\.py`")  # named after the module: first
        tested_by = _some(sorted(users[m], key=lambda u: (not named.match(u), u)))
        if not tested_by:
            via = sorted(nearest_tested(m, importers, users))
            runs_under = _some([f"`{i}`" for i in via], 3)
            tested_by = "**none**" + (f" (runs under the tests of {runs_under})" if via else "")
        rows.append(f"| `{m}` | `{src}` | {tested_by} |")
    untested = sum(1 for m in known if not users[m])
    rows.append("")
    rows.append(f"{len(known)} modules, {untested} used by no test file or helper (**none**).")
    return "\n".join(rows)


def _stem(module: str) -> str:
    return module.rpartition(".")[2].lstrip("_")


def _some(names: list[str], most: int = MOST) -> str:
    """The first `most` names, and how many more: a row stays readable for a module that half
    the suite imports (the files named after the module come first)."""
    more = len(names) - most
    return ", ".join(names[:most]) + (f" and {more} more" if more > 0 else "")


def main(argv: list[str]) -> int:
    text = table()
    if "--write" not in argv:
        print(text)
        return 0
    readme = README.read_text()
    head, _, rest = readme.partition(BEGIN)
    _, _, tail = rest.partition(END)
    README.write_text(f"{head}{BEGIN}\n{text}\n{END}{tail}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
