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
from ..onnx_external import external_data_file, weight_bytes
from provmap.provenance.weights import serialize

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
    weights file, which must outlive the converted model's use, hence a context manager.
    """
    core = _get_core()
    if weight_bytes(model) < _EXTERNAL_MIN_BYTES:
        try:
            converted = core.read_model(serialize(model))
        except Exception as e:
            raise _ConversionFailed() from e
        yield converted
        return
    with external_data_file(model, prefix="provmap-ov-onnx-") as path:
        try:
            converted = core.read_model(path)
        except Exception as e:
            raise _ConversionFailed() from e
        try:
            yield converted
        finally:
            del converted


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


def read_blob_ir(blob: Blob):
    """The blob's IR and what must outlive every model compiled from it (None, or the map
    OpenVINO's constants point into); staged weights (runtime_module.staged) are read from
    their file, which OpenVINO maps, with the XML written beside them for the call."""
    try:
        xml, weights = blob.files["model.xml"], blob.files["model.bin"]
    except KeyError:
        raise BackendError(f"OpenVINO: blob lacks model.xml/model.bin "
                           f"(members: {sorted(blob.files)})") from None
    if not isinstance(weights, staged.Staged):
        return read_ir(xml, weights), None
    if weights.offset:  # a member inside the (linked) artifact: OpenVINO uses a private map
        import numpy as np

        mapped = np.memmap(weights.path, dtype=np.uint8, mode="c", offset=weights.offset,
                           shape=(weights.size,))
        tensor = _ov().Tensor(mapped, shared_memory=True)
        return read_ir(bytes(xml), tensor), (mapped, tensor)
    xml_path = weights.beside(bytes(xml), ".xml")
    try:
        return read_ir(xml_path, weights.path), None
    finally:
        os.unlink(xml_path)
