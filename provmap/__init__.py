"""provmap: ONNX -> TVM Relax with stable provenance IDs, partitioned across inference backends.

The public Python API mirrors the command line (as sqlite-utils does):

    import provmap

    art = provmap.compile("bundled:squeezenet", out="sq.provmap",
                          strategy="greedy:openvino,onnxruntime")        # provmap compile
    mod = provmap.load("sq.provmap")                                     # provmap run / inspect
    outs = mod.run({"data_0": x})
    provmap.lookup("sq.provmap", onnx_node="conv1")                      # provmap lookup --json
    res = provmap.map("model.onnx", out="model-map")                     # provmap map

The floors, lowest first, are subpackages: provmap.provenance (import, IDs, the map),
provmap.runtime_module (backends, artifact, executor), provmap.partition (strategies and the
Collage search), provmap.workbench (compare, bisect, profile, report, annotate, explain) and
provmap.cli; provmap.bench sits beside the CLI.  docs/layout.md explains the layout.

The API names are resolved on first use, so `import provmap` (and `provmap --help`) does not
import TVM, ONNX Runtime or OpenVINO.
"""

from __future__ import annotations

__all__ = ["compile", "load", "map", "lookup", "ProvmapError"]

from provmap.provenance import quiet_backends as _quiet  # noqa: E402  (stdlib only)

_quiet.install()  # backends' telemetry off, before anything imports one

# name -> (module, attribute): the one table of what `provmap` re-exports.
_API = {
    "compile": ("provmap.partition.compile", "compile_model"),
    "load": ("provmap.runtime_module.module", "load"),
    "map": ("provmap.partition.model_source", "map_model"),
    "lookup": ("provmap.runtime_module.module", "lookup"),
    "ProvmapError": ("provmap.provenance.util.errors", "ProvmapError"),
}


def __getattr__(name: str):
    if name in _API:
        import importlib

        module, attr = _API[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value  # resolved once
        return value
    raise AttributeError(f"module 'provmap' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + __all__)
