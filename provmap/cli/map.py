"""`provmap map`: the all-TVM provenance map (provmap.partition.model_source.map_model, which is
provmap.provenance.mapper's with ONNX Runtime's types, on the command line).  `python -m provmap.cli.map` is a CLI with just this command."""

from __future__ import annotations

import argparse
import sys

from .common import MODEL_HELP, say_progress, add_input_shape_option, dispatch
from .term_text import term_safe
from .json_out import print_json


def cmd_map(args) -> int:
    from provmap.provenance.bundled.names import check_model_spec
    from provmap.provenance.profile import parse_dims
    from provmap.provenance.shapes import parse_input_shapes

    from .preflight import map_prefix

    input_shapes, dims = parse_input_shapes(args.input_shape), parse_dims(args.dim)
    check_model_spec(args.model)
    # TVM only now (seconds, torch with it where installed): the mistakes above are said at once
    from provmap.partition.model_source import map_model

    res = map_model(args.model, out=map_prefix(args.output), input_shapes=input_shapes,
                    progress=say_progress, dims=dims)
    cov, pmap = res.coverage, res.pmap
    if args.json:
        print_json(cov)
        return 0
    print(term_safe(res.label))  # the model's path, names from it below: someone else's text
    print(f"  ONNX nodes : {cov['onnx_nodes_total']} total, {cov['onnx_nodes_mapped']} mapped "
          f"to kernels, {cov['onnx_nodes_elided']} elided, "
          f"{cov['onnx_nodes_unaccounted']} unaccounted")
    print(f"  kernels    : {cov['kernels_total']} total, {cov['kernels_mapped']} mapped "
          f"({cov['kernel_sites_total']} call sites, {cov['kernel_sites_mapped']} mapped)")
    if res.not_compilable:
        print(f"  not compilable by TVM: {len(res.not_compilable)} node(s)")
        for i, why in sorted(res.not_compilable.items()):
            print(term_safe(f"    {pmap.nodes[i].op_type} #{i} '{pmap.nodes[i].name}': {why}"))
    if res.widened:
        print(f"  computed in float32 by TVM: {len(res.widened)} half-precision node(s)")
        for why in sorted(set(res.widened.values())):
            ops = sorted({pmap.nodes[i].op_type for i, w in res.widened.items() if w == why})
            print(term_safe(f"    {', '.join(ops)}: {why}"))
    # Said in words: "debugify" (LLVM's name for such a check) meant nothing to users.
    n = len(res.findings)
    print(f"  pass check : {n} place{'s' if n != 1 else ''} where a TVM pass lost the link "
          "to ONNX (each pass is checked for new kernel calls without an expression ID and "
          "for IDs of values still in use that vanished)")
    for f in res.findings:
        print(term_safe(f"    {f}"))
    print(term_safe(f"  wrote {res.files[0]} and {res.files[1]}"))
    return 0


def add_map_command(sub) -> None:
    """The `map` subcommand; the full CLI (provmap.cli.main) adds it to its own parser too."""
    m = sub.add_parser("map", help="all-TVM build; write OUT.json and OUT.sqlite provenance maps")
    m.add_argument("model", help=MODEL_HELP)
    m.add_argument("-o", "--output", required=True, help="output prefix (writes OUT.json, OUT.sqlite; "
                   "OUT.json or OUT.sqlite given stand for OUT)")
    m.add_argument("--json", action="store_true", help="print a JSON summary on stdout")
    add_input_shape_option(m)
    m.set_defaults(func=cmd_map)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="provmap", description=(
        "Import ONNX into TVM Relax with stable expression IDs and map every compiled kernel "
        "back to ONNX nodes."))
    add_map_command(p.add_subparsers(dest="command", required=True))
    return p


def main(argv=None) -> int:
    return dispatch(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
