"""The HTML report of a stranger's artifact (issue 33): node ids and names from map.json reach the
page only as text (no element made from an id, no markup from a name ends the page's own data),
and a profile's numbers must be finite, or the page's JSON.parse would leave it blank."""

from __future__ import annotations

import json
import re
import subprocess
import urllib.parse
import zipfile

import pytest
from attack_kit import members, repack
from cli_runner import refused_in_process

from provmap.cli.main import main

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _renamed(src, dst, node_id=None, name=None):
    """The artifact with its one ONNX node's id (everywhere it is named) or name replaced."""
    manifest, files = members(src)
    mp = json.loads(files["map.json"])
    node = mp["onnx_nodes"][0]
    old = node["id"]
    if name is not None:
        node["name"] = name
    if node_id is not None:
        node["id"] = node_id
        mp["node_exprs"] = [[node_id if x == old else x for x in t] for t in mp["node_exprs"]]
        for p in manifest["partitions"]:
            for k in ("onnx_nodes", "ops"):
                p[k] = [node_id if x == old else x for x in p[k]]
    files["map.json"] = json.dumps(mp).encode()
    return repack(dst, manifest, files)


_INJECT = '"><b id="pwnd">x</b><i a="'


def test_report_escapes_node_ids_in_the_graph_and_the_detail_panel(relu_art, tmp_path):
    """A node id was concatenated into innerHTML unescaped (data-id="..." and the detail
    panel's ID row): an id closing the attribute added elements, script included."""
    from browser import chromium

    bad = _renamed(relu_art, tmp_path / "xss.provmap", node_id=_INJECT)
    assert main(["report", str(bad), "-o", str(tmp_path / "r.html")]) == 0
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--virtual-time-budget=10000", "--window-size=1400,900", "--dump-dom"]
    uri = (tmp_path / "r.html").as_uri() + "#node=" + urllib.parse.quote(_INJECT)
    dom = subprocess.run([chromium(), *flags, uri], capture_output=True, text=True,
                         timeout=120).stdout
    body = re.search(r"<body[^>]*>", dom)
    assert body and 'data-rendered="ok"' in body.group(0), dom[-2000:]
    assert '<b id="pwnd"' not in dom  # no element made from the id
    assert '&lt;b id="pwnd"&gt;' in dom  # the id is shown, as text


def test_report_embeds_no_markup_from_names(relu_art, tmp_path):
    """"<!--<script>" in a name put the parser in a state where the page's own </script>
    no longer ended the data: no <, > or & from the artifact reaches the page raw."""
    bad = _renamed(relu_art, tmp_path / "c.provmap", name="<!--<script>&amp;")
    assert main(["report", str(bad), "-o", str(tmp_path / "r.html")]) == 0
    page = (tmp_path / "r.html").read_text()
    assert "<!--<script>" not in page
    assert "\\u003c!--\\u003cscript\\u003e\\u0026amp;" in page


@pytest.mark.parametrize("bad", ["NaN", "Infinity", "-Infinity", "1" + "0" * 400])
def test_profile_numbers_must_be_finite(capsys, relu_art, tmp_path, bad):
    """Python's json reads NaN, Infinity and 1e400 (inf); the page's JSON.parse refused the
    data and the report stayed blank ("No number after minus sign")."""
    from provmap.runtime_module import trust

    with zipfile.ZipFile(relu_art) as z:
        digest = trust.manifest_digest(z.read("manifest.json"))
    prof = tmp_path / "p.json"
    prof.write_text('{"artifact_digest": "%s", "partitions": [{"partition": "p0", "ms": %s}]}'
                    % (digest, bad))
    refused_in_process(capsys, ["report", relu_art, "--profile", prof, "-o", tmp_path / "r.html"],
                       "partitions[0].ms", "not a finite number")
    assert not (tmp_path / "r.html").exists()
