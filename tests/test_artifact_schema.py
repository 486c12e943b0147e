"""The artifact's declared schema (issue 53): the JSON Schema published for other tools is the
one provmap checks with, the element types it allows are ONNX's, and a refusal names the
member and the field, down to the key of a dict entry (msgspec itself says `[...]`)."""

from __future__ import annotations

import copy
import json
import typing
from pathlib import Path

import pytest
from attack_kit import members

from provmap.runtime_module.artifact_schema import SchemaError, check_manifest, check_map

ROOT = Path(__file__).resolve().parents[1]
FORMATS = ("provmap-artifact", (1, 2))


def test_the_published_schema_is_the_declared_one():
    from provmap.runtime_module.schema_publish import text

    assert (ROOT / "docs" / "artifact.schema.json").read_text() == text(), (
        "regenerate: python -m provmap.runtime_module.schema_publish > docs/artifact.schema.json")


def test_the_element_types_are_the_ones_onnx_dtype_names():
    """A dtype the declaration lacks would refuse an honest artifact of that type."""
    import onnx

    from provmap.provenance.util.dtypes import onnx_dtype
    from provmap.runtime_module.schema_types import DType

    names = set()
    for elem in onnx.TensorProto.DataType.values():
        try:
            names.add(onnx_dtype(elem))
        except Exception:  # UNDEFINED
            pass
    assert set(typing.get_args(DType)) == names


def _refusal(doc, check):
    with pytest.raises(SchemaError) as e:
        check(doc)
    line = str(e.value)
    assert "\n" not in line
    return line


@pytest.mark.parametrize("edit, words", [
    (lambda m: m["members"].update({"../x": "0" * 64}), "manifest.json: members['../x']: "),
    (lambda m: m["members"].update({"x": "zz"}),
     "manifest.json: members.x: 'zz' is not a SHA-256 (64 lowercase hex digits)"),
    (lambda m: m["backends"]["onnxruntime"]["options"].update(x=float("nan")),
     "manifest.json: backends.onnxruntime.options.x: nan is not a finite number"),
    (lambda m: m.update(schedule={"stages": [["p0"]], "threads": {"p0": 1, "p 1": True}}),
     "manifest.json: schedule.threads['p 1']: expected int, got bool"),
    (lambda m: m["partitions"][0].update(backend=7),
     "manifest.json: partitions[0].backend: expected str, got int"),
    (lambda m: m["model"]["inputs"][0].pop("bytes"),
     "manifest.json: model.inputs[0].bytes: missing"),
    (lambda m: m["model"].update(index_inputs={"x": {"node": "n", "op": "Add", "size": 3}}),
     "manifest.json: model.index_inputs.x.op: 'Add' is not one of 'Gather', "),
])
def test_a_manifest_refusal_names_member_field_and_value(relu_art, edit, words):
    manifest, _ = members(relu_art)
    edit(manifest)
    line = _refusal(manifest, lambda d: check_manifest(d, "a.provmap", FORMATS))
    assert line.startswith("a.provmap: ") and words in line, line


@pytest.mark.parametrize("edit, words", [
    (lambda d: d["onnx_nodes"][0].update(extra=1),
     "map.json: onnx_nodes[0]: object contains unknown field extra"),
    (lambda d: d["site_exprs"][0].__setitem__(2, "x"),
     "map.json: site_exprs[0][2]: 'x' is not one of 'compute', 'constant'"),
    (lambda d: d["kernels"][0].update(name=None),
     "map.json: kernels[0].name: expected str, got null"),
])
def test_a_map_refusal_names_member_and_field(relu_art, edit, words):
    manifest, files = members(relu_art)
    d = json.loads(files["map.json"])
    edit(d)
    line = _refusal(d, lambda x: check_map(x, "a.provmap", copy.deepcopy(manifest)))
    assert words in line, line
