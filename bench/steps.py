"""The bench's named steps: `provmap bench STEP [ARGS]` runs one, `provmap bench --list-steps`
lists them, and each writes its record to bench/out/<STEP>/<host>.json and .md (records.py).

Why a registry: the bench had grown into twenty commands, each `python -m
provmap.bench.<module>` with its own -o convention and its own file names, so a reader could
not tell which files were one measurement and a user could not find the command that made a
number.  One table names every step, the module that runs it and what it measures; the record
helper names every record by its step.  Each step keeps its own options in its own module:
the CLI hands the rest of the command line to that module's `main`.

Light on purpose (standard library only): the CLI imports this to read a command line, so a
mistyped step or flag is answered before any backend library loads (tests/test_startup.py)."""

from __future__ import annotations

import argparse
import sys
import textwrap
from dataclasses import dataclass


@dataclass(frozen=True)
class Step:
    module: str          #: provmap.bench.<module> runs it (its main(argv))
    purpose: str         #: one line, for --list-steps
    flag: str = ""       #: a mode of `provmap bench` itself: the option that selects it
    record: bool = True  #: False: a tool beside the steps (writes models or re-renders tables)


#: Every step, in the order a reader meets them in docs/bench.md.  The first three are
#: `provmap bench` itself (suite.py): plain, on the user-sized models, or beside a CPU hog.
STEPS: dict[str, Step] = {
    "latency": Step("suite", "the default: search, build and interleaved latency of every "
                    "strategy, gains, limit, costs, scaling (`provmap bench [MODEL ...]`)"),
    "user_latency": Step("suite", "the same on the seven user-sized models",
                         flag="--user-models"),
    "hog_search": Step("suite", "each cold search beside a one-core CPU hog, its artifact "
                       "measured quietly afterwards", flag="--search-beside-hog"),
    "container": Step("container_run", "a single-partition artifact against its library "
                      "called directly, in paired passes (the 2% item)"),
    "limit": Step("limit_run", "the limit of partitioning alone: profiles, the oracle's own "
                  "plans, cuts priced; no search"),
    "hog_compile": Step("hog_compile", "a user's `provmap compile --strategy collage` beside a "
                        "load that outlasts it"),
    "drift": Step("drift", "how the ONNX Runtime / OpenVINO ratio moves over minutes"),
    "parallelism": Step("parallelism", "how often one CPU runs slower than another (the "
                        "parallelism gauge's calibration)"),
    "shape_sweep": Step("shape_sweep", "one artifact per strategy timed across a shape "
                        "profile, and a KV-cache decoder's decode steps"),
    "dynamic_map": Step("dynamic_map", "`provmap map` without a shape against a static map"),
    "memory": Step("memory_scaling", "peak memory and time of compile, map and run against "
                   "a decoder's weight bytes"),
    "compile_scaling": Step("compile_scaling", "compile time against node count (chains and "
                            "GPT-2-style decoders)"),
    "startup": Step("startup", "wall time of the commands that should answer at once"),
    "remote": Step("remote_scaling", "a cold search through a TVM RPC tracker, one server "
                   "and two"),
    "conformance": Step("conformance", "onnx's operator test cases through each library and "
                        "through provmap"),
    "corpus": Step("corpus", "every model folder through every backend: runs / refused / "
                   "wrong"),
    "torch_corpus": Step("torch_corpus", "PyTorch architectures exported both ways, through "
                         "map and every strategy ([torch] extra)"),
    "user_corpus": Step("user_corpus", "models as users' own tools leave them, through the "
                        "CLI ([torch] extra)"),
    "tuned_collage": Step("tuned_collage", "Collage over MetaSchedule-tuned TVM, run twice on "
                          "one tuning database"),
    "tuning_anchor": Step("tuning_anchor", "tuning a fused region as one task against its "
                          "anchor operator alone"),
    "export_corpus": Step("export_corpus", "export the PyTorch corpus as static ONNX files "
                          "for `provmap bench MODEL ...`", record=False),
    "user_models": Step("user_bench", "export the user-sized models (what --user-models does "
                        "first)", record=False),
    "report": Step("report", "re-render a latency record's tables (and docs/results.md's)",
                   record=False),
}


def listing() -> str:
    """`provmap bench --list-steps`: one line a step, then the tools, then where records go."""
    width = max(map(len, STEPS))
    lines = ["Steps (`provmap bench STEP --help` for each; records in "
             "bench/out/STEP/HOST.json and .md):"]
    for tools in (False, True):
        if tools:
            lines += ["", "Tools (no record):"]
        for name, s in STEPS.items():
            if s.record == tools:
                continue
            how = f" (= `provmap bench {s.flag}`)" if s.flag else ""
            lines.append(textwrap.fill(f"{s.purpose}{how}", 100, initial_indent=(
                f"  {name:<{width}}  "), subsequent_indent=" " * (width + 4)))
    return "\n".join(lines) + "\n"


def command(module: str) -> str:
    """How a user runs the step a module implements: `provmap bench NAME`."""
    name = next((n for n, s in STEPS.items() if s.module == module and not s.flag), module)
    return "provmap bench" if name == "latency" else f"provmap bench {name}"


class StepParser(argparse.ArgumentParser):
    """A step's own options, named as the CLI runs it.  A mistake is one line and exit status
    2, as every other provmap command answers one (argparse printed its usage block), and no
    option is taken by a prefix of its name (the CLI's rule since issue 36).  A step that
    writes a record has -o (the records' root), checked as the line is read: a run of an hour
    must not end on a directory that cannot take its record."""

    def __init__(self, *args, output: tuple[str, ...] | None = (), **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        self.check_output = output is not None
        if output is not None:
            from .records import DEFAULT_ROOT

            self.add_argument("-o", "--output", *output, dest="output", default=DEFAULT_ROOT,
                              metavar="OUT", help="records' root: writes OUT/<step>/<host>.json "
                              f"and .md (default {DEFAULT_ROOT}; OUT ending in .json: that "
                              "file, .md beside it)")

    def parse_args(self, args=None, namespace=None):
        ns = super().parse_args(args, namespace)
        return self.checked(ns) if self.check_output else ns

    def checked(self, ns: argparse.Namespace) -> argparse.Namespace:
        """ns, once its -o could take a record (records.check_output); else a usage error."""
        from provmap.provenance.util.errors import ProvmapError

        from .records import check_output

        try:
            check_output(ns.output)
        except ProvmapError as e:
            self.error(str(e))
        return ns

    def error(self, message):
        print(f"{self.prog}: error: {message} (see `{self.prog} --help`)", file=sys.stderr)
        raise SystemExit(2)


def parser(module: str, doc: str | None, raw: bool = False,
           output: tuple[str, ...] | None = ()) -> StepParser:
    """The parser a step's main() starts from, with -o (and OUTPUT's other spellings of it;
    None: a tool without a record); its description is the docstring's first paragraph (the
    whole docstring, kept as written, with `raw`)."""
    doc = doc or ""
    return StepParser(prog=command(module), description=doc if raw else doc.split("\n\n")[0],
                      formatter_class=(argparse.RawDescriptionHelpFormatter if raw
                                       else argparse.HelpFormatter), output=output)


def say(message: str) -> None:
    """A step's progress line: stderr, flushed (a step runs for minutes to hours)."""
    print(message, file=sys.stderr, flush=True)


def finish(step: str, args: argparse.Namespace, res: dict, markdown) -> int:
    """Write STEP's record under args.output and print its tables: how a step ends."""
    from .records import write_record

    text = markdown(res)
    write_record(step, args.output, res, text)
    print(text)
    return 0


def run(name: str, argv: list[str]) -> int:
    """Run step NAME's module on argv (the words after the step's name); its exit status,
    also when its parser ends it (--help, a mistake)."""
    import importlib

    module = importlib.import_module(f"provmap.bench.{STEPS[name].module}")
    try:
        return int(module.main(list(argv)) or 0)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
