"""Models as users bring them, through the `provmap` CLI: does provmap take what ONNX Runtime
takes?  (issue 25: the user's model is the reference)

The corpus (bench/user_models.py): TorchScript exports (opset 17) with dynamic axes whose shape
arithmetic provmap folds once `--input-shape` fixes them, Swin-T, ORT's fp16 converter,
`onnxruntime.quantization` (dynamic, static QDQ, static QOperator) on a CNN and a transformer, a
model whose declared output shape is wrong, and paddle2onnx's -1 dims.  Small configurations,
random weights made realistic as in torch_corpus, nothing downloaded.

For each model, plain ONNX Runtime runs it first on seeded feeds; if it cannot, that is recorded
and nothing else runs.  Then each step is one `provmap` command in its own process with a
deadline:

- map:     `provmap map M --json` completes and accounts for every node (mapped or marked);
- single:onnxruntime and greedy:openvino,onnxruntime (OpenVINO first, ONNX Runtime takes what
           OpenVINO refuses): `provmap compile` + `provmap run --inputs`, outputs against ORT;
- compare: `provmap compare ART --model M` (the user's file) on the greedy artifact (the
           single one if greedy failed), with the precision's tolerances;
- annotate: `provmap annotate ART --model M --json`: every node of the user's file annotated.

Tolerances per precision (outputs against plain ORT on the same file and feeds):

- fp32: rtol 1e-3, atol 1e-4 (torch_corpus's).
- fp16: rtol 1e-2, atol 1e-2 x max|reference|.  fp16 rounds every intermediate to 11 bits
  (unit roundoff 4.9e-4); a backend that accumulates in fp32, fuses, or keeps a partition
  boundary in float32 differs from ORT by an ulp or so per layer, ~1e-2 relative after the ~20
  layers here.  A real bug (a wrong op, lost Cast) is off by O(1).
- int8: rtol 0, atol 5e-2 x max|reference|.  Quantized backends differ in rounding (ORT's u8s8
  AVX2 path saturates; OpenVINO runs QDQ as fp32 math with its own rounding); one requantization
  that rounds the other way moves an output by a quantization step, 1/255 of its range, and such
  flips add up over the layers.  Plain OpenVINO against plain ORT on the QDQ ResNet-18 here:
  3.1% of the range, less than quantization's own error (int8 ORT against fp32: 4.2%).  5% of
  the range is ~13 steps; a wrong scale or zero point is far beyond.  `provmap compare` judges
  uint8/int8 boundary tensors in steps (`--quant-steps`, default 1: one rounding flip between
  two libraries); across a mixed plan the flips add up layer by layer (2-3 steps on the QOperator
  ResNet-18's later boundaries), so the int8 models are compared with the same 5%: 13 steps.

    provmap bench user_corpus [-o OUT]
    provmap bench user_corpus --models bert_dyn,resnet18_fp16 -o /tmp/u.json
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import sys
import time
import traceback
from pathlib import Path

import numpy as np
import onnx

from provmap.provenance.util.errors import first_line

from .torch_corpus import _versions, compare, ort_outputs, run_with_deadline
from . import user_models as um

STEPS = ["map", "single:onnxruntime", "greedy:openvino,onnxruntime", "compare", "annotate"]
TOLERANCE = {"fp32": (1e-3, 1e-4, False), "fp16": (1e-2, 1e-2, True), "int8": (0.0, 5e-2, True)}


def tolerance(precision: str, want: dict) -> tuple[float, float]:
    """(rtol, atol) for outputs `want`; fp16 and int8 atol scale with the largest output."""
    rtol, atol, scaled = TOLERANCE[precision]
    if scaled:
        top = max((float(np.max(np.abs(w))) for w in want.values() if w.size), default=1.0)
        atol *= top
    return rtol, atol


def provmap_cmd() -> list[str]:
    exe = Path(sys.executable).with_name("provmap")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "provmap.cli.main"]


def _error(log: Path, code: int | None) -> str:
    """The first line that says what went wrong: provmap's one-line error, or a traceback's
    last line."""
    lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    for ln in lines:
        if ln.startswith("provmap: error:"):
            return ln[len("provmap: error:"):].strip()[:400]
    if any(ln.startswith("Traceback") for ln in lines):
        return "traceback: " + lines[-1][:400]
    return f"exit code {code}: {lines[-1][:400] if lines else '(no output)'}"


class Runner:
    """Runs `provmap` commands with a deadline, logs under `work`, inherits a clean env."""

    def __init__(self, work: Path, timeout: float, threads: int = 1):
        self.work, self.timeout = work, timeout
        self.env = dict(os.environ, PROVMAP_CACHE=str(work / "costs.sqlite"),
                        PROVMAP_TRUST=str(work / "trusted-artifacts"),
                        PROVMAP_TUNING_DB=str(work / "tuning"))
        for var in ("OMP_NUM_THREADS", "TVM_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            self.env.setdefault(var, str(threads))
        self.threads = threads

    def __call__(self, tag: str, *args: str) -> tuple[dict, str]:
        """({ok, seconds[, error]}, stdout) of `provmap ARGS`."""
        log, out = self.work / f"{tag}.log", self.work / f"{tag}.out"
        code, secs = run_with_deadline(provmap_cmd() + list(args), log, self.timeout,
                                       stdout=out, env=self.env)
        res: dict = {"ok": code == 0, "seconds": secs, "exit": code}
        if code is None:
            res["error"] = f"timeout after {self.timeout:.0f} s"
        elif code != 0:
            res["error"] = _error(log, code)
        return res, out.read_text(errors="replace") if out.exists() else ""


def _shape_args(shapes: dict | None) -> list[str]:
    return [a for n, dims in (shapes or {}).items()
            for a in ("--input-shape", f"{n}={'x'.join(map(str, dims))}")]


def _json(text: str) -> dict | None:
    try:
        return json.loads(text)
    except ValueError:
        return None


def run_model(name: str, path: Path, feeds: dict, *, precision: str = "fp32",
              input_shapes: dict | None = None, steps=STEPS, runner: Runner) -> dict:
    """Every step on one ONNX file; returns {ort: ..., steps: {step: result}}."""
    rec: dict = {"model": name, "precision": precision, "input_shapes": input_shapes,
                 "steps": {}}
    t0 = time.perf_counter()
    try:
        want = ort_outputs(path, feeds)
        rec["ort"] = {"ok": True, "seconds": round(time.perf_counter() - t0, 1),
                      "outputs": {k: list(v.shape) for k, v in want.items()}}
    except Exception as e:  # noqa: BLE001  (a model ORT refuses is out of scope: recorded)
        rec["ort"] = {"ok": False, "error": first_line(e, with_type=True)}
        return rec
    rtol, atol = tolerance(precision, want)
    rec["rtol"], rec["atol"] = rtol, atol
    work, shape_args = runner.work, _shape_args(input_shapes)
    fpath = work / f"{name}.feeds.npz"
    np.savez(fpath, **feeds)
    opts = {b: ("--backend-option", f"{b}.threads={runner.threads}")
            for b in ("onnxruntime", "openvino")}  # per step: only the step's backends
    artifacts: dict[str, Path] = {}
    for step in steps:
        tag = f"{name}_{step.replace(':', '-').replace(',', '+')}"
        if step == "map":
            res, out = runner(tag, "map", str(path), "-o", str(work / tag), "--json", *shape_args)
            cov = _json(out) if res["ok"] else None
            if cov:
                res["coverage"] = cov
                if cov.get("onnx_nodes_unaccounted"):
                    res["ok"] = False
                    res["error"] = f"{cov['onnx_nodes_unaccounted']} node(s) unaccounted"
        elif step.startswith(("single:", "greedy:", "collage:")):
            art = work / f"{tag}.pmod"
            res, out = runner(tag + ".compile", "compile", str(path), "-o", str(art),
                              "--strategy", step, "--json",
                              *[a for b, o in opts.items() if b in step for a in o], *shape_args)
            summary = _json(out) if res["ok"] else None
            res["compile_s"] = res.pop("seconds")
            if summary:
                parts = summary.get("partitions") or []
                res["partitions"] = len(parts)
                res["backends"] = sorted({p.get("backend") for p in parts if isinstance(p, dict)})
            if res["ok"]:
                artifacts[step] = art
                res = _run_and_check(runner, tag, art, fpath, want, rtol, atol, res)
        elif step in ("compare", "annotate"):
            which = next((s for s in reversed(list(artifacts)) if s.startswith("greedy")),
                         next(iter(artifacts), None))
            if which is None:
                rec["steps"][step] = {"ok": False, "error": "no artifact compiled"}
                continue
            res = _workbench(runner, step, tag, artifacts[which], path, fpath, rtol, atol,
                             precision)
            res["artifact"] = which
        else:
            raise ValueError(f"unknown step {step!r}")
        rec["steps"][step] = res
    return rec


def _run_and_check(runner, tag, art, fpath, want, rtol, atol, res) -> dict:
    opath = runner.work / f"{tag}.outputs.npz"
    run, _ = runner(tag + ".run", "run", str(art), "--inputs", str(fpath), "-o", str(opath))
    res["run_s"] = run["seconds"]
    if not run["ok"]:
        return dict(res, ok=False, error="run: " + run.get("error", ""))
    with np.load(opath) as z:
        got = {k: z[k] for k in z.files}
    ok, diff, note = compare(got, want, rtol=rtol, atol=atol)
    res.update(ok=ok, max_abs_diff=diff)
    if not ok:
        res["error"] = f"wrong numbers: {note}" if diff is not None else note
    return res


#: `compare --quant-steps` per precision: 5% of an 8-bit range for int8 models (docstring).
QUANT_STEPS = {"int8": 13}


def _workbench(runner, step, tag, art, model, fpath, rtol, atol, precision="fp32") -> dict:
    if step == "compare":
        res, out = runner(tag, "compare", str(art), "--model", str(model), "--inputs",
                          str(fpath), "--json", "--rtol", repr(rtol), "--atol", repr(atol),
                          "--quant-steps", str(QUANT_STEPS.get(precision, 1)))
        got = _json(out)
        if res["exit"] == 1 and got:  # exit 1: evaluated, some tensor differs
            bad = [f"{t['tensor']} ({t['backend']}): max abs {t.get('max_abs')}, cosine "
                   f"{t.get('cosine')}" + (f" [{t['note']}]" if t.get("note") else "")
                   for t in got.get("tensors", []) if not t.get("ok")]
            res["error"] = f"{got.get('mismatches')} tensor(s) differ: {'; '.join(bad[:3])}"
        if got:
            res["tensors"] = len(got.get("tensors", []))
        return res
    res, out = runner(tag, "annotate", str(art), "--model", str(model), "-o",
                      str(runner.work / f"{tag}.onnx"), "--json")
    got = _json(out) if res["ok"] else None
    if got:
        res["annotate"] = got
        if got.get("unannotated"):
            res["ok"] = False
            res["error"] = f"{got['unannotated']} of {got['nodes']} node(s) unannotated"
    return res


# ---- the report -------------------------------------------------------------------------------
def _cell(r: dict | None) -> str:
    if r is None:
        return "-"
    t = f" [{r.get('compile_s', r.get('seconds'))} s]"
    if r.get("ok"):
        if "max_abs_diff" in r:
            return f"ok {r['max_abs_diff']:.1e}" + t
        if "coverage" in r:
            c = r["coverage"]
            return f"ok {c['onnx_nodes_mapped']}+{c['onnx_nodes_elided']}e/{c['onnx_nodes_total']}" + t
        if "annotate" in r:
            a = r["annotate"]
            return f"ok {a['with_backend']}+{a['with_reason']}r/{a['nodes']}" + t
        return "ok" + t
    if r.get("max_abs_diff") is not None:
        return f"**WRONG** {r['max_abs_diff']:.1e}"
    return "**fail**"


def markdown(results: list[dict], steps: list[str], meta: dict) -> str:
    heads = ["model", "prec", "nodes", "ORT"] + steps
    lines = [f"Run {meta['date']} on {meta['host']} ({meta['versions']}); "
             f"{meta.get('total_s', '?')} s in all.", "",
             "| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    for r in results:
        if "build" in r and not r["build"].get("ok"):
            lines.append(f"| {r['model']} | {r.get('precision', '')} | - | build failed |"
                         + " |" * len(steps))
            continue
        ort = r.get("ort", {})
        cells = [r["model"], r["precision"], str(r.get("build", {}).get("nodes", "-")),
                 f"ok [{ort.get('seconds')} s]" if ort.get("ok") else "**refused**"]
        cells += [_cell(r["steps"].get(s)) for s in steps]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "`ok D [T s]`: the artifact matched plain ONNX Runtime (D = max abs diff; T = "
              "compile time); map `ok M+Ee/N`: M nodes mapped, E elided, of N; annotate "
              "`ok B+Rr/N`: B nodes with a backend, R with the reason they have none, of N."]
    errs = []
    for r in results:
        if "build" in r and not r["build"].get("ok"):
            errs.append(f"- {r['model']} / build: {r['build'].get('error')}")
        if r.get("ort") and not r["ort"].get("ok"):
            errs.append(f"- {r['model']} / ONNX Runtime: {r['ort'].get('error')}")
        for s, st in r.get("steps", {}).items():
            if not st.get("ok"):
                errs.append(f"- {r['model']} / {s}: {st.get('error')}")
    if errs:
        lines += ["", "Failures (first line of each error):", ""] + errs
    return "\n".join(lines) + "\n"


def _write(out, results, steps, meta) -> None:
    """The record so far (written after every model: a corpus run lasts up to an hour)."""
    from .records import write_record

    write_record("user_corpus", out, {"meta": meta, "results": results},
                 markdown(results, steps, meta))


def build(entry: um.Entry, out: Path, bases: dict, seed: int) -> tuple[Path, dict]:
    """The entry's ONNX file (its base exported once per run) and facts about it."""
    if entry.base not in bases:
        bases[entry.base] = um.export_base(entry.base, out, seed)
    base_path, info = bases[entry.base]
    model = um.apply(entry.transform, onnx.load(base_path), um.calibration(entry, seed)
                     if entry.transform and entry.transform.startswith("quant:") else [])
    path = out / f"{entry.name}.onnx"
    onnx.save(model, path)
    return path, {"ok": True, "nodes": len(model.graph.node), "base": entry.base,
                  "transform": entry.transform, "export_s": info.get("seconds")}


def main(argv=None) -> int:
    from .steps import parser

    ap = parser("user_corpus", __doc__, raw=True)
    ap.add_argument("--models", default=",".join(um.ENTRIES), help="of %(default)s")
    ap.add_argument("--steps", default=";".join(STEPS), help="';'-separated (default %(default)s)")
    ap.add_argument("--out", default="/tmp/provmap-user", help="ONNX files, artifacts, logs")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per step")
    ap.add_argument("--threads", type=int, default=1, help="threads per backend (default 1)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    models = [m for m in args.models.split(",") if m]
    unknown = [m for m in models if m not in um.ENTRIES]
    if unknown:
        ap.error(f"unknown model(s) {unknown}; known: {', '.join(um.ENTRIES)}")
    steps = [s for s in args.steps.split(";") if s]
    out = Path(args.out)
    work = out / "work"
    work.mkdir(parents=True, exist_ok=True)
    runner = Runner(work, args.timeout, args.threads)
    meta = {"date": datetime.date.today().isoformat(),
            "host": f"{platform.machine()}, {os.cpu_count()} cores", "versions": _versions(),
            "steps": steps, "tolerance": TOLERANCE, "threads": args.threads}
    results: list[dict] = []
    bases: dict = {}
    t_all = time.perf_counter()
    for name in models:
        entry = um.ENTRIES[name]
        print(f"[{time.perf_counter() - t_all:6.0f}s] {name}: build", flush=True)
        try:
            path, info = build(entry, out, bases, args.seed)
        except Exception as e:  # noqa: BLE001  (a model that cannot be made is a result)
            results.append({"model": name, "precision": entry.precision, "steps": {},
                            "build": {"ok": False, "error": first_line(e, with_type=True),
                                      "trace": traceback.format_exc().splitlines()[-8:]}})
            continue
        rec = run_model(name, path, um.feeds(entry, args.seed), precision=entry.precision,
                        input_shapes=entry.input_shapes, steps=steps, runner=runner)
        rec["build"], rec["what"] = info, entry.what
        results.append(rec)
        for s, r in rec["steps"].items():
            print(f"    {s}: {'ok' if r.get('ok') else 'FAIL ' + str(r.get('error'))}", flush=True)
        _write(args.output, results, steps, meta)
    meta["total_s"] = round(time.perf_counter() - t_all, 1)
    _write(args.output, results, steps, meta)
    print(markdown(results, steps, meta))
    return 0


if __name__ == "__main__":
    sys.exit(main())
