"""compile's command line turned into what compile_model takes, checked before the model is read:
the strategy, read once with --backends folded in; the flags that only make sense together with
others (search flags outside collage, issue 36: they were taken and ignored); the search options;
--tuning-db, which reaches every TVM backend of the strategy; and the progress callback."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from provmap.provenance.util.errors import ProvmapError

from .common import say_progress

if TYPE_CHECKING:  # pragma: no cover  (the parser is built without importing the search)
    from provmap.partition.strategy import Strategy


def strategy_of(args) -> Strategy:
    """--strategy, read once; `collage` with `--backends a,b` is `collage:a,b`."""
    from provmap.partition.strategy import parse_strategy

    text = args.strategy
    if text.split(":", 1)[0] == "collage" and args.backends and ":" not in text:
        text = f"collage:{args.backends}"
    return parse_strategy(text)


def collage_flags_only_under_collage(args, strategy: Strategy) -> None:
    """Search flags under single:/greedy: used to be taken and ignored (issue 36): refused in
    one line before the model is read."""
    if strategy.kind == "collage":
        return
    given = [flag for flag, given in (
        ("--search-budget", hasattr(args, "search_budget")),
        ("--refine-budget", hasattr(args, "refine_budget")), ("--cache", args.cache is not None),
        ("--quiet-wait", hasattr(args, "quiet_wait")),
        ("--accept-contended", bool(getattr(args, "accept_contended", False))),
        ("--pin", bool(args.pin)), ("--forbid", bool(args.forbid)), ("--cut", bool(args.cut)),
        ("--backends", bool(args.backends)), ("--measure-on", bool(args.measure_on)),
        # defaults the parser sets (4, 12): only a value other than them was given
        ("--max-depth", getattr(args, "max_depth", 4) != 4),
        ("--max-size", getattr(args, "max_size", 12) != 12),
        ("--variant", bool(getattr(args, "variant", None))),
        ("--no-variants", bool(getattr(args, "no_variants", False))),
        ("--research", bool(getattr(args, "research", False))),
        ("--no-e2e-check", bool(getattr(args, "no_e2e_check", False))))
        if given]
    if given:
        raise ProvmapError(f"{'/'.join(given)} appl{'ies' if len(given) == 1 else 'y'} to "
                           f"--strategy collage only; {args.strategy} would ignore "
                           f"{'it' if len(given) == 1 else 'them'}")


def collage_options(args, strategy: Strategy):
    """The search's options from the flags (None outside collage).  --backends beside a
    strategy that names its own list is refused: it was silently ignored, the search ran over
    the strategy's list."""
    if strategy.kind != "collage":
        return None
    # not from collage.py, which imports every backend: the flags are checked before that
    from provmap.partition.collage_options import DEFAULT_SEARCH_BUDGET_S, CollageOptions

    text = args.strategy
    if args.backends and ":" in text and text.split(":", 1)[1] != args.backends:
        raise ProvmapError(f"--backends {args.backends} and --strategy {text} name "
                           "different backends to search; give one of them")
    return CollageOptions(
        max_depth=args.max_depth, max_size=args.max_size, pins=args.pin or [],
        forbids=args.forbid or [], cuts=args.cut or [], cache_path=args.cache,
        e2e_check=not args.no_e2e_check,
        measure_budget_s=getattr(args, "search_budget", DEFAULT_SEARCH_BUDGET_S),
        refine_budget_s=0.0 if args.no_e2e_check else getattr(args, "refine_budget", 60.0),
        measure_on=args.measure_on, reuse_plan=not args.research,
        quiet_wait_s=getattr(args, "quiet_wait", CollageOptions.quiet_wait_s),
        accept_contended=bool(getattr(args, "accept_contended", False)),
        **({"e2e_variants": ()} if args.no_variants else
           {"e2e_variants": tuple(args.variant)} if args.variant else {}))


def check_search_texts(options, strategy: Strategy) -> None:
    """What the search would refuse in --pin/--forbid, --measure-on and --variant from their
    text alone, refused now, in the search's order and under its conditions: the search reads
    them after importing every backend and the model, seconds later (issue 53)."""
    from provmap.partition.constraint_text import check_texts
    from provmap.partition.measure.tracker_address import TrackerAddress
    from provmap.partition.variants import variant_options
    from provmap.runtime_module.registry import options_class

    names = [b.name for b in strategy.used]
    check_texts(options.pins, options.forbids, names)
    if options.measure_on:
        TrackerAddress.parse(options.measure_on)
    if not options.e2e_check or options.measure_on or options.pins or options.forbids or \
            options.cuts:
        return  # the search reads no variant then (collage.search_space): nor is one refused
    known = sorted({o for n in names for o in options_class(n).option_names()})
    for spec in options.e2e_variants or ():
        variant_options(spec, known, bool(names))


def set_tuning_db(backend_options: dict, strategy: Strategy, path: str) -> None:
    """--tuning-db applies to every TVM backend of the strategy (tvm and tvm[...] variants);
    a strategy without one would ignore it (issue 36's fifth afternoon): refused."""
    tvm = [b for b in strategy.used if b.base == "tvm"]
    if not tvm:
        raise ProvmapError(f"--tuning-db applies to TVM backends; {strategy.as_given} uses "
                           "none, so it would be ignored")
    # only where something is tuned: an untuned TVM takes no database (the option alone is
    # refused: it did nothing and still named the backend's variant; eleventh afternoon).
    # The backend says which of its options act alone: TVMBackend.combination_problem.
    from provmap.runtime_module.registry import options_class

    tuned = [b for b in tvm if options_class(b.base).combination_problem(
        {**dict(b.options or {}), **backend_options.get(b.name, {}), "tuning_db": path}) is None]
    if not tuned:
        raise ProvmapError("--tuning-db acts only with tune=metaschedule: nothing is tuned "
                           f"under {strategy.as_given} as given (add --backend-option "
                           "tvm.tune=metaschedule)")
    for b in tuned:
        backend_options.setdefault(b.name, {})["tuning_db"] = path


class CompileProgress:
    """compile_model's progress lines on stderr, noting when the model had been read: the
    summary's build time ("built in N s", compile_s) never counted the import.

    The "imported ..." line is held until the next line or the end of a successful compile
    (`flush`): a compile refused right after the import (an op a backend's only_ops leaves out)
    was a two-line failure, the progress line first, where an error is one line (issue 36)."""

    def __init__(self):
        self.model_read_at: float | None = None
        self._held: str | None = None

    def __call__(self, line: str) -> None:
        from provmap.partition.model_source import ModelRead

        if isinstance(line, ModelRead):
            self.model_read_at = time.perf_counter()
            self.flush()
            self._held = line
            return
        self.flush()
        say_progress(line)

    def flush(self) -> None:
        if self._held is not None:
            say_progress(self._held)
            self._held = None
