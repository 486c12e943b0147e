"""bisect's verdict as text: which node, which tensors, what the node alone did, and why a
divergence that is not the node's own is not its kernel's fault."""

from __future__ import annotations

from .common import print_safe


def print_bisect(backend: str, res: dict, metrics_text) -> None:
    if not res["diverges"]:
        worst = max(res["outputs"], key=lambda t: t["max_abs"] or 0.0, default=None)
        print_safe(f"{backend} matches {res['reference']} on every output ({res['runs']} "
              "run(s))" + (f"; largest difference {worst['tensor']}: {metrics_text(worst)}"
                           if worst else ""))
        if res.get("inherited"):
            print_safe(f"  {_inherited(res)}: differences upstream grown, not a wrong kernel")
    elif res.get("accumulated"):
        for t in res["tensors"]:
            print_safe(f"  diverging model output {t['tensor']}: {metrics_text(t)}")
        print_safe(f"{backend} differs from {res['reference']} on the whole model, but no node "
                   f"is wrong on its own inputs: {_inherited(res)}; the difference built up "
                   "across nodes (accumulated error), so no single node is to blame and no "
                   "reproducer was written")
    elif res.get("fused_only"):
        for t in res["tensors"]:
            print_safe(f"  diverging model output {t['tensor']}: {metrics_text(t)}")
        print_safe(f"{backend} differs from {res['reference']} on the whole model, but with "
              "every intermediate exposed each node matches: the difference comes from nodes "
              f"fused together ({backend}, {res['reference']} or both fuse them when nothing "
              "is exposed), so no single node is to blame and no reproducer was written")
    else:
        print_safe(f"first diverging node: {res['node']} ({res['op_type']}, {res['node_id']}), "
              f"position {res['position']} of {res['op_nodes']}, found in {res['runs']} runs")
        for t in res["tensors"]:
            print_safe(f"  diverging tensor {t['tensor']}: {metrics_text(t)}")
        for t in res["reproducer_tensors"]:
            print_safe(f"  the node alone, {t['tensor']}: {'FAIL' if not t['ok'] else 'ok'}, "
                  f"{metrics_text(t)}")
        if not res["reproducer_diverges"] and res.get("reference_alone_differs"):
            print_safe(f"  the node alone matches {res['reference']} on the node alone; "
                       f"{res['reference']} computes it otherwise inside the model than alone "
                       "(fused, or in another precision), and that is what differs: not a wrong "
                       "kernel for this node")
        elif not res["reproducer_diverges"]:
            print_safe("  the node alone, fed the reference's inputs, matches: the divergence is "
                  "small upstream differences amplified here (accumulated error), not a wrong "
                  "kernel for this node")
        if "reproducer" in res:
            checks = ", ".join(t["tensor"] for t in res["reproducer_tensors"]) or \
                "none of them (not outputs of this node)"
            print_safe(f"reproducer: {res['reproducer']['model']} (inputs "
                  f"{res['reproducer']['inputs']}, expected {res['reproducer']['expected']}); "
                  f"checks {checks}; fails alone: {res['reproducer_diverges']}")


def _inherited(res: dict) -> str:
    """What bisect found past the tolerance that no node's kernel is to blame for."""
    n = len(res["inherited"])
    return (f"{n} intermediate tensor{'s' if n != 1 else ''} differ past the tolerance "
            f"({', '.join(res['inherited'][:3])}{', ...' if n > 3 else ''}), each as "
            f"{res['reference']} computes it from {res['backend']}'s own inputs (the node "
            "alone)")
