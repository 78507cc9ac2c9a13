#!/usr/bin/env python3
"""Write a random-init decoder LM at a real shape as a Hugging Face style directory (config.json +
model.safetensors, HF tensor names), for speed measurements: `qmap convert` reads it like any checkpoint.

    make_lm.py SHAPE OUTDIR [--seed N]

SHAPE: llama-110m (dim 768, 12 layers, 12 heads, hidden 2048, vocab 32000, head tied as in llama2.c's
stories110M), tinyllama-1.1b (dim 2048,
22 layers, 32 heads, 4 kv heads, hidden 5632, vocab 32000), gpt2-124m (GPT-2 small).

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
}


def llama_tensors(c):
    d, f, V = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    hd = d // c["num_attention_heads"]
    kv = c["num_key_value_heads"] * hd
    yield "model.embed_tokens.weight", (V, d), "w"
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        yield p + "input_layernorm.weight", (d,), "one"
        yield p + "self_attn.q_proj.weight", (d, d), "w"
        yield p + "self_attn.k_proj.weight", (kv, d), "w"
        yield p + "self_attn.v_proj.weight", (kv, d), "w"
        yield p + "self_attn.o_proj.weight", (d, d), "w"
        yield p + "post_attention_layernorm.weight", (d,), "one"
        yield p + "mlp.gate_proj.weight", (f, d), "w"
        yield p + "mlp.up_proj.weight", (f, d), "w"
        yield p + "mlp.down_proj.weight", (d, f), "w"
    yield "model.norm.weight", (d,), "one"
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
    tensors = list(llama_tensors(cfg) if cfg["model_type"] == "llama" else gpt2_tensors(cfg))
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
    n_params = sum(int(np.prod(s)) for _, s, _ in (llama_tensors(cfg) if cfg["model_type"] == "llama"
                                                    else gpt2_tensors(cfg)))
    print(f"{a.shape}: {n_params / 1e6:.1f} M parameters, {size / 1e9:.2f} GB -> "
          f"{os.path.join(a.outdir, 'model.safetensors')}", file=sys.stderr)


if __name__ == "__main__":
    main()
