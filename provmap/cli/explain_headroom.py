"""`explain --headroom`: the per-node oracle over the backends an artifact's search tried, and
the share of the headroom the artifact captured.  Its own module: the explain command's file
holds the other workbench commands.
"""

from __future__ import annotations

import os

from provmap.provenance.util.errors import ProvmapError

from .common import note_needless_trust, say_progress


def headroom_of(args, mod, model) -> dict:
    """The per-node oracle over the backends the artifact's search tried (its variants too),
    and the share of the headroom the artifact captured (provmap.workbench.headroom)."""
    from provmap.partition.compile import load_view
    from provmap.runtime_module.module import load
    from provmap.runtime_module.registry import get_backend
    from provmap.workbench.headroom import node_oracle

    info = (mod.manifest.get("plan_info") or {}).get("collage") or {}
    names = list(info.get("backends") or []) + list(info.get("e2e_variants") or [])
    names = names or sorted({p["backend"] for p in mod.manifest["partitions"]})
    run = load(args.artifact, trust=args.trust)
    note_needless_trust(run, args.trust)
    # the shapes it was compiled at: a dynamic model failed with "pass --input-shape", which
    # explain does not take (the twelfth afternoon)
    view = load_view(model, os.path.basename(args.artifact),
                     input_shapes=mod.manifest["model"].get("input_shapes_given") or None)
    backends = {n: get_backend(n) for n in dict.fromkeys(names)}
    # the kept plan *is* one of those configurations ("collage->single:X"): its time is that
    # configuration's own profile, not a second one, whose noise read as "captured 9% of the
    # headroom" on a plan identical to the best single (the fourteenth afternoon)
    twin = mod.manifest.get("strategy", "").partition("->single:")[2] or None
    try:
        h = node_oracle(view, backends, kept=None if twin in backends else run,
                        inputs=run.random_inputs(0), repeats=args.repeats,
                        progress=say_progress, kept_is=twin if twin in backends else None)
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
