"""Shape sweep: one artifact per strategy, compiled once for a shape profile, timed at each point
of it; and a KV-cache decoder's decode steps against the library called directly.

    provmap bench shape_sweep [--kv-model FILE] [--models NAME,...] [-o OUT]

Rows per model and point: each strategy's median (interleaved, each artifact alone in the
process while it runs: partition.measure.interleave.measure_artifacts at that point's sizes) and
its ratio to the best single-library plan at that point.  The decode row: a prefill of 128
tokens and 32 decode steps from one single-partition artifact, each step's time beside the same
library running the user's file, interleaved step by step (bench/kv_decode.py).

Models: the repository's dynamic exports (tests/data: a TorchScript attention block, GPT-2 and
Llama KV decoders) always; with the [torch] extra, `--models` adds torch_models exports with
their dynamic axes (bert_dynamic, gpt2_dynamic, resnet18)."""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parent.parent / "tests" / "data"
STRATEGIES = ["single:onnxruntime", "single:openvino", "single:tvm", "greedy:openvino,onnxruntime"]
#: model -> (path or torch_models name, profile dims)
BUILTIN = {
    "attention": (DATA / "torchscript_attention_dynamic.onnx",
                  {"batch": (1, 2, 8), "seq": (1, 16, 256)}),
    # its position table has 256 rows: a longer profile runs off it (ONNX Runtime refuses the
    # Gather, as for the file itself)
    "gpt2_kv_prefill": (DATA / "gpt2_kv_decoder.onnx",
                        {"batch": 1, "seq": (16, 64, 256), "past": 0, "total": (16, 64, 256)}),
    "gpt2_kv_decode": (DATA / "gpt2_kv_decoder.onnx",
                       {"batch": 1, "seq": 1, "past": (0, 128, 255), "total": (1, 129, 256)}),
}
TORCH = {"bert_dynamic": {"batch": (1, 1, 4), "seq": (16, 128, 512)},
         "gpt2_dynamic": {"batch": (1, 1, 4), "seq": (16, 128, 512)},
         "resnet18": {"N": (1, 1, 8)}}


#: the user-sized models' profiles when exported with their dynamic axes (batch and sequence for
#: the transformers, batch and image size for the CNNs and the detector; ViT-B/16's position
#: table fixes its image at 224, so batch only, opt 2 for a third point)
USER_PROFILES = {"bert_base": {"batch": (1, 1, 4), "seq": (16, 128, 512)},
                 "gpt2_small": {"batch": (1, 1, 4), "seq": (16, 128, 512)},
                 "vit_b16": {"batch": (1, 2, 4)},
                 "resnet50": {"batch": (1, 1, 4), "height": (160, 224, 320),
                              "width": (160, 224, 320)},
                 "efficientnet_b0": {"batch": (1, 1, 4), "height": (160, 224, 320),
                                     "width": (160, 224, 320)},
                 "mobilenet_v3_large": {"batch": (1, 1, 4), "height": (160, 224, 320),
                                        "width": (160, 224, 320)},
                 "yolo_v8n_like": {"batch": (1, 1, 2), "height": (320, 640, 640),
                                   "width": (320, 640, 800)}}


def export_dynamic(name: str, out: Path, exporter: str = "torchscript") -> Path:
    """A user-sized model of bench/torch_models exported with its dynamic axes, as users export
    them (`dynamic_axes` for TorchScript, example batch 2 so the batch is not specialised)."""
    import dataclasses

    from .torch_models import MODELS, export

    spec = MODELS[name]
    prof = USER_PROFILES[name]
    if name == "yolo_v8n_like":  # anchors from the feature maps, as Ultralytics' dynamic export
        from .yolo_like import build

        spec = dataclasses.replace(spec, build=lambda: build(dynamic=True))
    dyn = {}
    for n, (_shape, _dt, kind) in spec.inputs.items():
        axes = {0: "batch"}
        if kind in ("ids", "mask") and "seq" in prof:
            axes[1] = "seq"
        if kind == "image" and "height" in prof:
            axes.update({2: "height", 3: "width"})
        dyn[n] = axes
    path = out / f"{name}_dynamic_{exporter}.onnx"
    if not path.exists():
        export(dataclasses.replace(spec, dynamic=dyn, export_batch=2), exporter, path, 0)
    return path


#: a strategy whose one call at a point takes longer than this is timed by that call alone (untuned
#: TVM runs a user-sized transformer's largest shape for minutes: ten interleaved repeats of it
#: would take the evening and say nothing the one call does not)
SLOW_S = 2.0


def sweep(path: str, dims: dict, say, repeats: int = 10, strategies=STRATEGIES) -> dict:
    from provmap.partition.compile import compile_model

    arts, failed = {}, {}
    for s in strategies:
        t0 = time.perf_counter()
        try:
            arts[s] = compile_model(path, s, dims=dims)
            say(f"  {s}: compiled in {time.perf_counter() - t0:.1f} s")
        except Exception as e:  # a strategy that cannot take the model is a row, not the end
            failed[s] = str(e).splitlines()[0][:200]
            say(f"  {s}: {failed[s]}")
    prof = next(iter(arts.values())).manifest["model"]["shape_profile"] if arts else None
    rows = []
    if prof:
        from provmap.provenance.profile import ShapeProfile

        for point, shapes in ShapeProfile.from_json(prof).points():
            try:
                rows.append(point_row(path, arts, point, shapes, repeats))
            except Exception as e:  # a point the model itself cannot run: said, not the end
                rows.append({"point": point, "error": str(e).splitlines()[0][:300]})
                say(f"  {point}: {rows[-1]['error']}")
                continue
            say(f"  {point}: " + ", ".join(
                f"{k} {v:.3f}{'' if ok else ' WRONG'}" for (k, v), ok in
                zip(rows[-1]["median_ms"].items(), rows[-1]["matches_ort"].values())))
    return {"profile": prof, "failed": failed, "points": rows}


def point_row(path: str, arts: dict, point: str, shapes: dict, repeats: int) -> dict:
    """One point: every artifact checked against ONNX Runtime (its one call timed), then the
    ones under SLOW_S timed interleaved; the slow ones keep the one call's time."""
    from provmap.partition.measure.interleave import measure_artifacts

    checks = check_outputs(path, arts, point)
    fast = {k: a for k, a in arts.items() if checks[k]["call_s"] < SLOW_S}
    med = {k: v.summary()["median_ms"] for k, v in
           (measure_artifacts(fast, point=point, repeats=repeats, passes=2) if fast else {}).items()}
    med.update({k: checks[k]["call_s"] * 1e3 for k in arts if k not in fast})
    med = {k: med[k] for k in arts}
    singles = {k: v for k, v in med.items() if k.startswith("single:")}
    best = min(singles, key=singles.get) if singles else None
    return {"point": point, "shapes": {n: list(d) for n, d in shapes.items()},
            "median_ms": {k: round(v, 4) for k, v in med.items()},
            "one_call": sorted(set(arts) - set(fast)), "best_single": best,
            "max_abs_vs_ort": {k: c["max_abs"] for k, c in checks.items()},
            "matches_ort": {k: c["ok"] for k, c in checks.items()},
            "ratio_to_best": {k: round(v / singles[best], 3) for k, v in med.items()}
            if best else {}}


def check_outputs(path: str, arts: dict, point: str) -> dict:
    """Each artifact against ONNX Runtime on the file at one point's seeded inputs (the artifact
    draws them: the profile's sizes, index inputs in range), by the fp32 tolerance every user
    bench applies: {strategy: {ok, max_abs, note, call_s}}."""
    import onnxruntime as ort

    from provmap.runtime_module.module import ArtifactModule

    from .torch_corpus import compare
    from .user_corpus import tolerance

    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    out = {}
    for k, art in arts.items():
        mod = ArtifactModule(art, trust=True)
        try:
            feeds = mod.random_inputs(0, point)
            t0 = time.perf_counter()
            got = mod.run(feeds)
            call_s = time.perf_counter() - t0
            if call_s < SLOW_S:  # the first call compiles kernels for the shape: time a warm one
                t0 = time.perf_counter()
                got = mod.run(feeds)
                call_s = time.perf_counter() - t0
        finally:
            mod.close()
        want = {n: np.asarray(v) for n, v in zip(names, sess.run(None, feeds))}
        rtol, atol = tolerance("fp32", want)
        ok, worst, note = compare(got, want, rtol=rtol, atol=atol)
        out[k] = {"ok": ok, "max_abs": worst, "note": note, "call_s": call_s}
    return out


def decode_row(path: str, say, prompt: int = 128, steps: int = 32,
               strategies=("single:onnxruntime", "single:openvino", "single:tvm")) -> dict:
    """Each single-partition strategy's decode steps: logits against ONNX Runtime at every step
    (run_loop), and the step's time against its own library running the user's file directly
    (TVM against ONNX Runtime), each loop alone, alternated (kv_decode.decode_step_times)."""
    from provmap.partition.compile import compile_model
    from provmap.provenance.profile import parse_dims
    from provmap.runtime_module.module import ArtifactModule

    from .kv_decode import decode_step_times, library_step, profile_flags, run_loop

    dims = parse_dims(profile_flags(prompt, steps)[1::2])
    out = {}
    for s in strategies:
        art = ArtifactModule(compile_model(path, s, dims=dims), trust=True)
        worst = run_loop(path, art, prompt=prompt, steps=steps).worst_abs
        lib = s.split(":", 1)[1] if s != "single:tvm" else "onnxruntime"
        t = decode_step_times(path, {"artifact": art.run, lib: library_step(path, lib)},
                              prompt=prompt, steps=steps)
        out[s] = {"worst_abs_logits": worst, "step_ms_median": round(t["artifact"], 4),
                  "library": lib, "library_step_ms_median": round(t[lib], 4),
                  "ratio": round(t["artifact"] / t[lib], 3)}
        say(f"  decode {s}: {t['artifact']:.3f} ms a step vs {lib} directly {t[lib]:.3f} "
            f"(x{t['artifact'] / t[lib]:.3f}), worst |logits diff| {worst:.2e}")
        art.close()
    return out


def _cell(r: dict, s: str) -> str:
    if s not in r["median_ms"]:
        return "-"
    ok = r.get("matches_ort", {}).get(s, True)
    once = ", 1 call" if s in r.get("one_call", ()) else ""
    err = r["max_abs_vs_ort"].get(s)  # None: a record rebuilt from a run's log (no values)
    return (f"{r['median_ms'][s]:.3f} (x{r['ratio_to_best'][s]:.2f}{once}, err "
            f"{'within tol' if err is None else format(err, '.0e')}{'' if ok else ' **WRONG**'})")


def _model_table(m: dict) -> list[str]:
    """One run of one model: its profile, strategies not built, a row per point."""
    lines = [f"profile: {m['profile']['symbols'] if m['profile'] else '-'}"
             + (f" (run {m['run']})" if m.get("run") else ""), ""]
    if m["failed"]:
        lines += [f"- {k}: not built: {v}" for k, v in m["failed"].items()] + [""]
    ok = [r for r in m["points"] if "median_ms" in r]
    strategies = list(ok[0]["median_ms"]) if ok else []
    lines += ["| point | " + " | ".join(strategies) + " |", "|---|" + "---|" * len(strategies)]
    for r in m["points"]:
        if "error" in r:
            lines.append(f"| {r['point']} | failed: {r['error']} |")
            continue
        lines.append(f"| {r['point']} {r['shapes']} | " + " | ".join(
            _cell(r, s) for s in strategies) + " |")
    return lines + [""]


def merge(records: list[dict], note: str = "") -> dict:
    """Several sweep records as one: each model keeps every run that has it, each run its own
    table (times of two runs are two moments: a ratio is only read within one run)."""
    out = {"date": max(r["date"] for r in records), "host": records[0]["host"], "models": {},
           "note": note}
    for r in records:
        for name, m in r["models"].items():
            for run in m if isinstance(m, list) else [m]:
                out["models"].setdefault(name, []).append(dict(run, run=run.get("run") or r["date"]))
        if r.get("decode"):
            out["decode"], out["kv_model"] = r["decode"], r.get("kv_model")
    return out


def markdown(res: dict) -> str:
    lines = [f"# Shape sweep, {res['date']}", "", f"Host: {res['host']}; "
             "`provmap bench shape_sweep`.", "",
             "Each strategy compiled once for the model's profile, timed at min, opt and max "
             "(median ms, interleaved; '1 call': a call over 2 s, timed once; ratio to the best "
             "single-library plan at that point; err: largest |output - ONNX Runtime's on the "
             "file| at that point's seeded inputs, **WRONG** where outside the fp32 tolerance "
             "(rtol 1e-3, atol 1e-4)).", ""]
    if res.get("note"):
        lines += [res["note"], ""]
    for name, runs in res["models"].items():
        lines += [f"## {name}", ""]
        for m in runs if isinstance(runs, list) else [runs]:
            lines += _model_table(m)
    if res.get("decode"):
        lines += [f"## Decode steps (KV cache: {res.get('kv_model')}), prefill 128 then 32 "
                  "steps, one artifact per strategy", "",
                  "| strategy | step ms (median) | library directly | ms | ratio | worst abs logits |",
                  "|---|---|---|---|---|---|"]
        for s, d in res["decode"].items():
            lines.append(f"| {s} | {d['step_ms_median']:.3f} | {d['library']} | "
                         f"{d['library_step_ms_median']:.3f} | x{d['ratio']:.3f} | "
                         f"{d['worst_abs_logits']:.1e} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    from provmap.runtime_module.host import _cpu_model

    from .records import write_record
    from .steps import parser

    ap = parser("shape_sweep", __doc__)
    ap.add_argument("--models", default="", help=f"torch exports to add: {', '.join(TORCH)}")
    ap.add_argument("--kv-model", help="a KV-cache decoder for the decode row (default: the "
                                       "repository's tiny GPT-2 export)")
    ap.add_argument("--only", help="comma-separated builtin model names")
    ap.add_argument("--user-models", help=f"user-sized models exported with their dynamic axes "
                                          f"([torch] extra): {', '.join(USER_PROFILES)}")
    ap.add_argument("--models-dir", help="where the dynamic exports are kept (default: a "
                                         "temporary directory)")
    ap.add_argument("--strategies", default=";".join(STRATEGIES),
                    help="strategies compiled per model, separated by ';' (add collage to "
                         "search at opt: slow on user-sized models)")
    ap.add_argument("--decode-strategies", default="single:onnxruntime,single:openvino,single:tvm",
                    help="strategies of the decode row")
    ap.add_argument("--merge", nargs="+", metavar="JSON",
                    help="write one record of these sweep records (runs kept apart) and exit "
                    "(e.g. this step's record and older runs of it from git history)")
    ap.add_argument("--note", default="", help="a line for the merged record (what ran beside)")
    a = ap.parse_args(argv)
    say = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    if a.merge:
        res = merge([json.loads(Path(p).read_text()) for p in a.merge], a.note)
        print(write_record("shape_sweep", a.output, res, markdown(res)))
        return 0
    models = {k: v for k, v in BUILTIN.items() if not a.only or k in a.only.split(",")}
    tmp = tempfile.TemporaryDirectory()
    for name in filter(None, (a.user_models or "").split(",")):
        models[name] = (export_dynamic(name, Path(a.models_dir or tmp.name)), USER_PROFILES[name])
    for name in filter(None, a.models.split(",")):
        from .torch_models import MODELS, export

        p = Path(tmp.name) / f"{name}.onnx"
        export(MODELS[name], "torchscript", p, 0)
        models[name] = (p, TORCH[name])
    res = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "host": _cpu_model(),
           "models": {}}
    for name, (path, dims) in models.items():
        say(f"{name}:")
        res["models"][name] = sweep(str(path), dims, say, strategies=a.strategies.split(";"))
        # written after each model: a sweep of the user-sized models runs for hours
        write_record("shape_sweep", a.output, res, markdown(res))
    if a.decode_strategies:  # '' skips the decode row
        say("decode:")
        kv = str(a.kv_model or DATA / "gpt2_kv_decoder.onnx")
        res["kv_model"] = Path(kv).name
        res["decode"] = decode_row(kv, say, strategies=a.decode_strategies.split(","))
    say(f"wrote {write_record('shape_sweep', a.output, res, markdown(res))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
