"""The `provmap` command: one parser with every subcommand, each defined in this package.

map (provenance only, all-TVM), compile / run / trust / inspect / lookup (the artifact), bench,
the workbench: compare, bisect, profile, report, annotate, explain; overlays (Model Explorer);
and rpc-server."""

from __future__ import annotations

import argparse
import importlib
import os
import sys


#: Which function adds each command's parser, and the commands it adds.  A command line that
#: names one builds its part only: the others' modules cost every command ~60 ms of imports
#: (tests/test_cli_usage.py checks the table against the full parser).
COMMANDS = {
    ("map", "add_map_command"): ("map",),
    ("artifact", "add_artifact_commands"): ("compile", "run", "trust", "inspect", "lookup"),
    ("backends", "add_backends_command"): ("backends",),
    ("bench", "add_bench_command"): ("bench",),
    ("workbench", "add_workbench_commands"): ("compare", "bisect", "profile", "report",
                                              "annotate", "explain"),
    ("vendor", "add_vendor_commands"): ("overlays",),
    ("rpc", "add_rpc_commands"): ("rpc-server",),
}


def build_parser(words: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser for `words` (every command's when None, or when no command is named: the
    root's --help and its did-you-mean need them all)."""
    # Imported here, not at the top: the console script imports this module before main() runs,
    # and Ctrl-C during those imports would be a traceback instead of one line.
    from .parser import Parser

    p = Parser(prog="provmap", description=(
        "Partition ONNX models across inference backends through TVM Relax, with a source map "
        "from every kernel back to ONNX nodes."))
    p.add_argument("--version", action=_Version, nargs=0, help="show the version and exit")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="also show the libraries' own log lines (TVM's C++ warnings), which "
                   "are kept off stderr otherwise")
    sub = p.add_subparsers(dest="command", required=True)
    named = _command_word(words or [])
    for (module, adder), commands in COMMANDS.items():
        if named is None or named in commands:
            getattr(importlib.import_module(f"{__package__}.{module}"), adder)(sub)
    return p


def _command_word(words: list[str]) -> str | None:
    """The command `words` name (after the root's -v), if it is one of COMMANDS'."""
    from .common import command_at

    i = command_at(words)
    word = words[i] if i < len(words) else None
    return word if any(word in c for c in COMMANDS.values()) else None


class _Version(argparse.Action):
    """`--version`, read from the installed package's metadata only when asked: importlib.metadata
    costs every other command ~30 ms of start-up (argparse's own action takes the text when the
    parser is built)."""

    def __call__(self, parser, namespace, values, option_string=None):
        from .common import version_text

        print(f"provmap {version_text()}")
        parser.exit()


def main(argv=None) -> int:
    """Parse and run.  Start-up (imports and parsing) comes before dispatch's own handler is in
    place: Ctrl-C there is one line, and so is a broken installation (a library failing to
    import while the parser is built)."""
    from provmap.provenance.util import interrupt

    interrupt.install()  # before the imports below: Ctrl-C there is one line too
    try:
        from .bench import step_args, suite_words
        from .common import dispatch
        from .native_log import native_log_filtered
        from .parser import UsageError
    except KeyboardInterrupt:
        print("provmap: interrupted", file=sys.stderr)
        return _interrupted_exit(argv)
    try:
        words = list(sys.argv[1:] if argv is None else argv)
        # `provmap bench STEP ...`: the step's own module reads the rest (provmap.bench.steps)
        args = step_args(words) or build_parser(words).parse_args(suite_words(words))
        interrupt.raise_if_interrupted()  # a Ctrl-C an import's callback could not raise
        if args.command != "trust":  # the rest need numpy, whose import prints a Ctrl-C
            with interrupt.deferred():
                importlib.import_module("numpy")
    except UsageError:  # already one line (and the JSON object under --json)
        return 2
    except KeyboardInterrupt:
        print("provmap: interrupted", file=sys.stderr)
        return _interrupted_exit(argv)
    except Exception as e:  # noqa: BLE001 - argparse's own errors are SystemExit, not this
        from provmap.provenance.util.errors import first_line

        from .common import one_line

        print(f"provmap: error: cannot start: {one_line(first_line(e, with_type=True))} "
              "(is the installation complete?)", file=sys.stderr)
        return 2
    try:
        with native_log_filtered(enabled=not args.verbose):
            rc = dispatch(args)
    except KeyboardInterrupt:  # between parsing and dispatch's own handler
        print("provmap: interrupted", file=sys.stderr)
        rc = 130
    if rc == 130:
        return _interrupted_exit(argv)
    if argv is None:
        interrupt.at_teardown()
        _leave(rc)
    return rc


def _interrupted_exit(argv) -> int:
    """Exit status 130 for an interrupted command.  A KeyboardInterrupt that reached code a
    library ran through Python's C API (during an import) marks the interpreter, which then
    ends the process by SIGINT (status -2) whatever main returns: seen once in five Ctrl-Cs
    during start-up.  So the command-line process (argv None) runs its exit handlers (the
    measuring workers' finalizers) and leaves with 130 itself; a caller of main([...]) just
    gets 130 back."""
    if argv is not None:
        return 130
    _leave(130)


def _leave(rc: int) -> None:
    """End the command-line process with `rc` once its exit handlers ran, without the
    interpreter's finalization: that restores SIGINT's default action, and a Ctrl-C during the
    libraries' slow teardown (OpenVINO's threads) then killed a finished command silently with
    status -2 (issue 36: bisect had printed its verdict).  Output is flushed first; every file
    provmap writes is complete and renamed into place before this point."""
    import atexit

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):  # what the exit handlers said
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(rc)


if __name__ == "__main__":
    sys.exit(main())
