"""The measuring worker: one persistent spawned process that builds, checks and times candidates.

A backend that segfaults, aborts or hangs while building or running a candidate must cost the
search that one candidate, not the search itself; so every measurement crosses a pipe to this
process, which the parent restarts after a crash and kills after `timeout_s` (design in
`provmap.partition.measure.measured`; the process itself: worker_process.py).  The helpers
here run on both sides of the pipe."""

from __future__ import annotations

import importlib
import json
import time

import numpy as np

from provmap.provenance.util.errors import first_line
from provmap.runtime_module.backend import Backend, BackendError
from provmap.runtime_module.registry import backend_class, get_backend

from .dynamic_envelope import envelope_or_none, region_dynamic, with_envelope
from .accuracy import RefCache, compare_outputs, make_inputs, refusal
from .quant_steps import DEFAULT_QUANT_STEPS
from provmap.runtime_module.subgraph import Subgraph


def backend_spec(backend: Backend) -> str:
    """How a worker re-creates `backend`: its registry name if the registry gives this very
    class for it, else "module:QualName"."""
    cls = type(backend)
    try:
        if backend_class(backend.name) is cls:
            return backend.name
    except BackendError:
        pass
    return f"{cls.__module__}:{cls.__qualname__}"


def resolve_backend(spec: str, options: dict | None = None) -> Backend:
    """A backend from a registry name or a "module:Class" path, with options."""
    options = dict(options or {})
    if ":" not in spec:
        return get_backend(spec, **options)
    mod, _, attr = spec.partition(":")
    try:
        obj = importlib.import_module(mod)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except Exception as e:
        raise BackendError(f"backend {spec!r}: cannot import: {first_line(e)}") from None
    if not (isinstance(obj, type) and issubclass(obj, Backend)):
        raise BackendError(f"backend {spec!r} is not a provmap.runtime_module.backend.Backend subclass")
    return obj(**options)


def _run_once(backend: Backend, sub, feed: dict):
    """Build, load and call once; returns (runner, input list in runner order, outputs by name,
    seconds of that first call, the blob's meta)."""
    blob = backend.build(sub)
    runner = backend.load(blob)
    try:
        args = [feed[n] for n in runner.input_names]
    except KeyError as e:
        runner.close()
        raise BackendError(f"{backend.name}: runner wants input {e} that the region does not "
                           "have") from None
    t0 = time.perf_counter()
    outs = runner(args)
    first = time.perf_counter() - t0
    return runner, args, {n: np.array(o, copy=True) for n, o in zip(runner.output_names, outs)}, \
        first, blob.meta


def timing_plan(settings: dict, first_call_s: float) -> tuple[int, int]:
    """(warmup, repeats) for a candidate whose first call took `first_call_s`: the configured
    ones, unless they would take longer than max_time_s; then 1 warm-up and at least 3 repeats
    (a 90 ms kernel -- untuned TVM convolutions -- needs no 12 samples to lose to a 1 ms one)."""
    warmup, repeats = settings["warmup"], settings["repeats"]
    cap = settings.get("max_time_s")
    if cap and first_call_s > 0 and (warmup + repeats) * first_call_s > cap:
        return min(warmup, 1), max(3, min(repeats, int(cap / first_call_s)))
    return warmup, repeats


def _envelope(sub, feed: dict, content: str, refs: RefCache) -> dict:
    """The region's dynamically quantized float outputs -> one step's worth of disagreement
    (dynamic_envelope.py), {} for a region without DynamicQuantizeLinear; cached beside the
    reference outputs.  A rewrite the reference cannot run leaves the outputs to atol/rtol."""
    if not region_dynamic(sub):
        return {}
    hit = refs.get(content + "#envelope")
    if hit is not None:
        return {k: float(v) for k, v in hit.items()}
    env = envelope_or_none(sub.onnx_model(), feed)
    refs.put(content + "#envelope", {k: np.float64(v) for k, v in env.items()})
    return env


def measure_once(sub, key: str, content: str, backend: Backend, ref: Backend | None, ref_name: str,
             settings: dict, refs: RefCache, steps: dict | None = None) -> dict:
    """Measure one region on one backend (in whatever process this runs).  Never raises for a
    backend's failure: returns {"reason": ...} instead.  `steps`: the region's quantized
    outputs -> their step (`quant_steps.region_steps`), judged in steps by the guard."""
    phases = {"build_load_s": 0.0, "check_s": 0.0, "time_s": 0.0}
    res = {"seconds": None, "reason": "", "spread": 0.0, "repeats": 0, "max_abs_err": None,
           "unchecked": False, "phases": phases}
    phase = "build"
    runner = None
    try:
        feed = make_inputs(sub.inputs, key)
        t0 = time.perf_counter()
        runner, args, outs, first, meta = _run_once(backend, sub, feed)
        phases["build_load_s"] = time.perf_counter() - t0
        if meta.get("tuning"):  # what tuning did for this build (tvm tune=metaschedule)
            res["tuning"] = meta["tuning"]
        if ref is not None:
            phase = "check"
            t0 = time.perf_counter()
            want = refs.get(content)
            if want is None:
                try:
                    rr, _, want, _, _ = _run_once(ref, sub, feed)
                    rr.close()
                    refs.put(content, want)
                except Exception:
                    want = None
            if want is not None:
                steps = with_envelope(steps, _envelope(sub, feed, content, refs))
            phases["check_s"] = time.perf_counter() - t0
            if want is None:
                res["unchecked"] = True
            else:
                v = compare_outputs(outs, want, settings["atol"], settings["rtol"], steps,
                                    settings.get("quant_steps", DEFAULT_QUANT_STEPS))
                res["max_abs_err"] = v.err
                if v.failure:
                    res["reason"] = refusal(v, settings, ref_name, bool(steps))
                    return res
        phase = "time"
        t0 = time.perf_counter()
        warmup, repeats = timing_plan(settings, first)
        tm = backend.time(runner, args, warmup=warmup, repeats=repeats,
                          min_time_s=settings["min_time_s"])
        phases["time_s"] = time.perf_counter() - t0
        res.update(seconds=tm.median_s, spread=tm.spread, repeats=tm.repeats)
    except BackendError as e:
        res["reason"] = first_line(e)
    except Exception as e:
        res["reason"] = f"{backend.name}: {phase} raised {type(e).__name__}: {first_line(e)}"
    finally:
        if runner is not None:
            try:
                runner.close()
            except Exception:
                pass
    return res


class RequestState:
    """What a measuring process keeps between requests: backends by (spec, options), and the
    reference outputs of recently checked regions."""

    def __init__(self):
        self.backends: dict[tuple, Backend] = {}
        self.refs = RefCache(0)

    def backend(self, spec: str, options: dict) -> Backend:
        k = (spec, json.dumps(options, sort_keys=True, default=str))
        if k not in self.backends:
            self.backends[k] = resolve_backend(spec, options)
        return self.backends[k]


def handle_prepare(req: dict, state: RequestState) -> dict:
    """A `Backend.prepare` request: {"kind": "prepare", "backend", "options", "regions": [cut
    ONNX models, bytes]} -> {"prepared": report} or {"reason": ...}; never raises."""
    import onnx

    from ..model_source import load_view

    try:
        backend = state.backend(req["backend"], req["options"])
        subs = []
        for i, model in enumerate(req["regions"]):
            try:
                view = load_view(onnx.load_from_string(model), f"region{i}", check=False)
            except Exception:
                continue  # measuring that candidate will say why
            subs.append(Subgraph(view, view.op_nodes))
        return {"prepared": backend.prepare(subs)}
    except BaseException as e:  # keep the process alive whatever happens in Python
        return {"reason": first_line(e) if isinstance(e, BackendError)
                else f"{type(e).__name__}: {first_line(e)}"}


def handle_request(req: dict, state: RequestState) -> dict:
    """One measurement request (built by MeasuredEstimator) -> reply; never raises.  Shared by
    the local worker process and the RPC server (provmap.partition.measure.remote)."""
    import onnx

    if req.get("kind") == "prepare":
        return handle_prepare(req, state)

    from provmap.runtime_module.onnx_region import OnnxRegion

    from ..model_source import load_view

    try:
        state.refs.max_bytes = req["ref_cache_bytes"]
        try:
            backend = state.backend(req["backend"], req["options"])
            ref = (state.backend(req["reference"], req["ref_options"]) if req["reference"]
                   else None)
        except Exception as e:
            return {"seconds": None, "reason": first_line(e)}
        try:
            cut = onnx.load_from_string(req["model"])
            if backend.needs_relax or (ref is not None and ref.needs_relax):
                view = load_view(cut, req["label"], check=False)  # cut from a checked model
                sub = Subgraph(view, view.op_nodes)
            else:  # ONNX in, ONNX built: no Relax import (Backend.needs_relax)
                sub = OnnxRegion(cut, req["key"])
        except Exception as e:
            return {"seconds": None, "reason": f"re-import of the cut region failed: "
                                               f"{first_line(e)}"}
        return measure_once(sub, req["key"], req["content"], backend, ref, req["ref_name"],
                            req["settings"], state.refs, req.get("steps"))
    except BaseException as e:  # keep the process alive whatever happens in Python
        return {"seconds": None, "reason": f"worker error: {type(e).__name__}: "
                                           f"{first_line(e)}"}
