"""The user's ONNX model with each node's placement written into it, for Netron.

Netron shows a node's `metadata_props` in its properties pane, so a vendor opening the
annotated model sees, on the graph they know, which backend and partition run each node, which
kernels implement it and which Relax expressions it became, and for a node that runs nowhere,
why (provmap folded it to a constant, TVM cannot compile it, it computes nothing at run time).
The model is otherwise unchanged (same nodes in the same order, names, shapes, weights): the
result differs from the input in metadata_props only, so it still runs anywhere.

It annotates the model the user compiled, not provmap's derived copy (input shapes fixed, nodes
sorted, shape arithmetic folded).  Nodes are matched to the map by their output tensor names,
which every one of those steps keeps: content IDs would not do, since an input shape given
with --input-shape enters every ID downstream of that input.
"""

from __future__ import annotations

import json

import onnx

#: Keys this module writes on a node; any older provmap.* key is dropped first.
KEYS = ("provmap.id", "provmap.backend", "provmap.partition", "provmap.kernels",
        "provmap.exprs", "provmap.reason")


def _placement(answer: dict) -> dict:
    return {
        "provmap.backend": ",".join(answer["backends"]),
        "provmap.partition": ",".join(answer["partitions"]),
        "provmap.kernels": ",".join(k["kernel"] for k in answer["kernels"]
                                    if k["role"] == "compute"),
        "provmap.exprs": ",".join(answer["exprs"]),
    }


def _reason(answer: dict) -> str:
    """Why a node runs in no partition, in the map's own words."""
    if answer["elided"]:
        return answer["elided"]  # folded before import, not compilable by TVM, alias, ...
    if answer["exprs"]:
        return ("its Relax bindings were folded into constants of the compiled module "
                f"({','.join(answer['exprs'])})")
    return "computes nothing at run time"


def annotate_model(model: onnx.ModelProto, mod) -> onnx.ModelProto:
    """A copy of `model` whose every node carries provmap.* metadata: placement, or a reason."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    by_outputs = {tuple(n.outputs): n for n in mod.lookup.map.nodes}
    for node in out.graph.node:
        pnode = by_outputs.get(tuple(node.output))
        if pnode is None:
            props = {"provmap.reason": "not a node of the compiled model"}
        else:
            answer = mod.lookup.onnx_node(pnode.id)[0]
            props = {"provmap.id": pnode.id}
            if answer["backends"]:
                props.update(_placement(answer))
            else:
                props["provmap.reason"] = _reason(answer)
                props["provmap.exprs"] = ",".join(answer["exprs"])
        keep = [p for p in node.metadata_props if not p.key.startswith("provmap.")]
        del node.metadata_props[:]
        node.metadata_props.extend(keep)
        for k in KEYS:
            if props.get(k):
                node.metadata_props.add(key=k, value=props[k])
    info = mod.manifest["model"]
    summary = {"strategy": mod.manifest["strategy"],
               "partitions": [{"id": p["id"], "backend": p["backend"]}
                              for p in mod.manifest["partitions"]],
               "derived": info.get("derived", []),
               "input_shapes_given": info.get("input_shapes_given", {})}
    keep = [p for p in out.metadata_props if p.key != "provmap"]
    del out.metadata_props[:]
    out.metadata_props.extend(keep)
    out.metadata_props.add(key="provmap", value=json.dumps(summary))
    return out


def coverage(model: onnx.ModelProto) -> dict:
    """How many nodes got a placement, a reason, or nothing (the last must be 0)."""
    placed = reasoned = bare = 0
    for node in model.graph.node:
        keys = {p.key for p in node.metadata_props}
        if "provmap.backend" in keys:
            placed += 1
        elif "provmap.reason" in keys:
            reasoned += 1
        else:
            bare += 1
    return {"nodes": len(model.graph.node), "placed": placed, "with_reason": reasoned,
            "unannotated": bare}
