"""An output never replaces what the command reads or what provmap itself keeps (issue 36):
the command's own artifact, model (through a link, or under a directory output's file names)
and that model's external data, an --inputs file, a bisect reproducer; the model an artifact
was compiled from (with its weights beside it); an ONNX model, by an output of another kind;
the trust list (and its journal) and the cost cache.  Each is refused before any work, naming
the option and the file as given; the atomic write itself is the last check."""

from __future__ import annotations

import os

import onnx
import pytest
from cli_models import external_data_model, relu_add_model
from cli_runner import digest, one_error, provmap, refused
from small_models import conv_relu

pytestmark = pytest.mark.usefixtures("own_config")


@pytest.fixture(scope="module")
def artifact(squeezenet_cli_artifact):
    return squeezenet_cli_artifact


@pytest.fixture
def embedded(tmp_path):
    """cli_models.external_data_model compiled with --embed-model: (the model, its artifact)."""
    proj = tmp_path / "proj"
    proj.mkdir()
    model = external_data_model(proj / "model.onnx")
    art = tmp_path / "a.provmap"
    r = provmap("compile", model, "-o", art, "--strategy", "single:onnxruntime",
                "--embed-model")
    assert r.returncode == 0, r.stderr
    return model, art


def _compile(out, *extra):
    return provmap("compile", "bundled:squeezenet", "-o", out, "--strategy", "single:onnxruntime",
                   *extra)


# -- the files the command reads ----------------------------------------------------------------

def test_an_output_that_is_the_commands_own_input_is_refused_before_any_work(tmp_path):
    """A new user's `run A -o A` turned the artifact into an .npz, exit 0; `compile m.onnx -o
    m.onnx` replaced the model with the artifact.  Now refused, naming the option, and the
    input is left as it was; two outputs of one command on one path likewise."""
    import onnx

    from provmap.provenance.bundled import zoo

    art = tmp_path / "sq.provmap"
    assert _compile(art).returncode == 0
    before = art.read_bytes()
    one_error(provmap("run", art, "-o", art), "-o/--output", "this command's artifact")
    one_error(provmap("run", art, "--random", "--save-inputs", art), "--save-inputs",
              "this command's artifact")
    one_error(provmap("inspect", art, "--sqlite", art), "--sqlite", "this command's artifact")
    assert art.read_bytes() == before
    model = tmp_path / "m.onnx"
    onnx.save(zoo.resolve("bundled:squeezenet")[0], model)
    m_before = model.read_bytes()
    one_error(provmap("compile", model, "-o", model, "--strategy", "single:onnxruntime"),
              "-o/--output", "this command's model")
    assert model.read_bytes() == m_before
    out = tmp_path / "out.npz"
    one_error(provmap("run", art, "--random", "-o", out, "--save-inputs", out),
              "--save-inputs", "-o/--output", "name the same file")
    assert not out.exists()


def test_an_input_that_is_also_an_output_is_named_as_given(tmp_path, artifact):
    """`run A --inputs in.npz --save-inputs in.npz` said "--save-inputs None (it writes ...)"."""
    feeds = tmp_path / "in.npz"
    assert provmap("run", artifact, "--random", "--save-inputs", feeds).returncode == 0
    r = provmap("run", artifact, "--inputs", feeds, "--save-inputs", feeds)
    refused(r, f"--save-inputs {feeds} is this command's --inputs file")


def test_map_never_writes_through_a_link_onto_its_model(tmp_path):
    m = tmp_path / "victim.onnx"
    onnx.save(conv_relu(), m)
    before = digest(m)
    os.symlink("victim.onnx", tmp_path / "evil.json")
    r = provmap("map", m, "-o", tmp_path / "evil")
    refused(r, "evil.json", "this command's model")
    assert digest(m) == before and not (tmp_path / "evil.sqlite").exists()
    # a prefix named like the model writes m.onnx.json and m.onnx.sqlite: not the model
    r = provmap("map", m, "-o", m)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "victim.onnx.json").is_file() and digest(m) == before
    r = provmap("map", m, "-o", m)             # again: both files are named as replaced
    assert r.returncode == 0, r.stderr
    for f in ("victim.onnx.json", "victim.onnx.sqlite"):
        assert f"provmap: {tmp_path / f} existed: replaced" in r.stderr, r.stderr


def test_bisect_never_replaces_its_own_reproducer_input(tmp_path):
    d = tmp_path / "bis"
    d.mkdir()
    onnx.save(conv_relu(), d / "reproducer.onnx")
    before = digest(d / "reproducer.onnx")
    r = provmap("bisect", d / "reproducer.onnx", "--backend", "tvm", "-o", d)
    refused(r, f"{d} (it writes {d / 'reproducer.onnx'})", "this command's model")
    assert digest(d / "reproducer.onnx") == before
    link = tmp_path / "out"
    link.mkdir()
    os.symlink(d / "reproducer.onnx", link / "reproducer.onnx")
    r = provmap("bisect", d / "reproducer.onnx", "--backend", "tvm", "-o", link)
    refused(r, "this command's model")
    assert digest(d / "reproducer.onnx") == before


def test_a_models_external_data_is_an_input_too(tmp_path):
    """`compile m/ext.onnx -o m/ext.bin`, ext.bin being the model's weights, lost the model."""
    from onnx.external_data_helper import convert_model_to_external_data

    m = conv_relu()
    convert_model_to_external_data(m, all_tensors_to_one_file=True, location="ext.bin",
                                   size_threshold=0)
    onnx.save(m, tmp_path / "ext.onnx")
    before = digest(tmp_path / "ext.bin")
    r = provmap("compile", tmp_path / "ext.onnx", "-o", tmp_path / "ext.bin", "--strategy",
                "single:onnxruntime")
    refused(r, "ext.bin is this command's model's external data")
    assert digest(tmp_path / "ext.bin") == before


def test_the_write_itself_refuses_a_file_the_command_reads(tmp_path):
    """The last line of defence (provenance/util/atomic.protect_inputs): whatever path leads to
    an input, an atomic write onto it is refused, and nothing else is touched."""
    from provmap.provenance.util.atomic import protect_inputs, write_bytes_atomic
    from provmap.provenance.util.errors import ProvmapError

    src = tmp_path / "in.onnx"
    src.write_bytes(b"model")
    os.link(src, tmp_path / "hard.onnx")
    protect_inputs([src])
    try:
        with pytest.raises(ProvmapError, match="this command's input"):
            write_bytes_atomic(tmp_path / "hard.onnx", b"x")
        write_bytes_atomic(tmp_path / "other.onnx", b"x")
    finally:
        protect_inputs([])
    assert src.read_bytes() == b"model" and (tmp_path / "other.onnx").read_bytes() == b"x"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


# -- the model an artifact was compiled from, kept beside its external data ---------------------

def test_annotate_never_replaces_a_source_model_with_external_data(embedded):
    model, art = embedded
    before = digest(model)
    refused(provmap("annotate", art, "-o", model), f"-o/--output {model} is the model this "
             "artifact was compiled from")
    assert digest(model) == before


def test_annotate_never_writes_over_the_model_the_artifact_came_from(tmp_path):
    """`annotate ART -o <the user's model>` replaced the model the manifest records."""
    model, art = relu_add_model(tmp_path / "m.onnx"), tmp_path / "emb.provmap"
    r = provmap("compile", model, "-o", art, "--strategy", "single:onnxruntime", "--embed-model")
    assert r.returncode == 0, r.stderr
    before = model.read_bytes()
    one_error(provmap("annotate", art, "-o", model), f"-o/--output {model} is the model this "
              "artifact was compiled from")
    assert model.read_bytes() == before
    r = provmap("annotate", art, "-o", tmp_path / "annotated.onnx")
    assert r.returncode == 0, r.stderr


def test_annotate_never_replaces_a_file_that_is_not_an_onnx_model(embedded):
    """`annotate -o weights.bin` replaced the embedded model's own external weights."""
    model, art = embedded
    weights = model.parent / "model.onnx.data"
    before = digest(weights)
    refused(provmap("annotate", art, "-o", weights), "exists and is not an ONNX model")
    assert digest(weights) == before


def test_overlays_never_replaces_the_model_it_annotates(tmp_path, artifact):
    proj = tmp_path / "proj"
    proj.mkdir()
    model = proj / "model.onnx"
    onnx.save(conv_relu(), model)                   # refused before the model is read
    before = digest(model)
    r = provmap("overlays", artifact, "-o", proj, "--model", model)
    refused(r, f"{proj} (it writes {model})", "this command's model")
    assert digest(model) == before and sorted(os.listdir(proj)) == ["model.onnx"]


def test_overlays_never_replaces_the_source_model_in_its_directory(embedded, tmp_path):
    model, art = embedded
    before = digest(model)
    refused(provmap("overlays", art, "-o", model.parent), f"{model} is the model this "
             "artifact was compiled from")
    assert digest(model) == before
    r = provmap("overlays", art, "-o", tmp_path / "ov")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "ov" / "model.onnx").is_file()


# -- provmap's own files, and an ONNX model by an output of another kind ------------------------

def test_provmaps_own_trust_list_and_cost_cache_are_never_outputs(tmp_path, artifact):
    """`inspect A --sqlite $PROVMAP_TRUST` replaced the trust list with a map: every locally
    built TVM artifact then refused to run.  The cost cache likewise."""
    import os

    trust = tmp_path / "trusted"
    model = external_data_model(tmp_path / "m.onnx")
    r = provmap("compile", model, "-o", tmp_path / "t.provmap", "--strategy", "single:tvm")
    assert r.returncode == 0 and trust.is_file(), r.stderr
    before = digest(trust)
    refused(provmap("inspect", artifact, "--sqlite", trust), "trust list (provmap's own")
    refused(provmap("run", artifact, "--random", "-o", trust), "trust list (provmap's own")
    assert digest(trust) == before
    cache = tmp_path / "cost.sqlite"
    cache.write_bytes(b"")  # exists: a command would replace it
    refused(provmap("report", artifact, "-o", cache), "cost cache (provmap's own")
    assert os.path.getsize(cache) == 0


def test_the_cost_cache_as_the_output_is_refused_by_any_name(tmp_path):
    """`compile m.onnx -o col.provmap --cache col.provmap`: the artifact replaced the cache and
    left its -wal/-shm files beside it."""
    model = relu_add_model(tmp_path / "m.onnx")
    cache = tmp_path / "col.sqlite"
    for out, given in ((tmp_path / "col.provmap", tmp_path / "col.provmap"),  # a new path
                       (tmp_path / "hard.provmap", cache), (tmp_path / "soft.provmap", cache)):
        if given == cache:
            cache.touch()
            (os.link if out.name == "hard.provmap" else os.symlink)(cache, out)
        r = provmap("compile", model, "-o", out, "--cache", given, timeout=60)
        one_error(r, f"-o/--output {out} is this command's --cache file")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["col.sqlite", "hard.provmap", "m.onnx",
                                                          "soft.provmap"]
    assert cache.read_bytes() == b""


def test_the_trust_lists_journal_is_never_an_output(relu_art, tmp_path):
    """`-o LIST-journal` wrote a file SQLite takes for a hot journal of the list, which then
    read as damaged; the journal is provmap's own file whether it exists or not."""
    lst = tmp_path / "list"
    env = dict(os.environ, PROVMAP_TRUST=str(lst))
    assert provmap("trust", "--list", env=env).returncode == 0
    for suffix in ("-journal", "-wal"):
        r = provmap("run", relu_art, "--random", "-o", f"{lst}{suffix}", env=env)
        one_error(r, f"list{suffix}", "trust list")
        assert not os.path.exists(f"{lst}{suffix}")


@pytest.mark.parametrize("argv", [
    ["run", "{a}", "--random", "-o", "{m}"],
    ["inspect", "{a}", "--sqlite", "{m}"],
    ["report", "{a}", "-o", "{m}"],
    ["compile", "bundled:squeezenet", "--strategy", "single:onnxruntime", "-o", "{m}"],
])
@pytest.mark.parametrize("name", ["model.onnx", "model-without-suffix"])
def test_no_output_of_another_kind_replaces_an_onnx_model(tmp_path, artifact, argv, name):
    """`run A -o model.onnx` (a typo for .npz) turned the user's model into an .npz, `inspect
    --sqlite` into a database, `report -o` into a page, "existed: replaced" said afterwards;
    annotate refused the same file."""
    import onnx
    import small_models

    model = tmp_path / name
    onnx.save(small_models.conv_relu(), model)
    before = digest(model)
    r = provmap(*[str(artifact) if x == "{a}" else str(model) if x == "{m}" else x
                  for x in argv])
    refused(r, f"{model} exists and is an ONNX model", f"`provmap {argv[0]}` would replace it")
    assert digest(model) == before
