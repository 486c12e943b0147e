"""The external-data guard (runtime_module/onnx_guard.py, onnx_tensors.py) against every place
the ONNX protobuf descriptors say a tensor can be, not a list of places someone remembered.

Issue 52: the guard walked initializers, node attributes, sparse tensors, subgraphs,
training_info and function nodes, and a function's attribute default (`FunctionProto.
attribute_proto[].t`) read `./.ssh/id_rsa` into a stranger's outputs.  Here the paths are
enumerated from the descriptors of the installed onnx, so a TensorProto field in a newer onnx
is a path this test plants an external tensor at, whether or not anyone thought of it."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from attack_kit import external, stealing_model

from provmap.provenance.util.errors import ProvmapError
from provmap.runtime_module.onnx_guard import check_onnx_bytes

_TENSOR = onnx.TensorProto.DESCRIPTOR


def _repeated(f) -> bool:
    rep = getattr(f, "is_repeated", None)
    return bool(rep) if rep is not None else f.label == f.LABEL_REPEATED


def _reaching() -> set:
    """The message types from which a TensorProto can be reached (TensorProto included)."""
    types, todo = set(), [onnx.ModelProto.DESCRIPTOR]
    while todo:
        d = todo.pop()
        if d not in types:
            types.add(d)
            todo.extend(f.message_type for f in d.fields if f.message_type is not None)
    reach, grew = {_TENSOR}, True
    while grew:
        new = {d for d in types - reach
               if any(f.message_type in reach for f in d.fields)}
        reach |= new
        grew = bool(new)
    return reach


def tensor_paths(descriptor=onnx.ModelProto.DESCRIPTOR, path=(), reach=None) -> list[tuple]:
    """Every chain of fields from `descriptor` to a TensorProto field, each field at most twice
    in a chain (the bound on the recursion: GraphProto -> NodeProto -> AttributeProto ->
    GraphProto... is followed twice round, so subgraphs of subgraphs and functions' subgraphs
    are in)."""
    reach = _reaching() if reach is None else reach
    out = []
    for f in descriptor.fields:
        if f.message_type not in reach or path.count(f) >= 2:
            continue
        here = path + (f,)
        if f.message_type is _TENSOR:
            out.append(here)
        out.extend(tensor_paths(f.message_type, here, reach))
    return out


def spell(path) -> str:
    """The path as the guard names it; a repeated field's tensor sits at index 1 (an honest
    element comes first: see plant)."""
    return ".".join(f"{f.name}[1]" if _repeated(f) else f.name for f in path)


def plant(path, tensor: onnx.TensorProto) -> bytes:
    """A ModelProto holding `tensor` at `path` and nothing else but empty messages on the way
    (the guard reads the model as protobuf, so it need not be a valid ONNX graph); every
    repeated field gets an empty element first, so the path's indices are not all zero."""
    model = onnx.ModelProto()
    msg = model
    for k, f in enumerate(path):
        last = k == len(path) - 1
        if _repeated(f):
            items = getattr(msg, f.name)
            items.add()
            msg = items.add()
        else:
            msg = getattr(msg, f.name)
            msg.SetInParent()
        if last:
            msg.CopyFrom(tensor)
    return model.SerializeToString()


PATHS = tensor_paths()


def test_the_descriptor_paths_include_the_places_known_so_far():
    """The enumeration is not vacuous: the places the old walk knew, and the one it missed."""
    spelled = {spell(p) for p in PATHS}
    for known in ["graph.initializer[1]", "graph.sparse_initializer[1].values",
                  "graph.node[1].attribute[1].t", "graph.node[1].attribute[1].tensors[1]",
                  "graph.node[1].attribute[1].g.initializer[1]",
                  "graph.node[1].attribute[1].graphs[1].node[1].attribute[1].sparse_tensor"
                  ".indices",
                  "training_info[1].algorithm.initializer[1]",
                  "functions[1].node[1].attribute[1].t",
                  "functions[1].attribute_proto[1].t"]:  # issue 52
        assert known in spelled, known
    assert len(PATHS) > 200, len(PATHS)  # 231 with onnx 1.23


def test_an_external_tensor_at_every_descriptor_path_is_refused_and_named():
    """Fails when a TensorProto path of the descriptors is not covered by the guard: every
    path, one model each, must be refused naming that path (and an honest tensor at the same
    path must pass, so the guard is not refusing the path itself)."""
    missed, wrong = [], []
    honest = onnx.helper.make_tensor("ok", onnx.TensorProto.FLOAT, [1], [1.0])
    for path in PATHS:
        where = spell(path)
        check_onnx_bytes(plant(path, honest), "honest.onnx")
        try:
            check_onnx_bytes(plant(path, external("w", ".ssh/id_rsa")), "m.onnx")
        except ProvmapError as e:
            if (f"m.onnx: refused: {where}: tensor 'w' refers to external data '.ssh/id_rsa'"
                    not in str(e)):
                wrong.append((where, str(e)))
        else:
            missed.append(where)
    assert not missed, f"{len(missed)} of {len(PATHS)} paths not refused: {missed[:10]}"
    assert not wrong, wrong[:5]


def test_external_data_named_by_an_entry_alone_is_refused():
    """An `external_data` entry without `data_location = EXTERNAL` counts too."""
    t = external("w", ".ssh/id_rsa")
    t.ClearField("data_location")
    path = next(p for p in PATHS if spell(p) == "functions[1].attribute_proto[1].t")
    with pytest.raises(ProvmapError, match=r"functions\[1\]\.attribute_proto\[1\]\.t: .*"
                                           r"'\.ssh/id_rsa'"):
        check_onnx_bytes(plant(path, t), "m.onnx")


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append(n & 0x7F | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field, encoded by hand (no descriptor declares it)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _unknown_function_field() -> bytes:
    """Field 99 of a FunctionProto holding an external TensorProto's bytes."""
    function = onnx.FunctionProto(name="f").SerializeToString()
    function += _field(99, external("w", ".ssh/id_rsa").SerializeToString())
    return _field(onnx.ModelProto.DESCRIPTOR.fields_by_name["functions"].number, function)


def _unknown_data_location() -> bytes:
    """An initializer whose `data_location` (an enum) is 2, a value onnx does not declare."""
    tensor = onnx.TensorProto(name="w").SerializeToString()
    tensor += _varint(onnx.TensorProto.DESCRIPTOR.fields_by_name["data_location"].number << 3)
    tensor += _varint(2)
    graph = _field(onnx.GraphProto.DESCRIPTOR.fields_by_name["initializer"].number, tensor)
    return _field(onnx.ModelProto.DESCRIPTOR.fields_by_name["graph"].number, graph)


@pytest.mark.parametrize("make,where,numbers", [
    (_unknown_function_field, r"functions\[0\]: FunctionProto", "99"),
    (_unknown_data_location, r"graph\.initializer\[0\]: TensorProto", "14"),
])
def test_a_field_or_value_this_onnx_does_not_declare_is_refused(make, where, numbers):
    """A newer ONNX's field, or enum value (protobuf keeps both as unknown fields), could hold
    or mean a tensor that another library reads as external data and the walk cannot see."""
    with pytest.raises(ProvmapError, match=rf"m\.onnx: refused: {where} field number\(s\) "
                                           rf"{numbers} hold what onnx .* does not declare"):
        check_onnx_bytes(make(), "m.onnx")


def test_the_function_default_model_really_reads_the_file_without_the_guard(tmp_path,
                                                                             monkeypatch):
    """The attack the CLI test refuses is real: ONNX Runtime given the model directly, its
    optimizer off, puts the file's first 16 bytes into the output."""
    import onnxruntime as ort

    secret = np.array([1.5, -2.0, 3.25, 4.0], np.float32)
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "id_rsa").write_bytes(secret.tobytes() + b"rest of the key")
    monkeypatch.chdir(tmp_path)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(stealing_model("function_default", ".ssh/id_rsa"), so,
                                providers=["CPUExecutionProvider"])
    (y,) = sess.run(None, {"x": np.zeros(4, np.float32)})
    np.testing.assert_array_equal(y, secret)
