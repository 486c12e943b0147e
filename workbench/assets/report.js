window.onerror = function (msg) { document.body.dataset.error = String(msg); };
(function () {
  const D = JSON.parse(document.getElementById("data").textContent);
  const G = D.geometry, N = D.nodes, P = D.partitions, body = document.body.dataset;
  const $ = id => document.getElementById(id);
  const view = $("view"), svg = $("g"), mini = $("mini");
  const esc = s => String(s == null ? "" : s).replace(/[&<>"]/g,
    c => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}[c]));
  const color = n => n.helper || !n.backend ? "#bbb" : D.colors[n.backend];
  const fmt = ms => ms == null ? "-" : ms.toFixed(3) + " ms";
  const dot = " \u00b7 ";
  const pidx = {}; P.forEach((p, g) => { pidx[p.id] = g; });
  const byId = {}; N.forEach((n, i) => { byId[n.id] = i; });
  const prod = {}, cons = {};
  N.forEach((n, i) => {
    n.outs.forEach(t => { prod[t] = i; });
    n.ins.forEach(t => { if (t) (cons[t] = cons[t] || []).push(i); });
  });
  const gin = new Set(D.graph_inputs), gout = new Set(D.graph_outputs);
  // Same-backend partitions alternate outline dash and tint so neighbours stay apart.
  const seen = {}, pstyle = P.map(p => {
    const j = seen[p.backend] = (seen[p.backend] || 0) + 1;
    return {dash: j % 2 ? "" : "7 4", op: j % 2 ? 0.07 : 0.16};
  });
  let L = null, k = 1, helpers = false, selected = null, selPart = null, hits = [], hitAt = -1;

  function short(s, n) { s = String(s); return s.length > n ? "\u2026" + s.slice(1 - n) : s; }
  function pathOf(p) {  // vertical tangents between layers, straight down through lanes
    let d = "M" + p[0] + " " + p[1];
    for (let j = 2; j < p.length; j += 2) {
      const x0 = p[j - 2], y0 = p[j - 1], x1 = p[j], y1 = p[j + 1], m = (y0 + y1) / 2;
      d += x0 === x1 ? "L" + x1 + " " + y1 : "C" + [x0, m, x1, m, x1, y1].join(" ");
    }
    return d;
  }
  function draw() {
    L = D.layouts[helpers ? "all" : "main"];
    const out = ['<g id="world">'], labels = [];
    for (const o of L.outlines) {
      const p = P[o.g], c = D.colors[p.backend], st = pstyle[o.g];
      out.push('<g class="part" data-p="' + o.g + '">');
      o.polys.forEach((q, j) => {
        let d = "M" + q[0] + " " + q[1];
        for (let i = 2; i < q.length; i += 2) d += "L" + q[i] + " " + q[i + 1];
        out.push('<path d="' + d + 'Z" fill="' + c + '" fill-opacity="' + st.op +
          '" stroke="' + c + '" stroke-dasharray="' + st.dash + '"/>');
        const t = p.id + dot + p.backend + (j ? "" : dot + p.ops + " ops");
        labels.push('<g class="plabel" data-p="' + o.g + '" transform="translate(' +
          (q[q.length - 2] + 8) + "," + (q[q.length - 1] - 8) + ')"><rect width="' +
          (t.length * 6.4 + 10) + '" height="16" rx="3" fill="' + c +
          '" stroke="#0006"/><text x="5" y="12">' + esc(t) + "</text></g>");
      });
      out.push("</g>");
    }
    for (const [u, v, pts] of L.edges) {
      const a = N[u], b = N[v];
      const cls = a.helper ? "he" : a.backend !== b.backend ? "xb" :
        a.partitions[0] !== b.partitions[0] ? "xp" : "";
      out.push('<path class="e ' + cls + '" data-u="' + u + '" data-v="' + v + '" d="' +
        pathOf(pts) + '"/>');
    }
    let shown = 0;
    N.forEach((n, i) => {
      const q = L.pos[i];
      if (!q) return;
      shown++;
      const sub = n.op + (n.partitions.length ? dot + n.partitions[0] : "") +
        (n.ms == null ? "" : dot + n.ms.toFixed(3) + "ms");
      out.push('<g class="n' + (n.helper ? " h" : "") + '" data-i="' + i + '" data-id="' +
        esc(n.id) + '" transform="translate(' + (q[0] - G.W / 2) + "," + q[1] +
        ')"><rect width="' + G.W +
        '" height="' + G.H + '" rx="4" fill="' + color(n) + '"/><text x="5" y="12">' +
        esc(short(n.name || n.op, 26)) + '</text><text class="op" x="5" y="25">' + esc(sub) +
        "</text><title>" + esc((n.name || "(unnamed)") + " [" + n.op + "] " + n.id) +
        "</title></g>");
    });
    out.push(labels.join(""), "</g>");  // labels last: on top of the edges
    svg.setAttribute("viewBox", "0 0 " + L.w + " " + L.h);
    svg.innerHTML = out.join("");
    body.shown = String(shown);
    body.helpers = helpers ? "shown" : "hidden";
    setZoom(k); miniBase = null; drawMini(); mark();
  }
  // ---- zoom and pan (the view scrolls; zoom resizes the svg about a fixed point) ---------
  function setZoom(z, fx, fy) {
    z = Math.max(0.02, Math.min(3, z));
    if (fx == null) { fx = view.clientWidth / 2; fy = view.clientHeight / 2; }
    const gx = (view.scrollLeft + fx - svg.offsetLeft) / k, gy = (view.scrollTop + fy) / k;
    k = z; svg.setAttribute("width", L.w * k); svg.setAttribute("height", L.h * k);
    view.scrollLeft = gx * k + svg.offsetLeft - fx; view.scrollTop = gy * k - fy;
    $("zl").textContent = Math.round(k * 100) + "%"; drawMini();
  }
  function centerOn(x, y) {
    if (k < 0.5) setZoom(1);
    view.scrollLeft = x * k + svg.offsetLeft - view.clientWidth / 2;
    view.scrollTop = y * k - view.clientHeight / 2;
  }
  $("zin").onclick = () => setZoom(k * 1.25);
  $("zout").onclick = () => setZoom(k / 1.25);
  $("z1").onclick = () => setZoom(1);
  $("zfit").onclick = () => {
    setZoom(Math.min(view.clientWidth / L.w, view.clientHeight / L.h));
    view.scrollLeft = 0; view.scrollTop = 0;
  };
  view.addEventListener("wheel", e => {
    if (!e.ctrlKey && !e.metaKey) return;  // plain wheel scrolls; ctrl+wheel (or pinch) zooms
    e.preventDefault();
    const r = view.getBoundingClientRect();
    setZoom(k * Math.exp(-e.deltaY * 0.002), e.clientX - r.left, e.clientY - r.top);
  }, {passive: false});
  let drag = null;
  view.addEventListener("mousedown", e => {
    const r = view.getBoundingClientRect();  // not on the scrollbars
    if (e.button || e.clientX - r.left >= view.clientWidth ||
        e.clientY - r.top >= view.clientHeight) return;
    e.preventDefault();
    drag = {x: e.clientX, y: e.clientY, sl: view.scrollLeft, st: view.scrollTop, moved: false};
  });
  window.addEventListener("mousemove", e => {
    if (!drag) return;
    if (Math.abs(e.clientX - drag.x) + Math.abs(e.clientY - drag.y) > 4) {
      drag.moved = true; view.classList.add("drag");
    }
    view.scrollLeft = drag.sl - (e.clientX - drag.x);
    view.scrollTop = drag.st - (e.clientY - drag.y);
  });
  window.addEventListener("mouseup", () => {
    setTimeout(() => { drag = null; }, 0); view.classList.remove("drag");
  });
  view.addEventListener("scroll", () => drawMini());
  // ---- overview map ---------------------------------------------------------------------
  let miniBase = null, ms = 1;
  function drawMini() {
    if (!L) return;
    ms = Math.min(110 / L.w, Math.max(60, view.clientHeight - 40) / L.h);
    const w = Math.max(30, Math.ceil(L.w * ms)), h = Math.ceil(L.h * ms);
    if (!miniBase) {
      mini.width = w; mini.height = h;
      miniBase = document.createElement("canvas"); miniBase.width = w; miniBase.height = h;
      const c = miniBase.getContext("2d");
      for (const o of L.outlines) {
        c.fillStyle = D.colors[P[o.g].backend] + "40";
        for (const q of o.polys) {
          c.beginPath(); c.moveTo(q[0] * ms, q[1] * ms);
          for (let i = 2; i < q.length; i += 2) c.lineTo(q[i] * ms, q[i + 1] * ms);
          c.fill();
        }
      }
      N.forEach((n, i) => {
        const q = L.pos[i];
        if (!q) return;
        c.fillStyle = color(n);
        c.fillRect((q[0] - G.W / 2) * ms, q[1] * ms, Math.max(2, G.W * ms), Math.max(1, G.H * ms));
      });
    }
    const c = mini.getContext("2d");
    c.clearRect(0, 0, w, h); c.drawImage(miniBase, 0, 0);
    c.strokeStyle = "#d00"; c.lineWidth = 1.5;
    c.strokeRect((view.scrollLeft - svg.offsetLeft) / k * ms, view.scrollTop / k * ms,
      Math.max(3, view.clientWidth / k * ms), Math.max(3, view.clientHeight / k * ms));
  }
  function miniGo(e) {
    const r = mini.getBoundingClientRect();
    view.scrollLeft = (e.clientX - r.left) / ms * k + svg.offsetLeft - view.clientWidth / 2;
    view.scrollTop = (e.clientY - r.top) / ms * k - view.clientHeight / 2;
  }
  let miniDrag = false;
  mini.addEventListener("mousedown", e => { e.stopPropagation(); miniDrag = true; miniGo(e); });
  window.addEventListener("mousemove", e => { if (miniDrag) miniGo(e); });
  window.addEventListener("mouseup", () => { miniDrag = false; });
  // ---- selection and details ------------------------------------------------------------
  const link = i => '<a data-node="' + i + '">' + esc(N[i].name || N[i].op) + "</a>";
  const plink = id => !(id in pidx) ? esc(id) : '<a data-part="' + pidx[id] +
    '"><span class="sw" style="background:' + D.colors[P[pidx[id]].backend] + '"></span>' +
    esc(id) + "</a>";
  const shp = t => D.tensors[t] || [null, null];
  const row = cells => "<tr>" + cells.map(c => "<td>" + c + "</td>").join("") + "</tr>";
  const kv = rows => '<table class="kv">' + rows.map(row).join("") + "</table>";
  const tensor = (t, s, d) => ["<code>" + esc(t) + "</code>", esc(s || "-"), esc(d || "-")];
  function table(rows, last) {
    return '<table><tr><th>tensor</th><th style="width:78px">shape</th>' +
      '<th style="width:58px">dtype</th><th>' + last + "</th></tr>" + rows.map(row).join("") +
      "</table>";
  }
  const title = (name, badge, c) => '<div style="font-size:14px"><b>' + esc(name) +
    '</b> <span class="badge" style="background:' + c + '">' + esc(badge) + "</span></div>";
  function showNode(i) {
    const n = N[i], part = n.partitions[0];
    const ins = n.ins.filter(t => t).map(t => {
      const p = prod[t], pp = p != null && N[p].partitions[0];
      const from = p != null ? link(p) + (pp && pp !== part ? " (" + plink(pp) + ", boundary)" : "")
        : gin.has(t) ? "graph input" : "weight (initializer)";
      return tensor(t, ...shp(t)).concat([from]);
    });
    const outs = n.outs.filter(t => t).map(t => {
      const cs = cons[t] || [], other = new Set();
      cs.forEach(c => { const q = N[c].partitions[0]; if (q && q !== part) other.add(q); });
      const to = cs.slice(0, 3).map(link).join(", ") +
        (cs.length > 3 ? " +" + (cs.length - 3) : "") +
        (other.size ? " (boundary \u2192 " + [...other].map(plink).join(", ") + ")" : "") +
        (gout.has(t) ? " graph output" : "");
      return tensor(t, ...shp(t)).concat([to || "-"]);
    });
    const ex = n.exprs.map(e => ["<code>" + esc(e[0]) + "</code> " + esc(e[1]), esc(e[3] || "-"),
      esc(e[4] || "-"), esc(e[2]) + (e[5] === "produced" ? "" :
        ' <span class="muted">(' + esc(e[5]) + ")</span>")]);
    const rows = [["op type", esc(n.op)], ["ID", "<code>" + esc(n.id) + "</code>"],
      ["partition", n.partitions.map(plink).join(", ") || "-"],
      ["backend", esc(n.backend || "none")]];
    if (n.helper || n.elided)
      rows.push(["helper", esc(n.elided || "constant: computes nothing at run time")]);
    rows.push(["cost", fmt(n.ms) + (n.shared_with ?
      " (kernel shared with " + esc(n.shared_with.join(", ")) + ")" : "")]);
    rows.push(["kernels", "<code>" + (n.kernels.map(esc).join("<br>") || "-") + "</code>"]);
    $("detail").className = "";
    $("detail").innerHTML = title(n.name || "(unnamed)", n.op, color(n)) + kv(rows) +
      "<h4>Inputs</h4>" + (ins.length ? table(ins, "from") : "none") +
      "<h4>Outputs</h4>" + table(outs, "to") + "<h4>Relax bindings</h4>" +
      (ex.length ? table(ex, "op").replace("<th>tensor</th>", "<th>expr</th>") : "none");
  }
  function showPart(g) {
    const p = P[g];
    const ins = p.inputs.map(t => tensor(t[0], t[1], t[2]).concat([plink(t[3])]));
    const outs = p.outputs.map(t => tensor(t[0], t[1], t[2]).concat([t[3].map(plink).join(", ")
      || "-"]));
    $("detail").className = "";
    $("detail").innerHTML = title("Partition " + p.id, p.backend, D.colors[p.backend]) +
      kv([["ops", p.ops], ["kernels", p.kernels], ["cost", fmt(p.ms)],
        ["why", '<div class="why">' + esc(p.why || "-") + "</div>"]]) +
      "<h4>Boundary inputs</h4>" + (ins.length ? table(ins, "from") : "none") +
      "<h4>Boundary outputs</h4>" + (outs.length ? table(outs, "to") : "none");
  }
  function mark() {
    svg.querySelectorAll(".sel,.hl,.hit").forEach(e => e.classList.remove("sel", "hl", "hit"));
    const hs = new Set(hits);
    svg.querySelectorAll(".n").forEach(e => { if (hs.has(+e.dataset.i)) e.classList.add("hit"); });
    svg.classList.toggle("searching", hits.length > 0);
    if (selected != null) {
      const e = svg.querySelector('.n[data-i="' + selected + '"]');
      if (e) e.classList.add("sel");
      svg.querySelectorAll('.e[data-u="' + selected + '"],.e[data-v="' + selected + '"]')
        .forEach(e => e.classList.add("hl"));
    }
    svg.querySelectorAll('.part[data-p="' + selPart + '"]').forEach(e => e.classList.add("sel"));
    document.querySelectorAll(".pcard").forEach(e =>
      e.classList.toggle("sel", +e.dataset.p === selPart));
  }
  function hash(kv) {
    const h = new URLSearchParams(location.hash.slice(1));
    for (const key in kv) { if (kv[key] == null) h.delete(key); else h.set(key, kv[key]); }
    history.replaceState(null, "", "#" + h.toString());
  }
  function select(i, center) {
    if (N[i].helper && !helpers) { helpers = true; $("helpers").checked = true; draw(); }
    selected = i; selPart = null; showNode(i); mark(); hash({node: N[i].id, partition: null});
    body.selected = N[i].id;
    if (center) { const q = L.pos[i]; centerOn(q[0], q[1] + G.H / 2); }
  }
  function selectPart(g, center) {
    selPart = g; selected = null; showPart(g); mark(); hash({partition: P[g].id, node: null});
    body.selected = P[g].id;
    const o = L.outlines.find(o => o.g === g);
    if (!center || !o) return;
    const q = o.polys[0];
    centerOn(q[q.length - 2] + 200, q[q.length - 1] + 150);
  }
  svg.addEventListener("click", e => {
    if (drag && drag.moved) return;
    const n = e.target.closest(".n"), pl = e.target.closest(".plabel");
    if (n) select(+n.dataset.i, false);
    else if (pl) selectPart(+pl.dataset.p, false);
  });
  document.addEventListener("click", e => {
    const a = e.target.closest("a[data-node],a[data-part],.pcard");
    if (!a || svg.contains(a)) return;
    if (a.dataset.node != null) select(+a.dataset.node, true);
    else selectPart(+(a.dataset.p != null ? a.dataset.p : a.dataset.part), true);
  });
  // ---- search: name (substring), op type, ID (prefix) -----------------------------------
  function search(text) {
    const q = text.trim().toLowerCase();
    let hidden = 0;
    hits = []; hitAt = -1;
    if (q) N.forEach((n, i) => {
      const op = n.op.toLowerCase();
      if (n.id.toLowerCase().startsWith(q) || n.name.toLowerCase().includes(q) || op === q ||
          (q.length > 2 && op.includes(q))) { if (L.pos[i]) hits.push(i); else hidden++; }
    });
    body.searchHits = String(hits.length);
    $("hits").textContent = !q ? "" : hits.length + " match" + (hits.length === 1 ? "" : "es") +
      (hidden ? " (+" + hidden + " among hidden helper nodes)" : "") +
      (hits.length ? "; Enter: next" : "");
    mark(); hash({search: q ? text.trim() : null});
  }
  function nextHit(step) {
    if (!hits.length) return;
    hitAt = (hitAt + step + hits.length) % hits.length;
    select(hits[hitAt], true); $("hits").textContent = (hitAt + 1) + " of " + hits.length;
  }
  $("q").addEventListener("input", () => search($("q").value));
  $("q").addEventListener("keydown", e => { if (e.key === "Enter") nextHit(e.shiftKey ? -1 : 1); });
  $("qn").onclick = () => nextHit(1);
  $("qp").onclick = () => nextHit(-1);
  $("helpers").addEventListener("change", () => {
    helpers = $("helpers").checked; hash({helpers: helpers ? "1" : null});
    draw(); search($("q").value);
  });
  // ---- static panels --------------------------------------------------------------------
  const nh = N.filter(n => n.helper).length;
  $("hcount").textContent = "show helper nodes (" + nh + ": constants, folded)";
  $("helpers").disabled = !nh;
  const line = (c, t) => '<span class="ln"><i style="border-color:' + c + '"></i>' + t + "</span>";
  $("legend").innerHTML = Object.entries(D.colors).map(([b, c]) => '<span style="background:' +
    c + '">' + esc(b) + "</span>").join("") + line("#d00", "crosses backends") +
    line("#8a2be2", "crosses partitions");
  $("summary").innerHTML = "<b>" + esc(D.model) + "</b>" + dot + "strategy " + esc(D.strategy) +
    "<br>" + N.length + " ONNX nodes (" + nh + " helpers), " + P.length +
    " partitions; end to end: " + fmt(D.e2e_ms) + '<br><span class="muted">cost: ' +
    esc(D.cost_source) + "</span>";
  $("parts").innerHTML = P.map((p, g) => '<div class="pcard" data-p="' + g +
    '"><span class="sw" style="background:' + D.colors[p.backend] + '"></span><b>' + esc(p.id) +
    "</b> " + esc(p.backend) + dot + p.ops + " ops" + dot + p.kernels + " kernels" + dot +
    fmt(p.ms) + dot + "in " + p.inputs.length + " / out " + p.outputs.length +
    '<div class="why">' + esc(p.why || "") + "</div></div>").join("");
  // ---- start: state from the URL hash ---------------------------------------------------
  function fromHash() {
    const h = new URLSearchParams(location.hash.slice(1)), want = h.get("helpers") === "1";
    if (want !== helpers || !L) { helpers = want; $("helpers").checked = want; draw(); }
    const s = h.get("search") || "", id = h.get("node"), part = h.get("partition");
    $("q").value = s; search(s);
    if (id && id in byId) select(byId[id], true);
    else if (part && part in pidx) selectPart(pidx[part], true);
    else if (hits.length) { const q = L.pos[hits[0]]; centerOn(q[0], q[1]); }
    if (h.get("zoom")) setZoom(parseFloat(h.get("zoom")));  // about the centre: keeps the selection
  }
  k = Math.max(0.5, Math.min(1, (view.clientWidth - 20) / D.layouts.main.w));
  fromHash();
  window.addEventListener("hashchange", fromHash);
  body.nodes = String(N.length);
  body.partitions = String(P.length);
  body.rendered = "ok";
})();
