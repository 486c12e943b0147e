"""`--backend-option BACKEND.OPTION=VALUE` checked against the strategy before any work.

A typo here used to change nothing visible: `openvno.exclude_ops=Softmax` (a backend no strategy
names), `openvino.exclude_ops=Softmx` (an op no model has) and options for a backend the strategy
does not use were all accepted, and the build went on to a different partition than the one
asked for, with exit 0.  Each is one error naming the option, with the close known names.
"""

from __future__ import annotations

import difflib
import os

from provmap.provenance.util.errors import ProvmapError
from provmap.runtime_module.backend import Backend, BackendError
from provmap.runtime_module.options import canonical
from provmap.runtime_module.registry import available_backends, options_class, parse_variant

from .strategy import Strategy

#: Options whose value is a comma-separated list of ONNX op types.
OP_LIST_OPTIONS = ("only_ops", "exclude_ops")


def _hint(word: str, known) -> str:
    close = difflib.get_close_matches(word, list(known), n=3, cutoff=0.6)
    return f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""


def _option_problem(cls, opts: dict, variant: dict | None = None):
    """The first thing wrong with `opts` for backend class `cls`, as (kind, option, detail):
    kind "name" (no such option; detail: the known names), "value" (detail: what it expects)
    or "host" (this machine cannot honour them; option ""); None when nothing is."""
    names = list(cls.option_names()) + list(Backend.COMMON_OPTIONS)
    specs = cls.option_specs()
    for k, v in opts.items():
        if k not in names:
            return "name", k, names
        # only_ops/exclude_ops: a string or a list here; check_op_lists checks the ops.  An
        # empty only_ops was stored as `only_ops: []` and ignored: every node still ran on the
        # backend the artifact says may run none (thirteenth afternoon)
        why = (_empty_only_ops(v) if k == "only_ops" else None) if k in OP_LIST_OPTIONS \
            else cls.option_problem(k, v)
        if why:
            return "value", k, why
        opts[k] = canonical(specs.get(k), v)  # stored in the table's spelling from here on
    lone = cls.combination_problem({**(variant or {}), **opts})  # a variant's own options too
    if lone:
        return "host", "", f"option {lone[0]} {lone[1]}"
    why = _oversubscribed(opts) or cls.host_problem(opts)
    return ("host", "", why) if why else None


def _oversubscribed(opts: dict) -> str | None:
    """A thread count far past this machine's CPUs: the table allows up to MAX_THREADS (a
    typo guard, not a machine), and onnxruntime.threads=4096 on 2 CPUs made a 17-node model
    take 38.8 s a call (the fifteenth afternoon).  Refused at compile; an artifact built on a
    larger machine still runs here."""
    try:
        n = int(opts.get("threads") or 0)
    except (TypeError, ValueError):
        return None
    cpus = os.cpu_count() or 1
    if n <= 8 * cpus:
        return None
    return (f"option threads={n}: this machine has {cpus} CPU(s), and more than {8 * cpus} "
            "threads only make them wait on each other; give at most that (0: the library's "
            "default)")


def _op_list(value) -> list[str]:
    """only_ops/exclude_ops as given: a list, or the CLI's comma-separated text."""
    return list(value) if isinstance(value, (list, tuple)) else \
        [x.strip() for x in str(value).split(",") if x.strip()]


def _empty_only_ops(value) -> str | None:
    return None if _op_list(value) else ("at least one ONNX op type (an empty only_ops would "
                                         "allow no op; leave the option out to allow every op)")


def _check_strategy_backends(strategy: Strategy) -> None:
    """A mistyped backend in --strategy was refused only after the model was imported, with
    no suggestion (issue 36).  BackendError, as the registry raised it later."""
    known = available_backends()
    for b in strategy.used:
        if b.base not in known:
            raise BackendError(f"strategy {strategy.as_given!r}: unknown backend {b.base!r}"
                               f"{_hint(b.base, known)} (backends: {', '.join(known)})")


def _check_op_lists_disjoint(backend: str, opts: dict) -> None:
    """only_ops and exclude_ops naming the same op contradict each other: which one wins was
    the backend's accident (issue 36)."""
    if opts.get("only_ops") is not None and opts.get("exclude_ops") is not None:
        both = sorted(set(_op_list(opts["only_ops"])) & set(_op_list(opts["exclude_ops"])))
        if both:
            raise ProvmapError(f"--backend-option {backend}: {', '.join(both)} is in both "
                               "only_ops and exclude_ops; name each op in one of them")


def _check_variants(strategy: Strategy) -> None:
    """The options written inside a strategy's NAME[OPTION=VALUE] variants, before any work."""
    for b in strategy.used:
        if not b.options or b.base not in available_backends():
            continue
        bad = _option_problem(options_class(b.base), dict(b.options))
        if bad is None:
            continue
        kind, k, detail = bad
        if kind == "name":
            raise ProvmapError(f"strategy {strategy.as_given!r}: backend {b.base!r} has no option "
                               f"{k!r}{_hint(k, detail)} (options: {', '.join(detail)})")
        if kind == "value":
            raise ProvmapError(f"strategy {strategy.as_given!r}: {b.name}: backend {b.base!r} "
                               f"expects {detail} for {k!r}")
        raise ProvmapError(f"strategy {strategy.as_given!r}: {b.name}: {detail}")


def check_backend_options(strategy: Strategy, options: dict) -> None:
    """Every backend named must be one the strategy uses, every option one that backend has,
    every value of the option's type and range, and one this machine can honour."""
    used = [b.name for b in strategy.used]
    _check_strategy_backends(strategy)
    _check_variants(strategy)
    for backend, opts in options.items():
        flag = f"--backend-option {backend}.{next(iter(opts), '')}"
        try:
            base, variant = parse_variant(backend)
        except BackendError as e:
            raise ProvmapError(f"{flag}: {e}") from None
        known = available_backends()
        if base not in known:
            raise ProvmapError(f"{flag}: unknown backend {base!r}{_hint(base, known)} "
                               f"(backends: {', '.join(known)})")
        if backend not in used:
            raise ProvmapError(f"{flag}: strategy {strategy.as_given!r} does not use backend "
                               f"{backend!r} (it uses {', '.join(used)}); the option would "
                               "change nothing")
        try:
            cls = options_class(backend)
        except BackendError as e:
            raise ProvmapError(f"{flag}: {e}") from None
        _check_op_lists_disjoint(backend, opts)
        bad = _option_problem(cls, opts, variant)
        if bad is None:
            continue
        kind, name, detail = bad
        if kind == "name":
            raise ProvmapError(f"--backend-option {backend}.{name}: backend {backend!r} has "
                               f"no option {name!r}{_hint(name, detail)} (options: "
                               f"{', '.join(detail)})")
        if kind == "value":
            raise ProvmapError(f"--backend-option {backend}.{name}={opts[name]}: backend "
                               f"{backend!r} expects {detail} for {name!r}")
        raise ProvmapError(f"--backend-option {backend}: {detail}")


def _onnx_op_types() -> set[str]:
    import onnx.defs

    return {s.name for s in onnx.defs.get_all_schemas_with_history()}


def check_op_lists(options: dict, model_ops) -> None:
    """only_ops/exclude_ops name ONNX op types: one of the standard's, or one the model has
    (contrib ops such as com.microsoft's are not in onnx.defs)."""
    known = None
    for backend, opts in options.items():
        for name in OP_LIST_OPTIONS:
            value = opts.get(name)
            if value is None:
                continue
            ops = _op_list(value)
            if known is None:
                known = _onnx_op_types() | set(model_ops)
            for op in ops:
                if op not in known:
                    raise ProvmapError(f"--backend-option {backend}.{name}: {op!r} is not an ONNX "
                                       f"op type{_hint(op, sorted(known))}")


def idle_op_list_notes(options: dict, run_ops) -> list[str]:
    """One line per only_ops/exclude_ops op that no node reaching a backend has (all of them
    folded before import, or none in the model): the option does nothing, and an engineer
    asking "what if OpenVINO lacked Shape" should hear that rather than read an unchanged
    plan as the answer."""
    notes = []
    for backend, opts in sorted(options.items()):
        for name in OP_LIST_OPTIONS:
            value = opts.get(name)
            idle = [op for op in _op_list(value) if op not in run_ops] if value else []
            if idle:
                notes.append(f"note: --backend-option {backend}.{name}: no node left to run has "
                             f"op type {', '.join(idle)} (folded before import or not in the "
                             "model): it changes nothing here")
    return notes
