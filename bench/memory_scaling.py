"""Peak memory and time of compile, map and run against a decoder's weight bytes (issue 51).

Why its own bench: vendors debug boundaries on the decoders they ship, where weights, not the
graph, decide whether provmap fits the machine.  ONNX Runtime and OpenVINO create a session on
a 1B-parameter decoder in about its weights' bytes; a tool that needs several copies of them
cannot open the model at all.  So every step runs in a fresh interpreter (the libraries'
imports and their arenas are part of the price, and one step's garbage cannot hide in the
next one's peak), and its peak RSS comes from the kernel (`wait4`'s ru_maxrss), beside the
same model opened by ONNX Runtime and OpenVINO themselves.

Models: GPT-2-style decoders from `decoder_model.gpt2_like` at real widths (random weights,
external data in one file, as exporters write large models).  The fit is peak RSS above an
idle interpreter's against weight bytes, log-log: an exponent near 1 with a ratio near 1-2 is
linear in the weights; the ratio is what decides the largest model that fits.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np

from .installed import installed_env

#: name -> (layers, d_model, heads); vocab 50257 and 8 tokens for all (GPT-2's tokenizer).
SIZES = {"124m": (12, 768, 12), "350m": (24, 1024, 16), "1b": (18, 2048, 16)}
VOCAB, SEQ = 50257, 8

#: The steps measured per model: a name and the command (model path, artifact dir -> argv).
STEPS = {
    "ort_session": lambda m, d: [sys.executable, "-c", _ORT, m],
    "ov_compile": lambda m, d: [sys.executable, "-c", _OV, m],
    "idle": lambda m, d: [sys.executable, "-c", _IDLE],
    "map": lambda m, d: _cli("map", m, "-o", f"{d}/map"),
    "compile_ort": lambda m, d: _cli("compile", m, "--strategy", "single:onnxruntime",
                                     "-o", f"{d}/ort.provmap"),
    "run_ort": lambda m, d: _cli("run", f"{d}/ort.provmap", "--random", "-o", f"{d}/out.npz"),
    "compile_ov": lambda m, d: _cli("compile", m, "--strategy", "single:openvino",
                                    "-o", f"{d}/ov.provmap"),
    "run_ov": lambda m, d: _cli("run", f"{d}/ov.provmap", "--random", "-o", f"{d}/out.npz"),
    "compile_greedy": lambda m, d: _cli("compile", m, "--strategy", "greedy:onnxruntime,openvino",
                                        "-o", f"{d}/greedy.provmap"),
}



class Own(NamedTuple):
    """What a provmap step is held to: the library's own work on the user's file (steps whose
    times add up, whose peak is the highest of theirs), and issue 51's bounds on the step's
    time and peak RSS over that work (None: not this item's bound)."""
    work: tuple
    time: float
    memory: float | None


#: A provmap step -> the same work done by the library itself.  A loaded single-partition
#: artifact within 1.3x of the library's own session (time and memory); a compile within 2x
#: of the library's own session creation plus provmap's map (time: its memory is held to 2x
#: the weights' bytes, the first table).
OWN = {"run_ort": Own(("ort_session",), 1.3, 1.3), "run_ov": Own(("ov_compile",), 1.3, 1.3),
       "compile_ort": Own(("ort_session", "map"), 2.0, None),
       "compile_ov": Own(("ov_compile", "map"), 2.0, None)}
#: rounds of --passes an undecided pair may take (6, 12, 18, 24 passes by default)
ROUNDS = 4

_ORT = ("import sys, numpy as np, onnxruntime as ort\n"
        "s = ort.InferenceSession(sys.argv[1], providers=['CPUExecutionProvider'])\n"
        f"s.run(None, {{'input_ids': np.zeros((1, {SEQ}), np.int64)}})\n")
#: OpenVINO at the precision and hint a provmap OpenVINO partition is built with (f32, LATENCY):
#: its CPU default is bf16 where the host has it, a different computation (4 s against 11 s on
#: the 1B decoder's compile here).
_OV = ("import sys, numpy as np, openvino as ov\n"
       "c = ov.Core().compile_model(sys.argv[1], 'CPU', {'INFERENCE_PRECISION_HINT': 'f32', "
       "'PERFORMANCE_HINT': 'LATENCY'})\n"
       f"c({{'input_ids': np.zeros((1, {SEQ}), np.int64)}})\n")
#: What every provmap step pays before it reads a byte of the model: the libraries' imports,
#: as the CLI imports them (TVM without torch: provenance/util/import_guard.py).
_IDLE = ("import signal\n"
         "from provmap.provenance.util.import_guard import guard_imports\n"
         "guard_imports(None)\n"
         "import provmap.partition.compile, tvm, onnxruntime, openvino  # noqa\n")


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "provmap.cli.main", *args]


def make_decoder(name: str, where: Path) -> tuple[Path, int, int]:
    """The decoder `name` saved with external data under `where`: (path, parameters, bytes).

    Built in a child process: a child's ru_maxrss starts from its parent's RSS at fork, so the
    parent that measures must stay small (it never holds a model)."""
    layers, d, heads = SIZES[name]
    path = where / f"decoder_{name}.onnx"
    code = (
        "import sys, json, numpy as np, onnx\n"
        "from provmap.bench.decoder_model import gpt2_like\n"
        f"m = gpt2_like({layers}, seq={SEQ}, d_model={d}, heads={heads}, vocab={VOCAB})\n"
        "print(json.dumps(sum(int(np.prod(t.dims)) for t in m.graph.initializer)))\n"
        "p = sys.argv[1]\n"
        "import os\n"
        "if not os.path.exists(p):\n"
        "    onnx.save(m, p, save_as_external_data=True, all_tensors_to_one_file=True,\n"
        "              location=os.path.basename(p)[:-5] + '.data', size_threshold=1024)\n")
    params = int(subprocess.run([sys.executable, "-c", code, str(path)], check=True,
                                capture_output=True, text=True).stdout)
    return path, params, os.path.getsize(where / (path.stem + ".data"))


def measure(argv: list[str], cwd: str) -> dict:
    """One step in a fresh process: wall seconds, peak RSS (the kernel's), the peak of its
    anonymous memory (sampled every 20 ms: what the kernel cannot drop, unlike mapped files),
    and the exit code."""
    import threading

    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env=installed_env())
    peak_anon = [0]

    def sample():
        while proc.returncode is None:
            try:
                with open(f"/proc/{proc.pid}/status") as f:
                    for line in f:
                        if line.startswith("RssAnon:"):
                            peak_anon[0] = max(peak_anon[0], int(line.split()[1]))
            except OSError:
                return
            time.sleep(0.02)

    watcher = threading.Thread(target=sample, daemon=True)
    watcher.start()
    err = proc.stderr.read().decode(errors="replace")
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    watcher.join()
    row = {"s": round(time.perf_counter() - t0, 2), "peak_mb": round(usage.ru_maxrss / 1024),
           "peak_anon_mb": round(peak_anon[0] / 1024), "rc": proc.returncode}
    if proc.returncode:
        row["error"] = (err.strip().splitlines() or [""])[-1][:200]
    return row


def fit(points: list[dict], step: str) -> dict | None:
    """peak - idle = c * weights^k, least squares in log-log space; None below two points."""
    xs = [(p["weight_bytes"], p[step]["peak_mb"] - p["idle"]["peak_mb"]) for p in points
          if step in p and not p[step]["rc"] and p[step]["peak_mb"] > p["idle"]["peak_mb"]]
    if len(xs) < 2:
        return None
    k, logc = np.polyfit(np.log([x for x, _ in xs]), np.log([y for _, y in xs]), 1)
    return {"exponent": round(float(k), 3), "coef": float(np.exp(logc))}


class _StepFailed(Exception):
    """A step exited non-zero: the pair has no verdict, its error is the answer."""


def paired(a_argv: list[str], work: list[list[str]], cwd: str, passes: int, own: Own,
           max_passes: int | None = None) -> dict:
    """Step a against the library's own `work` (commands whose times add up) in `passes`
    paired passes, the order alternating: `own`'s bounds (an `OWN` entry) judged by the one
    comparison procedure (partition/decision.py's `decide`: its rounds, pooled while the item is
    undecided up to `max_passes`, its statistic and interval, its record of contended rounds),
    never by one pairing.  One pair of samples once read x1.31 for `run_ov` at 1B; five
    interleaved pairs at another moment read x1.05 by median; OpenVINO's own 1B compile read
    8.4 s in one run and 21.4 s in the next, so a compile's ratio to it (2.01x, then 1.56x) was
    a coin; at 6 passes three of six pairs were undecided on the AVX2 host, their intervals'
    upper ends 1.34-1.47.

    What differs from a plan's decision is only the measuring (`_processes`): each block is one
    fresh process per command, its wall time the sample and its peak RSS recorded beside it,
    and the item asks two questions (time and memory), so `settled` reads both."""
    from provmap.partition.decision import decide
    from provmap.partition.measure.evidence import Rule, interval, pass_ratios

    steps = {"ours": [a_argv], "own": list(work)}
    peaks: dict[str, list[float]] = {"ours": [], "own": []}
    bounds = {"time": own.time, "memory": own.memory}

    def judged(mins: dict) -> dict:
        # memory's per-pass peaks sit beside the times (every round counts: accept_contended)
        ratios = {"time": pass_ratios(mins["ours"], mins["own"]),
                  "memory": pass_ratios(peaks["ours"], peaks["own"])}
        ivs = {k: interval(r) for k, r in ratios.items()}
        return {k: (iv, _verdict(iv, bounds[k])) for k, iv in ivs.items()}

    def settled(mins: dict) -> bool:
        return _overall(v for _, v in judged(mins).values()) != "undecided"

    try:
        d = decide({k: (lambda k=k: k) for k in steps}, {"ours": (0,), "own": (0,)},
                   rule=Rule(round_passes=passes, max_passes=max(max_passes or passes, passes)),
                   accept_contended=True, what="memory pair", settled=settled,
                   measure=lambda fns, **kw: _processes(steps, fns, cwd, peaks, **kw))
    except _StepFailed as e:
        return {"error": str(e), "passes": min(len(v) for v in peaks.values())}
    out = {"passes": d.passes, "bounds": {k: b for k, b in bounds.items() if b}}
    got = judged(d.pass_mins)
    for k, (iv, _) in got.items():
        out[k] = iv.to_dict()
    out["verdict"] = _overall(v for _, v in got.values() if v is not None)
    # each pass's seconds, so a reader can see a spread the interval only summarises
    out["pass_s"] = {k: [round(v, 3) for v in d.pass_mins[k]] for k in steps}
    if d.contended_rounds:
        out["contended_rounds"] = d.contended_rounds
    return out


def _verdict(iv, bound: float | None) -> str | None:
    from provmap.partition.measure.evidence import within

    return within(*iv.slowdown(), bound - 1.0) if bound and iv.passes else None


def _overall(verdicts) -> str:
    v = [x for x in verdicts if x is not None]
    return "slower" if "slower" in v else "within" if v and all(
        x == "within" for x in v) else "undecided"


def _processes(steps: dict, fns: dict, cwd: str, peaks: dict, passes: int,
               alternate: bool = True, between=None, **_) -> dict:
    """`decide`'s measuring for fresh processes: `passes` passes of one block per alternative
    (the order reversed every other pass), a block being its commands run one after the other,
    its sample their summed wall time; the highest of their peaks goes to `peaks`."""
    from provmap.partition.measure.interleave import Latency

    out = {k: Latency() for k in fns}
    for p in range(passes):
        order = list(fns)[::-1] if alternate and p % 2 else list(fns)
        got = {}
        for k in order:
            if between is not None:
                between()  # the parallelism gauge's probe, between blocks as for any plan
            got[k] = [measure(argv, cwd=cwd) for argv in steps[k]]
            bad = next((g for g in got[k] if g["rc"]), None)
            if bad is not None:
                raise _StepFailed(bad.get("error"))
        for k, rows in got.items():
            s = sum(g["s"] for g in rows)
            lat = out[k]
            lat.samples_s.append(s)
            lat.pass_mins_s.append(s)
            lat.pass_medians_s.append(s)
            lat.first_call_s = lat.first_call_s or s
            peaks[k].append(max(g["peak_mb"] for g in rows))
    return out


def run(sizes: list[str], steps: list[str], where: Path, progress=print,
        passes: int = 6) -> dict:
    points = []
    for name in sizes:
        model, params, nbytes = make_decoder(name, where)
        row = {"model": name, "params": params, "weight_bytes": nbytes}
        with tempfile.TemporaryDirectory(prefix="provmap-mem-") as d:
            for step in steps:
                row[step] = measure(STEPS[step](str(model), d), cwd=d)
                progress(f"memory: {name} {step}: {row[step]['s']} s, "
                         f"{row[step]['peak_mb']} MB peak ({row[step]['peak_anon_mb']} MB "
                         "anonymous)" + (f", exit {row[step]['rc']}: "
                                                              f"{row[step].get('error')}"
                                                              if row[step]["rc"] else ""))
            for a, own in _pairs(steps) if passes else ():
                row.setdefault("paired", {})[a] = p = paired(
                    STEPS[a](str(model), d), [STEPS[b](str(model), d) for b in own.work],
                    d, passes, own, max_passes=passes * ROUNDS)
                progress(f"memory: {name} {a} / {' + '.join(own.work)}: "
                         + _paired_cell(p).replace("**", ""))
        points.append(row)
    fits = {s: fit(points, s) for s in steps if s != "idle"}
    return {"host": _host(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "steps": steps, "points": points, "fit": fits}


def _host() -> str:
    from provmap.runtime_module.host import _cpu_model

    return f"{_cpu_model()}, {os.cpu_count()} cores"


def markdown(res: dict) -> str:
    steps = [s for s in res["steps"] if s != "idle"]
    lines = [f"# Peak memory and time against weight bytes ({res['date']}, {res['host']})", "",
             "Each step in a fresh process; peak RSS from the kernel; `x w` is peak / weight "
             "bytes (issue 51 asks at most 2x for compile and map); `anon` the same for "
             "anonymous memory alone, sampled (a mapped weight file counts in RSS, but the "
             "kernel can drop it); idle: an interpreter that imported what compile imports.",
             "",
             "| model | params | weights MB | idle MB | " + " | ".join(steps) + " |",
             "|---|---:|---:|---:|" + "---|" * len(steps)]
    for p in res["points"]:
        w = p["weight_bytes"] / 2 ** 20
        cells = []
        for s in steps:
            c = p.get(s)
            if c is None:
                cells.append("-")
            elif c["rc"]:
                cells.append(f"exit {c['rc']}")
            else:
                anon = f"; anon {c['peak_anon_mb'] / w:.1f}x" if "peak_anon_mb" in c else ""
                cells.append(f"{c['peak_mb']} MB ({c['peak_mb'] / w:.1f}x w{anon}), {c['s']} s")
        lines.append(f"| {p['model']} | {p['params'] / 1e6:.0f}M | {w:.0f} | "
                     f"{p['idle']['peak_mb']} | " + " | ".join(cells) + " |")
    pairs = _pairs(steps)
    if pairs:
        lines += ["", "Each provmap step against the library's own work on the file, in paired passes "
                  "of fresh processes, the order alternating, in rounds of --passes while "
                  f"undecided (up to {ROUNDS}): median ratio [90% interval] against issue 51's "
                  "bounds (a loaded artifact: 1.3x the library's own session in peak RSS and "
                  "time; a compile: 2x the library's own session creation plus map in time):",
                  "", "| model | " + " | ".join(f"{a} / {' + '.join(own.work)}" for a, own in pairs)
                  + " |", "|---|" + "---|" * len(pairs)]
        for p in res["points"]:
            cells = [_paired_cell((p.get("paired") or {}).get(a)) for a, _ in pairs]
            lines.append(f"| {p['model']} | " + " | ".join(cells) + " |")
    lines += ["", "Fitted exponent k of (peak - idle) = c * weights^k:", "",
              "| " + " | ".join(steps) + " |", "|" + "---:|" * len(steps),
              "| " + " | ".join(f"{res['fit'][s]['exponent']:.2f}" if res["fit"].get(s) else "-"
                                for s in steps) + " |"]
    return "\n".join(lines) + "\n"


def _pairs(steps: list[str]) -> list[tuple[str, Own]]:
    """The OWN items a run of `steps` measured both sides of."""
    return [(a, own) for a, own in OWN.items() if a in steps and all(b in steps for b in own.work)]


def _paired_cell(c: dict | None) -> str:
    if not c:
        return "-"
    if "verdict" not in c:
        return f"failed after {c['passes']} passes: {c['error']}"
    t = c["time"]
    flag = f"**{c['verdict']}**" if c["verdict"] != "within" else "within"
    # records written before the compile pairs have no "bounds": memory was judged in each
    mem = (f"memory x{c['memory']['median']:.2f}, "
           if "bounds" not in c or "memory" in c["bounds"] else "")
    return (f"{mem}time x{t['median']:.2f} [{t['low']:.2f}, "
            f"{t['high']:.2f}], {c['passes']} passes: {flag}")


def main(argv=None) -> int:
    from .steps import finish, parser, say

    ap = parser("memory_scaling", __doc__, output=("--out",))
    ap.add_argument("--sizes", default="124m,350m", help=f"of {', '.join(SIZES)}")
    ap.add_argument("--steps", default=",".join(STEPS), help=f"of {', '.join(STEPS)}")
    ap.add_argument("--passes", type=int, default=6,
                    help="paired passes of each loaded artifact and each compile against the "
                         "library's own work, and as many again while undecided, up to "
                         f"{ROUNDS} rounds (0: none)")
    ap.add_argument("--models-dir", default=None,
                    help="where the decoders are written (kept for the next run)")
    args = ap.parse_args(argv)
    sizes = [s for s in args.sizes.split(",") if s]
    steps = [s for s in args.steps.split(",") if s]
    bad = [s for s in sizes if s not in SIZES] + [s for s in steps if s not in STEPS]
    if bad:
        ap.error(f"unknown size or step {bad[0]!r}")
    if "idle" not in steps:
        steps.insert(0, "idle")
    where = Path(args.models_dir or tempfile.mkdtemp(prefix="provmap-decoders-"))
    where.mkdir(parents=True, exist_ok=True)
    return finish("memory", args, run(sizes, steps, where.resolve(), progress=say,
                                           passes=args.passes), markdown)


if __name__ == "__main__":
    sys.exit(main())
