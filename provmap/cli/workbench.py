"""The vendor's workbench on the command line: compare, bisect, profile, report, annotate, explain.

Same conventions as the rest of `provmap`: data on stdout (text, or JSON with --json), progress
and errors on stderr, files written to a temp path and renamed.  `compare` exits 0 when every
tensor matches, 1 on a mismatch, 2 when it could not evaluate (bad artifact, missing model,
reference failure): scripts can tell "wrong numbers" from "broken setup".
"""

from __future__ import annotations

import json
import os

from .common import (MODEL_HELP, load_inputs, say_progress, add_input_shape_option,
                     add_random_options, add_trust_option, check_inputs_choice, count,
                     non_negative, note_needless_trust, print_safe, repeats,
                     term_safe, warn)
from provmap.partition.measure import DEFAULT_QUANT_STEPS
from provmap.provenance.util.errors import ProvmapError, first_line
from provmap.provenance.util.atomic import write_bytes_atomic

from .common import backend_list, check_input_names, only_with
from .source_model import refuse_source_model
from .json_out import print_json
from .report import cmd_report


def _given_inputs(args):
    """The --inputs arrays, read before the artifact or model loads (a bad file is said at
    once, not after seconds of loading); None: random inputs, the default."""
    check_inputs_choice(args)
    return load_inputs(args.inputs) if getattr(args, "inputs", None) else None


def _inputs(args, mod=None, view=None, given=None) -> dict:
    """The arrays: the --inputs file's, read once its headers match the artifact's inputs (or
    the model's, for bisect), else random ones."""
    if given is not None:
        from .npz_inputs import expect_of_contract, expect_of_graph

        if mod is not None:
            return given.arrays(expect_of_contract(mod.contract), mod.contract.profile)
        return given.arrays(expect_of_graph(view.model.graph))
    if mod is not None:
        return mod.random_inputs(args.seed)
    from provmap.provenance.bundled import zoo

    return zoo.random_inputs(view.model, seed=args.seed)


def _reference_model(mod, given):
    """The model the artifact was compiled from (`given`, or the embedded one).  The user's
    own file is the reference; provmap's derived copy is accepted too, and said to be."""
    model, which = mod.artifact.resolve_model(given)
    if which == "derived":
        what = "; ".join(mod.manifest["model"].get("derived") or []) or "derived by provmap"
        say_progress(f"note: {given or 'the embedded model'} is provmap's derived copy of the "
                  f"model ({what}), not the model as given to compile; using it")
    return model


def _tol(args):
    from provmap.workbench.compare import Tolerance

    return Tolerance(args.atol, args.rtol, quant_steps=args.quant_steps, ulps=args.ulps)


def _metrics_text(t: dict) -> str:
    """One tensor's comparison; a dtype or shape mismatch has no numbers, only its problem."""
    if t["max_abs"] is None:
        return t["problem"]
    text = (f"max abs {t['max_abs']:.3g}, max rel {t['max_rel']:.3g}, cosine "
            f"{t['cosine']:.6f}")
    rule = {"quant_steps": "within --quant-steps", "ulps": "within --ulps"}.get(
        t.get("passed_on") or "")
    if rule:  # past atol/rtol, passed on another rule: say which
        text += f" ({rule})"
    return f"{text} ({t['problem']})" if t["problem"] else text


def _aligned(rows: list[list[str]]) -> list[str]:
    """Rows of cells, each column as wide as its widest cell (backend names such as
    onnxruntime[threads=1] and partition ids p10 overflowed fixed widths)."""
    if not rows:
        return []
    widths = [max(len(r[k]) for r in rows) for k in range(len(rows[0]) - 1)]
    return [" ".join(c.ljust(w) for c, w in zip(r, widths)) + " " + r[-1] for r in rows]


def cmd_compare(args) -> int:
    from provmap.workbench.compare import compare_artifact
    from provmap.runtime_module.module import load

    given = _given_inputs(args)
    mod = load(args.artifact, trust=args.trust)
    note_needless_trust(mod, args.trust)
    warn(mod.manifest.get("warnings"))
    model = _reference_model(mod, args.model)
    inputs = _inputs(args, mod=mod, given=given)
    res = compare_artifact(mod, model, inputs, args.reference, _tol(args))
    res["warnings"] = list(mod.manifest.get("warnings") or [])
    res["artifact_digest"] = mod.artifact.digest  # overlays --errors checks whose it is
    if args.json:
        print_json(res)  # JSON escapes itself
    else:
        for line in _aligned([["ok" if t["ok"] else "FAIL", t["partition"], t["backend"],
                                f"{t['tensor']} (from {t['onnx_node']}): {_metrics_text(t)}"
                                + (f" [{t['note']}]" if t.get("note") else "")]
                               for t in res["tensors"]]):
            print_safe(line)
        c = res["first_divergent_partition"]
        if c:
            print_safe(f"first divergent partition: {c['partition']} ({c['backend']}), ONNX nodes "
                  f"{', '.join(c['onnx_nodes'][:20])}{' ...' if len(c['onnx_nodes']) > 20 else ''}; "
                  f"diverging outputs from {', '.join(map(str, c['diverging_nodes']))}")
            if c.get("matches_on_reference_inputs"):
                print_safe(f"  but {c['partition']} matches when fed the reference's own inputs: "
                           f"its inputs from {', '.join(c['inexact_from'])} were within tolerance,"
                           " not equal, and the differences added up here; no partition diverges"
                           " on its own")
        print_safe("match" if res["match"] else f"{res['mismatches']} tensor(s) differ beyond "
              f"atol {res['atol']:g} / rtol {res['rtol']:g} vs {res['reference']}")
    return 0 if res["match"] else 1


def _model_and_shapes(model, shapes: dict, npz=None):
    """(model, label, True, input shapes) for load_view: the --inputs arrays (`npz`, their
    headers read, data not yet) fix the shapes of the inputs --input-shape leaves open (bisect
    with an npz of 1x16 arrays asked for --input-shape and suggested 1x1: the thirteenth
    afternoon), once they are checked against what the model's inputs fix."""
    from provmap.provenance.bundled import zoo
    from provmap.provenance.shapes import runtime_inputs

    from .npz_inputs import check_headers, expect_of_graph

    proto, label = zoo.resolve(str(model)) if isinstance(model, (str, os.PathLike)) \
        else (model, None)
    given = npz.headers if npz is not None else None
    if given:
        check_headers(npz.path, given, expect_of_graph(proto.graph))
        for vi in runtime_inputs(proto.graph):
            a = given.get(vi.name)
            if vi.name not in shapes and hasattr(a, "shape") and vi.type.HasField("tensor_type"):
                shapes = {**shapes, vi.name: tuple(int(d) for d in a.shape)}
    return proto, label, True, shapes


def cmd_bisect(args) -> int:
    from provmap.provenance.bundled.names import check_model_spec
    from provmap.provenance.profile import at_opt, parse_dims
    from provmap.provenance.shapes import parse_input_shapes

    given = _given_inputs(args)
    # bisect compares numbers at one shape: a range stands for its opt size
    shapes, dims = at_opt(parse_input_shapes(args.input_shape)), at_opt(parse_dims(args.dim))
    check_model_spec(args.model)
    if args.backend == args.reference:  # a variant (onnxruntime[optimization=basic]) differs
        raise ProvmapError(f"--backend {args.backend} and --reference {args.reference} are one "
                           "library with the same settings: it would be compared with itself; "
                           "choose another --reference")
    # TVM only now (seconds, torch with it where installed): the mistakes above are said at once
    from provmap.partition.compile import load_view
    from provmap.runtime_module.registry import get_backend
    from provmap.workbench.bisect import bisect

    view = load_view(*_model_and_shapes(args.model, shapes, given), dims=dims)
    if not view.op_nodes:
        raise ProvmapError(f"{args.model}: no node computes anything at run time (its outputs "
                           "are inputs or constants): nothing to bisect")
    backend = get_backend(args.backend)
    if given is not None:  # the artifact's reader checks these for run/compare; bisect has none
        check_input_names(view, given.headers, args.inputs)
    inputs = _inputs(args, view=view, given=given)
    res = bisect(view, backend, inputs, _tol(args), args.reference, out_dir=args.output,
                 progress=say_progress)
    if args.json:
        print_json(res)  # JSON escapes itself
    else:
        from .bisect_text import print_bisect

        print_bisect(args.backend, res, _metrics_text)
    return 1 if res["diverges"] else 0  # as compare: 0 match, 1 divergence, 2 error


def cmd_profile(args) -> int:
    from provmap.runtime_module.module import load
    from provmap.workbench.profile import profile_artifact

    given = _given_inputs(args)
    mod = load(args.artifact, trust=args.trust)
    note_needless_trust(mod, args.trust)
    res = profile_artifact(mod, _inputs(args, mod=mod, given=given), repeats=args.repeats,
                           progress=say_progress)
    trace = res.pop("trace")
    if args.trace:
        write_bytes_atomic(args.trace, json.dumps(trace).encode())
    if args.json:
        print_json(res)
        return 0
    print(f"end to end {res['e2e_ms']:.3f} ms (plain runs: {res['e2e_plain_ms']:.3f} ms); "
          f"partitions sum to {res['partitions_total_ms']:.3f} ms ({res['coverage']:.1%})")
    rows = [[p["partition"], p["backend"], f"{p['ms']:9.3f} ms",
             f"({p['kernels']} kernel{'s' if p['kernels'] != 1 else ''}; "
             f"{p['kernel_times']}; outside kernels {p['outside_kernels_ms']:.3f} ms)"]
            for p in res["partitions"]]
    rows.append(["between", "partitions", f"{res['between_partitions_ms']:9.3f} ms",
                 "(the executor: boundary tensors and dispatch between partition calls)"])
    for line in _aligned(rows):
        print(term_safe(f"  {line}"))
    print("top ONNX nodes:")
    top = res["onnx_nodes"][: args.top] if args.top else res["onnx_nodes"]
    for r in top:  # node names are the model's (someone else's) text
        shared = f"  (kernel shared with {', '.join(r['shared_with'])})" if r.get("shared_with") else ""
        print(term_safe(f"  {r['ms']:9.4f} ms  {r['onnx_node']} [{r['backend']}]{shared}"))
    for line in _unattributed_lines(res):
        print(term_safe(line))
    if args.trace:
        print(f"Chrome trace: {args.trace}")
    return 0


#: Unattributed rows shown in the text output; --json lists them all.
UNATTRIBUTED_SHOWN = 5


def _unattributed_lines(res: dict) -> list[str]:
    """The share of the partitions' time that reached ONNX nodes and where the rest went: the
    top-nodes list alone reads as the whole story, and a profiler that pairs poorly with the
    kernel map (issue 35: OpenVINO at 1%) would go unnoticed without it."""
    share, lost = res.get("attributed_share"), res.get("unattributed") or {}
    rows = lost.get("rows", [])
    head = ("attributed to ONNX nodes: " + (f"{share:.1%}" if share is not None else "n/a") +
            f" of the partitions' {res['partitions_total_ms']:.3f} ms; unattributed "
            f"{lost.get('ms', 0.0):.3f} ms" + (":" if rows else ""))
    shown = [f"  {r['ms']:9.4f} ms  {r['partition']} [{r['backend']}]  {r['what']}"
             for r in rows[:UNATTRIBUTED_SHOWN]]  # as the top nodes' lines
    more = len(rows) - UNATTRIBUTED_SHOWN
    return [head] + shown + ([f"  ... {more} more (--json lists them)"] if more > 0 else [])


def cmd_annotate(args) -> int:
    from provmap.workbench.annotate import annotate_model, coverage
    from provmap.workbench.placement import describe_states
    from provmap.runtime_module.module import load

    mod = load(args.artifact, runnable=False)
    refuse_source_model(mod, args.output)
    model = annotate_model(_reference_model(mod, args.model), mod)
    from provmap.provenance.weights import serialize

    write_bytes_atomic(args.output, serialize(model))
    cov = coverage(model)
    summary = {"annotated": args.output, "nodes": cov["nodes"], "with_backend": cov["placed"],
               "with_reason": cov["with_reason"], "unannotated": cov["unannotated"],
               "states": cov["states"]}
    if args.json:
        print_json(summary)
    else:
        print(f"wrote {args.output}: {cov['nodes']} nodes annotated "
              f"({describe_states(cov['states'])}); {cov['placed']} with their backend, "
              f"{cov['with_reason']} with the reason they run in no partition (metadata_props "
              "provmap.*; open in Netron)")
    return 0


def cmd_explain(args) -> int:
    from provmap.runtime_module.module import load

    from provmap.workbench.explain import explain_artifact, explain_lines

    only_with(args, "--headroom or --oracle-plans", args.headroom or args.oracle_plans,
               ("--model", args.model is not None), ("--repeats", args.repeats is not None),
               ("--backends", args.backends is not None), ("--trust", args.trust))
    args.repeats = 10 if args.repeats is None else args.repeats
    mod = load(args.artifact, runnable=False)
    try:  # plan_info is the search's record, free-form: an edited one must not crash explain
        x = explain_artifact(mod.manifest)
        text = None if args.json else explain_lines(x)
    except (TypeError, KeyError, AttributeError, ValueError, IndexError) as e:
        raise ProvmapError(f"{args.artifact}: manifest field plan_info is not what provmap "
                           f"writes ({type(e).__name__}: {first_line(e)}); explain cannot read "
                           "it") from None
    if args.headroom or args.oracle_plans:
        from .explain_headroom import headroom_of

        x["headroom"] = headroom_of(args, mod, _reference_model(mod, args.model))
        text = None if args.json else explain_lines(x)
    if args.json:
        print_json(x)
    else:  # names and reasons from the artifact are someone else's text, a newline too
        for ln in text:
            print_safe(ln)
    return 0


def _common(p, inputs=True):
    p.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    if inputs:
        p.add_argument("--inputs", help=".npz with one array per model input (default: random)")
        add_random_options(p)


def _tolerances(p):
    p.add_argument("--reference", default="onnxruntime", choices=["onnxruntime", "openvino"],
                   help="library that runs the whole original model as the reference "
                   "(default %(default)s)")
    p.add_argument("--atol", type=non_negative, default=1e-4,
                   help="absolute tolerance per element (default %(default)s)")
    p.add_argument("--rtol", type=non_negative, default=1e-3,
                   help="relative tolerance per element (default %(default)s)")
    p.add_argument("--quant-steps", type=count, default=DEFAULT_QUANT_STEPS,
                   help="int8/uint8 (quantized) tensors: steps apart that still match, in "
                   "place of atol/rtol; a DequantizeLinear's float output with one constant "
                   "scale (and values a MaxPool, Reshape... selects from it, and a float tensor "
                   "only QuantizeLinear reads) also matches within that many steps of the scale "
                   "(default %(default)s; 0 for exact)")
    p.add_argument("--ulps", type=count, default=4,
                   help="float16/bfloat16 tensors also match within N units in the last place "
                   "of the reference (default %(default)s; 0: --atol/--rtol only)")


def add_workbench_commands(sub) -> None:

    c = sub.add_parser("compare", help="artifact vs full-model reference at every partition "
                       "boundary (exit 0 match, 1 mismatch, 2 could not evaluate)")
    c.add_argument("artifact")
    c.add_argument("--model", help="the ONNX model, if the artifact does not embed it")
    _common(c)
    _tolerances(c)
    add_trust_option(c)
    c.set_defaults(func=cmd_compare)

    b = sub.add_parser("bisect", help="first ONNX node whose output on a backend diverges; "
                       "writes a minimal reproducer (exit 0 match, 1 divergence, 2 error)")
    b.add_argument("model", help=MODEL_HELP)
    b.add_argument("--backend", required=True,
                   help="backend under test (e.g. openvino); each node prefix runs on it")
    b.add_argument("-o", "--output", help="directory for reproducer.onnx and its inputs")
    add_input_shape_option(b)
    _common(b)
    _tolerances(b)
    b.set_defaults(func=cmd_bisect)

    pr = sub.add_parser("profile", help="time per partition, kernel and ONNX node")
    pr.add_argument("artifact")
    pr.add_argument("--repeats", type=repeats, default=20,
                    help="timed end-to-end runs (default %(default)s)")
    pr.add_argument("--trace", help="write a Chrome trace JSON here")
    pr.add_argument("--top", type=count, default=15,
                    help="ONNX nodes listed in text mode (default %(default)s; 0: all)")
    _common(pr)
    add_trust_option(pr)
    pr.set_defaults(func=cmd_profile)

    r = sub.add_parser("report", help="self-contained HTML: the graph colored by backend")
    r.add_argument("artifact")
    r.add_argument("-o", "--output", required=True, help="HTML file to write")
    r.add_argument("--profile", help="costs from a `provmap profile --json` file")
    r.add_argument("--measure", action="store_true", help="profile now for per-node costs")
    r.add_argument("--repeats", type=repeats, default=None,
                   help="profiling runs with --measure (default 10)")
    r.add_argument("--json", action="store_true", help="print a JSON summary on stdout")
    add_trust_option(r)
    r.set_defaults(func=cmd_report)

    a = sub.add_parser("annotate", help="the ONNX model with each node's backend, partition "
                       "and kernels in metadata (Netron)")
    a.add_argument("artifact")
    a.add_argument("-o", "--output", required=True, help="annotated ONNX file to write")
    a.add_argument("--model", help="the ONNX model, if the artifact does not embed it")
    a.add_argument("--json", action="store_true", help="print a JSON summary on stdout")
    a.set_defaults(func=cmd_annotate)

    e = sub.add_parser("explain", help="why each partition is where it is (Collage estimates "
                       "vs other backends and greedy; the end-to-end check)")
    e.add_argument("artifact")
    e.add_argument("--json", action="store_true", help="print the explanation as JSON")
    e.add_argument("--headroom", action="store_true", help="also measure the limit: the "
                   "per-node oracle over --backends (each ONNX node on its fastest one, from "
                   "profiling), and the share of the headroom the artifact captured")
    e.add_argument("--oracle-plans", action="store_true", help="with the limit, build the "
                   "plans it implies (each fused unit on its fastest configuration, and coarser "
                   "ones) and measure them beside the best single configuration: does its "
                   "headroom exist? (implies --headroom)")
    e.add_argument("--model", help="the ONNX model, if the artifact does not embed it "
                   "(--headroom)")
    e.add_argument("--repeats", type=repeats, default=None,
                   help="profiled runs per plan for --headroom (default 10)")
    e.add_argument("--backends", type=backend_list, default=None,
                   help="--headroom: backends and variants to profile, e.g. "
                   "onnxruntime,openvino[threads=1],tvm (default: compile's search backends "
                   "onnxruntime,openvino and the variants its search tries on the model: "
                   "threads=1 and what a library suggests; never read from the artifact)")
    add_trust_option(e)
    e.set_defaults(func=cmd_explain)

