"""The measuring estimator: `MeasuredEstimator` is Collage's measure-don't-model approach: build the candidate's subgraph
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
  a quantized output is judged in its steps instead (`quant_steps`, compare's rule: within
  `quant_steps` of them; "accuracy guard: 2 quantization steps apart > quant-steps 1 ...");
  the check runs *before* timing, so a wrong candidate costs no timing.  If the reference itself
  cannot build the region the candidate stays valid and unchecked (`stats()["unchecked"]`).
* Isolation (`isolate=True`, the default).  Measurements run in one persistent worker process
  started with "spawn" (TVM, OpenVINO and ORT start thread pools; fork after that is unsafe).
  The view is not picklable, so the worker gets the cut ONNX model bytes of the region
  (`Subgraph.onnx_model()`), re-imports it (`load_view`) and builds `Subgraph(view, op_nodes)`,
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
The estimator measures one candidate at a time, in one process; another process busy on the
same cores inflates numbers: see `provmap.partition.measure.hygiene` for what is done about it.
What tuning backends did over the measured regions is tallied and told in
`provmap.partition.measure.tuning`.
"""

from __future__ import annotations

import hashlib
import statistics
import time
import threading
import weakref
from typing import Callable, Mapping

from provmap.provenance.util.errors import ProvmapError, first_line
from provmap.provenance.weights import serialize
from provmap.runtime_module.backend import Backend

from .accuracy import ATOL, RTOL, RefCache, stale_refusal
from .dynamic_envelope import region_dynamic
from .quant_steps import DEFAULT_QUANT_STEPS, region_steps
from .cache import CostCache, backend_identity
from ..candidate import Candidate, Estimate
from .cost import CostEstimator
from .hygiene import measure_candidate, retry_helps
from .tuning import TuningTally, backends_tune
from .worker import backend_spec, measure_once, resolve_backend
from .worker_process import Worker, WorkerDied
from provmap.runtime_module.subgraph import Subgraph


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
    `skipped_budget`.  With `in_context` (default), a region whose time inside a running plan is
    in the cache (`CostCache.get_in_context`, fed back by Collage's second level) is priced from
    that instead of its isolated price, counted in `in_context`.
    """

    def __init__(self, backends: Mapping[str, Backend], cache: CostCache | None = None,
                 warmup: int = 2, repeats: int = 10, min_time_s: float = 0.05,
                 max_time_s: float | None = 0.5, check_accuracy: bool = True, atol: float = ATOL, rtol: float = RTOL,
                 quant_steps: int = DEFAULT_QUANT_STEPS,
                 reference: str | Backend | None = "onnxruntime", isolate: bool = True,
                 progress: Callable[[int, int, float], None] | None = None,
                 timeout_s: float | None = 1200.0, start_method: str = "spawn",
                 ref_cache_bytes: int = 256 << 20, budget_s: float | None = None,
                 in_context: bool = True, remote=None):
        self.backends = dict(backends)
        self.budget_s = budget_s
        self.cache = cache if cache is not None else CostCache(":memory:")
        self.settings = {"warmup": int(warmup), "repeats": int(repeats),
                         "min_time_s": float(min_time_s), "max_time_s": max_time_s,
                         "atol": float(atol), "rtol": float(rtol),
                         "quant_steps": int(quant_steps)}
        self.check_accuracy = bool(check_accuracy) and reference is not None
        if isinstance(reference, str):
            ref_opts = {"allow_spinning": False} if reference == "onnxruntime" else {}
            self.reference = resolve_backend(reference, ref_opts) if self.check_accuracy else None
        else:
            self.reference = reference if self.check_accuracy else None
        self.remote = remote  # a provmap.partition.measure.remote.RemotePool: measure on its servers
        self.isolate = bool(isolate) or remote is not None
        self.in_context = bool(in_context)
        self.progress = progress
        self.timeout_s = timeout_s
        self.ref_cache_bytes = int(ref_cache_bytes)
        self._ident = {name: backend_identity(b) for name, b in self.backends.items()}
        if remote is not None:  # prices are the device's: its library versions key them
            versions = remote.identity.get("versions") or {}
            self._ident = {name: (i[0], versions.get(i[0], f"remote-unknown:{i[1]}"), i[2])
                           for name, i in self._ident.items()}
        self._spec = {name: backend_spec(b) for name, b in self.backends.items()} \
            if self.isolate else {}
        self._ref_spec = backend_spec(self.reference) if self.reference is not None else None
        self._worker = (remote if remote is not None else
                        Worker(start_method) if self.isolate else None)
        if self._worker is not None and remote is None:
            self._finalizer = weakref.finalize(self, Worker.stop, self._worker)
        self._refs = RefCache(self.ref_cache_bytes)  # in-process mode only
        self._total: int | None = None
        self._done = 0
        self._t_begin = 0.0
        self._c = {"estimates": 0, "measured": 0, "cache_hits": 0, "invalid": 0,
                   "unchecked": 0, "measure_s": 0.0, "build_load_s": 0.0, "check_s": 0.0,
                   "time_s": 0.0, "skipped_budget": 0, "in_context": 0, "remeasured": 0,
                   "contended_prices": 0}
        # prices still contended after a second measurement: this run only (partition/measure/hygiene)
        self._quarantine = CostCache(":memory:")
        self._invalid: list[dict] = []
        # what tuning backends (tvm tune=metaschedule) did over the measured candidates
        self._tuning = TuningTally()
        self._prepared: dict[str, dict] = {}  # Backend.prepare reports, by backend
        self._measure_by_backend: dict[str, list[float]] = {}
        self._lock = threading.Lock()     # counters and the cache, when prefetch runs threads
        self._prefetched: set = set()     # (key, ident) measured by prefetch, not cache hits

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
                    eta = el / self._done * left
                    if self.budget_s is not None:
                        # Past the budget the rest are skipped (or cached) in moments: an ETA
                        # of 1168 s under a 30 s budget misled (issue 36).  Never more than the
                        # budget left (an allowance per skipped candidate broke that promise).
                        eta = min(eta, max(self.budget_s - self._c["measure_s"], 0.0))
                    self.progress(self._done, self._total, eta)

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
            sub = Subgraph(view, candidate.ops)
            key = sub.key
            label = _label(view, candidate.ops)
        except (ProvmapError, ValueError) as e:
            return self._invalid_est(candidate, "", f"bad candidate: {first_line(e)}")
        ident = self._ident[name]
        if self.in_context:
            row = self.cache.get_in_context(key, ident)
            if row is not None:
                self._c["in_context"] += 1
                return Estimate(row[0], cached=True)
        hit = self.cache.get(key, ident) or self._quarantine.get(key, ident)
        if hit is not None and hit.seconds is None and self._needs_check(name) and \
                stale_refusal(hit.reason, bool(region_steps(view, sub)) or region_dynamic(sub)):
            hit = None
        if hit is not None:
            if (key, ident) not in self._prefetched:
                self._c["cache_hits"] += 1
            est = hit.estimate()
            if not est.valid:
                self._c["invalid"] += 1
                self._invalid.append({"backend": name, "ops": sorted(candidate.ops),
                                      "label": label, "reason": est.reason, "cached": True})
            return est

        if self._over_budget(candidate):
            # Out of measuring time: single ops and whole-model plans are still measured (they
            # guarantee a cover and the end-to-end check's alternatives); larger regions are
            # left unpriced, which only removes options from the search.  Not cached.
            self._c["skipped_budget"] += 1
            return Estimate(None, reason=f"not measured: the measuring budget of "
                                         f"{self.budget_s:g} s was spent")
        est = self._measure_and_record(view, candidate, sub, key, ident, label)
        if not est.valid:
            self._c["invalid"] += 1
            self._invalid.append({"backend": name, "ops": sorted(candidate.ops), "label": label,
                                  "reason": est.reason, "cached": False})
        return est

    def _over_budget(self, candidate: Candidate) -> bool:
        """Past the measuring budget, with a candidate the search can do without."""
        return (self.budget_s is not None and self._c["measure_s"] >= self.budget_s
                and len(candidate.ops) > 1 and "whole-model" not in candidate.rule.split("+"))

    def _measure_and_record(self, view, candidate: Candidate, sub, key: str, ident,
                            label: str) -> Estimate:
        """Measure one region, count it and store it in the cache (thread-safe: prefetch)."""
        t0 = time.perf_counter()
        res, cacheable, contended, retried = measure_candidate(
            lambda: self._measure_region(view, sub, key, label, candidate.backend),
            local=self.remote is None, retry=retry_helps(self._c["remeasured"],
                                                         self._c["contended_prices"]))
        dt = time.perf_counter() - t0
        est = Estimate(res.get("seconds"), reason=res.get("reason") or "",
                       spread=res.get("spread") or 0.0, cached=False,
                       max_abs_err=res.get("max_abs_err"))
        with self._lock:
            self._c["measured"] += 1
            self._c["measure_s"] += dt
            self._measure_by_backend.setdefault(candidate.backend, []).append(dt)
            for k in ("build_load_s", "check_s", "time_s"):
                self._c[k] += (res.get("phases") or {}).get(k, 0.0)
            if res.get("unchecked"):
                self._c["unchecked"] += 1
            if res.get("tuning"):
                self._tuning.add_region(res["tuning"])
            self._c["remeasured"] += retried
            self._c["contended_prices"] += contended
            if cacheable:
                (self._quarantine if contended else self.cache).put(key, ident, seconds=est.seconds, reason=est.reason,
                               spread=est.spread, repeats=res.get("repeats") or 0,
                               max_abs_err=est.max_abs_err, label=label)
        return est

    @property
    def tunes(self) -> bool:
        """Whether a backend tunes what it builds (tvm tune=metaschedule).  Then every
        candidate is priced up front (prefetch): the search asks lazily, in an order that
        in-context prices and noise change from run to run, and a region first asked for in a
        later run would be tuned then; pricing all of them makes the tuning database cover
        every region any later search can ask for."""
        return backends_tune(self.backends.values())

    @property
    def parallel(self) -> int:
        """How many candidates can be measured at once (remote servers; 1 locally)."""
        return self.remote.parallel if self.remote is not None else 1

    def _unpriced(self, view, candidates) -> list:
        """(candidate, sub, key, ident) of every candidate not priced yet, each region once."""
        todo, seen = [], set()
        for c in candidates:
            if c.backend not in self.backends:
                continue
            try:
                sub = Subgraph(view, c.ops)
                key = sub.key
            except (ProvmapError, ValueError):
                continue
            ident = self._ident[c.backend]
            if (key, ident) in seen or self.cache.get(key, ident) is not None:
                continue
            if self.in_context and self.cache.get_in_context(key, ident) is not None:
                continue
            seen.add((key, ident))
            todo.append((c, sub, key, ident))
        return todo

    #: How long a worker may take over one backend's `prepare` (tuning every task of a
    #: model's candidates); MetaSchedule bounds each trial's build and run itself.
    prepare_timeout_s: float = 4 * 3600.0

    def prepare(self, view, candidates, log=None) -> dict:
        """Let each backend do its once-for-many work (`Backend.prepare`: tvm tunes the distinct
        tasks of all its candidates in one session) on the candidates not priced yet, in the
        measuring worker.  Returns {backend: report}.  A failure or crash there costs only
        its time: each candidate then does that work itself when it is measured."""
        by_backend: dict[str, list] = {}
        for c, sub, _key, _ident in self._unpriced(view, candidates):
            by_backend.setdefault(c.backend, []).append(sub)
        out = {}
        if self.remote is not None:
            return out  # remote servers measure (and tune) candidate by candidate
        for name, subs in by_backend.items():
            backend = self.backends[name]
            if type(backend).prepare is Backend.prepare:
                continue
            t0 = time.perf_counter()
            try:
                if not self.isolate:
                    rep = {"prepared": backend.prepare(subs)}
                else:
                    req = {"kind": "prepare", "backend": self._spec[name],
                           "options": backend.options(),
                           "regions": [serialize(s.onnx_model()) for s in subs]}
                    rep = self._worker.call(req, self.prepare_timeout_s)
            except WorkerDied as d:
                rep = {"reason": d.reason}
            except Exception as e:
                rep = {"reason": first_line(e)}
            report = dict(rep.get("prepared") or {})
            if rep.get("reason"):
                report["error"] = rep["reason"]
                if log is not None:
                    log(f"{name}: preparing {len(subs)} region(s) failed ({rep['reason']}); "
                        "each candidate does that work when it is measured")
            report["wall_s"] = round(time.perf_counter() - t0, 3)
            out[name] = report
            with self._lock:
                self._prepared[name] = report
                self._tuning.add_up_front(report)
        return out

    def prefetch(self, view, candidates) -> int:
        """Measure every candidate not priced yet, `parallel` at a time, into the cache.

        The search asks for prices one at a time and stops asking when it has its path; with
        several servers it is faster to measure everything at once (more candidates, less
        wall time).  The measuring budget still holds: past it only single ops and
        whole-model candidates are measured.  Returns how many were measured."""
        from concurrent.futures import ThreadPoolExecutor

        if self.parallel <= 1 and not self.tunes:
            return 0
        todo = self._unpriced(view, candidates)

        def one(item):
            c, sub, key, ident = item
            with self._lock:
                if self._over_budget(c):
                    return 0
            self._measure_and_record(view, c, sub, key, ident, _label(view, c.ops))
            with self._lock:  # answered from the cache later: counted as measured, not a hit
                self._prefetched.add((key, ident))
            return 1

        with ThreadPoolExecutor(self.parallel, thread_name_prefix="provmap-prefetch") as ex:
            return sum(ex.map(one, todo))

    def _measure_region(self, view, sub, key: str, label: str, name: str) -> tuple[dict, bool]:
        try:
            model_bytes = serialize(sub.onnx_model())
        except Exception as e:
            return {"reason": f"cannot cut the region as ONNX: {first_line(e)}"}, True
        content = hashlib.blake2b(model_bytes, digest_size=16).hexdigest()
        check = self._needs_check(name)
        backend = self.backends[name]
        steps = region_steps(view, sub) if check else None
        if not self.isolate:
            return measure_once(sub, key, content, backend, self.reference if check else None,
                                self.reference.name if check else "", self.settings, self._refs,
                                steps), True
        req = {"model": model_bytes, "label": label, "key": key, "content": content,
               "backend": self._spec[name], "options": backend.options(),
               "reference": self._ref_spec if check else None,
               "ref_options": self.reference.options() if check else {},
               "ref_name": self.reference.name if check else "",
               "settings": self.settings, "ref_cache_bytes": self.ref_cache_bytes,
               "steps": steps}
        try:
            return self._worker.call(req, self.timeout_s), True
        except WorkerDied as d:
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
        tuning = self._tuning.report()
        if tuning is not None:
            out["tuning"] = tuning
        if self._prepared:
            out["prepared"] = dict(self._prepared)
        return out
