"""Checks of the files a command names, made before any work: a build of minutes must not end in
a refusal the command line already showed (issue 36).

Inputs must not be FIFOs, devices or sockets (reading one hangs or never ends); outputs must be
writable regular files, never empty names, never one of the command's own inputs."""

from __future__ import annotations

import os
import sys

from provmap.provenance.util.errors import ProvmapError

#: Output options every command names the same way, and whether each is a directory.
_OUTPUTS = {"output": False, "trace": False, "save_inputs": False, "sqlite": False,
            "save_outputs": False}
_DIRECTORY_OUTPUT_COMMANDS = {"bisect", "bench", "overlays"}


#: What a command reads, by the argument that names it: an output may never be one of them.
_INPUTS = {"artifact": "artifact", "model": "model", "inputs": "--inputs file",
           "profile": "--profile file", "cache": "--cache file (the cost cache)"}

#: Every file argument a command reads (the artifact is checked by its own reader, whose
#: refusal names it as an artifact); `models` is bench's list.
_READ = ("model", "inputs", "profile", "errors", "cache", "models")


def _flag(name: str) -> str:
    return "-o/--output" if name == "output" else "--" + name.replace("_", "-")


def check_before_work(args) -> list[str]:
    """Refuse, in one line, any input that would hang and any output that could not be written;
    returns the existing files the command will replace, named once it succeeds."""
    _check_inputs_readable(args)
    _check_no_clobbered_input(args)
    return _check_outputs(args)


def say_replaced(replaced: list[str], rc: int) -> None:
    """The documented rule (docs/cli.md): an existing file is replaced, atomically, only when
    the command succeeds, and never without a word; said after the work, so a refused command
    line does not claim a replacement first."""
    if rc == 0:  # common.say_progress's line, written here: common imports this module
        for value in replaced:
            print(f"provmap: {value} existed: replaced",
                  file=sys.stderr, flush=True)


def _check_inputs_readable(args) -> None:
    from provmap.provenance.util.files import refuse_special_file

    for name in _READ:
        value = getattr(args, name, None)
        for v in value if isinstance(value, list) else [value]:
            if isinstance(v, str) and v and not v.startswith("bundled:"):
                refuse_special_file(v)


def _check_no_clobbered_input(args) -> None:
    """An output that is the command's own input, or another output of the same command, would
    destroy what the command reads or writes (a new user's `run A -o A` turned the artifact into
    an .npz, exit 0): refused before any work, naming both."""
    outs = [(n, getattr(args, n, None)) for n in _OUTPUTS]
    outs = [(n, v) for n, v in outs if isinstance(v, str) and v]
    ins = [(n, getattr(args, n, None)) for n in _INPUTS]
    ins = [(n, v) for n, v in ins if isinstance(v, str) and v and not v.startswith("bundled:")]
    for name, value in outs:
        for iname, ivalue in ins:
            if _same_file(value, ivalue):
                raise ProvmapError(f"{_flag(name)} {value} is this command's {_INPUTS[iname]}: "
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
        check_writable(value, directory=directory)
        if not directory and os.path.isfile(value):
            replaced.append(value)
        elif directory and getattr(args, "command", None) == "overlays" and \
                os.path.isdir(value) and os.listdir(value):
            replaced.append(value)  # its model.onnx and overlays are rewritten, said as for a file
    return replaced
