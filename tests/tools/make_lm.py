#!/usr/bin/env python3
"""Write a random-init decoder LM at a real shape as a Hugging Face style directory (config.json +
model.safetensors, HF tensor names), for speed measurements: `qmap convert` reads it like any checkpoint.

    make_lm.py SHAPE OUTDIR [--seed N]

SHAPE: llama-110m (dim 768, 12 layers, 12 heads, hidden 2048, vocab 32000, head tied as in llama2.c's
stories110M), tinyllama-1.1b (dim 2048,
22 layers, 32 heads, 4 kv heads, hidden 5632, vocab 32000), gpt2-124m (GPT-2 small), qwen3-0.6b (Qwen3-0.6B's
config: dim 1024, 28 layers, 16 heads of 128, 8 kv heads, hidden 3072, vocab 151936, q/k norms, tied), and
two made-up shapes of about 0.5 B parameters in the newer families' layouts, since their released models are
2.6 B (Gemma 2) and 3.8 B (Phi-3-mini) and larger: gemma2-0.5b (dim 1024, 12 layers, 8 heads of 128, 4 kv
heads, hidden 4096, Gemma 2's 256000 vocabulary, tied, pre/post norms, soft-caps) and phi3-0.5b (dim 1536,
16 layers, 16 heads, hidden 4096, vocab 32064, fused qkv_proj and gate_up_proj, untied).

Weights are normal with std 0.02 (the spread of trained ones; speed does not depend on the values), norm
weights 1, biases 0. Written with numpy only, streaming one tensor at a time, so a 4.4 GB checkpoint needs
no more memory than its largest tensor.
"""
import argparse
import json
import os
import struct
import sys

import numpy as np

SHAPES = {
    "llama-110m": dict(model_type="llama", hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                       num_key_value_heads=12, intermediate_size=2048, vocab_size=32000,
                       max_position_embeddings=2048, tie_word_embeddings=True),
    "tinyllama-1.1b": dict(model_type="llama", hidden_size=2048, num_hidden_layers=22, num_attention_heads=32,
                           num_key_value_heads=4, intermediate_size=5632, vocab_size=32000,
                           max_position_embeddings=2048),
    "gpt2-124m": dict(model_type="gpt2", n_embd=768, n_layer=12, n_head=12, n_positions=1024, vocab_size=50257),
    "qwen3-0.6b": dict(model_type="qwen3", architectures=["Qwen3ForCausalLM"], hidden_size=1024,
                       num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                       intermediate_size=3072, vocab_size=151936, max_position_embeddings=40960,
                       rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=True, hidden_act="silu"),
    "gemma2-0.5b": dict(model_type="gemma2", architectures=["Gemma2ForCausalLM"], hidden_size=1024,
                        num_hidden_layers=12, num_attention_heads=8, num_key_value_heads=4, head_dim=128,
                        intermediate_size=4096, vocab_size=256000, max_position_embeddings=8192,
                        rms_norm_eps=1e-6, rope_theta=10000.0, query_pre_attn_scalar=128,
                        attn_logit_softcapping=50.0, final_logit_softcapping=30.0, sliding_window=4096,
                        hidden_activation="gelu_pytorch_tanh", hidden_act="gelu_pytorch_tanh",
                        tie_word_embeddings=True),
    "phi3-0.5b": dict(model_type="phi3", architectures=["Phi3ForCausalLM"], hidden_size=1536,
                      num_hidden_layers=16, num_attention_heads=16, num_key_value_heads=16,
                      intermediate_size=4096, vocab_size=32064, max_position_embeddings=4096,
                      original_max_position_embeddings=4096, rms_norm_eps=1e-5, rope_theta=10000.0,
                      sliding_window=2047, hidden_act="silu", tie_word_embeddings=False),
}


def llama_tensors(c):
    """Llama's tensors and the variants': Qwen3's q/k norms, Gemma 2's extra norms (stored as w, scaled
    by 1 + w: "zero" is the identity), Phi-3's fused projections."""
    d, f, V, t = c["hidden_size"], c["intermediate_size"], c["vocab_size"], c["model_type"]
    hd = c.get("head_dim") or d // c["num_attention_heads"]
    q, kv = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd
    norm = "zero" if t == "gemma2" else "one"
    yield "model.embed_tokens.weight", (V, d), "w"
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        yield p + "input_layernorm.weight", (d,), norm
        if t == "phi3":
            yield p + "self_attn.qkv_proj.weight", (q + 2 * kv, d), "w"
        else:
            yield p + "self_attn.q_proj.weight", (q, d), "w"
            yield p + "self_attn.k_proj.weight", (kv, d), "w"
            yield p + "self_attn.v_proj.weight", (kv, d), "w"
        if t == "qwen3":
            yield p + "self_attn.q_norm.weight", (hd,), "one"
            yield p + "self_attn.k_norm.weight", (hd,), "one"
        yield p + "self_attn.o_proj.weight", (d, q), "w"
        yield p + "post_attention_layernorm.weight", (d,), norm
        if t == "gemma2":
            yield p + "pre_feedforward_layernorm.weight", (d,), norm
            yield p + "post_feedforward_layernorm.weight", (d,), norm
        if t == "phi3":
            yield p + "mlp.gate_up_proj.weight", (2 * f, d), "w"
        else:
            yield p + "mlp.gate_proj.weight", (f, d), "w"
            yield p + "mlp.up_proj.weight", (f, d), "w"
        yield p + "mlp.down_proj.weight", (d, f), "w"
    yield "model.norm.weight", (d,), norm
    if not c.get("tie_word_embeddings", False):
        yield "lm_head.weight", (V, d), "w"


def gpt2_tensors(c):
    d, V, C = c["n_embd"], c["vocab_size"], c["n_positions"]
    yield "wte.weight", (V, d), "w"
    yield "wpe.weight", (C, d), "w"
    for i in range(c["n_layer"]):
        p = f"h.{i}."
        yield p + "ln_1.weight", (d,), "one"
        yield p + "ln_1.bias", (d,), "zero"
        yield p + "attn.c_attn.weight", (d, 3 * d), "w"   # Conv1D: [in, out]
        yield p + "attn.c_attn.bias", (3 * d,), "zero"
        yield p + "attn.c_proj.weight", (d, d), "w"
        yield p + "attn.c_proj.bias", (d,), "zero"
        yield p + "ln_2.weight", (d,), "one"
        yield p + "ln_2.bias", (d,), "zero"
        yield p + "mlp.c_fc.weight", (d, 4 * d), "w"
        yield p + "mlp.c_fc.bias", (4 * d,), "zero"
        yield p + "mlp.c_proj.weight", (4 * d, d), "w"
        yield p + "mlp.c_proj.bias", (d,), "zero"
    yield "ln_f.weight", (d,), "one"
    yield "ln_f.bias", (d,), "zero"


def write_lm(cfg, outdir, seed=0, std=0.02):
    """config.json and model.safetensors of a random-init model of config cfg (a SHAPES entry or one like
    it) in outdir; weights normal with standard deviation std. Returns the checkpoint's byte size."""
    tensors = list(gpt2_tensors(cfg) if cfg["model_type"] == "gpt2" else llama_tensors(cfg))
    os.makedirs(outdir, exist_ok=True)
    with open(os.path.join(outdir, "config.json"), "w") as fp:
        json.dump(cfg, fp, indent=1)

    header, off = {}, 0
    for name, shape, _ in tensors:
        n = int(np.prod(shape)) * 4
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * (-len(hb) % 8)
    rng = np.random.default_rng(seed)
    path = os.path.join(outdir, "model.safetensors")
    tmp = path + ".tmp"
    with open(tmp, "wb") as fp:
        fp.write(struct.pack("<Q", len(hb)))
        fp.write(hb)
        for name, shape, kind in tensors:
            if kind == "w":
                t = rng.standard_normal(shape, dtype=np.float32) * np.float32(std)
            else:
                t = np.full(shape, 1.0 if kind == "one" else 0.0, dtype=np.float32)
            fp.write(np.ascontiguousarray(t, dtype="<f4").tobytes())
    os.replace(tmp, path)
    return off + len(hb) + 8


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("shape", choices=sorted(SHAPES))
    ap.add_argument("outdir")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    cfg = dict(SHAPES[a.shape])
    size = write_lm(cfg, a.outdir, a.seed)
    n_params = sum(int(np.prod(s)) for _, s, _ in (gpt2_tensors(cfg) if cfg["model_type"] == "gpt2"
                                                    else llama_tensors(cfg)))
    print(f"{a.shape}: {n_params / 1e6:.1f} M parameters, {size / 1e9:.2f} GB -> "
          f"{os.path.join(a.outdir, 'model.safetensors')}", file=sys.stderr)


if __name__ == "__main__":
    main()
