"""Graph inputs used as gather indices, checked against their axis before a run (issue 36).

ONNX says an index outside [-n, n-1] is an error, and ONNX Runtime raises one; OpenVINO's CPU
plugin returns zeros for such rows and TVM's Gather is built in "fast" mode, which reads
outside the tensor (TVM itself warns at build time: "Fast mode segfaults when there are
out-of-bounds indices").  The commonest run-time indices are a graph input read straight by a
Gather (token ids into an embedding table), so those are checked here, once per run, on every
backend alike: a min and a max over the ids.  Indices computed inside the model are not checked
(docs/backends.md says what each backend does with them).
"""

from __future__ import annotations

import numpy as np

from provmap.provenance.util.errors import ProvmapError

#: op -> which input holds indices into input 0 along the `axis` attribute (default 0).
_INDEX_INPUT = {"Gather": 1, "GatherElements": 1}


def index_inputs(view) -> dict[str, dict]:
    """Graph input -> the tightest gather it indexes: {"node", "op", "size"} (manifest
    "model.index_inputs")."""
    out: dict[str, dict] = {}
    for name in view.graph_inputs:
        for i in view.consumers.get(name, ()):
            node = view.nodes[i]
            k = _INDEX_INPUT.get(node.op_type)
            if node.domain not in ("", "ai.onnx") or k is None or len(node.input) <= k \
                    or node.input[k] != name:
                continue
            axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
            shape = _shape(view, node.input[0])
            if shape is None or not -len(shape) <= axis < len(shape):
                continue
            size = shape[axis]
            if not isinstance(size, int) or size < 0:
                continue
            if name not in out or size < out[name]["size"]:
                out[name] = {"node": node.name or node.output[0], "op": node.op_type,
                             "size": size}
    return out


def _shape(view, tensor: str):
    init = view.initializers.get(tensor)
    if init is not None:
        return [int(d) for d in init.dims]
    try:
        return list(view.spec(tensor).shape)
    except ProvmapError:
        return None


def check_indices(name: str, a: np.ndarray, bound: dict) -> None:
    """One line naming the input, the node and the first offending index."""
    if a.size == 0 or a.dtype.kind not in "iu":
        return
    n = int(bound["size"])
    low, high = int(a.min()), int(a.max())
    if low >= -n and high < n:
        return
    bad = low if low < -n else high
    raise ProvmapError(f"input {name!r}: index {bad} is out of range for {bound['op']} "
                       f"{bound['node']!r} (axis of size {n}: valid -{n}..{n - 1}); ONNX "
                       "Runtime refuses it, OpenVINO would return zeros and TVM read outside "
                       "the tensor")
