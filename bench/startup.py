"""Wall time of `provmap` commands that should answer at once, in fresh processes (issue 36).

`provmap --help` took 3.5 s and `--version` 5.9 s because building the argument parser imported
TVM (3.1 s of 3.7 s); offline reads (inspect, lookup, explain, trust) paid the same.  This bench
runs each command in a fresh interpreter, as the console script does, on an artifact built once
with single:onnxruntime, and reports the median wall time of a few runs together with which
backend libraries the process imported (tests/test_startup.py asserts none; time is only
reported here).

    provmap bench startup [--runs 5] [-o OUT]

Its record: OUT/startup/<host>.json and .md (OUT: default bench/out; records.py).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .installed import installed_env

#: The backend libraries (seconds to import), then onnx and sqlite_utils (0.1 s together with
#: protobuf), which reading an artifact needs neither: an offline command imports none.
HEAVY = ("tvm", "onnxruntime", "openvino", "onnx", "sqlite_utils")

_PROBE = """
import json, sys
from provmap.cli.main import main
try:
    rc = main(sys.argv[1:])
except SystemExit as e:
    rc = e.code
print("HEAVY=" + json.dumps(sorted(m for m in %r if m in sys.modules)), file=sys.stderr)
raise SystemExit(rc)
""" % (HEAVY,)

COMMANDS = [["--help"], ["--version"], ["compile", "--help"], ["trust", "--list"],
            ["inspect", "{a}"], ["lookup", "{a}", "--onnx-node", "n1"], ["explain", "{a}"]]


def _run(argv) -> tuple[float, int, list[str]]:
    t = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", _PROBE, *argv], capture_output=True, text=True,
                       timeout=300, env=installed_env())
    wall = time.perf_counter() - t
    heavy = [json.loads(ln[len("HEAVY="):]) for ln in r.stderr.splitlines()
             if ln.startswith("HEAVY=")]
    return wall, r.returncode, heavy[-1] if heavy else ["?"]


#: The offline commands again on a user-sized artifact: reading verifies every member's hash,
#: so time grows with the file (11-22 MB artifacts took 0.43-0.57 s, issue 36's fifth afternoon).
LARGE_COMMANDS = [["inspect", "{a}"], ["lookup", "{a}", "--onnx-node", "{n}"], ["explain", "{a}"]]


def run(runs: int = 5, progress=None, large: str | None = "bundled:resnet50") -> dict:
    from provmap.partition.compile import compile_model

    from .compile_scaling import neg_relu_chain

    rows = []
    with tempfile.TemporaryDirectory(prefix="provmap-startup-") as d:
        art = Path(d) / "chain.provmap"
        compile_model(neg_relu_chain(20), strategy="single:onnxruntime", out=art)
        _run(["--version"])  # warm the file cache once, as a user's second command would be
        jobs = [(cmd, art, "n1", "ART") for cmd in COMMANDS]
        if large:
            big = Path(d) / "large.provmap"
            compile_model(large, strategy="single:onnxruntime", out=big)
            from provmap.runtime_module.artifact import read_artifact

            node = read_artifact(big).manifest["partitions"][0]["onnx_nodes"][0]
            mb = big.stat().st_size / 2**20
            jobs += [(cmd, big, node, f"{large.split(':')[-1].upper()}({mb:.0f} MB)")
                     for cmd in LARGE_COMMANDS]
        for cmd, path, node, label in jobs:
            argv = [x.replace("{a}", str(path)).replace("{n}", node) for x in cmd]
            walls, codes, heavy = [], set(), []
            for _ in range(runs):
                w, rc, heavy = _run(argv)
                walls.append(w)
                codes.add(rc)
            row = {"command": "provmap " + " ".join(c.replace("{a}", label).replace("{n}", node)
                                                    for c in cmd),
                   "median_s": round(statistics.median(walls), 3),
                   "min_s": round(min(walls), 3), "runs": runs, "exit": sorted(codes),
                   "backend_modules": heavy}
            rows.append(row)
            if progress:
                progress(f"startup: {row['command']}: {row['median_s']:.2f} s "
                         f"(min {row['min_s']:.2f}), imported {heavy or 'no backend'}")
    import os

    return {"python": sys.version.split()[0], "load1": round(os.getloadavg()[0], 2),
            "rows": rows}


def markdown(res: dict) -> str:
    lines = [f"# Start-up wall time (fresh process; load average {res['load1']} at the end)", "",
             "| command | median s | min s | libraries imported (of "
             + ", ".join(HEAVY) + ") |", "|---|---:|---:|---|"]
    for r in res["rows"]:
        lines.append(f"| `{r['command']}` | {r['median_s']:.2f} | {r['min_s']:.2f} | "
                     f"{', '.join(r['backend_modules']) or 'none'} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    from .steps import finish, parser, say

    ap = parser("startup", __doc__, output=("--out",))
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args(argv)
    return finish("startup", a, run(a.runs, progress=say), markdown)


if __name__ == "__main__":
    sys.exit(main())
