"""Shape profiles: the sizes an artifact serves, per symbolic dimension a range and the size to
optimise for.

Users of ONNX Runtime and OpenVINO run one session at every shape; TensorRT asks for an
optimization profile (`--minShapes/--optShapes/--maxShapes`) and times its tactics at the opt
shape.  provmap takes the same three numbers in the spelling OpenVINO's tools use for a bounded
dimension (`1..512`), with the opt size after `@`:

    --input-shape input_ids=1x1..512@128     an axis of one input (opt defaults to max)
    --dim seq=1..512@128                     a symbol of the model, on every input naming it
    --dim batch=1                            a symbol fixed

A fixed size is a profile of one point: an all-fixed profile is today's static artifact.  A
dimension left open with neither a size nor a range is refused in one line naming every such
input and axis with the flags that would close them; nothing is silently 1.

The profile is recorded in the manifest (`model.shape_profile`) and checked on every run: a size
outside its range is one line naming the input, the axis, the size and the range.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .util.errors import ProvmapError

DIM_FLAG = "--dim"
SHAPE_FLAG = "--input-shape"
POINTS = ("min", "opt", "max")
_SYMBOL = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:/-]{0,127}$")
_INT64_MAX = 2**63 - 1


@dataclass(frozen=True)
class DimRange:
    """Sizes min..max of one dimension, measured at opt."""

    min: int
    opt: int
    max: int

    def __contains__(self, n: int) -> bool:
        return self.min <= n <= self.max

    @property
    def fixed(self) -> bool:
        return self.min == self.max

    def text(self) -> str:
        if self.fixed:
            return str(self.min)
        return f"{self.min}..{self.max}" + ("" if self.opt == self.max else f"@{self.opt}")

    def at(self, point: str) -> int:
        return getattr(self, point)


def parse_dim(text: str, where: str):
    """`16` (an int), `1..512` or `1..512@128` (a DimRange); errors name `where`."""
    t = text.strip()
    body, at, opt = t.partition("@")
    lo, dots, hi = body.partition("..")

    def num(s: str) -> int:
        s = s.strip()
        if not s or not s.isascii() or not s.isdigit():
            raise ProvmapError(f"{where}: {text!r} is not a size or a range MIN..MAX[@OPT] "
                               "of non-negative integers")
        v = int(s)
        if v > _INT64_MAX:
            raise ProvmapError(f"{where}: {v} is beyond int64")
        return v

    if not dots:
        if at:
            raise ProvmapError(f"{where}: {text!r}: @OPT follows a range MIN..MAX")
        return num(lo)
    a, b = num(lo), num(hi)
    o = num(opt) if at else b
    if a > b:
        raise ProvmapError(f"{where}: range {text!r} has MIN {a} above MAX {b}")
    if not a <= o <= b:
        raise ProvmapError(f"{where}: range {text!r} has OPT {o} outside {a}..{b}")
    return DimRange(a, o, b)


def parse_dims(specs) -> dict[str, object]:
    """`--dim SYMBOL=SIZE|MIN..MAX[@OPT]`, repeatable."""
    out: dict[str, object] = {}
    for spec in specs or ():
        name, sep, val = spec.partition("=")
        name = name.strip()
        if not sep or not name:
            raise ProvmapError(f"{DIM_FLAG} {spec!r}: expected SYMBOL=SIZE or SYMBOL=MIN..MAX[@OPT] "
                               "(e.g. seq=1..512@128)")
        if name in out:
            raise ProvmapError(f"{DIM_FLAG}: dimension {name!r} given twice")
        out[name] = parse_dim(val, f"{DIM_FLAG} {name}")
    return out


def at_opt(values: dict) -> dict:
    """`values` (sizes, ranges, or shapes of them) with every range at its opt size: for tools
    that compare numbers at one shape (bisect)."""
    def one(v):
        if isinstance(v, DimRange):
            return v.opt
        if isinstance(v, tuple):
            return tuple(one(d) for d in v)
        return v
    return {k: one(v) for k, v in values.items()}


def as_range(v, where: str):
    """A Python API value for a dimension: an int, a DimRange, or (min, opt, max)."""
    if isinstance(v, DimRange) or (isinstance(v, int) and not isinstance(v, bool)):
        if isinstance(v, int) and v < 0:
            raise ProvmapError(f"{where}: size {v} is negative")
        return v
    if isinstance(v, (tuple, list)) and len(v) == 3 and all(
            isinstance(x, int) and not isinstance(x, bool) for x in v):
        a, o, b = v
        if not 0 <= a <= o <= b:
            raise ProvmapError(f"{where}: range {tuple(v)} must be 0 <= min <= opt <= max")
        return DimRange(a, o, b)
    raise ProvmapError(f"{where}: expected a size or (min, opt, max), got {v!r}")


@dataclass
class ShapeProfile:
    """What sizes each runtime input takes: per input its dims (a size or a symbol's name), per
    symbol its range.  Symbols shared between inputs (a batch, a KV cache's past length) are one
    size on every call, as ONNX reads one name as one size."""

    inputs: dict[str, list] = field(default_factory=dict)     # name -> [int | symbol]
    symbols: dict[str, DimRange] = field(default_factory=dict)

    @property
    def dynamic(self) -> bool:
        return any(not r.fixed for r in self.symbols.values())

    def shapes(self, point: str = "opt") -> dict[str, tuple[int, ...]]:
        """Every input's shape at one point of the profile (min, opt or max)."""
        return {n: tuple(d if isinstance(d, int) else self.symbols[d].at(point) for d in dims)
                for n, dims in self.inputs.items()}

    def points(self) -> list[tuple[str, dict]]:
        """(label, shapes) for min, opt and max, a point equal to an earlier one left out."""
        out, seen = [], []
        for p in POINTS:
            s = self.shapes(p)
            if s not in seen:
                seen.append(s)
                out.append((p, s))
        return out

    def problem(self, given: dict[str, tuple]) -> str | None:
        """One line on input shapes the profile does not serve, or None.  `given` holds only
        inputs whose rank already matched."""
        bound: dict[str, tuple[str, int, int]] = {}
        for name, dims in self.inputs.items():
            shape = given.get(name)
            if shape is None or len(shape) != len(dims):
                continue
            for axis, (d, n) in enumerate(zip(dims, shape)):
                if isinstance(d, int):
                    continue
                r = self.symbols[d]
                if n not in r:
                    return (f"input {name!r} dimension {axis} ('{d}') is {n}, outside the "
                            f"profile's {r.min}..{r.max} (compile with {DIM_FLAG} {d}=MIN..MAX "
                            "to serve it)")
                first = bound.setdefault(d, (name, axis, n))
                if first[2] != n:
                    return (f"input {name!r} dimension {axis} ('{d}') is {n}, but input "
                            f"{first[0]!r} dimension {first[1]} gives '{d}' {first[2]}: the model "
                            "names them alike, so they must be one size")
        return None

    def describe(self) -> str:
        """`seq=1..512@128, batch=1` (what `inspect` prints)."""
        return ", ".join(f"{s}={r.text()}" for s, r in self.symbols.items())

    def to_json(self) -> dict:
        return {"inputs": {n: list(d) for n, d in self.inputs.items()},
                "symbols": {s: [r.min, r.opt, r.max] for s, r in self.symbols.items()}}

    @classmethod
    def from_json(cls, d: dict) -> "ShapeProfile":
        """From a manifest already checked by the artifact schema (types, sizes, references)."""
        return cls({n: list(v) for n, v in d["inputs"].items()},
                   {s: DimRange(*v) for s, v in d["symbols"].items()})


def json_problem(d) -> str | None:
    """What is wrong with a manifest's `model.shape_profile` (a stranger's file), or None."""
    if not isinstance(d, dict) or set(d) != {"inputs", "symbols"}:
        return "expected an object with 'inputs' and 'symbols'"
    ins, syms = d["inputs"], d["symbols"]
    if not isinstance(ins, dict) or not isinstance(syms, dict):
        return "'inputs' and 'symbols' must be objects"
    if len(syms) > 4096 or len(ins) > 65536:
        return "too many entries"
    for s, r in syms.items():
        if not isinstance(s, str) or not _SYMBOL.match(s):
            return f"symbol {str(s)[:40]!r} is not a dimension name"
        if not (isinstance(r, list) and len(r) == 3 and all(
                type(x) is int and 0 <= x <= _INT64_MAX for x in r) and r[0] <= r[1] <= r[2]):
            return f"symbols.{s}: expected [min, opt, max] with 0 <= min <= opt <= max"
    for n, dims in ins.items():
        if not isinstance(dims, list) or len(dims) > 64:
            return f"inputs.{str(n)[:40]}: expected a list of at most 64 dimensions"
        for x in dims:
            if isinstance(x, str):
                if x not in syms:
                    return f"inputs.{str(n)[:40]}: symbol {x[:40]!r} has no range"
            elif type(x) is not int or not 0 <= x <= _INT64_MAX:
                return f"inputs.{str(n)[:40]}: dimension {str(x)[:20]} is not a size"
    return None


def symbol_for(input_name: str, axis: int, dim_param: str) -> str:
    """The symbol an open axis goes by: the model's own name, else INPUT_AXIS."""
    if dim_param and _SYMBOL.match(dim_param):
        return dim_param
    base = re.sub(r"[^A-Za-z0-9_]", "_", input_name) or "input"
    if not base[0].isalpha() and base[0] != "_":
        base = "_" + base
    return f"{base}_{axis}"[:128]


def profile_text(shapes: dict | None, dims: dict | None) -> str:
    """`input_ids=1x1..512@128, seq=1..512` as the flags gave them (for "derived" notes)."""
    def t(v):
        return v.text() if isinstance(v, DimRange) else str(v)
    parts = [f"{k}={'x'.join(t(d) for d in v)}" for k, v in (shapes or {}).items()]
    parts += [f"{k}={t(v)}" for k, v in (dims or {}).items()]
    return ", ".join(parts)
