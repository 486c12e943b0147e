"""Model -> artifact, the Python twin of `provmap compile`."""

from __future__ import annotations

import functools
import os
import warnings

import onnx

from provmap.provenance.bundled import zoo
from provmap.provenance.util.errors import ProvmapError, ProvmapWarning
from provmap.runtime_module.artifact import Artifact
from provmap.runtime_module.artifact_build import build_artifact
from provmap.runtime_module.artifact_edit import embed_source_model, with_schedule
from provmap.runtime_module.plan import Plan
from provmap.runtime_module.registry import get_backend
from provmap.runtime_module.graph_view import GraphView

from .defaults import DEFAULT_COLLAGE_BACKENDS, DEFAULT_STRATEGY  # noqa: F401  (re-exported)
from .backend_options import check_backend_options, check_op_lists, idle_op_list_notes
from .strategies import greedy, single
from .strategy import Strategy, parse_strategy
from .model_source import load_view, model_for_compile  # noqa: F401  (load_view: re-exported)


def _given_model(model, view: GraphView):
    """The model as the user gave it, to embed: read again from its path (the view holds only
    the derived copy, and keeping both in memory would double the weights for every compile)."""
    if isinstance(model, GraphView):
        return view.model  # no other copy exists; embedded, it is named the derived one
    if isinstance(model, onnx.ModelProto):
        return model
    return zoo.resolve(str(model))[0]


def make_plan(view: GraphView, strategy: Strategy, backend_options: dict | None = None):
    names = [b.name for b in strategy.used]
    opts = backend_options or {}
    backends = {n: get_backend(n, **opts.get(n, {})) for n in names}
    if strategy.kind == "single":
        return single(view, backends[names[0]]), backends
    if strategy.kind == "greedy":
        return greedy(view, [backends[n] for n in names]), backends
    return None, backends  # collage: the search makes the plan (see compile_model)


def _collage_artifact(view: GraphView, res, backends: dict, progress) -> Artifact:
    """The artifact of the plan a Collage search kept, with its report in plan_info: the one
    the search built to measure it (named by the level that kept it), or, when it measured
    nothing end to end (a plan reused from the cache, or no check), built here, under the
    schedule kept with the plan."""
    report = res.report.to_json()
    res.plan.info["collage"] = report
    if res.artifact is None:
        from .end_to_end import build_or_candidates

        built, plan, failed = build_or_candidates(
            lambda p: build_artifact(view, p, res.backends or backends, progress=progress),
            res.plan, res.fallback, lambda m: progress and progress(f"collage: {m}"))
        if failed:
            plan.info = {**res.plan.info, **(plan.info or {}), "coalesced_build_failed": failed}
        return with_schedule(built, plan.info.get("schedule"))
    art = res.artifact
    art.manifest["plan_info"] = {**(art.manifest.get("plan_info") or {}), "collage": report}
    art.manifest["strategy"] = res.strategy
    return art


def _collage_over_profile(model, view: GraphView, backends: dict, options, progress) -> Artifact:
    """The search at the profile's opt sizes, the kept plan built for the whole range, and how
    it and each library's default plan fare at min, opt and max (provmap.partition.
    profile_plan)."""
    from .collage import collage
    from .profile_plan import describe_points, opt_view, points_report, transfer

    opt = opt_view(model, view)
    if progress is not None:
        progress(f"collage: searching at the profile's opt sizes "
                 f"({view.imported.profile.describe()})")
    res = collage(opt, backends, options, progress=progress)
    every = res.backends or backends
    plan = transfer(res.plan, opt, view)
    art = with_schedule(build_artifact(view, plan, every, progress=progress),
                        res.plan.info.get("schedule"))
    defaults = {f"single:{n}": build_artifact(view, single(view, b), {n: b})
                for n, b in backends.items()}
    from .measure.quant_steps import grid_steps

    rows = points_report(art, defaults, view.imported.profile, steps=grid_steps(view.model))
    art.manifest["plan_info"] = {**(art.manifest.get("plan_info") or {}),
                                 "collage": res.report.to_json(), "profile_points": rows}
    art.manifest["strategy"] = res.strategy or "collage"
    if progress is not None:
        for line in describe_points(rows):
            progress(f"collage: at {line}")
    return art


def _record_given(art: Artifact, given) -> None:
    """How the model was named to compile, so compare/annotate can say which --model to pass
    when it is not embedded: bundled:NAME as given, a file by its name only (an artifact is
    sent to others; the user's directories are none of their business)."""
    if isinstance(given, (str, os.PathLike)):
        text = os.fspath(given)
        art.manifest["model"]["given_as"] = text if text.startswith("bundled:") else \
            os.path.basename(text)


def _said_once(fn):
    """The search and the end-to-end checks run many artifacts of one model: an output whose
    declared shape (a hint, `"shape_from": "declaration"` in the manifest) they contradict is
    said by the user's own run of the artifact, once, not by every run of the search."""
    @functools.wraps(fn)
    def wrapper(*args, **kw):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ProvmapWarning)
            return fn(*args, **kw)
    return wrapper


@_said_once
def compile_model(model, strategy: Strategy | str = DEFAULT_STRATEGY, out=None,
                  backend_options: dict | None = None, progress=None,
                  collage_options=None, embed_model: bool = False,
                  input_shapes: dict | None = None, dims: dict | None = None) -> Artifact:
    """Import, partition with `strategy`, build every partition, and (if `out`) save atomically.

    `model` is a path, bundled:NAME, a ModelProto, or an already loaded GraphView (whose
    derived copy is then the one embedded).  `strategy` is a Strategy or its text: single:<b>,
    greedy:<b1>,<b2>,... or collage[:<b1>,<b2>,...] (DEFAULT_COLLAGE_BACKENDS by default);
    `collage_options` is a provmap.partition.collage.CollageOptions.  `embed_model` stores the
    user's ONNX model, as given, in the artifact (for compare/annotate without the file).
    `progress` gets one line at a time: the import (a ModelRead) and its warnings, then the
    search's and the builds'.
    """
    _check_arguments(strategy, backend_options, model)
    strategy = parse_strategy(strategy)  # read once; everything below takes the value
    # The CLI checks these too, before the import; a script calling this gets the same errors
    # instead of a plan silently made without its options.
    check_backend_options(strategy, backend_options or {})
    view = model_for_compile(model, input_shapes, progress, dims=_api_dims(dims))
    check_op_lists(backend_options or {}, {n.op_type for n in view.nodes})
    if progress is not None:
        run_ops = {view.nodes[i].op_type for i in view.op_nodes}
        for line in idle_op_list_notes(backend_options or {}, run_ops):
            progress(line)
    if strategy.kind == "collage" and view.op_nodes:
        from .collage import collage

        _, backends = make_plan(view, strategy, backend_options)
        if view.imported.profile is not None:
            art = _collage_over_profile(model, view, backends, collage_options, progress)
        else:
            res = collage(view, backends, collage_options, progress=progress)
            art = _collage_artifact(view, res, backends, progress)
        _record_given(art, model)
        if embed_model:
            embed_source_model(art, _given_model(model, view))
        if out is not None:
            art.save(out, record_built=True)
        return art
    try:
        if view.op_nodes:
            plan, backends = make_plan(view, strategy, backend_options)
        else:  # every output is a constant: nothing to partition, search or build
            plan, backends = Plan(strategy=strategy.as_given, partitions=[],
                                  info={"note": "no node computes at run time"}), {}
        art = build_artifact(view, plan, backends, progress=progress)
    except ProvmapError:
        _unrunnable_shapes(view, input_shapes)
        raise
    _record_given(art, model)
    if embed_model:
        embed_source_model(art, _given_model(model, view))
    if out is not None:
        art.save(out, record_built=True)  # built here: its native code is ours to run
    return art


def _api_dims(dims: dict | None) -> dict | None:
    """`dims={"seq": (1, 128, 512), "batch": 1}` from a script, as `--dim` gives them."""
    if dims is None:
        return None
    from provmap.provenance.profile import as_range

    if not isinstance(dims, dict):
        raise ProvmapError(f"dims: expected {{symbol: size or (min, opt, max)}}, got "
                           f"{type(dims).__name__}")
    return {str(k): as_range(v, f"dims[{k!r}]") for k, v in dims.items()}


def _unrunnable_shapes(view, input_shapes) -> None:
    """After a failure under given input shapes: the model itself may not run at them (a
    backend was blamed for it: the eleventh afternoon), said in ONNX Runtime's words."""
    if not input_shapes:
        return
    from provmap.runtime_module.shape_check import ort_refuses

    why = ort_refuses(view.model)
    if why:
        given = ", ".join(f"{k}={'x'.join(map(str, v))}" for k, v in input_shapes.items())
        raise ProvmapError(f"--input-shape {given}: the model cannot run at these input "
                           f"shapes; ONNX Runtime on zeros of them: {why}") from None


def _check_arguments(strategy, backend_options, model) -> None:
    """A script's wrong types as one ProvmapError naming the argument (issue 36: a list of
    options was an AttributeError, model bytes a 'no such file' of the bytes)."""
    if not isinstance(strategy, (str, Strategy)):
        raise ProvmapError(f"strategy: expected text such as 'single:onnxruntime' or a Strategy, "
                           f"got {type(strategy).__name__}")
    if backend_options is not None and not (isinstance(backend_options, dict) and all(
            isinstance(v, dict) for v in backend_options.values())):
        raise ProvmapError("backend_options: expected {backend: {option: value}}, got "
                           f"{type(backend_options).__name__}")
    if isinstance(model, (bytes, bytearray)):
        raise ProvmapError("model: bytes are not read as a model; give a path, bundled:NAME or "
                           "an onnx.ModelProto (onnx.load_model_from_string(data))")
