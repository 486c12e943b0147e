"""A KV-cache decoder driven as a generation loop drives it: one prefill of the prompt (the cache
empty: `past` 0), then one token at a time, each step feeding back the `present.*` tensors the
last returned.  The same loop runs ONNX Runtime on the user's file and a provmap artifact, step
by step, so every step's logits are compared and (`timed=True`) each decode step is timed on
both: what `tests/test_dynamic_shapes.py` checks and the bench's decode row reports.

The model's inputs are found by name as optimum and the exporters lay them out:
input_ids [batch, seq], attention_mask [batch, past + seq], past_key_values.N.key/value
[batch, heads, past, head_dim]; outputs logits, present.N.key/value."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

import numpy as np


@dataclass
class DecodeReport:
    steps: int = 0
    worst_abs: float = 0.0                 # largest |logits - ORT's| over every step
    step_ms: list = field(default_factory=list)      # the artifact's decode steps
    ref_step_ms: list = field(default_factory=list)  # ONNX Runtime's, interleaved with them


def _past_inputs(session) -> list:
    return [i for i in session.get_inputs() if i.name.startswith("past")]


def profile_flags(prompt: int, steps: int) -> list[str]:
    """The `--dim` flags of an artifact serving this loop: batch 1, seq 1..prompt (measured at
    one token, the decode step), past 0..prompt+steps, total 1..prompt+steps+1."""
    n = prompt + steps
    return ["--dim", "batch=1", "--dim", f"seq=1..{prompt}@1", "--dim", f"past=0..{n}@{prompt}",
            "--dim", f"total=1..{n + 1}@{prompt + 1}"]


def run_loop(model_path: str, artifact, prompt: int = 128, steps: int = 32, seed: int = 0,
             timed: bool = False) -> DecodeReport:
    """Prefill `prompt` tokens and decode `steps` more, on ONNX Runtime and on `artifact` (a
    loaded ArtifactModule), each fed its own cache; greedy tokens chosen from ONNX Runtime's
    logits so both see the same ids."""
    import onnxruntime as ort

    sess = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"])
    past = _past_inputs(sess)
    out_names = [o.name for o in sess.get_outputs()]
    heads, head_dim = past[0].shape[1], past[0].shape[3]
    vocab = int(sess.get_outputs()[0].shape[-1])
    rng = np.random.default_rng(seed)
    x = rng.integers(0, vocab, (1, prompt)).astype(np.int64)
    cache_ref = cache_art = [np.zeros((1, heads, 0, head_dim), np.float32) for _ in past]
    total, rep = 0, DecodeReport()

    def feeds(ids, cache):
        f = {"input_ids": ids, "attention_mask": np.ones((1, total), np.int64)}
        f.update({p.name: c for p, c in zip(past, cache)})
        return f

    for step in range(steps + 1):
        total += x.shape[1]
        fr, fa = feeds(x, cache_ref), feeds(x, cache_art)
        t0 = time.perf_counter()
        ref = sess.run(None, fr)
        t1 = time.perf_counter()
        got = artifact.run(fa)
        t2 = time.perf_counter()
        if timed and step:
            rep.ref_step_ms.append((t1 - t0) * 1e3)
            rep.step_ms.append((t2 - t1) * 1e3)
        rep.worst_abs = max(rep.worst_abs, float(np.abs(got[out_names[0]] - ref[0]).max()))
        cache_ref = ref[1:]
        cache_art = [got[n] for n in out_names[1:]]
        x = np.argmax(ref[0][:, -1:], -1).astype(np.int64)
        rep.steps += 1
    return rep


def library_step(model_path: str, library: str):
    """`feeds -> {name: array}` for the user's file on the library itself: ONNX Runtime's CPU
    session, or OpenVINO's CPU plugin at f32 with the LATENCY hint (what provmap's OpenVINO
    backend uses by default; precision explicit so both compute the same numbers)."""
    if library == "onnxruntime":
        import onnxruntime as ort

        sess = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"])
        names = [o.name for o in sess.get_outputs()]
        return lambda feeds: dict(zip(names, sess.run(None, feeds)))
    import openvino as ov

    core = ov.Core()
    cm = core.compile_model(core.read_model(model_path), "CPU",
                            {"INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "LATENCY"})
    req = cm.create_infer_request()
    outs = [(p, p.get_any_name()) for p in cm.outputs]

    def step(feeds):
        r = req.infer(feeds)
        return {n: np.array(r[p]) for p, n in outs}
    return step


def decode_step_times(model_path: str, steps_fns: dict, prompt: int = 128, steps: int = 32,
                      rounds: int = 3, seed: int = 0) -> dict:
    """Median decode-step ms of each `steps_fns` entry (label -> feeds -> outputs), each running
    the whole loop alone, the loops alternated `rounds` times (A B A B ...): one library's idle
    threads never sit beside another's steps, and drift reaches every entry alike."""
    import onnxruntime as ort

    sess = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"])
    past = _past_inputs(sess)
    out_names = [o.name for o in sess.get_outputs()]
    heads, head_dim = past[0].shape[1], past[0].shape[3]
    vocab = int(sess.get_outputs()[0].shape[-1])
    del sess
    times = {k: [] for k in steps_fns}
    for _ in range(rounds):
        for label, fn in steps_fns.items():
            x = np.random.default_rng(seed).integers(0, vocab, (1, prompt)).astype(np.int64)
            cache = [np.zeros((1, heads, 0, head_dim), np.float32) for _ in past]
            total = 0
            for step in range(steps + 1):
                total += x.shape[1]
                f = {"input_ids": x, "attention_mask": np.ones((1, total), np.int64)}
                f.update({p.name: c for p, c in zip(past, cache)})
                t0 = time.perf_counter()
                got = fn(f)
                if step:
                    times[label].append((time.perf_counter() - t0) * 1e3)
                cache = [got[n] for n in out_names[1:]]
                x = np.argmax(got[out_names[0]][:, -1:], -1).astype(np.int64)
    return {k: statistics.median(v) for k, v in times.items()}
