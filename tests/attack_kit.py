"""What a hostile sender of artifacts does, for the attack corpus (test_attacks_*.py) and the
fuzz test (test_artifact_fuzz.py): take a real artifact apart, change it, and put it back
with every hash recomputed, so the file verifies and only the change is left to refuse."""

from __future__ import annotations

import copy
import hashlib
import json
import zipfile
from pathlib import Path

import onnx
from onnx import TensorProto, helper


def members(path) -> tuple[dict, dict]:
    """(manifest, {member: bytes}) of an artifact, read without provmap."""
    with zipfile.ZipFile(path) as z:
        out = {n: z.read(n) for n in z.namelist()}
    return json.loads(out.pop("manifest.json")), out


def repack(dst, manifest, files: dict, *, raw_manifest: bytes | None = None,
           compression=zipfile.ZIP_STORED, rehash_partitions: bool = True) -> Path:
    """Write an artifact with the manifest's member hashes (and each partition's `files`
    hashes) recomputed, as whoever edits an artifact would."""
    m = copy.deepcopy(manifest)
    if isinstance(m, dict):
        m["members"] = {n: hashlib.sha256(d).hexdigest() for n, d in sorted(files.items())}
        parts = m.get("partitions")
        if rehash_partitions and isinstance(parts, list):
            for p in parts:
                if isinstance(p, dict) and isinstance(p.get("files"), dict):
                    p["files"] = {n: m["members"].get(n, h) for n, h in p["files"].items()}
    with zipfile.ZipFile(dst, "w", compression=compression) as z:
        z.writestr("manifest.json", raw_manifest if raw_manifest is not None
                   else json.dumps(m).encode())
        for n, d in sorted(files.items()):
            z.writestr(n, d)
    return Path(dst)


def edited(src, dst, fn, *, member: str | None = None) -> Path:
    """`src` repacked at `dst` with `fn` applied to its manifest (in place), or, given `member`,
    with that member's bytes replaced by `fn(its bytes)`."""
    manifest, files = members(src)
    if member is None:
        fn(manifest)
    else:
        files[member] = fn(files[member])
    return repack(dst, manifest, files)


def relu_model() -> onnx.ModelProto:
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def relu_artifact(directory) -> Path:
    """The Relu model compiled by the CLI under single:onnxruntime: the honest artifact the
    fuzzers and the malformed-input tests start from (no native code, so no trust needed)."""
    from provmap.cli.main import main

    d = Path(directory)
    onnx.save(relu_model(), d / "relu.onnx")
    assert main(["compile", str(d / "relu.onnx"), "-o", str(d / "relu.provmap"), "--strategy",
                 "single:onnxruntime"]) == 0
    return d / "relu.provmap"


def external(name: str, location: str, length: int = 16) -> TensorProto:
    """A float tensor of `length` bytes whose data lives in the file `location`."""
    t = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=[length // 4])
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", "0"), ("length", str(length))):
        e = t.external_data.add()
        e.key, e.value = k, v
    return t


def stealing_model(where: str = "initializer", location: str = "secret.bin") -> bytes:
    """x[4] + w -> y, where w's 16 bytes are read from `location` by whoever loads the model;
    `where` puts w in an initializer, a Constant's attribute, a sparse initializer, an If's
    branch, a model-local function's Constant, or ("function_default") the default of a
    model-local function's attribute, which the function's Constant takes by `ref_attr_name`
    (issue 52: ONNX Runtime reads it, and the guard's old list of places missed it)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])
    w = external("w", location)
    inits, nodes, funcs, sparse = [], [], [], []
    if where == "initializer":
        inits.append(w)
        nodes.append(helper.make_node("Add", ["x", "w"], ["y"], name="add"))
    elif where == "constant":
        nodes += [helper.make_node("Constant", [], ["w"], name="c", value=w),
                  helper.make_node("Add", ["x", "w"], ["y"], name="add")]
    elif where == "sparse":
        idx = helper.make_tensor("w_idx", TensorProto.INT64, [4], [0, 1, 2, 3])
        sparse.append(helper.make_sparse_tensor(w, idx, [4]))
        nodes.append(helper.make_node("Add", ["x", "w"], ["y"], name="add"))
    elif where == "subgraph":
        branch = helper.make_graph([helper.make_node("Add", ["x", "w"], ["z"], name="inner")],
                                   "b", [], [helper.make_tensor_value_info("z", TensorProto.FLOAT,
                                                                           [4])], [w])
        cond = helper.make_tensor("cond", TensorProto.BOOL, [], [True])
        inits.append(cond)
        nodes.append(helper.make_node("If", ["cond"], ["y"], name="if", then_branch=branch,
                                      else_branch=branch))
    elif where == "function":
        body = [helper.make_node("Constant", [], ["w"], value=w),
                helper.make_node("Add", ["a", "w"], ["b"])]
        funcs.append(helper.make_function("evil", "Steal", ["a"], ["b"], body,
                                          [helper.make_opsetid("", 17)]))
        nodes.append(helper.make_node("Steal", ["x"], ["y"], name="steal", domain="evil"))
    elif where == "function_default":
        const = helper.make_node("Constant", [], ["w"])
        ref = const.attribute.add()
        ref.name, ref.type, ref.ref_attr_name = "value", onnx.AttributeProto.TENSOR, "wdef"
        f = helper.make_function("evil", "Steal", ["a"], ["b"],
                                 [const, helper.make_node("Add", ["a", "w"], ["b"])],
                                 [helper.make_opsetid("", 17)])
        default = f.attribute_proto.add()
        default.name, default.type = "wdef", onnx.AttributeProto.TENSOR
        default.t.CopyFrom(w)
        funcs.append(f)
        nodes.append(helper.make_node("Steal", ["x"], ["y"], name="steal", domain="evil"))
    g = helper.make_graph(nodes, "g", [x], [y], inits, sparse_initializer=sparse)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid("evil", 1)],
                          ir_version=8, functions=funcs)
    return m.SerializeToString()
