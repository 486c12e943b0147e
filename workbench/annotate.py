"""The original ONNX model with each node's placement written into it, for Netron.

Netron shows a node's `metadata_props` in its properties pane, so a vendor opening the
annotated model sees, on the graph they know, which backend and partition run each node, which
kernels implement it and which Relax expressions it became.  The model is otherwise unchanged
(same nodes, names, weights), so it still runs anywhere.
"""

from __future__ import annotations

import json

import onnx

from provmap.provenance.ids import compute_node_ids


def annotate_model(model: onnx.ModelProto, mod) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    ids = compute_node_ids(out.graph).node_id  # the same content IDs the map uses
    lk = mod.lookup
    for node, nid in zip(out.graph.node, ids):
        answers = lk.onnx_node(nid)
        if not answers:
            continue
        a = answers[0]
        props = {
            "provmap.id": nid,
            "provmap.backend": ",".join(a["backends"]) or ("(elided)" if a["elided"] else ""),
            "provmap.partition": ",".join(a["partitions"]),
            "provmap.kernels": ",".join(k["kernel"] for k in a["kernels"]
                                        if k["role"] == "compute"),
            "provmap.exprs": ",".join(a["exprs"]),
        }
        keep = [p for p in node.metadata_props if not p.key.startswith("provmap.")]
        del node.metadata_props[:]
        node.metadata_props.extend(keep)
        for k, v in props.items():
            if v:
                node.metadata_props.add(key=k, value=v)
    summary = {"strategy": mod.manifest["strategy"],
               "partitions": [{"id": p["id"], "backend": p["backend"]}
                              for p in mod.manifest["partitions"]]}
    keep = [p for p in out.metadata_props if p.key != "provmap"]
    del out.metadata_props[:]
    out.metadata_props.extend(keep)
    out.metadata_props.add(key="provmap", value=json.dumps(summary))
    return out
