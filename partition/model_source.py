"""Model -> GraphView, the form every strategy and the search work on; model -> provenance map.

Its own module because the measuring worker (cost) needs it as much as `compile_model` does, and
compile_model runs the search that runs the worker: with load_view inside compile, cost imported
compile and the three formed a circle.

Both ways in import the model the same way: typed by ONNX Runtime where ONNX's inference cannot
type it (provmap.runtime_module.backends.ort_types).  The provenance floor that imports knows no
backend, so the oracle is given here, the lowest floor where both ways in are reached from
(`provmap compile`, `provmap map`, and the Python API's twins)."""

from __future__ import annotations

import os
import time

from provmap.provenance.bundled import zoo
from provmap.provenance.importer import import_onnx
from provmap.provenance.mapper import MapResult, map_model as _map_model
from provmap.runtime_module.backends.ort_types import ORT_TYPES
from provmap.runtime_module.graph_view import GraphView


def load_view(model, label: str | None = None, check: bool = True,
              input_shapes: dict | None = None, dims: dict | None = None) -> GraphView:
    """Import a model (path, "bundled:NAME" or ModelProto) and wrap it for partitioning.

    `input_shapes` (NAME -> dims) and `dims` (SYMBOL -> size) give the input dimensions a size
    or a range (provmap.provenance.profile); partitioning needs one of them for every input
    dimension, and the refusal names each open one."""
    if isinstance(model, (str, os.PathLike)):
        model, name = zoo.resolve(str(model))
        label = label or name
    return GraphView(import_onnx(model, shape_dict=input_shapes, label=label, check=check,
                                 require_static=True, type_oracle=ORT_TYPES, dims=dims))


def map_model(model, out: str | os.PathLike | None = None, input_shapes: dict | None = None,
              progress=None, dims: dict | None = None) -> MapResult:
    """provmap.provenance.mapper.map_model (`provmap.map`, `provmap map`) with ONNX Runtime's
    types: import `model`, build it with TVM following every binding through every pass, and
    (if `out`) save OUT.json and OUT.sqlite atomically."""
    return _map_model(model, out=out, input_shapes=input_shapes, progress=progress,
                      type_oracle=ORT_TYPES, dims=dims)


class ModelRead(str):
    """The progress line said when compile has read the model.  A str, so any progress callback
    takes it as it takes every other line; a type of its own, so the CLI can time the build
    apart from the import (its "built in N s" never counted reading the model)."""


def model_for_compile(model, input_shapes: dict | None = None, progress=None,
                      dims: dict | None = None) -> GraphView:
    """The model compile works on, read here so its callers (the CLI among them) only name it.

    A GraphView passes through as it is: tests and the bench compile one loaded model with
    several strategies or options, and importing a large model again for each would cost more
    than the compile they measure."""
    if isinstance(model, GraphView):
        return model
    t0 = time.perf_counter()
    view = load_view(model, input_shapes=input_shapes, dims=dims)
    if progress is not None:
        progress(ModelRead(f"imported {view.imported.label}: {len(view.nodes)} ONNX nodes "
                           f"({len(view.op_nodes)} compute) in {time.perf_counter() - t0:.2f} s"))
        for line in view.imported.warnings or ():  # one line each, as the manifest keeps them
            progress(f"warning: {line}")
    return view
