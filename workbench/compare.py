"""Compare an artifact with a full-model reference at every partition boundary.

A vendor whose backend gives wrong numbers needs to know *where*: the artifact is run with a hook
that captures every tensor a partition produces, the original model is run once on the
reference library with those same tensors added as graph outputs, and each is compared (max
abs, max rel, cosine) under the name of the ONNX node that produced it.  The first partition
whose outputs diverge while all its inputs still match is the culprit: errors upstream of it
would otherwise be blamed on everything downstream.
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np
import onnx

from provmap.partition.measure.quant_steps import (DEFAULT_QUANT_STEPS, grid_steps, steps_bound,
                                                  step_unit)
from provmap.partition.measure.quant_steps import dequantized_steps  # noqa: F401  (its old home)
from provmap.partition.measure.dynamic_envelope import with_envelope
from provmap.provenance.util import native_stop
from provmap.provenance.util.errors import ProvmapError, first_line
from provmap.provenance.weights import serialize


# Quantized tensors are judged in steps by the rule every decision shares (the search's accuracy
# guard too): partition/measure/quant_steps.py, where the 8-bit dtypes and the default N live.
#: 16-bit float tensors, judged in units in the last place as well (Tolerance.ulps).
HALF = (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))


@dataclass
class Tolerance:
    atol: float = 1e-4
    rtol: float = 1e-3
    #: For int8/uint8 tensors, instead of atol/rtol: how many quantization steps apart passes.
    quant_steps: int = DEFAULT_QUANT_STEPS
    #: For float16/bfloat16 tensors, as well as atol/rtol: how many units in the last place of
    #: the reference value apart passes.  Each library rounds intermediate results to the
    #: tensor's precision in its own order: a correct fp16 HardSwish on TVM and on ONNX Runtime
    #: differ by 2 ulp (1.6 and 1.8 off the exact value), which float32's rtol 1e-3 (one fp16
    #: ulp) called a divergence and bisect a wrong kernel (issue 36's eighth afternoon).
    ulps: int = 4


def metrics(got: np.ndarray, ref: np.ndarray, tol: Tolerance, step=None) -> dict:
    """max abs / max rel error (over the reference's non-zero elements) and cosine similarity;
    `ok` by |got - ref| <= atol + rtol*|ref|, or for a quantized tensor within quant_steps of
    its grid (`quant_steps.steps_bound`): an 8-bit integer tensor, an integer tensor the graph
    quantizes (`grid_steps`), or a float tensor on the grid of `step` (a DequantizeLinear's
    output), which passes on either rule.  Other integer tensors (indices, shapes) are exact:
    rtol let argmax 1000 pass for 1001.  `step` may instead be the 16-bit float type a float32
    tensor was computed in (`tensor_grids`): it is then judged in that type's ulps too."""
    half = step if isinstance(step, np.dtype) else None
    step = None if half is not None else step
    got, ref = np.asarray(got), np.asarray(ref)
    if got.shape != ref.shape or got.dtype != ref.dtype:
        return {"ok": False, "max_abs": None, "max_rel": None, "cosine": None,
                "problem": f"{got.dtype}{list(got.shape)} vs reference {ref.dtype}{list(ref.shape)}",
                "passed_on": None}
    a = got.astype(np.float64).ravel()
    r = ref.astype(np.float64).ravel()
    if a.size == 0:
        return {"ok": True, "max_abs": 0.0, "max_rel": 0.0, "cosine": 1.0, "problem": "",
                "passed_on": "atol/rtol"}
    nan_a, nan_r = np.isnan(a), np.isnan(r)
    problem = ""
    if (nan_a != nan_r).any():  # which side has them (TVM's Relu turns a NaN into 0)
        here, there = int((nan_a & ~nan_r).sum()), int((nan_r & ~nan_a).sum())
        problem = "; ".join(
            ([f"NaN at {here} element(s) where the reference has none"] if here else [])
            + ([f"the reference has NaN at {there} element(s) where this has none"]
               if there else []))
    # Infinities match when equal (same sign at the same place), as in numpy's assert_allclose;
    # an infinity against a finite value or the other sign is a mismatch of its own.
    inf_a, inf_r = np.isinf(a), np.isinf(r)
    inf_bad = (inf_a | inf_r) & ~(nan_a | nan_r) & (a != r)
    if inf_bad.any():
        problem = (problem + "; " if problem else "") + \
            f"infinity at {int(inf_bad.sum())} element(s) where the other differs"
    both = ~(nan_a | nan_r | inf_a | inf_r)
    diff = np.abs(a[both] - r[both])
    max_abs = float(diff.max()) if diff.size else 0.0
    # relative to the reference where it is not 0: a one-step int8 difference at a 0 printed
    # "max rel 1e+12" (the eleventh afternoon); max abs says what happened there
    nz = r[both] != 0
    max_rel = float((diff[nz] / np.abs(r[both][nz])).max()) if nz.any() else 0.0
    na, nr = np.linalg.norm(a[both]), np.linalg.norm(r[both])
    cosine = float(np.dot(a[both], r[both]) / (na * nr)) if na > 0 and nr > 0 else \
        (1.0 if na == nr else 0.0)
    unit = step_unit(got.dtype, step)
    integer = got.dtype.kind in "iub"
    plain = 0.0 if integer else tol.atol + tol.rtol * np.abs(r[both])
    bound = steps_bound(tol.quant_steps, unit) if integer and unit else plain
    # the rule a passing tensor passed on: a JSON reader saw atol/rtol beside a max abs past
    # them and "ok" (a uint8 QDQ output one step off: the sixteenth afternoon)
    passed_on = "quant_steps" if integer and unit else "atol/rtol"
    if not integer and not bool(np.all(diff <= plain)):
        passed_on = ("quant_steps" if unit else
                     "ulps" if tol.ulps and (got.dtype in HALF or half is not None) else None)
    if unit and not integer:  # one step of the grid is one step, as for int8
        bound = np.maximum(bound, steps_bound(tol.quant_steps, unit))
    if tol.ulps and (got.dtype in HALF or half is not None):  # the reference's own spacing in
        # the 16-bit type the values were computed in
        spacing = np.spacing(np.abs(ref.ravel()[both]).astype(half or got.dtype)).astype(np.float64)
        bound = np.maximum(bound, tol.ulps * spacing)
    ok = not problem and bool(np.all(diff <= bound))
    top = float(np.abs(r[both]).max()) if both.any() else 0.0
    if ok and not integer and not unit and 0 < top <= tol.atol and max_abs > 0 \
            and cosine < 0.999:
        # every reference value is inside atol, so atol alone cannot judge the tensor: a
        # partition with noise for weights "matched" at cosine -0.29 on 1e-9 logits (the
        # twelfth afternoon); its direction still has to agree
        ok, problem = False, (f"every reference value is within --atol (largest {top:.3g}): "
                              f"judged by direction, cosine {cosine:.6f}")
    return {"ok": ok, "max_abs": max_abs, "max_rel": max_rel, "cosine": cosine,
            "problem": problem, "passed_on": passed_on if ok else None}


def _notable_constants(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """The constants the notes below read (quantizers' scales, Dropout's training_mode), found
    in one walk of the graph, so compare reads a model's constants once for all three notes."""
    from provmap.provenance.bundled.random_weights import constant_values

    wanted = set()
    for n in model.graph.node:
        if n.op_type in ("DequantizeLinear", "QuantizeLinear") and len(n.input) > 1:
            wanted.add(n.input[1])
        elif n.op_type == "Dropout" and len(n.input) > 2 and n.input[2]:
            wanted.add(n.input[2])
    return constant_values(model.graph, wanted)


def model_notes(model: onnx.ModelProto) -> tuple[dict[str, str], dict[str, float]]:
    """(tensor -> why it differs by design, tensor -> its quantization step), one read."""
    consts = _notable_constants(model)
    return ({**random_outputs(model, consts), **undefined_quantization(model, consts)},
            tensor_grids(model, consts))


def tensor_grids(model: onnx.ModelProto, consts=None) -> dict:
    """Tensor -> what `metrics` judges it on beside atol/rtol: its quantization step
    (`grid_steps`) or the 16-bit float type it was computed in (`half_casts`)."""
    return {**half_casts(model), **grid_steps(model)}


_HALF_TYPES = {onnx.TensorProto.FLOAT16: np.dtype(np.float16),
               onnx.TensorProto.BFLOAT16: np.dtype(ml_dtypes.bfloat16)}


def half_casts(model: onnx.ModelProto) -> dict[str, np.dtype]:
    """Tensor -> float16/bfloat16: a Cast to float32/float64 of a 16-bit float tensor.
    convert_float_to_float16(keep_io_types=True) ends every output so: the values carry
    float16's precision, and compare called OpenVINO divergent at rtol 1e-3 where it was closer
    to the float32 model than ONNX Runtime's own float16 run, --ulps changing nothing (the
    seventeenth afternoon)."""
    g = model.graph
    wide = (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE)
    casts = [n for n in g.node if n.op_type == "Cast" and n.input and any(
        a.name == "to" and a.i in wide for a in n.attribute)]
    if not casts:
        return {}
    types = {vi.name: vi.type.tensor_type.elem_type for vi in (*g.input, *g.value_info, *g.output)}
    types.update({t.name: t.data_type for t in g.initializer})
    for n in g.node:
        if n.op_type == "Cast":
            types.update({n.output[0]: a.i for a in n.attribute if a.name == "to"})
    if any(n.input[0] not in types for n in casts):
        try:  # only the types are wanted; a model it cannot infer keeps what was declared
            inferred = onnx.shape_inference.infer_shapes(model).graph.value_info
            types.update({vi.name: vi.type.tensor_type.elem_type for vi in inferred})
        except Exception:
            pass
    return {n.output[0]: _HALF_TYPES[types[n.input[0]]] for n in casts
            if types.get(n.input[0]) in _HALF_TYPES}


_RANDOM_OPS = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
               "Multinomial", "Bernoulli"}


def random_outputs(model: onnx.ModelProto, consts=None) -> dict[str, str]:
    """Tensor -> why it differs by design: the output of a random op, or of a Dropout whose
    training_mode is a constant true (a model exported in train mode): two libraries draw
    different numbers, and compare named that Dropout as the first divergent partition."""
    drops = [n for n in model.graph.node if n.op_type == "Dropout" and len(n.input) > 2
             and n.input[2]]
    consts = _notable_constants(model) if consts is None else consts
    out = {}
    for n in model.graph.node:
        if n.op_type in _RANDOM_OPS or (
                n in drops and n.input[2] in consts and bool(np.asarray(consts[n.input[2]]).any())):
            why = (f"{n.op_type} '{n.name or n.output[0]}' "
                   + ("runs in training mode: " if n.op_type == "Dropout" else "")
                   + "its values are random, libraries draw different ones")
            out.update({o: why for o in n.output if o})
    return out


def undefined_quantization(model: onnx.ModelProto, consts=None) -> dict[str, str]:
    """Tensor -> why its value is not defined: a QuantizeLinear whose scale in the model is
    zero or not finite.  ORT's static quantizer writes scale = inf when calibration saw -inf
    (BERT's attention mask); x / inf is then 0, NaN or -inf by element, and ONNX leaves the
    rounding of those undefined: ONNX Runtime gives 0 where OpenVINO gives -128, whole model or
    two-node model alike.  compare still reports the difference, with this reason beside it, so
    nobody hunts a kernel bug that the model itself carries."""
    quant = [n for n in model.graph.node if n.op_type == "QuantizeLinear" and len(n.input) > 1]
    consts = _notable_constants(model) if consts is None else consts
    out = {}
    for n in quant:
        if n.input[1] not in consts:
            continue
        scale = consts[n.input[1]].astype(np.float64)
        if scale.size and not (np.isfinite(scale).all() and (scale != 0).all()):
            bad = scale[~np.isfinite(scale) | (scale == 0)].ravel()[0]
            out[n.output[0]] = (f"QuantizeLinear '{n.name or n.output[0]}' has scale {bad:g} in "
                                "the model: its result is undefined, libraries differ")
    return out


def reference_run(model: onnx.ModelProto, inputs: dict, extra_outputs: list[str],
                  reference: str = "onnxruntime") -> dict[str, np.ndarray]:
    """Run the whole model on the reference library with `extra_outputs` exposed; its failure
    as one ProvmapError line (compare and bisect alike: bisect had called OpenVINO's an
    "internal error", and the first line of OpenVINO's message is a source location)."""
    if reference not in ("onnxruntime", "openvino"):
        raise ProvmapError(f"unknown reference {reference!r}; use onnxruntime or openvino")
    try:
        return _reference_run(model, inputs, extra_outputs, reference)
    except ProvmapError:
        raise
    except Exception as e:
        from provmap.runtime_module.backends.openvino import ov_error

        why = ov_error(e) if reference == "openvino" else first_line(e)
        raise ProvmapError(f"reference {reference} failed on the model: {why}") from None


def _reference_run(model, inputs, extra_outputs, reference):
    m = onnx.ModelProto()
    m.CopyFrom(model)
    have = {o.name for o in m.graph.output}
    for name in extra_outputs:
        if name not in have:
            m.graph.output.append(onnx.helper.make_empty_tensor_value_info(name))
            have.add(name)
    names = [o.name for o in m.graph.output]
    data = serialize(m)
    if reference == "onnxruntime":
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.log_severity_level = 4  # errors come back raised; its log prints node names raw
        ro = ort.RunOptions()  # Ctrl-C sets its terminate (native_stop): ORT stops at once
        with native_stop.running(lambda: setattr(ro, "terminate", True)):
            sess = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
            return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, inputs, ro)))
    if reference == "openvino":
        import openvino as ov

        core = ov.Core()
        with native_stop.running():  # no cancel OpenVINO honours: Ctrl-C ends the process
            compiled = core.compile_model(core.read_model(data, b""), "CPU",
                                          {"INFERENCE_PRECISION_HINT": "f32"})
            # OpenVINO drops a graph input nothing reads (a `token_type_ids` the graph
            # ignores): feeding it by name failed with an unnamed port check (issue 36's
            # eighth afternoon)
            ports = {n for p in compiled.inputs for n in p.get_names()}
            res = compiled({k: v for k, v in inputs.items() if k in ports})
        out = {}
        for port, v in res.items():
            for n in port.get_names():
                out[n] = np.asarray(v)
        return {n: out[n] for n in names if n in out}


def _envelope(model: onnx.ModelProto, inputs: dict, names: list[str]) -> dict:
    """Tensors computed from dynamically quantized activations -> one step's worth of
    disagreement there (partition/measure/dynamic_envelope.py: the reference with every
    DynamicQuantizeLinear rounding down, then up), as the search's accuracy guard judges them;
    ONNX Runtime computes it whatever the reference, since it runs the rewrite as written."""
    from provmap.partition.measure.dynamic_envelope import envelope_or_none

    return envelope_or_none(model, inputs,
                            lambda m, f: reference_run(m, f, names, "onnxruntime"))


def compare_artifact(mod, model: onnx.ModelProto, inputs: dict, reference: str = "onnxruntime",
                     tol: Tolerance | None = None) -> dict:
    """Every partition output and model output, artifact vs reference (see module doc)."""
    tol = tol or Tolerance()
    producer = {}
    # an unnamed node is called by its ID, which lookup and inspect use too ("Relu#423",
    # numbered by tensors, named no node lookup could find: issue 36's sixth afternoon)
    node_id = {o: n.id for n in mod.lookup.map.nodes for o in n.outputs if o}
    for k, node in enumerate(model.graph.node):
        for o in node.output:
            producer[o] = node.name or node_id.get(o) or f"{node.op_type} (node {k})"
    graph_in = {i.name for i in model.graph.input}
    graph_out = [o.name for o in model.graph.output]
    captured: dict[str, tuple] = {}  # tensor -> (partition module, array)
    inputs_of: dict[str, list[str]] = {}

    def hook(m, ins, outs, _dt):
        inputs_of[m.id] = list(ins)
        for n, a in outs.items():
            captured[n] = (m, np.array(a, copy=True))

    try:
        mod.run(inputs, on_partition=hook)
    except ProvmapError as e:
        raise ProvmapError(f"the artifact failed to run: {e}") from None
    ref = reference_run(model, inputs, list(captured), reference)
    tensors = []
    bad = set()
    undefined, steps = model_notes(model)
    steps = with_envelope(steps, _envelope(model, inputs, list(captured)))
    for name, (m, a) in captured.items():
        if name not in ref:
            continue
        met = metrics(a, ref[name], tol, steps.get(name))
        tensors.append({"tensor": name, "onnx_node": producer.get(name), "partition": m.id,
                        "backend": m.backend, "model_output": name in graph_out,
                        "shape": list(np.shape(a)), **met})
        if not met["ok"] and name in undefined:
            tensors[-1]["note"] = undefined[name]
        if not met["ok"]:
            bad.add(name)
    culprit = None
    for m in mod.partitions:
        outs = [t for t in tensors if t["partition"] == m.id]
        if any(not t["ok"] for t in outs):
            upstream_ok = all(n in graph_in or n not in bad for n in inputs_of.get(m.id, ()))
            if upstream_ok:
                names = _node_names(mod, m)
                culprit = {"partition": m.id, "backend": m.backend, "onnx_nodes": names,
                           "diverging_tensors": [t["tensor"] for t in outs if not t["ok"]],
                           "diverging_nodes": [t["onnx_node"] for t in outs if not t["ok"]],
                           **_on_reference_inputs(m, inputs_of.get(m.id, ()), inputs, captured,
                                                  ref, graph_in, tol, steps)}
                break
    return {"reference": reference, "atol": tol.atol, "rtol": tol.rtol,
            "quant_steps": tol.quant_steps, "ulps": tol.ulps, "match": not bad, "mismatches": len(bad), "tensors": tensors,
            "first_divergent_partition": culprit}


def _on_reference_inputs(m, names, inputs, captured, ref, graph_in, tol, steps) -> dict:
    """A partition whose inputs all match, but not exactly, run once more on the reference's
    own inputs.  Two int8 inputs each one step off (a match) gave an ONNX Runtime QLinearAdd two
    steps off, and compare named that exact partition "first divergent" (the eleventh
    afternoon): the difference had built up upstream.  {} when its inputs were exact."""
    inexact = [n for n in names if n not in graph_in and n in captured and n in ref
               and not np.array_equal(captured[n][1], ref[n], equal_nan=True)]
    if not inexact:
        return {}
    runner = m.runner
    try:
        with native_stop.running(getattr(runner, "cancel", None)):
            outs = runner([inputs[n] if n in graph_in else np.asarray(ref[n]) if n in ref
                           else captured[n][1] for n in runner.input_names])
    except Exception:  # noqa: BLE001 - the partition refuses them: no second opinion
        return {}
    ok = all(metrics(np.asarray(a), ref[n], tol, steps.get(n))["ok"]
             for n, a in zip(runner.output_names, outs) if n in ref)
    return {"inexact_inputs": inexact,
            "inexact_from": sorted({captured[n][0].id for n in inexact}),
            "matches_on_reference_inputs": ok}


def _node_names(mod, m) -> list[str]:
    by_id = {n.id: n for n in mod.lookup.map.nodes}
    return [(by_id[i].name or i) if i in by_id else i for i in m.info["ops"]]
