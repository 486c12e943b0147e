"""argparse, made to keep provmap's error contract: one line on stderr, exit status 2, and under
`--json` the `{"error": ..., "code": 2}` object on stdout that every other error prints.

argparse's own errors printed a usage block and no JSON (`run --repeats 0 --json`, `--jsn`,
`inspec`: issue 36), so a script reading stdout got nothing.  A mistyped subcommand or option
gets a "did you mean" when a known one is close (difflib, as git and pip do)."""

from __future__ import annotations

import argparse
import difflib
import json
import re
import sys


class UsageError(Exception):
    """A command line argparse refused; already printed.  main() turns it into exit status 2
    (not SystemExit, so `main([...])` returns 2 to a caller as every other error does)."""


def _close(word: str, known) -> str:
    near = difflib.get_close_matches(word, sorted(known), n=2, cutoff=0.6)
    return f"; did you mean {' or '.join(near)}?" if near else ""


class _StoreOnce(argparse._StoreAction):
    """A single-valued option given twice (`-o a.provmap -o b.provmap`) kept the last value
    without a word (issue 36): refused, naming both."""

    def __call__(self, parser, namespace, values, option_string=None):
        seen = Parser.seen.setdefault(id(namespace), {})
        if option_string and self.dest in seen:
            parser.error(f"argument {'/'.join(self.option_strings)}: given twice ({seen[self.dest]}"
                         f" and {values}); give it once")
        seen[self.dest] = values
        super().__call__(parser, namespace, values, option_string)


class _FlagOnce(argparse._StoreConstAction):
    """A flag given twice (`--json --json`) was taken without a word, where a single-valued
    option given twice is refused (issue 36's fifth afternoon): refused the same way, so a
    duplicated flag in a script (often a merge of two command lines) is seen."""

    def __call__(self, parser, namespace, values, option_string=None):
        seen = Parser.seen.setdefault(id(namespace), {})
        if option_string and self.dest in seen:
            parser.error(f"argument {'/'.join(self.option_strings)}: given twice; give it once")
        seen[self.dest] = True
        super().__call__(parser, namespace, values, option_string)


class _TrueOnce(_FlagOnce):
    def __init__(self, option_strings, dest, default=False, required=False, help=None):
        super().__init__(option_strings, dest, const=True, default=default, required=required,
                         help=help)


class _FalseOnce(_FlagOnce):
    def __init__(self, option_strings, dest, default=True, required=False, help=None):
        super().__init__(option_strings, dest, const=False, default=default, required=required,
                         help=help)


class Parser(argparse.ArgumentParser):
    """The `provmap` parser and, through add_subparsers, each subcommand's."""

    #: The command line being parsed, for every parser of the tree: a subcommand's error
    #: still needs to know whether --json was asked for.
    argv: list[str] = []
    #: The single-valued options given so far, by namespace (argparse keeps only the value).
    seen: dict[int, dict] = {}

    def __init__(self, *args, **kwargs):
        # no prefixes: `bench --models F.onnx` was read as --models-dir, which only matters
        # with --user-models, and ran the default models for six minutes (issue 36)
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        self.register("action", None, _StoreOnce)
        self.register("action", "store", _StoreOnce)
        self.register("action", "store_true", _TrueOnce)
        self.register("action", "store_false", _FalseOnce)

    def parse_args(self, args=None, namespace=None):
        Parser.argv = list(sys.argv[1:] if args is None else args)
        Parser.seen = {}
        return super().parse_args(args, namespace)

    def error(self, message):
        prog = self.prog
        sub = self._subcommand()
        if prog == "provmap" and sub is not None:  # unrecognized options: the root says it
            prog = sub.prog
        hint = _did_you_mean(message, sub or self)
        line = f"{message}{hint} (see `{prog} --help`)"
        print(f"{prog}: error: {line}", file=sys.stderr)
        if "--json" in Parser.argv:
            try:
                print(json.dumps({"error": line, "code": 2}), flush=True)
            except (OSError, ValueError):
                pass
        raise UsageError(line)

    def _subcommand(self):
        """The subcommand's parser named on the command line, if any (for the root parser)."""
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                for word in self.argv:
                    if word in action.choices:
                        return action.choices[word]
        return None


def _did_you_mean(message: str, parser: argparse.ArgumentParser) -> str:
    m = re.search(r"invalid choice: '([^']*)'", message)
    if m:
        for action in parser._actions:
            if action.choices and m.group(1) not in action.choices:
                hint = _close(m.group(1), list(action.choices))
                if hint:
                    return hint
        return ""
    m = re.search(r"unrecognized arguments: (\S+)", message)
    if m and m.group(1).startswith("-"):
        # never "--help" for a word like "--model": the command takes no such option, and
        # help is what the line's end already offers (issue 36)
        options = [s for a in parser._actions for s in a.option_strings
                   if a.help != argparse.SUPPRESS and s not in ("-h", "--help")]
        return _close(m.group(1).split("=", 1)[0], options)
    return ""
