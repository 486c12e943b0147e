"""profile and the report that draws its numbers, through the real CLI: progress on stderr, rows
that add up to the end-to-end time (the time between partitions included), the share
attributed to ONNX nodes and the rows left unattributed (escaped like every name from an
artifact); report takes one source of costs, and only its own artifact's profile."""

from __future__ import annotations

import re

import pytest
from cli_runner import one_error, provmap

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture(scope="module")
def greedy(tmp_path_factory):
    """SqueezeNet with Concat kept off OpenVINO: 17 partitions, so the executor's time between
    the partition calls is a visible share of the run."""
    d = tmp_path_factory.mktemp("greedy")
    r = provmap("compile", "bundled:squeezenet", "-o", d / "g.provmap", "--strategy",
                "greedy:openvino,onnxruntime", "--backend-option", "openvino.exclude_ops=Concat")
    assert r.returncode == 0, r.stderr
    r = provmap("profile", d / "g.provmap", "--repeats", "3", "--json", "--trace", d / "t.json")
    assert r.returncode == 0, r.stderr
    (d / "g.json").write_text(r.stdout)
    return d


def test_profile_prints_progress(log_dir):
    r = provmap("profile", log_dir / "log.provmap", "--inputs", log_dir / "in.npz", "--repeats",
                "2")
    assert r.returncode == 0, r.stderr
    assert "profile: 2 end-to-end runs" in r.stderr and "profile: kernels of p0" in r.stderr


def test_profile_rows_add_up_to_end_to_end(greedy):
    import json

    p = json.loads((greedy / "g.json").read_text())
    assert len(p["partitions"]) == 17
    parts = sum(r["ms"] for r in p["partitions"])
    assert parts + p["between_partitions_ms"] == pytest.approx(p["e2e_ms"], rel=1e-9)
    events = json.loads((greedy / "t.json").read_text())["traceEvents"]
    assert any(e["name"] == "between partitions" for e in events)
    text = provmap("profile", greedy / "g.provmap", "--repeats", "2").stdout
    assert "between partitions" in text, text


def test_profile_text_says_the_attributed_share_and_the_unattributed_rows(log_relu_dir):
    """Issue 35's attribution reached --json only: the text output listed the top nodes as if
    they were all of the time.  After them: one line with the share, then the rest by row."""
    r = provmap("profile", log_relu_dir / "m.provmap", "--inputs", log_relu_dir / "in.npz",
                "--repeats", "2")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    head = [i for i, ln in enumerate(lines) if ln.startswith("attributed to ONNX nodes: ")]
    assert len(head) == 1 and head[0] > lines.index("top ONNX nodes:"), r.stdout
    m = re.fullmatch(r"attributed to ONNX nodes: (\d+\.\d)% of the partitions' (\d+\.\d{3}) ms; "
                     r"unattributed (-?\d+\.\d{3}) ms(:?)", lines[head[0]])
    assert m and 0 <= float(m.group(1)) <= 100, lines[head[0]]
    rows = lines[head[0] + 1:]
    # both partitions spend some time outside their kernels (the library's per-call time)
    assert m.group(4) == ":" and 1 <= len(rows) <= 5, r.stdout
    assert all(re.match(r"  +\d+\.\d{4} ms  p\d \[(openvino|onnxruntime)\]  \w", ln)
               for ln in rows), rows


def test_profile_text_escapes_the_unattributed_rows(log_relu_dir, monkeypatch, capsys):
    """The rows name partitions and backends from the artifact (someone else's text), as the
    other lines do: a control character is shown, not acted on by the terminal."""
    from provmap.cli.main import main as cli_main
    from provmap.workbench import profile

    real = profile.profile_artifact

    def hostile(*a, **kw):
        res = real(*a, **kw)
        res["unattributed"]["rows"] = [{"partition": "p0", "backend": "\x1b[31mred", "ms": 1.0,
                                        "what": "outside kernels"}] * 7
        return res

    monkeypatch.setattr(profile, "profile_artifact", hostile)
    assert cli_main(["profile", str(log_relu_dir / "m.provmap"), "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and out.count("\\x1b[31mred") == 5, out
    assert "  ... 2 more (--json lists them)" in out, out


def test_report_takes_one_source_of_costs_and_only_its_own_profile(greedy, relu_embedded_dir,
                                                                   tmp_path):
    r = provmap("report", greedy / "g.provmap", "--profile", greedy / "g.json", "--measure",
                "-o", tmp_path / "r.html")
    one_error(r, "--profile", "--measure", "not both")
    r = provmap("report", relu_embedded_dir / "relu.provmap", "--profile", greedy / "g.json", "-o",
                tmp_path / "r.html")
    one_error(r, "g.json", "another artifact", "relu.provmap")
    assert not (tmp_path / "r.html").exists()
    r = provmap("report", greedy / "g.provmap", "--profile", greedy / "g.json", "-o",
                tmp_path / "r.html")
    assert r.returncode == 0 and (tmp_path / "r.html").exists(), r.stderr
