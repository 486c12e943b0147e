"""compile's flags that only make sense together with others, checked before the model is read:
search flags outside collage (issue 36: they were taken and ignored), and --tuning-db, which
reaches every TVM backend of the strategy."""

from __future__ import annotations

from provmap.provenance.util.errors import ProvmapError


def collage_flags_only_under_collage(args) -> None:
    """Search flags under single:/greedy: used to be taken and ignored (issue 36): refused in
    one line before the model is read."""
    if args.strategy.split(":", 1)[0] == "collage":
        return
    given = [flag for flag, given in (
        ("--search-budget", hasattr(args, "search_budget")),
        ("--refine-budget", hasattr(args, "refine_budget")), ("--cache", args.cache is not None),
        ("--pin", bool(args.pin)), ("--forbid", bool(args.forbid)), ("--cut", bool(args.cut)),
        ("--backends", bool(args.backends)), ("--measure-on", bool(args.measure_on)))
        if given]
    if given:
        raise ProvmapError(f"{'/'.join(given)} appl{'ies' if len(given) == 1 else 'y'} to "
                           f"--strategy collage only; {args.strategy} would ignore "
                           f"{'it' if len(given) == 1 else 'them'}")


def set_tuning_db(backend_options: dict, strategy: str, path: str) -> None:
    """--tuning-db applies to every TVM backend of the strategy (tvm and tvm[...] variants)."""
    from provmap.partition.backend_options import strategy_backends
    from provmap.partition.compile import DEFAULT_COLLAGE_BACKENDS
    from provmap.runtime_module.registry import parse_variant

    for n in strategy_backends(strategy, DEFAULT_COLLAGE_BACKENDS):
        if parse_variant(n)[0] == "tvm":
            backend_options.setdefault(n, {})["tuning_db"] = path
