"""Content-derived, rename-proof IDs for ONNX nodes and the Relax bindings they produce.

Why content-derived: users compare maps across runs, machines and re-exports of "the same" model.
Node names are not trustworthy for that (they can be empty, duplicated, or rewritten by any tool),
and graph order changes whenever independent nodes are reordered.  So an ID is a Merkle hash of
what a node *computes*: its op type, domain, canonicalised attributes and the hashes of whatever
feeds it (graph inputs by position and type, initializers by their bytes, other nodes by their
hash plus output index).  Nothing position- or name-based enters except graph input positions.

Two nodes can compute literally the same thing (the light models' weights are ConstantOfShape
nodes, several identical).  Such ties are broken by a downstream signature (what consumes each
copy, recursively, and at which graph output it ends), which is still independent of names and
order; only fully automorphic copies fall back to file order, and then swapping them is
unobservable anyway.

Printable IDs are short prefixes ("n" + 12 hex digits) of a 128-bit digest.  Collision
detection: if two different digests share a prefix, both are lengthened until they differ.
"""

from __future__ import annotations

import hashlib
import struct
from collections import defaultdict
from dataclasses import dataclass

import onnx
from onnx import numpy_helper

from . import weights

SHORT = 12  # hex digits in a printed ID (48 bits: collisions are detected, not assumed away)


def _h(*parts) -> bytes:
    m = hashlib.blake2b(digest_size=16)
    for p in parts:
        if isinstance(p, (bytes, memoryview)):
            b = p
        elif isinstance(p, str):
            b = p.encode()
        elif isinstance(p, int):
            b = str(p).encode()
        elif isinstance(p, (list, tuple)):
            b = _h(*p)
        else:
            raise TypeError(type(p))
        m.update(struct.pack("<I", b.nbytes if isinstance(b, memoryview) else len(b)))
        m.update(b)
    return m.digest()


def tensor_digest(t: onnx.TensorProto) -> bytes:
    """Hash of a tensor's type, shape and values (not its name).  A weight left in its file
    (provenance.weights) is hashed from the file's map: the same bytes, no copy."""
    if weights.is_lazy(t):
        return _h("tensor", str(t.data_type), list(map(str, t.dims)), weights.raw_view(t))
    arr = numpy_helper.to_array(t)
    return _h("tensor", str(t.data_type), list(map(str, t.dims)), arr.tobytes())


def model_sha256(model: onnx.ModelProto) -> str:
    """A whole model's identity (graph, weights, metadata), the one artifacts record: the same
    bytes whichever process serializes it, unlike the file, which tools may re-encode.  Weights
    left in their file are streamed into it (provenance.weights): the same value as the model
    loaded whole."""
    return weights.model_sha256(model)


def outer_references(graph: onnx.GraphProto) -> list[str]:
    """Names a subgraph (If/Loop/Scan body) reads from the enclosing scope, in first-use order.

    ONNX lets a body read any outer tensor without listing it; a cut that keeps such a node must
    still feed those tensors, so they count as the node's inputs.
    """
    defined = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    out: list[str] = []
    for n in graph.node:
        for x in list(n.input) + [r for a in n.attribute for g in _subgraphs(a)
                                  for r in outer_references(g)]:
            if x and x not in defined and x not in out:
                out.append(x)
        defined.update(o for o in n.output if o)
    return out


def _subgraphs(a: onnx.AttributeProto) -> list[onnx.GraphProto]:
    if a.type == onnx.AttributeProto.GRAPH:
        return [a.g]
    if a.type == onnx.AttributeProto.GRAPHS:
        return list(a.graphs)
    return []


def node_inputs(node: onnx.NodeProto) -> list[str]:
    """Explicit inputs, then the outer-scope tensors its subgraphs read (see outer_references)."""
    extra = [r for a in node.attribute for g in _subgraphs(a) for r in outer_references(g)]
    out = list(node.input)
    for r in extra:
        if r not in out:
            out.append(r)
    return out


def _graph_digest(g: onnx.GraphProto) -> bytes:
    # Subgraph attributes (If/Loop bodies): hash their content without names; what a body reads
    # from the enclosing scope enters by position here and by value in the owner node's inputs.
    refs = outer_references(g)
    ids = compute_node_ids(g, outer={r: _h("outer", k) for k, r in enumerate(refs)})
    return _h("graph", [d.hex() for d in ids.node_digest], [ids.tensor_key.get(o.name, b"").hex()
                                                              for o in g.output])


def _attr_digest(a: onnx.AttributeProto) -> bytes:
    T = onnx.AttributeProto
    if a.type == T.FLOAT:
        v = struct.pack("<f", a.f)
    elif a.type == T.INT:
        v = str(a.i).encode()
    elif a.type == T.STRING:
        v = a.s
    elif a.type == T.TENSOR:
        v = tensor_digest(a.t)
    elif a.type == T.GRAPH:
        v = _graph_digest(a.g)
    elif a.type == T.FLOATS:
        v = struct.pack(f"<{len(a.floats)}f", *a.floats)
    elif a.type == T.INTS:
        v = ",".join(map(str, a.ints)).encode()
    elif a.type == T.STRINGS:
        v = _h(*a.strings)
    elif a.type == T.TENSORS:
        v = _h(*[tensor_digest(t) for t in a.tensors])
    elif a.type == T.GRAPHS:
        v = _h(*[_graph_digest(g) for g in a.graphs])
    else:  # sparse tensors, type protos: rare; serialized form is deterministic enough
        v = a.SerializeToString(deterministic=True)
    return _h(a.name, str(a.type), v)


def _type_sig(vi: onnx.ValueInfoProto) -> str:
    t = vi.type.tensor_type
    dims = [d.dim_param if d.HasField("dim_param") else str(d.dim_value) for d in t.shape.dim]
    return f"{t.elem_type}:{'x'.join(dims)}"


class GraphOrderError(ValueError):
    """A node reads a tensor that nothing defines (or the graph has a cycle)."""


@dataclass
class NodeIds:
    node_digest: list[bytes]       # per node, in graph order: content digest
    node_key: list[bytes]          # per node: digest disambiguated among identical copies
    node_id: list[str]             # per node: printable short ID
    tensor_key: dict[str, bytes]   # tensor name -> content digest of the value
    topo_order: list[int]          # node indices in a deterministic topological order


def topological_order(graph: onnx.GraphProto, known) -> list[int]:
    """Node indices in a deterministic topological order, robust to files that are not sorted.

    `known` holds the names defined before any node runs (graph inputs, initializers, outer
    scope).  Depth-first from each node in file order: a sorted file keeps its order.  Not
    provmap.provenance.util.toposort (smallest ready index first): on an unsorted file the two
    differ ([reads b, independent, writes b] is [2, 0, 1] here, [1, 2, 0] there), and this
    order is the imported model's node order, so its node indices.
    """
    producers = {}
    for i, n in enumerate(graph.node):
        for o in n.output:
            if o:
                producers[o] = i
    nodes = list(graph.node)
    order: list[int] = []
    state = [0] * len(nodes)
    for root in range(len(nodes)):
        if state[root]:
            continue
        stack = [(root, False)]
        while stack:
            i, done = stack.pop()
            if done:
                state[i] = 2
                order.append(i)
                continue
            if state[i] == 2:
                continue
            if state[i] == 1:
                raise GraphOrderError(f"ONNX node #{i} '{nodes[i].name}' ({nodes[i].op_type}) is on a cycle")
            state[i] = 1
            stack.append((i, True))
            for name in node_inputs(nodes[i]):
                if not name or name in known:
                    continue
                if name not in producers:
                    raise GraphOrderError(
                        f"ONNX node #{i} '{nodes[i].name}' ({nodes[i].op_type}) reads tensor "
                        f"'{name}', which no input, initializer or node defines")
                j = producers[name]
                if state[j] == 1:
                    raise GraphOrderError(
                        f"ONNX node #{i} '{nodes[i].name}' ({nodes[i].op_type}) is on a cycle")
                if state[j] == 0:
                    stack.append((j, False))
    return order


def compute_node_ids(graph: onnx.GraphProto, outer: dict[str, bytes] | None = None,
                     inputs=None) -> NodeIds:
    """`inputs`: the graph inputs whose types key the IDs, when not `graph.input` (the
    importer passes the model's own, before `--input-shape` fixed any size)."""
    inits = {t.name for t in graph.initializer}
    tensor_key: dict[str, bytes] = dict(outer or {})
    pos = 0
    for vi in graph.input if inputs is None else inputs:
        if vi.name in inits:
            continue
        tensor_key[vi.name] = _h("input", pos, _type_sig(vi))
        pos += 1
    for t in graph.initializer:
        tensor_key[t.name] = tensor_digest(t)
    tensor_key[""] = b""

    nodes = list(graph.node)
    order = topological_order(graph, tensor_key)

    digest: list[bytes] = [b""] * len(nodes)
    for i in order:
        n = nodes[i]
        attrs = sorted((_attr_digest(a) for a in n.attribute))
        ins = [tensor_key[x] for x in node_inputs(n)]
        d = _h("node", n.domain or "ai.onnx", n.op_type, attrs, ins, len(n.output))
        digest[i] = d
        for k, o in enumerate(n.output):
            if o:
                tensor_key[o] = _h("out", d, k)

    # Downstream signatures, only needed to tell identical copies apart.
    groups: dict[bytes, list[int]] = defaultdict(list)
    for i in order:
        groups[digest[i]].append(i)
    key = list(digest)
    if any(len(g) > 1 for g in groups.values()):
        consumers: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for i, n in enumerate(nodes):
            for slot, x in enumerate(n.input):
                consumers[x].append((i, slot))
        out_pos = {o.name: p for p, o in enumerate(graph.output)}
        down: list[bytes] = [b""] * len(nodes)
        for i in reversed(order):
            parts = []
            for k, o in enumerate(nodes[i].output):
                uses = sorted((down[c] + digest[c]).hex() + f"/{s}" for c, s in consumers.get(o, ()))
                parts.append(_h(str(k), uses, str(out_pos.get(o, -1))))
            down[i] = _h("down", parts)
        for d, members in groups.items():
            if len(members) == 1:
                continue
            members.sort(key=lambda i: down[i])  # stable: automorphic copies keep file order
            for rank, i in enumerate(members):
                key[i] = _h("dup", d, down[i], rank) if rank else d
    ids = shorten({i: k for i, k in enumerate(key)}, "n")
    return NodeIds(digest, key, [ids[i] for i in range(len(nodes))], tensor_key, order)


def shorten(digests: dict, prefix: str) -> dict:
    """Printable IDs: the shortest prefix (>= SHORT hex digits) that no other digest shares.

    Identical digests for different keys are a caller bug (they must be disambiguated first).
    """
    by_digest: dict[bytes, object] = {}
    for k, d in digests.items():
        if d in by_digest:
            raise ValueError(f"internal: identical digest for {by_digest[d]!r} and {k!r}")
        by_digest[d] = k
    hexes = {k: d.hex() for k, d in digests.items()}
    length = {k: SHORT for k in digests}
    while True:
        seen: dict[str, list] = defaultdict(list)
        for k, h in hexes.items():
            seen[h[: length[k]]].append(k)
        clash = [ks for ks in seen.values() if len(ks) > 1]
        if not clash:
            break
        for ks in clash:  # collision detected: lengthen exactly the colliding IDs
            for k in ks:
                length[k] += 4
    return {k: prefix + hexes[k][: length[k]] for k in digests}


def expr_digest(node_key: bytes, k: int) -> bytes:
    """The k-th binding a node's conversion produced (importer output is deterministic)."""
    return _h("expr", node_key, k)


def output_expr_digest(position: int, value_key: bytes) -> bytes:
    return _h("graph-output", position, value_key)
