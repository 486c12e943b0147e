"""Backend variants tried end to end only: the end-to-end check's single plans and the second
level's moves, never the first level's candidate prices (see e2e_variants)."""

from __future__ import annotations

from provmap.provenance.util.errors import ProvmapError
from provmap.runtime_module.backend import Backend, BackendError
from provmap.runtime_module.registry import (available_backends, get_backend, options_class,
                                             parse_variant, with_options)


#: tried on every model: a thread count is the option a user of either library sets first
DEFAULT_VARIANTS = ("threads=1",)


def e2e_variants(backends: dict[str, Backend], specs) -> dict[str, tuple[str, Backend]]:
    """{variant name: (searched backend it derives from, backend)} for each spec ("threads=1",
    "performance_hint=THROUGHPUT;threads=2") and each searched backend that takes those options
    and does not set them itself (TVM takes no `threads`: skipped).

    Why not as backends of the first level: a thread count is a property of a whole partition
    (its intra-op pool), so pricing every small candidate on it doubles a cold search to learn
    little, while end to end it is decisive: on a 2-core host a 0.13 ms tiny BERT runs in 0.06 ms
    on OpenVINO with one thread (no fork/join per op), while a 1.6 ms SqueezeNet runs 1.8x slower.
    Measured, never assumed: the end-to-end check runs the single plans on them, the second
    level may move one partition onto them."""
    out: dict[str, tuple[str, Backend]] = {}
    for spec in specs or ():
        extra = variant_options(spec, sorted({o for be in backends.values()
                                              for o in be.option_names()}), bool(backends))
        for name, be in backends.items():
            if (any(k not in be.option_names() for k in extra)
                    or any(k in be.options() for k in extra)):
                continue
            vname = with_options(name, **extra)
            if vname in backends or vname in out:
                continue
            own = parse_variant(name)[1]
            rest = {k: v for k, v in be.options().items() if k not in own and k not in extra}
            out[vname] = (name, get_backend(vname, **rest))
    return out


def default_specs(backends: dict[str, Backend], view) -> tuple[str, ...]:
    """What the search tries on `view`'s model when the user names no variant: DEFAULT_VARIANTS
    and the settings the searched libraries suggest for it (Backend.model_variants), each once."""
    specs = [spec for be in backends.values() for spec in be.model_variants(view)]
    return tuple(dict.fromkeys(DEFAULT_VARIANTS + tuple(specs)))


def variant_options(spec: str, known, searched: bool = True) -> dict:
    """The options of --variant `spec`, refused when it is not OPTION=VALUE[;...] or names an
    option no backend takes (`known`: the searched backends' options, named in the refusal).
    Apart from e2e_variants so the command line runs it before the search is imported (issue 53):
    it reads option tables through registry.options_class, which imports no backend's library."""
    try:
        extra = parse_variant(f"variant[{spec}]")[1]
    except BackendError:
        raise ProvmapError(f"variant {spec!r}: expected OPTION=VALUE[;OPTION=VALUE...], "
                           "e.g. threads=1") from None
    known = list(known)
    # an option no backend at all takes is a typo (`--variant thred=1` dropped the
    # default variants silently); one only unsearched backends take is skipped, as the
    # default threads=1 is for a TVM-only search (issue 36's tenth afternoon)
    anywhere = {o for b in available_backends() for o in options_class(b).option_names()}
    unknown = [k for k in extra if k not in known and k not in anywhere]
    if unknown and searched:
        from provmap.provenance.util.errors import did_you_mean

        raise ProvmapError(f"variant {spec!r}: no searched backend takes option "
                           f"{unknown[0]!r} (they take {', '.join(known)})"
                           + did_you_mean(unknown[0], known))
    return extra
