"""One self-contained HTML file: the ONNX graph colored by backend, every node with its name,
expression IDs, kernels and cost.  No network, no external script: it opens from disk, offline,
years later.

Built from the artifact alone (the map records each ONNX node's inputs and outputs, so the graph
is there without the model).  Layout is computed here, not in the browser: nodes are placed in
layers by longest path from the inputs, which keeps a 1,000-node graph readable as a scrolling
column and makes rendering a linear pass in the page's script.
"""

from __future__ import annotations

import html
import json

PALETTE = {"onnxruntime": "#4e79a7", "openvino": "#59a14f", "tvm": "#f28e2b"}
EXTRA = ["#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#9c755f"]


def report_data(mod, profile: dict | None = None) -> dict:
    lk = mod.lookup
    nodes = sorted(lk.map.nodes, key=lambda n: n.index)
    graph_inputs = {t["name"] for t in mod.manifest["model"]["inputs"]}
    producer = {}
    for n in nodes:
        for o in n.outputs:
            producer[o] = n.id
    depth: dict[str, int] = {}
    for n in nodes:  # ONNX node order is topological (the importer sorts unsorted files)
        depth[n.id] = 1 + max((depth.get(producer[i], -1) for i in n.inputs if i in producer),
                              default=-1)
    # Constant producers (weights built by ConstantOfShape, shape arithmetic) have no inputs:
    # place them just above their first consumer instead of all in the top layer.
    consumers: dict[str, list[str]] = {}
    for n in nodes:
        for i in n.inputs:
            if i in producer:
                consumers.setdefault(producer[i], []).append(n.id)
    for n in reversed(nodes):
        if not any(i in producer for i in n.inputs) and consumers.get(n.id) and \
                not any(i for i in n.inputs if i not in producer and i in graph_inputs):
            depth[n.id] = max(0, min(depth[c] for c in consumers[n.id]) - 1)
    layers: dict[int, list[str]] = {}
    for n in nodes:
        layers.setdefault(depth[n.id], []).append(n.id)
    pos = {}
    for d, ids in layers.items():
        for k, i in enumerate(ids):
            pos[i] = (k, d)
    node_ms = {r["id"]: r for r in (profile or {}).get("onnx_nodes", [])}
    backends = [p["backend"] for p in mod.manifest["partitions"]]
    colors = {}
    for b in dict.fromkeys(backends):
        colors[b] = PALETTE.get(b) or EXTRA[len(colors) % len(EXTRA)]
    out_nodes = []
    for n in nodes:
        a = lk.onnx_node(n.id)[0]
        prof = node_ms.get(n.id)
        out_nodes.append({
            "id": n.id, "name": n.name, "op": n.op_type, "x": pos[n.id][0], "y": pos[n.id][1],
            "backend": (a["backends"] or [None])[0], "partitions": a["partitions"],
            "exprs": a["exprs"], "elided": n.elided,
            "kernels": [k["kernel"] for k in a["kernels"] if k["role"] == "compute"],
            "ms": prof["ms"] if prof else None,
            "shared_with": prof.get("shared_with") if prof else None,
        })
    edges = []
    index = {n.id: k for k, n in enumerate(nodes)}
    for n in nodes:
        for i in n.inputs:
            if i in producer:
                edges.append([index[producer[i]], index[n.id]])
    parts = []
    pprof = {r["partition"]: r for r in (profile or {}).get("partitions", [])}
    for p in mod.manifest["partitions"]:
        parts.append({"id": p["id"], "backend": p["backend"], "ops": len(p["ops"]),
                      "kernels": len(p["kernels"]), "why": p.get("why", ""),
                      "ms": pprof.get(p["id"], {}).get("ms")})
    m = mod.manifest
    return {"model": m["model"]["name"], "strategy": m["strategy"], "created": m.get("created_utc"),
            "colors": colors, "nodes": out_nodes, "edges": edges, "partitions": parts,
            "e2e_ms": (profile or {}).get("e2e_ms"),
            "cost_source": "provmap profile (measured, attributed to nodes)" if profile else
            "not measured (`provmap report --measure`, or `--profile PROFILE.json`)"}


_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>provmap report: __TITLE__</title>
<style>
body{font:13px system-ui,sans-serif;margin:0;display:flex;height:100vh}
#left{flex:1;overflow:auto;border-right:1px solid #ccc}
#right{width:380px;overflow:auto;padding:10px}
h1{font-size:16px;margin:8px 10px}
.legend span{display:inline-block;padding:2px 6px;margin:2px;color:#fff;border-radius:3px}
table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ddd;padding:2px 4px}
#detail code{word-break:break-all}
svg text{font-size:9px;pointer-events:none}
</style></head>
<body data-rendered="no">
<div id="left"><h1>__TITLE__</h1><div class="legend" id="legend"></div><svg id="g"></svg></div>
<div id="right"><div id="summary"></div><h3>Node</h3><div id="detail">click a node</div>
<h3>Partitions</h3><div id="parts"></div></div>
<script id="data" type="application/json">__DATA__</script>
<script>
window.onerror = function (msg) { document.body.dataset.error = String(msg); };
(function () {
  const D = JSON.parse(document.getElementById("data").textContent);
  const NS = "http://www.w3.org/2000/svg", W = 120, H = 26, GX = 20, GY = 18;
  const svg = document.getElementById("g");
  let maxX = 0, maxY = 0;
  for (const n of D.nodes) { maxX = Math.max(maxX, n.x); maxY = Math.max(maxY, n.y); }
  svg.setAttribute("width", (maxX + 1) * (W + GX) + 20);
  svg.setAttribute("height", (maxY + 1) * (H + GY) + 20);
  const cx = n => 10 + n.x * (W + GX) + W / 2, cy = n => 10 + n.y * (H + GY);
  const color = n => n.backend ? D.colors[n.backend] : "#bbb";
  const lines = document.createElementNS(NS, "g");
  for (const [a, b] of D.edges) {
    const p = D.nodes[a], q = D.nodes[b], l = document.createElementNS(NS, "line");
    l.setAttribute("x1", cx(p)); l.setAttribute("y1", cy(p) + H);
    l.setAttribute("x2", cx(q)); l.setAttribute("y2", cy(q));
    l.setAttribute("stroke", p.backend !== q.backend ? "#d00" : "#999");
    lines.appendChild(l);
  }
  svg.appendChild(lines);
  const esc = s => String(s).replace(/[&<>"]/g, c => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}[c]));
  function show(n) {
    document.getElementById("detail").innerHTML =
      "<b>" + esc(n.name || "(unnamed)") + "</b> " + esc(n.op) + "<br>ID <code>" + n.id + "</code>" +
      "<br>backend: " + esc(n.backend || "none (" + (n.elided || "helper") + ")") +
      "<br>partition: " + esc(n.partitions.join(", ") || "-") +
      "<br>cost: " + (n.ms == null ? "-" : n.ms.toFixed(4) + " ms") +
      (n.shared_with ? " (kernel shared with " + esc(n.shared_with.join(", ")) + ")" : "") +
      "<br>kernels:<br><code>" + esc(n.kernels.join("\\n")).replace(/\\n/g, "<br>") + "</code>" +
      "<br>Relax exprs: <code>" + esc(n.exprs.join(", ")) + "</code>";
  }
  const boxes = document.createElementNS(NS, "g");
  for (const n of D.nodes) {
    const g = document.createElementNS(NS, "g"), r = document.createElementNS(NS, "rect");
    r.setAttribute("x", cx(n) - W / 2); r.setAttribute("y", cy(n));
    r.setAttribute("width", W); r.setAttribute("height", H); r.setAttribute("rx", 3);
    r.setAttribute("fill", color(n));
    const t = document.createElementNS(NS, "title");
    t.textContent = (n.name || n.op) + " [" + n.op + "] " + (n.backend || "-") + " " +
      n.partitions.join(",") + (n.ms == null ? "" : " " + n.ms.toFixed(3) + " ms") +
      "\\nkernels: " + n.kernels.join(", ") + "\\nexprs: " + n.exprs.join(", ");
    r.appendChild(t);
    const tx = document.createElementNS(NS, "text");
    tx.setAttribute("x", cx(n) - W / 2 + 3); tx.setAttribute("y", cy(n) + 11);
    tx.setAttribute("fill", "#fff"); tx.textContent = (n.name || n.op).slice(0, 22);
    const tx2 = document.createElementNS(NS, "text");
    tx2.setAttribute("x", cx(n) - W / 2 + 3); tx2.setAttribute("y", cy(n) + 22);
    tx2.setAttribute("fill", "#fff");
    tx2.textContent = n.op + (n.ms == null ? "" : " " + n.ms.toFixed(3) + "ms");
    g.appendChild(r); g.appendChild(tx); g.appendChild(tx2);
    g.addEventListener("click", () => show(n));
    boxes.appendChild(g);
  }
  svg.appendChild(boxes);
  document.getElementById("legend").innerHTML = Object.entries(D.colors).map(
    ([b, c]) => '<span style="background:' + c + '">' + esc(b) + "</span>").join("") +
    ' <span style="background:#d00">edge crossing backends</span>';
  document.getElementById("summary").innerHTML = "<b>" + esc(D.model) + "</b><br>strategy " +
    esc(D.strategy) + "<br>" + D.nodes.length + " ONNX nodes, " + D.partitions.length +
    " partitions<br>end to end: " + (D.e2e_ms == null ? "-" : D.e2e_ms.toFixed(3) + " ms") +
    "<br>cost: " + esc(D.cost_source);
  document.getElementById("parts").innerHTML = "<table><tr><th>id</th><th>backend</th>" +
    "<th>ops</th><th>kernels</th><th>ms</th><th>why</th></tr>" + D.partitions.map(p =>
      "<tr><td>" + p.id + "</td><td>" + esc(p.backend) + "</td><td>" + p.ops + "</td><td>" +
      p.kernels + "</td><td>" + (p.ms == null ? "-" : p.ms.toFixed(3)) + "</td><td>" +
      esc(p.why) + "</td></tr>").join("") + "</table>";
  document.body.dataset.rendered = "ok";
  document.body.dataset.nodes = String(D.nodes.length);
})();
</script></body></html>
"""


def render(mod, profile: dict | None = None) -> str:
    data = report_data(mod, profile)
    # "</" cannot appear inside a <script> element: escape it in the embedded JSON.
    payload = json.dumps(data).replace("</", "<\\/")
    title = html.escape(f"{data['model']} ({data['strategy']})")
    return _PAGE.replace("__TITLE__", title).replace("__DATA__", payload)
