"""Which original ONNX nodes each executed layer of OpenVINO's compiled model implements.

OpenVINO keeps only the names of the operations a layer fused, so the mapping to ONNX nodes is
derived from tensor names; a module of its own, apart from building and running models.

One `KernelInfo` per executed layer of ``compiled.get_runtime_model()`` (kind
``"ov-layer"``, ``op`` its ``layerType``), skipping Input/Output/Const layers and layers whose
inputs are all constant (the CPU plugin runs those once, when compiling).  Each layer's
``originalLayersNames`` are operations of the converted model; those map to ONNX nodes by
tensor names, which the ONNX frontend keeps: an operation belongs to the ONNX nodes producing
the nearest ONNX-named tensors downstream of it (an ONNX node's decomposition, e.g.
``n0/WithoutBiases`` plus the bias reshapes of a Conv, all flow into the node's output).  Names
the plugin made up while compiling (``attn/q_proj/MatMul/transpose_b``,
``Reshape_65_flatten_reshape``) map through their longest known prefix; a layer with no
mapping at all (an inserted Reorder) takes the nodes of the nearest mapped layers downstream
(else upstream).  ONNX nodes still in no kernel (a MatMul whose FullyConnected layer is named
after its bias Add, an Identity) are attached to the kernels of the nodes consuming them.
"""

from __future__ import annotations

import re

from ..backend import KernelInfo

_SKIP_LAYERS = {"Input", "Output", "Const", "Parameter", "Result", "Constant"}


def _key(op) -> str:
    """A stable identity for an operation (Python wrappers differ between accessors)."""
    return op.get_name()


def op_owners(model, producer: dict[str, int]) -> dict[str, set[int]]:
    """friendly name -> ONNX nodes (values of `producer`) that each operation belongs to.

    An operation belongs to the producers of the nearest ONNX-named tensors downstream of it
    (its own outputs first): the ONNX frontend keeps tensor names on the operation that finally
    computes a node's output, and names the helper operations of a decomposition arbitrarily.
    """
    ops = list(model.get_ordered_ops())
    own: dict[int, set[int]] = {}
    names: dict[str, set[int]] = {}
    for op in reversed(ops):  # consumers before producers
        if op.get_type_name() == "Result":
            own[_key(op)] = set()
            continue
        found: set[int] = set()
        for out in op.outputs():
            direct = {producer[n] for n in out.get_names() if n in producer}
            if direct:
                found |= direct
                continue
            for tgt in out.get_target_inputs():
                found |= own.get(_key(tgt.get_node()), set())
        own[_key(op)] = found
        names.setdefault(op.get_friendly_name(), set()).update(found)
    return names


_SEPARATORS = "/_.:"


def _resolve(name: str, owners: dict[str, set[int]]) -> set[int]:
    if name in owners:
        return owners[name]
    # A name the plugin derived from an operation's name ("X/transpose_b", "X_flatten_reshape"):
    # the longest known name that `name` continues with a separator.  Only the prefixes ending
    # before a separator can be that name, so they are looked up, not every known name scanned
    # (which made the kernel map quadratic in the model's size).
    for i in range(len(name) - 1, -1, -1):  # longest first
        if name[i] in _SEPARATORS and name[:i] in owners:
            return owners[name[:i]]
    return set()


def _rt(op, key: str) -> str:
    info = op.get_rt_info()
    try:
        return info[key].astype(str)
    except Exception:
        return ""


def _executed_layers(compiled):
    """(runtime ops, op key -> layerType, keys of constant layers, executed layers in order)."""
    ops = list(compiled.get_runtime_model().get_ordered_ops())
    layer = {_key(op): _rt(op, "layerType") for op in ops}
    constant: set[str] = set()
    for op in ops:  # ordered: producers first
        srcs = [i.get_source_output().get_node() for i in op.inputs()]
        if layer[_key(op)] == "Const" or (srcs and all(_key(s) in constant for s in srcs)):
            constant.add(_key(op))
    executed = [op for op in ops
                if layer[_key(op)] not in _SKIP_LAYERS and op.get_type_name() not in _SKIP_LAYERS
                and _key(op) not in constant]
    return ops, layer, constant, executed


def _kind(op, layer: dict) -> str:
    return layer[_key(op)] or op.get_type_name()


def _shape(name: str) -> str:
    """A layer name with its numbers (and a kernel name's "#k" suffix) blanked out."""
    return re.sub(r"\d+", "0", re.sub(r"#\d+$", "", name))


def profiled_kernel_names(compiled, kernels: list[KernelInfo]) -> dict[str, list[str]]:
    """Runtime layer name in `compiled` (a compile of a blob's IR) -> the names of the blob's
    kernels that layer is, one per occurrence of the name.

    Why not by name alone: the CPU plugin names the layers it creates while compiling from a
    process-wide counter (a Convolution with its BatchNormalization folded in is
    ``Multiply_8936`` when the blob is built and ``Multiply_20769`` when compiled again to
    profile), so on ResNet-50 the profiler's names matched 1% of the time.  The same IR compiled
    with the same configuration gives the same executed layers in the same order, so they pair
    with the blob's kernels by position, each pair checked: the same name up to its numbers,
    and the same layer type where the blob records one (an artifact's manifest keeps names
    only).  If any pair fails (another OpenVINO version built the blob), only equal names pair.
    """
    _ops, layer, _const, executed = _executed_layers(compiled)
    out: dict[str, list[str]] = {}
    if len(executed) == len(kernels) and all(
            k.op in ("", _kind(op, layer)) and _shape(k.name) == _shape(op.get_friendly_name())
            for op, k in zip(executed, kernels)):
        for op, k in zip(executed, kernels):
            out.setdefault(op.get_friendly_name(), []).append(k.name)
        return out
    for k in kernels:
        out.setdefault(k.name.split("#")[0], []).append(k.name)
    return out


def runtime_kernels(compiled, model, producer: dict[str, int],
                     cut) -> tuple[list[KernelInfo], str]:
    from .ort_kernels import attach_orphans

    owners = op_owners(model, producer)
    owners = {k: v for k, v in owners.items() if v}
    ops, layer, constant, executed = _executed_layers(compiled)
    rt = _rt
    mapped: dict[int, set[int]] = {}
    for op in ops:
        nodes: set[int] = set()
        for nm in rt(op, "originalLayersNames").split(","):
            nm = nm.strip()
            if nm:
                nodes |= _resolve(nm, owners)
        mapped[_key(op)] = nodes

    def nearest(op, forward: bool) -> set[int]:
        seen = {_key(op)}
        frontier = [op]
        while frontier:
            nxt = []
            found: set[int] = set()
            for o in frontier:
                if forward:
                    near = [t.get_node() for out in o.outputs() for t in out.get_target_inputs()]
                else:
                    near = [i.get_source_output().get_node() for i in o.inputs()]
                for n in near:
                    if _key(n) in seen or _key(n) in constant:
                        continue
                    seen.add(_key(n))
                    if mapped.get(_key(n)) and layer.get(_key(n)) not in _SKIP_LAYERS:
                        found |= mapped[_key(n)]
                    else:
                        nxt.append(n)
            if found:
                return found
            frontier = nxt
        return set()

    covered: list[set[int]] = []
    for op in executed:
        nodes = set(mapped[_key(op)]) or nearest(op, True) or nearest(op, False)
        covered.append(nodes)

    gnodes = list(cut.graph.node)
    consumers: dict[str, list[int]] = {}
    for p, n in enumerate(gnodes):
        for x in n.input:
            if x:
                consumers.setdefault(x, []).append(p)
    attach_orphans(covered, gnodes, producer, consumers, set(range(len(gnodes))))

    kernels, lines, used = [], [], {}
    for op, nodes in zip(executed, covered):
        name = op.get_friendly_name() or f"layer_{len(kernels)}"
        if name in used:
            used[name] += 1
            name = f"{name}#{used[name]}"
        else:
            used[name] = 0
        kernels.append(KernelInfo(name=name, kind="ov-layer", nodes=sorted(nodes),
                                  op=_kind(op, layer)))
        srcs = [i.get_source_output().get_node().get_friendly_name() for i in op.inputs()]
        covers = ", ".join(gnodes[p].name or f"#{p}" for p in sorted(nodes))
        lines.append(f"{name}: {layer[_key(op)]} [{rt(op, 'primitiveType')}, "
                     f"{rt(op, 'runtimePrecision')}]({', '.join(srcs)})   "
                     f"# from: {rt(op, 'originalLayersNames')}   # covers: {covers}")
    return kernels, "\n".join(lines) + "\n"
