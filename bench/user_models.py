"""The user-model corpus's files: what users' own tools make of an exported model.

Each transform takes any ONNX model and applies the tool a user applies (ONNX Runtime's fp16
converter, `onnxruntime.quantization`) or the defect a published model carries (a wrong declared
output shape, paddle2onnx's -1 dims), so the same code serves the torch exports of
`user_corpus` and the onnx.helper models of the default tests (no torch there).  The base models
are `torch_models`' specs, exported with the TorchScript exporter as users do; only
`export_base` imports torch.
"""

from __future__ import annotations

import dataclasses
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from .torch_models import MAX_IR, MODELS as TORCH_MODELS, Spec, _tv

PRECISIONS = ("fp32", "fp16", "int8")


# ---- transforms: ONNX in, ONNX out (no torch) -------------------------------------------------
def to_fp16(model: onnx.ModelProto) -> onnx.ModelProto:
    """What ORT's docs tell users to run: the result keeps float32 inputs and outputs (Casts at
    the edges) and lists its nodes out of topological order."""
    from onnxruntime.transformers.float16 import convert_float_to_float16

    return convert_float_to_float16(model, keep_io_types=True)


class _Reader:
    """`onnxruntime.quantization.CalibrationDataReader` over seeded feed dicts."""

    def __init__(self, feeds: list[dict]):
        self._it = iter(feeds)

    def get_next(self):
        return next(self._it, None)


def quantize(model: onnx.ModelProto, mode: str, calibration: list[dict],
             per_channel: bool = False) -> onnx.ModelProto:
    """`onnxruntime.quantization` as its docs show it.  mode: dynamic (ConvInteger,
    MatMulInteger, DynamicQuantizeLinear; uint8 weights, since ORT's CPU ConvInteger takes no
    int8 ones), qdq or qoperator (quantize_static with QuantFormat.QDQ / QOperator, calibrated
    on `calibration`, `per_channel` weights as vendors' CNN recipes set it)."""
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_dynamic, quantize_static)

    reader_cls = type("Reader", (_Reader, CalibrationDataReader), {})
    with tempfile.TemporaryDirectory() as d:
        src, dst = Path(d) / "in.onnx", Path(d) / "out.onnx"
        onnx.save(model, src)
        if mode == "dynamic":
            quantize_dynamic(src, dst, weight_type=QuantType.QUInt8)
        elif mode in ("qdq", "qoperator"):
            fmt = QuantFormat.QDQ if mode == "qdq" else QuantFormat.QOperator
            quantize_static(src, dst, reader_cls(calibration), quant_format=fmt,
                            per_channel=per_channel)
        else:
            raise ValueError(f"quantize mode {mode!r}: dynamic, qdq or qoperator")
        out = onnx.load(dst)
    out.ir_version = min(out.ir_version, MAX_IR)
    return out


def wrong_output_shape(model: onnx.ModelProto, index: int = 0,
                       dims: tuple = (1, "seqlen")) -> onnx.ModelProto:
    """Declare graph output `index` with `dims`, as a published OCR model does (declared
    [1, seqlen], computed [N, 1, 8210]): ONNX Runtime only warns."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    shape = m.graph.output[index].type.tensor_type.shape
    del shape.dim[:]
    for d in dims:
        if isinstance(d, str):
            shape.dim.add().dim_param = d
        else:
            shape.dim.add().dim_value = d
    return m


def minus_one_dims(model: onnx.ModelProto) -> onnx.ModelProto:
    """Every symbolic dim of the graph's inputs and outputs as dim_value -1, as paddle2onnx
    writes dynamic dims."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for vi in list(m.graph.input) + list(m.graph.output):
        for d in vi.type.tensor_type.shape.dim:
            if d.HasField("dim_param") or not d.HasField("dim_value"):
                d.dim_value = -1
    return m


def crnn_declared_output(width: int | str = "image_width", hidden: int = 3,
                         classes: int = 7) -> onnx.ModelProto:
    """A CRNN recogniser as ddddocr's published OCR models are built (opset 12): a 1x1 Conv over
    a 1 x 1 x 1 x W image, a bidirectional LSTM along the width, a Gemm per time step, reshaped
    by shape arithmetic to [T, N, classes], with the output declared [1, seqlen] as the
    published files declare it.  Shape inference loses the sizes at the Reshape after the LSTM,
    so nothing contradicts the declaration before the model runs; ONNX Runtime returns
    [W, 1, classes] and warns."""
    from onnx import TensorProto, helper as h, numpy_helper as nh

    rng = np.random.default_rng(0)

    def rand(name, *shape):
        return nh.from_array(rng.standard_normal(shape).astype(np.float32), name)

    def ints(name, v):
        return nh.from_array(np.asarray(v, np.int64), name)

    node = h.make_node
    nodes = [
        node("Conv", ["x", "cw"], ["c"], kernel_shape=[1, 1]),
        node("Transpose", ["c"], ["t"], perm=[3, 0, 1, 2]),               # [W, N, C, H]
        node("Shape", ["t"], ["ts"]),
        node("Gather", ["ts", "i0"], ["g0"], axis=0),
        node("Gather", ["ts", "i1"], ["g1"], axis=0),
        node("Unsqueeze", ["g0"], ["u0"], axes=[0]),
        node("Unsqueeze", ["g1"], ["u1"], axes=[0]),
        node("Concat", ["u0", "u1", "m1"], ["rs"], axis=0),
        node("Reshape", ["t", "rs"], ["r"]),                              # [W, N, C*H]
        node("LSTM", ["r", "W", "R", "B"], ["Y"], hidden_size=hidden,
             direction="bidirectional"),                                  # [W, 2, N, hidden]
        node("Transpose", ["Y"], ["yt"], perm=[0, 2, 1, 3]),
        node("Reshape", ["yt", "zz"], ["y3"]),                            # [W, N, 2*hidden]
        node("Shape", ["y3"], ["s3"]),
        node("Gather", ["s3", "i0"], ["h0"], axis=0),
        node("Gather", ["s3", "i1"], ["h1"], axis=0),
        node("Mul", ["h0", "h1"], ["hm"]),
        node("Unsqueeze", ["hm"], ["hu"], axes=[0]),
        node("Concat", ["hu", "m1"], ["fs"], axis=0),
        node("Reshape", ["y3", "fs"], ["f"]),                             # [W*N, 2*hidden]
        node("Gemm", ["f", "gw", "gb"], ["gm"], transB=1),
        node("Unsqueeze", ["h0"], ["o0"], axes=[0]),
        node("Unsqueeze", ["h1"], ["o1"], axes=[0]),
        node("Concat", ["o0", "o1", "nc"], ["os"], axis=0),
        node("Reshape", ["gm", "os"], ["y"]),                             # [W, N, classes]
    ]
    inits = [rand("cw", 2, 1, 1, 1), ints("i0", 0), ints("i1", 1), ints("m1", [-1]),
             ints("zz", [0, 0, -1]), rand("W", 2, 4 * hidden, 2),
             rand("R", 2, 4 * hidden, hidden), rand("B", 2, 8 * hidden),
             rand("gw", classes, 2 * hidden), rand("gb", classes), ints("nc", [classes])]
    g = h.make_graph(nodes, "crnn", [h.make_tensor_value_info("x", TensorProto.FLOAT,
                                                               [1, 1, 1, width])],
                     [h.make_tensor_value_info("y", TensorProto.FLOAT, [1, "seqlen"])], inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 12)], ir_version=7)


def apply(transform: str | None, model: onnx.ModelProto,
          calibration: list[dict]) -> onnx.ModelProto:
    if transform is None:
        return model
    if transform == "fp16":
        return to_fp16(model)
    if transform.startswith("quant:"):
        return quantize(model, transform.split(":", 1)[1], calibration)
    if transform == "wrong_output_shape":
        return wrong_output_shape(model)
    if transform == "minus_one":
        return minus_one_dims(model)
    raise ValueError(f"unknown transform {transform!r}")


# ---- the corpus -------------------------------------------------------------------------------
def _static(spec: Spec, name: str) -> Spec:
    return dataclasses.replace(spec, name=name, dynamic={}, export_batch=1)


IMAGE = {"input": ((1, 3, 224, 224), "float32", "image")}


BASES: dict[str, Spec] = {s.name: s for s in [
    TORCH_MODELS["bert"],
    TORCH_MODELS["bert_dynamic"],
    TORCH_MODELS["resnet18"],                                    # dynamic batch N
    _static(TORCH_MODELS["resnet18"], "resnet18_static"),
    dataclasses.replace(TORCH_MODELS["shufflenet_v2"], name="shufflenet_v2_dynamic",
                        dynamic={"input": {0: "N"}}, export_batch=2),
    Spec("swin_t", "torchvision swin_t", IMAGE, ["output"], _tv("swin_t")),
]}


@dataclass
class Entry:
    """One corpus model: a base export, what the user's tool did to it, how to compare."""
    name: str
    what: str
    base: str                        # a BASES key (exported with the TorchScript exporter)
    transform: str | None = None     # see apply()
    precision: str = "fp32"          # picks the tolerance (user_corpus.TOLERANCE)

    @property
    def input_shapes(self) -> dict | None:
        """--input-shape for the models that leave a dimension symbolic (or -1)."""
        return BASES[self.base].shape_dict(1)


ENTRIES: dict[str, Entry] = {e.name: e for e in [
    Entry("bert_dyn", "BERT-tiny, TorchScript, dynamic batch and seq (folded shape arithmetic)",
          "bert_dynamic"),
    Entry("resnet18_dyn", "ResNet-18, TorchScript, dynamic batch", "resnet18"),
    Entry("shufflenet_dyn", "ShuffleNet-v2, TorchScript, dynamic batch", "shufflenet_v2_dynamic"),
    Entry("swin_t", "Swin-T (torchvision), TorchScript, static", "swin_t"),
    Entry("resnet18_fp16", "ResNet-18 through ORT's convert_float_to_float16(keep_io_types)",
          "resnet18_static", "fp16", "fp16"),
    Entry("resnet18_qdyn", "ResNet-18, quantize_dynamic (ConvInteger)", "resnet18_static",
          "quant:dynamic", "int8"),
    Entry("resnet18_qdq", "ResNet-18, quantize_static QDQ", "resnet18_static", "quant:qdq",
          "int8"),
    Entry("resnet18_qop", "ResNet-18, quantize_static QOperator", "resnet18_static",
          "quant:qoperator", "int8"),
    Entry("bert_qdyn", "BERT-tiny, quantize_dynamic (MatMulInteger)", "bert", "quant:dynamic",
          "int8"),
    Entry("bert_qdq", "BERT-tiny, quantize_static QDQ", "bert", "quant:qdq", "int8"),
    Entry("bert_qop", "BERT-tiny, quantize_static QOperator", "bert", "quant:qoperator", "int8"),
    Entry("bert_wrong_out", "BERT-tiny, dynamic batch and seq, last_hidden_state declared "
          "[1, seqlen] (computed [N, seq, 64])", "bert_dynamic", "wrong_output_shape"),
    Entry("resnet18_minus1", "ResNet-18 dynamic batch written as dim_value -1 (paddle2onnx)",
          "resnet18", "minus_one"),
]}


def export_base(name: str, out: Path, seed: int = 0) -> tuple[Path, dict]:
    """The base model's TorchScript export (cached under `out`) and its facts."""
    from .torch_models import export

    path = out / f"base_{name}.onnx"
    info = export(BASES[name], "torchscript", path, seed)
    info.pop("torch_outputs")
    return path, info


def feeds(entry: Entry, seed: int = 0) -> dict[str, np.ndarray]:
    from .torch_models import make_feeds

    return make_feeds(BASES[entry.base], 1, seed)


def calibration(entry: Entry, seed: int = 0, count: int = 8) -> list[dict]:
    """Seeded random batches for quantize_static, none of them the test feeds."""
    return [feeds(entry, seed + 100 + i) for i in range(count)]
