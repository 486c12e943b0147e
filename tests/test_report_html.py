"""The HTML report on a 1,050-node model in headless Chromium: partition outlines and labels (two
neighbouring partitions on one backend stay apart), search, selection with tensor shapes, helper
nodes hidden by default, and a layout whose edges never run through a box.

The page mirrors its state in the URL hash (#search=, #node=, #partition=, #helpers=1) and on
the body's data-* attributes, so every check here reads Chromium's --dump-dom."""

from __future__ import annotations

import html
import json
import re
import subprocess

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from provmap.cli.main import main as cli_main
from provmap.partition.compile import load_view
from provmap.runtime_module.module import load
from provmap.workbench.report_html import H, W, report_data
from browser import chromium

LONG_WHY = ("manual split for the report test: " + "a long explanation that must wrap in the "
            "side panel instead of being cut off, " * 4).strip()




FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         "--virtual-time-budget=10000", "--window-size=1400,900"]


def _with_helpers(model: onnx.ModelProto, every: int = 10) -> onnx.ModelProto:
    """Every `every`-th block's bias becomes ConstantOfShape(Constant shape): 2 helper nodes."""
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    nodes = []
    for node in g.node:
        if node.name.endswith("/bias") and int(node.name[5:].split("/")[0]) % every == 0:
            b = node.input[1]
            g.initializer.remove(inits[b])
            nodes.append(helper.make_node(
                "Constant", [], [b + "_shape"], name=b + "/shape",
                value=helper.make_tensor("s", TensorProto.INT64, [1], [8])))
            nodes.append(helper.make_node(
                "ConstantOfShape", [b + "_shape"], [b], name=b + "/fill",
                value=helper.make_tensor("v", TensorProto.FLOAT, [1], [0.1])))
        nodes.append(node)
    del g.node[:]
    g.node.extend(nodes)
    onnx.checker.check_model(model)
    return model


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    from provmap.bench.scaling import synthetic_model

    from provmap.runtime_module.artifact_build import build_artifact
    from provmap.runtime_module.plan import PartitionSpec, Plan
    from provmap.runtime_module.registry import get_backend

    tmp = tmp_path_factory.mktemp("report")
    view = load_view(_with_helpers(synthetic_model(1000)), "synthetic1000")
    ops = view.op_nodes
    a, b = len(ops) // 3, 2 * len(ops) // 3
    plan = Plan("manual", [PartitionSpec("onnxruntime", ops[:a], why=LONG_WHY),
                           PartitionSpec("onnxruntime", ops[a:b], why="second ORT part"),
                           PartitionSpec("openvino", ops[b:], why="OpenVINO tail")])
    art = tmp / "big.provmap"
    build_artifact(view, plan, {k: get_backend(k) for k in ("onnxruntime", "openvino")}).save(art)
    out = tmp / "report.html"
    assert cli_main(["report", str(art), "-o", str(out)]) == 0
    return {"art": art, "html": out, "mod": load(art, runnable=False), "tmp": tmp}


def _dom(report, fragment: str = "") -> str:
    uri = report["html"].as_uri() + (f"#{fragment}" if fragment else "")
    res = subprocess.run([chromium(), *FLAGS, "--dump-dom", uri], capture_output=True,
                         text=True, timeout=120)
    body = re.search(r"<body[^>]*>", res.stdout)
    assert body and 'data-rendered="ok"' in body.group(0), res.stderr[-2000:]
    assert "data-error" not in body.group(0), body.group(0)
    return res.stdout


def _attrs(dom: str) -> dict:
    body = re.search(r"<body([^>]*)>", dom).group(1)
    return dict(re.findall(r'data-([\w-]+)="([^"]*)"', body))


def _node_id(mod, name: str) -> str:
    return next(n.id for n in mod.lookup.map.nodes if n.name == name)


def _detail(dom: str) -> str:
    start = dom.index('id="detail"')
    return html.unescape(dom[start:dom.index("<h3>Partitions</h3>", start)])


def test_page_is_self_contained_and_shows_partitions(report):
    page = report["html"].read_text()
    assert "<script src" not in page and "http://" not in page and "https://" not in page
    dom = _dom(report)
    a = _attrs(dom)
    assert a["nodes"] == "1050" and a["partitions"] == "3"
    # Helper nodes (Constant, ConstantOfShape) are hidden by default, with a toggle.
    assert a["helpers"] == "hidden" and a["shown"] == "1000"
    assert 'class="n h"' not in dom and 'id="helpers"' in dom
    assert "show helper nodes (50" in dom
    # One outline and one label per partition; the two ORT neighbours look different.
    parts = re.findall(r'<g class="part" data-p="(\d)"><path d="([^"]+)"[^>]*?'
                       r'fill-opacity="([\d.]+)"[^>]*?stroke-dasharray="([^"]*)"', dom)
    assert [p[0] for p in parts] == ["0", "1", "2"]
    labels = re.findall(r'<g class="plabel" data-p="\d"[^>]*>.*?<text[^>]*>([^<]+)</text>', dom)
    assert [lb.split(" \u00b7 ")[:2] for lb in labels] == [
        ["p0", "onnxruntime"], ["p1", "onnxruntime"], ["p2", "openvino"]]
    assert parts[0][2:] != parts[1][2:]  # tint and dash alternate between same-backend parts
    ys = [[float(v) for v in re.findall(r"[-\d.]+", d)[1::2]] for _, d, _, _ in parts]
    assert max(ys[0]) < min(ys[1]) and max(ys[1]) < min(ys[2])  # outlines do not overlap
    # The "why" wraps in the side panel (a block, not a clipped table cell).
    assert f'<div class="why">{LONG_WHY}</div>' in dom
    assert re.search(r"\.why\{white-space:normal;overflow-wrap:anywhere", dom)


def test_search_highlights_matches(report):
    dom = _dom(report, "search=block83/")
    assert _attrs(dom)["search-hits"] == "4"
    hits = re.findall(r'<g class="n hit" data-i="\d+" data-id="(\w+)"', dom)
    names = {n.id: n.name for n in report["mod"].lookup.map.nodes}
    assert sorted(names[h] for h in hits) == [
        "block83/bias", "block83/matmul", "block83/relu", "block83/residual"]
    assert 'class="searching"' in dom  # the rest is dimmed
    # By op type and by ID too.
    assert _attrs(_dom(report, "search=MatMul"))["search-hits"] == "250"
    nid = _node_id(report["mod"], "block7/relu")
    assert _attrs(_dom(report, f"search={nid}"))["search-hits"] == "1"


def test_selected_node_shows_shapes_and_boundaries(report):
    mod = report["mod"]
    nid = _node_id(mod, "block83/matmul")  # the last node of p0: its output crosses into p1
    dom = _dom(report, f"node={nid}")
    assert _attrs(dom)["selected"] == nid
    assert re.search(rf'<g class="n sel" data-i="\d+" data-id="{nid}"', dom)
    d = re.sub(r"<[^>]+>", "", _detail(dom))  # the text on screen
    for text in (nid, "MatMul", "p0", "onnxruntime", "Inputs", "Outputs", "Relax bindings",
                 "mm83", "[1, 8]", "float32", "block82/residual", "block83/bias",
                 "boundary \u2192 p1", "weight (initializer)", "relax.matmul"):
        assert text in d, text
    # A partition: its boundary tensors, where they come from and go to.
    p1 = next(p for p in mod.manifest["partitions"] if p["id"] == "p1")
    d = _detail(_dom(report, "partition=p1"))
    assert "Boundary inputs" in d and "Boundary outputs" in d and "second ORT part" in d
    for t in p1["inputs"] + p1["outputs"]:
        assert t["name"] in d
    assert re.search(r"mm83</code></td><td>\[1, 8\]</td><td>float32</td><td>.*?p0", d)
    assert re.search(r"y165</code></td><td>\[1, 8\]</td><td>float32</td><td>.*?p2", d)


def test_helper_toggle_shows_constants(report):
    mod = report["mod"]
    dom = _dom(report, "helpers=1")
    a = _attrs(dom)
    assert a["helpers"] == "shown" and a["shown"] == "1050"
    assert len(re.findall(r'<g class="n h"', dom)) == 50
    # Selecting a helper node shows it (and why it is one), even with helpers hidden.
    nid = _node_id(mod, "b10/fill")
    dom = _dom(report, f"node={nid}")
    assert _attrs(dom)["helpers"] == "shown"
    assert "folded to a constant before import" in _detail(dom)


def test_layout_routes_edges_between_boxes(report):
    data = report_data(report["mod"])
    nodes = data["nodes"]
    for key in ("main", "all"):
        lay = data["layouts"][key]
        boxes: dict[float, list[tuple[float, int]]] = {}
        for i, p in enumerate(lay["pos"]):
            if p:
                boxes.setdefault(p[1], []).append((p[0], i))
        # Boxes in a layer do not overlap.
        for row in boxes.values():
            xs = sorted(x for x, _ in row)
            assert all(b - a >= W for a, b in zip(xs, xs[1:]))
        for u, v, pts in lay["edges"]:
            assert pts[:2] == [lay["pos"][u][0], lay["pos"][u][1] + H]
            assert pts[-2:] == lay["pos"][v]
            # Every bend of a long edge is in a lane of its own, clear of every box.
            for x, y in zip(pts[2:-2:2], pts[3:-2:2]):
                top = y if y in boxes else y - H
                assert all(abs(x - bx) > W / 2 for bx, _ in boxes.get(top, ())), (key, u, v)
        # Each box lies inside its own partition's outline only.
        polys = {o["g"]: o["polys"] for o in lay["outlines"]}
        for i, p in enumerate(lay["pos"]):
            if not p:
                continue
            g = data["group"][i]
            cx, cy = p[0], p[1] + H / 2
            inside = {h for h, ps in polys.items() if any(_inside(cx, cy, q) for q in ps)}
            assert inside == ({g} if g >= 0 else set()), (nodes[i]["name"], inside)


def _inside(x, y, q) -> bool:
    pts = list(zip(q[::2], q[1::2]))
    c = False
    for (x1, y1), (x2, y2) in zip(pts, pts[1:] + pts[:1]):
        if (y1 > y) != (y2 > y) and x < x1 + (y - y1) * (x2 - x1) / (y2 - y1):
            c = not c
    return c


def test_screenshot_is_readable(report):
    shot = report["tmp"] / "selected.png"
    nid = _node_id(report["mod"], "block83/matmul")
    subprocess.run([chromium(), *FLAGS, f"--screenshot={shot}",
                    report["html"].as_uri() + f"#node={nid}"], capture_output=True, timeout=120)
    import matplotlib.image as mpimg

    img = mpimg.imread(shot)
    assert img.shape[0] >= 800 and img.shape[1] >= 1300
    rgb = (img[..., :3] * 255).round().astype(int)
    graph = rgb[40:, :900]  # the graph pane, below the title bar
    blue = (np.abs(graph - np.array((0x4e, 0x79, 0xa7))).sum(axis=-1) < 6).sum()
    assert blue > 20 * W  # boxes drawn at a readable zoom (100%), not a speck


_DRIVER = """<script>
setTimeout(function () {
  const log = {}, q = document.getElementById("q"), b = document.body.dataset;
  const click = el => el.dispatchEvent(new MouseEvent("click", {bubbles: true}));
  q.value = "block12/"; q.dispatchEvent(new Event("input")); log.typed = b.searchHits;
  q.dispatchEvent(new KeyboardEvent("keydown", {key: "Enter"})); log.enter = b.selected;
  document.getElementById("zin").click(); log.zoomIn = document.getElementById("zl").textContent;
  document.getElementById("view").dispatchEvent(new WheelEvent("wheel", {deltaY: 200,
    ctrlKey: true, clientX: 300, clientY: 300, bubbles: true, cancelable: true}));
  log.wheel = document.getElementById("zl").textContent;
  const n40 = document.querySelectorAll(".n")[40]; log.target = n40.dataset.id;
  click(n40); log.clicked = b.selected;
  click(document.querySelector('.plabel[data-p="1"]')); log.label = b.selected;
  click(document.querySelector('.pcard[data-p="2"]')); log.card = b.selected;
  const h = document.getElementById("helpers"); h.checked = true;
  h.dispatchEvent(new Event("change")); log.helpers = b.shown;
  document.body.setAttribute("data-log", JSON.stringify(log));
}, 300);
</script></body>"""


def test_user_interactions(report):
    """Typing in the search box, Enter, zoom buttons and ctrl+wheel, clicks on a node, a
    partition label and a partition card, the helper toggle: driven by an injected script."""
    page = report["html"].read_text().replace("</body>", _DRIVER)
    driven = report["tmp"] / "driven.html"
    driven.write_text(page)
    res = subprocess.run([chromium(), *FLAGS, "--dump-dom", driven.as_uri()],
                         capture_output=True, text=True, timeout=120)
    assert "data-error" not in res.stdout
    log = json.loads(html.unescape(re.search(r'data-log="([^"]*)"', res.stdout).group(1)))
    mod = report["mod"]
    assert log["typed"] == "4"
    assert log["enter"] == _node_id(mod, "block12/matmul")
    assert log["zoomIn"] == "125%" and int(log["wheel"].rstrip("%")) < 125
    assert log["clicked"] == log["target"]
    assert (log["label"], log["card"], log["helpers"]) == ("p1", "p2", "1050")
