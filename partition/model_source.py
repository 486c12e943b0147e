"""Model -> GraphView, the form every strategy and the search work on.

Its own module because the measuring worker (cost) needs it as much as `compile_model` does, and
compile_model runs the search that runs the worker: with load_view inside compile, cost imported
compile and the three formed a circle."""

from __future__ import annotations

import os
import time

from provmap.provenance.bundled import zoo
from provmap.provenance.importer import import_onnx
from provmap.runtime_module.graph_view import GraphView


def load_view(model, label: str | None = None, check: bool = True,
              input_shapes: dict | None = None) -> GraphView:
    """Import a model (path, "bundled:NAME" or ModelProto) and wrap it for partitioning.

    `input_shapes` (NAME -> dims) fixes symbolic input dimensions; partitioning needs every
    input shape static, and the refusal names each open dimension."""
    if isinstance(model, (str, os.PathLike)):
        model, name = zoo.resolve(str(model))
        label = label or name
    return GraphView(import_onnx(model, shape_dict=input_shapes, label=label, check=check,
                                 require_static=True))


class ModelRead(str):
    """The progress line said when compile has read the model.  A str, so any progress callback
    takes it as it takes every other line; a type of its own, so the CLI can time the build
    apart from the import (its "built in N s" never counted reading the model)."""


def model_for_compile(model, input_shapes: dict | None = None, progress=None) -> GraphView:
    """The model compile works on, read here so its callers (the CLI among them) only name it.

    A GraphView passes through as it is: tests and the bench compile one loaded model with
    several strategies or options, and importing a large model again for each would cost more
    than the compile they measure."""
    if isinstance(model, GraphView):
        return model
    t0 = time.perf_counter()
    view = load_view(model, input_shapes=input_shapes)
    if progress is not None:
        progress(ModelRead(f"imported {view.imported.label}: {len(view.nodes)} ONNX nodes "
                           f"({len(view.op_nodes)} compute) in {time.perf_counter() - t0:.2f} s"))
        for line in view.imported.warnings or ():  # one line each, as the manifest keeps them
            progress(f"warning: {line}")
    return view
