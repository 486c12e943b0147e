"""The corpus step: every model folder through every backend, counted runs / refused / wrong.

A pass count hides a wrong number as well as a refusal does: "1,583 passed" says nothing of the
rest.  This step runs each case of each folder under `single:<backend>` (and TVM's `map`) and
puts every outcome in exactly one column per backend:

- runs: provmap built and ran it, and every output matches the case's expected outputs;
- refused: provmap declined with its one-line reason (a ProvmapError at compile or run);
- wrong: provmap ran it and returned other numbers (or shapes) than expected: the column that
  must stay 0; each is listed, with whether the plain library (ONNX Runtime, OpenVINO, TVM
  called directly) gets the same case right, so a provmap defect is told from the library's;
- crashed: anything else (a Python exception escaping provmap, a dead worker, a timeout).

Folders (`--folders`): `node`, the onnx package's operator cases (`bench/conformance.py`);
`pytorch-converted`, `pytorch-operator` and `simple`, the onnx package's model folders (model.onnx
+ test_data_set_N, mostly opset 6: the old-opset models); `user`, models as users' tools leave
them (`bench/user_models.py`, built with onnx.helper and ORT's own quantizers and fp16
converter, no torch: a small CNN through each transform, and the CRNN whose declared output
shape is wrong), plus every .onnx under `--user-dir` (ONNX Runtime's outputs on seeded inputs
are the reference there).  The onnx package's `real` folder (downloads) and `light` folder
(all-equal weights: outputs are ties) are left out, and so are cases of random operators
(`RANDOM_OPS`: Bernoulli's outputs are each library's draws), counted in the report's meta
("excluded: N cases of random operators") rather than as wrong.  Cases run in worker processes with a
deadline (conformance.run_many), 1 thread each, `--jobs` at a time.

    provmap bench corpus --sample 40 --seed 0 [-o OUT]
"""

from __future__ import annotations

import logging
import os
import random
import re
import sys
import time
from pathlib import Path

import numpy as np

from . import conformance as conf

FOLDERS = ["node", "pytorch-converted", "pytorch-operator", "simple", "user"]
#: backend column -> the conformance pipeline that runs provmap on it, and the plain one.
BACKENDS = {"onnxruntime": ("provmap-ort", "ort"), "openvino": ("provmap-openvino", "openvino"),
            "tvm": ("provmap-tvm", "tvm"), "map": ("provmap-map", "tvm")}
COLUMNS = ["runs", "refused", "wrong", "crashed"]
_COLUMN = {"pass": "runs", "error": "refused", "fail": "wrong", "crash": "crashed",
           "timeout": "crashed"}


# ---- cases: name -> (model bytes, [(inputs, outputs)], rtol, atol), conformance's payload -------
def _data_dir() -> Path:
    import onnx.backend.test

    return Path(onnx.backend.test.__file__).parent / "data"


def folder_cases(folder: str) -> dict:
    """The onnx package's model folders: model.onnx and test_data_set_*/{input,output}_N.pb."""
    import onnx
    from onnx import numpy_helper

    out = {}
    for d in sorted((_data_dir() / folder).iterdir()):
        if not (d / "model.onnx").is_file():
            continue
        model = onnx.load(d / "model.onnx")
        model.ir_version = min(model.ir_version, conf.MAX_IR)
        sets = []
        for ds in sorted(d.glob("test_data_set_*")):
            def read(kind):
                files = sorted(ds.glob(f"{kind}_*.pb"), key=lambda p: int(p.stem.split("_")[1]))
                return [numpy_helper.to_array(onnx.TensorProto.FromString(p.read_bytes()))
                        for p in files]
            sets.append((read("input"), read("output")))
        out[f"{folder}/{d.name}"] = (model.SerializeToString(), sets, 1e-3, 1e-7)
    return out


def _user_base():
    """A small CNN (Conv, Relu, Conv, GlobalAveragePool, Flatten, Gemm) with a dynamic batch:
    what the transforms of bench/user_models.py take."""
    import onnx
    from onnx import TensorProto, helper as h, numpy_helper as nh

    rng = np.random.default_rng(0)

    def w(name, *shape):
        return nh.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)

    g = h.make_graph(
        [h.make_node("Conv", ["x", "w1", "b1"], ["c1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
         h.make_node("Relu", ["c1"], ["r1"]),
         h.make_node("Conv", ["r1", "w2", "b2"], ["c2"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
         h.make_node("GlobalAveragePool", ["c2"], ["p"]),
         h.make_node("Flatten", ["p"], ["f"]),
         h.make_node("Gemm", ["f", "w3", "b3"], ["y"], transB=1)],
        "small_cnn", [h.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
        [h.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])],
        [w("w1", 8, 3, 3, 3), w("b1", 8), w("w2", 8, 8, 3, 3), w("b2", 8), w("w3", 10, 8),
         w("b3", 10)])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=8)


def _ort_payload(model, feeds: dict, precision: str = "fp32"):
    """The model with its inputs fixed to the feeds' shapes, ORT's outputs as the reference."""
    import onnxruntime as ort

    from provmap.provenance.shapes import apply_input_shapes
    from .user_corpus import tolerance

    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    want = sess.run(None, feeds)
    fixed = apply_input_shapes(model, {k: v.shape for k, v in feeds.items()}, "corpus",
                               require_static=False)
    names = [i.name for i in fixed.graph.input if i.name in feeds]
    rtol, atol = tolerance(precision, dict(enumerate(want)))
    return fixed.SerializeToString(), [([feeds[n] for n in names], want)], rtol, atol


def user_cases(user_dir: str | None = None, shapes: dict | None = None) -> dict:
    from provmap.provenance.shapes import runtime_inputs

    from . import user_models as um

    base = _user_base()
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((2, 3, 8, 8)).astype(np.float32)}
    calibration = [{"x": rng.standard_normal((2, 3, 8, 8)).astype(np.float32)} for _ in range(4)]
    out = {}
    for transform, precision in [(None, "fp32"), ("fp16", "fp16"), ("quant:dynamic", "int8"),
                                 ("quant:qdq", "int8"), ("quant:qoperator", "int8"),
                                 ("wrong_output_shape", "fp32"), ("minus_one", "fp32")]:
        root = logging.getLogger()
        level, root.level = root.level, logging.ERROR  # the quantizers' pre-processing advice
        try:
            m = um.apply(transform, base, calibration)
        finally:
            root.setLevel(level)
        out[f"user/small_cnn{'_' + transform.replace(':', '_') if transform else ''}"] = \
            _ort_payload(m, feeds, precision)
    crnn = um.crnn_declared_output()
    out["user/crnn_declared_output"] = _ort_payload(
        crnn, {"x": rng.standard_normal((1, 1, 1, 9)).astype(np.float32)})
    for path in sorted(Path(user_dir).rglob("*.onnx")) if user_dir else ():
        import onnx

        m = onnx.load(path)
        given = dict(shapes or {})
        feed = {}
        for vi in runtime_inputs(m.graph):
            tt = vi.type.tensor_type
            dims = given.get(vi.name) or [d.dim_value if d.HasField("dim_value") and
                                          d.dim_value > 0 else 1 for d in tt.shape.dim]
            dt = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)
            feed[vi.name] = (rng.standard_normal(dims).astype(dt) if dt.kind == "f"
                             else rng.integers(0, 2, size=dims).astype(dt))
        out[f"user/{path.stem}"] = _ort_payload(m, feed, _precision(m))
    return out


#: Ops a quantizer writes: their outputs are judged in quantization steps (user_corpus's int8
#: tolerance), as ORT's own quantization tests do, not to 1e-3.
_QUANT_OPS = {"DynamicQuantizeLinear", "QuantizeLinear", "ConvInteger", "MatMulInteger",
              "DynamicQuantizeLSTM", "QLinearConv", "QLinearMatMul", "QGemm"}


def _precision(model) -> str:
    import onnx

    if any(n.op_type in _QUANT_OPS for n in model.graph.node):
        return "int8"
    fp16 = onnx.TensorProto.FLOAT16
    if any(t.data_type == fp16 for t in model.graph.initializer):
        return "fp16"
    return "fp32"


def collect(folders, user_dir=None, shapes=None) -> dict:
    cases = {}
    for f in folders:
        if f == "node":
            cases.update({f"node/{k}": v for k, v in conf._cases().items()})
        elif f == "user":
            cases.update(user_cases(user_dir, shapes))
        else:
            cases.update(folder_cases(f))
    return cases


#: Ops whose outputs come from the library's random generator: no two libraries draw the same
#: numbers (a seed attribute included), so onnx's expected outputs cannot judge them.
RANDOM_OPS = frozenset({"Bernoulli", "RandomUniform", "RandomUniformLike", "RandomNormal",
                        "RandomNormalLike", "Multinomial"})


def _op_types(graph):
    """Every op type of `graph`, its subgraphs (If, Loop, Scan bodies) included."""
    for n in graph.node:
        yield n.domain, n.op_type
        for a in n.attribute:
            for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                yield from _op_types(g)


def random_cases(cases: dict, names: list[str]) -> list[str]:
    """The cases among `names` whose model uses a random op: in its graph (where an _expanded
    case has its function body inlined: Bernoulli as RandomUniformLike), its subgraphs, or its
    local functions.  Comparing them with expected outputs would count the generators' difference
    as wrong numbers."""
    import onnx

    out = []
    for name in names:
        m = onnx.ModelProto.FromString(cases[name][0])
        ops = set(_op_types(m.graph))
        for f in m.functions:
            ops |= set(_op_types(f))  # a FunctionProto has .node as a graph does
        if any(d in ("", "ai.onnx") and op in RANDOM_OPS for d, op in ops) or \
                _training_dropout(m, cases[name][1]):
            out.append(name)
    return out


def _training_dropout(model, sets) -> bool:
    """A Dropout in training mode with a ratio above 0 draws its mask from the library's
    generator (onnx's test_training_dropout*: each library drops other elements).  The mode and
    ratio are read from the case's inputs where they are graph inputs; a zero ratio is exact."""
    given = {}
    for inputs, _ in sets[:1]:
        given = {i.name: x for i, x in zip(model.graph.input, inputs)}  # sequences stay lists
    consts = {t.name: t for t in model.graph.initializer}
    for n in model.graph.node:
        if n.op_type != "Dropout" or len(n.input) < 3 or not n.input[2]:
            continue
        mode = given.get(n.input[2])
        ratio = given.get(n.input[1]) if n.input[1] else None
        if ratio is None and n.input[1] in consts:
            from onnx import numpy_helper

            ratio = numpy_helper.to_array(consts[n.input[1]])
        if (mode is None or bool(np.all(mode))) and (ratio is None or float(np.max(ratio)) > 0):
            return True
    return False


def excluded_note(n: int) -> str:
    return f"excluded: {n} case{'s' if n != 1 else ''} of random operators"


def sample(names: list[str], n: int | None, seed: int, regex: str | None) -> list[str]:
    """`n` cases spread over the folders in proportion (at least one from each), seeded."""
    names = sorted(x for x in names if not regex or re.search(regex, x))
    if n is None or n >= len(names):
        return names
    by_folder: dict[str, list[str]] = {}
    for x in names:
        by_folder.setdefault(x.split("/", 1)[0], []).append(x)
    rnd = random.Random(seed)
    out = []
    for f, xs in sorted(by_folder.items()):
        k = max(1, round(n * len(xs) / len(names)))
        out += rnd.sample(xs, min(k, len(xs)))
    return sorted(out)


# ---- running and counting -----------------------------------------------------------------------
def run(cases: dict, names: list[str], backends: list[str], jobs: int = 2,
        timeout: float = 120.0, plain_check: bool = True, progress=None) -> dict:
    """{case: {backend: result}}; a wrong result gets `plain` (the plain library's status on
    the same case) when `plain_check`."""
    tasks = [(n, BACKENDS[b][0]) for n in names for b in backends]
    flat = conf.run_many(tasks, jobs, timeout, progress, cases=cases)
    results = {n: {b: dict(flat[(n, BACKENDS[b][0])]) for b in backends} for n in names}
    if plain_check:
        again = sorted({(n, BACKENDS[b][1]) for n, r in results.items() for b, x in r.items()
                        if x["status"] == "fail"})
        if again:
            plain = conf.run_many(again, jobs, timeout, cases=cases)
            for n, r in results.items():
                for b, x in r.items():
                    if x["status"] == "fail":
                        p = plain[(n, BACKENDS[b][1])]
                        x["plain"] = {"status": p["status"], "message": p["message"][:160]}
    return results


def tally(results: dict) -> dict:
    """Per backend: each column's count, and the wrong cases by name."""
    backends = list(next(iter(results.values()), {}))
    out = {}
    for b in backends:
        counts = dict.fromkeys(COLUMNS, 0)
        wrong = []
        for case, r in sorted(results.items()):
            col = _COLUMN[r[b]["status"]]
            counts[col] += 1
            if col == "wrong":
                wrong.append(case)
        out[b] = {**counts, "total": sum(counts.values()), "wrong_cases": wrong}
    return out


def plain_note(r: dict, library: str) -> str:
    """Whether a wrong result is the plain library's own (it differs the same way: the same
    message) or provmap-made (the plain library is right, or wrong otherwise)."""
    plain = r.get("plain")
    if not plain:
        return ""
    if plain["status"] == "fail" and plain["message"] == r["message"][:160]:
        return f"; the same as plain {library} (the library's)"
    if plain["status"] == "pass":
        return f"; plain {library} right (provmap-made)"
    return f"; plain {library}: {plain['status']} (provmap-made)"


def markdown(results: dict, table: dict, meta: dict) -> str:
    note = (f"; {meta['excluded']} (their outputs come from each library's generator)"
            if meta.get("excluded_cases") else "")
    out = [f"# Corpus step: {meta['cases']} cases ({', '.join(meta['folders'])})", "",
           f"{meta['date']}, {meta['host']}; {meta['versions']}; {meta['seconds']:.0f} s, "
           f"sample {meta['sample']} (seed {meta['seed']}){note}.", "",
           "| backend | " + " | ".join(COLUMNS) + " | total |",
           "|---|" + "---|" * (len(COLUMNS) + 1)]
    out += [f"| {b} | " + " | ".join(str(t[c]) for c in COLUMNS) + f" | {t['total']} |"
            for b, t in table.items()]
    for b, t in table.items():
        if t["wrong_cases"]:
            out += ["", f"## Wrong on {b}", ""]
            for case in t["wrong_cases"]:
                r = results[case][b]
                out.append(f"- `{case}`: {r['message'][:200]}{plain_note(r, BACKENDS[b][1])}")
    for b, t in table.items():
        crashed = [c for c in sorted(results) if _COLUMN[results[c][b]["status"]] == "crashed"]
        if crashed:
            out += ["", f"## Crashed on {b}", ""]
            out += [f"- `{c}`: {results[c][b]['status']}: {results[c][b]['message'][:200]}"
                    for c in crashed]
    return "\n".join(out) + "\n"


def _meta() -> dict:
    import datetime
    import platform

    import onnx
    import onnxruntime
    import openvino
    import tvm

    return {"date": datetime.date.today().isoformat(),
            "host": f"{platform.machine()} {os.cpu_count()} CPUs",
            "versions": f"onnx {onnx.__version__}, ONNX Runtime {onnxruntime.__version__}, "
                        f"OpenVINO {openvino.__version__.split('-')[0]}, TVM {tvm.__version__}"}


def main(argv=None) -> int:
    from provmap.provenance.shapes import parse_input_shapes

    from .steps import parser

    ap = parser("corpus", __doc__, output=("--out",))
    ap.add_argument("--folders", default=",".join(FOLDERS),
                    help=f"comma-separated, from {','.join(FOLDERS)}")
    ap.add_argument("--backends", default="onnxruntime,openvino,tvm",
                    help=f"comma-separated, from {','.join(BACKENDS)}")
    ap.add_argument("--sample", type=int, default=None,
                    help="this many cases, spread over the folders (default: all)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cases", default=None, help="only cases whose name matches this regex")
    ap.add_argument("--user-dir", default=None, help="more user models: every .onnx under it")
    ap.add_argument("--input-shape", action="append", default=[], metavar="NAME=DIMS",
                    help="for --user-dir models with open dimensions (else they are 1)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--no-plain-check", action="store_true",
                    help="do not run the plain library on the wrong cases")
    a = ap.parse_args(argv)  # -o checked here, not after the run: a bad one lost an 11-minute run
    folders, backends = a.folders.split(","), a.backends.split(",")
    for given, known, what in ((folders, FOLDERS, "folder"), (backends, BACKENDS, "backend")):
        bad = sorted(set(given) - set(known))
        if bad:
            ap.error(f"unknown {what}(s) {bad}; choose from {','.join(known)}")
    if not 1 <= a.jobs <= 2:
        ap.error("--jobs must be 1 or 2 (the machine has 2 cores, shared)")
    if a.user_dir and not os.path.isdir(a.user_dir):
        ap.error(f"--user-dir {a.user_dir}: no such directory")
    try:
        shapes = parse_input_shapes(a.input_shape)
    except Exception as e:
        ap.error(str(e))
    t0 = time.time()
    cases = collect(folders, a.user_dir, shapes)
    # Random ops' cases leave the pool before sampling, counted in meta (not counted wrong).
    pool = [n for n in cases if not a.cases or re.search(a.cases, n)]
    randoms = random_cases(cases, pool)
    names = sample(sorted(set(pool) - set(randoms)), a.sample, a.seed, None)

    def progress(task, res, done, total):
        if res["status"] != "pass" or done % 50 == 0:
            print(f"[{done}/{total} {time.time() - t0:.0f}s] {task[0]} {task[1]}: "
                  f"{res['status']} {res['message'][:100]}", file=sys.stderr, flush=True)

    results = run(cases, names, backends, a.jobs, a.timeout, not a.no_plain_check, progress)
    table = tally(results)
    meta = {**_meta(), "cases": len(names), "folders": folders, "backends": backends,
            "sample": a.sample, "seed": a.seed, "regex": a.cases, "timeout": a.timeout,
            "jobs": a.jobs, "seconds": round(time.time() - t0, 1),
            "excluded": excluded_note(len(randoms)), "excluded_cases": sorted(randoms)}
    from .records import write_record

    md = markdown(results, table, meta)
    write_record("corpus", a.output, {"meta": meta, "table": table, "results": results}, md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
