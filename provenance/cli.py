"""`provmap` command line.

Data goes to stdout (human text, or one JSON object with --json); progress and errors go to
stderr.  Any ProvmapError is one line naming the file or ONNX node and exit status 2; no output
file is left behind because every file is written to a temp path and renamed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from .errors import ProvmapError
from .shapes import parse_input_shapes


def _progress(msg: str) -> None:
    print(f"provmap: {msg}", file=sys.stderr, flush=True)


def _resolve_model(spec: str):
    from . import zoo

    if spec.startswith("bundled:"):
        try:
            return zoo.resolve(spec)
        except (KeyError, ValueError) as e:
            raise ProvmapError(f"{spec}: {e}") from None
    return spec, spec


def cmd_map(args) -> int:
    from . import store
    from .build import compile_tvm, model_sha256
    from .importer import import_onnx, load_model, mark_not_compilable

    source, _ = _resolve_model(args.model)
    t0 = time.perf_counter()
    model, label = load_model(source)
    if args.model.startswith("bundled:"):
        label = args.model
    imported = import_onnx(model, label=label, shape_dict=parse_input_shapes(args.input_shape))
    t1 = time.perf_counter()
    _progress(f"imported {label}: {len(imported.pmap.nodes)} ONNX nodes, "
              f"{len(imported.pmap.exprs)} Relax bindings ({t1 - t0:.2f} s)")
    try:
        build = compile_tvm(imported)
    except ProvmapError:
        raise
    except Exception as e:  # TVM's own errors (InternalError, TVMError...): one line, no trace
        first = next((ln for ln in str(e).splitlines() if ln.strip()), type(e).__name__)
        raise ProvmapError(f"{label}: TVM build failed: {first}") from None
    t2 = time.perf_counter()
    _progress(f"compiled with TVM (llvm, default CPU pipeline) in {t2 - t1:.2f} s")
    pmap = build.pmap
    opaque = mark_not_compilable(pmap, imported)
    if opaque:
        _progress(f"{opaque} ONNX node(s) not compilable by TVM (mapped as such; see "
                  "onnx_nodes[].elided)")
    pmap.meta["model_sha256"] = model_sha256(model)
    findings = [str(f) for r in build.tracker.reports for f in _findings(r)]
    out_dir = os.path.dirname(os.path.abspath(args.output))
    os.makedirs(out_dir, exist_ok=True)
    jpath, spath = store.save(pmap, args.output)
    cov = pmap.coverage()
    cov.update({"onnx_nodes_not_compilable": opaque, "json": str(jpath), "sqlite": str(spath), "debugify_findings": findings,
                "import_s": round(t1 - t0, 3), "compile_s": round(t2 - t1, 3)})
    if args.json:
        print(json.dumps(cov, indent=2))
    else:
        print(f"{label}")
        print(f"  ONNX nodes : {cov['onnx_nodes_total']} total, {cov['onnx_nodes_mapped']} mapped "
              f"to kernels, {cov['onnx_nodes_elided']} elided, "
              f"{cov['onnx_nodes_unaccounted']} unaccounted")
        print(f"  kernels    : {cov['kernels_total']} total, {cov['kernels_mapped']} mapped "
              f"({cov['kernel_sites_total']} call sites, {cov['kernel_sites_mapped']} mapped)")
        if opaque:
            print(f"  not compilable by TVM: {opaque} node(s)")
            for i, why in sorted(imported.opaque.items()):
                print(f"    {pmap.nodes[i].op_type} #{i} '{pmap.nodes[i].name}': {why}")
        print(f"  debugify   : {len(findings)} finding(s)")
        for f in findings:
            print(f"    {f}")
        print(f"  wrote {jpath} and {spath}")
    return 0


def _findings(report):
    from .debugify import DebugifyReport

    return DebugifyReport([report]).findings


MODEL_HELP = ("ONNX file, or bundled:NAME (resnet50, squeezenet, vgg19, inception_v1, "
              "bvlc_alexnet, transformer)")


def add_map_command(sub) -> None:
    """The `map` subcommand; the full CLI (partition.cli) adds it to its own parser too."""
    m = sub.add_parser("map", help="all-TVM build; write OUT.json and OUT.sqlite provenance maps")
    m.add_argument("model", help=MODEL_HELP)
    m.add_argument("-o", "--output", required=True, help="output prefix (writes OUT.json, OUT.sqlite)")
    m.add_argument("--json", action="store_true", help="print a JSON summary on stdout")
    add_input_shape_option(m)
    m.set_defaults(func=cmd_map)


def add_input_shape_option(parser) -> None:
    """`--input-shape NAME=1x3x224x224`, repeatable, on every command that imports a model."""
    parser.add_argument("--input-shape", action="append", default=[], metavar="NAME=DIMS",
                        help="fix an input's shape, e.g. input=1x3x224x224 (repeatable; needed "
                             "when the model leaves a dimension symbolic)")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="provmap", description=(
        "Import ONNX into TVM Relax with stable expression IDs and map every compiled kernel "
        "back to ONNX nodes."))
    add_map_command(p.add_subparsers(dest="command", required=True))
    return p


#: Output options every command names the same way, and whether each is a directory.
_OUTPUTS = {"output": False, "trace": False, "save_inputs": False}
_DIRECTORY_OUTPUT_COMMANDS = {"bisect", "bench"}


def _check_outputs(args) -> None:
    """Every output is checked for writability before any work (a read-only directory used to
    end a long compile in a traceback)."""
    from .store import check_writable

    for name, is_dir in _OUTPUTS.items():
        value = getattr(args, name, None)
        if isinstance(value, str) and value:
            directory = is_dir or (name == "output" and
                                   getattr(args, "command", None) in _DIRECTORY_OUTPUT_COMMANDS)
            check_writable(value, directory=directory)


def dispatch(args) -> int:
    """Run a parsed command: a ProvmapError is one line on stderr and exit status 2."""
    try:
        _check_outputs(args)
        return args.func(args)
    except ProvmapError as e:
        print(f"provmap: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # disk full, permissions changed mid-run: still one line
        where = f"{e.filename}: " if getattr(e, "filename", None) else ""
        print(f"provmap: error: {where}{e.strerror or e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("provmap: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `provmap inspect ... | head`
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return 0


def main(argv=None) -> int:
    return dispatch(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
