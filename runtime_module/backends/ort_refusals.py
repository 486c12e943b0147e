"""Settings ONNX Runtime 1.32 computes otherwise than ONNX's reference, refused by name.

Found by the full corpus step (bench/corpus.py, issue 32), plain ONNX Runtime wrong the same
way; refused at support-check time so greedy and the Collage search place the node elsewhere
(or nowhere, where no backend computes it right):

- causal Attention with a past key cache *and* an attention mask, its qk_matmul_output (output
  3) asked for: the -inf of the causal mask lands in other places than ONNX's (onnx's
  test_attention_4d_with_past_and_present_qk_matmul_bias_{3d,4d}_mask_causal: inf location
  mismatch on output 3; outputs 0-2 are right, so a node not asking for output 3 keeps ORT).
- MaxUnpool with its output_shape input: the values are scattered into other places than
  ONNX's (onnx's test_maxunpool_export_with_output_shape: 8 of 25 wrong); without it
  (test_maxunpool_export_without_output_shape) ORT is right.

The rules ONNX Runtime shares with OpenVINO are in shared_refusals.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from provmap.provenance.util.attrs import node_attr as _attr

if TYPE_CHECKING:  # pragma: no cover
    from ..graph_view import GraphView


def _present(seq, k: int) -> bool:
    return len(seq) > k and bool(seq[k])


def wrong_in_ort(node, view: "GraphView") -> str | None:
    if node.domain not in ("", "ai.onnx"):
        return None
    if node.op_type == "Attention" and _present(node.output, 3) and \
            _attr(node, "is_causal", 0) and _present(node.input, 3) and _present(node.input, 4):
        return ("ONNX Runtime's causal Attention with a past key cache and an attention mask "
                "puts the causal -inf of qk_matmul_output (output 3) in other places than ONNX "
                "(onnx's test_attention_4d_with_past_and_present_qk_matmul_bias_4d_mask_causal: "
                "inf location mismatch)")
    if node.op_type == "MaxUnpool" and _present(node.input, 2):
        return ("ONNX Runtime's MaxUnpool with the output_shape input scatters the values into "
                "other places than ONNX (onnx's test_maxunpool_export_with_output_shape: 8 of 25 "
                "wrong)")
    return None


def refuse_ort(view: "GraphView", verdicts: dict) -> None:
    """Turn the verdict of each node ONNX Runtime would compute wrong into a refusal, in place
    (the rules it shares with OpenVINO first)."""
    from ..backend import Support
    from .shared_refusals import refuse_shared

    refuse_shared(view, verdicts, "ONNX Runtime")
    for i in view.op_nodes:
        if verdicts[i].ok:
            why = wrong_in_ort(view.nodes[i], view)
            if why:
                verdicts[i] = Support(False, why)
