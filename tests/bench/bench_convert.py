#!/usr/bin/python3
"""bench_convert.py — conversion throughput of `qmap convert` beside a plain file copy, same run.

Writes a Llama-shaped F32 checkpoint of about 1.3 GB (safetensors, and torch.save zip when torch is
present), warms the page cache, then times, alternating, `qmap convert` and a copy of the same bytes to a
new file. Both end with fsync (the convert writer fsyncs and renames, so the fair copy does too); the copy
without fsync is printed as well. Prints median, min and max of --runs runs and the ratio of medians,
then how fast torch.save convert is against safetensors convert of the same weights (safetensors time /
torch.save time: 1.0 is as fast). Not a test: nothing here passes or fails on speed.

    /usr/bin/python3 tests/bench/bench_convert.py --qmap build/qmap --dir build/bench [--runs 5] [--gb 1.3]
"""
import argparse
import json
import os
import shutil
import statistics
import struct
import subprocess
import sys
import time

import numpy as np


def llama_shapes(target_bytes):
    d, ff, kv, vocab = 2048, 5632, 512, 32000
    shapes = [("model.embed_tokens.weight", (vocab, d))]
    layer = [("input_layernorm.weight", (d,)), ("self_attn.q_proj.weight", (d, d)),
             ("self_attn.k_proj.weight", (kv, d)), ("self_attn.v_proj.weight", (kv, d)),
             ("self_attn.o_proj.weight", (d, d)), ("post_attention_layernorm.weight", (d,)),
             ("mlp.gate_proj.weight", (ff, d)), ("mlp.up_proj.weight", (ff, d)), ("mlp.down_proj.weight", (d, ff))]
    per_layer = sum(int(np.prod(s)) * 4 for _, s in layer)
    n_layers = max(1, int((target_bytes - vocab * d * 4) // per_layer))
    for i in range(n_layers):
        shapes += [(f"model.layers.{i}.{n}", s) for n, s in layer]
    shapes += [("model.norm.weight", (d,)), ("lm_head.weight", (vocab, d))]
    config = {"model_type": "llama", "hidden_size": d, "intermediate_size": ff, "num_hidden_layers": n_layers,
              "num_attention_heads": 16, "num_key_value_heads": 4, "vocab_size": vocab,
              "max_position_embeddings": 2048, "rms_norm_eps": 1e-5, "tie_word_embeddings": False}
    return shapes, config


def write_safetensors(path, tensors):
    header, off = {}, 0
    for name, arr in tensors:
        header[name] = {"dtype": "F32", "shape": list(arr.shape), "data_offsets": [off, off + arr.nbytes]}
        off += arr.nbytes
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for _, arr in tensors:
            f.write(arr.tobytes())


def timed(fn, runs):
    out = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def copy_file(src, dst, sync):
    shutil.copyfile(src, dst)
    if sync:
        fd = os.open(dst, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
    os.unlink(dst)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--qmap", default="build/qmap")
    ap.add_argument("--dir", default="build/bench")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--gb", type=float, default=1.3, help="checkpoint size in GB (>= 1)")
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    shapes, config = llama_shapes(a.gb * 1e9)
    rng = np.random.default_rng(0)
    tensors = [(n, rng.standard_normal(s, dtype=np.float32) * 0.02) for n, s in shapes]
    total = sum(t.nbytes for _, t in tensors)
    routes = []
    st_path = os.path.join(a.dir, "model.safetensors")
    write_safetensors(st_path, tensors)
    routes.append(("safetensors", st_path))
    try:
        import torch
        pt_path = os.path.join(a.dir, "pytorch_model.bin")
        torch.save({n: torch.from_numpy(t) for n, t in tensors}, pt_path)
        routes.append(("torch.save zip", pt_path))
    except ImportError:
        print("torch not available: torch.save route skipped")
    del tensors
    with open(os.path.join(a.dir, "config.json"), "w") as f:
        json.dump(config, f)
    out = os.path.join(a.dir, "out.qmap")
    print(f"checkpoint: {len(shapes)} tensors, {total / 1e9:.2f} GB of F32 data; {a.runs} runs each, median [min, max]")

    def fmt(ts, nbytes):
        med = statistics.median(ts)
        return med, f"{nbytes / med / 1e9:6.2f} GB/s  [{nbytes / max(ts) / 1e9:.2f}, {nbytes / min(ts) / 1e9:.2f}]"

    sizes = {label: os.path.getsize(src) for label, src in routes}
    times = {label: ([], [], []) for label, _ in routes}   # convert, copy + fsync, copy without fsync
    for label, src in routes:
        copy_file(src, out, True)  # warm the page cache for every route
    # Interleaved, route inside run, so that drift on a shared machine hits every route and the copies
    # alike; run k of one route is paired with run k of the others for the per-run ratios below.
    for _ in range(a.runs):
        for label, src in routes:
            tc, ts, tn = times[label]
            tc += timed(lambda: subprocess.run([a.qmap, "convert", src, "-o", out, "--quiet", "--no-tokenizer"],
                                               check=True), 1)
            ts += timed(lambda: copy_file(src, out + ".copy", True), 1)
            tn += timed(lambda: copy_file(src, out + ".copy", False), 1)
    med = {}
    for label, _ in routes:
        tc, ts, tn = times[label]
        mc, sc = fmt(tc, sizes[label])
        ms, ss = fmt(ts, sizes[label])
        mn, sn = fmt(tn, sizes[label])
        med[label] = mc
        print(f"{label:15s} qmap convert         {sc}")
        print(f"{label:15s} copy + fsync         {ss}")
        print(f"{label:15s} copy (no fsync)      {sn}")
        print(f"{label:15s} ratio convert / copy+fsync = {ms / mc:.2f}   convert / copy(no fsync) = {mn / mc:.2f}")
    if "safetensors" in med and "torch.save zip" in med:
        # speed of torch.save convert relative to safetensors convert of the same weights (1.0: as fast;
        # the files differ by a few KB of headers, so times compare directly): from the two medians, and
        # the median of the per-run ratios (run k of each, taken back to back)
        st, pt = times["safetensors"][0], times["torch.save zip"][0]
        paired = statistics.median(s / t for s, t in zip(st, pt))
        print(f"torch.save zip convert / safetensors convert (speed, safetensors_time / torch_time): "
              f"{med['safetensors'] / med['torch.save zip']:.2f} from the medians, {paired:.2f} median per run")
    if os.path.exists(out):
        os.unlink(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
