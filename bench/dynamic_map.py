"""`provmap map` without a shape against a static map of the same file, on the user-sized models
exported with their dynamic axes (issue 50's done-when: every node a static map maps to a
kernel is mapped, under the same ID, and no more nodes elided).

    provmap bench dynamic_map --models-dir DIR [MODEL ...] [-o OUT]

Its record: OUT/dynamic_map/<host>.json and .md (OUT: default bench/out; records.py).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

#: the static map's sizes: each model's opt point in shape_sweep.USER_PROFILES
def _opt(prof: dict) -> dict:
    return {k: v[1] for k, v in prof.items()}


def _shapes(path: str, sizes: dict) -> dict:
    import onnx

    out = {}
    for i in onnx.load(path, load_external_data=False).graph.input:
        out[i.name] = tuple(d.dim_value if d.HasField("dim_value") else sizes[d.dim_param]
                            for d in i.type.tensor_type.shape.dim)
    return out


def _mapped(pmap) -> set:
    """Nodes one of whose own bindings reaches a kernel (not a constant folded into one)."""
    from provmap.provenance.model import ROLE_PRODUCED

    reached = {e for _s, e, *_r in pmap.site_exprs}
    return {nid for nid, e, r in pmap.node_exprs if e in reached and r == ROLE_PRODUCED}


def compare_maps(path: str, sizes: dict) -> dict:
    from provmap.partition.model_source import map_model

    t0 = time.perf_counter()
    dyn = map_model(path).pmap
    dyn_s = time.perf_counter() - t0
    fixed = map_model(path, input_shapes=_shapes(path, sizes)).pmap
    md, mf = _mapped(dyn), _mapped(fixed)
    lost = sorted(n.name for n in fixed.nodes if n.id in mf - md)
    return {"nodes": len(dyn.nodes), "same_ids": [n.id for n in dyn.nodes] == [n.id for n in fixed.nodes],
            "mapped_dynamic": len(md), "mapped_static": len(mf), "lost": lost[:20],
            "n_lost": len(lost), "elided_dynamic": sum(bool(n.elided) for n in dyn.nodes),
            "elided_static": sum(bool(n.elided) for n in fixed.nodes), "map_s": round(dyn_s, 1)}


def markdown(res: dict) -> str:
    lines = [f"# Dynamic map against static map, {res['date']}", "", f"Host: {res['host']}; "
             "`provmap bench dynamic_map`.", "",
             "Each model exported with its dynamic axes (bench/shape_sweep.py's USER_PROFILES), "
             "mapped without any shape and again at its opt sizes. mapped: nodes one of whose own "
             "bindings reaches a kernel; lost: mapped statically, not dynamically.", "",
             "| model | ONNX nodes | same IDs | mapped (dynamic / static) | lost | elided (dynamic / static) | map s |",
             "|---|---|---|---|---|---|---|"]
    lines += [f"| {name} | failed: {r['error']} | | | | | |" if "error" in r else
              f"| {name} | {r['nodes']} | {'yes' if r['same_ids'] else '**no**'} | "
              f"{r['mapped_dynamic']} / {r['mapped_static']} | {r['n_lost']}"
              f"{' (' + ', '.join(r['lost']) + ')' if r['lost'] else ''} | "
              f"{r['elided_dynamic']} / {r['elided_static']} | {r['map_s']} |"
              for name, r in res["models"].items()]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    from provmap.runtime_module.host import _cpu_model

    from .records import write_record
    from .shape_sweep import USER_PROFILES, export_dynamic
    from .steps import parser

    ap = parser("dynamic_map", __doc__)
    ap.add_argument("--models-dir", required=True, help="where the dynamic exports are kept")
    ap.add_argument("models", nargs="*", help=f"default: {', '.join(USER_PROFILES)}")
    a = ap.parse_args(argv)
    res = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "host": _cpu_model(),
           "models": {}}
    for name in a.models or USER_PROFILES:
        path = str(export_dynamic(name, Path(a.models_dir)))
        try:
            res["models"][name] = compare_maps(path, _opt(USER_PROFILES[name]))
        except Exception as e:  # a model that fails is a row, not the end
            res["models"][name] = {"error": str(e).splitlines()[0][:300]}
        print(name, json.dumps(res["models"][name]), file=sys.stderr, flush=True)
    print(write_record("dynamic_map", a.output, res, markdown(res)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
