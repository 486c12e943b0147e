"""The `--inputs` .npz, read in two steps: its zip directory and each array's `.npy` header
first, the arrays' data only once those headers match what the model takes.

Why two steps: an .npz is a zip, and a deflated member of zeros compresses a thousandfold.  A
13 MB file declaring a 3 GB array for a model taking `float32[4]` was read whole (3 GB RSS) before
the shape check refused it (issue 52; run, compare, profile and bisect share this reader).  The
header says the shape and dtype in a few hundred bytes, and the zip directory says how many
bytes the member holds, so both are checked against each other, the array against the model's
inputs, and the total against this machine's memory, before a byte of data is inflated.
"""

from __future__ import annotations

import zipfile
from typing import NamedTuple

from provmap.provenance.util.errors import ProvmapError, first_line
from provmap.provenance.util.npz_write import npz_name

MAX_MEMBERS = 10_000   # arrays in one inputs file: a model takes a handful
MAX_HEADER = 10_000    # bytes of one .npy header (numpy's own default limit)


class Header(NamedTuple):
    """One array as its .npy header declares it (read before its data)."""
    shape: tuple
    dtype: object
    member: str


class NpzInputs:
    """An inputs file whose headers have been read and checked in themselves; `arrays(expect)`
    checks them against the model and only then reads the data."""

    def __init__(self, path: str):
        self.path = path
        self.headers = read_headers(path)

    def arrays(self, expect: dict | None = None, profile=None) -> dict:
        """{name: array}.  `expect` ({name: (dtype or None, dtype name, shape, shown)}, shape
        with None for a dimension known at run time) and the shape `profile` are checked on the
        headers first, so a mismatched array is refused without being read."""
        if expect is not None:
            check_headers(self.path, self.headers, expect, profile)
        return read_arrays(self.path, self.headers)


def _bad(path: str, why: str) -> ProvmapError:
    return ProvmapError(f"{path}: not a valid .npz file of input arrays ({why}); write one "
                        "with numpy.savez(path, NAME=array, ...)")


def _header_of(fp):
    """(shape, fortran_order, dtype) of the .npy stream `fp`, data not read."""
    import numpy as np

    fmt = np.lib.format
    version = fmt.read_magic(fp)
    if version == (1, 0):
        return fmt.read_array_header_1_0(fp, max_header_size=MAX_HEADER)
    if version == (2, 0):
        return fmt.read_array_header_2_0(fp, max_header_size=MAX_HEADER)
    raise ValueError(f".npy format version {version[0]}.{version[1]} is not read here")


def read_headers(path: str) -> dict[str, Header]:
    """The directory and every member's .npy header, with what they declare checked against
    each other: one line naming the file and member for anything else."""
    import numpy as np

    from provmap.provenance.shapes import memory_bytes

    try:
        z = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, ValueError) as e:
        raise _bad(path, first_line(e)) from None
    with z:
        infos = z.infolist()
        if not infos:
            raise _bad(path, "it holds no arrays")
        if len(infos) > MAX_MEMBERS:
            raise _bad(path, f"{len(infos)} members, more than the {MAX_MEMBERS} read here")
        out: dict[str, Header] = {}
        total = 0
        for info in infos:
            name = info.filename
            if not name.endswith(".npy") or info.is_dir():
                raise _bad(path, f"member {name!r} is not a .npy array")
            try:
                with z.open(info) as fp:
                    shape, fortran, dtype = _header_of(fp)
                    offset = fp.tell()
            except Exception as e:  # a bad header, an encrypted or unsupported member
                raise _bad(path, f"member {name!r}: {first_line(e)}") from None
            if dtype.hasobject:
                raise _bad(path, f"member {name!r} holds Python objects, not arrays")
            count = 1
            for d in shape:
                count *= d
            nbytes = count * dtype.itemsize
            if nbytes > memory_bytes():
                raise _bad(path, f"member {name!r} declares {dtype}{list(shape)}, {nbytes} bytes, "
                                 "more than this machine's memory")
            if info.file_size != offset + nbytes:
                raise _bad(path, f"member {name!r}: its header declares {nbytes} bytes of data, "
                                 f"the zip directory {info.file_size - offset}")
            total += nbytes
            key = npz_name(name[:-len(".npy")])  # as provmap's writer named it (npz_write)
            if key in out:
                raise _bad(path, f"member {name!r} is listed twice")
            out[key] = Header(tuple(shape), np.dtype(dtype), name)
        if total > memory_bytes():
            raise _bad(path, f"its arrays declare {total} bytes in all, more than this machine's "
                             "memory")
        return out


def check_headers(path: str, headers: dict, expect: dict, profile=None) -> None:
    """Names, dtypes and shapes (and a dynamic artifact's profile) from the headers, before
    any data is read; the same words as the reader's check of the arrays."""
    from provmap.runtime_module.inputs import shape_ok

    missing = [n for n in expect if n not in headers]
    extra = [n for n in headers if n not in expect]
    if missing:  # the reader's own words: "missing input", and the closest name given
        from provmap.provenance.util.listing import unused_names

        raise ProvmapError(f"--inputs {path}: missing input {missing[0]!r}; the model takes "
                           f"{', '.join(expect)}" + unused_names(missing[0], headers))
    if extra:
        raise ProvmapError(f"--inputs {path}: " + "; ".join(
            ([f"no array for input(s) {', '.join(map(repr, missing))}"] if missing else [])
            + ([f"array(s) {', '.join(map(repr, extra))} name no input of the model (it takes "
                f"{', '.join(map(repr, expect)) or 'none'})"] if extra else [])))
    for name, (want, dname, shape, shown) in expect.items():
        h = headers[name]
        if dname is None and shape is None:
            continue  # a type this reader cannot state: the arrays' own check says
        if (shape is not None and not shape_ok(h.shape, tuple(shape))) or (
                dname is not None and (h.dtype != want if want is not None
                                       else str(h.dtype) != dname)):
            raise ProvmapError(f"--inputs {path}: input {name!r}: expected {dname}{shown}, "
                               f"got {h.dtype}{list(h.shape)}")
    if profile is not None:
        why = profile.problem({n: h.shape for n, h in headers.items()})
        if why:
            raise ProvmapError(f"--inputs {path}: {why}")


def expect_of_contract(contract) -> dict:
    """What `check_headers` takes, from a loaded artifact's InputContract."""
    from provmap.runtime_module.inputs import dtype_or_none

    return {n: (dtype_or_none(s["dtype"]), s["dtype"], s["shape"], contract.shown(n))
            for n, s in contract.specs.items()}


def expect_of_graph(graph) -> dict:
    """What `check_headers` takes, from an ONNX graph's run-time inputs (bisect's model): a
    dimension without a fixed size matches any; an element type numpy lacks is not checked."""
    import numpy as np
    from onnx import helper

    from provmap.provenance.shapes import runtime_inputs

    out = {}
    for vi in runtime_inputs(graph):
        tt = vi.type.tensor_type if vi.type.HasField("tensor_type") else None
        try:
            want = np.dtype(helper.tensor_dtype_to_np_dtype(tt.elem_type))
        except (AttributeError, KeyError, TypeError, ValueError):
            want = None
        if want is None or want.kind not in "biufc":
            out[vi.name] = (None, None, None, "")  # strings, bfloat16 and the like
            continue
        if not tt.HasField("shape"):
            shape = None
        else:
            shape = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
        out[vi.name] = (want, str(want), shape, str(shape))
    return out


def read_arrays(path: str, headers: dict) -> dict:
    """The data, once the headers passed: each member read by its own header (never pickle)."""
    import numpy as np

    try:
        with zipfile.ZipFile(path) as z:
            return {k: np.lib.format.read_array(z.open(h.member), allow_pickle=False,
                                                max_header_size=MAX_HEADER)
                    for k, h in headers.items()}
    except Exception as e:
        raise _bad(path, first_line(e)) from None
