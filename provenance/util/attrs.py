"""An ONNX node's attribute by name, decoded as onnx decodes it.

Every refusal rule and judge reads attributes the same way; one copy, so a rule cannot read a
list or a string attribute differently from its neighbour."""

from __future__ import annotations


def node_attr(node, name: str, default=None):
    """The value of `node`'s attribute `name` (onnx.helper.get_attribute_value: ints, floats,
    bytes for strings, lists, tensors), or `default` when the node has none."""
    import onnx

    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default
