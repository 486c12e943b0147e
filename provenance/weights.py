"""Large weights kept in their external-data file, read through a map, never copied into protobuf.

Why (issue 51): a decoder's weights were held five to eight times over while compiling: the
loaded proto, each derived copy (normalized, sorted, folded: every CopyFrom copies `raw_data`),
the checker's serialization, the hashes' `to_array`, the Relax constants.  A 1B-parameter
decoder (4 GB) needed ~29 GB where ONNX Runtime and OpenVINO need about its size.

So a model read from a file keeps each large initializer of its main graph as the external
reference its file gives (a *lazy* tensor), marked with the directory it resolves against
(the standard `basepath` key, which onnx's own reader ignores and ONNX Runtime refuses: a lazy
tensor that escaped to a library fails loudly instead of being read from the wrong place).
Copies of the proto then copy a few bytes per weight.  Readers go through `to_array` (a
zero-copy view of a private, copy-on-write map of the file; TVM takes it by DLPack) or
`raw_view`; a model handed to a library or written out is made whole by `materialize`.
Small tensors and types numpy cannot view directly (4-bit, bfloat16, float8, strings) are read
in at load as onnx.load reads them, so everything that reads small constants is unchanged.

`model_sha256` gives the value `provenance.ids.model_sha256` gives the same model loaded
whole (the hash artifacts record), streaming the weights from the map.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import mmap
import os

import numpy as np
import onnx
from onnx import TensorProto

#: Initializers at least this large stay in their file (smaller ones are read in at load).
LAZY_MIN_BYTES = 1 << 20
_BASE = "basepath"
_VIEWABLE = {TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.INT8,
             TensorProto.UINT8, TensorProto.INT16, TensorProto.UINT16, TensorProto.INT32,
             TensorProto.UINT32, TensorProto.INT64, TensorProto.UINT64, TensorProto.BOOL}
_MAPS: dict[tuple[int, int], mmap.mmap] = {}
#: Bytes a streaming reader goes through between drops of the maps' pages.
_RELEASE_EVERY = 64 << 20


def tensor_bytes(t: TensorProto) -> int:
    """A tensor's size from its dims and type (reading `raw_data` to measure it copies it)."""
    try:
        size = onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
    except Exception:  # string or undefined tensors: count one byte per element
        size = 1
    return math.prod(t.dims) * size


def _entries(t: TensorProto) -> dict[str, str]:
    return {e.key: e.value for e in t.external_data}


def is_lazy(t: TensorProto) -> bool:
    return t.data_location == TensorProto.EXTERNAL and any(
        e.key == _BASE for e in t.external_data)


def has_lazy(model: onnx.ModelProto) -> bool:
    return any(is_lazy(t) for t in model.graph.initializer)


def load(path: str) -> onnx.ModelProto:
    """`path` read as onnx.load reads it, except that large main-graph initializers in external
    data stay there (lazy).  Locations are checked by onnx's own reader (no absolute paths, no
    escaping the model's directory), as onnx.load checks them."""
    from onnx.external_data_helper import (_get_all_tensors, load_external_data_for_tensor,
                                           uses_external_data)

    model = onnx.load(path, load_external_data=False)
    base = os.path.dirname(os.path.abspath(path))
    for t in model.graph.initializer:  # marked first: protobuf's wrappers have no stable id()
        if (uses_external_data(t) and t.data_type in _VIEWABLE
                and tensor_bytes(t) >= LAZY_MIN_BYTES):
            _view(t, base)  # checks the location and the bounds now, as onnx.load would
            e = t.external_data.add()
            e.key, e.value = _BASE, base
    for t in _get_all_tensors(model):
        if uses_external_data(t) and not is_lazy(t):
            load_external_data_for_tensor(t, base)
    return model


def _mapped(fd: int) -> mmap.mmap:
    st = os.fstat(fd)
    key = (st.st_dev, st.st_ino)
    mm = _MAPS.get(key)
    if mm is None or len(mm) != st.st_size:
        # ACCESS_COPY: writable for DLPack consumers, private (a write never reaches the file)
        mm = _MAPS[key] = mmap.mmap(fd, 0, access=mmap.ACCESS_COPY)
    return mm


def release(maps=()) -> None:
    """Drop the mapped weights' pages (and those of `maps`) from this process (they are read
    again from the file when next touched): after the import has hashed them and after a copy
    was made for a library, so that the map and a library's copy are not resident at once.
    Nothing is ever written to the map, so nothing is lost."""
    for mm in (*list(_MAPS.values()), *maps):  # list(): another thread may add a map
        try:
            mm.madvise(mmap.MADV_DONTNEED)
        except (AttributeError, OSError, ValueError):  # no madvise here: pages stay, still right
            pass


_read_since_release = 0


def went_through(nbytes: int) -> None:
    """A reader that goes through the weights once (a hash) counts what it read here; every
    `_RELEASE_EVERY` bytes the maps' pages are dropped, so it holds at most that much of them
    (a 124M decoder's build and map kept all 472 MB resident after hashing them, beside
    OpenVINO's copy or TVM's build)."""
    global _read_since_release
    _read_since_release += nbytes
    if _read_since_release >= _RELEASE_EVERY:
        _read_since_release = 0
        release()


@contextlib.contextmanager
def shedding(*maps: mmap.mmap, every: float = 0.02):
    """While the block runs, drop the pages of provmap's maps (and of `maps`) from this process
    every `every` seconds.  For a library that reads weights once, to copy or repack them
    (OpenVINO's frontend copying a weight given by address, its CPU plugin packing an IR's
    weights): without it the pages it has read stay resident beside its copy until the block
    ends, twice the weights at the peak (a 1B decoder's compile: 4 GB of mapped file beside 4 GB
    of packed weights).  Only for maps nobody writes to (`release` says why that is safe); a
    page read again is read from the page cache.

    `every`: a reader at a few GB/s holds `every` seconds of its reading; 0.02 s kept a 124M
    decoder's compile under 2x its weights where 0.2 s let 400 MB of pages pile up beside
    OpenVINO's copy.  A reader that reads pages twice (OpenVINO compiling a loaded artifact)
    wants a longer one: at 0.05 s the 1B decoder's run took 6.4-8.1 s against 5.6-6.8 s."""
    import threading

    stop = threading.Event()

    def drop():
        while not stop.wait(every):
            release(maps)

    worker = threading.Thread(target=drop, name="provmap-shedding", daemon=True)
    worker.start()
    try:
        yield
    finally:
        stop.set()
        worker.join()
        release(maps)


def _view(t: TensorProto, base: str | None = None) -> memoryview:
    """The bytes of a lazy tensor in its file, checked as onnx.load checks them."""
    from onnx.external_data_helper import _open_external_data_fd

    info = _entries(t)
    base = base if base is not None else info.get(_BASE, "")
    fd = _open_external_data_fd(base, info.get("location", ""), t.name, True)
    try:
        mm = _mapped(fd)
    finally:
        os.close(fd)
    offset = int(info.get("offset") or 0)
    want = tensor_bytes(t)
    length = int(info.get("length") or (len(mm) - offset))
    if offset < 0 or length != want or offset + length > len(mm):
        raise ValueError(f"tensor {t.name!r}: external data at offset {offset}, length "
                         f"{length}, in a file of {len(mm)} bytes; its type and dims need {want}")
    return memoryview(mm)[offset:offset + length]


def raw_view(t: TensorProto) -> memoryview:
    """A lazy tensor's little-endian bytes, without copying them."""
    return _view(t)


def to_array(t: TensorProto) -> np.ndarray:
    """numpy_helper.to_array(t), a view of the file's map for a lazy tensor (do not write)."""
    if not is_lazy(t):
        return onnx.numpy_helper.to_array(t)
    dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t.data_type)).newbyteorder("<")
    return np.frombuffer(_view(t), dtype=dtype).reshape(tuple(t.dims))


def materialize(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with every lazy tensor read in, as onnx.load gives it (in place; returned)."""
    for t in model.graph.initializer:
        if is_lazy(t):
            t.raw_data = bytes(_view(t))
            t.data_location = TensorProto.DEFAULT
            del t.external_data[:]
    return model


def whole(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` itself when nothing in it is lazy, else a materialized copy: for a model handed
    to a library or written out, which must not depend on provmap's map of a file."""
    if not has_lazy(model):
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    return materialize(out)


def as_inputs(model: onnx.ModelProto, chosen) -> onnx.ModelProto:
    """`model` with the initializers `chosen(t)` picks turned into typed graph inputs, their
    values left out (every other field kept): for readers that need only the weights' types.
    The model itself is returned when nothing is picked."""
    picked = [t for t in model.graph.initializer if chosen(t)]
    if not picked:
        return model
    names = {t.name for t in picked}
    out = onnx.ModelProto()
    _copy_fields(model, out, skip=("graph",))
    src, g = model.graph, out.graph
    _copy_fields(src, g, skip=("initializer", "input"))
    g.input.extend(i for i in src.input if i.name not in names)  # IR < 4 lists them as inputs
    g.input.extend(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
                   for t in picked)
    g.initializer.extend(t for t in src.initializer if t.name not in names)
    return out


def _copy_fields(src, dst, skip: tuple[str, ...]) -> None:
    for fd, value in src.ListFields():
        if fd.name in skip:
            continue
        if (fd.is_repeated if hasattr(fd, "is_repeated") else fd.label == fd.LABEL_REPEATED):
            getattr(dst, fd.name).extend(value)
        elif fd.type == fd.TYPE_MESSAGE:
            getattr(dst, fd.name).CopyFrom(value)
        else:
            setattr(dst, fd.name, value)


def checkable(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` as onnx.checker can take it: each lazy initializer a typed graph input.  The
    checker looks for external data beside the working directory (it has no model directory
    for a proto in memory); `load` already checked each lazy tensor's place, size and type
    against its file."""
    return as_inputs(model, is_lazy)


# -- the hash of the whole model, streamed ------------------------------------------------

def model_sha256(model: onnx.ModelProto) -> str:
    """sha256 of `whole(model).SerializeToString(deterministic=True)`, without building it."""
    h = hashlib.sha256()
    for p in _pieces(model):
        h.update(p)
        went_through(len(p))
    release()
    return h.hexdigest()


def serialize(model: onnx.ModelProto) -> bytes:
    """`whole(model).SerializeToString()` (deterministic) in one allocation: no whole copy of
    the proto first, the weights copied once, straight from the map."""
    if not has_lazy(model):
        return model.SerializeToString(deterministic=True)
    data = b"".join(_pieces(model))
    release()
    return data


def _pieces(model: onnx.ModelProto) -> list:
    """The serialized whole model as a list of byte pieces.  The model is serialized with a
    32-byte token for each lazy tensor's data; the tokens' fields (and the lengths of the
    messages that hold them) are re-encoded around views of the real bytes."""
    lazy = [k for k, t in enumerate(model.graph.initializer) if is_lazy(t)]
    if not lazy:
        return [model.SerializeToString(deterministic=True)]
    stand_in = onnx.ModelProto()
    stand_in.CopyFrom(model)
    tokens: dict[bytes, TensorProto] = {}
    salt = os.urandom(16)
    for k in lazy:
        token = hashlib.sha256(b"provmap-lazy" + salt + str(k).encode()).digest()
        tokens[token] = model.graph.initializer[k]
        s = stand_in.graph.initializer[k]
        s.raw_data = token
        s.data_location = TensorProto.DEFAULT  # set, as onnx.load sets it when reading in
        del s.external_data[:]
    data = stand_in.SerializeToString(deterministic=True)
    del stand_in
    return _message(memoryview(data), "model", tokens)[0]


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _read_varint(buf: memoryview, i: int) -> tuple[int, int]:
    n = shift = 0
    while True:
        b = buf[i]
        i += 1
        n |= (b & 0x7F) << shift
        if b < 0x80:
            return n, i
        shift += 7


#: Where lazy data sits in a ModelProto: graph (7) -> initializer (5) -> raw_data (9).
_INTO = {("model", 7): "graph", ("graph", 5): "tensor"}


def _message(buf: memoryview, kind: str, tokens: dict) -> tuple[list, int]:
    """`buf` (one message's fields) as pieces to hash, and their total length."""
    pieces: list = []
    total = 0
    i = 0
    while i < len(buf):
        start = i
        key, i = _read_varint(buf, i)
        field, wire = key >> 3, key & 7
        if wire == 0:
            _, i = _read_varint(buf, i)
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        elif wire == 2:
            n, j = _read_varint(buf, i)
            value = buf[j:j + n]
            inner = _INTO.get((kind, field))
            real = tokens.get(bytes(value)) if kind == "tensor" and field == 9 and n == 32 \
                else None
            if inner is not None or real is not None:
                if real is not None:
                    sub, m = [_view(real)], tensor_bytes(real)
                else:
                    sub, m = _message(value, inner, tokens)
                head = bytes(buf[start:i]) + _varint(m)
                pieces.append(head)
                pieces.extend(sub)
                total += len(head) + m
                i = j + n
                continue
            i = j + n
        else:  # groups: not in ONNX's schema
            raise ValueError(f"unexpected wire type {wire} in a serialized {kind}")
        pieces.append(buf[start:i])
        total += i - start
    return pieces, total
