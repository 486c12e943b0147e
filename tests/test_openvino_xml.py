"""An OpenVINO partition's `model.xml` is parsed before OpenVINO sees it (issue 52).

The check it replaced searched the bytes for `<!DOCTYPE`: the same document in UTF-16 passed
it, and `provmap run` handed OpenVINO a DTD declaring an external entity (exit 0).  Through the
real CLI: every such document is refused in one line naming the member, nothing is written, and
an honest IR still runs, in UTF-16 too (the check reads encodings, it does not refuse them)."""

from __future__ import annotations

import numpy as np
import pytest
from attack_kit import members, relu_model, repack
from cli_runner import provmap, refused

pytest.importorskip("openvino")

XML = "partitions/p0/model.xml"
_DTD = '<!DOCTYPE net [<!ENTITY e SYSTEM "secret.txt">]>\n'


@pytest.fixture(scope="module")
def ov_art(tmp_path_factory):
    """The Relu model compiled by the CLI under single:openvino."""
    import onnx

    d = tmp_path_factory.mktemp("ov_xml")
    onnx.save(relu_model(), d / "relu.onnx")
    r = provmap("compile", d / "relu.onnx", "-o", d / "ov.provmap", "--strategy",
                "single:openvino")
    assert r.returncode == 0, r.stderr
    return d / "ov.provmap"


def _with_xml(src, dst, make) -> object:
    """`src` with model.xml replaced by make(body), body: the IR after its XML declaration."""
    manifest, files = members(src)
    body = files[XML].decode().split("?>", 1)[1]
    files[XML] = make(body)
    return repack(dst, manifest, files)


def _run(art, tmp_path):
    np.savez(tmp_path / "x.npz", x=np.ones(4, np.float32))
    (tmp_path / "secret.txt").write_text("not for the artifact")
    return provmap("run", art, "--inputs", tmp_path / "x.npz", "-o", tmp_path / "out.npz",
                   cwd=tmp_path)


def _decl(enc):
    return f'<?xml version="1.0" encoding="{enc}"?>\n'


@pytest.mark.parametrize("make", [
    # Measured on the byte search: both ran, exit 0 (OpenVINO read the DTD).
    lambda b: (_decl("UTF-16") + _DTD + b).encode("utf-16-le"),
    lambda b: (_decl("UTF-16") + _DTD + b.replace("<layers>", "<layers>&e;", 1))
    .encode("utf-16-le"),
    # Refused before too; kept so a change of parser cannot let them through.
    lambda b: (_decl("UTF-16") + _DTD + b).encode("utf-16"),
    lambda b: (_decl("UTF-16BE") + _DTD + b).encode("utf-16-be"),
    lambda b: ('<?xml version="1.0"?>\n' + _DTD + b).encode(),
    # A code page expat would read through Python's codecs and pugixml would read as UTF-8.
    lambda b: (_decl("cp037") + b).encode(),
], ids=["utf16le-unused-entity", "utf16le-entity-in-content", "utf16-bom", "utf16be",
        "utf8", "declared-code-page"])
def test_a_dtd_or_foreign_encoding_is_refused_in_one_line(ov_art, tmp_path, make):
    bad = _with_xml(ov_art, tmp_path / "bad.provmap", make)
    refused(_run(bad, tmp_path), XML, "not an OpenVINO IR")
    assert not (tmp_path / "out.npz").exists()


@pytest.mark.parametrize("make", [
    lambda b: ('<?xml version="1.0"?>' + b).encode(),  # the IR as OpenVINO wrote it
    lambda b: (_decl("UTF-16") + b).encode("utf-16"),
], ids=["as-written", "utf16"])
def test_an_honest_ir_still_runs(ov_art, tmp_path, make):
    good = _with_xml(ov_art, tmp_path / "good.provmap", make)
    r = _run(good, tmp_path)
    assert r.returncode == 0, r.stderr
    with np.load(tmp_path / "out.npz") as z:
        assert np.array_equal(z["y"], np.ones(4, np.float32))
