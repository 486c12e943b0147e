"""The user's ONNX model with each node's placement written into it, for Netron and Model Explorer.

Netron shows a node's `metadata_props` in its properties pane, so a vendor opening the
annotated model sees, on the graph they know, which backend and partition run each node, which
kernels implement it and which Relax expressions it became, and for a node that runs nowhere,
why (provmap folded it to a constant, TVM cannot compile it, it computes nothing at run time).
The model is otherwise unchanged (same nodes in the same order, names, shapes, weights): the
result differs from the input in metadata_props only, so it still runs anywhere.  Each node's `namespace` (Model Explorer's layer key) is
its partition and backend ("p0 openvino") above the node's own namespace, so Model Explorer
opens the model grouped by partition.  The rows come from placement.py, the same table
`provmap inspect --json` prints.

It annotates the model the user compiled, not provmap's derived copy (input shapes fixed, nodes
sorted, shape arithmetic folded).  Nodes are matched to the map by their output tensor names,
which every one of those steps keeps: content IDs would not do, since an input shape given
with --input-shape enters every ID downstream of that input.
"""

from __future__ import annotations

import json

import onnx

from .placement import STATES, group, placement

#: Keys this module writes on a node; any older provmap.* key is dropped first.  "namespace"
#: is Model Explorer's: it groups nodes into collapsible layers, here one per partition.
KEYS = ("provmap.id", "provmap.state", "provmap.backend", "provmap.partition", "provmap.kernels",
        "provmap.exprs", "provmap.reason")


def _namespace(node, row: dict) -> str:
    """The partition layer, above the node's own namespace (its metadata, or the /a/b/ prefix
    of its name as exporters write it), so the model's hierarchy stays inside each partition."""
    props = {p.key: p.value for p in node.metadata_props}
    # A model annotated before carries our namespace already: the node's own is in its name.
    own = None if any(k.startswith("provmap.") for k in props) else props.get("namespace")
    if own is None:
        own = "/".join([s for s in node.name.strip("/").split("/") if s][:-1])
    return "/".join(s for s in (group(row), own.strip("/")) if s)


def annotate_model(model: onnx.ModelProto, mod) -> onnx.ModelProto:
    """A copy of `model` whose every node carries provmap.* metadata: placement, or a reason."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    rows = placement(out, mod)["nodes"]
    for node, row in zip(out.graph.node, rows):
        props = {"provmap.id": row["id"] or "", "provmap.state": row["state"],
                 "provmap.exprs": ",".join(row["exprs"])}
        if row["backends"]:
            props.update({"provmap.backend": ",".join(row["backends"]),
                          "provmap.partition": ",".join(row["partitions"]),
                          "provmap.kernels": ",".join(row["kernels"])})
        else:
            props["provmap.reason"] = row["reason"]
        namespace = _namespace(node, row)
        keep = [p for p in node.metadata_props
                if not p.key.startswith("provmap.") and p.key != "namespace"]
        del node.metadata_props[:]
        node.metadata_props.extend(keep)
        for k in KEYS:
            if props.get(k):
                node.metadata_props.add(key=k, value=props[k])
        node.metadata_props.add(key="namespace", value=namespace)
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
    """How many nodes got a placement, a reason, or nothing (the last must be 0), and how many
    are in each state (placement.STATES), read back from the annotated model itself."""
    placed = reasoned = bare = 0
    states = dict.fromkeys(STATES, 0)
    for node in model.graph.node:
        props = {p.key: p.value for p in node.metadata_props}
        if "provmap.backend" in props:
            placed += 1
        elif "provmap.reason" in props:
            reasoned += 1
        else:
            bare += 1
        if props.get("provmap.state") in states:
            states[props["provmap.state"]] += 1
    return {"nodes": len(model.graph.node), "placed": placed, "with_reason": reasoned,
            "unannotated": bare, "states": states}
