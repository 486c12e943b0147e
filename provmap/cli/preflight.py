"""Checks of the files a command names, made before any work: a build of minutes must not end in
a refusal the command line already showed (issue 36).

Inputs must not be FIFOs, devices or sockets (reading one hangs or never ends); outputs must be
writable regular files, never empty names, never one of the command's own inputs."""

from __future__ import annotations

import os
import sys

from provmap.provenance.util.errors import ProvmapError

from .term_text import term_safe

#: Output options every command names the same way, and whether each is a directory.
_OUTPUTS = {"output": False, "trace": False, "save_inputs": False, "sqlite": False,
            "save_outputs": False}
_DIRECTORY_OUTPUT_COMMANDS = {"bisect", "bench", "overlays"}


#: What a command reads, by the argument that names it: an output may never be one of them.
_INPUTS = {"artifact": "artifact", "model": "model", "model_data": "model's external data",
           "inputs": "--inputs file",
           "profile": "--profile file", "errors": "--errors file",
           "cache": "--cache file (the cost cache)",
           "trust_list": "trust list (provmap's own, PROVMAP_TRUST)",
           "cost_cache": "cost cache (provmap's own, PROVMAP_CACHE)"}

#: Every file argument a command reads (the artifact is checked by its own reader, whose
#: refusal names it as an artifact); `models` is bench's list.
_READ = ("model", "inputs", "profile", "errors", "cache", "models")


def _flag(name: str) -> str:
    return "-o/--output" if name == "output" else "--" + name.replace("_", "-")


#: Files a command writes under its -o (a directory or, for map, a prefix), beside the name
#: itself: each is checked as an output of its own (issue 36: `overlays -o DIR --model
#: DIR/model.onnx` replaced the user's model; a `bisect -o DIR` whose reproducer.onnx was the
#: model bisected, and a `map -o P` whose P.json linked to the model, overwrote it).
_WRITTEN_UNDER = {
    "map": ("{}.json", "{}.sqlite"),
    "bisect": ("{}/reproducer.onnx", "{}/reproducer_inputs.npz", "{}/reproducer_expected.npz"),
    "overlays": ("{}/model.onnx", "{}/partition.json", "{}/time.json", "{}/error.json"),
}


def map_prefix(value: str) -> str:
    """map's -o is a prefix; `-o m.json` wrote m.json.json and m.json.sqlite (issue 36's fifth
    afternoon), so a name ending in one of the two suffixes stands for its prefix."""
    for suffix in (".json", ".sqlite"):
        if value.endswith(suffix) and len(value) > len(suffix):
            return value[: -len(suffix)]
    return value


def written_files(args) -> list[str]:
    """The files `-o` stands for: itself, or what the command writes under it."""
    value = getattr(args, "output", None)
    if not isinstance(value, str) or not value.strip():
        return []
    if getattr(args, "command", None) == "map":
        value = map_prefix(value)
    under = _WRITTEN_UNDER.get(getattr(args, "command", None))
    return [f.format(value.rstrip("/") or "/") for f in under] if under else [value]


def check_before_work(args) -> list[str]:
    """Refuse, in one line, any input that would hang and any output that could not be written;
    returns the existing files the command will replace, named once it succeeds."""
    from provmap.provenance.util.atomic import protect_inputs

    _check_inputs_readable(args)
    ins = _inputs(args)  # once: a model's external data is found by parsing the model
    _check_no_clobbered_input(args, ins)
    outs = _check_outputs(args)
    _refuse_replacing_a_model(args, outs)
    replaced = [(f, _identity(f)) for f in outs]
    # the last line of defence: no write of this process replaces one of its inputs
    protect_inputs([v for _n, v in ins])
    return replaced


def _refuse_replacing_a_model(args, replaced: list[str]) -> None:
    """An existing ONNX model is replaced only by a command that writes an ONNX model there
    (annotate's -o, the model.onnx/reproducer.onnx overlays and bisect write under theirs):
    `run A -o model.onnx`, `inspect A --sqlite model.onnx` and `report A -o model.onnx` turned
    the user's model into an .npz, a database and a page (issue 36's sixth afternoon), where
    annotate refused the same file."""
    command = getattr(args, "command", None)
    for f in replaced:
        if (command == "annotate" and f == getattr(args, "output", None)) or (
                command in ("bisect", "overlays") and f.endswith(".onnx")):
            continue
        if _is_onnx_model(f):
            raise ProvmapError(f"{f} exists and is an ONNX model; `provmap {command}` would "
                               "replace it with a file of another kind: write the output "
                               "elsewhere (or remove the model first)")


def _is_onnx_model(path: str) -> bool:
    """Named .onnx, or (up to _EXTERNAL_SCAN_MAX) parsing as a model with a graph."""
    if path.lower().endswith(".onnx"):
        return True
    try:
        if os.path.getsize(path) > _EXTERNAL_SCAN_MAX:
            return False
        with open(path, "rb") as f:
            head = f.read(1)
            if head != b"\x08":  # a model starts with its ir_version (field 1, varint)
                return False
            data = head + f.read()
    except OSError:  # unreadable: not one to protect
        return False
    from provmap.cli.source_model import parse_model

    return parse_model(data) is not None


def _identity(path: str):
    st = os.stat(path)
    return (st.st_ino, st.st_mtime_ns)


def _inputs(args) -> list[tuple[str, str]]:
    """(argument name, path) of every file the command reads, a model's external data
    files included (`compile m.onnx -o m.bin`, m.bin being its weights, lost the model)."""
    ins = [(n, getattr(args, n, None)) for n in _INPUTS]
    ins = [(n, v) for n, v in ins if isinstance(v, str) and v and not v.startswith("bundled:")]
    return ins + [("model_data", f) for n, v in ins if n == "model" for f in _external_data(v)] \
        + _own_files()


def _own_files() -> list[tuple[str, str]]:
    """provmap's own trust list and cost cache (and SQLite's files beside them), which every
    command may read: `inspect A --sqlite $PROVMAP_TRUST` replaced the trust list with a map,
    and every locally built TVM artifact then refused to run (issue 36's fifth afternoon)."""
    from provmap.provenance.util.own_paths import cost_cache_path
    from provmap.runtime_module.trust import trust_file

    out = []
    for name, path in (("trust_list", trust_file()), ("cost_cache", cost_cache_path())):
        if os.path.lexists(path):
            out.append((name, str(path)))
        # SQLite's files beside it whether they exist or not: `report -o LIST-journal` made a
        # "hot journal" that SQLite then rolled into the list, read as damaged (issue 52)
        # (beside a link's target too: SQLite puts them there)
        out += [(name, f"{base}{suffix}") for base in dict.fromkeys((str(path),
                                                                    os.path.realpath(path)))
                for suffix in ("-wal", "-shm", "-journal")]
    return out


#: A model file larger than this holds its weights itself (external data is for the rest):
#: not parsed twice just to look for external files.
_EXTERNAL_SCAN_MAX = 64 << 20


def _external_data(model: str) -> list[str]:
    """The external data files an ONNX model names (resolved beside it); [] for anything
    that is not a readable ONNX file (its reader refuses it later in its own words)."""
    try:
        if not os.path.isfile(model) or os.path.getsize(model) > _EXTERNAL_SCAN_MAX:
            return []
        with open(model, "rb") as f:  # every external tensor names its "location" key:
            if b"location" not in f.read():  # a model without the word has none, unparsed
                return []
        import onnx
        from onnx.external_data_helper import _get_all_tensors

        m = onnx.load(model, load_external_data=False)
    except Exception:  # noqa: BLE001 - not a model this check can read: nothing to protect
        return []
    base, out = os.path.dirname(os.path.abspath(model)), []
    for t in _get_all_tensors(m):
        if t.data_location == onnx.TensorProto.EXTERNAL:
            loc = next((e.value for e in t.external_data if e.key == "location"), None)
            if loc:
                f = os.path.join(base, loc)
                if f not in out and os.path.exists(f):
                    out.append(f)
    return out


def say_replaced(replaced: list[str], rc: int) -> None:
    """The documented rule (docs/cli.md): an existing file is replaced, atomically, only when
    the command succeeds, and never without a word; said after the work, so a refused command
    line does not claim a replacement first."""
    for value, before in replaced:  # those the command did replace, whatever its exit status
        try:  # (bisect exits 1 on a divergence it wrote a reproducer for)
            st = os.stat(value)
            now = (st.st_ino, st.st_mtime_ns)
        except OSError:
            now = None
        if now is not None and now != before:  # common.say_progress's line, written here
            print(f"provmap: {term_safe(value)} existed: replaced", file=sys.stderr, flush=True)


def _check_inputs_readable(args) -> None:
    from provmap.provenance.util.files import refuse_special_file

    for name in _READ:
        value = getattr(args, name, None)
        for v in value if isinstance(value, list) else [value]:
            if isinstance(v, str) and v and not v.startswith("bundled:"):
                refuse_special_file(v)


def _check_no_clobbered_input(args, ins: list[tuple[str, str]]) -> None:
    """An output that is the command's own input, or another output of the same command, would
    destroy what the command reads or writes (a new user's `run A -o A` turned the artifact into
    an .npz, exit 0): refused before any work, naming both."""
    outs = [(n, getattr(args, n, None)) for n in _OUTPUTS if n != "output"]
    outs = [(n, v) for n, v in outs if isinstance(v, str) and v]
    outs += [("output", f) for f in written_files(args)]
    for name, value in outs:
        for iname, ivalue in ins:
            if _same_file(value, ivalue):
                given = getattr(args, "output", None)
                shown = f"{given} (it writes {value})" if name == "output" and \
                    given not in (None, value) else value
                raise ProvmapError(f"{_flag(name)} {shown} is this command's {_INPUTS[iname]}: "
                                   "it would be replaced; write the output elsewhere")
    seen: dict[str, str] = {}
    for name, value in outs:
        key = os.path.realpath(value)
        if key in seen:
            raise ProvmapError(f"{_flag(name)} and {_flag(seen[key])} name the same file "
                               f"{value}: one would replace the other; give each its own path")
        seen[key] = name


def _same_file(a: str, b: str) -> bool:
    """Whether two names are one file: by inode when both exist (a hard link or a symbolic
    link is the same file), else by resolved path (a cost cache `--cache` that does not exist
    yet, given again as `-o`, is still the artifact's path: issue 36)."""
    if os.path.exists(a) and os.path.exists(b):
        return os.path.samefile(a, b)
    return os.path.realpath(a) == os.path.realpath(b)


def _check_outputs(args) -> list[str]:
    """Every output is checked for writability before any work (a read-only directory used to
    end a long compile in a traceback; `-o ""` and a missing directory were refused only after
    the build, naming a temp file)."""
    from provmap.provenance.util.atomic import check_writable

    replaced = []
    for name, is_dir in _OUTPUTS.items():
        value = getattr(args, name, None)
        if not isinstance(value, str):
            continue
        directory = is_dir or (name == "output" and
                               getattr(args, "command", None) in _DIRECTORY_OUTPUT_COMMANDS)
        if not value.strip():
            raise ProvmapError(f"{_flag(name)}: an empty name; give a "
                               f"{'directory' if directory else 'file'} to write")
        prefix = name == "output" and getattr(args, "command", None) == "map"
        if not prefix:  # map's -o is a prefix: only its two files are outputs
            check_writable(value, directory=directory)
        if not (prefix or directory):
            if os.path.isfile(value):
                replaced.append(value)
            continue
        if name != "output":
            continue
        # each file written under it is checked (a FIFO among them is refused before any
        # file is written) and, when it is replaced, said as a file output is
        for f in written_files(args):
            if f == value or (directory and not os.path.lexists(f)):
                continue
            check_writable(f)
            if os.path.isfile(f):
                replaced.append(f)
    return replaced
