"""OpenVINO itself: the import, the one Core, reading an ONNX model through its frontend, and
its exceptions made readable.  Apart from the backend class so that the support queries
(ov_query.py) and the backend share them without a cycle.
"""

from __future__ import annotations

import contextlib
import os
import re

from ..backend import Blob, BackendError
from .. import staged
from ..onnx_external import (MEM_ADDR, external_data_file, point_at, refuse_addresses,
                             weight_bytes)
from provmap.provenance.weights import serialize, shedding

_core = None


def _ov():
    try:
        import openvino
    except ImportError as e:  # pragma: no cover - depends on the installation
        raise BackendError(f"openvino backend: cannot import openvino ({e})") from None
    return openvino


def _get_core():
    global _core
    if _core is None:
        _core = _ov().Core()
    return _core


class _ConversionFailed(Exception):
    """OpenVINO's ONNX frontend refused the model (the frontend's exception is the cause)."""


# Past this many bytes of weights the ONNX model goes to OpenVINO as a file with external data.
_EXTERNAL_MIN_BYTES = 16 << 20


@contextlib.contextmanager
def _read_onnx(model):
    """`model` (an onnx.ModelProto) converted by OpenVINO's ONNX frontend, valid inside the block.

    A large model goes as a file with external weights (see runtime_module/onnx_external.py: on
    VGG-19, 6.8 s of serializing and parsing become well under a second); the frontend maps the
    weights file, which must outlive the converted model's use, hence a context manager.  Weights
    still in the user's file go by address, which the frontend copies: provmap's pages of them
    are shed meanwhile, so the copy is not held beside them.
    """
    core = _get_core()
    if weight_bytes(model) < _EXTERNAL_MIN_BYTES:
        refuse_addresses(model)  # external_data_file refuses them on the other path
        try:
            converted = core.read_model(serialize(model))
        except Exception as e:
            raise _ConversionFailed() from e
        yield converted
        return
    by_address = _reads_addresses()
    with external_data_file(model, prefix="provmap-ov-onnx-", by_address=by_address) as path, \
            (shedding() if by_address else contextlib.nullcontext()):
        try:
            converted = core.read_model(path)
        except Exception as e:
            raise _ConversionFailed() from e
        try:
            yield converted
        finally:
            del converted


_BY_ADDRESS: bool | None = None


def _reads_addresses() -> bool:
    """Whether this OpenVINO's ONNX frontend reads external data by address (`MEM_ADDR`, the
    convention ONNX Runtime's OpenVINO provider relies on): asked once, with 16 floats, so that
    a release without it costs a written file, never a wrong constant."""
    global _BY_ADDRESS
    if _BY_ADDRESS is None:
        _BY_ADDRESS = _probe_addresses()
    return _BY_ADDRESS


def _probe_addresses() -> bool:
    import tempfile

    import numpy as np
    import onnx
    from onnx import helper

    want = np.arange(16, dtype=np.float32) * 0.25 + 1.0
    w = onnx.TensorProto(name="w", data_type=onnx.TensorProto.FLOAT, dims=[16])
    point_at(w, MEM_ADDR, want.ctypes.data, want.nbytes)
    g = helper.make_graph([helper.make_node("Identity", ["w"], ["y"])], "probe", [],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [16])], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    with tempfile.TemporaryDirectory(prefix="provmap-ov-probe-") as tmp:
        path = os.path.join(tmp, "probe.onnx")
        with open(path, "wb") as f:
            f.write(m.SerializeToString())
        try:
            model = _get_core().read_model(path)
            got = [op.get_data() for op in model.get_ordered_ops()
                   if op.get_type_name() == "Constant"]
        except Exception:
            return False
    return len(got) == 1 and np.array_equal(np.asarray(got[0]).ravel(), want)


_NOISE = re.compile(r"^(Exception from |Check '.*' failed at |FrontEnd API failed with|"
                    r"Model wasn't fully converted|Summary:|To facilitate|\[ GENERAL_ERROR \]$)")


def ov_error(e: BaseException) -> str:
    """The informative part of an OpenVINO exception (not its C++ source locations)."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    useful = [ln for ln in lines if not _NOISE.match(ln)]
    if not useful:
        return lines[0] if lines else type(e).__name__
    return "; ".join(ln.lstrip("- ").strip() for ln in useful[:3])


def read_ir(*source):
    """The IR from its checked bytes (xml, weights: a received one) or from the paths of its
    files (OpenVINO maps the weights)."""
    try:
        return _get_core().read_model(*(bytes(x) if isinstance(x, (bytearray, memoryview))
                                        else x for x in source))
    except Exception as e:
        raise BackendError(f"OpenVINO: cannot read the IR (model.xml/model.bin): "
                           f"{ov_error(e)}") from None


def _mapped_weights(path: str, offset: int, size: int):
    """`size` bytes at `offset` of `path` as an ov.Tensor over a private map of provmap's own
    (OpenVINO's constants point into it), and the map, which `weights.shedding` can drop
    pages of.  Private and writable, as ov.Tensor needs; nothing writes to it."""
    import mmap

    import numpy as np

    start = offset - offset % mmap.ALLOCATIONGRANULARITY
    with open(path, "rb") as f:
        mm = mmap.mmap(f.fileno(), offset - start + size, offset=start,
                       access=mmap.ACCESS_COPY)
    array = np.frombuffer(mm, np.uint8, count=size, offset=offset - start)
    return _ov().Tensor(array, shared_memory=True), mm


@contextlib.contextmanager
def shed_ir(xml_path: str):
    """The IR at `xml_path` (weights beside it, in model.bin), its weights in a map whose pages
    are dropped while the block runs (`weights.shedding`): a build compiles it once to learn
    its kernels, and OpenVINO's CPU plugin packs each weight as it compiles, so the weights it
    has read need not stay resident beside the packed copy (a 1B decoder's build had peaked at
    both: 2.2x its weights)."""
    bin_path = os.path.join(os.path.dirname(xml_path), "model.bin")
    size = os.path.getsize(bin_path)
    if not size:  # nothing to map
        yield read_ir(xml_path)
        return
    with open(xml_path, "rb") as f:
        xml = f.read()
    tensor, mm = _mapped_weights(bin_path, 0, size)
    model = read_ir(xml, tensor)
    with shedding(mm):
        yield model
    # the map goes with the last reference to it (the caller's model and anything compiled)


def read_blob_ir(blob: Blob):
    """The blob's IR and what must outlive every model compiled from it: None, or the map
    OpenVINO's constants point into first (shed it while compiling: `shed_ir` says why).
    Staged weights (runtime_module.staged) are mapped from their file, a member inside the
    (linked) artifact where the zip stores it."""
    try:
        xml, weights = blob.files["model.xml"], blob.files["model.bin"]
    except KeyError:
        raise BackendError(f"OpenVINO: blob lacks model.xml/model.bin "
                           f"(members: {sorted(blob.files)})") from None
    if not isinstance(weights, staged.Staged):
        return read_ir(xml, weights), None
    tensor, mm = _mapped_weights(weights.path, weights.offset, weights.size)
    return read_ir(bytes(xml), tensor), (mm, tensor)


def compiling(keep):
    """The context to compile a `read_blob_ir` model in: its map shed, if it has one (every
    0.2 s: the load reads some pages twice, `weights.shedding` says what that costs)."""
    return shedding(keep[0], every=0.2) if keep else contextlib.nullcontext()
