"""No command hands a terminal someone else's control characters (issue 52).

`trust ART`, `trust --list` and `trust --revoke` printed a received file's path raw (an OSC
sequence in the name retitled the terminal), and every command printed U+200B and U+FEFF raw
(two names that look the same, are not).  Every path and name now goes through one helper
(provmap/cli/term_text.py); here each command prints a path or a name holding ESC, BEL, a
zero-width space, a right-to-left override and a BOM, through the real CLI, and none reaches
stdout or stderr as itself."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from attack_kit import relu_model
from cli_runner import provmap

#: ESC ]0; ... BEL retitles a terminal; U+200B zero width space, U+202E right-to-left override,
#: U+2066 left-to-right isolate, U+FEFF BOM / zero width no-break space.
EVIL = "x\x1b]0;pwned\x07\u200b\u202e\u2066\ufeff"
RAW = ("\x1b", "\x07", "\u200b", "\u202e", "\u2066", "\ufeff")


@pytest.fixture(scope="module")
def place(tmp_path_factory):
    """A folder with a model whose node, input and output are named EVIL, compiled by the CLI
    to an artifact whose file name holds EVIL, an inputs file, and a trust list of its own."""
    d = tmp_path_factory.mktemp("escaping")
    m = relu_model()
    m.graph.node[0].name = "relu" + EVIL
    onnx.save(m, d / "relu.onnx")
    env = {**os.environ, "PROVMAP_TRUST": str(d / "trusted.sqlite")}
    art = d / f"art{EVIL}.provmap"
    r = provmap("compile", d / "relu.onnx", "-o", art, "--strategy", "single:onnxruntime",
                env=env)
    assert r.returncode == 0, r.stderr
    np.savez(d / "x.npz", x=np.ones(4, np.float32))
    return d, art, env, r


def _clean(r) -> None:
    out = r.stdout + r.stderr
    for c in RAW:
        assert c not in out, (hex(ord(c)), out)
    assert "\\u200b" in out, out  # the name was printed, escaped


def _recorded(art) -> None:
    """The artifact in the trust list as `trust ART` records a received one (an ONNX Runtime
    artifact needs no trust, so the CLI would not record it: the entry is written directly)."""
    from provmap.runtime_module import trust
    from provmap.runtime_module.artifact import read_artifact

    trust.add_trusted(read_artifact(art).digest, str(art), how="trusted", backends=["tvm"])


@pytest.mark.parametrize("argv", [
    ["inspect", "{art}"],
    ["lookup", "{art}", "--onnx-node", "relu" + EVIL],
    ["run", "{art}", "--inputs", "{d}/x.npz", "-o", "{d}/out" + EVIL + ".npz"],
    ["trust", "{art}"],
    ["trust", "--list"],
    ["trust", "--revoke", "{art}"],
    ["inspect", "{d}/missing" + EVIL + ".provmap"],  # an error line names it too
], ids=["inspect", "lookup", "run", "trust-art", "trust-list", "trust-revoke", "error"])
def test_names_and_paths_are_escaped(place, argv, monkeypatch):
    d, art, env, _ = place
    if argv[1] in ("--list", "--revoke"):  # the list's own trust file, this test's entry
        monkeypatch.setenv("PROVMAP_TRUST", env["PROVMAP_TRUST"])
        _recorded(art)
    r = provmap(*[a.format(art=art, d=d) for a in argv], env=env)
    assert "Traceback" not in r.stderr, r.stderr
    assert r.returncode == (2 if argv[-1].endswith("missing" + EVIL + ".provmap") else 0), \
        r.stderr
    _clean(r)


def test_compile_escapes_its_output_path(place):
    _clean(place[3])
