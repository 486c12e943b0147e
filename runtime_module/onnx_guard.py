"""Refusing ONNX models in an artifact that point outside it.

Why: a partition's `model.onnx` is handed to ONNX Runtime as bytes, and ORT resolves a
tensor's external data (`data_location: EXTERNAL`, `external_data {location: ...}`) against the
current directory.  An artifact from a stranger whose initializer said `.ssh/id_rsa` read the
victim's key into its outputs, with no trust asked (ORT partitions are "only data"); so did one
whose model-local function had that tensor as an attribute default (issue 52), a place the old
list of places to look missed.  So any reference at all, in any tensor the protobuf
descriptors say the model can hold (onnx_tensors.walk), is refused, for every backend, trusted
or not, and so is a field or enum value this onnx does not declare (it could hold or mean a
tensor the walk cannot see).  One reference is provmap's own and allowed: an ONNX Runtime
partition past protobuf's 2 GB keeps its weights in the same partition's `model.data`, and a
tensor may name exactly that, inside its bytes (`_in_sibling`, backends/ort_blob.py).
"""

from __future__ import annotations

from provmap.provenance.util.errors import ProvmapError

_OUTSIDE = ("an artifact holds its tensors itself; external data would be read from this "
            "machine's files")


def _in_sibling(t, sibling_size: int | None) -> bool:
    """A tensor whose data is at a place of its partition's own `model.data` (backends/
    ort_blob.py: a partition past protobuf's 2 GB), and nowhere else: the location exactly that
    name (the loader writes it into a fresh directory), only the keys ONNX Runtime reads, the
    bytes inside the member and as many as the tensor's type and dims say."""
    from provmap.provenance.weights import tensor_bytes

    if sibling_size is None:
        return False
    info = {}
    for e in t.external_data:
        if e.key in info or e.key not in ("location", "offset", "length"):
            return False
        info[e.key] = e.value
    try:
        offset, length = int(info.get("offset", "0")), int(info.get("length", "-1"))
    except ValueError:
        return False
    return (info.get("location") == "model.data" and offset >= 0
            and length == tensor_bytes(t) and offset + length <= sibling_size)


def external_refs(model, sibling_size: int | None = None) -> list[str]:
    """Every tensor of `model` (a ModelProto) that names data outside it, and every message with
    fields or enum values this onnx does not declare (protobuf keeps both as unknown fields),
    described with its path in the model.  `sibling_size`: the size of the partition's own
    `model.data`, the one place a tensor's data may be (`_in_sibling`)."""
    import onnx

    from .onnx_tensors import unknown_field_numbers, walk

    out = []
    for path, kind, msg in walk(model):
        if kind == "tensor":
            if msg.data_location == onnx.TensorProto.EXTERNAL and _in_sibling(msg, sibling_size):
                continue
            if msg.data_location == onnx.TensorProto.EXTERNAL or len(msg.external_data):
                loc = next((e.value for e in msg.external_data if e.key == "location"), "?")
                out.append(f"{path}: tensor {msg.name!r} refers to external data {loc!r} "
                           f"({_OUTSIDE})")
        else:
            nums = ", ".join(map(str, unknown_field_numbers(msg)[:5]))
            out.append(f"{path or 'the model'}: {msg.DESCRIPTOR.name} field number(s) {nums} "
                       f"hold what onnx {onnx.__version__} does not declare (a newer ONNX's "
                       "field or enum value, which could name external data this check cannot "
                       "see)")
    return out


def check_onnx_bytes(data: bytes, where: str, sibling_size: int | None = None):
    """Parse `data` as an ONNX model and refuse it if any tensor refers to external data
    (other than its partition's own `model.data` of `sibling_size` bytes, when it has one);
    returns the parsed model.  `where` names the artifact and member."""
    import onnx

    try:
        model = onnx.load_from_string(bytes(data))
    except Exception as e:  # protobuf's DecodeError and friends
        raise ProvmapError(f"{where}: not a valid ONNX model "
                           f"({str(e).splitlines()[0][:200] if str(e) else type(e).__name__})") \
            from None
    refs = external_refs(model, sibling_size)
    if refs:
        raise ProvmapError(f"{where}: refused: {refs[0]}"
                           + (f"; {len(refs) - 1} more" if len(refs) > 1 else ""))
    return model


def check_ir_xml(data: bytes, where: str) -> None:
    """Refuse an OpenVINO `model.xml` that is not an IR document.

    Why: `Core.read_model(bytes, weights)` picks a frontend by sniffing the bytes, so a
    stranger's `model.xml` holding an ONNX model was read by OpenVINO's ONNX frontend, whose
    external data resolves against the current directory: a file of the victim's ended up in
    the outputs, with no trust asked.  An IR is XML whose root element is `net`; provmap's IR
    never has a document type, and a DTD's entities are the other way an XML file names other
    files.  The document is parsed (ir_xml.check), not searched: a byte search for
    `<!DOCTYPE` missed the same text in UTF-16 (issue 52), which OpenVINO read."""
    from .ir_xml import IRXMLError, check

    try:
        check(bytes(data))
    except IRXMLError as e:
        raise ProvmapError(f"{where}: refused: not an OpenVINO IR ({e})") from None


def check_partition_files(backend: str, files: dict, where: str) -> None:
    """Every model file of a partition of `backend` (files: {name: bytes}; `where` names the
    artifact and the partition's folder), checked before its backend sees it."""
    from .registry import parse_variant

    library = parse_variant(backend)[0]
    openvino = library == "openvino"
    sibling = files.get("model.data") if library == "onnxruntime" else None
    for name, data in files.items():
        if name.lower().endswith(".onnx"):
            check_onnx_bytes(data, f"{where}{name}", len(sibling)
                             if sibling is not None and name == "model.onnx" else None)
        elif openvino and name.lower().endswith(".xml"):
            check_ir_xml(data, f"{where}{name}")
