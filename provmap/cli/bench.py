"""`provmap bench`: the benchmark suite (provmap.bench) on the command line, and its named steps.

`provmap bench [MODEL ...]` is the latency step (bench/suite.py), parsed here; `provmap bench
STEP ARGS` runs another step of bench/steps.py, whose module parses ARGS itself.  The step's
name is read before the parser is built (`step_args`): a step's options are its module's, and
`provmap bench corpus --sample 40` must reach the corpus step's parser, not this one's."""

from __future__ import annotations

import argparse
import os

from provmap.provenance.util.errors import ProvmapError

from .json_out import print_json
from .common import backend_list, command_at, say_progress, count, positive_int, seconds


def step_args(words: list[str]) -> argparse.Namespace | None:
    """The parsed command for `provmap [-v] bench STEP ARGS` when STEP is a step run by its own
    module (None otherwise: the parser reads the line); `bench --list-steps` too, which needs
    no output directory."""
    i = _bench_at(words)
    if i is None:  # not bench: the steps' table (~20 ms of imports) is not needed
        return None
    from provmap.bench.steps import STEPS

    name, rest = words[i + 1], words[i + 2:]
    if name == "--list-steps" and not rest:
        return argparse.Namespace(command="bench", func=_list_steps, verbose=i > 0, json=False)
    if name not in STEPS or STEPS[name].module == "suite":
        return None
    return argparse.Namespace(command="bench", func=_run_step, step=name, step_argv=rest,
                              verbose=i > 0, json=False)


def _bench_at(words: list[str]) -> int | None:
    """Where the word `bench` is, when it is the command and a word follows it."""
    i = command_at(words)
    return i if words[i:i + 1] == ["bench"] and len(words) > i + 1 else None


def suite_words(words: list[str]) -> list[str]:
    """`bench latency ...`, `bench user_latency [NAMES] ...` and `bench hog_search [through|ends]
    ...` as the options that select them: the three steps of `provmap bench` itself."""
    i = _bench_at(words)
    if i is None:
        return words
    from provmap.bench.steps import STEPS

    if words[i + 1] not in STEPS or STEPS[words[i + 1]].module != "suite":
        return words
    name = words[i + 1]
    head, rest = words[:i + 1], words[i + 2:]
    flag = STEPS[name].flag
    if not flag or any(w == flag or w.startswith(flag + "=") for w in rest):
        return head + rest  # the option given as well: it is the one that counts
    takes = (lambda w: not w.startswith("-")) if flag == "--user-models" else \
        (lambda w: w in ("through", "ends"))
    if rest and takes(rest[0]):
        return head + [f"{flag}={rest[0]}"] + rest[1:]
    return head + [flag] + rest if flag == "--user-models" else head + rest + [flag]


def _list_steps(args) -> int:
    from provmap.bench.steps import listing

    print(listing(), end="")
    return 0


def _run_step(args) -> int:
    from provmap.bench.steps import run

    return run(args.step, args.step_argv)


def cmd_bench(args) -> int:
    if args.list_steps:
        return _list_steps(args)
    from provmap.bench.records import DEFAULT_ROOT, check_output
    from provmap.bench.steps import STEPS
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
        if m in STEPS:
            raise ProvmapError(f"{m} is a step: name it first, `provmap bench {m} ...`")
        if not m.startswith("bundled:") and not os.path.exists(m):
            import difflib

            near = difflib.get_close_matches(m, list(STEPS), n=1, cutoff=0.75)
            hint = f"; or the step {near[0]}?" if near and m is models[0] else ""
            raise ProvmapError(f"{m}: no such model file (or use bundled:NAME{hint})")
    out = args.output or DEFAULT_ROOT
    check_output(out)  # -o is optional: the parser's checks did not see the default
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
    step = ("hog_search" if args.search_beside_hog else
            "user_latency" if args.user_models is not None else "latency")
    res = run_suite(opts, out, progress=say_progress, step=step)
    from provmap.bench.records import record_stem

    stem = record_stem(step, out)
    if args.readme:
        from provmap.bench.report import update_readme

        update_readme(args.readme, res, os.path.relpath(
            stem, os.path.dirname(os.path.abspath(args.readme))))
    if args.json:
        print_json(res)
    else:
        from provmap.bench.report import markdown

        print(markdown(res), end="")
        print(f"(written to {stem}.json, .md and .png)")
    return 0


def add_bench_command(sub) -> None:
    from provmap.bench.steps import listing

    b = sub.add_parser(
        "bench", help="the benchmarks, as named steps (latency by default); each writes its "
        "record to bench/out/STEP/HOST.json and .md",
        usage="provmap bench [STEP] [MODEL ...] [options]",
        description="`provmap bench [MODEL ...]` runs the latency step (the options below); "
        "`provmap bench STEP ...` runs another step, with its own options (`provmap bench STEP "
        "--help`).\n\n" + listing(), formatter_class=argparse.RawDescriptionHelpFormatter)
    b.add_argument("models", nargs="*", metavar="MODEL",
                   help="ONNX files or bundled:NAME (default: the five light models and the "
                   "transformer block)")
    b.add_argument("-o", "--output", metavar="OUT", help="the records' root: writes "
                   "OUT/STEP/HOST.json, .md and .png (default bench/out, run from the "
                   "checkout; STEP is latency, user_latency or hog_search)")
    b.add_argument("--list-steps", action="store_true", help="list the steps and exit")
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
    b.add_argument("--json", action="store_true",
                   help="print the run's results (its record's JSON) to stdout")
    b.set_defaults(func=cmd_bench)
