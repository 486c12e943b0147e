"""Types of tensors ONNX's shape inference cannot see: ONNX Runtime's inference, asked directly.

onnx has no schemas for ONNX Runtime's own operator domain (com.microsoft: QGemm, QLinearAdd,
QLinearGlobalAveragePool... which `onnxruntime.quantization` writes in QOperator format), so ONNX
shape inference stops at the first such node and everything after it is untyped; partitioning
needs a type for every boundary tensor.  ONNX Runtime infers them while it resolves the graph.
Its Python API shows types only for graph outputs, so the tensors wanted are made graph outputs
of a weightless copy (large initializers become typed inputs, as for ONNX inference) and a
session is created with every optimization off: nothing runs, the graph is not rewritten.

This is a type oracle (provmap.provenance.type_oracle), not a backend: provmap's ONNX Runtime
backend is `onnxruntime.py` beside it.  It lives on this floor because it imports onnxruntime,
which the provenance floor never does; the importers of this floor and above pass `ORT_TYPES` to
provmap.provenance's import (partition.model_source.load_view, GraphView, the map).
"""

from __future__ import annotations

import onnx


def ort_types(light: onnx.ModelProto, names: list[str]) -> dict[str, onnx.TypeProto]:
    """Tensor types ONNX Runtime infers for `names` in `light` (a weightless model whose graph
    outputs declare no shape), or {} when ONNX Runtime cannot load the graph."""
    try:
        import onnxruntime as ort
    except ImportError:  # pragma: no cover - a declared dependency
        return {}
    probe = onnx.ModelProto()
    probe.CopyFrom(light)
    have = {o.name for o in probe.graph.output}
    for x in names:
        if x not in have:
            probe.graph.output.add().name = x
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 4  # errors come back raised; its log prints node names raw
    try:
        sess = ort.InferenceSession(probe.SerializeToString(), so,
                                    providers=["CPUExecutionProvider"])
    except Exception:
        return {}
    wanted = set(names)
    out = {}
    for o in sess.get_outputs():
        if o.name not in wanted or not o.type.startswith("tensor(") or o.shape is None:
            continue
        elem = _ELEM.get(o.type[len("tensor("):-1])
        if elem is None:
            continue
        if not o.shape:
            # ORT's NodeArg.shape is [] both for a scalar and for a shape it could not infer
            # (a CRNN's Reshape after DynamicQuantizeLSTM): claiming rank 0 would be a guess.
            out[o.name] = onnx.helper.make_tensor_type_proto(elem, None)
            continue
        dims = [d if isinstance(d, int) and d >= 0 else (d if isinstance(d, str) else None)
                for d in o.shape]
        out[o.name] = onnx.helper.make_tensor_type_proto(elem, dims)
    return out


def symbolic_output_shapes(model: onnx.ModelProto, names: list[str]) -> dict[str, onnx.TypeProto]:
    """Static types of the graph outputs `names` by ONNX Runtime's symbolic shape inference
    (onnxruntime.tools.symbolic_shape_infer), which follows what ONNX's stops at: an LSTM
    whose sequence length comes through Shape arithmetic, a Reshape to a computed shape (the
    CRNN in ddddocr's common.onnx: declared [1, seqlen], computed [20, 1, 8210]).  Nothing is
    run.  Only fully static shapes are returned; {} when it gives up (com.microsoft's
    DynamicQuantizeLSTM, in common_old.onnx) or fails."""
    try:
        from onnxruntime.tools.symbolic_shape_infer import get_opset
    except ImportError:  # pragma: no cover - ships with onnxruntime
        return {}
    if (get_opset(model) or 0) < 7:  # its own limit
        return {}
    # No guessing (auto_merge, guess_output_rank off): only what it computed is taken, and
    # only fully static output shapes.
    inferred = _run_symbolic(model)
    if inferred is None:
        return {}
    out = {}
    for o in inferred.graph.output:
        tt = o.type.tensor_type
        if o.name in names and tt.HasField("shape") and tt.elem_type and \
                all(d.HasField("dim_value") for d in tt.shape.dim):
            out[o.name] = o.type
    return out


def symbolic_types(light: onnx.ModelProto) -> dict[str, onnx.TypeProto]:
    """Every tensor's type by ONNX Runtime's symbolic shape inference, dimensions as it writes
    them: sizes, the model's own symbols (`seq`) and expressions of them (`batch*seq`,
    `seq + 1`).  ONNX's inference loses a symbol at the first Range or computed Reshape (a
    GPT-2 export's position ids); this one keeps it, which is what lets a dynamic model import
    with its shapes related to its inputs.  With auto_merge, as ONNX Runtime's transformer
    tools run it: a broadcast of `Min(64, seq)` against `seq` (BERT's position ids) is read as
    one size, where without it the inference stops there.  A merge is a relation the importer
    states with a match_cast, which TVM's VM checks at run time: a wrong one is an error at
    some shape, never a wrong value, and the compile checks the profile's points.  A dimension
    it cannot relate stays its own new symbol, which the importer ignores.  {} when it fails."""
    try:
        from onnxruntime.tools.symbolic_shape_infer import get_opset
    except ImportError:  # pragma: no cover - ships with onnxruntime
        return {}
    if (get_opset(light) or 0) < 7:
        return {}
    inferred = _run_symbolic(light, auto_merge=True)
    if inferred is None:
        return {}
    g = inferred.graph
    return {vi.name: vi.type for vi in list(g.value_info) + list(g.output)
            if vi.name and vi.type.HasField("tensor_type")}


def _run_symbolic(model: onnx.ModelProto, auto_merge: bool = False):
    """SymbolicShapeInference on a copy, quietly, without its last step (where it gives up it
    saves the model as "sym_shape_infer_temp.onnx" in the working directory): its model, or
    None."""
    import contextlib
    import io
    import logging

    from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference

    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    for o in probe.graph.output:
        if o.type.HasField("tensor_type"):
            o.type.tensor_type.ClearField("shape")
    quiet = logging.getLogger("onnxruntime.tools.symbolic_shape_infer")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)  # its warnings are about guesses it is not asked for
    try:
        sym = _inference_class()(2**31 - 1, auto_merge, False, 0)
        with contextlib.redirect_stdout(io.StringIO()):
            sym._preprocess(probe)
            while sym.run_:
                sym._infer_impl()
            sym._update_output_from_vi()
        return sym.out_mp_
    except Exception:
        return None
    finally:
        quiet.setLevel(level)


def _inference_class():
    """ONNX Runtime's SymbolicShapeInference, but a Concat off axis 0 is never read as shape
    arithmetic.  It propagates values through any Concat one of whose inputs is a constant and
    asserts the axis is 0: a decoder's mask `Concat([1, 1] ones, [1, past] mask, axis=1)` at a
    profile fixing the step at one token stopped the whole inference (every symbol then lost)."""
    from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference, get_attribute

    class Inference(SymbolicShapeInference):
        def _infer_Concat(self, node):  # noqa: N802 - ONNX Runtime's dispatch name
            if get_attribute(node, "axis") == 0:
                return super()._infer_Concat(node)
            data, inits = self.sympy_data_, self.initializers_
            self.sympy_data_ = {k: v for k, v in data.items() if k not in node.input}
            self.initializers_ = {k: v for k, v in inits.items() if k not in node.input}
            try:
                return super()._infer_Concat(node)
            finally:
                data.update({k: v for k, v in self.sympy_data_.items() if k not in data})
                self.sympy_data_, self.initializers_ = data, inits

    return Inference


class OrtTypes:
    """The TypeOracle ONNX Runtime answers: its graph resolution for tensors after operators onnx
    has no schema for, its symbolic shape inference for unshaped graph outputs and for the
    symbolic dimensions of a model imported with its shapes open."""

    def tensor_types(self, light: onnx.ModelProto, names: list[str]) -> dict[str, onnx.TypeProto]:
        return ort_types(light, names)

    def output_shapes(self, light: onnx.ModelProto, names: list[str]) -> dict[str, onnx.TypeProto]:
        return symbolic_output_shapes(light, names)

    def symbolic_types(self, light: onnx.ModelProto) -> dict[str, onnx.TypeProto]:
        return symbolic_types(light)


#: The one instance importers pass as `type_oracle`.
ORT_TYPES = OrtTypes()

_ELEM = {"float": onnx.TensorProto.FLOAT, "float16": onnx.TensorProto.FLOAT16,
         "bfloat16": onnx.TensorProto.BFLOAT16, "double": onnx.TensorProto.DOUBLE,
         "int8": onnx.TensorProto.INT8, "uint8": onnx.TensorProto.UINT8,
         "int16": onnx.TensorProto.INT16, "uint16": onnx.TensorProto.UINT16,
         "int32": onnx.TensorProto.INT32, "uint32": onnx.TensorProto.UINT32,
         "int64": onnx.TensorProto.INT64, "uint64": onnx.TensorProto.UINT64,
         "bool": onnx.TensorProto.BOOL}
