"""Graph outputs whose shape only the model's declaration gives, observed once at compile.

A published model may declare an output shape it does not compute (a CRNN declaring `[1,
seqlen]` returns `[T, 1, classes]`), behind nodes shape inference cannot see through (an LSTM,
a Reshape to a computed shape).  ONNX Runtime returns what it computes and only warns; the
executor does the same (module.py).  So that the user hears it at compile, not first in
production, and the artifact says it (`provmap inspect`, `provmap compare`), the freshly built
artifact is run once on seeded random inputs when such an output exists, and what came back is
recorded: `shape_observed` on the output in the manifest, plus one warning per output.  Models
whose outputs inference computes (nearly all) are not run.
"""

from __future__ import annotations

from provmap.provenance.errors import ProvmapError, first_line

from .artifact import Artifact
from .module import ArtifactModule, _shape_ok


def hinted_outputs(art: Artifact) -> list[dict]:
    return [o for o in art.manifest["model"]["outputs"] if o.get("shape_from") == "declaration"]


def observe_hinted_outputs(art: Artifact, seed: int = 0) -> list[str]:
    """Run `art` (built here, so its code is trusted) once if an output's shape is only
    declared; record what each such output returned where it differs.  Returns the new
    warnings (also appended to the manifest's)."""
    hinted = hinted_outputs(art)
    if not hinted or not art.manifest["partitions"]:
        return []
    label = art.manifest["model"]["name"]
    mod = ArtifactModule(art, runnable=True, trust=True)
    mod.on_warning = lambda _line: None  # said below, in the manifest's words
    try:
        got = mod.run(mod.random_inputs(seed))
    except ProvmapError as e:
        names = ", ".join(repr(o["name"]) for o in hinted)
        new = [f"{label}: graph output(s) {names} have a declared shape nothing computes, and "
               f"a run on random inputs at compile failed, so what they return is unknown: "
               f"{first_line(e)}"]
    else:
        new = []
        for o in hinted:
            a = got[o["name"]]
            if _shape_ok(a.shape, tuple(o["shape"])):
                continue
            o["shape_observed"] = list(a.shape)
            dims = ", ".join("?" if d is None else str(d) for d in o["shape"])
            new.append(f"{label}: graph output '{o['name']}' is declared {o['dtype']}[{dims}], "
                       f"which shape inference cannot check, and returned {a.dtype}"
                       f"{list(a.shape)} when run at compile on random inputs; the returned "
                       "shape is used (as ONNX Runtime does)")
    finally:
        mod.close()
    art.manifest.setdefault("warnings", []).extend(new)
    return new
