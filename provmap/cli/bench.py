"""`provmap bench`: the benchmark suite (provmap.bench) on the command line."""

from __future__ import annotations

import os

from provmap.provenance.util.errors import ProvmapError

from .json_out import print_json
from .common import backend_list, say_progress, count, positive_int, seconds


def cmd_bench(args) -> int:
    from provmap.bench.suite import DEFAULT_MODELS, SuiteOptions, quick_options, run_suite

    from provmap.partition.strategy import parse_strategy
    from provmap.runtime_module.registry import split_outside_brackets

    def csv(x):  # backend lists may hold variants: onnxruntime[threads=1;optimization=basic]
        return split_outside_brackets(x, ",") if x else None

    strategies = split_outside_brackets(args.strategies, ";") if args.strategies else None
    from provmap.runtime_module.registry import backend_class

    names = set(csv(args.backends) or []) | set(csv(args.search_backends) or [])
    for s in strategies or ():
        names |= set(parse_strategy(s).names)  # a typo fails now, not after an hour of measuring
    for n in sorted(names):
        backend_class(n)
    models = args.models or None
    for m in models or ():
        if not m.startswith("bundled:") and not os.path.exists(m):
            raise ProvmapError(f"{m}: no such model file (or use bundled:NAME)")
    kw = dict(models=models, strategies=strategies, backends=csv(args.backends),
              search_backends=csv(args.search_backends), cache=args.cache,
              repeats=args.repeats, keep_weights=args.keep_weights or None,
              search_budget_s=args.search_budget, refine_budget_s=args.refine_budget,
              provenance_repeats=args.provenance_repeats, measure_on=args.measure_on,
              headroom_repeats=args.headroom_repeats,
              oracle_plans=False if args.no_oracle_plans else None,
              hog_search=args.search_beside_hog or None)
    if args.scaling_sizes is not None:
        kw["scaling_sizes"] = [int(x) for x in csv(args.scaling_sizes) or []]
    if args.user_models is not None:
        if args.quick or models:
            raise ProvmapError("--user-models benches the user-sized models: without --quick "
                               "(the toy run) and without MODEL arguments")
        from provmap.bench.user_bench import prepare, user_model_names, user_options

        names = (user_model_names() if args.user_models == "all"
                 else [n for n in args.user_models.split(",") if n])
        paths = prepare(names, args.models_dir, args.exporter, progress=say_progress)
        kw.pop("models")
        opts = user_options(paths, **kw)
    elif args.quick:
        opts = quick_options(**kw)
    else:
        opts = SuiteOptions(**{k: v for k, v in kw.items() if v is not None})
        if models is None:
            opts.models = list(DEFAULT_MODELS)
    if args.readme:
        from pathlib import Path

        from provmap.bench.report import END, START

        text = Path(args.readme).read_text() if os.path.exists(args.readme) else ""
        if START not in text or END not in text:  # fail now, not after the run
            raise ProvmapError(f"{args.readme}: no {START} ... {END} markers")
    res = run_suite(opts, args.output, progress=say_progress)
    if args.readme:
        from provmap.bench.report import update_readme

        update_readme(args.readme, res, os.path.relpath(args.output,
                                                        os.path.dirname(os.path.abspath(args.readme))))
    if args.json:
        print_json(res)
    else:
        from provmap.bench.report import markdown

        print(markdown(res), end="")
        print(f"(written to {args.output}/results.json, results.md, latency.png)")
    return 0


def add_bench_command(sub) -> None:
    b = sub.add_parser("bench", help="latency, search, provenance and scaling benchmarks; "
                       "writes results.json, results.md, latency.png")
    b.add_argument("models", nargs="*", metavar="MODEL",
                   help="ONNX files or bundled:NAME (default: the five light models and the "
                   "transformer block)")
    b.add_argument("-o", "--output", required=True, help="directory for the results")
    b.add_argument("--strategies", help="';'-separated, e.g. 'single:onnxruntime;"
                   "greedy:openvino,onnxruntime;collage:onnxruntime,openvino' (default: every "
                   "configuration of each of --backends a user sets in one option: threads=1, "
                   "ORT allow_spinning=0, OpenVINO performance_hint=THROUGHPUT, alone and "
                   "crossed; best single is the fastest of them; then greedy over --backends, "
                   "collage over --search-backends)")
    b.add_argument("--backends", type=backend_list, help="default onnxruntime,openvino,tvm")
    b.add_argument("--search-backends", help="collage's backends (default onnxruntime,openvino:"
                   " a cold search of untuned TVM candidates alone takes 5-20 min per model here)")
    b.add_argument("--cache", help="collage cost cache to use (default: a fresh one per model, "
                   "so the first search is cold)")
    b.add_argument("--search-budget", type=seconds, metavar="SECONDS", help="measuring time "
                   "per cold search, then only single ops and whole-model plans are measured "
                   "(default 150, --quick 30)")
    b.add_argument("--refine-budget", type=seconds, metavar="SECONDS", help="collage's second "
                   "level per model (default 60, --quick 10; 0: off)")
    b.add_argument("--provenance-repeats", type=count, metavar="N", help="TVM compiles per model "
                   "for the provenance-overhead table (default 1; 0: skip it)")
    b.add_argument("--headroom-repeats", type=count, metavar="N", help="profiled runs per "
                   "plan for the per-node oracle (the limit table; default 10; 0: skip it)")
    b.add_argument("--no-oracle-plans", action="store_true", help="do not build and measure "
                   "the oracle's own plans beside the best single configuration (the limit's "
                   "check that its room exists)")
    b.add_argument("--search-beside-hog", nargs="?", const="through", choices=("through", "ends"),
                   help="run each cold collage search beside a one-core CPU hog, and everything "
                   "after it (latency, the kept plan measured again, the limit) quiet: is the "
                   "artifact of a contended decision still within 1%% of the best single "
                   "configuration?  'through' (the default): the hog outlasts the search; "
                   "'ends': it stops when the search starts waiting for quiet, as a "
                   "neighbour's job that finishes")
    b.add_argument("--measure-on", metavar="tracker:HOST:PORT/KEY", help="measure collage's "
                   "candidates on the RPC servers of that key (see docs/remote.md)")
    b.add_argument("--repeats", type=positive_int, help="latency runs per alternative (default 30)")
    b.add_argument("--scaling-sizes", help="synthetic graph sizes, e.g. 100,1000,10000 "
                   "('' to skip the scaling run)")
    b.add_argument("--keep-weights", action="store_true",
                   help="bundled light models with the constant ConstantOfShape weights onnx "
                   "ships (bundled:NAME:original) instead of bundled:NAME's seeded random ones")
    b.add_argument("--quick", action="store_true", help="two small models, fewer repeats, "
                   "scaling to 1,000 nodes: under 5 minutes")
    b.add_argument("--user-models", nargs="?", const="all", metavar="NAMES",
                   help="the models users run, exported from PyTorch with random seeded "
                   "weights into --models-dir on first use ([torch] extra): BERT-base, GPT-2 "
                   "small, ViT-B/16, ResNet-50, EfficientNet-B0, MobileNet-v3-large, a "
                   "YOLOv8n-shaped detector; or a comma-separated subset, each optionally as "
                   "vendors ship it: NAME+qdq (quantize_static QDQ per channel), NAME+qdyn "
                   "(quantize_dynamic), NAME+fp16 (docs/bench.md)")
    b.add_argument("--models-dir", metavar="DIR", help="where --user-models' exports are kept "
                   "(default: user-models/ beside the cost cache)")
    b.add_argument("--exporter", default="dynamo", choices=["dynamo", "torchscript"],
                   help="torch.onnx.export's exporter for --user-models (default dynamo)")
    b.add_argument("--readme", metavar="FILE.md", help="also put the tables into this markdown "
                   "file, between its provmap-bench markers (they live in docs/results.md)")
    b.add_argument("--json", action="store_true", help="print results.json to stdout")
    b.set_defaults(func=cmd_bench)
