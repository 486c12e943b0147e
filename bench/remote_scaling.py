"""Cold Collage search through TVM's RPC tracker with 1 and with 2 local servers.

Both searches start from an empty cost cache, on the same model, in one run; the ratio of their
wall times is the speed-up of measuring on two servers at once.  On one small machine the two
servers share its cores, so the speed-up here is a floor (and the parallel prices are measured
under that contention); on separate boards they do not share anything.

    provmap bench remote --model bundled:squeezenet [-o OUT]

Its record: OUT/remote/<host>.json and .md (OUT: default bench/out; records.py).
"""

from __future__ import annotations

import sys
import tempfile
import time

KEY = "provmap-bench"


def run(model: str, servers_list=(1, 2), max_size: int = 6, max_depth: int = 3,
        progress=print) -> dict:
    from provmap.partition.collage import CollageOptions, collage
    from provmap.partition.measure.remote import local_farm
    from provmap.partition.model_source import load_view
    from provmap.runtime_module.host import host_info
    from provmap.runtime_module.registry import get_backend

    view = load_view(model)
    rows = []
    for n in servers_list:
        with local_farm(n, KEY) as (addr, _servers):
            backends = {b: get_backend(b) for b in ("onnxruntime", "openvino")}
            with tempfile.TemporaryDirectory() as d:
                progress(f"remote_scaling: cold search of {model} on {n} server(s)")
                t0 = time.perf_counter()
                res = collage(view, backends, CollageOptions(
                    max_size=max_size, max_depth=max_depth, cache_path=f"{d}/c.sqlite",
                    e2e_check=False, refine_budget_s=0, in_context=False, measure_on=str(addr)))
                wall = time.perf_counter() - t0
            est = res.report.estimator
            rows.append({"servers": n, "search_s": wall, "measured": est.get("measured"),
                         "partitions": len(res.plan.partitions),
                         "estimated_ms": res.report.estimated_ms["collage"]})
    base = rows[0]["search_s"]
    for r in rows:
        r["ratio_to_1_server"] = r["search_s"] / base
    return {"model": model, "date": time.strftime("%Y-%m-%d"), "host": host_info(),
            "max_size": max_size, "max_depth": max_depth, "rows": rows}


def markdown(res: dict) -> str:
    h = res["host"]
    lines = [f"Cold collage search of {res['model']} through a local RPC tracker, "
             f"{res['date']}, {h.get('machine')} {h.get('cpus')} CPUs (max size "
             f"{res['max_size']}, depth {res['max_depth']}; servers share this machine's "
             "cores).", "", "| servers | search s | measured | ratio to 1 server |",
             "|---|---|---|---|"]
    for r in res["rows"]:
        lines.append(f"| {r['servers']} | {r['search_s']:.1f} | {r['measured']} | "
                     f"{r['ratio_to_1_server']:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    from .steps import finish, parser, say

    ap = parser("remote_scaling", __doc__)
    ap.add_argument("--model", default="bundled:squeezenet")
    a = ap.parse_args(argv)
    return finish("remote", a, run(a.model, progress=say), markdown)


if __name__ == "__main__":
    sys.exit(main())
