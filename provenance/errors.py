"""User-facing errors.

The CLI turns a ProvmapError into one line on stderr and a non-zero exit, so every message must
stand alone: it names the file or the ONNX node (index, name, op type) at fault.
"""


class ProvmapError(Exception):
    """An error caused by the user's input, reported as one clear line."""


def describe_node(index: int, node) -> str:
    name = node.name or "<unnamed>"
    return f"ONNX node #{index} '{name}' ({node.op_type})"
