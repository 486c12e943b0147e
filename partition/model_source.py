"""Model -> GraphView, the form every strategy and the search work on.

Its own module because the measuring worker (cost) needs it as much as `compile_model` does, and
compile_model runs the search that runs the worker: with load_view inside compile, cost imported
compile and the three formed a circle."""

from __future__ import annotations

import os

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
