"""Pricing candidates: a `CostEstimator` turns (view, Candidate) into an `Estimate`.

`MeasuredEstimator` is Collage's measure-don't-model approach: build the candidate's subgraph
with its backend (the same `Backend.build/load/time` path an artifact later runs), time it on
deterministic random inputs, and check its outputs against a reference backend.  Results go to
a persistent `CostCache` keyed by the region's structural key, so identical blocks (ResNet's
repeated bottlenecks) and later runs are measured once.

Design
------
* Keys.  `Subgraph.key` hashes the region's structure (ops, attributes, shapes, dtypes, wiring;
  not weight values).  Inputs are generated from the key alone, so the same key always sees the
  same inputs.  Weight values do matter for the accuracy guard's reference outputs, which are
  therefore memoised (within a run, LRU-bounded) by a hash of the cut model's *bytes*.
* Inputs.  Floating inputs: standard normal (seeded from the key).  Integer and bool inputs:
  zeros.  Zeros are valid for every index-like input (Gather/ScatterND indices, TopK k would
  not be, but those are usually initializers, not region inputs); a region whose int input must
  be a real shape or a positive count may fail to build/run and is then priced invalid with the
  backend's reason.  Real values computed by running the model prefix are not used (simplicity).
* Reference.  Outputs are compared with the same subgraph run on `reference` (ONNX Runtime by
  default, with spinning threads off so it does not slow the next measurement).  A candidate on
  the reference backend itself is not checked.  Failing `|out - ref| <= atol + rtol * |ref|`
  anywhere makes the candidate invalid ("accuracy guard: max abs err X > tol vs onnxruntime");
  the check runs *before* timing, so a wrong candidate costs no timing.  If the reference itself
  cannot build the region the candidate stays valid and unchecked (`stats()["unchecked"]`).
* Isolation (`isolate=True`, the default).  Measurements run in one persistent worker process
  started with "spawn" (TVM, OpenVINO and ORT start thread pools; fork after that is unsafe).
  The view is not picklable, so the worker gets the cut ONNX model bytes of the region
  (`Subgraph.onnx_model()`), re-imports it (`load_view`) and builds `view.subgraph(op_nodes)`,
  the same region.  A worker that dies (segfault, abort, OOM kill) prices the candidate invalid
  ("backend crashed (signal 6: SIGABRT)") and is restarted for the next candidate; one that
  does not answer within `timeout_s` is killed ("timed out").  Backends are re-created in the
  worker from their registry name, or from "module:Class" for classes the registry does not
  know (the module must be importable in a fresh interpreter: not `__main__`).
* Caching.  Valid and invalid results are stored (build errors and crashes are deterministic
  for a given backend version and options); timeouts and kills by SIGKILL (likely the OOM
  killer or the user) are not.  With `cache=None` an in-memory cache still dedupes repeated
  keys within the run.

Timing: `Backend.time` (the artifact's own runner) with `warmup`/`repeats`/`min_time_s`; a
candidate whose first call shows that would take more than `max_time_s` gets 1 warm-up and
>= 3 repeats instead (untuned TVM convolutions run 30-170 ms; 12 samples of them buy nothing).
The estimator measures one candidate at a time, in one process; another process benchmarking
on the same cores will inflate numbers (see `Estimate.spread`).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import multiprocessing as mp
import signal
import statistics
import time
import weakref
from abc import ABC, abstractmethod
from collections import OrderedDict
from typing import Callable, Mapping

import numpy as np

from provmap.provenance.errors import ProvmapError
from provmap.runtime_module.backend import Backend, BackendError
from provmap.runtime_module.registry import backend_class, get_backend

from .cache import CostCache, backend_identity
from .candidate import Candidate, Estimate

__all__ = ["CostEstimator", "MockEstimator", "MeasuredEstimator", "calibrate_boundary",
           "crossing_s", "make_inputs", "backend_spec", "resolve_backend"]


# ------------------------------------------------------------------------------------------
# interface
# ------------------------------------------------------------------------------------------

class CostEstimator(ABC):
    """Prices a candidate.  `begin(total)` announces how many `estimate` calls will follow
    (for progress reporting); `stats()` returns counters; `close()` releases resources."""

    @abstractmethod
    def estimate(self, view, candidate: Candidate) -> Estimate:
        ...

    def begin(self, total: int) -> None:
        pass

    def stats(self) -> dict:
        return {}

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class MockEstimator(CostEstimator):
    """Costs from a table {(backend, frozenset(ops)): seconds | Estimate | None} or a function
    (view, candidate) -> seconds | Estimate | None.  Missing or None -> invalid.  For unit tests
    of rules and search; `calls` records every candidate asked about."""

    def __init__(self, table_or_fn: Mapping | Callable):
        self._fn = table_or_fn if callable(table_or_fn) else None
        self._table = None if callable(table_or_fn) else dict(table_or_fn)
        self.calls: list[Candidate] = []

    def estimate(self, view, candidate: Candidate) -> Estimate:
        self.calls.append(candidate)
        if self._fn is not None:
            v = self._fn(view, candidate)
        else:
            v = self._table.get((candidate.backend, frozenset(candidate.ops)))
        if v is None:
            return Estimate(None, reason=f"no mock cost for {candidate.backend} "
                                         f"{sorted(candidate.ops)}")
        if isinstance(v, Estimate):
            return v
        return Estimate(float(v))

    def stats(self) -> dict:
        return {"calls": len(self.calls)}


# ------------------------------------------------------------------------------------------
# helpers shared by the parent and the worker
# ------------------------------------------------------------------------------------------

def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return line or type(e).__name__


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
        raise BackendError(f"backend {spec!r}: cannot import: {_first_line(e)}") from None
    if not (isinstance(obj, type) and issubclass(obj, Backend)):
        raise BackendError(f"backend {spec!r} is not a provmap.runtime_module.backend.Backend subclass")
    return obj(**options)


def make_inputs(specs, key: str) -> dict[str, np.ndarray]:
    """Deterministic inputs for a region: standard normal floats, zero ints/bools, seeded by key."""
    seed = int(hashlib.blake2b(key.encode(), digest_size=8).hexdigest(), 16)
    rng = np.random.default_rng(seed)
    out = {}
    for t in specs:
        try:
            dt = np.dtype(t.dtype)
        except TypeError:
            import ml_dtypes  # noqa: F401  (registers bfloat16 & co with numpy)
            dt = np.dtype(t.dtype)
        if dt.kind in "fc" or dt.name in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
            a = rng.standard_normal(t.shape).astype(dt)
        else:
            a = np.zeros(t.shape, dtype=dt)
        out[t.name] = np.ascontiguousarray(a)
    return out


def compare_outputs(outs: dict, refs: dict, atol: float, rtol: float) -> tuple[float, str]:
    """(max abs err over all outputs, "" or the first failure's description)."""
    worst = 0.0
    failure = ""
    for name, r in refs.items():
        if name not in outs:
            return float("inf"), f"output '{name}' missing"
        a = np.asarray(outs[name])
        r = np.asarray(r)
        if a.shape != r.shape:
            return float("inf"), f"output '{name}' has shape {a.shape}, reference {r.shape}"
        if a.size == 0:
            continue
        if a.dtype.kind in "fc" or r.dtype.kind in "fc":
            af = a.astype(np.float64)
            rf = r.astype(np.float64)
            nan_a, nan_r = np.isnan(af), np.isnan(rf)
            if (nan_a != nan_r).any():
                return float("inf"), f"output '{name}' has NaN where the reference has none " \
                                     "(or the reverse)"
            ok_mask = nan_a | (af == rf)  # equal infs, NaN pairs
            diff = np.where(ok_mask, 0.0, np.abs(af - rf))
            diff = np.where(np.isnan(diff), np.inf, diff)
            err = float(diff.max())
            bad = (diff > atol + rtol * np.abs(np.where(ok_mask, 0.0, rf))).any()
        else:
            diff = np.abs(a.astype(np.int64) - r.astype(np.int64)) if a.dtype != bool \
                else (a != r).astype(np.int64)
            err = float(diff.max())
            bad = err > 0
        if bad and not failure:
            failure = f"output '{name}'"
        worst = max(worst, err)
    return worst, failure


class _RefCache:
    """Reference outputs by content hash, least recently used first out, bounded in bytes."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self._d: OrderedDict[str, dict] = OrderedDict()
        self._bytes = 0

    def get(self, k: str):
        v = self._d.get(k)
        if v is not None:
            self._d.move_to_end(k)
        return v

    def put(self, k: str, v: dict) -> None:
        n = sum(a.nbytes for a in v.values())
        if n > self.max_bytes:
            return
        self._d[k] = v
        self._bytes += n
        while self._bytes > self.max_bytes:
            _, old = self._d.popitem(last=False)
            self._bytes -= sum(a.nbytes for a in old.values())


def _run_once(backend: Backend, sub, feed: dict):
    """Build, load and call once; returns (runner, input list in runner order, outputs by name,
    seconds of that first call)."""
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
        first


def timing_plan(settings: dict, first_call_s: float) -> tuple[int, int]:
    """(warmup, repeats) for a candidate whose first call took `first_call_s`: the configured
    ones, unless they would take longer than max_time_s; then 1 warm-up and at least 3 repeats
    (a 90 ms kernel -- untuned TVM convolutions -- needs no 12 samples to lose to a 1 ms one)."""
    warmup, repeats = settings["warmup"], settings["repeats"]
    cap = settings.get("max_time_s")
    if cap and first_call_s > 0 and (warmup + repeats) * first_call_s > cap:
        return min(warmup, 1), max(3, min(repeats, int(cap / first_call_s)))
    return warmup, repeats


def _measure(sub, key: str, content: str, backend: Backend, ref: Backend | None, ref_name: str,
             settings: dict, refs: _RefCache) -> dict:
    """Measure one region on one backend (in whatever process this runs).  Never raises for a
    backend's failure: returns {"reason": ...} instead."""
    phases = {"build_load_s": 0.0, "check_s": 0.0, "time_s": 0.0}
    res = {"seconds": None, "reason": "", "spread": 0.0, "repeats": 0, "max_abs_err": None,
           "unchecked": False, "phases": phases}
    phase = "build"
    runner = None
    try:
        feed = make_inputs(sub.inputs, key)
        t0 = time.perf_counter()
        runner, args, outs, first = _run_once(backend, sub, feed)
        phases["build_load_s"] = time.perf_counter() - t0
        if ref is not None:
            phase = "check"
            t0 = time.perf_counter()
            want = refs.get(content)
            if want is None:
                try:
                    rr, _, want, _ = _run_once(ref, sub, feed)
                    rr.close()
                    refs.put(content, want)
                except Exception:
                    want = None
            phases["check_s"] = time.perf_counter() - t0
            if want is None:
                res["unchecked"] = True
            else:
                err, where = compare_outputs(outs, want, settings["atol"], settings["rtol"])
                res["max_abs_err"] = err
                if where:
                    res["reason"] = (f"accuracy guard: max abs err {err:.3g} > tol "
                                     f"(atol {settings['atol']:g}, rtol {settings['rtol']:g}) vs "
                                     f"{ref_name} ({where})")
                    return res
        phase = "time"
        t0 = time.perf_counter()
        warmup, repeats = timing_plan(settings, first)
        tm = backend.time(runner, args, warmup=warmup, repeats=repeats,
                          min_time_s=settings["min_time_s"])
        phases["time_s"] = time.perf_counter() - t0
        res.update(seconds=tm.median_s, spread=tm.spread, repeats=tm.repeats)
    except BackendError as e:
        res["reason"] = _first_line(e)
    except Exception as e:
        res["reason"] = f"{backend.name}: {phase} raised {type(e).__name__}: {_first_line(e)}"
    finally:
        if runner is not None:
            try:
                runner.close()
            except Exception:
                pass
    return res


# ------------------------------------------------------------------------------------------
# the worker process
# ------------------------------------------------------------------------------------------

def _worker_main(conn) -> None:
    try:  # a crashing backend must not leave core files around
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except Exception:
        pass
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop
    import onnx

    from .compile import load_view

    try:
        conn.send("ready")
    except (BrokenPipeError, OSError):
        return
    backends: dict[tuple, Backend] = {}
    refs = _RefCache(0)

    def get(spec: str, options: dict) -> Backend:
        k = (spec, json.dumps(options, sort_keys=True, default=str))
        if k not in backends:
            backends[k] = resolve_backend(spec, options)
        return backends[k]

    while True:
        try:
            req = conn.recv()
        except (EOFError, OSError):
            return
        if req is None:
            return
        try:
            refs.max_bytes = req["ref_cache_bytes"]
            try:
                view = load_view(onnx.load_from_string(req["model"]), req["label"],
                                 check=False)  # cut by us from a checked model
                sub = view.subgraph(view.op_nodes)
            except Exception as e:
                reply = {"seconds": None, "reason": f"re-import of the cut region failed: "
                                                    f"{_first_line(e)}"}
            else:
                try:
                    backend = get(req["backend"], req["options"])
                    ref = get(req["reference"], req["ref_options"]) if req["reference"] else None
                except Exception as e:
                    reply = {"seconds": None, "reason": _first_line(e)}
                else:
                    reply = _measure(sub, req["key"], req["content"], backend, ref,
                                     req["ref_name"], req["settings"], refs)
        except BaseException as e:  # keep the worker alive whatever happens in Python
            reply = {"seconds": None, "reason": f"worker error: {type(e).__name__}: "
                                                f"{_first_line(e)}"}
        try:
            conn.send(reply)
        except (BrokenPipeError, OSError):
            return


class _WorkerDied(Exception):
    def __init__(self, reason: str, cacheable: bool = True):
        super().__init__(reason)
        self.reason = reason
        self.cacheable = cacheable


class _Worker:
    """One persistent measuring process; restarted after it dies."""

    def __init__(self, start_method: str = "spawn"):
        self.ctx = mp.get_context(start_method)
        self.proc = None
        self.conn = None
        self.starts = 0
        self.crashes = 0
        self.start_s = 0.0

    def alive(self) -> bool:
        return self.proc is not None and self.proc.is_alive()

    def start(self, timeout_s: float = 300.0) -> None:
        """Start the worker and wait until it has imported what it needs.  A worker that
        cannot start is this installation's problem, not a candidate's: ProvmapError."""
        t0 = time.perf_counter()
        parent, child = self.ctx.Pipe()
        proc = self.ctx.Process(target=_worker_main, args=(child,), daemon=True,
                                name="provmap-cost-worker")
        proc.start()
        child.close()
        self.proc, self.conn = proc, parent
        msg = None
        try:
            if parent.poll(timeout_s):
                msg = parent.recv()
        except (EOFError, OSError):
            pass
        if msg != "ready":
            proc.join(1)
            code = proc.exitcode
            self._discard()
            raise ProvmapError(
                f"cost measurement worker did not start (exit code {code}); with the "
                f"{self.ctx.get_start_method()!r} start method the main script must guard its "
                "code with `if __name__ == \"__main__\":`, and provmap must import in a fresh "
                "interpreter; or use MeasuredEstimator(isolate=False)")
        self.starts += 1
        self.start_s += time.perf_counter() - t0

    def _death(self) -> _WorkerDied:
        proc = self.proc
        proc.join(10)
        code = proc.exitcode
        self._discard()
        self.crashes += 1
        if code is None:
            return _WorkerDied("backend crashed (worker stopped answering)")
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = "?"
            return _WorkerDied(f"backend crashed (signal {-code}: {name})",
                               cacheable=(-code != signal.SIGKILL))
        return _WorkerDied(f"backend crashed (worker exited with code {code})")

    def _discard(self) -> None:
        if self.conn is not None:
            try:
                self.conn.close()
            except OSError:
                pass
        if self.proc is not None and self.proc.is_alive():
            self.proc.kill()
            self.proc.join(5)
        self.proc = self.conn = None

    def call(self, req: dict, timeout_s: float | None) -> dict:
        if not self.alive():
            self._discard()
            self.start()
        try:
            self.conn.send(req)
        except (BrokenPipeError, OSError):
            raise self._death() from None
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            wait = 1.0 if deadline is None else max(0.0, min(1.0, deadline - time.monotonic()))
            if self.conn.poll(wait):
                try:
                    return self.conn.recv()
                except (EOFError, OSError):
                    raise self._death() from None
            if not self.proc.is_alive() and not self.conn.poll(0):
                raise self._death()
            if deadline is not None and time.monotonic() >= deadline:
                self._discard()
                self.crashes += 1
                raise _WorkerDied(f"timed out after {timeout_s:g} s (worker killed)",
                                  cacheable=False)

    def stop(self) -> None:
        if self.conn is not None and self.alive():
            try:
                self.conn.send(None)
                self.proc.join(5)
            except (BrokenPipeError, OSError):
                pass
        self._discard()


# ------------------------------------------------------------------------------------------
# the measuring estimator
# ------------------------------------------------------------------------------------------

def _label(view, ops) -> str:
    ops = sorted(ops)
    first, last = view.nodes[ops[0]], view.nodes[ops[-1]]
    one = lambda i, n: f"#{i} {n.op_type}" + (f" '{n.name}'" if n.name else "")  # noqa: E731
    span = one(ops[0], first) if len(ops) == 1 else f"{one(ops[0], first)} .. {one(ops[-1], last)}"
    return f"{view.imported.label}: {len(ops)} op(s) {span}"


class MeasuredEstimator(CostEstimator):
    """Prices candidates by building and timing them (see the module doc for the design).

    `backends` maps `Candidate.backend` names to Backend objects.  `cache` is a CostCache (None:
    an in-memory one, so repeated blocks are still measured once per run).  Timing is
    `Backend.time(warmup, repeats, min_time_s)`, except that a slow candidate whose
    (warmup + repeats) calls would exceed `max_time_s` (judged by its first call) gets 1 warm-up
    and max(3, max_time_s / first call) repeats (`timing_plan`).  `timeout_s` bounds
    one isolated measurement (build + check + timing).  `progress(done, total, eta_s)` is called
    after each estimate once `begin(total)` was called.  `budget_s` bounds the time spent
    measuring (cache hits are free): past it, only single ops and whole-model candidates are
    still measured, others are invalid ("not measured: ... budget"), counted in
    `skipped_budget`.
    """

    def __init__(self, backends: Mapping[str, Backend], cache: CostCache | None = None,
                 warmup: int = 2, repeats: int = 10, min_time_s: float = 0.05,
                 max_time_s: float | None = 0.5, check_accuracy: bool = True, atol: float = 1e-4, rtol: float = 1e-3,
                 reference: str | Backend | None = "onnxruntime", isolate: bool = True,
                 progress: Callable[[int, int, float], None] | None = None,
                 timeout_s: float | None = 1200.0, start_method: str = "spawn",
                 ref_cache_bytes: int = 256 << 20, budget_s: float | None = None):
        self.backends = dict(backends)
        self.budget_s = budget_s
        self.cache = cache if cache is not None else CostCache(":memory:")
        self.settings = {"warmup": int(warmup), "repeats": int(repeats),
                         "min_time_s": float(min_time_s), "max_time_s": max_time_s,
                         "atol": float(atol),
                         "rtol": float(rtol)}
        self.check_accuracy = bool(check_accuracy) and reference is not None
        if isinstance(reference, str):
            ref_opts = {"allow_spinning": False} if reference == "onnxruntime" else {}
            self.reference = resolve_backend(reference, ref_opts) if self.check_accuracy else None
        else:
            self.reference = reference if self.check_accuracy else None
        self.isolate = bool(isolate)
        self.progress = progress
        self.timeout_s = timeout_s
        self.ref_cache_bytes = int(ref_cache_bytes)
        self._ident = {name: backend_identity(b) for name, b in self.backends.items()}
        self._spec = {name: backend_spec(b) for name, b in self.backends.items()} \
            if self.isolate else {}
        self._ref_spec = backend_spec(self.reference) if self.reference is not None else None
        self._worker = _Worker(start_method) if self.isolate else None
        if self._worker is not None:
            self._finalizer = weakref.finalize(self, _Worker.stop, self._worker)
        self._refs = _RefCache(self.ref_cache_bytes)  # in-process mode only
        self._total: int | None = None
        self._done = 0
        self._t_begin = 0.0
        self._c = {"estimates": 0, "measured": 0, "cache_hits": 0, "invalid": 0,
                   "unchecked": 0, "measure_s": 0.0, "build_load_s": 0.0, "check_s": 0.0,
                   "time_s": 0.0, "skipped_budget": 0}
        self._invalid: list[dict] = []
        self._measure_by_backend: dict[str, list[float]] = {}

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        """Start the worker now (it otherwise starts on the first measurement)."""
        if self._worker is not None and not self._worker.alive():
            self._worker.start()

    def close(self) -> None:
        if self._worker is not None:
            self._worker.stop()

    def begin(self, total: int) -> None:
        self._total = int(total)
        self._done = 0
        self._t_begin = time.perf_counter()

    # -- pricing ---------------------------------------------------------------------------
    def _needs_check(self, name: str) -> bool:
        if self.reference is None:
            return False
        b = self.backends[name]
        return not (type(b) is type(self.reference) and b.name == self.reference.name)

    def estimate(self, view, candidate: Candidate) -> Estimate:
        try:
            return self._estimate(view, candidate)
        finally:
            self._c["estimates"] += 1
            if self._total is not None:
                self._done += 1
                if self.progress is not None:
                    el = time.perf_counter() - self._t_begin
                    left = max(self._total - self._done, 0)
                    self.progress(self._done, self._total, el / self._done * left)

    def _invalid_est(self, candidate, label, reason, cached=False) -> Estimate:
        self._c["invalid"] += 1
        self._invalid.append({"backend": candidate.backend, "ops": sorted(candidate.ops),
                              "label": label, "reason": reason, "cached": cached})
        return Estimate(None, reason=reason, cached=cached)

    def _estimate(self, view, candidate: Candidate) -> Estimate:
        name = candidate.backend
        if name not in self.backends:
            return self._invalid_est(candidate, "", f"no backend named {name!r} in this "
                                                    f"estimator ({', '.join(self.backends)})")
        try:
            sub = view.subgraph(candidate.ops)
            key = sub.key
            label = _label(view, candidate.ops)
        except (ProvmapError, ValueError) as e:
            return self._invalid_est(candidate, "", f"bad candidate: {_first_line(e)}")
        ident = self._ident[name]
        hit = self.cache.get(key, ident)
        if hit is not None:
            self._c["cache_hits"] += 1
            est = hit.estimate()
            if not est.valid:
                self._c["invalid"] += 1
                self._invalid.append({"backend": name, "ops": sorted(candidate.ops),
                                      "label": label, "reason": est.reason, "cached": True})
            return est

        if (self.budget_s is not None and self._c["measure_s"] >= self.budget_s
                and len(candidate.ops) > 1 and "whole-model" not in candidate.rule.split("+")):
            # Out of measuring time: single ops and whole-model plans are still measured (they
            # guarantee a cover and the end-to-end check's alternatives); larger regions are
            # left unpriced, which only removes options from the search.  Not cached.
            self._c["skipped_budget"] += 1
            return Estimate(None, reason=f"not measured: the measuring budget of "
                                         f"{self.budget_s:g} s was spent")
        t0 = time.perf_counter()
        res, cacheable = self._measure_region(view, sub, key, label, name)
        dt = time.perf_counter() - t0
        self._c["measured"] += 1
        self._c["measure_s"] += dt
        self._measure_by_backend.setdefault(name, []).append(dt)
        for k in ("build_load_s", "check_s", "time_s"):
            self._c[k] += (res.get("phases") or {}).get(k, 0.0)
        if res.get("unchecked"):
            self._c["unchecked"] += 1
        est = Estimate(res.get("seconds"), reason=res.get("reason") or "",
                       spread=res.get("spread") or 0.0, cached=False,
                       max_abs_err=res.get("max_abs_err"))
        if cacheable:
            self.cache.put(key, ident, seconds=est.seconds, reason=est.reason, spread=est.spread,
                           repeats=res.get("repeats") or 0, max_abs_err=est.max_abs_err,
                           label=label)
        if not est.valid:
            self._c["invalid"] += 1
            self._invalid.append({"backend": name, "ops": sorted(candidate.ops), "label": label,
                                  "reason": est.reason, "cached": False})
        return est

    def _measure_region(self, view, sub, key: str, label: str, name: str) -> tuple[dict, bool]:
        try:
            model_bytes = sub.onnx_model().SerializeToString()
        except Exception as e:
            return {"reason": f"cannot cut the region as ONNX: {_first_line(e)}"}, True
        content = hashlib.blake2b(model_bytes, digest_size=16).hexdigest()
        check = self._needs_check(name)
        backend = self.backends[name]
        if not self.isolate:
            return _measure(sub, key, content, backend, self.reference if check else None,
                            self.reference.name if check else "", self.settings, self._refs), True
        req = {"model": model_bytes, "label": label, "key": key, "content": content,
               "backend": self._spec[name], "options": backend.options(),
               "reference": self._ref_spec if check else None,
               "ref_options": self.reference.options() if check else {},
               "ref_name": self.reference.name if check else "",
               "settings": self.settings, "ref_cache_bytes": self.ref_cache_bytes}
        try:
            return self._worker.call(req, self.timeout_s), True
        except _WorkerDied as d:
            return {"reason": d.reason}, d.cacheable

    # -- reporting -------------------------------------------------------------------------
    def stats(self) -> dict:
        """Counters: estimates, measured, cache_hits, invalid (+ invalid_reasons), unchecked,
        measure_s (wall time of measurements, isolation included) split into build_load_s /
        check_s / time_s (as seen inside the measuring process), per-backend median measure
        time, worker starts/crashes, and the cache's own hits/misses/writes."""
        out = dict(self._c)
        out["invalid_reasons"] = list(self._invalid)
        out["median_measure_s"] = {b: statistics.median(v)
                                   for b, v in self._measure_by_backend.items()}
        if self._worker is not None:
            out["worker_starts"] = self._worker.starts
            out["worker_crashes"] = self._worker.crashes
            out["worker_start_s"] = self._worker.start_s
        out["cache"] = self.cache.stats()
        return out


# ------------------------------------------------------------------------------------------
# boundary calibration
# ------------------------------------------------------------------------------------------

def _relu_model(shape):
    import onnx
    from onnx import TensorProto, helper

    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "calibrate",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(m)
    return m


def calibrate_boundary(backends: Mapping[str, Backend] | list, min_time_s: float = 0.2) -> dict:
    """Price of a partition boundary on this host.

    Model: crossing(tensor, a, b) = fixed_s[b] + tensor.nbytes * per_byte_s when a != b, else 0
    (`crossing_s`).  fixed_s[b] is the median wall time of one call of b's runner on a 1-op
    model (Relu on [1,16] f32): the per-call overhead of entering backend b.  per_byte_s is the
    mean of np.copyto's per-byte time for an 800 KB and an 8 MB float32 tensor: an executor
    hand-over costs at most one copy of the tensor (the runners share numpy memory zero-copy
    where the layout allows).  Note that a measured candidate's time already includes one call
    overhead of its own backend, so fixed_s double-counts if a search also adds it for every
    partition; it is meant for comparing a split against a merged candidate that was not
    measured.  Runs in this process (it builds only a Relu per backend).
    """
    from .compile import load_view

    if not isinstance(backends, Mapping):
        backends = {b.name: b for b in backends}
    view = load_view(_relu_model((1, 16)), "calibrate-relu")
    sub = view.subgraph(view.op_nodes)
    x = np.random.default_rng(0).standard_normal((1, 16)).astype(np.float32)
    fixed = {}
    for name, b in backends.items():
        r = b.load(b.build(sub))
        try:
            args = [x for _ in r.input_names]
            fixed[name] = b.time(r, args, warmup=20, repeats=200, min_time_s=min_time_s).median_s
        finally:
            r.close()
    copy = {}
    rates = []
    for label, nbytes in (("800KB", 800_000), ("8MB", 8_000_000)):
        src = np.random.default_rng(1).standard_normal(nbytes // 4).astype(np.float32)
        dst = np.empty_like(src)
        for _ in range(3):
            np.copyto(dst, src)
        samples = []
        start = time.perf_counter()
        while len(samples) < 20 or time.perf_counter() - start < min_time_s / 2:
            t0 = time.perf_counter()
            np.copyto(dst, src)
            samples.append(time.perf_counter() - t0)
        copy[label] = statistics.median(samples)
        rates.append(copy[label] / src.nbytes)
    return {"fixed_s": fixed, "per_byte_s": float(np.mean(rates)), "copy_s": copy}


def crossing_s(calib: dict, nbytes: int, from_backend: str, to_backend: str) -> float:
    """Cost of handing a tensor of `nbytes` from a partition on `from_backend` to one on
    `to_backend`, by the model of `calibrate_boundary`."""
    if from_backend == to_backend:
        return 0.0
    return calib["fixed_s"].get(to_backend, 0.0) + nbytes * calib["per_byte_s"]
