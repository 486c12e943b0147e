"""Graph inputs used as gather indices, checked against their axis before a run (issue 36).

ONNX says an index outside [-n, n-1] is an error, and ONNX Runtime raises one; OpenVINO's CPU
plugin returns zeros for such rows and TVM's Gather is built in "fast" mode, which reads
outside the tensor (TVM itself warns at build time: "Fast mode segfaults when there are
out-of-bounds indices").  The commonest run-time indices are a graph input read by a Gather
(token ids into an embedding table), straight or through ops that keep its values (a Reshape,
as GPT-2's export has), so those are checked here, once per run, on every backend alike: a min
and a max over the ids.  Indices computed inside the model are not checked (docs/backends.md
says what each backend does with them).
"""

from __future__ import annotations

import numpy as np

from provmap.provenance.util.errors import ProvmapError

#: op -> which input holds indices into input 0 along the `axis` attribute (default 0).
_INDEX_INPUT = {"Gather": 1, "GatherElements": 1}


#: Ops that hand their first input's values on unchanged (only moved or re-shaped): an index
#: tensor that passes through them is still the graph input's values.  GPT-2's export reshapes
#: input_ids (`view(-1, seq)`) before the embedding's Gather, and that Gather went unchecked
#: (issue 36's sixth afternoon: OpenVINO returned zeros, TVM crashed).  Slice is not one: it may
#: drop the very elements that are out of range.
_PASS_VALUES = {"Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Transpose", "Expand"}
_INT_TYPES = {6, 7}  # int32, int64: a narrower Cast wraps, and the checked values would differ


def _same_values(view, name: str) -> list[str]:
    """`name` and every tensor that carries its values unchanged (see _PASS_VALUES; a Cast
    to an integer type counts)."""
    out, todo = [name], [name]
    while todo:
        t = todo.pop()
        for i in view.consumers.get(t, ()):
            node = view.nodes[i]
            if node.domain not in ("", "ai.onnx") or not node.input or node.input[0] != t \
                    or not node.output or not node.output[0] or node.output[0] in out:
                continue
            to = next((a.i for a in node.attribute if a.name == "to"), None)
            if node.op_type in _PASS_VALUES or (node.op_type == "Cast" and to in _INT_TYPES):
                out.append(node.output[0])
                todo.append(node.output[0])
    return out


def index_inputs(view) -> dict[str, dict]:
    """Graph input -> the tightest gather it indexes, directly or through ops that keep its
    values (_PASS_VALUES): {"node", "op", "size"} (manifest "model.index_inputs")."""
    out: dict[str, dict] = {}
    for name in view.graph_inputs:
        for tensor in _same_values(view, name):
            for i in view.consumers.get(tensor, ()):
                node = view.nodes[i]
                k = _INDEX_INPUT.get(node.op_type)
                if node.domain not in ("", "ai.onnx") or k is None or len(node.input) <= k \
                        or node.input[k] != tensor:
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


def unchecked_gathers(sub) -> list[str]:
    """The Gathers of `sub` whose indices the model computes (not a graph input's values, not
    a constant): no run-time check covers them, and on TVM an index far out of range crashed
    the process (exit 139) where OpenVINO returned zeros (the eleventh afternoon).  Said at
    compile so the limit is not found by a crash."""
    view = sub.view
    checked = {t for name in view.graph_inputs for t in _same_values(view, name)}
    out = []
    for i in sub.ops:
        node = view.nodes[i]
        k = _INDEX_INPUT.get(node.op_type)
        if node.domain not in ("", "ai.onnx") or k is None or len(node.input) <= k:
            continue
        t = node.input[k]
        p = view.producer.get(t)
        if t and t not in checked and p is not None and view.is_op(p):
            out.append(f"{node.op_type} '{node.name or node.output[0]}'")
    return out


def gather_notes(sub, what: str) -> list[str]:
    """The compile note for `unchecked_gathers`, `what` saying what the backend does."""
    from provmap.provenance.util.listing import first_few

    found = unchecked_gathers(sub)
    return [f"{first_few(found)}: indices the model computes are not checked at run time; "
            f"{what} (docs/backends.md, 'Indices out of range')"] if found else []
