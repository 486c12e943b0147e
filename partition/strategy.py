"""The strategy as a value: read once where it enters (the CLI, or `provmap.compile`), then passed
down as it is.

Before, the text `greedy:onnxruntime[threads=1],openvino` was split again by each layer that
needed a piece of it (the CLI, the option checks, plan making, the tuning database flag), each
with its own idea of the default collage backends.  `Strategy` holds what they read: the kind,
and each backend named with its variant's options; `str()` is the canonical spelling the
manifest records, and `as_given` the user's own, which error messages quote.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from provmap.provenance.util.errors import ProvmapError
from provmap.runtime_module.backend import BackendError
from provmap.runtime_module.registry import parse_variant, split_outside_brackets, variant_name

from .defaults import DEFAULT_COLLAGE_BACKENDS

@dataclass(frozen=True)
class BackendChoice:
    """One backend a strategy names: its canonical name (`onnxruntime[threads=1]`: the name
    plans, manifests and the cost cache use, and the key of its --backend-option entries), the
    base backend, and the variant's own options in the order written (none for a plain name)."""
    name: str
    base: str
    options: tuple[tuple[str, str], ...] = ()

    @classmethod
    def parse(cls, text: str) -> BackendChoice:
        base, options = parse_variant(text)
        return cls(variant_name(text), base, tuple(options.items()))


@dataclass(frozen=True)
class Strategy:
    """single:<b>, greedy:<b1>,<b2>,... or collage[:<b1>,...]; checked when made, so a value
    that exists is one every layer below can use without asking again."""
    kind: str
    backends: tuple[BackendChoice, ...] = ()
    #: The text it was read from, for messages: they quote what the user typed, spaces and all.
    spelled: str = field(default="", compare=False, repr=False)

    def __post_init__(self):
        names = self.names
        if self.kind == "single" and len(names) == 1:
            return
        if self.kind == "greedy" and names:
            if len(set(names)) != len(names):
                raise ProvmapError(f"strategy {self.as_given!r}: a backend is listed twice")
            return
        if self.kind == "collage":
            return
        lower = self.as_given.strip().lower()  # SINGLE:OPENVINO: the kinds are lower case
        hint = (f"; did you mean {lower!r}?" if lower != self.as_given and
                lower.split(":", 1)[0] in ("single", "greedy", "collage") else "")
        raise ProvmapError(f"bad strategy {self.as_given!r}: expected single:<backend>, "
                           f"greedy:<backend>,<backend>,... or collage{hint}")

    @property
    def names(self) -> list[str]:
        """The backends as written, canonically spelled ([] for collage's defaults)."""
        return [b.name for b in self.backends]

    @property
    def used(self) -> tuple[BackendChoice, ...]:
        """The backends it runs or searches: the ones named, or collage's defaults."""
        if self.backends or self.kind != "collage":
            return self.backends
        return tuple(BackendChoice.parse(n) for n in DEFAULT_COLLAGE_BACKENDS)

    @property
    def as_given(self) -> str:
        return self.spelled or str(self)

    def __str__(self) -> str:
        return f"{self.kind}:{','.join(self.names)}" if self.backends else self.kind


def parse_strategy(spec: str | Strategy) -> Strategy:
    """The one reader of a strategy's text (a Strategy passes through, so an entry point may
    take either)."""
    if isinstance(spec, Strategy):
        return spec
    kind, _, rest = spec.partition(":")
    if rest and any(not x.strip() for x in rest.split(",")) and "[" not in rest:
        raise ProvmapError(f"strategy {spec!r}: an empty backend name (two commas, or a comma at "
                           "either end)")
    try:  # variants: onnxruntime[threads=1;...], spelled canonically
        backends = tuple(BackendChoice.parse(b) for b in split_outside_brackets(rest, ","))
    except BackendError as e:
        raise ProvmapError(f"strategy {spec!r}: {e}") from None
    return Strategy(kind, backends, spelled=spec)
