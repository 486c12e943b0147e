"""A built partition's kernels and call sites, and the Relax expressions each site computes.

Its own step because two readers need the same answer: the source map (which expressions a
kernel computes) and compile's progress line (how many of the partition's op nodes its code
computes).  They disagreed: "building p0 on openvino (119 op nodes)" where inspect and the
summary said 93, because a backend may fold nodes that are constant at the shapes it was given
(the shape arithmetic of a model whose declared shapes went stale): the plan gives it 119, its
code computes 93 (issue 36).
"""

from __future__ import annotations

from provmap.provenance.model import ROLE_COMPUTE, ROLE_CONSTANT, Kernel, KernelSite


def kernel_sites(view, pid: str, backend: str, blob, closure, const) -> tuple[list, list, list]:
    """(kernels, sites, site_exprs) of one built partition: one Kernel per kernel name, one
    KernelSite per KernelInfo, and (site id, expr id, role) for every expression it computes.
    A kernel that names no expressions is credited with the ones its ONNX nodes produce
    (`closure` maps the blob's node positions to the view's node indices)."""
    kernels, sites, site_exprs = [], [], []
    seen: dict[str, int] = {}
    for ordinal, k in enumerate(blob.kernels):
        kname = f"{pid}:{k.name}"
        if kname not in seen:
            seen[kname] = 0
            kernels.append(Kernel(name=kname, function=pid, backend=backend, kind=k.kind))
        sid = f"{kname}#{seen[kname]}"
        seen[kname] += 1
        sites.append(KernelSite(id=sid, kernel=kname, caller=pid, ordinal=ordinal))
        ids = list(k.exprs) if k.exprs else [e for pos in k.nodes
                                             for e in view.produced.get(closure[pos], ())]
        all_const = all(e in const for e in ids)
        for e in sorted(set(ids)):
            role = ROLE_CONSTANT if (e in const and not all_const) else ROLE_COMPUTE
            site_exprs.append((sid, e, role))
    return kernels, sites, site_exprs


def uncomputed(view, ops, site_exprs) -> int:
    """How many of the partition's op nodes no site computes (an alias Relax drops at import,
    shape arithmetic the backend folds at the shapes it was given): what compile's progress
    line says after the build, so its count is the one inspect and the summary print."""
    computed = {e for _sid, e, role in site_exprs if role == ROLE_COMPUTE}  # as Lookup counts
    return sum(1 for i in ops if not computed.intersection(view.produced.get(i, ())))
