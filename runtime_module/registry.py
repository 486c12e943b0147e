"""Finding backends by name: provmap's own three, then any installed `provmap.backends` plugin.

Built-ins are imported lazily so that loading an artifact that only uses ONNX Runtime never
imports OpenVINO (or TVM's compiler), and so a missing optional library only fails the backend
that needs it, with its name in the message.
"""

from __future__ import annotations

import importlib

from .backend import ENTRY_POINT_GROUP, Backend, BackendError
from provmap.provenance.util.errors import did_you_mean

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
    from importlib.metadata import entry_points  # ~30 ms: only when a name is not built in

    found: dict = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        found.setdefault(ep.name, []).append(ep)
    return found


def available_backends() -> list[str]:
    """Names usable in strategies: built-ins first, then plugins (sorted)."""
    return list(BUILTIN) + sorted(n for n in _plugins() if n not in BUILTIN)


def split_outside_brackets(text: str, sep: str) -> list[str]:
    """`text` split on `sep` where it is not inside [...]: "a,b[x=1;y=2],c" on "," gives three."""
    out, depth, cur = [], 0, []
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth = max(depth - 1, 0)
        if ch == sep and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur))
    return [x.strip() for x in out if x.strip()]


def parse_variant(spec: str) -> tuple[str, dict]:
    """A backend variant: `BASE[OPTION=VALUE;...]`, e.g. `onnxruntime[threads=1]` or
    `openvino[performance_hint=THROUGHPUT;threads=2]`: the base backend with those options, as
    a backend of its own in a search (its own name in plans, manifests and the cost cache).
    A plain name is its own base with no options."""
    spec = spec.strip()
    if "[" not in spec:
        return spec, {}
    base, _, rest = spec.partition("[")
    if not rest.endswith("]") or not base:
        raise BackendError(f"backend {spec!r}: expected NAME or NAME[OPTION=VALUE;...]")
    options = {}
    for item in split_outside_brackets(rest[:-1], ";"):
        k, eq, v = item.partition("=")
        if not eq or not k.strip():
            raise BackendError(f"backend {spec!r}: {item!r} is not OPTION=VALUE")
        if k.strip() in options and options[k.strip()] != v.strip():
            raise BackendError(f"backend {spec!r}: option {k.strip()!r} given twice")
        options[k.strip()] = v.strip()
    if not options:
        raise BackendError(f"backend {spec!r}: empty option list")
    return base.strip(), options


def variant_name(spec: str) -> str:
    """The canonical spelling of a backend name or variant (no spaces, options as written)."""
    return _spell(*parse_variant(spec))


def with_options(spec: str, **options) -> str:
    """The variant of backend `spec` with `options` added (or overriding its own):
    with_options("openvino[precision=f32]", threads=1) is "openvino[precision=f32;threads=1]"."""
    base, own = parse_variant(spec)
    return _spell(base, {**own, **{k: str(v) for k, v in options.items()}})


def _spell(base: str, options: dict) -> str:
    return f"{base}[{';'.join(f'{k}={v}' for k, v in options.items())}]" if options else base


def backend_class(name: str) -> type[Backend]:
    name = parse_variant(name)[0]
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
    known = available_backends()
    raise BackendError(f"unknown backend {name!r}{did_you_mean(name, known) or ';'} available: "
                       f"{', '.join(known)}")


#: Built-ins whose option table lives apart from a backend module that imports its library at
#: its top: checking a command line's options must not wait for TVM's import (issue 53).
OPTION_TABLES = {"tvm": "provmap.runtime_module.backends.tvm_options:TVMOptions"}


def options_class(name: str) -> type[Backend]:
    """The class whose option table and option checks (option_names, option_problem,
    combination_problem, host_problem) are backend `name`'s, for checks made before any
    work: backend_class's own class, or the lighter table it inherits them from."""
    base = parse_variant(name)[0]
    if base in OPTION_TABLES:
        return _load_ref(OPTION_TABLES[base])
    return backend_class(name)


def get_backend(name: str, **options) -> Backend:
    """A backend by name, or a variant `NAME[OPTION=VALUE;...]` (`parse_variant`), whose
    instance then carries the variant's name; `options` add to (and override) the variant's."""
    base, variant = parse_variant(name)
    cls = backend_class(base)
    try:
        be = cls(**{**variant, **options})
    except BackendError:
        raise
    except (ValueError, TypeError) as e:  # a bad option value, reported as the user's error
        raise BackendError(f"backend {name!r}: {e}") from None
    if variant:
        be.name = _spell(base, variant)
    return be
