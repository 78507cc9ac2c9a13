#!/usr/bin/env python3
"""make_model_seeds.py — the valid containers tests/fuzz/fuzz_model.c mutates: one of every kind the runtime
loads, each small so that a run rewrites and opens it thousands of times a second.

  make_model_seeds.py --qmap build/qmap --out DIR

Writes DIR/NN-<name>.qmap:
  gpt2 with a byte-level BPE tokenizer (GPT-2 style vocab.json + merges.txt), F32 and Q8_ROW
  gpt_neo (local and global layers), F16, no tokenizer
  llama with a SentencePiece-style BPE tokenizer.json, F32 and Q8_ROW with column panels
  mistral (a sliding window) and qwen2 (q/k/v biases, tied head)
  llama with the shipped KJV SentencePiece model (tokenizer.model), vocabulary 4096
  mlp: the shipped digits classifier, F32 and Q8_ROW
  seq2seq with the shipped G2P word-level source and target vocabularies, F32 and F16
The weights are random (tests/models), tiny, deterministic: the fuzzer exercises the loaders and the
runtime's paths, not the numbers.
"""
import argparse
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)
ROOT = os.path.dirname(TESTS)
sys.path.insert(0, TESTS)
sys.path.insert(0, os.path.join(TESTS, "convert"))

import torch  # noqa: E402

import models  # noqa: E402
from savers import save_safetensors, write_tokenizer, TOKENIZERS  # noqa: E402

SMALL = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
             max_position_embeddings=16)


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit("make_model_seeds: %s: %s" % (" ".join(cmd), r.stderr.strip()))


def lm_source(name, work, tok, **kw):
    """A tiny model of family `name` saved as safetensors + config.json in work/name; tok: the savers
    tokenizer to store beside it (None: no tokenizer). Returns the convert arguments."""
    d = os.path.join(work, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    if tok:
        vocab, _ = TOKENIZERS[tok][1]()
        kw["vocab_size"] = len(vocab)
    family = "llama" if name.startswith(("llama", "mistral", "qwen2")) else name.split("-")[0]
    variant = {"mistral": "mistral", "qwen2": "qwen2"}.get(name.split("-")[0])
    if variant:
        kw["variant"] = variant
    model, cfg = models.build(family, seed=5, **kw)
    srcs, _ = save_safetensors(model, cfg, d)
    if tok:
        write_tokenizer(tok, d)
        return srcs
    return srcs + ["--no-tokenizer"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--qmap", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    torch.manual_seed(0)
    os.makedirs(a.out, exist_ok=True)
    work = os.path.join(a.out, "src")
    llama_small = dict(SMALL)
    gpt_small = dict(n_embd=32, n_layer=2, n_head=4, n_positions=16, n_ctx=16)
    neo_small = dict(hidden_size=32, num_layers=2, num_heads=4, max_position_embeddings=16, window_size=4)
    sources = [
        ("gpt2", lm_source("gpt2", work, "gpt2", **gpt_small), ["q8"]),
        ("gpt_neo", lm_source("gpt_neo", work, None, **neo_small), ["f16"]),
        ("llama", lm_source("llama", work, "llama", **dict(llama_small, intermediate_size=128)), ["q8-panels"]),
        ("mistral", lm_source("mistral", work, None, **dict(llama_small, sliding_window=4)), []),
        ("qwen2", lm_source("qwen2", work, None, **llama_small), []),
        ("llama-spm", lm_source("llama-spm", work, None, **dict(llama_small, vocab_size=4096, hidden_size=16,
                                                                 intermediate_size=16, num_hidden_layers=1))[:-1]
         + ["--tokenizer", os.path.join(ROOT, "tests", "data", "kjv_llama", "tokenizer.model")], []),
        ("mlp", [os.path.join(ROOT, "tests", "data", "digits_mlp", "model.pt")], ["q8"]),
    ]
    s2s_dir = os.path.join(work, "seq2seq")
    shutil.rmtree(s2s_dir, ignore_errors=True)
    os.makedirs(s2s_dir)
    g2p = os.path.join(ROOT, "tests", "data", "g2p")
    import json
    sizes = [len(json.load(open(os.path.join(g2p, side, "tokenizer.json")))["model"]["vocab"]) for side in ("src", "tgt")]
    model, cfg = models.build("seq2seq", seed=5, d_model=32, nhead=4, num_encoder_layers=1, num_decoder_layers=1,
                              dim_feedforward=32, src_vocab_size=sizes[0], tgt_vocab_size=sizes[1], max_len=12)
    srcs, _ = save_safetensors(model, cfg, s2s_dir)
    sources.append(("seq2seq", srcs + ["--src-tokenizer", os.path.join(g2p, "src", "tokenizer.json"),
                                       "--tgt-tokenizer", os.path.join(g2p, "tgt", "tokenizer.json")], ["f16"]))
    n = 0
    for name, args, variants in sources:
        f32 = os.path.join(a.out, "%02d-%s.qmap" % (n, name))
        run([a.qmap, "convert", *args, "-o", f32, "--quiet"])
        n += 1
        for v in variants:
            out = os.path.join(a.out, "%02d-%s-%s.qmap" % (n, name, v))
            how = {"q8": ["--q8"], "f16": ["--f16"], "q8-panels": ["--q8", "--panel-cols", "64"]}[v]
            run([a.qmap, "quantize", *how, f32, "-o", out, "--quiet"])
            n += 1
    shutil.rmtree(work)
    # the fuzzer's first inputs: each container as it is (byte 0 picks it, byte 1 the session's options)
    inputs = os.path.join(a.out, "inputs")
    os.makedirs(inputs, exist_ok=True)
    for i in range(n):
        for salt in (0, 3):
            with open(os.path.join(inputs, "%02d-%d" % (i, salt)), "wb") as f:
                f.write(bytes([i, salt]))
    print("make_model_seeds: %d containers in %s, %d inputs in %s" % (n, a.out, 2 * n, inputs))


if __name__ == "__main__":
    main()
