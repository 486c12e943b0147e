"""Where provmap may fall behind its plain library in the operator conformance run, and why.

Its own module because the table grows with every deliberate refusal (issue 32's corpus step
added a kind a round) while the harness in bench/conformance.py does not; the harness and the
corpus step read it through `exception_for`."""

from __future__ import annotations

import re

# Where provmap may fall behind its plain library: case-name regex (re.fullmatch) -> "pipelines:
# reason" ("*" = every provmap pipeline).  Only deliberate refusals belong here: they excuse a
# clean ProvmapError ("error"), never a crash or wrong numbers.  tests/test_conformance.py checks
# that each regex matches exactly the cases of the kind its reason names.
EXCEPTIONS: dict[str, str] = {
    # Every case whose graph inputs or outputs are sequences or optionals.
    r"test_(identity_opt|identity_sequence|if_opt|if_seq|loop13_seq|loop16_seq_none|sequence_\w+"
    r"|split_to_sequence_\w+|optional_get_element_(optional_\w+|sequence)"
    r"|optional_has_element_(empty_optional|optional|tensor)_input)":
        "*: sequence/optional graph inputs or outputs: provmap partitions tensors only",
    # Every case with float64 graph inputs or outputs.
    r"test_(cumsum|cumprod)_(?!\w*int32)\w+|test_einsum_(?!\w*bfloat16)\w+"
    r"|test_reduce_log_sum_exp_(?!empty_set)\w+|test_bernoulli(_double)?(_expanded)?"
    r"|test_(max|min)_float64|test_mod_\w*float64\w*|test_\w*(DOUBLE|double)\w*"
    r"|test_eyelike_with_dtype|test_bitcast_\w*float64\w*|test_ai_onnx_ml_tree_ensemble_single_tree":
        "provmap-openvino: float64: OpenVINO CPU has no f64 kernels and would compute in f32; "
        "provmap refuses the node rather than silently lose precision (plain OpenVINO runs it "
        "in f32, within rtol 1e-3 on these small cases)",
    # Every case with an If, Loop or Scan node in its main graph.
    r"test_(if|if_opt|if_seq|loop11|loop13_seq|loop16_seq_none|scan9?_\w+|affine_grid_\w+_expanded"
    r"|linear_attention_\w+_expanded|range_\w+_delta_expanded|sequence_map_\w+_expanded)":
        "provmap-tvm,provmap-map: control flow: If/Loop/Scan are not supported by provmap's "
        "Relax import (its nodes become opaque, which only ORT and OpenVINO partitions run)",
    # Wrong numbers a library computes, refused by provmap with the reason (issue 32's corpus
    # step; runtime_module/backends/ov_refusals.py, provenance/converters.wrong_lowering).
    r"test_top_k(_negative_axis|_same_values|_same_values_2d|_same_values_largest|_smallest"
    r"|_uint64)?":
        "provmap-openvino: TopK ties: OpenVINO orders equal values otherwise than ONNX's lower "
        "index first, so a TopK whose indices are read is refused (plain OpenVINO: "
        "test_top_k_same_values_2d wrong)",
    r"test_spacetodepth_crd_mode_example":
        "provmap-openvino,provmap-tvm,provmap-map: SpaceToDepth CRD: both order channels as DCR "
        "whatever the mode",
    r"test_resize_(down|up)sample_scales_cubic_A_n0p5_exclude_outside":
        "provmap-openvino: cubic exclude_outside: OpenVINO's cubic Resize ignores "
        "exclude_outside=1",
    r"test_(cast|castlike)_(no_saturate_)?\w*(FLOAT8E4M3FN|FLOAT8E5M2|INT4|UINT4|FLOAT4E2M1|INT2|UINT2)"
    r"\w*|test_cast(like)?_e8m0_FLOAT(16)?_to_FLOAT8E8M0(_expanded)?":
        "provmap-tvm,provmap-map: narrow types: TVM 0.27 crashes its VM on 4-bit tensors and "
        "casts 8-bit floats without ONNX's saturation and NaN (provenance/converters.wrong_dtype)",
    r"test_attention_(23_boolmask_fullymasked_row_nan_robustness|2[34]_fullymasked_qk_matmul_output"
    r"_mode3_zero|24_qk_matmul_output_mode3_softmax_precision|3d_(causal_bf16|causal|diff_heads_"
    r"sizes_causal|gqa_causal)|4d_attn_mask_(3d_causal|4d_causal|bool_4d|bool|causal_bf16)"
    r"|4d_(causal_bf16|causal|causal_fp16)|4d_causal_nonpad_(attn_mask_composition|batch_prefill"
    r"|continued_prefill|negative_offset_structural_empty)|4d_causal_with_past_and_present"
    r"|4d_diff_heads_mask4d_padded_kv|4d_diff_heads_sizes_causal|4d_gqa_causal(_nonpad_decode"
    r"(_fp16)?)?|4d_padded_kv_bf16|causal_boolmask_nan_robustness)_expanded"
    r"|test_attention_(3d_local_window|4d_causal_padded_kv_bf16|4d_with_past_and_present_qk_matmul"
    r"_bias_[34]d_mask_causal|bidirectional_window|local_window(_ext_cache_(float16_mask|rank2_mask"
    r"|rank3_head_mask|rank4_batch_mask)|_gqa_rank4_mask|_rank1_boolean_mask|_with_past)?)"
    r"(_expanded)?":
        "provmap-openvino: OpenVINO attention: its Attention ignores the window, misplaces the "
        "causal mask with a cache and a mask, and its ReduceMax of -inf only is -3.4e38 "
        "(runtime_module/backends/ov_attention.py)",
    r"test_bitshift_\w+":
        "provmap-openvino,provmap-tvm,provmap-map: BitShift amount: a shift by the type's width "
        "or more is ONNX's 0, not C's shift; only a constant amount within range is taken",
    r"test_isinf_(positive|negative)":
        "provmap-tvm,provmap-map: IsInf detect flags: TVM's IsInf ignores detect_positive and "
        "detect_negative",
}


def exception_for(case: str, pipeline: str) -> str | None:
    for pat, reason in EXCEPTIONS.items():
        scope, _, why = reason.partition(": ")
        if re.fullmatch(pat, case) and (scope == "*" or pipeline in scope.split(",")):
            return why
    return None
