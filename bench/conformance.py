"""ONNX's own operator test cases, run through each plain library and through provmap.

The question is not "how much of ONNX does each library cover" but "does going through provmap
lose anything the library itself gets right": every provmap pipeline is read against its plain
library (provmap-ort vs ort, provmap-openvino vs openvino, provmap-tvm and provmap-map vs tvm),
and the count that matters most is provmap returning wrong numbers where the library is right.

Cases crash native code or hang, so each (case, pipeline) runs in a worker process with a
deadline; a dead or late worker is replaced.  Workers are single-threaded (ORT, OpenVINO and TVM
thread pools pinned to 1) so that --jobs is the number of cores used.

    provmap bench conformance --sample 150 --seed 0 [-o OUT]
"""

from __future__ import annotations

import os
import random
import re
import signal
import sys
import tempfile
import time
from collections import defaultdict, deque
from functools import lru_cache
from multiprocessing import connection, get_context

import numpy as np

from provmap.provenance.util.errors import first_line

from .conformance_exceptions import EXCEPTIONS, exception_for  # noqa: F401  (re-exported)
from .judge import Mismatch, compare, output_bounds  # noqa: F401  (re-exported)

PLAIN = ["ort", "openvino", "tvm"]
# provmap pipeline -> the plain library it must not fall behind.
PROVMAP = {"provmap-ort": "ort", "provmap-openvino": "openvino", "provmap-tvm": "tvm",
           "provmap-map": "tvm"}
PIPELINES = PLAIN + list(PROVMAP)
STATUSES = ["pass", "fail", "error", "crash", "timeout"]
MAX_IR = 10  # ONNX Runtime (1.32) refuses IR 11+, which onnx 1.23 writes.
THREADS = 1

# ---- cases ------------------------------------------------------------------------------------
@lru_cache(maxsize=1)
def _cases() -> dict:
    """name -> (model bytes with IR <= MAX_IR, [(inputs, outputs)]): small, picklable payloads."""
    import warnings

    import onnx
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():  # the generators overflow casts on purpose
        warnings.simplefilter("ignore")
        cases = collect_testcases()
    out = {}
    for c in cases:
        model = c.model
        if model.ir_version > MAX_IR:
            model = onnx.ModelProto.FromString(model.SerializeToString())
            model.ir_version = MAX_IR
        sets = [([_norm(x) for x in ins], [_norm(x) for x in outs]) for ins, outs in c.data_sets]
        out[c.name] = (model.SerializeToString(), sets, c.rtol, c.atol)
    return out


def _norm(x):  # as the runner's _normalize_tensor, plus numpy scalars and sequences
    import onnx

    if isinstance(x, (list, tuple)):
        return [_norm(y) for y in x]
    if isinstance(x, onnx.TensorProto):
        return onnx.numpy_helper.to_array(x)
    return x if x is None or isinstance(x, np.ndarray) else np.asarray(x)


def select_cases(sample: int | None = None, seed: int = 0, regex: str | None = None) -> list[str]:
    names = sorted(_cases())
    if regex:
        names = [n for n in names if re.search(regex, n)]
    if sample is not None and sample < len(names):
        names = sorted(random.Random(seed).sample(names, sample))
    return names


# ---- comparison: judge.py (onnx's runner's check, with quantized and transform bounds) ------


# ---- pipelines (run inside a worker) --------------------------------------------------------------
# Plain TVM gets no shape_dict, as provmap's importer calls it, so both see the same Relax import.
# Provmap pipelines take the public road: compile_model -> artifact file -> load -> run.
def _run_ort(model, names, inputs):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = THREADS
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, dict(zip(names, inputs)))


def _run_openvino(model, names, inputs):
    import openvino as ov

    core = ov.Core()
    compiled = core.compile_model(core.read_model(model=model.SerializeToString()), "CPU",
                                  {"INFERENCE_PRECISION_HINT": "f32",
                                   "INFERENCE_NUM_THREADS": THREADS})
    res = compiled.create_infer_request().infer(dict(zip(names, inputs)))
    return [np.array(res[p], copy=True) for p in compiled.outputs]


def _tvm_value(x):
    import tvm

    if hasattr(x, "numpy"):
        return x.numpy()
    if isinstance(x, tvm.runtime.ShapeTuple):  # Relax keeps a Shape result as a shape value
        return np.array(x, dtype=np.int64)
    if isinstance(x, (bool, int, float)):
        return np.asarray(x)
    return [_tvm_value(y) for y in x]


def _run_vm(ex, inputs, n_out):
    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(ex, tvm.cpu())
    # Not np.ascontiguousarray: it turns 0-d arrays into shape (1,).
    args = [tvm.runtime.tensor(np.require(a, requirements="C"), tvm.cpu()) for a in inputs]
    out = vm["main"](*args)
    return [_tvm_value(out)] if n_out == 1 else [_tvm_value(o) for o in out]


def _run_tvm(model, names, inputs):
    import tvm
    from tvm.relax.frontend.onnx import from_onnx

    mod = from_onnx(model)
    ex = tvm.compile(mod, target=tvm.target.Target({"kind": "llvm"}))
    return _run_vm(ex, inputs, len(model.graph.output))


def _run_provmap(backend: str):
    def run(model, names, inputs):
        from provmap.partition.compile import compile_model
        from provmap.runtime_module import trust
        from provmap.runtime_module.module import load

        opts = {backend: {"threads": THREADS}} if backend in ("onnxruntime", "openvino") else {}
        with tempfile.TemporaryDirectory(prefix="provmap-conf-") as d:
            path = os.path.join(d, "model.provmap")
            compile_model(model, f"single:{backend}", out=path, backend_options=opts)
            mod = load(path)
            try:
                out = mod.run(dict(zip(names, inputs)))
            finally:
                mod.close()
                trust.forget_path(path)  # the file goes with the directory: so does its entry
        return [out[n] for n in mod.output_names]
    return run


def _run_map(model, names, inputs):
    from provmap.provenance.build import compile_tvm
    from provmap.provenance.util.errors import ProvmapError
    from provmap.provenance.importer import import_onnx
    from provmap.runtime_module.backends.ort_types import ORT_TYPES

    imp = import_onnx(model, type_oracle=ORT_TYPES)
    if imp.opaque:  # `provmap map` reports these nodes; their placeholders never run
        i, why = next(iter(sorted(imp.opaque.items())))
        raise ProvmapError(f"ONNX node #{i} ({model.graph.node[i].op_type}) not compilable by "
                           f"TVM: {why}")
    return _run_vm(compile_tvm(imp).executable, inputs, len(model.graph.output))


_RUNNERS = {"ort": _run_ort, "openvino": _run_openvino, "tvm": _run_tvm,
            "provmap-ort": _run_provmap("onnxruntime"),
            "provmap-openvino": _run_provmap("openvino"), "provmap-tvm": _run_provmap("tvm"),
            "provmap-map": _run_map}
# For the isolation tests: a native crash and a hang.
_RUNNERS.update(_abort=lambda *a: os.abort(), _hang=lambda *a: time.sleep(3600))




def _execute(case: str, payload, pipeline: str) -> dict:
    import onnx

    from provmap.provenance.util.errors import ProvmapError

    model_bytes, sets, rtol, atol = payload
    model = onnx.ModelProto.FromString(model_bytes)
    names = [i.name for i in model.graph.input]
    t0 = time.perf_counter()
    status, msg = "pass", ""
    try:  # ProvmapError is provmap refusing cleanly; anything else escaping it is a crash
        for inputs, expected in sets:
            compare(expected, list(_RUNNERS[pipeline](model, names, inputs)), rtol, atol,
                    bounds=output_bounds(model, inputs, expected))
    except Mismatch as e:
        status, msg = "fail", str(e)
    except ProvmapError as e:
        status, msg = "error", first_line(e, with_type=False)
    except Exception as e:
        status, msg = ("crash" if pipeline in PROVMAP else "error"), first_line(e, with_type=True)
    return {"status": status, "message": msg[:300], "seconds": round(time.perf_counter() - t0, 3)}


def run_case(case_name: str, pipeline: str) -> dict:
    """In this process (no isolation: a native crash takes the caller down); see run_many."""
    return _execute(case_name, _cases()[case_name], pipeline)


# ---- worker pool --------------------------------------------------------------------------------
def _serve(conn, errpath: str) -> None:
    fd = os.open(errpath, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.dup2(fd, 1)
    os.dup2(fd, 2)  # native libraries' chatter; the last line explains a crash
    for var in ("OMP_NUM_THREADS", "TVM_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = str(THREADS)
    import onnxruntime, openvino, tvm  # noqa: F401,E401  (import time must not count as a case's)
    import provmap.partition.compile  # noqa: F401

    conn.send("ready")
    try:
        for task in iter(conn.recv, None):
            conn.send(_execute(*task))
    except EOFError:
        pass


class _Worker:
    def __init__(self, ctx, errpath: str):
        self.conn, child = ctx.Pipe()
        self.errpath, self.offset, self.task = errpath, 0, None
        self.proc = ctx.Process(target=_serve, args=(child, errpath), daemon=True)
        self.proc.start()
        child.close()
        self.ready, self.deadline = False, time.time() + 300  # imports on a busy machine

    def death(self) -> dict:
        code = self.proc.exitcode or 0
        how = signal.Signals(-code).name if code < 0 else f"exit code {code}"
        try:  # the task's own stderr: its last line says why
            with open(self.errpath, "rb") as f:
                f.seek(self.offset)
                lines = f.read().decode(errors="replace").strip().splitlines()
        except OSError:
            lines = []
        words = f": {lines[-1].strip()[:200]}" if lines else ""
        return {"status": "crash", "message": f"worker died ({how}){words}", "seconds": None}

    def end(self) -> None:
        self.proc.kill()
        self.proc.join()
        self.conn.close()


def run_many(tasks: list[tuple[str, str]], jobs: int = 2, timeout: float = 60.0,
             progress=None, cases: dict | None = None) -> dict[tuple[str, str], dict]:
    """Run (case, pipeline) tasks in at most `jobs` worker processes, `timeout` seconds each.
    `cases` maps a case name to its payload (`_cases()`'s form; default: the node cases).

    Workers are spawned, so a calling script needs the `if __name__ == "__main__":` guard."""
    cases, pending, results = cases if cases is not None else _cases(), deque(tasks), {}
    ctx = get_context("spawn")  # fork after TVM/OpenVINO have started threads is not safe
    workers: list[_Worker] = []
    stillborn = 0
    with tempfile.TemporaryDirectory(prefix="provmap-conf-") as logdir:
        try:
            while pending or any(w.task for w in workers):
                while len(workers) < min(jobs, len(pending) + sum(bool(w.task) for w in workers)):
                    workers.append(_Worker(ctx, os.path.join(logdir, f"{time.time()}.err")))
                for w in workers:
                    if w.ready and w.task is None and pending:
                        w.task, w.deadline = pending.popleft(), time.time() + timeout
                        w.offset = os.path.getsize(w.errpath)
                        w.conn.send((w.task[0], cases[w.task[0]], w.task[1]))
                connection.wait([w.conn for w in workers] + [w.proc.sentinel for w in workers],
                                min(5.0, max(0.05, min(w.deadline for w in workers) - time.time())))
                for w in list(workers):
                    try:
                        res = w.conn.recv() if w.conn.poll() else None
                    except (EOFError, OSError):
                        res = None
                    if res == "ready":
                        w.ready, w.deadline = True, float("inf")
                        continue
                    if res is None and w.proc.is_alive() and time.time() < w.deadline:
                        continue
                    if res is None and not w.ready:
                        stillborn += 1
                        if stillborn > 3:
                            raise RuntimeError(f"workers die at startup: {w.death()['message']}")
                    if w.task is not None:
                        results[w.task] = res or (w.death() if not w.proc.is_alive() else {
                            "status": "timeout", "message": f"no result in {timeout:g} s",
                            "seconds": timeout})
                        if progress:
                            progress(w.task, results[w.task], len(results), len(tasks))
                        w.task, w.deadline = None, float("inf")
                    if res is None:  # dead, late or stillborn: replace it
                        w.end()
                        workers.remove(w)
        finally:
            for w in workers:
                w.end()
    return results


# ---- report -------------------------------------------------------------------------------------
def reason_key(case: str, message: str) -> str:
    """Messages name the case, nodes and sizes; without them, equal causes group together."""
    m = message.replace(case, "<case>")
    m = re.sub(r"'[^']*'", "'…'", m)
    m = re.sub(r"\d+(\.\d+)?(e[-+]?\d+)?", "N", m)
    return re.sub(r"\s+", " ", m).strip()[:80]


def summarize(results: dict[str, dict[str, dict]]) -> dict:
    """Per pipeline counts; per provmap pipeline, where it falls behind its plain library."""
    pipelines = [p for p in PIPELINES if any(p in r for r in results.values())]
    counts = {p: {s: sum(r[p]["status"] == s for r in results.values()) for s in STATUSES}
              for p in pipelines}
    behind = {}
    for p, plain in PROVMAP.items():
        if p not in pipelines or plain not in pipelines:
            continue
        groups, excused = defaultdict(list), []
        for case, r in sorted(results.items()):
            if r[plain]["status"] != "pass" or r[p]["status"] == "pass":
                continue
            if r[p]["status"] == "error" and exception_for(case, p):
                excused.append(case)
            else:
                groups[f"{r[p]['status']}: {reason_key(case, r[p]['message'])}"].append(case)
        wrong = [c for k, cs in groups.items() if k.startswith("fail:") for c in cs]
        behind[p] = {"plain": plain, "count": sum(map(len, groups.values())),
                     "wrong_numbers": sorted(wrong), "excused": excused,
                     "groups": dict(sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])))}
    return {"counts": counts, "behind": behind}


def markdown(summary: dict, results: dict, meta: dict) -> str:
    out = [f"# ONNX node conformance ({meta['cases']} cases, onnx {meta['onnx']})", "",
           "| pipeline | passed/total | " + " | ".join(STATUSES[1:]) + " |",
           "|---|---|" + "---|" * (len(STATUSES) - 1)]
    out += [f"| {p} | {c['pass']}/{sum(c.values())} | " + " | ".join(str(c[s]) for s in
                                                                    STATUSES[1:]) + " |"
            for p, c in summary["counts"].items()]
    for p, b in summary["behind"].items():
        wrong = b["wrong_numbers"]
        out += ["", f"## {p} vs plain {b['plain']}", "",
                f"Plain passes, provmap does not: **{b['count']}** (+{len(b['excused'])} "
                f"excused by EXCEPTIONS).  Provmap returns wrong numbers where plain is right: "
                f"**{len(wrong)}**" + (f" ({', '.join(wrong)})" if wrong else "") + ".", ""]
        for key, cases in b["groups"].items():
            out += [f"- {len(cases)} × `{key}` — e.g. {cases[0]}: "
                    f"{results[cases[0]][p]['message'][:160]}", f"  - {', '.join(cases)}"]
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    from .steps import parser

    ap = parser("conformance", __doc__, output=("--out",))
    for flag, typ, default in [("--pipelines", str, ",".join(PIPELINES)), ("--cases", str, None),
                               ("--sample", int, None), ("--seed", int, 0), ("--jobs", int, 2),
                               ("--timeout", float, 60.0)]:
        ap.add_argument(flag, type=typ, default=default)
    a = ap.parse_args(argv)
    pipelines = a.pipelines.split(",")
    bad = sorted(set(pipelines) - set(PIPELINES))
    if bad:
        ap.error(f"unknown pipeline(s) {bad}; choose from {','.join(PIPELINES)}")
    if not 1 <= a.jobs <= 2:
        ap.error("--jobs must be 1 or 2 (the machine has 2 cores, shared)")
    names = select_cases(a.sample, a.seed, a.cases)
    tasks = [(n, p) for n in names for p in pipelines]
    t0 = time.time()

    def progress(task, res, done, total):
        if res["status"] != "pass" or done % 50 == 0:
            print(f"[{done}/{total} {time.time() - t0:.0f}s] {task[0]} {task[1]}: {res['status']}"
                  f" {res['message'][:100]}", file=sys.stderr, flush=True)

    flat = run_many(tasks, a.jobs, a.timeout, progress)
    results = {n: {p: flat[(n, p)] for p in pipelines} for n in names}
    import onnx

    from .records import write_record

    meta = {"onnx": onnx.__version__, "cases": len(names), "pipelines": pipelines,
            "sample": a.sample, "seed": a.seed, "regex": a.cases, "timeout": a.timeout,
            "jobs": a.jobs, "seconds": round(time.time() - t0, 1)}
    summary = summarize(results)
    md = markdown(summary, results, meta)
    write_record("conformance", a.output,
                 {"meta": meta, "summary": summary, "results": results}, md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
