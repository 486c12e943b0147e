"""What every `provmap` subcommand shares: option spellings, progress lines, input loading,
and `dispatch`, which turns any ProvmapError or OSError into one line on stderr.

Data goes to stdout (human text, or one JSON object with --json); progress and errors go to
stderr.  Any ProvmapError is one line naming the file or ONNX node and exit status 2; no output
file is left behind because every file is written to a temp path and renamed.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from typing import TYPE_CHECKING

from provmap.provenance.util.errors import ProvmapError, first_line

from .term_text import term_safe  # noqa: F401 - the one escaping helper, used here and re-exported

if TYPE_CHECKING:  # pragma: no cover  (numpy is imported where arrays are read: start-up)
    import numpy as np


def command_at(words: list[str]) -> int:
    """Where the command word is in a command line: past the root's -v/--verbose (the only
    option that may precede it and still name a command)."""
    i = 0
    while i < len(words) and words[i] in ("-v", "--verbose"):
        i += 1
    return i


def say_progress(msg: str) -> None:
    print(f"provmap: {term_safe(msg)}", file=sys.stderr, flush=True)


def warn(lines) -> None:
    """Warnings about the model (the artifact's manifest "warnings"), one line each on stderr."""
    for line in lines or ():
        print(f"provmap: warning: {term_safe(line)}", file=sys.stderr, flush=True)


MODEL_HELP = ("ONNX file, or bundled:NAME (resnet50, squeezenet, vgg19, inception_v1, "
              "bvlc_alexnet, densenet121, inception_v2, shufflenet, zfnet512, transformer)")


def _number(kind, low, strict, what, high=None):
    """An argparse type: `kind` (int or float) at least `low` (above it if `strict`), and at
    most `high` if given, so a bad count or budget is refused when the command line is read,
    before any model loads.  Only ASCII digits: Python's int() also takes other scripts'."""
    def convert(text):
        try:
            if not text.isascii():
                raise ValueError(text)
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if v != v or v in (float("inf"), float("-inf")) or (v <= low if strict else v < low) \
                or (high is not None and v > high):
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}")
        return v
    convert.__name__ = what  # argparse names the type in its messages
    return convert


#: Counts that must be >= 1 (timed runs), counts that may be 0 (warm-up runs, "0: all"),
#: and times or tolerances that may be 0 but never negative.
positive_int = _number(int, 0, True, "a whole number >= 1")
#: Timed runs: `profile --repeats 99999999999999999999` ran until killed.
repeats = _number(int, 0, True, "a whole number from 1 to 1000000", high=1_000_000)
count = _number(int, 0, False, "a whole number >= 0")
#: Untimed runs: `run --warmup 100000000` started three days of work (issue 36).
warmups = _number(int, 0, False, "a whole number from 0 to 1000000", high=1_000_000)
seconds = _number(float, 0.0, False, "a number of seconds >= 0")
non_negative = _number(float, 0.0, False, "a number >= 0")


_port_in_range = _number(int, 0, True, "a port number (1-65535)")


def tcp_port(text):
    v = _port_in_range(text)
    if v > 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number (1-65535)")
    return v


tcp_port.__name__ = "a port number (1-65535)"


def budget(text):
    """--search-budget: seconds >= 0, or "none" for no limit."""
    if text.strip().lower() in ("none", "unlimited"):
        return None
    return seconds(text)


budget.__name__ = "a number of seconds >= 0 or none"


def backend_list(text):
    """--backends: `--backends ""` searched the default backends without a word, and
    `a,,b` named an empty one (issue 36)."""
    if not text.strip() or any(not part.strip() for part in text.split(",")):
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of backends")
    return text


backend_list.__name__ = "a comma-separated list of backends"


def add_random_options(parser, what="random inputs") -> None:
    """--seed, and --random as an accepted no-op: random inputs are what every command uses
    when --inputs is not given (run used to require --random, compare and profile refused it)."""
    parser.add_argument("--random", action="store_true",
                        help=f"use {what} of the right shapes (the default without --inputs)")
    parser.add_argument("--seed", type=count, default=None,
                        help="seed of the random inputs (default 0)")


def add_input_shape_option(parser) -> None:
    """`--input-shape NAME=1x3x224x224`, repeatable, on every command that imports a model."""
    parser.add_argument("--input-shape", action="append", default=[], metavar="NAME=DIMS",
                        help="an input's shape, e.g. input=1x3x224x224, an axis may be a range "
                             "MIN..MAX[@OPT] (input_ids=1x1..512@128; opt defaults to max) "
                             "(repeatable; needed when the model leaves a dimension symbolic)")
    parser.add_argument("--dim", action="append", default=[], metavar="SYMBOL=SIZE|MIN..MAX",
                        help="a symbolic dimension of the model by its name, on every input "
                             "naming it: a size (batch=1) or a range served by one artifact "
                             "(seq=1..512@128; opt, what the search measures at, defaults to "
                             "max) (repeatable)")


def add_trust_option(parser) -> None:
    parser.add_argument("--trust", action="store_true",
                        help="run native code (TVM partitions) from this artifact although this "
                        "machine did not build it (see `provmap trust`)")


def note_needless_trust(mod, trust: bool) -> None:
    """`--trust` on an artifact with no native code was taken without a word (issue 36's fifth
    afternoon), so a user believed it had vouched for something: said once, not refused, as a
    script may pass --trust to every artifact it runs."""
    from provmap.runtime_module.trust import loads_native_code

    if trust and not any(loads_native_code(p.get("backend")) for p in mod.manifest["partitions"]):
        warn([f"--trust: {mod.path} holds no native code (its partitions run on "
              f"{', '.join(sorted({p['backend'] for p in mod.manifest['partitions']})) or 'none'}"
              "), so there was nothing to trust"])


def parse_backend_options(items) -> dict:
    opts: dict[str, dict] = {}
    for item in items or ():
        key, eq, value = item.partition("=")
        backend, dot, name = key.partition(".")
        if not eq or not dot:
            raise ProvmapError(f"--backend-option {item!r}: expected BACKEND.OPTION=VALUE "
                               "(e.g. onnxruntime.threads=2)")
        have = opts.setdefault(backend, {})
        if name in have and have[name] != value:  # the last one used to win without a word
            raise ProvmapError(f"--backend-option {backend}.{name} given twice ({have[name]!r} "
                               f"and {value!r}); give it once")
        have[name] = value
    return opts


def only_with(args, needed: str, present: bool, *flags) -> None:
    """Options that only act beside another were taken and ignored (issue 36's fourth
    afternoon: `report --repeats 50` profiled nothing, `explain --model m.onnx` read nothing),
    as search flags under single: were: refused in one line."""
    given = [flag for flag, on in flags if on]
    if given and not present:
        raise ProvmapError(f"{'/'.join(given)} appl{'ies' if len(given) == 1 else 'y'} only "
                           f"with {needed}; without it {'it' if len(given) == 1 else 'they'} "
                           "would be ignored")


def check_input_names(view, given: dict, path: str) -> None:
    """The model's run-time inputs and the .npz's arrays, name for name, in one line."""
    consts = {t.name for t in view.model.graph.initializer}
    need = [i.name for i in view.model.graph.input if i.name not in consts]
    missing, extra = [n for n in need if n not in given], [n for n in given if n not in need]
    if missing or extra:
        raise ProvmapError(f"--inputs {path}: " + "; ".join(
            ([f"no array for input(s) {', '.join(map(repr, missing))}"] if missing else [])
            + ([f"array(s) {', '.join(map(repr, extra))} name no input of the model (it takes "
                f"{', '.join(map(repr, need)) or 'none'})"] if extra else [])))


def check_inputs_choice(args) -> None:
    """--random with --inputs contradict each other; said before anything loads."""
    if getattr(args, "random", False) and getattr(args, "inputs", None):
        raise ProvmapError("give either --inputs FILE.npz or --random, not both")
    if getattr(args, "inputs", None) and getattr(args, "seed", None) is not None:
        # the seed of random inputs that are not used was taken and ignored (issue 36)
        raise ProvmapError("--seed applies to random inputs; with --inputs FILE.npz it would "
                           "be ignored")
    if hasattr(args, "seed") and args.seed is None:
        args.seed = 0


def _is_text(head: bytes) -> bool:
    import codecs

    try:  # not final: the 512 bytes may end inside a character
        codecs.getincrementaldecoder("utf-8")().decode(head, final=False)
    except UnicodeDecodeError:
        return False
    return b"\0" not in head


def load_inputs(path: str):
    """The --inputs file with its zip directory and array headers read and checked, its data
    not yet (`NpzInputs.arrays`, once the model's inputs are known: cli/npz_inputs.py)."""
    if not os.path.exists(path):
        raise ProvmapError(f"{path}: no such inputs file")
    if os.path.isdir(path):
        raise ProvmapError(f"{path}: a directory, not an .npz file of input arrays")
    with open(path, "rb") as f:
        head = f.read(512)
    if head[:2] != b"PK" and head.lstrip()[:1] == b"[" and path.lower().endswith(".json"):
        raise ProvmapError(f"{path}: a JSON file: --inputs reads an .npz of input arrays; a "
                           "Polygraphy inputs file (what --save-inputs FILE.json writes) is for "
                           "`polygraphy run --load-inputs`; write the inputs with "
                           "--save-inputs FILE.npz to feed them back here")
    if head[:2] != b"PK":  # np.load takes anything else for a pickle and says so
        what = ("a single .npy array" if head[:6] == b"\x93NUMPY" else
                "an empty file" if not head else
                "a text file" if _is_text(head) else "not a zip archive")
        raise ProvmapError(f"{path}: not a valid .npz file of input arrays ({what}); write "
                           "one with numpy.savez(path, NAME=array, ...)")
    from .npz_inputs import NpzInputs

    return NpzInputs(path)


def read_json_file(path: str, what: str):
    """A JSON file the user names (a profile, compare's errors): a regular file (a FIFO would
    hang the read), parsed with nesting bounded; every failure one line naming the file."""
    import stat

    from provmap.runtime_module.artifact_schema import parse_json

    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise ProvmapError(f"{path}: not a regular file (the {what} JSON)")
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ProvmapError(f"{path}: cannot read the {what} JSON: {e.strerror or e}") from None
    return parse_json(data, f"{path}: the {what} JSON")


def output_stats(a: np.ndarray) -> dict:
    """Per-output summary, as Polygraphy prints it: a glance tells NaNs and blow-ups apart."""
    import numpy as np

    out = {"shape": list(a.shape), "dtype": str(a.dtype)}
    if a.dtype.kind in "fc" or str(a.dtype) == "bfloat16":
        x = np.asarray(a, dtype=np.float64) if a.dtype.kind != "c" else np.abs(a)
        finite = x[np.isfinite(x)]
        out.update({"nan": int(np.isnan(x).sum()), "inf": int(np.isinf(x).sum())})
    elif a.dtype.kind in "iub":
        finite = np.asarray(a, dtype=np.float64)
    else:
        return out
    if finite.size:
        out.update({"min": float(finite.min()), "max": float(finite.max()),
                    "mean": float(finite.mean())})
    return out


def version_text() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("provmap")
    except PackageNotFoundError:
        return "unknown (not installed)"


def _one_line_warnings() -> None:
    """A ProvmapWarning raised through Python's warnings (the executor's, inside compare,
    profile, report...) prints as `provmap: warning: ...`, not with a file and line."""
    import warnings

    from provmap.provenance.util.errors import ProvmapWarning

    shown = warnings.showwarning
    if getattr(shown, "_provmap", False):
        return

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, ProvmapWarning):
            warn([str(message)])
        else:
            shown(message, category, filename, lineno, file, line)

    show._provmap = True
    warnings.showwarning = show


def dispatch(args) -> int:
    """Run a parsed command: a ProvmapError is one line on stderr and exit status 2."""
    from provmap.provenance.util import interrupt, native_stop

    from .preflight import check_before_work, say_replaced

    interrupt.install()
    native_stop.start()  # Ctrl-C reaches a backend's native call too (native_stop.py)
    _one_line_warnings()
    try:
        return _dispatch(args, check_before_work, say_replaced)
    finally:
        from provmap.provenance.util.atomic import protect_inputs

        protect_inputs([])  # the next command in this process (tests, API) reads other files


def _dispatch(args, check_before_work, say_replaced) -> int:
    from provmap.provenance.util import interrupt

    try:
        replaced = check_before_work(args)
        rc = args.func(args)
        interrupt.raise_if_interrupted()
        say_replaced(replaced, rc)
        sys.stdout.flush()  # a closed pipe shows up here, inside the handler below
        return rc
    except BrokenPipeError:  # `provmap inspect ... | head`: the reader has what it wanted
        # Before OSError (its base class), which printed "error: Broken pipe".  stdout's fd
        # now points at /dev/null so the interpreter's final flush is silent too.
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 0
    except ProvmapError as e:
        if interrupt.interrupted():  # a library turned Ctrl-C into its own error
            return _fail(args, None, 130)
        return _fail(args, one_line(str(e)))
    except OSError as e:  # disk full, permissions changed mid-run: still one line
        if interrupt.interrupted():
            return _fail(args, None, 130)
        where = f"{e.filename}: " if getattr(e, "filename", None) else ""
        return _fail(args, one_line(f"{where}{e.strerror or e}"))
    except KeyboardInterrupt:
        return _fail(args, None, 130)
    except RecursionError:  # input nested deeper than any reader here expects
        return _fail(args, f"{_subject(args)}input nested too deeply to read")
    except MemoryError:
        return _fail(args, f"{_subject(args)}out of memory (an input asks for more than this "
                           "machine holds)")
    except Exception as e:  # noqa: BLE001 - the promise is one line, whatever escaped
        if interrupt.interrupted():
            return _fail(args, None, 130)
        return _fail(args, f"{_subject(args)}internal error: "
                           f"{one_line(first_line(e, with_type=True))} (please report it with "
                           "the command that caused it)")


def _fail(args, message: str | None, code: int = 2) -> int:
    """The one stderr line of a failed command (None: interrupted), and with --json the same
    as `{"error": ..., "code": ...}` on stdout, which scripts read as they read Polygraphy's
    and trtexec's (issue 36: errors were never JSON)."""
    print("provmap: interrupted" if message is None else f"provmap: error: {message}",
          file=sys.stderr)
    if getattr(args, "json", False) is True and not getattr(args, "json_error_printed", False):
        import json

        with contextlib.suppress(OSError, ValueError):
            print(json.dumps({"error": message or "interrupted", "code": code}), flush=True)
    return code


def _subject(args) -> str:
    """The file the command was working on, to name in an unexpected error."""
    for name in ("artifact", "model", "profile"):
        value = getattr(args, name, None)
        if isinstance(value, str) and value:
            return f"{term_safe(value)}: "
    return ""


def print_safe(text) -> None:
    """One line of output holding names from an artifact or model (someone else's): control
    characters shown escaped rather than acted on by the terminal, a newline among them (a
    name holding one had forged a line of its own: issue 36's seventh afternoon).  JSON
    escapes itself."""
    print(term_safe(text))


def print_text_safe(text) -> None:
    """A block of text (Relax source, a model's listing) line by line, each line escaped."""
    print("\n".join(term_safe(line) for line in str(text).split("\n")))


def one_line(text: str) -> str:
    """An error message as one safe line (newlines and escapes made visible)."""
    return term_safe(" ".join(str(text).split("\n")).strip())
