"""One self-contained HTML file: the ONNX graph colored by backend, every node with its name,
expression IDs, kernels, tensor shapes and cost.  No network, no external script: it opens from
disk, offline, years later.

Built from the artifact alone (the map records each ONNX node's inputs and outputs, so the graph
is there without the model).  Layout is computed here, not in the browser, as a layered
(Sugiyama-style) drawing: layers by longest path from the inputs, every edge that skips layers
routed through one lane per producer in each layer it passes (so it goes between boxes, never
through them), nodes ordered in each layer by barycenter sweeps with each partition's nodes kept
together, and x positions pulled towards their neighbours (isotonic regression keeps the order
and the spacing).  Each partition then gets an outline around its nodes, traced layer by layer,
and a label.  Two layouts are stored: one without the helper nodes (constants, ConstantOfShape
weights, nodes folded away: they compute nothing at run time) and one with them; the page's
script only draws, so a 1,200-node graph renders in a blink.

The page itself is package data, real files a linter and an editor see (assets/report.html,
report.css, report.js), read once with importlib.resources; render() only fills in the data.
The script adds search, zoom and pan, selection with a detail pane, and the helper-node toggle.
State is mirrored in the URL hash so a view can be linked and tested without a mouse: #node=ID
selects a node, #partition=p1 a partition, #search=TEXT highlights matches, #helpers=1 shows the
helper nodes, #zoom=0.5 sets the zoom.  The body's data-* attributes report what is on screen
(data-rendered="ok", data-nodes, data-shown, data-search-hits, data-selected, data-helpers,
data-partitions).
"""

from __future__ import annotations

import functools
import html
import json
import re
from importlib import resources

PALETTE = {"onnxruntime": "#4e79a7", "openvino": "#59a14f", "tvm": "#f28e2b"}
EXTRA = ["#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#9c755f"]

# Geometry shared with the page's script (node box, lane width, gaps, outline padding).
W, H, LANE, GX, GY, PAD = 150, 30, 12, 22, 34, 8
MAX_LANES = 40000  # lane (dummy) budget: edges beyond it are drawn straight


def _shape(s) -> str | None:
    """A shape as "[1, 8]", from a manifest list or a Relax annotation ("T.int64(1)xT.int64(8)")."""
    if s is None:
        return None
    if isinstance(s, (list, tuple)):
        return "[" + ", ".join(str(d) for d in s) + "]"
    if s == "scalar":
        return "[]"
    if s.startswith("tuple"):
        return s
    return "[" + ", ".join(re.sub(r"T\.int64\((-?\d+)\)", r"\1", d) for d in s.split("x")) + "]"


def _helpers(nodes, answers, producer, graph_inputs) -> list[bool]:
    """Nodes that compute nothing at run time: no compute kernel, and either every input is a
    constant (weights, Constant, ConstantOfShape of an initializer) or the importer folded the
    node away (constant or shape arithmetic, unused)."""
    out: list[bool] = []
    for k, n in enumerate(nodes):
        computes = any(kn["role"] == "compute" for kn in answers[k]["kernels"])
        const_in = all(not i or (i not in graph_inputs and (
            i not in producer or (producer[i] < k and out[producer[i]]))) for i in n.inputs)
        folded = bool(n.elided) and not n.elided.startswith("not compilable") and \
            "alias" not in n.elided
        out.append(not computes and (const_in or folded or n.op_type == "Constant"))
    return out


def _isotonic(target, weight):
    """Weighted least-squares nondecreasing fit (pool adjacent violators)."""
    blocks = []  # [value, weight, count]
    for t, w in zip(target, weight):
        blocks.append([t, w, 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            v2, w2, c2 = blocks.pop()
            v1, w1, c1 = blocks[-1]
            blocks[-1] = [(v1 * w1 + v2 * w2) / (w1 + w2), w1 + w2, c1 + c2]
    out = []
    for v, _w, c in blocks:
        out += [v] * c
    return out


def layout(n: int, edges: list[tuple[int, int]], group: list[int], visible: list[bool],
           pullable: list[bool]) -> dict:
    """Positions (box centre x, top y) of the visible nodes, edge routes and partition outlines.

    `group[i]` is node i's partition index (-1: none); nodes are in topological order."""
    preds: list[list[int]] = [[] for _ in range(n)]
    succs: list[list[int]] = [[] for _ in range(n)]
    for u, v in edges:
        if visible[u] and visible[v]:
            preds[v].append(u)
            succs[u].append(v)
    depth = [0] * n
    for v in range(n):
        if visible[v]:
            depth[v] = 1 + max((depth[u] for u in preds[v]), default=-1)
    # Constant-like producers sit just above their first consumer, not all in the top layer.
    pull = [False] * n
    for v in range(n):
        pull[v] = visible[v] and pullable[v] and all(pull[u] for u in preds[v])
    for v in reversed(range(n)):
        if pull[v] and succs[v]:
            depth[v] = min(depth[s] for s in succs[v]) - 1
    lo = min((depth[v] for v in range(n) if visible[v]), default=0)
    depth = [d - lo for d in depth]
    # Items: nodes 0..n-1, then lanes (dummies) of long edges, one chain per producer.
    item_layer = [depth[v] if visible[v] else -1 for v in range(n)]
    item_group = list(group)
    up: list[list[int]] = [[] for _ in range(n)]
    down: list[list[int]] = [[] for _ in range(n)]
    routes = []  # (u, v, [items from u to v])
    budget = MAX_LANES
    spans = sorted((max(depth[s] for s in succs[u]) - depth[u], u) for u in range(n) if succs[u])
    chains: dict[int, list[int]] = {}
    for span, u in spans:
        if span - 1 > budget:
            break
        budget -= span - 1
        chain = []
        for d in range(depth[u] + 1, depth[u] + span):
            k = len(item_layer)
            item_layer.append(d)
            item_group.append(group[u])
            up.append([chain[-1] if chain else u])
            down.append([])
            chain.append(k)
        chains[u] = chain
    for u in range(n):
        chain = chains.get(u, [])
        for a, b in zip([u] + chain, chain):
            down[a].append(b)
        for s in succs[u]:
            gap = depth[s] - depth[u] - 1
            path = [u] + (chain[:gap] if len(chain) >= gap else [])
            if len(path) == gap + 1:
                up[s].append(path[-1])
                down[path[-1]].append(s)
            routes.append((u, s, path[1:]))
    nl = 1 + max((d for d in item_layer), default=0)
    layers: list[list[int]] = [[] for _ in range(nl)]
    for k, d in enumerate(item_layer):
        if d >= 0:
            layers[d].append(k)
    pos = [0.0] * len(item_layer)
    for ids in layers:
        for j, k in enumerate(ids):
            pos[k] = float(j)
    gorder = {g: r for r, g in enumerate(sorted(set(group)))}

    def sweep(seq, nbrs):
        for ids in seq:
            bary = {k: (sum(pos[m] for m in nbrs[k]) / len(nbrs[k]) if nbrs[k] else pos[k])
                    for k in ids}
            ids.sort(key=lambda k: (gorder[item_group[k]], bary[k]))
            for j, k in enumerate(ids):
                pos[k] = float(j)
    for _ in range(3):
        sweep(layers, up)
        sweep(layers[::-1], down)
    sweep(layers, up)
    # x: pull every item towards its neighbours, keeping order and spacing.
    width = [W if k < n else LANE for k in range(len(item_layer))]
    rank = [(1 if pull[k] else 0) if k < n else 2 for k in range(len(item_layer))]
    x = [0.0] * len(item_layer)
    for ids in layers:
        c = 0.0
        for j, k in enumerate(ids):
            if j:
                c += _sep(ids[j - 1], k, width, item_group, n)
            x[k] = c

    def place(seq, nbrs):
        for ids in seq:
            if not ids:
                continue
            c, cum = 0.0, []
            for j, k in enumerate(ids):
                if j:
                    c += _sep(ids[j - 1], k, width, item_group, n)
                cum.append(c)
            want, wt = [], []
            for k in ids:
                # Follow the strongest neighbours: boxes of the main flow, then constant-like
                # boxes, then lanes.  Lanes and constants bend around the flow, so a residual
                # chain stays straight instead of drifting sideways block by block.
                r = min((rank[m] for m in nbrs[k]), default=3)
                ms = [m for m in nbrs[k] if rank[m] == r]
                want.append(sum(x[m] for m in ms) / len(ms) if ms else x[k])
                wt.append(1000.0 if rank[k] == 0 and ms else 1.0 if ms else 0.1)
            q = _isotonic([w - c for w, c in zip(want, cum)], wt)
            for k, qq, c in zip(ids, q, cum):
                x[k] = qq + c
    for _ in range(4):
        place(layers, up)
        place(layers[::-1], down)
    place(layers, [u + d for u, d in zip(up, down)])
    xmin = min((x[k] - width[k] / 2 for ids in layers for k in ids), default=0.0)
    for k in range(len(x)):
        x[k] = round(x[k] - xmin + PAD + 20, 1)
    ytop = [round(40 + d * (H + GY), 1) for d in range(nl)]
    pos_out = [[x[v], ytop[depth[v]]] if visible[v] else None for v in range(n)]
    routed = []
    for u, v, lanes in routes:
        pts = [x[u], ytop[depth[u]] + H]
        for k in lanes:
            y = ytop[item_layer[k]]
            pts += [x[k], y, x[k], y + H]
        pts += [x[v], ytop[depth[v]]]
        routed.append([u, v, pts])
    outlines = _outlines(n, group, visible, depth, x, ytop,
                         [(k, item_layer[k], item_group[k]) for k in range(n, len(x))])
    gw = max((x[k] + width[k] / 2 for ids in layers for k in ids), default=0.0) + PAD + 20
    return {"w": round(gw), "h": round(ytop[-1] + H + 40) if nl else 80, "pos": pos_out,
            "edges": routed, "outlines": outlines}


def _sep(a, b, width, group, n) -> float:
    s = (width[a] + width[b]) / 2 + (GX if a < n and b < n else 8)
    return s + (2 * PAD + 8 if group[a] != group[b] else 0)


def _outlines(n, group, visible, depth, x, ytop, lanes) -> list[dict]:
    """Per partition, one polygon per run of consecutive layers: the union of the per-layer
    spans of its boxes (and its own edges' lanes beside them), padded: a skyline that hugs the
    nodes and leaves other partitions outside."""
    spans: dict[int, dict[int, list[float]]] = {}
    for v in range(n):
        if visible[v] and group[v] >= 0:
            s = spans.setdefault(group[v], {}).setdefault(depth[v], [x[v], x[v]])
            s[0], s[1] = min(s[0], x[v]), max(s[1], x[v])
    for k, d, g in lanes:
        s = spans.get(g, {}).get(d)
        if s:  # W / 2 - LANE / 2 closer than a box centre would be
            s[0], s[1] = min(s[0], x[k] + (W - LANE) / 2), max(s[1], x[k] - (W - LANE) / 2)
    items: dict[int, list[tuple[float, float, int]]] = {}  # per layer: (left, right, group)
    for v in range(n):
        if visible[v]:
            items.setdefault(depth[v], []).append((x[v] - W / 2, x[v] + W / 2, group[v]))
    for k, d, g in lanes:
        items.setdefault(d, []).append((x[k] - LANE / 2, x[k] + LANE / 2, g))

    def free(d, g, a, b):  # no other partition's box or lane between a and b in layer d
        return all(it[2] == g or it[1] < a - PAD or it[0] > b + PAD for it in items[d])
    for g, by_layer in spans.items():  # fill one-layer notches: a smoother outline
        for d, s in by_layer.items():
            up, dn = by_layer.get(d - 1), by_layer.get(d + 1)
            if up and dn:
                r = min(up[1], dn[1])
                if r > s[1] and free(d, g, s[1] + W / 2, r + W / 2 + PAD):
                    s[1] = r
                lft = max(up[0], dn[0])
                if lft < s[0] and free(d, g, lft - W / 2 - PAD, s[0] - W / 2):
                    s[0] = lft
    out = []
    for g, by_layer in sorted(spans.items()):
        ds = sorted(by_layer)
        runs, cur = [], [ds[0]]
        for d in ds[1:]:
            if d == cur[-1] + 1:
                cur.append(d)
            else:
                runs.append(cur)
                cur = [d]
        runs.append(cur)
        polys = []
        for run in runs:
            right, left = [], []
            for j, d in enumerate(run):
                lx, rx = by_layer[d][0] - W / 2 - PAD, by_layer[d][1] + W / 2 + PAD
                top = ytop[d] - PAD if j == 0 else ytop[d] - GY / 2
                bot = ytop[d] + H + (PAD if j == len(run) - 1 else GY / 2)
                right += [rx, top, rx, bot]
                left = [lx, bot, lx, top] + left
            polys.append([round(c, 1) for c in right + left])
        out.append({"g": g, "polys": polys})
    return out


def report_data(mod, profile: dict | None = None) -> dict:
    lk, m = mod.lookup, mod.manifest
    nodes = sorted(lk.map.nodes, key=lambda n: n.index)
    answers = [lk.onnx_node(n.id)[0] for n in nodes]
    graph_inputs = {t["name"] for t in m["model"]["inputs"]}
    producer = {o: k for k, n in enumerate(nodes) for o in n.outputs if o}
    helper = _helpers(nodes, answers, producer, graph_inputs)
    exprs = {e.id: e for e in lk.map.exprs}
    produced: dict[str, list[str]] = {}
    roles: dict[tuple[str, str], str] = {}
    for nid, eid, role in lk.map.node_exprs:
        roles[(nid, eid)] = role
        if role == "produced":
            produced.setdefault(nid, []).append(eid)
    # Tensor shapes: the boundary specs (what really crosses), else the last Relax binding of
    # the producing node (a single-output node's value).
    tensors: dict[str, list] = {}
    for n in nodes:
        es = sorted((exprs[e] for e in produced.get(n.id, ()) if e in exprs),
                    key=lambda e: e.index)
        if len(n.outputs) == 1 and es and es[-1].shape and not es[-1].shape.startswith("tuple"):
            tensors[n.outputs[0]] = [_shape(es[-1].shape), es[-1].dtype]
    boundary_specs = list(m["model"]["inputs"]) + list(m["model"]["outputs"]) + [
        t for p in m["partitions"] for t in p.get("inputs", []) + p.get("outputs", [])]
    for t in boundary_specs:
        tensors[t["name"]] = [_shape(t.get("shape")), t.get("dtype")]
    node_ms = {r["id"]: r for r in (profile or {}).get("onnx_nodes", [])}
    backends = [p["backend"] for p in m["partitions"]]
    colors = {}
    for b in dict.fromkeys(backends):
        colors[b] = PALETTE.get(b) or EXTRA[len(colors) % len(EXTRA)]
    pindex = {p["id"]: k for k, p in enumerate(m["partitions"])}
    out_nodes, group = [], []
    for k, (n, a) in enumerate(zip(nodes, answers)):
        prof = node_ms.get(n.id)
        group.append(pindex[a["partitions"][0]] if a["partitions"] else -1)
        ex = sorted((exprs[e] for e in a["exprs"] if e in exprs), key=lambda e: e.index)
        out_nodes.append({
            "id": n.id, "name": n.name, "op": n.op_type,
            "backend": (a["backends"] or [None])[0], "partitions": a["partitions"],
            "helper": helper[k], "elided": n.elided, "ins": list(n.inputs),
            "outs": list(n.outputs),
            "exprs": [[e.id, e.var, e.op, _shape(e.shape), e.dtype,
                       roles.get((n.id, e.id), "")] for e in ex],
            "kernels": [kn["kernel"] for kn in a["kernels"] if kn["role"] == "compute"],
            "ms": prof["ms"] if prof else None,
            "shared_with": prof.get("shared_with") if prof else None,
        })
    edges = sorted({(producer[i], k) for k, n in enumerate(nodes) for i in n.inputs
                    if i in producer})
    pullable = [not any(i in graph_inputs for i in n.inputs) for n in nodes]
    visible = [not h for h in helper]
    layouts = {"main": layout(len(nodes), edges, group, visible, pullable)}
    layouts["all"] = layouts["main"] if all(visible) else \
        layout(len(nodes), edges, group, [True] * len(nodes), pullable)
    made_by = {t["name"]: p["id"] for p in m["partitions"] for t in p.get("outputs", [])}
    read_by: dict[str, list[str]] = {}
    for p in m["partitions"]:
        for t in p.get("inputs", []):
            read_by.setdefault(t["name"], []).append(p["id"])
    graph_outputs = {t["name"] for t in m["model"]["outputs"]}
    pprof = {r["partition"]: r for r in (profile or {}).get("partitions", [])}
    parts = []
    for p in m["partitions"]:
        parts.append({
            "id": p["id"], "backend": p["backend"], "ops": len(p["ops"]),
            "kernels": len(p["kernels"]), "why": p.get("why", ""),
            "ms": pprof.get(p["id"], {}).get("ms"),
            "inputs": [[t["name"], _shape(t.get("shape")), t.get("dtype"),
                        made_by.get(t["name"]) or ("graph input" if t["name"] in graph_inputs
                                                   else "constant")]
                       for t in p.get("inputs", [])],
            "outputs": [[t["name"], _shape(t.get("shape")), t.get("dtype"),
                         read_by.get(t["name"], []) + (["graph output"]
                                                       if t["name"] in graph_outputs else [])]
                        for t in p.get("outputs", [])]})
    return {"model": m["model"]["name"], "strategy": m["strategy"], "created": m.get("created_utc"),
            "colors": colors, "nodes": out_nodes, "edges": [list(e) for e in edges],
            "group": group, "tensors": tensors, "graph_inputs": sorted(graph_inputs),
            "graph_outputs": sorted(graph_outputs), "partitions": parts, "layouts": layouts,
            "geometry": {"W": W, "H": H, "PAD": PAD}, "e2e_ms": (profile or {}).get("e2e_ms"),
            "cost_source": "provmap profile (measured, attributed to nodes)" if profile else
            "not measured (`provmap report --measure`, or `--profile PROFILE.json`)"}


@functools.cache
def page() -> str:
    """The page template with its style and script in place (__TITLE__ and __DATA__ left open)."""
    assets = resources.files("provmap.workbench") / "assets"
    text = {name: (assets / name).read_text(encoding="utf-8")
            for name in ("report.html", "report.css", "report.js")}
    return text["report.html"].replace("__CSS__", text["report.css"], 1).replace(
        "__JS__", text["report.js"], 1)


_SCRIPT_SAFE = {ord(c): f"\\u{ord(c):04x}" for c in "<>&\u2028\u2029"}


def render(mod, profile: dict | None = None) -> str:
    data = report_data(mod, profile)
    # Names come from the artifact: no "<" may reach the <script> element ("</script>" ends it,
    # "<!--<script>" makes the parser swallow the page), so every <, > and & is a JSON escape.
    payload = json.dumps(data, separators=(",", ":")).translate(_SCRIPT_SAFE)
    title = html.escape(f"{data['model']} ({data['strategy']})")
    return page().replace("__TITLE__", title).replace("__DATA__", payload)
