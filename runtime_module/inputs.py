"""What a loaded artifact accepts as inputs, checked before anything runs: names, dtypes, ranks
and sizes, index bounds, and for a dynamic artifact the shape profile it was compiled for.

Its own concept because every caller (run, compare, profile, bisect, the Python API) goes
through it, and the profile made the check a relation between inputs (a symbol is one size on
every input naming it), not a comparison per input."""

from __future__ import annotations

from typing import Mapping

import numpy as np

from provmap.provenance.profile import ShapeProfile
from provmap.provenance.util.errors import ProvmapError
from provmap.provenance.util.listing import unused_names

from .index_bounds import check_indices, random_ints


class InputContract:
    def __init__(self, model: dict):
        self.specs = {t["name"]: t for t in model["inputs"]}
        # Absent from artifacts written before it (format version 2 still reads them).
        self.index_inputs = dict(model.get("index_inputs") or {})
        #: The sizes a dynamic artifact serves, checked on every run (None: static).
        self.profile = ShapeProfile.from_json(model["shape_profile"]) \
            if "shape_profile" in model else None
        # read once: right after a model's run every lookup here is slow
        # (MobileNet-v3: 6.5-9.6 us a call, 1 us warm)
        self._checks = [(n, tuple(s["shape"]), dtype_or_none(s["dtype"]), s["dtype"],
                         self.index_inputs.get(n)) for n, s in self.specs.items()]

    def check(self, inputs: Mapping[str, np.ndarray]) -> dict:
        """The inputs as C-ordered arrays by name, or one ProvmapError line on what is wrong."""
        if type(inputs) is not dict and not isinstance(inputs, Mapping):  # a list read as names
            raise ProvmapError(f"inputs must map each input name to an array "
                               f"({', '.join(self.specs)}), not a {type(inputs).__name__}")
        env = {}
        for name, shape, want, dname, bound in self._checks:
            if name not in inputs:
                raise ProvmapError(f"missing input {name!r}; the model takes "
                                   f"{', '.join(self.specs)}" + unused_names(name, inputs))
            a = np.asarray(inputs[name])
            if not shape_ok(a.shape, shape) or (
                    a.dtype != want if want is not None else str(a.dtype) != dname):
                raise ProvmapError(f"input {name!r}: expected {dname}{self.shown(name)}, "
                                   f"got {a.dtype}{list(a.shape)}")
            if bound is not None:
                check_indices(name, a, bound)
            # Not np.ascontiguousarray: it turns 0-d arrays into shape (1,).
            env[name] = np.asarray(a, order="C")
        extra = set(inputs) - set(self.specs) if len(inputs) != len(self._checks) else ()
        if extra:
            raise ProvmapError(f"unknown input(s) {sorted(extra)}; the model takes "
                               f"{', '.join(self.specs) or 'no input'}")
        if self.profile is not None:
            why = self.profile.problem({n: a.shape for n, a in env.items()})
            if why:
                raise ProvmapError(why)
        return env

    def shown(self, name: str) -> str:
        """`[1, seq(1..512)]` for a dynamic input, `[1, 3, 224, 224]` for a static one."""
        dims = self.profile.inputs.get(name) if self.profile is not None else None
        if dims is None:
            return str(list(self.specs[name]["shape"]))
        return "[" + ", ".join(str(d) if isinstance(d, int) else
                               f"{d}({self.profile.symbols[d].min}..{self.profile.symbols[d].max})"
                               for d in dims) + "]"

    def random(self, seed: int = 0, point: str = "opt") -> dict[str, np.ndarray]:
        """Seeded inputs of the right dtypes, at one point of a dynamic artifact's profile
        (min, opt or max; the opt sizes by default, those the search measured at)."""
        from provmap.provenance.shapes import memory_bytes

        rng = np.random.default_rng(seed)
        sizes = self.profile.shapes(point) if self.profile is not None else {}
        todo, total = [], 0
        for name, spec in self.specs.items():  # every size known before anything is drawn
            dt = np.dtype(spec["dtype"])
            shape = sizes.get(name, spec["shape"])
            if None in shape:
                raise ProvmapError(f"input {name!r} has a dimension known only at run time "
                                   f"({spec['shape']}): give the inputs (--inputs FILE.npz)")
            todo.append((name, dt, tuple(shape)))
            total += int(np.prod(shape, dtype=object)) * dt.itemsize
        if total > memory_bytes():
            raise ProvmapError(f"random inputs of {total} bytes in all ({point} sizes): more "
                               "than this machine's memory")
        out = {}
        for name, dt, shape in todo:
            if dt in (np.float32, np.float64):
                # drawn in the target dtype: a float64 draw cast down doubled the peak
                # (issue 52); the same seed draws the same values as before in float64
                out[name] = rng.standard_normal(shape, dtype=dt)
            elif dt.kind == "f":  # float16, bfloat16: numpy draws only float32 and float64
                out[name] = rng.standard_normal(shape, dtype=np.float32).astype(dt)
            else:  # 0/1 (masks, bools), or any row of the table an integer input indexes
                out[name] = random_ints(rng, dt, shape, self.index_inputs.get(name))
        return out


def dtype_or_none(name: str):
    try:
        return np.dtype(name)
    except TypeError:  # a name numpy does not know: compared by its string, as before
        return None


def shape_ok(shape: tuple, spec: tuple) -> bool:
    """`spec` may hold None for a dimension only known at run time (NonZero, Unique outputs)
    or served over a range (a dynamic artifact's symbols, checked by the profile)."""
    return shape == spec or (len(shape) == len(spec)
                             and all(w is None or g == w for g, w in zip(shape, spec)))
