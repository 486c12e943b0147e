"""Which original ONNX nodes each kernel of ONNX Runtime's optimized graph implements.

ORT reports no provenance of its own, so it is derived here from tensor names; a separate
module because this derivation is a concept of its own, tested apart from running sessions.

At build time one session is created with ``optimized_model_filepath`` set, so ORT
writes the graph it actually executes; every node of that optimized graph is one `KernelInfo`
(kind ``"ort-node"``, ``op`` its op_type).  Which original nodes a kernel implements is derived
from tensor names, because ORT keeps the names of the tensors it does not rewrite:

* a tensor name that exists in the cut model is *original*;
* an optimized node is *anchored* to original tensors it computes: its own original outputs, or,
  when all of its outputs were renamed (NCHWc nodes write ``reorder_token_N``), the outputs of
  the original node whose name it kept (``n9``) or of the tensor its name was derived from
  (``r1_nchwc`` computes ``r1`` in blocked layout).  Such a name is given before the NCHWc
  transformer fuses a residual Add (the Conv's 4th, "Sum" input) and an ``activation`` into the
  node, so a name anchor is extended over an original Add/Sum that reads an input the anchor
  does not explain, then over a node of the ``activation`` op type (ResNet's Conv+BN+Add+Relu
  is then one kernel, not smeared over the next convolutions);
* A(K): the nearest original non-initializer tensors upstream of K (walking back through renamed
  tensors, stopping at anchored producers); D(K): K's anchors, or else the nearest anchored
  tensors downstream;
* covered(K): original nodes on a path A(K) -> D(K) that does not pass through another tensor
  of A(K) (producers of D in, producers of A out);
  with no A (a pure constant computation) the ancestors of D not reachable from any graph input;
  a kernel that converts a tensor to itself (ReorderOutput: A = D) covers D's producer.

Nodes that end up in no kernel (an Identity ORT removed, a MatMul folded into a Gemm whose
name is someone else's, shape helpers ORT constant-folded) are attached to the kernels that
cover the nodes consuming their outputs, or, for a graph output, to the kernels covering their
producers.  So every op node of the subgraph is in at least one kernel.  Kernels can share
nodes: ORT's Gemm rewrite of a 3-D MatMul+Add is Reshape -> Gemm -> Reshape, and all three
carry the MatMul, the Add and the following Reshape; Reorder nodes carry the node whose tensor
they convert.
"""

from __future__ import annotations

import re
from collections import deque
from typing import TYPE_CHECKING

import onnx

from ..backend import KernelInfo

if TYPE_CHECKING:  # pragma: no cover
    from ..subgraph import Subgraph

_NCHWC_SUFFIX = re.compile(r"_nchwc(_token_\d+)?$")


def map_kernels(model: onnx.ModelProto, optimized: onnx.ModelProto,
                 sub: "Subgraph") -> tuple[list[KernelInfo], str]:
    g = model.graph
    nodes = list(g.node)
    n_orig = len(nodes)
    inits = {t.name for t in g.initializer}
    graph_inputs = [i.name for i in g.input if i.name not in inits]
    original: set[str] = set(inits) | set(graph_inputs)
    producer: dict[str, int] = {}
    consumers: dict[str, list[int]] = {}
    by_name: dict[str, list[int]] = {}
    for p, n in enumerate(nodes):
        for x in n.input:
            if x:
                original.add(x)
                consumers.setdefault(x, []).append(p)
        for o in n.output:
            if o:
                original.add(o)
                producer[o] = p
        if n.name:
            by_name.setdefault(n.name, []).append(p)

    # nodes reachable from a graph input (everything else is constant computation)
    live = _descendants(graph_inputs, nodes, consumers)

    og = optimized.graph
    onodes = list(og.node)
    o_producer: dict[str, int] = {}
    o_consumers: dict[str, list[int]] = {}
    for k, n in enumerate(onodes):
        for o in n.output:
            if o:
                o_producer[o] = k
        for x in n.input:
            if x:
                o_consumers.setdefault(x, []).append(k)

    def hint(k: int) -> list[str]:
        """Original tensors an optimized node computes although all its outputs were renamed."""
        n = onodes[k]
        if n.name in by_name:
            return [o for p in by_name[n.name] for o in nodes[p].output if o]
        m = _NCHWC_SUFFIX.search(n.name or "")
        if m and n.name[: m.start()] in producer:
            return [n.name[: m.start()]]
        return []

    def anc_tensors(ts, stop: set[str]) -> set[str]:
        """Tensors upstream of `ts`, not walking past the tensors in `stop`."""
        seen = set(ts)
        stack = list(ts)
        while stack:
            t = stack.pop()
            p = producer.get(t) if t not in stop else None
            if p is None:
                continue
            for x in nodes[p].input:
                if x and x not in seen:
                    seen.add(x)
                    stack.append(x)
        return seen

    def extend(k: int, end: list[str], a: set[str]) -> list[str]:
        """A name hint gives the tensor a node computed when it was *named*; NCHWc later fuses
        a residual Add ("Sum" input) and an activation into it.  Follow the original graph over
        an Add/Sum that reads an input this node has but its hint does not explain, then over
        the node's `activation`."""
        n = onodes[k]
        for _ in range(4):
            if len(end) != 1:
                break
            e = end[0]
            unused = a - anc_tensors([e], a)
            cs = consumers.get(e, [])
            if not unused or len(cs) != 1 or not set(nodes[cs[0]].input) & unused:
                break
            end = [o for o in nodes[cs[0]].output if o]
        act = next((onnx.helper.get_attribute_value(x) for x in n.attribute
                    if x.name == "activation"), None)
        if isinstance(act, bytes):
            act = act.decode()
        if act and len(end) == 1:
            cs = consumers.get(end[0], [])
            if len(cs) == 1 and nodes[cs[0]].op_type == act:
                end = [o for o in nodes[cs[0]].output if o]
        return end

    def upstream(k: int) -> set[str]:
        found: set[str] = set()
        seen: set[int] = set()
        stack = [x for x in onodes[k].input if x]
        while stack:
            t = stack.pop()
            if t in original:
                if t not in inits:
                    found.add(t)
                continue
            p = o_producer.get(t)
            if p is None or p in seen:
                continue
            seen.add(p)
            if anchor_cache[p]:
                found.update(x for x in anchor_cache[p] if x not in inits)
            else:
                stack.extend(x for x in onodes[p].input if x)
        return found

    # Anchors in topological order, so that a node's upstream walk sees its producers' final
    # (extended) anchors.
    anchor_cache: list[list[str]] = [[] for _ in onodes]
    ups: list[set[str] | None] = [None] * len(onodes)
    for k in _topo_order(onodes, o_producer):
        ups[k] = upstream(k)
        own = [o for o in onodes[k].output if o in original]
        if own:
            anchor_cache[k] = own
        else:
            h = hint(k)
            anchor_cache[k] = extend(k, h, ups[k]) if h else []

    def downstream(k: int) -> set[str]:
        if anchor_cache[k]:
            return set(anchor_cache[k])
        found: set[str] = set()
        seen: set[int] = {k}
        stack = [o for o in onodes[k].output if o]
        while stack:
            t = stack.pop()
            if t in original:
                found.add(t)
                continue
            for c in o_consumers.get(t, ()):
                if c in seen:
                    continue
                seen.add(c)
                if anchor_cache[c]:
                    found.update(anchor_cache[c])
                else:
                    stack.extend(o for o in onodes[c].output if o)
        return found

    def ancestors(ds: set[str], stop: set[str]) -> set[int]:
        out: set[int] = set()
        stack = [d for d in ds if d not in stop]
        seen_t: set[str] = set(stack)
        while stack:
            t = stack.pop()
            p = producer.get(t)
            if p is None or p in out:
                continue
            out.add(p)
            for x in nodes[p].input:
                if x and x not in stop and x not in seen_t:
                    seen_t.add(x)
                    stack.append(x)
        return out

    def reached_from(a: set[str], region: set[int]) -> set[int]:
        """The nodes of `region` that some tensor of `a` reaches; walks `region` only, so a
        kernel costs the size of its own region, not of everything downstream of it."""
        reach: dict[int, bool] = {}
        for start in region:
            stack = [start]
            while stack:
                p = stack[-1]
                if p in reach:
                    stack.pop()
                    continue
                ins = [x for x in nodes[p].input if x]
                todo = [q for x in ins if x not in a
                        for q in (producer.get(x),) if q in region and q not in reach]
                if todo:
                    stack.extend(todo)
                    continue
                stack.pop()
                reach[p] = any(x in a or reach.get(producer.get(x, -1), False) for x in ins)
        return {p for p, r in reach.items() if r}

    covered_all: list[set[int]] = []
    for k in range(len(onodes)):
        a = ups[k]
        d = downstream(k)
        if a:
            # = ancestors(d, a) & descendants(a): every node on a path from A into a node of
            # the region lies in the region itself (its tensors are upstream of D and not in A)
            cov = reached_from(a, ancestors(d, a))
        else:
            cov = ancestors(d, set()) - live
        cov -= {producer[t] for t in a if t in producer}
        if not cov:
            cov = {producer[t] for t in d if t in producer}
        covered_all.append(cov)

    attach_orphans(covered_all, nodes, producer, consumers, set(range(n_orig)))

    kernels: list[KernelInfo] = []
    names_used: dict[str, int] = {}
    lines = []
    for k, n in enumerate(onodes):
        name = n.name or f"op_{k}"
        if name in names_used:
            names_used[name] += 1
            name = f"{name}#{names_used[name]}"
        else:
            names_used[name] = 0
        kernels.append(KernelInfo(name=name, kind="ort-node", nodes=sorted(covered_all[k]),
                                  op=n.op_type))
        dom = f" [{n.domain}]" if n.domain else ""
        covers = ", ".join(nodes[p].name or f"#{p}" for p in sorted(covered_all[k]))
        lines.append(f"{name}: {n.op_type}{dom}({', '.join(n.input)}) -> "
                     f"{', '.join(n.output)}   # covers: {covers}")
    return kernels, "\n".join(lines) + "\n"


def _topo_order(onodes, o_producer) -> list[int]:
    """Kahn order of the optimized graph (ORT writes it sorted; this does not rely on it)."""
    deps = [{o_producer[x] for x in n.input if x in o_producer} for n in onodes]
    users: dict[int, list[int]] = {}
    for k, ds in enumerate(deps):
        for d in ds:
            users.setdefault(d, []).append(k)
    left = [len(ds) for ds in deps]
    queue = deque(k for k, c in enumerate(left) if c == 0)
    order = []
    while queue:
        k = queue.popleft()
        order.append(k)
        for u in users.get(k, ()):
            left[u] -= 1
            if left[u] == 0:
                queue.append(u)
    if len(order) < len(onodes):  # a cycle cannot happen in a valid graph; keep going anyway
        order += [k for k in range(len(onodes)) if k not in set(order)]
    return order


def _descendants(tensors, nodes, consumers) -> set[int]:
    out: set[int] = set()
    queue = deque(tensors)
    while queue:
        t = queue.popleft()
        for c in consumers.get(t, ()):
            if c not in out:
                out.add(c)
                queue.extend(o for o in nodes[c].output if o)
    return out


def attach_orphans(covered: list[set[int]], nodes, producer, consumers, wanted: set[int]) -> None:
    """Give every node in `wanted` that no kernel covers the kernels of its consumers (or, for a
    node nobody consumes, of its producers); a passthrough subgraph may leave some uncovered."""
    kernels_of: dict[int, set[int]] = {}
    for k, cov in enumerate(covered):
        for p in cov:
            kernels_of.setdefault(p, set()).add(k)

    def nxt(p: int, forward: bool) -> set[int]:
        if forward:
            return {c for o in nodes[p].output if o for c in consumers.get(o, ())}
        return {producer[x] for x in nodes[p].input if x in producer}

    def via(p: int, forward: bool, memo: dict[int, set[int]]) -> set[int]:
        """The kernels of the nearest covered nodes reached through uncovered ones.  Memoized
        and without recursion: a long run of orphans (Identity after Identity) would otherwise
        be walked once per orphan, and overflow the stack."""
        stack = [p]
        entered: set[int] = set()  # a cycle (never in a valid graph) must not loop forever
        while stack:
            q = stack[-1]
            if q in memo:
                stack.pop()
                continue
            if q in kernels_of:
                memo[q] = kernels_of[q]
                stack.pop()
                continue
            entered.add(q)
            todo = [r for r in nxt(q, forward) if r not in memo and r not in entered]
            if todo:
                stack.extend(todo)
                continue
            stack.pop()
            memo[q] = set().union(*(memo.get(r, ()) for r in nxt(q, forward)))
        return memo[p]

    orphans = sorted(wanted - set(kernels_of))
    found = {}
    ahead: dict[int, set[int]] = {}
    behind: dict[int, set[int]] = {}
    for p in orphans:
        found[p] = via(p, True, ahead) or via(p, False, behind)
    for p, ks in found.items():
        for k in ks:
            covered[k].add(p)
