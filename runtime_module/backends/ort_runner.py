"""Running a loaded ONNX Runtime session: `OrtRunner` (moved out of onnxruntime.py, which
builds sessions, when it learnt to stop a running call).

Ctrl-C: a call runs in ORT's C++ with the GIL released, where Python's SIGINT handler cannot
run until it returns, and a Loop with a trip count of 1e18 never returned (issue 52: two
Ctrl-Cs, still running).  Every call passes a `RunOptions`; `cancel` (called from another
thread by provenance/util/native_stop.py's watcher) sets its `terminate`, which ORT checks
between the nodes it executes, a Loop's body included, and the call fails at once with
"Exiting due to terminate flag".  Measured: the Loop stopped 1 ms after `terminate` was set.
"""

from __future__ import annotations

import ctypes
from typing import Sequence

import ml_dtypes
import numpy as np
import onnx

from provmap.provenance.util.errors import first_line

from ..backend import BackendError, Runner

_BF16 = np.dtype(ml_dtypes.bfloat16)
_BF16_TYPE = "tensor(bfloat16)"


def _ort():
    try:
        import onnxruntime
    except ImportError as e:  # pragma: no cover - depends on the installation
        raise BackendError(f"onnxruntime backend: cannot import onnxruntime ({e})") from None
    return onnxruntime


class OrtRunner(Runner):
    """`sess.run` with prebuilt name lists; outputs are fresh arrays ORT allocates per call.

    bfloat16: ORT's numpy bridge knows no bfloat16 (ml_dtypes' type is refused on input, and a
    bfloat16 output cannot become a numpy array), so a session with a bfloat16 input or output
    runs through OrtValues instead: bfloat16 inputs are handed over as their uint16 bits with
    the ONNX type given explicitly, bfloat16 outputs copied out of ORT's buffer byte for byte.
    """

    def __init__(self, sess, input_names: list[str], output_names: list[str]):
        self.sess = sess
        self.input_names = input_names
        self.output_names = output_names
        # The C++ session behind InferenceSession: calling it directly skips the Python
        # wrapper's per-call feed validation (we validated names at load time).
        self._run = sess._sess.run if hasattr(sess, "_sess") else None
        types = {a.name: a.type for a in list(sess.get_inputs()) + list(sess.get_outputs())}
        self._via_ortvalues = any(types.get(n) == _BF16_TYPE
                                  for n in list(input_names) + list(output_names))
        self._options = _ort().RunOptions()

    def __call__(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        if len(inputs) != len(self.input_names):
            raise BackendError(f"onnxruntime: expected {len(self.input_names)} inputs "
                               f"({', '.join(self.input_names)}), got {len(inputs)}")
        try:
            if self._via_ortvalues:
                return self._run_ortvalues(inputs)
            feed = dict(zip(self.input_names, inputs))
            if self._run is not None:
                return self._run(self.output_names, feed, self._options)
            return self.sess.run(self.output_names, feed, self._options)
        except Exception as e:
            raise BackendError(f"onnxruntime: run failed: {first_line(e)}") from None

    def _run_ortvalues(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        ov = _ort().OrtValue
        feed = {}
        for name, x in zip(self.input_names, inputs):
            x = np.asarray(x, order="C")
            if x.dtype == _BF16:
                feed[name] = ov.ortvalue_from_numpy_with_onnx_type(
                    x.view(np.uint16), onnx.TensorProto.BFLOAT16)
            else:
                feed[name] = ov.ortvalue_from_numpy(x)
        outs = []
        for v in self.sess.run_with_ort_values(self.output_names, feed, self._options):
            if v.data_type() == _BF16_TYPE:
                a = np.empty(v.shape(), np.uint16)
                ctypes.memmove(a.ctypes.data, v.data_ptr(), a.nbytes)
                outs.append(a.view(_BF16))
            else:
                outs.append(v.numpy())
        return outs

    def cancel(self) -> None:
        """Stop the call running now (from another thread), and any later one: the flag stays
        set, since the command is stopping.  (Fresh options for the next call would race with a
        call about to start: it could read the fresh ones and run on.)"""
        self._options.terminate = True

    def close(self) -> None:
        self.sess = None
        self._run = None
