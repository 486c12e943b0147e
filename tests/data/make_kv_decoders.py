"""Writes tests/data/gpt2_kv_decoder.onnx and tests/data/llama_gqa_kv_decoder.onnx (the files are
committed; this is how they were made, with the [torch] extra): transformers' GPT2LMHeadModel and
LlamaForCausalLM (grouped-query attention: 4 query heads, 2 key/value heads) from their config
classes with random weights, 2 layers, hidden 32, vocabulary 64, exported with a KV cache as
optimum lays one out: inputs input_ids [batch, seq], attention_mask [batch, total],
past_key_values.N.key/value [batch, heads, past, 8]; outputs logits and present.N.key/value
[batch, heads, total, 8].  `past` is 0 at the prefill; the exporter does not relate total to
past + seq, so a profile gives all three.

    python3 tests/data/make_kv_decoders.py gpt2 ts tests/data/gpt2_kv_decoder.onnx
    python3 tests/data/make_kv_decoders.py llama ts tests/data/llama_gqa_kv_decoder.onnx

`gpt2-small` in place of `gpt2` writes the GPT-2-small-sized decoder (GPT2Config(): 124M
parameters, 650 MB) the bench's decode row takes with `--kv-model` (not committed).
"""
import sys

import torch  # pyright: ignore[reportMissingImports]  (the [torch] extra; not run by the suite)
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM  # pyright: ignore[reportMissingImports]
from transformers.cache_utils import DynamicCache  # pyright: ignore[reportMissingImports]
torch.manual_seed(0)
SMALL = sys.argv[1] == "gpt2-small"
kind = "gpt2" if SMALL else sys.argv[1]; dynamo = sys.argv[2] == "dynamo"
if kind == "gpt2":
    cfg = GPT2Config() if SMALL else GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=64, n_positions=256)
    model = GPT2LMHeadModel(cfg).eval(); L=cfg.n_layer; H=cfg.n_head; D=cfg.n_embd // cfg.n_head
else:
    cfg = LlamaConfig(num_hidden_layers=2, hidden_size=32, num_attention_heads=4, num_key_value_heads=2, intermediate_size=64, vocab_size=64, max_position_embeddings=256)
    model = LlamaForCausalLM(cfg).eval(); L=2; H=2; D=8
class W(torch.nn.Module):
    def __init__(s, m): super().__init__(); s.m = m
    def forward(s, input_ids, attention_mask, *past):
        cache = DynamicCache(config=cfg)
        for i in range(L):
            cache.update(past[2*i], past[2*i+1], i)
        out = s.m(input_ids=input_ids, attention_mask=attention_mask, past_key_values=cache, use_cache=True)
        pk = out.past_key_values
        res = [out.logits]
        for i in range(L):
            lay = pk.layers[i]
            res += [lay.keys, lay.values]
        return tuple(res)
w = W(model)
B, S, P = 1, 3, 5
ids = torch.randint(0, 64, (B, S)); am = torch.ones(B, P+S, dtype=torch.int64)
past = [torch.randn(B, H, P, D) for _ in range(2*L)]
names_in = ["input_ids", "attention_mask"] + [f"past_key_values.{i}.{kv}" for i in range(L) for kv in ("key","value")]
names_out = ["logits"] + [f"present.{i}.{kv}" for i in range(L) for kv in ("key","value")]
dyn = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "total"}}
for n in names_in[2:]: dyn[n] = {0: "batch", 2: "past"}
for n in names_out[1:]: dyn[n] = {0: "batch", 2: "total"}
dyn["logits"] = {0: "batch", 1: "seq"}
path = sys.argv[3]
with torch.no_grad():
    if dynamo:
        Bd = torch.export.Dim("batch", max=64); Sd = torch.export.Dim("seq", max=128); Pd = torch.export.Dim("past", max=1024)
        ds = {"input_ids": {0: Bd, 1: Sd}, "attention_mask": {0: Bd, 1: Sd + Pd}, "past": tuple({0: Bd, 2: Pd} for _ in range(2*L))}
        torch.onnx.export(w, (ids, am, *past), path, input_names=names_in, output_names=names_out, dynamic_shapes=ds, dynamo=True, opset_version=18)
    else:
        torch.onnx.export(w, (ids, am, *past), path, input_names=names_in, output_names=names_out, dynamic_axes=dyn, dynamo=False, opset_version=17)
print("ok", path)
