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
    "tvm": "provmap.runtime_module.backends.tvm:TVMBackend",
    "onnxruntime": "provmap.runtime_module.backends.onnxruntime:OnnxRuntimeBackend",
    "openvino": "provmap.runtime_module.backends.openvino:OpenVINOBackend",
}


def _load_ref(ref: str):
    mod, _, attr = ref.partition(":")
    return getattr(importlib.import_module(mod), attr)


def _plugins() -> dict:
    """Plugin entry points by name; a name registered twice maps to all its claimants."""
    found: dict = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        found.setdefault(ep.name, []).append(ep)
    return found


def available_backends() -> list[str]:
    """Names usable in strategies: built-ins first, then plugins (sorted)."""
    return list(BUILTIN) + sorted(n for n in _plugins() if n not in BUILTIN)


def backend_class(name: str) -> type[Backend]:
    if name in BUILTIN:
        return _load_ref(BUILTIN[name])
    eps = _plugins()
    if name in eps:
        if len(eps[name]) > 1:
            raise BackendError(f"backend {name!r} is registered by several packages: "
                               f"{', '.join(ep.value for ep in eps[name])}; uninstall all but one")
        ep = eps[name][0]
        try:
            cls = ep.load()
        except Exception as e:
            raise BackendError(f"plugin backend {name!r} ({ep.value}) failed to import: "
                               f"{type(e).__name__}: {e}") from None
        if not (isinstance(cls, type) and issubclass(cls, Backend)):
            raise BackendError(f"plugin backend {name!r} ({ep.value}) is not a "
                               "provmap.runtime_module.backend.Backend subclass")
        if cls.name != name:
            raise BackendError(f"plugin backend {name!r} ({ep.value}) calls itself "
                               f"{cls.name!r}; the entry-point name and Backend.name must match")
        return cls
    raise BackendError(f"unknown backend {name!r}; available: {', '.join(available_backends())}")


def get_backend(name: str, **options) -> Backend:
    cls = backend_class(name)
    try:
        return cls(**options)
    except BackendError:
        raise
    except (ValueError, TypeError) as e:  # a bad option value, reported as the user's error
        raise BackendError(f"backend {name!r}: {e}") from None
