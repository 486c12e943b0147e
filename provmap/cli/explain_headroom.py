"""`explain --headroom`: the per-node oracle over the backends the user names (`--backends`,
default compile's search backends and the variants its search tries end to end), and the share of
the headroom the artifact captured.  Its own module: the explain command's file holds the other
workbench commands.

Why the command line and not the artifact: the headroom used to build its backends from the
manifest's `plan_info.collage.backends`, options and all, and `plan_info` is the search's
free-form record, written by whoever sent the file.  An ONNX Runtime artifact listing
`tvm[tune=metaschedule;trials=1;tuning_db=/any/path]` made provmap write a tuning database under
`/any/path` and set the tuning budget and thread count (issue 52).  Nothing read from a manifest
becomes a backend, an option, a path or a budget here; the manifest's strategy only says whether
the kept plan *is* one of the user's configurations (and then only if every partition runs on it).
"""

from __future__ import annotations

import os

from provmap.provenance.util.errors import ProvmapError

from .common import note_needless_trust, say_progress


def headroom_backends(text: str | None, view=None) -> dict:
    """{name: Backend} from `--backends` as the user typed it (variants and their options
    included, exactly those), or, without it, compile's default search backends and the
    variants its search tries end to end on `view`'s model (variants.default_specs: one thread,
    and what a library suggests for the model, e.g. ONNX Runtime's disable_quant_qdq where a
    constant is dequantized; `view` is needed then).  Never from the artifact (module doc)."""
    from provmap.partition.defaults import DEFAULT_COLLAGE_BACKENDS
    from provmap.partition.variants import default_specs, e2e_variants
    from provmap.runtime_module.backend import BackendError
    from provmap.runtime_module.registry import get_backend, split_outside_brackets, variant_name

    try:
        names = ([variant_name(b) for b in split_outside_brackets(text, ",")] if text
                 else list(DEFAULT_COLLAGE_BACKENDS))
        backends = {n: get_backend(n) for n in dict.fromkeys(names)}
    except BackendError as e:
        raise ProvmapError(f"--backends: {e}") from None
    if not text:
        backends.update({n: be for n, (_, be) in
                         e2e_variants(backends, default_specs(backends, view)).items()})
    return backends


def kept_twin(manifest: dict, backends: dict) -> str | None:
    """The one of `backends` the kept plan is ("collage->single:X", every partition on X), whose
    profile is then the kept plan's; None when it is none of them."""
    twin = str(manifest.get("strategy", "")).partition("->single:")[2] or None
    if twin not in backends or any(p["backend"] != twin for p in manifest["partitions"]):
        return None
    return twin


def headroom_of(args, mod, model) -> dict:
    """The per-node oracle over the user's backends (`headroom_backends`), and the share of
    the headroom the artifact captured (provmap.workbench.headroom)."""
    from provmap.partition.compile import load_view
    from provmap.runtime_module.module import load
    from provmap.workbench.headroom import node_oracle

    text = getattr(args, "backends", None)
    backends = headroom_backends(text) if text else None  # a typo said before anything loads
    run = load(args.artifact, trust=args.trust)
    note_needless_trust(run, args.trust)
    # the shapes it was compiled at: a dynamic model failed with "pass --input-shape", which
    # explain does not take (the twelfth afternoon)
    view = load_view(model, os.path.basename(args.artifact),
                     input_shapes=mod.manifest["model"].get("input_shapes_given") or None)
    backends = backends or headroom_backends(None, view)
    # the kept plan *is* one of those configurations ("collage->single:X"): its time is that
    # configuration's own profile, not a second one, whose noise read as "captured 9% of the
    # headroom" on a plan identical to the best single (the fourteenth afternoon)
    twin = kept_twin(mod.manifest, backends)
    try:
        h = node_oracle(view, backends, kept=None if twin else run,
                        inputs=run.random_inputs(0), repeats=args.repeats,
                        progress=say_progress, kept_is=twin)
    except ValueError as e:
        raise ProvmapError(str(e)) from None
    finally:
        run.close()
    if args.oracle_plans:
        from provmap.workbench.oracle_plan import oracle_plans

        h["oracle_plans"] = (oracle_plans(view, h, backends, say=say_progress)
                             if h["headroom_share"] else
                             {"tried": [], "note": "no headroom: nothing to build"})
    return h
