"""`provmap compile`, `run`, `trust`, `inspect` and `lookup`: the artifact's life cycle.

Each command is a thin wrapper over a Python function of the same name and arguments
(provmap.compile, provmap.load(...).run, provmap.lookup), in the spirit of sqlite-utils: what the
CLI prints with --json is what the API returns."""

from __future__ import annotations

import argparse
import json
import os
import re
import sqlite3
import time

from provmap.provenance.util.errors import ProvmapError
from provmap.provenance.util.atomic import save_npz_atomic

from .common import (MODEL_HELP, add_input_shape_option, add_random_options, add_trust_option,
                     backend_list, budget, check_inputs_choice, count, load_inputs, output_stats,
                     note_needless_trust, parse_backend_options, positive_int, repeats,
                     say_progress, seconds, term_safe, warmups, warn)
from .common import print_safe as _say, print_text_safe
from .json_out import print_json
from .compile_trust import refuse_unusable_cache, refuse_unusable_trust_list, unrecorded_warning
from .compile_flags import (CompileProgress, check_search_texts,
                            collage_flags_only_under_collage, collage_options, set_tuning_db,
                            strategy_of)
from .inspect_text import print_inspect_text
from .trust import add_trust_command


def cmd_compile(args) -> int:
    from provmap.partition.backend_options import check_backend_options
    from provmap.provenance.bundled.names import check_model_spec
    from provmap.provenance.profile import parse_dims
    from provmap.provenance.shapes import parse_input_shapes

    for flag, value in (("--max-depth", args.max_depth), ("--max-size", args.max_size)):
        if value < 1:  # checked before the import, not as a traceback from the search
            raise ProvmapError(f"{flag} must be a positive integer, got {value}")
    backend_options = parse_backend_options(args.backend_option)
    strategy = strategy_of(args)
    check_backend_options(strategy, backend_options)
    refuse_unusable_trust_list(strategy)
    collage_flags_only_under_collage(args, strategy)
    input_shapes = parse_input_shapes(args.input_shape)
    dims = parse_dims(args.dim)
    search_options = collage_options(args, strategy)
    if search_options is not None:
        refuse_unusable_cache(search_options.cache_path)
    if args.tuning_db:
        set_tuning_db(backend_options, strategy, args.tuning_db)
    check_model_spec(args.model)  # a misspelt bundled name or a missing file, said at once
    if search_options is not None:
        check_search_texts(search_options, strategy)
    # Only now TVM (and, where it is installed, torch through it): a flag mistake is said in a
    # fraction of a second, not after the 3 s those imports take.
    from provmap.partition.compile import compile_model

    said = CompileProgress()
    t0 = time.perf_counter()
    art = compile_model(args.model, strategy, out=args.output, backend_options=backend_options,
                        progress=said, collage_options=search_options,
                        embed_model=args.embed_model, input_shapes=input_shapes, dims=dims)
    t2 = time.perf_counter()
    said.flush()
    t1 = said.model_read_at or t0  # the build alone: reading the model never counted
    unrecorded = unrecorded_warning(art, args.output)
    if unrecorded:
        warn([unrecorded])
    from provmap.runtime_module.lookup import Lookup

    ran = Lookup(art.manifest, art.provenance_map()).ops_run_by  # as inspect counts op nodes
    summary = {"artifact": str(args.output), "strategy": art.manifest["strategy"],
               "partitions": [{"id": p["id"], "backend": p["backend"],
                               "op_nodes": len(set(p["ops"]) & ran(p["id"])),
                               "kernels": len(p["kernels"])} for p in art.manifest["partitions"]],
               "coverage": art.manifest["coverage"], "compile_s": round(t2 - t1, 3),
               "size_bytes": os.path.getsize(args.output),
               "warnings": art.manifest.get("warnings", [])}
    built_tuning = [p["blob_meta"]["tuning"] for p in art.manifest["partitions"]
                    if (p.get("blob_meta") or {}).get("tuning")]
    if built_tuning:  # what the artifact's own TVM builds tuned (normally all from the database)
        summary["tuning"] = {k: sum(t[k] for t in built_tuning)
                             for k in ("tasks", "tuned", "reused", "untuned", "trials")}
    search = (art.manifest.get("plan_info") or {}).get("collage")
    if search is not None:
        summary["search"] = search
    if args.json:
        print_json(summary)
    else:
        parts = ", ".join(f"{p['id']}:{p['backend']}({p['op_nodes']})" for p in summary["partitions"])
        parts = parts or ("nothing runs on a backend (every output is an input or computed "
                          "at import)")
        print(f"{term_safe(args.output)}: {summary['strategy']}, "
              f"{len(summary['partitions'])} partition(s): {parts}")
        cov = summary["coverage"]
        # a node given to a partition whose code computes it nowhere (a weight's
        # DequantizeLinear TVM's build folded) is "unaccounted" to the map, "elided by a
        # pass" to inspect: said, so the counts add up (tenth afternoon)
        lost = cov.get("onnx_nodes_unaccounted", 0)
        lost = (f"; {lost} computed by no kernel, which inspect counts as elided by a pass"
                if lost else "")
        print(f"  ONNX nodes mapped {cov['onnx_nodes_mapped']}/{cov['onnx_nodes_total']} "
              f"(elided {cov['onnx_nodes_elided']}{lost}), kernels mapped "
              f"{cov['kernels_mapped']}/{cov['kernels_total']}; built in {summary['compile_s']:.1f} s")
        if built_tuning:
            t = summary["tuning"]
            print(f"  tvm tuning of the artifact's partitions: {t['tasks']} task(s), from the "
                  f"database {t['reused']}, tuned now {t['tuned']}, untuned {t['untuned']}")
        if search is not None:
            from provmap.partition.measure.tuning import tuning_summary
            from provmap.workbench.explain import level_words

            if search.get("plan_cache"):
                print(f"  plan reused from the cost cache: kept by the search of "
                      f"{search['plan_cache']['stored']}, whose numbers follow (nothing was "
                      "measured now; --research searches again)")
            if search.get("plan_cache_refused"):
                print(f"  plan not stored in the plan cache: {search['plan_cache_refused']}")
            c, e = search["candidates"], search["estimator"]
            print(f"  search: {c['generated']} candidates, {c['after_constraints']} after "
                  f"constraints, {c['after_pruning']} after pruning; measured {e.get('measured', 0)}, "
                  f"cache hits {e.get('cache_hits', 0)}, invalid {e.get('invalid', 0)}")
            est = ", ".join(f"{k} {v:.2f}" for k, v in search["estimated_ms"].items() if v is not None)
            print(f"  estimated ms: {est}")
            if "e2e" in search:
                meas = ", ".join(f"{k} {v['median_ms']:.2f}" for k, v in search["e2e"]["measured"].items())
                print(f"  measured ms (end to end): {meas}; kept {search['e2e']['winner']}")
            for line in tuning_summary(e.get("tuning")):
                print(f"  {line}")
            r2 = search.get("refine")
            if r2:
                print(f"  second level: {r2['proposals']} change(s) proposed, {r2['kept']} kept "
                      f"({r2['stopped']}); kept plan found by: {level_words(search.get('level'))}")
    return 0


def cmd_run(args) -> int:
    from provmap.runtime_module.backend import percentile
    from provmap.runtime_module.module import load

    # Everything the command line says is checked before the artifact loads (seconds for a
    # large one): the counts by argparse, the inputs file here.
    check_inputs_choice(args)
    polygraphy_inputs = (args.save_inputs or "").endswith(".json")
    writers = _polygraphy_writers() if args.save_outputs or polygraphy_inputs else None
    given = load_inputs(args.inputs) if args.inputs else None
    t0 = time.perf_counter()
    mod = load(args.artifact, runnable=True, trust=args.trust, runners=False)
    note_needless_trust(mod, args.trust)
    if given is not None:  # names, shapes and dtypes before seconds of loading the partitions
        from .npz_inputs import expect_of_contract

        # the headers first: data is read only for arrays the model takes (cli/npz_inputs.py)
        given = given.arrays(expect_of_contract(mod.contract), mod.contract.profile)
        mod.check_inputs(given)
    mod.load_runners()
    mod.on_warning = lambda line: warn([line])
    t1 = time.perf_counter()
    say_progress(f"loaded {args.artifact} ({len(mod.partitions)} partition(s)) in {t1 - t0:.2f} s")
    inputs = given if given is not None else mod.random_inputs(args.seed)
    for _ in range(args.warmup):
        mod.run(inputs)
    times = []
    outs = None
    for _ in range(args.repeats):
        s = time.perf_counter()
        outs = mod.run(inputs)
        times.append(time.perf_counter() - s)
    if args.output:
        save_npz_atomic(args.output, outs)
        _note_npz_keys("output", outs, args.output)
    if args.save_inputs:  # .json: Polygraphy's inputs file, for its --load-inputs
        (writers[1] if polygraphy_inputs else save_npz_atomic)(args.save_inputs, inputs)
        if not polygraphy_inputs:
            _note_npz_keys("input", inputs, args.save_inputs)
    if args.save_outputs:
        writers[0](outs, args.save_outputs, f"provmap-runner-{os.path.basename(args.artifact)}")
    summary = {"artifact": args.artifact, "load_s": round(t1 - t0, 4),
               "run_ms": [round(t * 1e3, 3) for t in times],
               "warmup": args.warmup,
               "median_ms": round(percentile(times, 0.5) * 1e3, 3),
               "min_ms": round(min(times) * 1e3, 3),
               "max_ms": round(max(times) * 1e3, 3),
               "p90_ms": round(percentile(times, 0.9) * 1e3, 3),  # np's would import numpy.ma
               "outputs": {k: output_stats(v) for k, v in outs.items()},
               "output_file": args.output}
    if args.json:
        print_json(summary)
    else:
        for k, st in summary["outputs"].items():
            line = f"{term_safe(k)}: {st['dtype']}{st['shape']}"  # a name is the model's text
            if "min" in st:
                line += f"  min {st['min']:.6g} max {st['max']:.6g} mean {st['mean']:.6g}"
            if st.get("nan") or st.get("inf"):
                line += f"  NaN {st['nan']} Inf {st['inf']}"
            print(line)
        n = len(times)
        print(f"latency over {n} run{'s' if n != 1 else ''} after {args.warmup} warm-up: median "
              f"{summary['median_ms']:.2f} ms, min {summary['min_ms']:.2f}, p90 "
              f"{summary['p90_ms']:.2f}, max {summary['max_ms']:.2f}"
              + (f"; wrote {term_safe(args.output)}" if args.output else ""))
    return 0


def _note_npz_keys(what: str, arrays: dict, path: str) -> None:
    """One warning line per tensor whose .npz key is not its name (npz_write.npz_key: a `/`
    or `%` in it), so the user knows what to ask np.load for."""
    from provmap.provenance.util.npz_write import npz_key

    warn([f"{what} {name!r} is written as {npz_key(name)!r} in {path}"
          for name in arrays if npz_key(name) != name])


def _polygraphy_writers():
    """Polygraphy's RunResults and inputs writers, or one line saying how to get them (the
    [polygraphy] extra), before the artifact loads."""
    try:
        from provmap.workbench.polygraphy_plugin import save_inputs_json, save_run_results
    except ImportError as e:
        raise ProvmapError(f"--save-outputs and --save-inputs FILE.json write Polygraphy's "
                           f"formats and need Polygraphy ({e}): pip install "
                           "'provmap[polygraphy]'") from None
    return save_run_results, save_inputs_json


def cmd_inspect(args) -> int:
    from provmap.workbench.inspect import inspect_artifact

    # taken and ignored (issue 36's fifth afternoon): --limit trims only the text listing
    if args.json and args.limit is not None:
        raise ProvmapError("--limit trims the text listing; --json prints every node and "
                           "kernel (drop one of them)")
    args.limit = 12 if args.limit is None else args.limit
    info = inspect_artifact(args.artifact, args.model)
    if args.sqlite:  # before --relax, which returns early: it skipped the file (issue 36)
        from provmap.runtime_module.module import load
        from provmap.workbench.placement import check_member, write_sqlite

        # From the checked map.json, never the sender's map.sqlite: its rows were never
        # compared with what inspect and lookup print (nu16 M2: a renamed node, a kernel
        # relabelled 'tvm', beside a placement table that said otherwise).
        art = load(args.artifact, runnable=False).artifact
        try:  # the sender's member is still checked: a user may open it with sqlite3 too
            check_member(art.members["map.sqlite"])
        except sqlite3.Error as e:  # the member is not the SQLite map provmap writes
            raise ProvmapError(f"{args.artifact}: map.sqlite: not a readable SQLite map "
                               f"({e}); nothing written to {args.sqlite}") from None
        write_sqlite(info["placement"], art.provenance_map(), args.sqlite)
        say_progress(f"wrote {args.sqlite}: the map with its placement table "
                  f"({len(info['placement']['nodes'])} ONNX nodes)")
    if args.relax:
        from provmap.runtime_module.module import load
        relax = (load(args.artifact, runnable=False).artifact.members["partitioned.relax"]
                 .decode(errors="replace"))
        if args.json:  # --json was ignored here: the text is a field of the usual object
            print_json({**info, "relax": relax})
        else:
            print_text_safe(relax)
        return 0
    if args.json:  # strict: a manifest's free-form fields may hold NaN (json_out.py)
        print_json(info)
        return 0
    print_inspect_text(info, args.model, args.limit)
    return 0


def cmd_lookup(args) -> int:
    try:
        from provmap.runtime_module.module import lookup

        ans = lookup(args.artifact, args.onnx_node, args.kernel, args.expr)
    except ProvmapError as e:
        if args.json:  # a script reading stdout gets an answer too, not an empty stream
            q = {k: v for k, v in (("onnx_node", args.onnx_node), ("kernel", args.kernel),
                                   ("expr", args.expr)) if v is not None}
            print(json.dumps({"query": q, "results": [], "error": str(e), "code": 2},
                             indent=2))
            args.json_error_printed = True  # dispatch's own {"error"} object would be a second
        raise
    if args.json:
        print_json(ans)
        return 0
    for r in ans["results"]:
        if "kernels" in r and "backends" in r:  # node answer
            _say(f"ONNX node #{r['index']} {r['name']!r} ({r['op_type']}) id {r['id']}: "
                  f"backend {', '.join(r['backends']) or '-'}, partition "
                  f"{', '.join(r['partitions']) or '-'}" + (f"; elided: {r['elided']}" if r['elided'] else ""))
            for k in r["kernels"]:
                _say(f"  {k['kernel']}  [{k['backend']}, {k['kind']}, {k['role']}]")
        elif "onnx_nodes" in r and "kernel" in r:
            _say(f"kernel {r['kernel']} [{r['backend']}, {r['kind']}] in {r['partition']}:")
            for n in r["onnx_nodes"]:
                _say(f"  ONNX node #{n['index']} {n['name']!r} ({n['op_type']}) {n['role']}")
            if not r["onnx_nodes"]:
                _say("  maps to no ONNX node: the backend added it itself (an output copy or a "
                     "layout/precision conversion no node asked for)")
        else:
            shape = re.sub(r"T\.int64\((\d+)\)", r"\1", r["shape"] or "?")  # older maps
            _say(f"expr {r['expr']} ({r['op']}, {r['dtype'] or ''}[{shape}]):")
            for n in r["onnx_nodes"]:
                _say(f"  ONNX node #{n['index']} {n['name']!r} ({n['op_type']}) {n['role']}")
            for k in r["kernels"]:
                _say(f"  kernel {k['kernel']} [{k['backend']}] {k['role']}")
    return 0


def add_artifact_commands(sub) -> None:
    from provmap.partition.defaults import DEFAULT_SEARCH_BUDGET_S, DEFAULT_STRATEGY

    c = sub.add_parser("compile", help="partition a model and write an artifact")
    c.add_argument("model", help=MODEL_HELP)
    c.add_argument("-o", "--output", required=True, help="artifact file to write")
    c.add_argument("--strategy", default=DEFAULT_STRATEGY,
                   help="collage[:<b1>,...] | single:<backend> | greedy:<b1>,<b2>,... "
                   "(default %(default)s)")
    c.add_argument("--backends", type=backend_list,
                   help="collage: backends to search over (default "
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
    c.add_argument("--research", action="store_true",
                   help="collage: search again even if the cost cache holds the plan an "
                   "earlier search kept for this model, backends and options (it is reused "
                   "otherwise: nothing is measured)")
    c.add_argument("--search-budget", type=budget, metavar="SECONDS",
                   default=argparse.SUPPRESS,
                   help="collage: stop measuring multi-op candidates after this much measuring "
                   f"time (single ops and whole-model plans are still measured); default "
                   f"{DEFAULT_SEARCH_BUDGET_S:g} s, which keeps cold searches of the bundled "
                   "models to a few minutes on 2 cores (provmap.compile() uses the same); "
                   "'none': no limit.  It bounds candidate measuring only: building, the "
                   "end-to-end check and the second level come on top")
    c.add_argument("--refine-budget", type=budget, default=argparse.SUPPRESS, metavar="SECONDS",
                   help="collage: time for the second level, which changes the kept plan "
                   "(moves, merges, boundary nodes) and keeps a change only if the end-to-end "
                   "comparison finds it faster (docs/collage.md, 'What keeps a plan'; default "
                   "60; 0: off; 'none': until it runs "
                   "out of proposals).  A proposal started before the budget ends is finished, "
                   "and concurrent schedules are searched after it")
    c.add_argument("--quiet-wait", type=seconds, default=argparse.SUPPRESS, metavar="SECONDS",
                   help="collage: on a busy machine, wait this long for quiet before measuring "
                   "anything (and before measuring a decision's round again); still busy, the "
                   "compile ends with one line (default 120; 0: do not wait)")
    c.add_argument("--accept-contended", action="store_true",
                   help="collage: if the machine stays busy through the wait, measure beside "
                   "the load instead of refusing (the record says so; the plan is not stored "
                   "for reuse)")
    c.add_argument("--variant", action="append", metavar="OPTION=VALUE[;...]",
                   help="collage: options tried as a whole-partition variant of each searched "
                   "backend that takes them, in the end-to-end check (single plans) and the "
                   "second level (moves); repeatable (default: threads=1, plus what a searched "
                   "library suggests for the model, e.g. ONNX Runtime's disable_quant_qdq=1 where "
                   "a constant is dequantized)")
    c.add_argument("--no-variants", action="store_true",
                   help="collage: try no backend variants end to end")
    c.add_argument("--measure-on", metavar="tracker:HOST:PORT/KEY",
                   help="collage: measure candidates on the RPC servers registered under KEY "
                   "with that tracker (provmap rpc-server), in parallel; prices are keyed by "
                   "that device (docs/remote.md)")
    c.add_argument("--backend-option", action="append", metavar="BACKEND.OPTION=VALUE",
                   help="e.g. onnxruntime.threads=2 (recorded in the manifest); "
                   "tvm.tune=metaschedule tunes each TVM region (tvm.trials=N per task, "
                   "tvm.tune_budget=N in all; docs/tuning.md)")
    c.add_argument("--tuning-db", metavar="DIR",
                   help="MetaSchedule records for tuned TVM backends, reused across regions, "
                   "models and runs (default $PROVMAP_TUNING_DB or ~/.cache/provmap/tuning)")
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
    add_random_options(r)
    r.add_argument("-o", "--output", help=".npz to write the outputs to")
    r.add_argument("--save-outputs", metavar="FILE", help="write the outputs as a Polygraphy "
                   "RunResults JSON file, for `polygraphy run MODEL --onnxrt --load-outputs "
                   "FILE` (needs the [polygraphy] extra)")
    r.add_argument("--save-inputs", help=".npz to write the inputs used (the random ones "
                   "without --inputs); a .json name writes Polygraphy's inputs file, for "
                   "`polygraphy run --load-inputs`")
    r.add_argument("--warmup", type=warmups, default=0, metavar="N",
                   help="untimed runs first (default 0)")
    r.add_argument("--repeats", type=repeats, default=1, metavar="N",
                   help="timed runs; the latency summary covers these (default 1)")
    # The spellings of earlier versions and of other tools, kept for scripts.
    r.add_argument("--iterations", "--repeat", dest="repeats", type=positive_int,
                   help=argparse.SUPPRESS)
    add_trust_option(r)
    r.add_argument("--json", action="store_true", help="print the summary (timings, per-output "
                   "min/max/mean and NaN/Inf counts) as JSON")
    r.set_defaults(func=cmd_run)

    add_trust_command(sub)

    i = sub.add_parser("inspect", help="partitions, nodes, kernels and boundary tensors (offline)")
    i.add_argument("artifact")
    i.add_argument("--json", action="store_true", help="print everything as JSON, with the "
                   "placement table: one row per ONNX node (docs/map-schema.md)")
    i.add_argument("--model", help="the ONNX model the placement table is keyed to, if the "
                   "artifact does not embed it (default: the compiled copy's nodes)")
    i.add_argument("--sqlite", metavar="FILE", help="write the artifact's SQLite map with the "
                   "placement table added (docs/map-schema.md)")
    i.add_argument("--relax", action="store_true", help="print the partitioned Relax module "
                   "(with --json: as the object's \"relax\" field)")
    i.add_argument("--limit", type=count, default=None, help="nodes/kernels listed per "
                   "partition in text mode (default 12; 0: all)")
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
