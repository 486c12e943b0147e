"""Refusing ONNX models in an artifact that point outside it.

Why: a partition's `model.onnx` is handed to ONNX Runtime as bytes, and ORT resolves a
tensor's external data (`data_location: EXTERNAL`, `external_data {location: ...}`) against the
current directory.  An artifact from a stranger whose initializer said `.ssh/id_rsa` read the
victim's key into its outputs, with no trust asked (ORT partitions are "only data").  provmap
never writes external data into an artifact, so any reference at all, in any tensor anywhere in
the model (initializers, sparse initializers, Constant and other tensor attributes, subgraphs of
If/Loop/Scan, model-local functions, training_info graphs), is refused, for every backend,
trusted or not.
"""

from __future__ import annotations

from provmap.provenance.util.errors import ProvmapError


def _tensor_refs(t, where: str):
    import onnx

    if t.data_location == onnx.TensorProto.EXTERNAL or len(t.external_data):
        loc = next((e.value for e in t.external_data if e.key == "location"), "?")
        yield f"{where} tensor {t.name!r} refers to external data {loc!r}"


def _sparse_refs(s, where: str):
    yield from _tensor_refs(s.values, where)
    yield from _tensor_refs(s.indices, where)


def _graph_refs(g, where: str):
    for t in g.initializer:
        yield from _tensor_refs(t, f"{where} initializer")
    for s in g.sparse_initializer:
        yield from _sparse_refs(s, f"{where} sparse initializer")
    for k, n in enumerate(g.node):
        yield from _node_refs(n, f"{where} node #{k} {n.name!r} ({n.op_type})")


def _node_refs(n, where: str):
    # Iterative over subgraphs' nesting would be needed only past protobuf's own recursion
    # limit (100), which parsing already enforces.
    for a in n.attribute:
        at = f"{where} attribute {a.name!r}:"
        if a.HasField("t"):
            yield from _tensor_refs(a.t, at)
        for t in a.tensors:
            yield from _tensor_refs(t, at)
        if a.HasField("sparse_tensor"):
            yield from _sparse_refs(a.sparse_tensor, at)
        for s in a.sparse_tensors:
            yield from _sparse_refs(s, at)
        if a.HasField("g"):
            yield from _graph_refs(a.g, f"{at} subgraph")
        for g in a.graphs:
            yield from _graph_refs(g, f"{at} subgraph")


def external_refs(model) -> list[str]:
    """Every tensor of `model` (a ModelProto) that names data outside it, described."""
    out = list(_graph_refs(model.graph, "graph"))
    for k, t in enumerate(model.training_info):  # ORT ignores them today; a tool may not
        out.extend(_graph_refs(t.initialization, f"training_info[{k}].initialization"))
        out.extend(_graph_refs(t.algorithm, f"training_info[{k}].algorithm"))
    for f in model.functions:
        for k, n in enumerate(f.node):
            out.extend(_node_refs(n, f"function {f.name!r} node #{k} {n.name!r} ({n.op_type})"))
    return out


def check_onnx_bytes(data: bytes, where: str):
    """Parse `data` as an ONNX model and refuse it if any tensor refers to external data;
    returns the parsed model.  `where` names the artifact and member."""
    import onnx

    try:
        model = onnx.load_from_string(bytes(data))
    except Exception as e:  # protobuf's DecodeError and friends
        raise ProvmapError(f"{where}: not a valid ONNX model "
                           f"({str(e).splitlines()[0][:200] if str(e) else type(e).__name__})") \
            from None
    refs = external_refs(model)
    if refs:
        raise ProvmapError(f"{where}: refused: {refs[0]} (an artifact holds its tensors itself; "
                           "external data would be read from this machine's files)"
                           + (f"; {len(refs) - 1} more" if len(refs) > 1 else ""))
    return model


def check_ir_xml(data: bytes, where: str) -> None:
    """Refuse an OpenVINO `model.xml` that is not an IR document.

    Why: `Core.read_model(bytes, weights)` picks a frontend by sniffing the bytes, so a
    stranger's `model.xml` holding an ONNX model was read by OpenVINO's ONNX frontend, whose
    external data resolves against the current directory: a file of the victim's ended up in
    the outputs, with no trust asked.  An IR is XML whose root element is `net`; provmap's IR
    never has a document type (DTD entities are the other way an XML file names other files)."""
    import io
    import re
    import xml.etree.ElementTree as ET

    head = bytes(data[:1 << 16]).lstrip(b"\xef\xbb\xbf \t\r\n")
    if not head.startswith(b"<") or re.search(rb"<!(DOCTYPE|ENTITY)", bytes(data), re.I):
        raise ProvmapError(f"{where}: refused: not an OpenVINO IR (an XML document whose root "
                           "element is <net>, without a document type)")
    try:
        _, root = next(ET.iterparse(io.BytesIO(bytes(data)), events=("start",)))
    except (ET.ParseError, StopIteration) as e:
        raise ProvmapError(f"{where}: refused: not an OpenVINO IR ({e})") from None
    if root.tag != "net":
        raise ProvmapError(f"{where}: refused: not an OpenVINO IR (root element "
                           f"<{root.tag[:40]!r}>, expected <net>)")


def check_partition_files(backend: str, files: dict, where: str) -> None:
    """Every model file of a partition of `backend` (files: {name: bytes}; `where` names the
    artifact and the partition's folder), checked before its backend sees it."""
    from .registry import parse_variant

    openvino = parse_variant(backend)[0] == "openvino"
    for name, data in files.items():
        if name.lower().endswith(".onnx"):
            check_onnx_bytes(data, f"{where}{name}")
        elif openvino and name.lower().endswith(".xml"):
            check_ir_xml(data, f"{where}{name}")
