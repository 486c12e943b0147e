"""Graph inputs used as gather or scatter indices, checked against their axes before a run
(issue 36).

ONNX says an index outside [-n, n-1] is an error, and ONNX Runtime raises one; OpenVINO's CPU
plugin returns zeros for such Gather rows (garbage for GatherND) and TVM's Gather is built in
"fast" mode, which reads outside the tensor (TVM itself warns at build time: "Fast mode
segfaults when there are out-of-bounds indices"); TVM's ScatterElements and ScatterND *write*
outside it, and the process died (exit 139, the fourteenth afternoon).  The commonest run-time
indices are a graph input read by a Gather (token ids into an embedding table), straight or
through ops that keep its values (a Reshape, as GPT-2's export has), so those are checked
here, once per run, on every backend alike: a min and a max over the ids, per column of the
last axis for GatherND and ScatterND (each column indexes its own axis of the data).  Indices
computed inside the model are not checked (docs/backends.md says what each backend does with
them).
"""

from __future__ import annotations

import numpy as np

from provmap.provenance.util.errors import ProvmapError

#: op -> which input holds indices into input 0 along the `axis` attribute (default 0).
_INDEX_INPUT = {"Gather": 1, "GatherElements": 1, "ScatterElements": 1, "Scatter": 1}
#: op -> which input holds index tuples into input 0: their last axis's column j indexes the
#: data's axis batch_dims + j (GatherND's `batch_dims`; ScatterND has none).
_TUPLE_INPUT = {"GatherND": 1, "ScatterND": 1}
#: every op whose indices are checked (the manifest's `op`)
INDEXED_OPS = tuple(_INDEX_INPUT) + tuple(_TUPLE_INPUT)


#: Ops that hand their first input's values on unchanged (only moved or re-shaped): an index
#: tensor that passes through them is still the graph input's values.  GPT-2's export reshapes
#: input_ids (`view(-1, seq)`) before the embedding's Gather, and that Gather went unchecked
#: (issue 36's sixth afternoon: OpenVINO returned zeros, TVM crashed).  Slice is not one: it may
#: drop the very elements that are out of range.
_PASS_VALUES = {"Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Transpose", "Expand"}
#: ...of those, the ones that keep every element's place too: index tuples (GatherND's last
#: axis) through a Reshape or Transpose are other tuples, so only these are followed for them.
_PASS_LAYOUT = {"Identity"}
_INT_TYPES = {6, 7}  # int32, int64: a narrower Cast wraps, and the checked values would differ


def _same_values(view, name: str, layout: bool = False) -> list[str]:
    """`name` and every tensor that carries its values unchanged (see _PASS_VALUES; a Cast
    to an integer type counts); `layout`: each in its place too (_PASS_LAYOUT)."""
    keep = _PASS_LAYOUT if layout else _PASS_VALUES
    out, todo = [name], [name]
    while todo:
        t = todo.pop()
        for i in view.consumers.get(t, ()):
            node = view.nodes[i]
            if node.domain not in ("", "ai.onnx") or not node.input or node.input[0] != t \
                    or not node.output or not node.output[0] or node.output[0] in out:
                continue
            to = next((a.i for a in node.attribute if a.name == "to"), None)
            if node.op_type in keep or (node.op_type == "Cast" and to in _INT_TYPES):
                out.append(node.output[0])
                todo.append(node.output[0])
    return out


def index_inputs(view) -> dict[str, list[dict]]:
    """Graph input -> each gather or scatter it indexes, directly or through ops that keep its
    values (_PASS_VALUES): {"node", "op", "size"} (one axis) or {"node", "op", "sizes"} (index
    tuples: one size per column of the last axis) (manifest "model.index_inputs").  Of the
    one-axis uses only the tightest is kept: one bound checks them all."""
    out: dict[str, list[dict]] = {}
    for name in view.graph_inputs:
        uses = []
        for tensor in _same_values(view, name):
            uses += _axis_uses(view, tensor)
        uses = sorted(uses, key=lambda u: u["size"])[:1]
        for tensor in _same_values(view, name, layout=True):
            uses += [u for u in _tuple_uses(view, tensor) if u not in uses]
        if uses:
            out[name] = uses
    return out


def _consumers(view, tensor: str, table: dict):
    for i in view.consumers.get(tensor, ()):
        node = view.nodes[i]
        k = table.get(node.op_type)
        if node.domain in ("", "ai.onnx") and k is not None and len(node.input) > k \
                and node.input[k] == tensor:
            yield node


def _attr(node, name: str, default: int = 0) -> int:
    return next((a.i for a in node.attribute if a.name == name), default)


def _axis_uses(view, tensor: str) -> list[dict]:
    out = []
    for node in _consumers(view, tensor, _INDEX_INPUT):
        axis, shape = _attr(node, "axis"), _shape(view, node.input[0])
        if shape is None or not -len(shape) <= axis < len(shape):
            continue
        size = shape[axis]
        if isinstance(size, int) and size >= 0:
            out.append({"node": node.name or node.output[0], "op": node.op_type, "size": size})
    return out


def _tuple_uses(view, tensor: str) -> list[dict]:
    out = []
    for node in _consumers(view, tensor, _TUPLE_INPUT):
        data, idx = _shape(view, node.input[0]), _shape(view, tensor)
        if data is None or not idx or not isinstance(idx[-1], int):
            continue
        b = _attr(node, "batch_dims") if node.op_type == "GatherND" else 0
        sizes = data[b:b + idx[-1]]
        if len(sizes) == idx[-1] and all(isinstance(n, int) and n >= 0 for n in sizes):
            out.append({"node": node.name or node.output[0], "op": node.op_type,
                        "sizes": [int(n) for n in sizes]})
    return out


def _shape(view, tensor: str):
    init = view.initializers.get(tensor)
    if init is not None:
        return [int(d) for d in init.dims]
    try:
        return list(view.spec(tensor).shape)
    except ProvmapError:
        return None


def uses_of(bound) -> list[dict]:
    """A manifest entry as a list of uses: artifacts before the fourteenth afternoon hold one
    {"node", "op", "size"} dict per input."""
    return bound if isinstance(bound, list) else [bound]


def check_indices(name: str, a: np.ndarray, bound) -> None:
    """One line naming the input, the node and the first offending index."""
    if a.size == 0 or a.dtype.kind not in "iu":
        return
    for use in uses_of(bound):
        if "sizes" in use:
            if a.ndim == 0 or a.shape[-1] != len(use["sizes"]):
                continue
            for j, n in enumerate(use["sizes"]):
                _check(name, a[..., j], int(n), use, f"column {j} of the last axis, ")
        else:
            _check(name, a, int(use["size"]), use, "")


def _check(name: str, a: np.ndarray, n: int, use: dict, where: str) -> None:
    low, high = int(a.min()), int(a.max())
    if low >= -n and high < n:
        return
    bad = low if low < -n else high
    if use["op"] in ("Gather", "GatherElements"):
        does = "OpenVINO would return zeros and TVM read outside the tensor"
    else:
        does = "OpenVINO and TVM would read or write outside the tensor (TVM's process dies)"
    raise ProvmapError(f"input {name!r}: index {bad} is out of range for {use['op']} "
                       f"{use['node']!r} ({where}axis of size {n}: valid -{n}..{n - 1}); ONNX "
                       f"Runtime refuses it, {does}")


def random_ints(rng, dt: np.dtype, shape, bound) -> np.ndarray:
    """Random values for an integer or bool input: 0/1 (masks, bools), or, for an input that
    indexes (`bound`, its manifest entry), any index inside every bound: per column of the last
    axis for index tuples."""
    high = random_high(bound) if dt.kind in "iu" else None
    cap = int(np.iinfo(dt).max) + 1 if dt.kind in "iu" else 2
    if isinstance(high, list) and shape and shape[-1] == len(high):
        high = [max(1, min(h, cap)) for h in high]
    else:
        high = min(high, cap) if type(high) is int and high > 2 else 2
    return rng.integers(0, high, size=shape).astype(dt)


def random_high(bound) -> int | list[int] | None:
    """The exclusive upper end of random indices that stay in range: one int for the whole
    input, a list (one per column of the last axis), or None (no bound)."""
    uses = uses_of(bound) if bound else []
    tuples = [u["sizes"] for u in uses if "sizes" in u]
    if tuples:
        return [min(col) for col in zip(*tuples)] if len({len(t) for t in tuples}) == 1 \
            else None
    sizes = [u["size"] for u in uses if type(u.get("size")) is int]
    return min(sizes) if sizes else None


def unchecked_gathers(sub) -> list[str]:
    """The gathers and scatters of `sub` whose indices the model computes (not a graph input's values, not
    a constant): no run-time check covers them, and on TVM an index far out of range crashed
    the process (exit 139) where OpenVINO returned zeros (the eleventh afternoon).  Said at
    compile so the limit is not found by a crash."""
    view = sub.view
    checked = {t for name in view.graph_inputs for t in _same_values(view, name)}
    in_place = {t for name in view.graph_inputs for t in _same_values(view, name, layout=True)}
    out = []
    for i in sub.ops:
        node = view.nodes[i]
        k = _INDEX_INPUT.get(node.op_type, _TUPLE_INPUT.get(node.op_type))
        if node.domain not in ("", "ai.onnx") or k is None or len(node.input) <= k:
            continue
        t = node.input[k]
        p = view.producer.get(t)
        seen = in_place if node.op_type in _TUPLE_INPUT else checked
        if t and t not in seen and p is not None and view.is_op(p):
            out.append(f"{node.op_type} '{node.name or node.output[0]}'")
    return out


def gather_notes(sub, what: str) -> list[str]:
    """The compile note for `unchecked_gathers`, `what` saying what the backend does."""
    from provmap.provenance.util.listing import first_few

    found = unchecked_gathers(sub)
    return [f"{first_few(found)}: indices the model computes are not checked at run time; "
            f"{what} (docs/backends.md, 'Indices out of range')"] if found else []
