"""Finding backends by name: provmap's own three, then any installed `provmap.backends` plugin.

Built-ins are imported lazily so that loading an artifact that only uses ONNX Runtime never
imports OpenVINO (or TVM's compiler), and so a missing optional library only fails the backend
that needs it, with its name in the message.
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points

from .backend import ENTRY_POINT_GROUP, Backend, BackendError

BUILTIN = {
    "tvm": "runtime_module.backends.tvm:TVMBackend",
    "onnxruntime": "runtime_module.backends.onnxruntime:OnnxRuntimeBackend",
    "openvino": "runtime_module.backends.openvino:OpenVINOBackend",
}


def _load_ref(ref: str):
    mod, _, attr = ref.partition(":")
    return getattr(importlib.import_module(mod), attr)


def _plugins() -> dict:
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def available_backends() -> list[str]:
    """Names usable in strategies: built-ins first, then plugins (sorted)."""
    return list(BUILTIN) + sorted(n for n in _plugins() if n not in BUILTIN)


def backend_class(name: str) -> type[Backend]:
    if name in BUILTIN:
        return _load_ref(BUILTIN[name])
    eps = _plugins()
    if name in eps:
        cls = eps[name].load()
        if not (isinstance(cls, type) and issubclass(cls, Backend)):
            raise BackendError(f"plugin backend {name!r} ({eps[name].value}) is not a "
                               "runtime_module.backend.Backend subclass")
        return cls
    raise BackendError(f"unknown backend {name!r}; available: {', '.join(available_backends())}")


def get_backend(name: str, **options) -> Backend:
    return backend_class(name)(**options)
