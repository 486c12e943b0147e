"""A stranger's manifest (issue 33; hashes recomputed, so only the edit is left to refuse):
fields of the wrong type, size or place, JSON nested past any reader, versions that are not
integers or that promise what is missing, a manifest that disagrees with itself or with its
map, backend options outside the declared set or refused by the backend, a constant that is a
pickled object, and free-form fields (plan_info, host) that are a record, never configuration:
each is one `provmap: error:` line naming the field, or is printed as strict JSON and builds
nothing.  What each partition entry may say is in test_attacks_partitions.py."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from attack_kit import edited, members, relu_artifact, relu_model, repack
from cli_runner import one_error, provmap, refused, refused_in_process

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _set(path, value):
    def fn(m):
        *head, last = path
        for k in head:
            m = m[k]
        m[last] = value
    return fn


_MANIFEST_EDITS = {
    "partitions-str": (_set(["partitions"], "x"), "partitions"),
    "model-list": (_set(["model"], []), "model"),
    "ops-int": (_set(["partitions", 0, "ops"], 12345), "partitions[0].ops"),
    "id-null": (_set(["partitions", 0, "id"], None), "partitions[0].id"),
    "kernels-int": (_set(["partitions", 0, "kernels"], [1]), "partitions[0].kernels[0]"),
    "files-escape": (_set(["partitions", 0, "files"], {"../../etc/passwd": "0" * 64}),
                     "partitions[0].files"),
    "onnx-nodes-unknown": (_set(["partitions", 0, "onnx_nodes"], ["n000000000000"]),
                           "partitions[0].onnx_nodes"),
    "shape-negative": (_set(["model", "inputs", 0, "shape"], [-5, 3]), "model.inputs[0].shape[0]"),
    "shape-huge": (_set(["model", "inputs", 0, "shape"], [10**12, 10**12]),
                   "model.inputs[0].shape"),
    "shape-float": (_set(["model", "inputs", 0, "shape"], [1.5, "x"]), "model.inputs[0].shape[0]"),
    "dtype-bad": (_set(["model", "inputs", 0, "dtype"], "rubbish"), "model.inputs[0].dtype"),
    "schedule-threads": (_set(["schedule"], {"stages": [["p0"]], "threads": {"p0": 10**12}}),
                         "schedule.threads.p0"),
    "schedule-stages": (_set(["schedule"], {"stages": "p0"}), "schedule.stages"),
    "version-bool": (_set(["format_version"], True), "format version"),
    "deep-plan-info": (_set(["plan_info"], json.loads("[" * 200 + "]" * 200)), "plan_info"),
    # a name nothing makes, in the manifest's inputs only (blob_meta still names the real one):
    # inspect called it a graph input and only `run` refused it (the fourteenth afternoon)
    "input-name-forged": (lambda m: (_set(["partitions", 0, "inputs", 0, "name"], "nope")(m),
                                     _set(["partitions", 0, "runner_inputs"], ["nope"])(m)),
                          "partitions[0].inputs"),
}


@pytest.mark.parametrize("edit", sorted(_MANIFEST_EDITS))
def test_edited_manifest_fields_are_one_line_naming_the_field(capsys, relu_art, tmp_path, edit):
    fn, field = _MANIFEST_EDITS[edit]
    bad = edited(relu_art, tmp_path / "bad.provmap", fn)
    for argv in (["inspect", bad], ["lookup", bad, "--onnx-node", "relu"], ["explain", bad],
                 ["run", bad, "--random"]):
        refused_in_process(capsys, argv, "bad.provmap", field)


def test_deep_json_in_manifest_map_and_profile_is_one_line(capsys, relu_art, tmp_path):
    manifest, files = members(relu_art)
    deep = b"[" * 1_000_000
    bad = repack(tmp_path / "m.provmap", manifest, files, raw_manifest=deep)
    refused_in_process(capsys, ["inspect", bad], "m.provmap", "manifest.json",
                       "nested too deeply")
    bad = edited(relu_art, tmp_path / "map.provmap", lambda b: deep, member="map.json")
    refused_in_process(capsys, ["lookup", bad, "--kernel", "k"], "map.provmap", "map.json",
                       "nested too deeply")
    prof = tmp_path / "p.json"
    prof.write_bytes(deep)
    refused_in_process(capsys, ["report", relu_art, "-o", tmp_path / "r.html", "--profile", prof],
                       "p.json", "nested too deeply")


# -- versions -----------------------------------------------------------------------------------

@pytest.mark.parametrize("member, key", [("manifest.json", "format_version"),
                                         ("map.json", "schema_version")])
def test_a_version_that_is_not_an_integer_is_refused(capsys, relu_art, tmp_path, member, key):
    """schema_version 1.0 read as 1 (twelfth afternoon): a version is an integer."""
    manifest, files = members(relu_art)
    if member == "manifest.json":
        manifest[key] = 1.0
    else:
        d = json.loads(files[member])
        d[key] = 1.0
        files[member] = json.dumps(d).encode()
    bad = repack(tmp_path / "bad.provmap", manifest, files)
    refused_in_process(capsys, ["inspect", bad], "1.0", "is not supported")


def test_format_version_2_without_a_schedule_is_refused(tmp_path):
    """L3: docs/artifact.md: version 2 goes with a schedule; one without was accepted."""
    manifest, files = members(relu_artifact(tmp_path))
    manifest["format_version"] = 2
    art = repack(tmp_path / "v2.provmap", manifest, files)
    for cmd in (("inspect", art), ("run", art, "--random")):
        r = provmap(*cmd)
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        assert "format_version: 2 goes with a schedule, and there is none" in r.stderr


# -- a manifest that disagrees with itself or its map ------------------------------------------

@pytest.mark.parametrize("edit, words", [
    (lambda m: m.update(strategy="single:openvino"),
     ("partitions[0].backend", "is not a backend of strategy 'single:openvino'")),
    (lambda m: m["coverage"].update(onnx_nodes_mapped=999),
     ("coverage.onnx_nodes_mapped: 999 is not a count",)),
    (lambda m: m["model"]["inputs"][0].update(shape=[8], bytes=32),
     ("partitions[0].inputs[0]", "float32[4] here but float32[8] where it is made")),
    (lambda m: m["partitions"][0]["inputs"][0].update(dtype="float64", bytes=32),
     ("partitions[0].inputs[0]", "float64[4] here")),
    (lambda m: m["partitions"][0].update(onnx_nodes=[]),
     ("map.json: onnx_nodes[0]", "runs in no partition of manifest.json")),
    (lambda m: m.update(partitions=[]),  # the outputs, then the map's kernels, have no maker
     ("model.outputs[0]", "is made by no partition")),
    # model.outputs as their makers say (tenth afternoon: inspect showed a float64 output of a
    # float32 partition, and an output nothing makes was refused only by `run`)
    (lambda m: m["model"]["outputs"][0].update(dtype="float64", bytes=32),
     ("model.outputs[0]", "float64[4] here but float32[4] where it is made")),
    (lambda m: m["model"]["outputs"][0].update(name="ghost"),
     ("model.outputs[0]", "'ghost' is made by no partition, is no graph input")),
    (lambda m: m["model"]["outputs"].append(dict(m["model"]["outputs"][0])),
     ("model.outputs[1]", "is listed twice")),
])
def test_a_manifest_that_disagrees_with_itself_or_its_map_is_refused(capsys, relu_art, tmp_path,
                                                                       edit, words):
    """Each was printed by inspect as given, exit 0 (0 partitions beside "1 ran on a
    backend", coverage 999 of 8, a strategy naming a library no partition uses)."""
    bad = edited(relu_art, tmp_path / "bad.provmap", edit)
    refused_in_process(capsys, ["inspect", bad], *words)


def test_an_artifact_without_outputs_is_refused(int64_artifact, tmp_path):
    """`run` wrote an empty .npz, exit 0."""
    _d, art, _ = int64_artifact
    manifest, files = members(art)
    manifest["model"]["outputs"] = []
    bad = repack(tmp_path / "bad.provmap", manifest, files)
    refused(provmap("run", bad, "--random", "-o", tmp_path / "o.npz"),
            "model.outputs: expected array of length >= 1, got []")
    assert not (tmp_path / "o.npz").exists()


def test_manifest_fields_no_command_shows_are_still_checked(tmp_path):
    """L4: a backend entry named as another library, a runner output listed twice and an
    OpenVINO partition recorded for a GPU were accepted and shown nowhere."""
    import copy

    manifest, files = members(relu_artifact(tmp_path))
    edits = {
        "name": (lambda m: m["backends"]["onnxruntime"].__setitem__("name", "tensorrt"),
                 "backends.onnxruntime.name: 'tensorrt', but the entry is 'onnxruntime'"),
        "twice": (lambda m: m["partitions"][0].__setitem__(
            "runner_outputs", m["partitions"][0]["runner_outputs"] * 2),
            "partitions[0].runner_outputs: 'y' is listed twice"),
        "gpu": (lambda m: m["partitions"][0].setdefault("blob_meta", {}).__setitem__(
            "device", "GPU"), "partitions[0].blob_meta.device: 'GPU' is not one of 'CPU'"),
    }
    for key, (edit, words) in edits.items():
        m = copy.deepcopy(manifest)
        edit(m)
        art = repack(tmp_path / f"{key}.provmap", m, files)
        r = provmap("inspect", art)
        assert r.returncode == 2 and "Traceback" not in r.stderr, (key, r.stderr)
        assert words in r.stderr, (key, r.stderr)


# -- backends and constants ------------------------------------------------------------------

@pytest.mark.parametrize("options,field", [({"session_config": "x"}, "session_config"),
                                           ({"threads": "abc"}, "threads"),
                                           ({"threads": 10**12}, "threads")])
def test_backend_options_outside_the_declared_set_are_refused(relu_art, tmp_path, options,
                                                               field):
    manifest, files = members(relu_art)
    manifest["backends"]["onnxruntime"]["options"] = options
    art = repack(tmp_path / "opt.provmap", manifest, files)
    one_error(provmap("run", art, "--random"), "backends.onnxruntime.options", field)


def test_an_option_value_the_backend_refuses_is_refused_before_running(capsys, relu_art, tmp_path):
    bad = edited(relu_art, tmp_path / "bad.provmap",
                 lambda m: m["backends"]["onnxruntime"]["options"].update(threads="٣"))
    refused_in_process(capsys, ["run", bad, "--random"], "backends.onnxruntime.options.threads",
                       "is refused")


def test_object_array_constant_is_refused(capsys, relu_art, tmp_path):
    import io

    manifest, files = members(relu_art)
    buf = io.BytesIO()
    np.save(buf, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    files["constants/0.npy"] = buf.getvalue()
    manifest["constant_outputs"] = {"y": "constants/0.npy"}
    bad = repack(tmp_path / "obj.provmap", manifest, files)
    refused_in_process(capsys, ["run", bad, "--random"], "constants/0.npy", "object")


# -- free-form manifest fields are a record, never configuration -------------------------------

def test_explain_headroom_builds_no_backend_the_manifest_names(relu_art, tmp_path):
    """Issue 52: `explain --headroom` built its backends from `plan_info.collage.backends`,
    options and all: an ONNX Runtime artifact listing a tuned TVM with `tuning_db=/any/path`
    made provmap write a tuning database there.  The backends are the user's (`--backends`,
    default compile's search backends and their threads=1 variants)."""
    evil = tmp_path / "evil_db"
    manifest, files = members(relu_art)
    manifest["plan_info"] = {"collage": {
        "backends": [f"tvm[tune=metaschedule;trials=1;tune_budget=1;tuning_db={evil}]"],
        "e2e_variants": ["onnxruntime[threads=3]"]}}
    art = repack(tmp_path / "plan.provmap", manifest, files)
    onnx.save(relu_model(), tmp_path / "relu.onnx")
    r = provmap("explain", art, "--headroom", "--repeats", "1", "--model",
                tmp_path / "relu.onnx", "--json")
    assert r.returncode == 0, r.stderr
    assert not evil.exists()
    per = json.loads(r.stdout)["headroom"]["per_backend"]
    assert set(per) == {"onnxruntime", "onnxruntime[threads=1]", "openvino",
                        "openvino[threads=1]"}, per
    r = provmap("explain", art, "--headroom", "--repeats", "1", "--model",
                tmp_path / "relu.onnx", "--json", "--backends", "onnxruntime[threads=2]")
    assert r.returncode == 0, r.stderr
    assert set(json.loads(r.stdout)["headroom"]["per_backend"]) == {"onnxruntime[threads=2]"}
    one_error(provmap("explain", art, "--headroom", "--model", tmp_path / "relu.onnx",
                      "--backends", "onnxruntime[bogus=1]"), "--backends", "bogus")
    one_error(provmap("explain", art, "--backends", "onnxruntime"), "--backends", "--headroom")
    assert not evil.exists()


def test_explain_on_a_plan_info_of_the_wrong_shape_is_one_line(capsys, relu_art, tmp_path):
    """plan_info is the search's free-form record: an edited one gave an internal TypeError."""
    bad = edited(relu_art, tmp_path / "bad.provmap", _set(["plan_info"], {"decisions": "x",
                                                                       "fallbacks": 5}))
    refused_in_process(capsys, ["explain", bad], "bad.provmap",
                       "plan_info is not what provmap writes")


def test_json_output_is_strict_whatever_the_manifest_holds(relu_art, tmp_path):
    """`inspect --json` printed NaN/-Infinity from free-form manifest fields (`host`), which
    strict parsers (jq, JSON.parse) refuse (issue 52): they come out null."""
    from attack_kit import members, repack
    from cli_runner import provmap

    manifest, files = members(relu_art)
    manifest["host"] = {**manifest.get("host", {}), "nan": float("nan"),
                        "inf": [float("-inf"), 1.5]}
    bad = repack(tmp_path / "nan.provmap", manifest, files)

    def no_constants(c):
        raise AssertionError(f"{c} is not JSON")

    for args in (("inspect", bad, "--json"), ("explain", bad, "--json"),
                 ("lookup", bad, "--onnx-node", "relu", "--json")):
        r = provmap(*args)
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout, parse_constant=no_constants)
        if args[0] == "inspect":
            assert out["host"]["nan"] is None and out["host"]["inf"] == [None, 1.5], out["host"]
