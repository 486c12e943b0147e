"""A GPT-2-style decoder graph spelled the way the PyTorch exporter writes one, for compile-time
scaling: real exported LLM graphs have 5,000 to 20,000 nodes, far beyond the bundled models, and
torch is an optional extra, so the compile-scaling bench builds the same node patterns with
onnx.helper at any depth.

Per layer (about 50 nodes), as `torch.onnx.export` of Hugging Face's GPT2Block writes them:
LayerNormalization; the fused ``c_attn`` MatMul + Add, Split into q/k/v; per head Reshape +
Transpose; q.k^T scaled by Div; the causal mask as Where over a constant boolean mask; Softmax;
context MatMul, Transpose, Reshape; ``c_proj`` MatMul + Add; residual Add; LayerNormalization;
the MLP with the tanh form of Gelu spelled out (Mul, Pow, Mul, Add, Mul, Tanh, Add, Mul); its
projection and residual.  Token + position embeddings (Gather, Add) in front, a final
LayerNormalization and the tied LM head (MatMul with the transposed token table) behind.
Dimensions are small so that the graph, not the arithmetic, dominates compile time.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def gpt2_like(layers: int, seq: int = 8, d_model: int = 32, heads: int = 2, vocab: int = 64,
              seed: int = 0) -> onnx.ModelProto:
    """Input ``input_ids`` int64 ``[1, seq]``, output ``logits`` float32 ``[1, seq, vocab]``."""
    rng = np.random.default_rng(seed)
    dk = d_model // heads
    inits: list[TensorProto] = []
    nodes: list[onnx.NodeProto] = []

    def init(name: str, array) -> str:
        inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def node(op: str, name: str, inputs: list[str], n_out: int = 1, **attrs) -> list[str]:
        outs = [f"/{name}_output_{i}" for i in range(n_out)]
        nodes.append(helper.make_node(op, inputs, outs, name=f"/{name}", **attrs))
        return outs

    def one(op: str, name: str, inputs: list[str], **attrs) -> str:
        return node(op, name, inputs, **attrs)[0]

    def w(name: str, fan_in: int, fan_out: int) -> str:
        return init(name, (rng.standard_normal((fan_in, fan_out)) / math.sqrt(fan_in))
                    .astype(np.float32))

    def b(name: str, n: int) -> str:
        return init(name, (0.02 * rng.standard_normal(n)).astype(np.float32))

    def layer_norm(prefix: str, x: str) -> str:
        g = init(f"{prefix}.weight", (1 + 0.1 * rng.standard_normal(d_model)).astype(np.float32))
        be = b(f"{prefix}.bias", d_model)
        return one("LayerNormalization", f"{prefix}/LayerNormalization", [x, g, be], axis=-1,
                   epsilon=1e-5)

    def linear(prefix: str, x: str, fan_in: int, fan_out: int) -> str:
        mm = one("MatMul", f"{prefix}/MatMul", [x, w(f"{prefix}.weight", fan_in, fan_out)])
        return one("Add", f"{prefix}/Add", [b(f"{prefix}.bias", fan_out), mm])

    heads_shape = init("shape_heads", np.array([1, seq, heads, dk], np.int64))
    merge_shape = init("shape_merge", np.array([1, seq, d_model], np.int64))
    split = init("split_qkv", np.array([d_model] * 3, np.int64))
    scale = init("attn_scale", np.array(math.sqrt(dk), np.float32))
    causal = init("causal_mask", np.tril(np.ones((1, 1, seq, seq), bool)))
    neg = init("mask_value", np.array(-3.4e38, np.float32))
    c_half, c_one = init("c_half", np.array(0.5, np.float32)), init("c_one", np.array(1.0, np.float32))
    c_three = init("c_three", np.array(3.0, np.float32))
    c_k = init("c_gelu_k", np.array(0.044715, np.float32))
    c_s = init("c_gelu_s", np.array(math.sqrt(2 / math.pi), np.float32))
    wte = init("transformer.wte.weight", (0.1 * rng.standard_normal((vocab, d_model)))
               .astype(np.float32))
    wpe = init("transformer.wpe.weight", (0.1 * rng.standard_normal((seq, d_model)))
               .astype(np.float32))
    positions = init("position_ids", np.arange(seq, dtype=np.int64)[None])

    tok = one("Gather", "transformer/wte/Gather", [wte, "input_ids"])
    pos = one("Gather", "transformer/wpe/Gather", [wpe, positions])
    x = one("Add", "transformer/Add", [tok, pos])
    for i in range(layers):
        p = f"transformer/h.{i}"
        h = layer_norm(f"{p}/ln_1", x)
        qkv = linear(f"{p}/attn/c_attn", h, d_model, 3 * d_model)
        q, k, v = node("Split", f"{p}/attn/Split", [qkv, split], n_out=3, axis=2)
        perms = {"q": [0, 2, 1, 3], "k": [0, 2, 3, 1], "v": [0, 2, 1, 3]}
        hs = {}
        for nm, t in (("q", q), ("k", k), ("v", v)):
            r = one("Reshape", f"{p}/attn/Reshape_{nm}", [t, heads_shape])
            hs[nm] = one("Transpose", f"{p}/attn/Transpose_{nm}", [r], perm=perms[nm])
        s = one("MatMul", f"{p}/attn/MatMul", [hs["q"], hs["k"]])
        s = one("Div", f"{p}/attn/Div", [s, scale])
        s = one("Where", f"{p}/attn/Where", [causal, s, neg])
        s = one("Softmax", f"{p}/attn/Softmax", [s], axis=-1)
        c = one("MatMul", f"{p}/attn/MatMul_1", [s, hs["v"]])
        c = one("Transpose", f"{p}/attn/Transpose_ctx", [c], perm=[0, 2, 1, 3])
        c = one("Reshape", f"{p}/attn/Reshape_ctx", [c, merge_shape])
        x = one("Add", f"{p}/Add", [linear(f"{p}/attn/c_proj", c, d_model, d_model), x])
        h = layer_norm(f"{p}/ln_2", x)
        f = linear(f"{p}/mlp/c_fc", h, d_model, 4 * d_model)
        g = one("Pow", f"{p}/mlp/act/Pow", [f, c_three])
        g = one("Mul", f"{p}/mlp/act/Mul", [c_k, g])
        g = one("Add", f"{p}/mlp/act/Add", [f, g])
        g = one("Mul", f"{p}/mlp/act/Mul_1", [c_s, g])
        g = one("Tanh", f"{p}/mlp/act/Tanh", [g])
        g = one("Add", f"{p}/mlp/act/Add_1", [c_one, g])
        g = one("Mul", f"{p}/mlp/act/Mul_2", [f, g])
        g = one("Mul", f"{p}/mlp/act/Mul_3", [c_half, g])
        x = one("Add", f"{p}/Add_1", [x, linear(f"{p}/mlp/c_proj", g, 4 * d_model, d_model)])
    x = layer_norm("transformer/ln_f", x)
    head = one("Transpose", "lm_head/Transpose", [wte], perm=[1, 0])
    nodes.append(helper.make_node("MatMul", [x, head], ["logits"], name="/lm_head/MatMul"))
    graph = helper.make_graph(
        nodes, f"gpt2_like_{layers}",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, seq])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, seq, vocab])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8,
                             producer_name="provmap.bench.decoder_model")
