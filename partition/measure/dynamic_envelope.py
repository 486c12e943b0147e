"""Float tensors computed from dynamically quantized activations, judged against an envelope:
what the reference computes when every DynamicQuantizeLinear rounds all its values down,
against all of them up.

Why: `quantize_dynamic` models (a BERT-base shipped int8 by ONNX Runtime's tools) quantize each
activation with a scale computed from the data at run time (DynamicQuantizeLinear), multiply in
integers (MatMulInteger) and scale back to float.  A library that rounds one activation value
the other way, or requantizes in fixed point, moves the float result by a fraction of a step the
graph does not hold as a constant, and the error then flows through LayerNorm, GELU and the next
quantization: OpenVINO's whole-model plan of that BERT was 0.085 off ONNX Runtime's output, and
the accuracy guard refused the fastest library for it (issue 51).  The quantization step rule
(quant_steps.py) needs a fixed grid; here there is none.  What the reference itself computes
when each quantizer moves by one step is the honest measure of "one step" for these tensors:
rounding every value down, then every value up, brackets any choice of rounding a correct
kernel can make, and the gap between the two at an output is one step's worth of
disagreement there.  A kernel that is wrong by more than N of those is still refused.
"""

from __future__ import annotations

import numpy as np

#: The ops that start a dynamic quantization (ONNX's one; com.microsoft's fused ones are opaque
#: and computed by the reference library alone, so they need no envelope).
DYNAMIC = ("DynamicQuantizeLinear",)


def has_dynamic(model) -> bool:
    return any(n.op_type in DYNAMIC and n.domain in ("", "ai.onnx") for n in model.graph.node)


def region_dynamic(sub) -> bool:
    """Whether a region quantizes dynamically: a Subgraph read from its view's graph without
    cutting it, a region rebuilt from its bytes (the measuring worker's) from its own graph."""
    view = getattr(sub, "view", None)
    if view is None:
        return has_dynamic(sub.onnx_model())
    nodes = view.model.graph.node
    return any(nodes[i].op_type in DYNAMIC and nodes[i].domain in ("", "ai.onnx")
               for i in sub.closure)


def with_envelope(steps: dict | None, env: dict) -> dict:
    """The steps a judgement reads (quant_steps' grids), with each enveloped float output's one
    step's worth of disagreement where the graph gives it no grid of its own."""
    out = dict(steps or {})
    for name, unit in env.items():
        if unit > 0:
            out.setdefault(name, unit)
    return out


def rounded(model, how: str):
    """A copy of `model` whose DynamicQuantizeLinear nodes round x / scale with `how` ("Floor"
    or "Ceil") instead of to nearest even; scale and zero point as the op computes them."""
    import onnx
    from onnx import TensorProto, helper

    m = onnx.ModelProto()
    m.CopyFrom(model)
    nodes = []
    k = 0
    for n in m.graph.node:
        if n.op_type not in DYNAMIC or n.domain not in ("", "ai.onnx") or not n.output[0]:
            nodes.append(n)
            continue
        x, (y, scale, zp) = n.input[0], list(n.output) + [""] * (3 - len(n.output))
        p = f"__provmap_env{k}_"
        k += 1
        scale = scale or p + "scale"
        zp = zp or p + "zp"
        orig = helper.make_node("DynamicQuantizeLinear", [x], [p + "y", scale, zp],
                                name=p + "dql")
        lo = helper.make_tensor(p + "lo", TensorProto.FLOAT, [], [0.0])
        hi = helper.make_tensor(p + "hi", TensorProto.FLOAT, [], [255.0])
        m.graph.initializer.extend([lo, hi])
        nodes += [orig,
                  helper.make_node("Div", [x, scale], [p + "d"]),
                  helper.make_node(how, [p + "d"], [p + "r"]),
                  helper.make_node("Cast", [zp], [p + "zf"], to=TensorProto.FLOAT),
                  helper.make_node("Add", [p + "r", p + "zf"], [p + "s"]),
                  helper.make_node("Clip", [p + "s", p + "lo", p + "hi"], [p + "c"]),
                  helper.make_node("Cast", [p + "c"], [y], to=TensorProto.UINT8)]
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    return m


def envelope(model, feeds: dict, run) -> dict[str, float]:
    """Output name -> the largest |down - up| over its elements (one step's worth of
    disagreement there), for the float outputs of a model with dynamic quantization; {} when
    it has none.  `run(model, feeds)` -> {name: array} is the reference library's call."""
    if not has_dynamic(model):
        return {}
    down = run(rounded(model, "Floor"), feeds)
    up = run(rounded(model, "Ceil"), feeds)
    out = {}
    for name, a in down.items():
        b = up.get(name)
        a = np.asarray(a)
        if b is None or a.dtype.kind != "f" or a.size == 0:
            continue
        d = np.abs(a.astype(np.float64) - np.asarray(b, dtype=np.float64))
        d = d[np.isfinite(d)]
        if d.size:
            out[name] = float(d.max())
    return out


def envelope_or_none(model, feeds: dict, run=None) -> dict:
    """`envelope` where a failure to run the rewrite is no verdict: {} (those outputs are then
    judged by atol/rtol).  The one place the guard, compare and bench ask for it."""
    try:
        return envelope(model, feeds, run or ort_run)
    except Exception:
        return {}


def ort_run(model, feeds: dict) -> dict:
    """The envelope's reference call: ONNX Runtime on the model's bytes, all optimizations off
    (a fused kernel would take the op back from the rewrite)."""
    import onnxruntime as ort

    from provmap.provenance.weights import serialize

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    s = ort.InferenceSession(serialize(model), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in s.get_outputs()]
    want = {i.name for i in s.get_inputs()}
    return dict(zip(names, s.run(None, {k: v for k, v in feeds.items() if k in want})))
