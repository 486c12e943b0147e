"""bench's err column: an artifact's outputs against ONNX Runtime's on the original model, judged
by the accuracy guard's own rule (partition/measure/accuracy.py, quant_steps.py).

Why not max abs alone: on a quantized model a correct library one rounding step off shows the
step itself as its error (0.05 on a DequantizeLinear of scale 0.05), which read as a wrong plan
next to a float model's 1e-6 (issue 51).  The column says the difference in steps where the
output is quantized, and marks a row the guard would have refused."""

from __future__ import annotations

from provmap.partition.measure.accuracy import ATOL, RTOL, compare_outputs
from provmap.partition.measure.dynamic_envelope import with_envelope
from provmap.partition.measure.quant_steps import DEFAULT_QUANT_STEPS, grid_steps


def output_err(model, got: dict, ref: dict, envelope: dict | None = None) -> dict:
    """The row's err keys: max abs (as before), the worst difference in quantization steps over
    quantized outputs (None: none is quantized) and whether the guard's rule accepts them.
    `envelope`: a dynamically quantized model's outputs -> one step's worth there
    (dynamic_envelope.envelope_or_none), judged as the guard judges them."""
    steps = with_envelope(grid_steps(model), envelope or {})
    v = compare_outputs(got, ref, ATOL, RTOL, steps, DEFAULT_QUANT_STEPS)
    return {"max_abs_err_vs_ort": v.err, "err_steps_vs_ort": v.quant_worst,
            "err_ok_vs_ort": not v.failure}


def err_cell(r: dict) -> str:
    """The column's text; rows written before issue 51 have max abs only and render as then."""
    text = f"{r['max_abs_err_vs_ort']:.1e}"
    if r.get("err_steps_vs_ort") is not None:
        k = f"{r['err_steps_vs_ort']:.3g}"
        text += f" ({k} step{'' if k == '1' else 's'})"
    return text if r.get("err_ok_vs_ort", True) else f"**{text}**"
