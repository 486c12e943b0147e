"""The layout is the pipeline: floors import only downward, and nothing imports in a circle.

Floors, lowest first: provenance -> runtime_module -> partition -> workbench -> cli; bench sits
beside cli (it may use every floor below, and cli may start it, but nothing below imports
either).  Every import counts, including the ones inside functions: a lazy import upward is
still a dependency upward, and a lazy circle still means two modules that cannot be understood
apart.  Imports under `if TYPE_CHECKING:` count too: a reader and a static analyzer follow them.  The check reads the source with `ast`, so it needs no backend installed."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: package -> folder, as pyproject's package-dir maps them.
FOLDERS = {
    "provmap.provenance": "provenance",
    "provmap.runtime_module": "runtime_module",
    "provmap.partition": "partition",
    "provmap.workbench": "workbench",
    "provmap.cli": "provmap/cli",
    "provmap.bench": "bench",
}
FLOOR = {"provmap.provenance": 0, "provmap.runtime_module": 1, "provmap.partition": 2,
         "provmap.workbench": 3, "provmap.cli": 4, "provmap.bench": 4}
#: Same-floor imports that are allowed between different packages (cli starts the bench).
BESIDE = {("provmap.cli", "provmap.bench")}
OLD_TOP_LEVEL = {"provenance", "partition", "runtime_module", "bench", "workbench"}


def modules() -> dict[str, Path]:
    out = {}
    for pkg, folder in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT / folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            out[".".join([pkg, *parts])] = path
    return out


def imports_of(name: str, path: Path, known: set[str]) -> list[tuple[str, int]]:
    """Every provmap module `name` imports (absolute or relative), with the line."""
    is_pkg = path.name == "__init__.py"
    base = name.split(".") if is_pkg else name.split(".")[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = base[:len(base) - node.level + 1]
                mod = ".".join(anchor + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            # `from pkg import sub` imports the submodule when there is one
            targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in known else mod for a in node.names]
        for t in targets:
            found.append((t, node.lineno))
    return found


def package_of(mod: str) -> str | None:
    return next((p for p in sorted(FOLDERS, key=len, reverse=True)
                 if mod == p or mod.startswith(p + ".")), None)


def graph() -> tuple[dict[str, set[str]], list[str]]:
    mods = modules()
    known = set(mods)
    edges: dict[str, set[str]] = {m: set() for m in mods}
    old = []
    for m, path in mods.items():
        for target, line in imports_of(m, path, known):
            top = target.split(".")[0]
            if top in OLD_TOP_LEVEL:
                old.append(f"{path.relative_to(ROOT)}:{line} imports {target}")
            if target in known and target != m:
                edges[m].add(target)
    return edges, old


def test_no_old_top_level_imports():
    """`provenance`, `partition`, ... exist only as provmap.provenance, provmap.partition, ..."""
    _, old = graph()
    extra = []
    for folder in ("tests", "examples"):
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                         [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level
                         else [])
                extra += [f"{path.relative_to(ROOT)}:{node.lineno} imports {n}" for n in names
                          if n.split(".")[0] in OLD_TOP_LEVEL]
    assert not old + extra, "\n".join(old + extra)


def test_no_upward_imports():
    edges, _ = graph()
    bad = []
    for m, targets in edges.items():
        pm = package_of(m)
        for t in targets:
            pt = package_of(t)
            if pm == pt:
                continue
            if FLOOR[pt] > FLOOR[pm] or (FLOOR[pt] == FLOOR[pm] and (pm, pt) not in BESIDE):
                bad.append(f"{m} (floor {FLOOR[pm]}) imports {t} (floor {FLOOR[pt]})")
    assert not bad, "imports upward or sideways:\n" + "\n".join(sorted(bad))


#: The measuring room inside partition/ (issue 34): it prices what the search room proposes and
#: knows of that room only its vocabulary and the model loader, so the search can change without
#: the measuring and issue 35's pricing can change without the search.
MEASURE_ROOM = "provmap.partition.measure"
MEASURE_MAY_USE = {"provmap.partition.candidate", "provmap.partition.model_source"}


def test_the_measuring_room_uses_only_the_search_rooms_vocabulary():
    edges, _ = graph()
    bad = [f"{m} imports {t}" for m, targets in edges.items()
           if m.startswith(MEASURE_ROOM + ".") or m == MEASURE_ROOM
           for t in targets
           if t.startswith("provmap.partition.") and not t.startswith(MEASURE_ROOM)
           and t not in MEASURE_MAY_USE]
    assert not bad, "\n".join(sorted(bad))
    # and the room exists where docs/layout.md says (an empty room would pass the check above)
    assert {"provmap.partition.measure.measured", "provmap.partition.measure.worker",
            "provmap.partition.measure.contention", "provmap.partition.measure.interleave"} <= set(edges)


def find_cycles(edges: dict[str, set[str]]) -> list[str]:
    cycles, state, stack = [], {}, []

    def visit(m):
        state[m] = "open"
        stack.append(m)
        for t in sorted(edges.get(m, ())):
            if state.get(t) == "open":
                cycles.append(" -> ".join(stack[stack.index(t):] + [t]))
            elif t not in state:
                visit(t)
        stack.pop()
        state[m] = "done"

    for m in sorted(edges):
        if m not in state:
            visit(m)
    return cycles


def test_no_import_circles():
    cycles = find_cycles(graph()[0])
    assert not cycles, "import circles:\n" + "\n".join(cycles)


def test_the_checker_finds_circles():
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a -> b -> c -> a"]
    assert find_cycles({"a": {"b"}, "b": set(), "c": {"a", "b"}}) == []


def test_the_checker_sees_lazy_and_relative_imports(tmp_path):
    """The check would be worthless if it missed the imports that caused the circles it was
    written for (lazy imports inside functions, relative imports, type-only imports)."""
    p = tmp_path / "cost.py"
    p.write_text("def f():\n    from .compile import load_view\n")
    known = {"provmap.partition.compile", "provmap.partition.cost"}
    assert ("provmap.partition.compile", 2) in imports_of("provmap.partition.cost", p, known)
    r = tmp_path / "y.py"
    r.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .cost import A\n")
    assert imports_of("provmap.partition.y", r, known) == [("typing", 1), ("provmap.partition.cost", 3)]
    q = tmp_path / "x.py"
    q.write_text("from ..runtime_module import module\nimport provmap.workbench.compare\n")
    known |= {"provmap.runtime_module.module", "provmap.workbench.compare"}
    got = [t for t, _ in imports_of("provmap.partition.x", q, known)]
    assert sorted(got) == ["provmap.runtime_module.module", "provmap.workbench.compare"]


def test_the_wheel_installs_one_top_level_package(tmp_path):
    """What `pip install .` puts in site-packages: `provmap` and its dist-info, nothing else
    (no top-level `provenance`, `partition`, `bench`... to collide with other packages)."""
    import shutil
    import subprocess
    import sys
    import zipfile

    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    # As the checkout has them: src/provmap and the floors under provmap/ are links.
    for folder in ("src", "provmap", "provenance", "runtime_module", "partition", "workbench",
                   "bench"):
        shutil.copytree(ROOT / folder, src / folder, symlinks=True,
                        ignore=shutil.ignore_patterns("__pycache__", "out"))
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                        "-q", "-w", str(tmp_path / "dist"), str(src)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    [wheel] = (tmp_path / "dist").glob("provmap-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"provmap"}, tops
    # every floor is in it, under provmap/
    for module in ("provmap/__init__.py", "provmap/cli/main.py", "provmap/provenance/importer.py",
                   "provmap/runtime_module/backends/openvino.py", "provmap/partition/collage.py",
                   "provmap/workbench/compare.py", "provmap/bench/suite.py"):
        assert module in names, module
    # the HTML report's page, style and script ship as package data (report_html reads them)
    for asset in ("report.html", "report.css", "report.js"):
        path = f"provmap/workbench/assets/{asset}"
        assert path in names, path
        assert (zipfile.ZipFile(wheel).read(path).decode()
                == (ROOT / "workbench" / "assets" / asset).read_text()), path
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    assert "provmap = provmap.cli.main:main" in zipfile.ZipFile(wheel).read(entry).decode()


#: Files allowed past the size limit, each with its reason (docs/layout.md).  Empty since
#: issue 34: bench/conformance.py gave its exceptions table a module of its own.
LONG_FILES: dict[str, str] = {}
MAX_FILE_LINES = 450
#: Functions in partition/ (the search and the measuring rooms) stay readable as one step each;
#: collage() was 290 lines before issue 34 cut it into its levels.
MAX_PARTITION_FUNCTION_LINES = 120


def test_no_source_file_past_the_size_limit_without_a_reason():
    """Long files mix concepts (issue 15); a file may pass 450 lines only with a stated reason."""
    long = []
    for path in modules().values():
        rel = str(path.relative_to(ROOT))
        n = len(path.read_text().splitlines())
        if n > MAX_FILE_LINES and rel not in LONG_FILES:
            long.append(f"{rel}: {n} lines")
    assert not long, "split these by concept or state why not (LONG_FILES):\n" + "\n".join(long)


def test_no_function_in_partition_past_the_limit():
    long = []
    for name, path in modules().items():
        if not name.startswith("provmap.partition"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_PARTITION_FUNCTION_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {n} lines")
    assert not long, "split these into named steps:\n" + "\n".join(long)
