"""`provmap overlays`: the artifact in the tools vendors already use (Model Explorer).

Same conventions as the rest of `provmap`: data on stdout, progress and errors on stderr, files
written to a temp path and renamed.  With --open it runs Model Explorer on the user's model with
every overlay; without the [explorer] extra it prints that command instead.
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import subprocess
import sys

from provmap.provenance.util.errors import ProvmapError

from .common import say_progress, read_json_file, tcp_port
from .term_text import term_safe
from .json_out import print_json


DEFAULT_HOST = "127.0.0.1"


def _read_json(path: str, what: str, key: str) -> dict:
    data = read_json_file(path, what)
    if not isinstance(data, dict) or not isinstance(data.get(key), list):
        raise ProvmapError(f"{path}: not the output of `provmap {what} --json`")
    if what == "profile":
        from provmap.runtime_module.artifact_schema import check_profile

        check_profile(data, path)
    return data


def _check_errors_are_of(errors: dict, path: str, mod, model, artifact: str) -> None:
    """A compare of another artifact painted an empty error overlay, exit 0 (issue 36).
    Compare results carry the artifact's digest; older ones must name this model's tensors."""
    digest = errors.get("artifact_digest")
    names = [t.get("tensor") for t in errors["tensors"] if isinstance(t, dict)]
    if digest is not None and digest != mod.artifact.digest:
        raise ProvmapError(f"{path}: a compare of another artifact (digest {str(digest)[:12]}), "
                           f"not of {artifact} (digest {mod.artifact.digest[:12]}); compare "
                           "this artifact with --json")
    if digest is None and names:
        mine = {o for n in model.graph.node for o in n.output} | \
            {o.name for o in model.graph.output}
        if not mine.intersection(names):
            raise ProvmapError(f"{path}: none of its {len(names)} tensor(s) is a tensor of "
                               f"{artifact}'s model (e.g. {names[0]!r}): a compare of another "
                               "model")


def cmd_overlays(args) -> int:
    from provmap.runtime_module.module import load
    from provmap.workbench.overlays import explorer_command, write_overlays

    from .source_model import refuse_source_model
    from .report import _check_profile_is_of
    from .workbench import _reference_model

    profile = _read_json(args.profile, "profile", "onnx_nodes") if args.profile else None
    errors = _read_json(args.errors, "compare", "tensors") if args.errors else None
    mod = load(args.artifact, runnable=False)
    # DIR/model.onnx may be the user's own model, which overlays --model need not name
    refuse_source_model(mod, os.path.join(args.output, "model.onnx"))
    if profile is not None:
        _check_profile_is_of(profile, args.profile, mod, args.artifact)
    model = _reference_model(mod, args.model)
    if errors is not None:
        _check_errors_are_of(errors, args.errors, mod, model, args.artifact)
    files = write_overlays(args.output, model, mod, profile, errors)
    command = explorer_command(files, args.port)
    if args.host != DEFAULT_HOST:  # the printed command dropped it (issue 36)
        command += ["--host", args.host]
    if args.json:
        print_json({"files": files, "command": command})
    else:
        print(f"wrote {term_safe(args.output)}: model.onnx (annotated, grouped by partition) and overlays "
              + ", ".join(k for k in files if k != "model"))
    if not args.open:
        if not args.json:  # shlex quotes for the shell, not for the terminal
            print(term_safe(shlex.join(command)))
        return 0
    if not (importlib.util.find_spec("model_explorer")
            and importlib.util.find_spec("model_explorer_onnx")):
        say_progress("Model Explorer is not installed (pip install 'provmap[explorer]'); run:")
        print(term_safe(shlex.join(command)))
        return 0
    say_progress(f"starting Model Explorer on port {args.port} (Ctrl+C stops it)")
    run = [sys.executable, "-m", "model_explorer", *command[1:]]
    if "--host" not in command:
        run += ["--host", args.host]
    try:
        return subprocess.call(run)
    except KeyboardInterrupt:
        return 130


def add_vendor_commands(sub) -> None:
    o = sub.add_parser("overlays", help="Model Explorer node-data overlays on the user's model "
                       "(partition, time, error) and the model grouped by partition; --open "
                       "opens them")
    o.add_argument("artifact")
    o.add_argument("-o", "--output", required=True, help="directory to write model.onnx and "
                   "the overlays (partition.json, time.json, error.json) to")
    o.add_argument("--model", help="the ONNX model, if the artifact does not embed it")
    o.add_argument("--profile", metavar="FILE", help="per-node time from a `provmap profile "
                   "--json` file of this artifact (time.json, gradient)")
    o.add_argument("--errors", metavar="FILE", help="per-node max abs error from a `provmap "
                   "compare --json` or `provmap bisect --json` file (error.json, thresholds at "
                   "its atol)")
    o.add_argument("--open", action="store_true", help="run Model Explorer on them (the "
                   "[explorer] extra; without it, print the command)")
    o.add_argument("--port", type=tcp_port, default=8080, help="Model Explorer's port "
                   "(default %(default)s)")
    o.add_argument("--host", default=DEFAULT_HOST, help="address Model Explorer listens on "
                   "(default %(default)s)")
    o.add_argument("--json", action="store_true", help="print the files and the command as JSON")
    o.set_defaults(func=cmd_overlays)
