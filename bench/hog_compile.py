"""What `provmap compile` does beside a load that outlasts it: `python -m provmap.bench.hog_compile`.

Why a step of its own: `provmap bench --search-beside-hog through` measures beside the load so
that it can table the plan; a user's compile does not: it waits for quiet before measuring
anything and ends with one line if the load outlasts the wait (measure/hygiene.py
`quiet_before_search`).
This runs the user's command itself, `provmap compile MODEL --strategy collage` with a fresh
cost cache, in a subprocess beside a one-core CPU hog (bench/hog.py) that lasts the whole
search and its wait for quiet, and records what the user gets: the exit code, whether a file
was written, the last line on stderr, and the wall time.  With --accept-contended it records
the plan measured beside the load instead.

    provmap bench hog_compile --user-models mobilenet_v3_large

Its record: OUT/hog_compile/<host>.json and .md (OUT: -o, default bench/out; records.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time


def compile_rows(specs: list[str], accept: bool, quiet_wait: float, say) -> list[dict]:
    from .hog import cpu_hog

    rows = []
    for spec in specs:
        name = os.path.splitext(os.path.basename(spec))[0]
        with tempfile.TemporaryDirectory(prefix="provmap-hog-compile-") as tmp:
            out = os.path.join(tmp, "a.provmap")
            cmd = [sys.executable, "-m", "provmap.cli.main", "compile", spec, "-o", out,
                   "--strategy", "collage", "--cache", os.path.join(tmp, "costs.sqlite"),
                   "--quiet-wait", f"{quiet_wait:g}", *(["--accept-contended"] if accept else [])]
            say(f"[{name}] provmap compile beside a one-core hog"
                f"{' (--accept-contended)' if accept else ''}")
            t0 = time.perf_counter()
            with cpu_hog(3600.0):
                r = subprocess.run(cmd, capture_output=True, text=True)
            lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
            row = {"model": name, "accept_contended": accept, "exit": r.returncode,
                   "seconds": round(time.perf_counter() - t0, 1),
                   "written": os.path.exists(out), "last_line": lines[-1] if lines else "",
                   "kept": next((ln for ln in reversed(lines) if "collage: kept " in ln), None)}
            if row["written"]:
                from provmap.runtime_module.artifact import read_artifact

                manifest = read_artifact(out).manifest
                row["strategy"] = manifest["strategy"]
                row["contended"] = (((manifest["plan_info"].get("collage") or {})
                                     .get("conditions") or {}).get("contended"))
            say(f"[{name}] exit {r.returncode} after {row['seconds']:.0f} s, "
                f"{'artifact written' if row['written'] else 'nothing written'}")
            rows.append(row)
    return rows


def markdown(res: dict) -> str:
    from .md import table as _table
    from .step_run import header

    lines = header(res, "provmap compile beside a one-core hog", "hog_compile")
    lines += _table(
        "`provmap compile MODEL --strategy collage` with a fresh cost cache, in a subprocess "
        "beside a one-core CPU hog that outlasts the search and its wait for quiet: what the "
        "user gets.",
        ["model", "--accept-contended", "exit", "written", "seconds", "last line on stderr"],
        [[r["model"], "yes" if r["accept_contended"] else "no", r["exit"],
          r.get("strategy") or ("yes" if r["written"] else "no"), f"{r['seconds']:.0f}",
          r["last_line"].replace("|", "/")] for r in res["rows"]])
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    from provmap.provenance.util.errors import ProvmapError

    from .step_run import run_step, step_parser

    ap = step_parser("hog_compile", __doc__, "directory for hog_compile.json/.md")
    ap.add_argument("--accept-contended", action="store_true",
                    help="pass --accept-contended to the compile (the guess is written)")
    ap.add_argument("--quiet-wait", type=float, default=120.0,
                    help="the compile's --quiet-wait (default 120, its own default)")
    a = ap.parse_args(argv)

    def check(a):
        if a.quiet_wait < 0:
            raise ProvmapError("--quiet-wait must be at least 0")

    def measure(specs, say):
        return compile_rows(specs, a.accept_contended, a.quiet_wait, say)

    return run_step("hog_compile", a, "rows", measure, markdown, "hog_compile", check)


if __name__ == "__main__":
    sys.exit(main())
