"""provmap in Google's Model Explorer (issue 27): `provmap overlays` writes node-data overlays
keyed to the user's model and the model grouped by partition; `--open` runs the real Model
Explorer, which headless Chromium renders, and the screenshot shows the partition colours."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from browser import screenshot_when
from cli_runner import provmap as cli

pytest.importorskip("model_explorer", reason="the [explorer] extra (tests/run installs it)")
pytest.importorskip("model_explorer_onnx", reason="the [explorer] extra (tests/run installs it)")

MODEL = Path(__file__).resolve().parent / "data" / "torchscript_attention_dynamic.onnx"
OV_GREEN, ORT_BLUE = "#59a14f", "#4e79a7"


@pytest.fixture(scope="module")
def overlays(tmp_path_factory):
    """The TorchScript export split OpenVINO / ONNX Runtime (Softmax) / OpenVINO, profiled and
    compared, and its overlays."""
    d = tmp_path_factory.mktemp("explorer")
    art = d / "a.provmap"
    r = cli("compile", MODEL, "-o", art, "--strategy", "greedy:openvino,onnxruntime",
            "--backend-option", "openvino.exclude_ops=Softmax", "--input-shape", "x=2x5x16")
    assert r.returncode == 0, r.stderr
    r = cli("profile", art, "--repeats", "3", "--json")
    assert r.returncode == 0, r.stderr
    (d / "prof.json").write_text(r.stdout)
    r = cli("compare", art, "--model", MODEL, "--json")
    assert r.returncode == 0, r.stderr
    (d / "cmp.json").write_text(r.stdout)
    r = cli("overlays", art, "--model", MODEL, "-o", d / "ov", "--profile", d / "prof.json",
            "--errors", d / "cmp.json", "--json")
    assert r.returncode == 0, r.stderr
    return d, json.loads(r.stdout)


def test_overlays_are_keyed_to_the_nodes_model_explorer_shows(overlays):
    from model_explorer_onnx.main import ONNXAdapter

    _, out = overlays
    files = out["files"]
    graphs = ONNXAdapter().convert(files["model"], {})["graphs"]
    (graph,) = [g for g in graphs if g.id == "main_graph"]
    namespace = {n.id: n.namespace for n in graph.nodes}
    part = json.loads(Path(files["partition"]).read_text())["main_graph"]["results"]
    # Every node of the user's model has a partition overlay entry, under Model Explorer's id.
    import onnx

    assert set(part) == {n.name for n in onnx.load(MODEL).graph.node} and set(part) <= set(namespace)
    # ... and sits in its partition's layer, coloured by backend.
    assert namespace["/qkv/MatMul"] == "main_graph/p0 openvino/qkv"
    assert namespace["/Softmax"] == "main_graph/p1 onnxruntime"
    assert part["/qkv/MatMul"] == {"value": 0, "bgColor": OV_GREEN}
    assert part["/Softmax"] == {"value": 1, "bgColor": ORT_BLUE}
    assert part["/Shape"]["value"] == -1  # folded shape arithmetic runs nowhere
    t = json.loads(Path(files["time"]).read_text())["main_graph"]
    assert t["gradient"] and t["results"]["/qkv/MatMul"]["value"] > 0
    e = json.loads(Path(files["error"]).read_text())["main_graph"]
    assert e["thresholds"][0] == {"value": 1e-4, "bgColor": "#59a14f"}
    assert "/Softmax" in e["results"] and e["results"]["/Softmax"]["value"] < 1e-4
    assert out["command"][:2] == ["model-explorer", files["model"]]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_model_explorer_shows_the_partitions_grouped_and_coloured(overlays):
    d, _ = overlays
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "provmap.cli.main", "overlays",
                             d / "a.provmap", "--model", MODEL, "-o", d / "ov",
                             "--profile", d / "prof.json", "--errors", d / "cmp.json",
                             "--open", "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)  # its own group: Model Explorer goes with it
    try:
        url, deadline = None, time.monotonic() + 120
        while url is None and time.monotonic() < deadline:
            line = proc.stdout.readline()
            assert line or proc.poll() is None, "provmap overlays --open ended early"
            if line.startswith(f"http://127.0.0.1:{port}/?data="):
                url = line.strip()
        assert url, "Model Explorer did not say where it serves"
        urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=30).read()
        shot = d / "model-explorer.png"
        # Ready once the model is converted and drawn; then expand every layer (partitions).
        ready = screenshot_when(
            url, shot, 'document.querySelector("canvas") !== null && '
            '!document.body.innerText.includes("Converting")',
            then_js='[...document.querySelectorAll("mat-icon")].find(e => e.textContent.trim() '
            '=== "unfold_more_double").parentElement.click()', timeout=120)
        assert ready, "Model Explorer did not render the model"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    import matplotlib.image as mpimg

    rgb = (mpimg.imread(shot)[..., :3] * 255).round().astype(int)
    graph = rgb[:, : rgb.shape[1] * 3 // 4]  # the graph pane, left of the side panel

    def pixels(color: str, where) -> int:
        want = np.array([int(color[i:i + 2], 16) for i in (1, 3, 5)])
        return int((np.abs(where - want).sum(axis=-1) < 8).sum())

    # Both backends' partition colours are painted on the graph's nodes.
    assert pixels(OV_GREEN, graph) > 200, pixels(OV_GREEN, graph)
    assert pixels(ORT_BLUE, graph) > 50, pixels(ORT_BLUE, graph)
