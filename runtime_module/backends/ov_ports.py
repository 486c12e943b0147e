"""Matching OpenVINO's compiled ports to the subgraph's ONNX tensor names.

OpenVINO's frontend prunes Parameters nothing needs, renames ports after no-ops it absorbs and
may reorder them; the runner and the build both need each ONNX name's port, so the matching
lives here, beside the backend (kept apart to hold openvino.py under the size limit).
"""

from __future__ import annotations

from ..backend import BackendError


def kept_inputs(ports, names: list[str]) -> list[str]:
    """The subgraph inputs the compiled model still takes, in the subgraph's order.

    OpenVINO's frontend removes a Parameter nothing needs (ReduceSum's empty `axes`), and when
    an input only feeds a no-op it drops (inference-mode Dropout), the port takes the no-op's
    output name instead.  Runners may take a subset of their subgraph's inputs (see Runner), so
    pruned inputs are left out; a renamed port is recognised by position among the Parameters,
    which the frontend creates in graph-input order.
    """
    named = {n for p in ports for n in p.get_names()}
    if all(n in named for n in names):
        return list(names)
    if len(ports) == len(names):
        return list(names)  # same count: port_order matches the renamed ones by position
    kept = [n for n in names if n in named]
    if len(kept) == len(ports):
        return kept
    raise BackendError(f"OpenVINO: compiled model takes {len(ports)} inputs "
                       f"{[sorted(p.get_names()) for p in ports]}; cannot match them to the "
                       f"subgraph's inputs {names}")


def port_order(ports, names: list[str], what: str) -> list[int]:
    """Index of the port carrying each ONNX tensor name (OpenVINO may reorder ports)."""
    index = {}
    for k, p in enumerate(ports):
        for n in p.get_names():
            index.setdefault(n, k)
    missing = [n for n in names if n not in index]
    if missing and len(ports) == len(names):
        # A port renamed after a no-op it absorbed (see kept_inputs; an output that is both a
        # Dropout's input and, through it, its output gets the Dropout's name twice): the
        # frontend keeps Parameters and Results in graph order, so match every port by position.
        return list(range(len(names)))
    if missing:
        raise BackendError(f"OpenVINO: compiled model has no {what} named {missing}; "
                           f"it has {[sorted(p.get_names()) for p in ports]}")
    return [index[n] for n in names]
