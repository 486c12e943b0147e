"""numpyref: a reference provmap backend that interprets ONNX subgraphs with numpy.

It is deliberately slow and simple; it exists to show everything a vendor backend must do
(see docs/backends.md in provmap).  provmap finds it through the entry point declared in
pyproject.toml (group "provmap.backends", name "numpyref"); provmap itself is not edited.

* supports(): a verdict, with a reason, for every op node; an op node is only taken when the
  helper nodes that feed it (Constant, Shape, ...) can be computed too, because the subgraph
  provmap hands to build() carries its own copy of them.
* build(): the blob is the cut ONNX model itself (the exact original nodes), so a fresh process
  can rebuild the interpreter from the artifact; one kernel per node of the cut model.
* load(): a Runner that walks the nodes in order with numpy, in the model's own precision
  (numpy keeps float32 as float32) unless the explicit option precision=float64 says otherwise.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper

from provmap.runtime_module.backend import Backend, BackendError, Blob, KernelInfo, Runner, Support

__version__ = "0.1"


def _softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _gemm(a, b, c=None, alpha=1.0, beta=1.0, transA=0, transB=0):
    y = alpha * ((a.T if transA else a) @ (b.T if transB else b))
    return y if c is None else y + beta * c


def _reshape(x, shape, allowzero=0):
    # ONNX: 0 copies the input's dimension (unless allowzero), -1 is inferred (numpy does that).
    dims = [x.shape[k] if d == 0 and not allowzero else int(d) for k, d in enumerate(shape)]
    return x.reshape(dims)


def _shape(x, start=0, end=None):
    return np.array(x.shape[start:end], dtype=np.int64)


# ONNX op -> f(*inputs, **attributes) returning the op's single output.  Inputs are positional,
# attributes keywords with their ONNX names, so an attribute a kernel does not know fails loudly
# instead of being silently ignored.
KERNELS = {
    "Identity": lambda x: x,
    "Relu": lambda x: np.maximum(x, 0),
    "Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide,
    "Exp": np.exp, "Tanh": np.tanh,
    "Sigmoid": lambda x: np.exp(-np.logaddexp(0, -x)),  # 1/(1+e^-x) without overflow
    "MatMul": np.matmul,
    "Gemm": _gemm,
    "Softmax": _softmax,
    "Reshape": _reshape,
    "Transpose": lambda x, perm=None: np.transpose(x, perm),
    "Flatten": lambda x, axis=1: x.reshape(int(np.prod(x.shape[:axis])), -1),
    "Concat": lambda *xs, axis: np.concatenate(xs, axis=axis),
    "Shape": _shape,
    "Gather": lambda x, idx, axis=0: np.take(x, idx, axis=axis),
    "Unsqueeze": lambda x, axes_in=None, axes=None: np.expand_dims(
        x, tuple(int(a) for a in (axes if axes is not None else axes_in))),
}
# Ops whose result is arithmetic: only taken on floating-point tensors (ONNX integer Div
# truncates, numpy's does not); the others just move data and work for any dtype.
ARITHMETIC = {"Relu", "Add", "Sub", "Mul", "Div", "Exp", "Tanh", "Sigmoid", "MatMul", "Gemm",
              "Softmax"}
RUNNABLE = set(KERNELS) | {"Constant"}  # Constant is evaluated once, at load time


def _constant(node) -> np.ndarray:
    a = node.attribute[0]
    value = helper.get_attribute_value(a)
    if a.name == "value":
        return numpy_helper.to_array(value)
    if a.name in ("value_float", "value_floats"):
        return np.array(value, dtype=np.float32)
    if a.name in ("value_int", "value_ints"):
        return np.array(value, dtype=np.int64)
    raise BackendError(f"numpyref: Constant {node.name!r} uses {a.name}, not implemented")


class NumpyRunner(Runner):
    """Interprets the cut model: inputs and initializers in a dict, then every node in order."""

    def __init__(self, model: onnx.ModelProto, input_names, output_names, wide: bool = False):
        self.input_names = list(input_names)
        self.output_names = list(output_names)
        g = model.graph
        # wide (option precision=float64): float tensors are computed in float64 and the outputs
        # cast back to the model's dtypes, so neighbouring partitions still see the model's types.
        self._wide = wide
        self._out_dtype = {o.name: helper.tensor_dtype_to_np_dtype(o.type.tensor_type.elem_type)
                           for o in g.output}
        self._consts = {t.name: self._widen(numpy_helper.to_array(t)) for t in g.initializer}
        self._steps = []
        for n in g.node:
            if n.op_type == "Constant":  # computed once, here, like an initializer
                self._consts[n.output[0]] = self._widen(_constant(n))
            elif n.op_type in KERNELS:
                attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
                self._steps.append((KERNELS[n.op_type], list(n.input), n.output[0], attrs, n))
            else:
                raise BackendError(f"numpyref: no kernel for {n.op_type} (node {n.name!r})")

    def __call__(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        env = dict(self._consts)
        env.update(zip(self.input_names, map(self._widen, inputs)))
        for fn, ins, out, attrs, node in self._steps:
            try:
                env[out] = np.asarray(fn(*[env[x] if x else None for x in ins], **attrs))
            except Exception as e:
                raise BackendError(f"numpyref: {node.op_type} {node.name!r} failed: {e}") from None
        if self._wide:
            return [env[n].astype(self._out_dtype[n]) for n in self.output_names]
        return [env[n] for n in self.output_names]

    def _widen(self, a: np.ndarray) -> np.ndarray:
        return a.astype(np.float64) if self._wide and a.dtype.kind == "f" else a


class NumpyBackend(Backend):
    name = "numpyref"  # must equal the entry-point name: plans and manifests use this string
    loads_native_code = False  # blobs are ONNX models this package interprets with numpy

    @classmethod
    def option_names(cls):
        # Default: the model's own precision.  A wider one is only ever an explicit option; it
        # is recorded in the artifact's manifest and given back to __init__ before load().
        return ("precision",)

    def __init__(self, **options):
        super().__init__(**options)
        self.precision = self._options.get("precision", "model")
        if self.precision not in ("model", "float64"):
            raise ValueError(f"numpyref: precision must be 'model' or 'float64', "
                             f"not {self.precision!r}")

    def version(self) -> str:
        return f"{__version__}+numpy{np.__version__}"

    def supports(self, view) -> dict[int, Support]:
        return {i: self._verdict(view, i) for i in view.op_nodes}

    def _verdict(self, view, i: int) -> Support:
        node = view.nodes[i]
        if node.domain not in ("", "ai.onnx"):
            return Support(False, f"numpyref runs default-domain ONNX ops only, not {node.domain}")
        if node.op_type not in KERNELS:
            return Support(False, f"numpyref has no kernel for {node.op_type}")
        opset = next((o.version for o in view.model.opset_import if o.domain in ("", "ai.onnx")), 1)
        if node.op_type == "Softmax" and opset < 13:
            return Support(False, "numpyref implements Softmax from opset 13 (one axis), not "
                                  f"opset {opset}'s 2-D coercion")
        if node.op_type in ARITHMETIC:
            try:
                dtype = np.dtype(view.spec(node.output[0]).dtype)
            except Exception as e:
                return Support(False, f"numpyref needs a static type: {e}")
            if dtype.kind != "f":
                return Support(False, f"numpyref computes {node.op_type} on floats only, not {dtype}")
        for h in sorted(view.helper_closure([i])):
            if view.nodes[h].op_type not in RUNNABLE:
                return Support(False, f"numpyref cannot compute {view.describe(h)}, which feeds it")
        return Support(True)

    def build(self, sub) -> Blob:
        model = sub.onnx_model()  # the exact original nodes and initializers of this region
        nodes = list(model.graph.node)
        NumpyRunner(model, [], [])  # fail at build time, not at run time, on an unknown node
        # KernelInfo.nodes are positions in sub.closure, which is the cut model's node order.
        kernels = [KernelInfo(name=n.name or f"{n.op_type}_{pos}", op=n.op_type, nodes=[pos],
                              kind="constant" if n.op_type == "Constant" else "numpy")
                   for pos, n in enumerate(nodes)]
        source = "\n".join(f"{pos}: {n.output[0]} = {n.op_type}({', '.join(n.input)})"
                           for pos, n in enumerate(nodes))
        meta = {"backend_version": self.version(), "options": self.options(),
                "input_names": [t.name for t in sub.inputs],
                "output_names": [t.name for t in sub.outputs]}
        return Blob(backend=self.name, files={"model.onnx": model.SerializeToString()},
                    meta=meta, kernels=kernels, source=source + "\n")

    def load(self, blob: Blob) -> Runner:
        # Only blob.files and blob.meta survive the artifact; kernels/source are not given back.
        try:
            model = onnx.load_from_string(blob.files["model.onnx"])
            return NumpyRunner(model, blob.meta["input_names"], blob.meta["output_names"],
                               wide=self.precision == "float64")
        except KeyError as e:
            raise BackendError(f"numpyref: blob lacks {e}") from None
        except BackendError:
            raise
        except Exception as e:  # e.g. model.onnx is not a valid ONNX model
            raise BackendError(f"numpyref: cannot load model.onnx: {e}") from None
