"""Every tensor of an ONNX model, found by the protobuf descriptors rather than a list of places.

Why: the external-data guard (onnx_guard) used to walk the places it knew (initializers, sparse
initializers, node attributes, subgraphs, training_info, function nodes) and missed one it did
not: a model-local function's attribute defaults (`FunctionProto.attribute_proto`), which
ONNX Runtime resolves, so a stranger's artifact read `./.ssh/id_rsa` into its outputs (issue
52).  A list of places misses the next place the same way; this walk follows every message
field the descriptors declare, so a TensorProto reachable by any path is found.

A field that this onnx's descriptors do not declare (a newer ONNX's, kept by protobuf as an
unknown field, as is a value of an enum field it does not declare) cannot be walked into, so
every message is also asked for unknown fields and they are reported as such: the guard refuses
them rather than guess what they hold.

A TensorProto's `raw_data` is never read (reading a bytes field copies it, 575 MB on VGG-19).
Cost: on a synthetic 5,000-node model (65k messages, value_info included) about 100 ms against
50 ms for the old list of places, which skipped value_info; 37 ms on DenseNet-121.
"""

from __future__ import annotations


def _tensor_type():
    import onnx

    return onnx.TensorProto.DESCRIPTOR


_HOW: dict = {}  # field descriptor -> "one", "many", "map" or None (no messages in it)


def _how(f):
    """How a field holds messages: "one", "many" (repeated), "map" (a map whose values are
    messages; ONNX declares none today) or None (it holds none)."""
    if f not in _HOW:
        m = f.message_type
        if m is None:
            _HOW[f] = None
        elif m.GetOptions().map_entry:
            _HOW[f] = "map" if m.fields_by_name["value"].message_type is not None else None
        else:
            rep = getattr(f, "is_repeated", None)  # protobuf >= 5.28 (`label` deprecated)
            _HOW[f] = "many" if (rep if rep is not None else f.label == f.LABEL_REPEATED) \
                else "one"
    return _HOW[f]


def _set_fields(msg, tensor):
    """(field, value) of `msg`'s set fields.  ListFields (one call into protobuf's C code) takes
    half the time of asking each field, but it returns every value, and for a TensorProto that
    means copying `raw_data`: its message fields are asked for one by one instead."""
    if msg.DESCRIPTOR is not tensor:
        return msg.ListFields()
    out = []
    for f in tensor.fields:
        if f.message_type is not None:
            v = getattr(msg, f.name)
            if (len(v) if _how(f) != "one" else msg.HasField(f.name)):
                out.append((f, v))
    return out


def walk(message):
    """(path, kind, message) for every TensorProto (kind "tensor") and every message holding
    fields this onnx does not declare (kind "unknown") inside `message`, in document order.
    `path` reads like `functions[0].attribute_proto[1].t` ("" for `message` itself).

    Iterative, so no recursion limit applies beyond the parser's own nesting limit on what can
    be read at all; a path is kept as links and spelled out only for what is yielded."""
    from google.protobuf.unknown_fields import UnknownFieldSet

    tensor = _tensor_type()
    stack = [(None, message)]  # (path link: (parent link, field, index or key or None), message)
    while stack:
        link, msg = stack.pop()
        if len(UnknownFieldSet(msg)):
            yield _spell(link), "unknown", msg
        if msg.DESCRIPTOR is tensor:
            yield _spell(link), "tensor", msg
        for f, v in reversed(_set_fields(msg, tensor)):  # reversed: popped in document order
            how = _how(f)
            if how == "one":
                stack.append(((link, f.name, None), v))
            elif how == "many":
                stack.extend(((link, f.name, k), v[k]) for k in range(len(v) - 1, -1, -1))
            elif how == "map":
                stack.extend(((link, f.name, repr(k)), v[k]) for k in sorted(v, reverse=True))


def _spell(link) -> str:
    """`graph.node[3].attribute[0].t` from the chain of links walk keeps."""
    parts = []
    while link is not None:
        link, name, index = link
        parts.append(name if index is None else f"{name}[{index}]")
    return ".".join(reversed(parts))


def unknown_field_numbers(message) -> list[int]:
    """The field numbers of `message`'s unknown fields, for a message naming them."""
    from google.protobuf.unknown_fields import UnknownFieldSet

    return sorted({f.field_number for f in UnknownFieldSet(message)})
