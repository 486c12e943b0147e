"""`provmap` command line: map, compile, run, inspect, lookup.

Each command is a thin wrapper over a Python function of the same name and arguments
(provenance.cli.cmd_map, partition.compile.compile_model, runtime_module.module.load(...).run,
.lookup), in the spirit of sqlite-utils: what the CLI prints with --json is what the API returns.
Data goes to stdout, progress and errors to stderr; errors are one line and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

from provenance.cli import (MODEL_HELP, _progress, add_input_shape_option, add_map_command,
                            dispatch)
from provenance.shapes import parse_input_shapes
from provenance.errors import ProvmapError
from provenance.store import save_npz_atomic


def _parse_backend_options(items) -> dict:
    opts: dict[str, dict] = {}
    for item in items or ():
        key, eq, value = item.partition("=")
        backend, dot, name = key.partition(".")
        if not eq or not dot:
            raise ProvmapError(f"--backend-option {item!r}: expected BACKEND.OPTION=VALUE "
                               "(e.g. openvino.precision=bf16)")
        opts.setdefault(backend, {})[name] = value
    return opts


def cmd_compile(args) -> int:
    from .compile import compile_model, load_view

    t0 = time.perf_counter()
    view = load_view(args.model, input_shapes=parse_input_shapes(args.input_shape))
    _progress(f"imported {view.imported.label}: {len(view.nodes)} ONNX nodes "
              f"({len(view.op_nodes)} compute) in {time.perf_counter() - t0:.2f} s")
    t1 = time.perf_counter()
    strategy = args.strategy
    collage_options = None
    if strategy.split(":", 1)[0] == "collage":
        from .collage import CollageOptions

        if args.backends and ":" not in strategy:
            strategy = f"collage:{args.backends}"
        collage_options = CollageOptions(
            max_depth=args.max_depth, max_size=args.max_size, pins=args.pin or [],
            forbids=args.forbid or [], cuts=args.cut or [], cache_path=args.cache,
            e2e_check=not args.no_e2e_check, measure_budget_s=args.search_budget)
    elif args.pin or args.forbid or args.cut or args.backends:
        raise ProvmapError("--pin/--forbid/--cut/--backends apply to --strategy collage")
    art = compile_model(view, strategy, out=args.output,
                        backend_options=_parse_backend_options(args.backend_option),
                        progress=_progress, collage_options=collage_options,
                        embed_model=args.embed_model)
    t2 = time.perf_counter()
    summary = {"artifact": str(args.output), "strategy": art.manifest["strategy"],
               "partitions": [{"id": p["id"], "backend": p["backend"], "op_nodes": len(p["ops"]),
                               "kernels": len(p["kernels"])} for p in art.manifest["partitions"]],
               "coverage": art.manifest["coverage"], "compile_s": round(t2 - t1, 3),
               "size_bytes": os.path.getsize(args.output)}
    search = (art.manifest.get("plan_info") or {}).get("collage")
    if search is not None:
        summary["search"] = search
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        parts = ", ".join(f"{p['id']}:{p['backend']}({p['op_nodes']})" for p in summary["partitions"])
        print(f"{args.output}: {summary['strategy']}, {len(summary['partitions'])} partition(s): {parts}")
        cov = summary["coverage"]
        print(f"  ONNX nodes mapped {cov['onnx_nodes_mapped']}/{cov['onnx_nodes_total']} "
              f"(elided {cov['onnx_nodes_elided']}), kernels mapped "
              f"{cov['kernels_mapped']}/{cov['kernels_total']}; built in {summary['compile_s']:.1f} s")
        if search is not None:
            c, e = search["candidates"], search["estimator"]
            print(f"  search: {c['generated']} candidates, {c['after_constraints']} after "
                  f"constraints, {c['after_pruning']} after pruning; measured {e.get('measured', 0)}, "
                  f"cache hits {e.get('cache_hits', 0)}, invalid {e.get('invalid', 0)}")
            est = ", ".join(f"{k} {v:.2f}" for k, v in search["estimated_ms"].items() if v is not None)
            print(f"  estimated ms: {est}")
            if "e2e" in search:
                meas = ", ".join(f"{k} {v['median_ms']:.2f}" for k, v in search["e2e"]["measured"].items())
                print(f"  measured ms (end to end): {meas}; kept {search['e2e']['winner']}")
    return 0


def _load_inputs(path: str) -> dict:
    if not os.path.exists(path):
        raise ProvmapError(f"{path}: no such inputs file")
    try:
        with np.load(path, allow_pickle=False) as z:
            if not hasattr(z, "files"):
                raise ValueError("a single .npy array")
            return {k: z[k] for k in z.files}
    except Exception as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        if "pickle" in first:
            first = "it holds Python objects, not arrays"
        raise ProvmapError(f"{path}: not a valid .npz file of input arrays ({first}); write one "
                           "with numpy.savez(path, NAME=array, ...)") from None


def output_stats(a: np.ndarray) -> dict:
    """Per-output summary, as Polygraphy prints it: a glance tells NaNs and blow-ups apart."""
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


def cmd_run(args) -> int:
    from runtime_module.module import load

    if args.random and args.inputs:
        raise ProvmapError("give either --inputs FILE.npz or --random, not both")
    t0 = time.perf_counter()
    mod = load(args.artifact, trust=args.trust)
    t1 = time.perf_counter()
    _progress(f"loaded {args.artifact} ({len(mod.partitions)} partition(s)) in {t1 - t0:.2f} s")
    if args.random:
        inputs = mod.random_inputs(args.seed)
    elif args.inputs:
        inputs = _load_inputs(args.inputs)
    else:
        raise ProvmapError("give --inputs FILE.npz or --random")
    if args.warmup < 0 or args.iterations < 1:
        raise ProvmapError("--warmup must be >= 0 and --iterations >= 1")
    for _ in range(args.warmup):
        mod.run(inputs)
    times = []
    outs = None
    for _ in range(args.iterations):
        s = time.perf_counter()
        outs = mod.run(inputs)
        times.append(time.perf_counter() - s)
    if args.output:
        save_npz_atomic(args.output, outs)
    if args.save_inputs:
        save_npz_atomic(args.save_inputs, inputs)
    summary = {"artifact": args.artifact, "load_s": round(t1 - t0, 4),
               "run_ms": [round(t * 1e3, 3) for t in times],
               "warmup": args.warmup,
               "median_ms": round(float(np.median(times)) * 1e3, 3),
               "min_ms": round(min(times) * 1e3, 3),
               "max_ms": round(max(times) * 1e3, 3),
               "p90_ms": round(float(np.percentile(times, 90)) * 1e3, 3),
               "outputs": {k: output_stats(v) for k, v in outs.items()},
               "output_file": args.output}
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        for k, st in summary["outputs"].items():
            line = f"{k}: {st['dtype']}{st['shape']}"
            if "min" in st:
                line += f"  min {st['min']:.6g} max {st['max']:.6g} mean {st['mean']:.6g}"
            if st.get("nan") or st.get("inf"):
                line += f"  NaN {st['nan']} Inf {st['inf']}"
            print(line)
        n = len(times)
        print(f"latency over {n} iteration(s) after {args.warmup} warm-up: median "
              f"{summary['median_ms']:.2f} ms, min {summary['min_ms']:.2f}, p90 "
              f"{summary['p90_ms']:.2f}, max {summary['max_ms']:.2f}"
              + (f"; wrote {args.output}" if args.output else ""))
    return 0


def add_trust_option(parser) -> None:
    parser.add_argument("--trust", action="store_true",
                        help="run native code (TVM partitions) from this artifact although this "
                        "machine did not build it (see `provmap trust`)")


def cmd_trust(args) -> int:
    from runtime_module import trust
    from runtime_module.artifact import read_artifact

    art = read_artifact(args.artifact)  # verified first: a damaged file is never trusted
    native = sorted({p["backend"] for p in art.manifest["partitions"]})
    added = trust.add_trusted(art.digest, f"trusted by the user: {args.artifact}")
    state = "recorded" if added else "already trusted"
    print(f"{args.artifact}: {state} (digest {art.digest}; partitions on {', '.join(native) or '-'}"
          f"; list: {trust.trust_file()})")
    return 0


def inspect_artifact(path: str) -> dict:
    """The data `provmap inspect --json` prints (partitions, boundary tensors, kernels)."""
    from runtime_module.module import load

    mod = load(path, runnable=False)
    man = mod.manifest
    nodes = {n.id: n for n in mod.lookup.map.nodes}
    producer = {}
    for p in man["partitions"]:
        for t in p["outputs"]:
            producer[t["name"]] = p["id"]
    parts = []
    for p in man["partitions"]:
        parts.append({
            "id": p["id"], "backend": p["backend"], "type_key": p["type_key"], "why": p["why"],
            "onnx_nodes": [{"id": nid, "name": nodes[nid].name, "op_type": nodes[nid].op_type,
                            "helper": nid not in p["ops"]} for nid in p["onnx_nodes"]],
            "kernels": p["kernels"],
            "inputs": [dict(t, producer=producer.get(t["name"], "graph input")) for t in p["inputs"]],
            "outputs": p["outputs"],
            "files": {k: {"sha256": v, "bytes": len(mod.artifact.members[k])}
                      for k, v in p["files"].items()},
        })
    return {"artifact": path, "format_version": man["format_version"], "model": man["model"],
            "strategy": man["strategy"], "backends": man["backends"], "host": man["host"],
            "created_utc": man["created_utc"], "coverage": man["coverage"], "partitions": parts}


def cmd_inspect(args) -> int:
    info = inspect_artifact(args.artifact)
    if args.relax:
        from runtime_module.module import load
        print(load(args.artifact, runnable=False).artifact.members["partitioned.relax"].decode())
        return 0
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    m = info["model"]
    print(f"{info['artifact']}: model {m['name']} (sha256 {m['sha256'][:12]}), strategy "
          f"{info['strategy']}, {len(info['partitions'])} partition(s)")
    for name, b in info["backends"].items():
        print(f"  backend {name} {b['version']} {b['options'] or ''}".rstrip())
    for p in info["partitions"]:
        ops = [n for n in p["onnx_nodes"] if not n["helper"]]
        print(f"\n{p['id']}  {p['backend']}  {len(ops)} op node(s), {len(p['kernels'])} kernel(s)"
              f"  [{p['why']}]")
        for t in p["inputs"]:
            print(f"  in   {t['name']}: {t['dtype']}{t['shape']} {t['bytes']} B  <- {t['producer']}")
        for t in p["outputs"]:
            print(f"  out  {t['name']}: {t['dtype']}{t['shape']} {t['bytes']} B")
        shown = ops[:args.limit] if args.limit else ops
        print("  nodes: " + ", ".join(f"{n['name'] or n['id']}({n['op_type']})" for n in shown)
              + (f", ... {len(ops) - len(shown)} more" if len(shown) < len(ops) else ""))
        ks = p["kernels"][:args.limit] if args.limit else p["kernels"]
        print("  kernels: " + ", ".join(k.split(":", 1)[1] for k in ks)
              + (f", ... {len(p['kernels']) - len(ks)} more" if len(ks) < len(p["kernels"]) else ""))
    return 0


def lookup_artifact(path: str, onnx_node=None, kernel=None, expr=None) -> dict:
    from runtime_module.module import load

    lk = load(path, runnable=False).lookup
    if onnx_node is not None:
        res = lk.onnx_node(onnx_node)
        if not res:
            raise ProvmapError(f"{path}: no ONNX node named or with ID {onnx_node!r}")
        return {"query": {"onnx_node": onnx_node}, "results": res}
    if kernel is not None:
        res = lk.kernel(kernel)
        if not res:
            raise ProvmapError(f"{path}: no kernel {kernel!r}")
        return {"query": {"kernel": kernel}, "results": res}
    res = lk.expr(expr)
    if res is None:
        raise ProvmapError(f"{path}: no Relax expression {expr!r}")
    return {"query": {"expr": expr}, "results": [res]}


def cmd_lookup(args) -> int:
    try:
        ans = lookup_artifact(args.artifact, args.onnx_node, args.kernel, args.expr)
    except ProvmapError as e:
        if args.json:  # a script reading stdout gets an answer too, not an empty stream
            q = {k: v for k, v in (("onnx_node", args.onnx_node), ("kernel", args.kernel),
                                   ("expr", args.expr)) if v is not None}
            print(json.dumps({"query": q, "results": [], "error": str(e)}, indent=2))
        raise
    if args.json:
        print(json.dumps(ans, indent=2))
        return 0
    for r in ans["results"]:
        if "kernels" in r and "backends" in r:  # node answer
            print(f"ONNX node #{r['index']} {r['name']!r} ({r['op_type']}) id {r['id']}: "
                  f"backend {', '.join(r['backends']) or '-'}, partition "
                  f"{', '.join(r['partitions']) or '-'}" + (f"; elided: {r['elided']}" if r['elided'] else ""))
            for k in r["kernels"]:
                print(f"  {k['kernel']}  [{k['backend']}, {k['kind']}, {k['role']}]")
        elif "onnx_nodes" in r and "kernel" in r:
            print(f"kernel {r['kernel']} [{r['backend']}, {r['kind']}] in {r['partition']}:")
            for n in r["onnx_nodes"]:
                print(f"  ONNX node #{n['index']} {n['name']!r} ({n['op_type']}) {n['role']}")
        else:
            print(f"expr {r['expr']} ({r['op']}, {r['dtype']}{r['shape']}):")
            for n in r["onnx_nodes"]:
                print(f"  ONNX node #{n['index']} {n['name']!r} ({n['op_type']}) {n['role']}")
            for k in r["kernels"]:
                print(f"  kernel {k['kernel']} [{k['backend']}] {k['role']}")
    return 0


def cmd_bench(args) -> int:
    from bench.suite import DEFAULT_MODELS, SuiteOptions, quick_options, run_suite

    from .strategies import parse_strategy

    def csv(x):
        return [s for s in x.split(",") if s] if x else None

    strategies = [s.strip() for s in args.strategies.split(";")] if args.strategies else None
    from runtime_module.registry import backend_class

    names = set(csv(args.backends) or []) | set(csv(args.search_backends) or [])
    for s in strategies or ():
        names |= set(parse_strategy(s)[1])  # a typo fails now, not after an hour of measuring
    for n in sorted(names):
        backend_class(n)
    models = args.models or None
    for m in models or ():
        if not m.startswith("bundled:") and not os.path.exists(m):
            raise ProvmapError(f"{m}: no such model file (or use bundled:NAME)")
    kw = dict(models=models, strategies=strategies, backends=csv(args.backends),
              search_backends=csv(args.search_backends), cache=args.cache,
              repeats=args.repeats, keep_weights=args.keep_weights or None,
              search_budget_s=args.search_budget)
    if args.scaling_sizes is not None:
        kw["scaling_sizes"] = [int(x) for x in csv(args.scaling_sizes) or []]
    if args.quick:
        opts = quick_options(**kw)
    else:
        opts = SuiteOptions(**{k: v for k, v in kw.items() if v is not None})
        if models is None:
            opts.models = list(DEFAULT_MODELS)
    if args.readme:
        from pathlib import Path

        from bench.report import END, START

        text = Path(args.readme).read_text() if os.path.exists(args.readme) else ""
        if START not in text or END not in text:  # fail now, not after the run
            raise ProvmapError(f"{args.readme}: no {START} ... {END} markers")
    res = run_suite(opts, args.output, progress=_progress)
    if args.readme:
        from bench.report import update_readme

        update_readme(args.readme, res, os.path.relpath(args.output,
                                                        os.path.dirname(os.path.abspath(args.readme))))
    if args.json:
        json.dump(res, sys.stdout, indent=1)
        print()
    else:
        from bench.report import markdown

        print(markdown(res), end="")
        print(f"(written to {args.output}/results.json, results.md, latency.png)")
    return 0


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("provmap")
    except PackageNotFoundError:
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    from .compile import DEFAULT_STRATEGY

    p = argparse.ArgumentParser(prog="provmap", description=(
        "Partition ONNX models across inference backends through TVM Relax, with a source map "
        "from every kernel back to ONNX nodes."))
    p.add_argument("--version", action="version", version=f"provmap {_version()}")
    sub = p.add_subparsers(dest="command", required=True)
    add_map_command(sub)

    c = sub.add_parser("compile", help="partition a model and write an artifact")
    c.add_argument("model", help=MODEL_HELP)
    c.add_argument("-o", "--output", required=True, help="artifact file to write")
    c.add_argument("--strategy", default=DEFAULT_STRATEGY,
                   help="collage[:<b1>,...] | single:<backend> | greedy:<b1>,<b2>,... "
                   "(default %(default)s)")
    c.add_argument("--backends", help="collage: backends to search over (default "
                   "onnxruntime,openvino; add tvm with --backends tvm,onnxruntime,openvino: "
                   "untuned TVM candidates make a cold search 5-20 minutes longer)")
    c.add_argument("--cache", help="collage: measurement cache (default $PROVMAP_CACHE or "
                   "~/.cache/provmap/costs.sqlite)")
    c.add_argument("--pin", action="append", metavar="NODE=BACKEND",
                   help="collage: run NODE (name, re:REGEX, node or expr ID) on BACKEND")
    c.add_argument("--forbid", action="append", metavar="NODE=BACKEND",
                   help="collage: never run NODE (name, re:REGEX, node or expr ID) on BACKEND")
    c.add_argument("--cut", action="append", metavar="NODE",
                   help="collage: no partition spans NODE's output")
    c.add_argument("--max-depth", type=int, default=4,
                   help="collage: longest chain of op nodes in one candidate (default 4)")
    c.add_argument("--max-size", type=int, default=12,
                   help="collage: most op nodes in one candidate (default 12)")
    c.add_argument("--no-e2e-check", action="store_true",
                   help="collage: keep the searched plan without measuring it against greedy "
                   "and single-backend plans end to end")
    c.add_argument("--search-budget", type=float, metavar="SECONDS",
                   help="collage: stop measuring multi-op candidates after this much measuring "
                   "time (single ops and whole-model plans are still measured); default: none")
    c.add_argument("--backend-option", action="append", metavar="BACKEND.OPTION=VALUE",
                   help="e.g. openvino.precision=bf16 (recorded in the manifest)")
    add_input_shape_option(c)
    c.add_argument("--embed-model", action="store_true",
                   help="store the ONNX model in the artifact, so compare/annotate/report work "
                   "from the artifact alone (weights are then stored twice)")
    c.add_argument("--json", action="store_true", help="print a JSON summary (partitions, "
                   "coverage, search statistics) on stdout")
    c.set_defaults(func=cmd_compile)

    r = sub.add_parser("run", help="run an artifact end to end")
    r.add_argument("artifact")
    r.add_argument("--inputs", help=".npz with one array per model input")
    r.add_argument("--random", action="store_true", help="random inputs of the right shapes")
    r.add_argument("--seed", type=int, default=0, help="seed of --random (default 0)")
    r.add_argument("-o", "--output", help=".npz to write the outputs to")
    r.add_argument("--save-inputs", help=".npz to write the inputs used (with --random)")
    r.add_argument("--warmup", type=int, default=0, metavar="N",
                   help="untimed runs first (default 0)")
    r.add_argument("--iterations", "--repeat", type=int, default=1, metavar="N",
                   help="timed runs; the latency summary covers these (default 1)")
    add_trust_option(r)
    r.add_argument("--json", action="store_true", help="print the summary (timings, per-output "
                   "min/max/mean and NaN/Inf counts) as JSON")
    r.set_defaults(func=cmd_run)

    t = sub.add_parser("trust", help="record that you trust an artifact you received, so its "
                       "native code (TVM partitions) may run here (see docs/artifact.md)")
    t.add_argument("artifact")
    t.set_defaults(func=cmd_trust)

    i = sub.add_parser("inspect", help="partitions, nodes, kernels and boundary tensors (offline)")
    i.add_argument("artifact")
    i.add_argument("--json", action="store_true", help="print everything as JSON")
    i.add_argument("--relax", action="store_true", help="print the partitioned Relax module")
    i.add_argument("--limit", type=int, default=12, help="nodes/kernels listed per partition "
                   "in text mode (0: all)")
    i.set_defaults(func=cmd_inspect)

    lk = sub.add_parser("lookup", help="ONNX node <-> backend/kernel <-> Relax expression")
    lk.add_argument("artifact")
    g = lk.add_mutually_exclusive_group(required=True)
    g.add_argument("--onnx-node", metavar="NAME_OR_ID", help="which backend, partition and "
                   "kernels run this ONNX node (name or n... ID)")
    g.add_argument("--kernel", metavar="NAME", help="which ONNX nodes this kernel implements; "
                   "qualified (p0:name) or bare name")
    g.add_argument("--expr", metavar="ID", help="a Relax expression ID (e...): its ONNX nodes "
                   "and kernels")
    lk.add_argument("--json", action="store_true", help="print the answer as JSON (an error "
                    "object when nothing matches)")
    lk.set_defaults(func=cmd_lookup)

    b = sub.add_parser("bench", help="latency, search, provenance and scaling benchmarks; "
                       "writes results.json, results.md, latency.png")
    b.add_argument("models", nargs="*", metavar="MODEL",
                   help="ONNX files or bundled:NAME (default: the five light models and the "
                   "transformer block)")
    b.add_argument("-o", "--output", required=True, help="directory for the results")
    b.add_argument("--strategies", help="';'-separated, e.g. 'single:onnxruntime;"
                   "greedy:openvino,onnxruntime;collage:onnxruntime,openvino' (default: single: "
                   "for each of --backends, greedy over them, collage over --search-backends)")
    b.add_argument("--backends", help="default onnxruntime,openvino,tvm")
    b.add_argument("--search-backends", help="collage's backends (default onnxruntime,openvino:"
                   " a cold search of untuned TVM candidates alone takes 5-20 min per model here)")
    b.add_argument("--cache", help="collage cost cache to use (default: a fresh one per model, "
                   "so the first search is cold)")
    b.add_argument("--search-budget", type=float, metavar="SECONDS", help="measuring time "
                   "per cold search, then only single ops and whole-model plans are measured "
                   "(default 150, --quick 30)")
    b.add_argument("--repeats", type=int, help="latency runs per alternative (default 30)")
    b.add_argument("--scaling-sizes", help="synthetic graph sizes, e.g. 100,1000,10000 "
                   "('' to skip the scaling run)")
    b.add_argument("--keep-weights", action="store_true",
                   help="keep ConstantOfShape weights instead of seeded random ones")
    b.add_argument("--quick", action="store_true", help="two small models, fewer repeats, "
                   "scaling to 1,000 nodes: under 5 minutes")
    b.add_argument("--readme", metavar="README.md", help="also put the tables into this file, "
                   "between its provmap-bench markers")
    b.add_argument("--json", action="store_true", help="print results.json to stdout")
    b.set_defaults(func=cmd_bench)

    from .workbench_cli import add_workbench_commands

    add_workbench_commands(sub)
    return p


def main(argv=None) -> int:
    return dispatch(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
