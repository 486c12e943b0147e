"""Threads that keep spinning after a run starve the next library's threads on a small machine:
what a plan mixing libraries sets so consecutive partitions do not fight."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from .backend import Backend
    from .plan import Plan


def quiet_spinning(plan: Plan, backends: dict[str, Backend]) -> dict[str, Backend]:
    """In a plan mixing ONNX Runtime with other backends, turn ORT's thread spinning off.

    ORT's pool threads keep spinning after a run; on a small machine they starve the next
    backend's threads (measured here: OpenVINO on the transformer block 0.06 ms alone, ~6.8 ms
    right after an ORT run).  Alone, ORT keeps its default (spinning helps it by 1-7%).  An
    explicit allow_spinning option from the user always wins; the choice is in the manifest.
    """
    used = plan.backends()
    if len(used) < 2:
        return backends
    out = dict(backends)
    for name in used:  # onnxruntime and its variants (onnxruntime[threads=1], ...)
        be = backends.get(name)
        if be is not None:
            out[name] = as_in_a_mixed_plan(be)
    return out


def as_in_a_mixed_plan(backend: Backend) -> Backend:
    """`backend` with the options a plan mixing libraries gives it (quiet_spinning's rule): the
    measuring room prices a switch between libraries with exactly these."""
    if "allow_spinning" not in backend.option_names() or "allow_spinning" in backend.options():
        return backend
    from .registry import get_backend

    return get_backend(backend.name, **backend.options(), allow_spinning="0")
