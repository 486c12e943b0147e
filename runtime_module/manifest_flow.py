"""The tensors that flow between a manifest's partitions, checked before anything runs: the
executor looks them up by name, so a dangling one was a KeyError in the middle of a run, and
one declared otherwise than where it is made (a stranger's [1,3,64,64] beside a 32x32 model)
was printed by inspect as given and ended a run in a library's own error (issue 36)."""

from __future__ import annotations

from .manifest_types import BlobMeta
from .schema_base import _short, first_twice


def check_flow(fail, man) -> None:
    """Every tensor a partition reads (its inputs, its runner's, its blob's) is a graph input,
    a stored constant or an earlier partition's output, of the type it has there; every name
    its blob says it produces is among its outputs; every model output is made by one of them,
    as its maker declares it.  `man`: a converted manifest_types.Manifest."""
    _check_strategy(fail, man.strategy, man.partitions)
    consts = man.constant_outputs or {}
    made = {t.name: t for t in man.model.inputs}
    available = set(made) | set(consts)
    for i, p in enumerate(man.partitions):
        at = f"partitions[{i}]"
        for j, t in enumerate(p.inputs):
            _same(fail, f"{at}.inputs[{j}]", made.get(t.name), t)
        meta = p.blob_meta or BlobMeta()
        # every list naming what it reads: "nope" in the inputs alone passed inspect
        for field, names in (("inputs", [t.name for t in p.inputs]),
                             ("runner_inputs", p.runner_inputs),
                             ("blob_meta.input_names", meta.input_names or ())):
            for name in names:
                if name not in available:
                    fail(f"{at}.{field}", f"{_short(name)} is neither a graph input nor an "
                         "output of an earlier partition")
        outs = {t.name for t in p.outputs}
        for name in meta.output_names or ():
            if name not in outs:
                fail(f"{at}.blob_meta.output_names",
                     f"{_short(name)} is not among the partition's outputs")
        for t in p.outputs:
            made.setdefault(t.name, t)
        available |= outs
    if twice := first_twice(t.name for t in man.model.outputs):
        fail(f"model.outputs[{twice[0]}]", f"{_short(twice[1])} is listed twice")
    for i, t in enumerate(man.model.outputs):
        if t.name not in made and t.name not in consts:
            fail(f"model.outputs[{i}]", f"{_short(t.name)} is made by no partition, is no "
                 "graph input and no stored constant")
        _same(fail, f"model.outputs[{i}]", made.get(t.name), t)


def _same(fail, at: str, was, t) -> None:
    """One dtype and rank; a dimension known on both sides is the same number (null: known at
    run time only, matches any)."""
    if was is not None and (was.dtype != t.dtype or len(was.shape) != len(t.shape) or any(
            x != y and x is not None and y is not None for x, y in zip(was.shape, t.shape))):
        fail(at, f"{_short(t.name)} is {t.dtype}{t.shape} here but {was.dtype}{was.shape} "
             "where it is made")


def _check_strategy(fail, strategy: str, parts: list) -> None:
    """single:/greedy: name the libraries their partitions may use: a stranger's manifest
    saying `single:openvino` over an ONNX Runtime partition was printed as it said (issue 36).
    Collage and its fallbacks ("collage->single:b") are checked against `backends` only."""
    kind, _, rest = strategy.partition(":")
    if kind not in ("single", "greedy") or not rest:
        return
    allowed = {b.split("[", 1)[0] for b in (rest.split(",") if kind == "greedy" else [rest])}
    for i, p in enumerate(parts):
        if p.backend.split("[", 1)[0] not in allowed:
            fail(f"partitions[{i}].backend", f"{_short(p.backend)} is not a backend of "
                 f"strategy {_short(strategy)}")
