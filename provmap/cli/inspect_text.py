"""`provmap inspect`'s text listing: the artifact in lines a person reads (`--json` prints the
same information whole).  Its own module: the command's flags and member checks are one
concept, how a partition, a tensor and a profile read on a terminal another."""

from __future__ import annotations

from .common import print_safe as _say, term_safe


def print_inspect_text(info: dict, model_arg, limit: int) -> None:
    m = info["model"]
    _say(f"{info['artifact']}: model {m['name']} (sha256 {m['sha256'][:12]}), strategy "
          f"{info['strategy']}, {len(info['partitions'])} partition(s)")
    if m.get("derived"):
        _say(f"  compiled provmap's derived copy (sha256 {m['derived_sha256'][:12]}): "
              f"{'; '.join(m['derived'])}")
    from provmap.workbench.placement import describe_states

    _say(f"  node states: {describe_states(info['placement']['states'])}")
    pl = info["placement"]  # which nodes those are: what --model changes (issue 36)
    _say(f"  over {len(pl['nodes'])} ONNX nodes of "
         + ("the model as given" + (f" ({term_safe(model_arg)})" if model_arg else
                                    " (embedded in the artifact)")
            if pl["model"] == "original" else
            "the compiled copy (pass --model FILE to key them to your model)"))
    for name, b in info["backends"].items():
        _say(f"  backend {name} {b['version']} {b['options'] or ''}".rstrip())
    for w in info["warnings"]:
        _say(f"  warning: {w}")
    from provmap.runtime_module.schedule import describe

    _say(f"  schedule: {describe(info['schedule'])}")
    if m.get("shape_profile"):
        from provmap.provenance.profile import ShapeProfile

        prof = ShapeProfile.from_json(m["shape_profile"])
        _say(f"  shape profile: {term_safe(prof.describe())} (MIN..MAX@OPT; run refuses other "
             "sizes; '?' below is a size the data decides)")
    for p in info["partitions"]:
        ops = [n for n in p["onnx_nodes"] if not n["helper"] and n.get("ran", True)]
        nk = len(p["kernels"])
        print()
        _say(f"{p['id']}  {p['backend']}  {len(ops)} op node{'s' if len(ops) != 1 else ''}, "
              f"{nk} kernel{'s' if nk != 1 else ''}  [{p.get('why', '')}]")
        for t in p["inputs"]:
            _say(f"  in   {t['name']}: {t['dtype']}{_dims(t)} {t['bytes']} B  "
                 f"<- {t['producer']}")
        for t in p["outputs"]:
            _say(f"  out  {t['name']}: {t['dtype']}{_dims(t)} {t['bytes']} B")
        shown = ops[:limit] if limit else ops
        _say("  nodes: " + ", ".join(f"{n['name'] or n['id']}({n['op_type']})" for n in shown)
              + (f", ... {len(ops) - len(shown)} more" if len(shown) < len(ops) else ""))
        ks = p["kernels"][:limit] if limit else p["kernels"]
        _say("  kernels: " + ", ".join(k.split(":", 1)[1] for k in ks)
              + (f", ... {len(p['kernels']) - len(ks)} more" if len(ks) < len(p["kernels"]) else ""))


def _dims(t: dict) -> str:
    """[1, seq, 1000]: a dimension the profile decides by its symbols; '?' where data does."""
    sym = t.get("symbols") or [None] * len(t["shape"])
    return "[" + ", ".join(str(d) if d is not None else (s or "?")
                           for d, s in zip(t["shape"], sym)) + "]"


