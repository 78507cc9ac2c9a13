#!/usr/bin/env python3
"""test_lm.py — decoder LMs run by qmap against PyTorch (issue 13 §5).

For each family (tests/models: HF parameter names, HF math), a random-init model is saved as a real
checkpoint (torch.save or safetensors), converted by `qmap convert`, quantized by `qmap quantize --f16 /
--q8`, and run through the public API by tests/run/lm_logits.c. Checked:

- F32 weights, F32 KV cache: logits at every position of a 64-token sequence within 1e-4 · max|logit| of
  torch's; a 64-token greedy continuation identical to torch's (full recompute each step). With the default
  F16 KV cache: within 1e-3 (the cache rounds K and V to 11 significant bits).
- F16 weights: within 1e-3 of torch running the same F16-rounded weights, and 1e-2 of torch in F32.
- Q8_ROW: against torch running the weights dequantized by spec/FORMAT.md 6.1 (quantized here with the
  independent numpy transcription tests/spec_writer.py, and checked equal to the container's own tensors
  read by tests/spec_reader.py): with `--act precise` (float-X accuracy, so what remains is summation
  order) top-1 agreement >= 95% and mean KL(torch || qmap) <= 1e-3 nats; with the default `--act auto` (a
  prompt's products after a norm or attention in one int8 term) the same bounds (measured 0.8-1.6e-5), and
  its logits differ from both pure modes; `--act int8` >= 90% and <= 1e-2. The cost of quantizing (against torch in F32) is
  printed, not bounded.
- Prefill in one batch = token by token (the decode path) within 1e-5 · max|logit|; batches of 7 = one
  batch; 1 and 2 threads bit for bit.
- Cases that matter: gpt_neo and mistral run past their attention windows (asserted), llama has fewer kv
  heads than heads, qwen2 has q/k/v biases and a tied head, qwen3 a head_dim set on its own (heads x head_dim != hidden),
  per-head q/k RMSNorm and a tied head, phi3 fused qkv_proj/gate_up_proj (split by convert) and a sliding
  window it runs past, gemma2 (1 + w) norms around attention and FFN, GeGLU, a scaled embedding, soft-capped
  scores and logits, sliding windows on even layers only (run past), gpt2 a tied head.
- Errors: an id outside the vocabulary, a sequence past the context, a container that is not an LM, a
  tensor of the wrong shape, a missing metadata key — each refused with a message naming it.
- No allocation in 100 decode steps (counted malloc family), and the counter itself seen to work.
- The same runs under ASan+UBSan (lm_logits built with sanitizers) for every family and dtype: batches of 7
  within 1e-3 of token by token (Q8_ROW: with --act precise; the default's one-term batches within 1e-2).
"""
import argparse
import csv
import io
import json
import os
import re
import subprocess
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "convert"))

import spec_reader  # noqa: E402
import spec_writer  # noqa: E402
from checks import Checks, fresh_dir  # noqa: E402
from models import gemma2, gpt2, gpt_neo, llama, mlp, phi3  # noqa: E402
from savers import drop_shared, save_safetensors, save_torch, write_json, write_safetensors  # noqa: E402

T = 64          # tokens of the compared sequence
GREEDY = 64     # tokens of the greedy continuation
CTX = 160       # positions of every test model (>= T + GREEDY)

CASES = [
    # name, module, build kwargs, saver, attention window the sequence must pass (None: full)
    ("gpt2", gpt2, dict(n_positions=CTX, n_ctx=CTX), save_torch, None),
    ("gpt_neo", gpt_neo, dict(max_position_embeddings=CTX, window_size=8,
                              attention_types=[[["global", "local"], 1]]), save_safetensors, 8),
    ("llama", llama, dict(variant="llama", max_position_embeddings=CTX), save_safetensors, None),
    ("mistral", llama, dict(variant="mistral", max_position_embeddings=CTX, sliding_window=8), save_torch, 8),
    ("qwen2", llama, dict(variant="qwen2", max_position_embeddings=CTX), save_safetensors, None),
    ("qwen3", llama, dict(variant="qwen3", max_position_embeddings=CTX), save_safetensors, None),
    ("phi3", phi3, dict(max_position_embeddings=CTX, original_max_position_embeddings=CTX, sliding_window=8),
     save_safetensors, 8),
    ("gemma2", gemma2, dict(max_position_embeddings=CTX, sliding_window=8), save_safetensors, 8),
]


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


class Env:
    def __init__(self, args, c):
        self.qmap, self.tool, self.asan_tool, self.c = args.qmap, args.tool, args.asan_tool, c

    def logits(self, model_path, ids, V, *opts, tool=None):
        out = model_path + ".logits"
        r = run([tool or self.tool, model_path, out, *opts] + [str(i) for i in ids])
        if r.returncode:
            raise RuntimeError("lm_logits %s: %s" % (" ".join(opts), r.stderr.strip()))
        return np.fromfile(out, dtype=np.float32).reshape(len(ids), V)

    def greedy(self, model_path, ids, n, *opts):
        out = model_path + ".greedy"
        r = run([self.tool, model_path, out, "--greedy", str(n), *opts] + [str(i) for i in ids])
        if r.returncode:
            raise RuntimeError("lm_logits --greedy: " + r.stderr.strip())
        return [int(x) for x in open(out).read().split()]


def rel(a, b):
    return float(np.abs(a - b).max() / np.abs(b).max())


def torch_logits(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids]))[0].double().numpy()


def torch_greedy(model, ids, n):
    seq = list(ids)
    with torch.no_grad():
        for _ in range(n):
            seq.append(int(model(torch.tensor([seq]))[0, -1].argmax()))
    return seq[len(ids):]


def log_softmax(x):
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def kl(p_logits, q_logits):
    lp, lq = log_softmax(p_logits.astype(np.float64)), log_softmax(q_logits.astype(np.float64))
    return (np.exp(lp) * (lp - lq)).sum(axis=-1)


def is_gpt2_conv(name):
    """HF GPT-2's Conv1D weights are stored [in, out]: convert transposes them (ARCHITECTURES.md §4)."""
    return any(name.endswith(s) for s in ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight",
                                           "mlp.c_proj.weight")) and ".attention." not in name


def quantized_copy(model, family, how):
    """A copy of `model` whose matrices (rank >= 2 `.weight`, not the position table: ARCHITECTURES.md §1a)
    hold what `qmap quantize` stores: F16-rounded, or Q8_ROW dequantized per spec 6.1 (rows of the [out, in]
    layout the container uses)."""
    import copy
    m = copy.deepcopy(model)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if p.dim() < 2 or not name.endswith("weight") or name.endswith("wpe.weight"):
                continue
            w = p.detach().numpy().astype(np.float32)
            conv = family == "gpt2" and is_gpt2_conv(name)
            rows = w.T if conv else w
            if how == "f16":
                d = rows.astype(np.float16).astype(np.float32)
            else:
                q, scales, _ = spec_writer.quantize_q8row(np.ascontiguousarray(rows))
                d = q.astype(np.float32) * scales.astype(np.float32)[:, None]
            p.copy_(torch.from_numpy(np.ascontiguousarray(d.T if conv else d)))
    return m


PANEL = 64      # --panel-cols of the column-panel checks (ffn 128 in the llama cases, 256 in gpt2/gpt_neo)


def is_down_proj(name):
    """A layer's FFN down projection: llama's mlp.down_proj, GPT-2's and GPT-Neo's mlp.c_proj."""
    return name.endswith("mlp.down_proj.weight") or name.endswith("mlp.c_proj.weight")


def as_stored(family, name, w):
    """A weight as the container holds it ([out, in]): GPT-2's Conv1D weights transposed."""
    return w.T if family == "gpt2" and is_gpt2_conv(name) else w


def down_panels(w):
    """A [dim, ffn] down projection as qmap quantize --panel-cols PANEL writes it: [ffn / PANEL, dim, PANEL],
    panel p holding columns p*PANEL .. (p+1)*PANEL (spec/ARCHITECTURES.md §6)."""
    d, f = w.shape
    return np.ascontiguousarray(w.reshape(d, f // PANEL, PANEL).transpose(1, 0, 2))


def panelled_q8_copy(model, family):
    """quantized_copy(model, family, "q8"), but each down projection dequantized as its panels are quantized:
    one scale per row of each panel."""
    m = quantized_copy(model, family, "q8")
    with torch.no_grad():
        src = dict(model.named_parameters())
        for name, p in m.named_parameters():
            if is_down_proj(name):
                w = as_stored(family, name, src[name].detach().numpy().astype(np.float32))
                pan = down_panels(w)
                q, scales, _ = spec_writer.quantize_q8row(pan.reshape(-1, PANEL))
                deq = (q.astype(np.float32) * scales[:, None]).reshape(pan.shape)
                deq = np.ascontiguousarray(deq.transpose(1, 0, 2).reshape(w.shape))
                p.copy_(torch.from_numpy(np.ascontiguousarray(as_stored(family, name, deq))))
    return m


def panel_checks(env, name, model, f32, paths, ids, V, d):
    """qmap quantize --panel-cols: the FFN down projections in column panels, run by every decoder family."""
    c = env.c
    pp = {}
    for how in ("q8", "f16"):
        pp[how] = os.path.join(d, how + "-panels.qmap")
        r = run([env.qmap, "quantize", "--" + how, f32, "-o", pp[how], "--panel-cols", str(PANEL), "--quiet"])
        c.check(name, "quantize --%s --panel-cols %d" % (how, PANEL), r.returncode == 0, r.stderr.strip())
    qf = spec_reader.read(pp["q8"])
    family = "gpt2" if name == "gpt2" else ""
    down0 = [n for n in dict(model.named_parameters()) if is_down_proj(n)][0]   # layer 0's, in module order
    w0 = as_stored(family, down0, dict(model.named_parameters())[down0].detach().numpy().astype(np.float32))
    t0 = qf.tensors["blk.0.ffn_down.weight"]
    q, scales, _ = spec_writer.quantize_q8row(down_panels(w0).reshape(-1, PANEL))
    c.check(name, "--panel-cols: blk.0.ffn_down.weight is [ffn/%d, dim, %d], its Q8_ROW bytes those of spec 6.1 "
            "applied to the panels" % (PANEL, PANEL),
            list(t0.shape) == [w0.shape[1] // PANEL, w0.shape[0], PANEL] and np.array_equal(t0.q, q)
            and np.array_equal(t0.scales, scales), str(t0.shape))
    refp = torch_logits(panelled_q8_copy(model, family), ids)
    got = env.logits(pp["q8"], ids, V, "--kv", "f32", "--act", "precise")
    top1 = float(np.mean(got.argmax(-1) == refp.argmax(-1)))
    mkl = float(kl(refp, got).mean())
    c.check(name, "Q8_ROW in panels --act precise: top-1 agreement with torch on its dequantized weights >= 95%",
            top1 >= 0.95, "%.3f" % top1)
    c.check(name, "Q8_ROW in panels --act precise: mean KL to torch on its dequantized weights <= 1e-3",
            mkl <= 1e-3, "%.3g" % mkl)
    step = env.logits(pp["q8"], ids, V, "--kv", "f32", "--act", "int8x2", "--step")
    c.check(name, "Q8_ROW in panels: token by token (two terms) = the batch (--act precise), the same bits",
            np.array_equal(step, got), "max |diff| %.3g" % float(np.abs(step - got).max()))
    # F16 panels hold the same values as the F16 container: only the down projections' summation order changes
    a = env.logits(pp["f16"], ids, V, "--kv", "f32")
    b = env.logits(paths["f16"], ids, V, "--kv", "f32")
    e = rel(a, b)
    c.check(name, "F16 in panels = F16 as stored, within float summation order (1e-5)", e <= 1e-5, "%.3g" % e)
    t1 = env.logits(pp["q8"], ids, V, "--kv", "f32", "-t", "1")
    t2 = env.logits(pp["q8"], ids, V, "--kv", "f32", "-t", "2")
    c.check(name, "Q8_ROW in panels: 1 and 2 threads give the same bits", np.array_equal(t1, t2))
    if env.asan_tool:
        try:
            a = env.logits(pp["q8"], ids[:20], V, "-b", "7", "--act", "precise", tool=env.asan_tool)
            b = env.logits(pp["q8"], ids[:20], V, "--step", "--act", "precise", tool=env.asan_tool)
            ok = np.isfinite(a).all() and np.isfinite(b).all() and np.array_equal(a, b)
            c.check(name, "ASan+UBSan: Q8_ROW in panels, batches and steps run clean", ok)
        except RuntimeError as ex:
            c.check(name, "ASan+UBSan: Q8_ROW in panels, batches and steps run clean", False, str(ex)[-400:])
    bad = os.path.join(d, "bad-panels.qmap")
    r = run([env.qmap, "quantize", "--q8", f32, "-o", bad, "--panel-cols", "100", "--quiet"])
    c.check(name, "quantize --panel-cols 100 (not a multiple of 64): a usage error, nothing written",
            r.returncode == 2 and "multiple of 64" in r.stderr and not os.path.exists(bad), r.stderr.strip())


def mutate(src, dst, drop_key=None, reshape=None):
    """Rewrite container src as dst with one metadata key dropped or one tensor given another shape (same
    bytes), through the independent writer of tests/spec_writer.py."""
    qf = spec_reader.read(src)
    meta = []
    for e in qf.meta_entries:
        if e.key == drop_key:
            continue
        meta.append(spec_writer.meta_entry(e.key, e.type_id, None, raw_value=bytes(e.raw)))
    tensors = []
    for t in qf.tensors.values():
        shape = reshape[1] if reshape and t.name == reshape[0] else t.shape
        tensors.append(spec_writer.TensorDef(t.name, t.dtype_id, shape, bytes(t.raw)))
    spec_writer.write(dst, spec_writer.build(meta, tensors, alignment=qf.header["alignment"]))


def spread_logits(model, ids, target=2.5):
    """Scale the output head so logits have about the spread of a trained LM's (std ~2.5). Random init gives
    either near-uniform distributions (untied heads: std ~0.6) or near one-hot ones (tied embeddings: std
    ~10), and both hide quantization error from KL and top-1."""
    head = model.lm_head.weight
    with torch.no_grad():
        std = float(model(torch.tensor([ids]))[0].std())
        head.mul_(target / std)


def family_case(env, name, mod, kw, saver, window, workdir, summary):
    c = env.c
    model, cfg = mod.build(seed=11, **kw)
    V = cfg["vocab_size"]
    g = torch.Generator().manual_seed(sum(map(ord, name)))
    ids = torch.randint(0, V, (T,), generator=g).tolist()
    spread_logits(model, ids)
    d = fresh_dir(os.path.join(workdir, name))
    srcs, _ = saver(model, cfg, d)
    f32 = os.path.join(d, "f32.qmap")
    r = run([env.qmap, "convert", *srcs, "-o", f32, "--no-tokenizer", "--quiet"])
    if not c.check(name, "convert", r.returncode == 0, r.stderr.strip()):
        return
    paths = {"f32": f32}
    for how in ("f16", "q8"):
        paths[how] = os.path.join(d, how + ".qmap")
        r = run([env.qmap, "quantize", "--" + how, f32, "-o", paths[how], "--quiet"])
        c.check(name, "quantize --" + how, r.returncode == 0, r.stderr.strip())

    if window:
        c.check(name, "the sequence passes the attention window (%d < %d)" % (window, T), window < T)
    ref = torch_logits(model, ids)
    row = {"case": name, "std": float(ref.std())}

    # F32 weights
    got = env.logits(f32, ids, V, "--kv", "f32")
    e = rel(got, ref)
    row["f32"] = e
    c.check(name, "F32 weights, F32 KV: logits within 1e-4 of torch", e <= 1e-4, "max rel diff %.3g" % e)
    got16kv = env.logits(f32, ids, V)
    e = rel(got16kv, ref)
    row["f32_kv16"] = e
    c.check(name, "F32 weights, F16 KV (default): within 1e-3", e <= 1e-3, "max rel diff %.3g" % e)
    step = env.logits(f32, ids, V, "--kv", "f32", "--step")
    e = rel(step, got)
    c.check(name, "prefill in one batch = token by token (1e-5)", e <= 1e-5, "max rel diff %.3g" % e)
    chunks = env.logits(f32, ids, V, "--kv", "f32", "-b", "7")
    e = rel(chunks, got)
    c.check(name, "batches of 7 = one batch (1e-5)", e <= 1e-5, "max rel diff %.3g" % e)
    t1 = env.logits(f32, ids, V, "--kv", "f32", "-t", "1")
    t2 = env.logits(f32, ids, V, "--kv", "f32", "-t", "2")
    c.check(name, "1 and 2 threads give the same bits", np.array_equal(t1, t2))
    mine = env.greedy(f32, ids, GREEDY, "--kv", "f32")
    theirs = torch_greedy(model, ids, GREEDY)
    same = next((i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b), None)
    c.check(name, "greedy continuation of %d tokens identical to torch's" % GREEDY,
            mine == theirs, "first difference at %s" % same)

    # F16 weights
    ref16 = torch_logits(quantized_copy(model, name if name == "gpt2" else "", "f16"), ids)
    got = env.logits(paths["f16"], ids, V, "--kv", "f32")
    e16, e32 = rel(got, ref16), rel(got, ref)
    row["f16"] = e16
    c.check(name, "F16 weights: within 1e-3 of torch on the same F16 weights", e16 <= 1e-3, "%.3g" % e16)
    c.check(name, "F16 weights: within 1e-2 of torch in F32", e32 <= 1e-2, "%.3g" % e32)

    # Q8_ROW
    qf = spec_reader.read(paths["q8"])
    emb_name = "tok_embd.weight"
    src_emb = dict(model.named_parameters())[
        {"gpt2": "transformer.wte.weight", "gpt_neo": "transformer.wte.weight"}.get(
            mod.__name__.split(".")[-1], "model.embed_tokens.weight")].detach().numpy()
    q, scales, _ = spec_writer.quantize_q8row(src_emb.astype(np.float32))
    c.check(name, "the numpy transcription of spec 6.1 equals the container's Q8_ROW bytes",
            np.array_equal(qf.tensors[emb_name].q, q) and np.array_equal(qf.tensors[emb_name].scales, scales))
    refq = torch_logits(quantized_copy(model, name if name == "gpt2" else "", "q8"), ids)
    got_by_act = {}
    for act in ("precise", "auto", "int8"):
        got = got_by_act[act] = env.logits(paths["q8"], ids, V, "--kv", "f32", "--act", act)
        top1 = float(np.mean(got.argmax(-1) == refq.argmax(-1)))
        mkl = float(kl(refq, got).mean())
        top1_f32 = float(np.mean(got.argmax(-1) == ref.argmax(-1)))
        mkl_f32 = float(kl(ref, got).mean())
        row["q8_" + act] = (top1, mkl, top1_f32, mkl_f32)
        if act == "precise":
            c.check(name, "Q8_ROW --act precise: top-1 agreement with torch on the dequantized weights >= 95%",
                    top1 >= 0.95, "%.3f" % top1)
            c.check(name, "Q8_ROW --act precise: mean KL to torch on the dequantized weights <= 1e-3", mkl <= 1e-3,
                    "%.3g" % mkl)
            # two int8 terms in decode too: every product of a token computed alone gives the bits it has in
            # the batch (integer dots; attention and the row-wise ops are the same bits either way)
            step = env.logits(paths["q8"], ids, V, "--kv", "f32", "--act", "int8x2", "--step")
            c.check(name, "Q8_ROW --act int8x2 token by token: the same bits as the batched --act precise",
                    np.array_equal(step, got), "max |diff| %.3g" % float(np.abs(step - got).max()))
        elif act == "auto":
            # the default: a prompt's products after a norm or attention in one int8 term, the FFN's down
            # projection and the head in two (that it is neither pure mode is checked below)
            c.check(name, "Q8_ROW (--act auto): top-1 agreement with torch on the dequantized weights >= 95%",
                    top1 >= 0.95, "%.3f" % top1)
            c.check(name, "Q8_ROW (--act auto): mean KL to torch on the dequantized weights <= 1e-3", mkl <= 1e-3,
                    "%.3g" % mkl)
        else:   # one int8 term per activation row adds its rounding: a looser bound, still far from noise
            c.check(name, "Q8_ROW --act int8: top-1 agreement >= 90%", top1 >= 0.90, "%.3f" % top1)
            c.check(name, "Q8_ROW --act int8: mean KL <= 1e-2", mkl <= 1e-2, "%.3g" % mkl)
    # auto is neither of the pure modes: some products in one term, some in two
    c.check(name, "Q8_ROW --act auto differs from both --act precise and --act int8",
            not np.array_equal(got_by_act["auto"], got_by_act["precise"])
            and not np.array_equal(got_by_act["auto"], got_by_act["int8"]))

    # the FFN down projections in column panels (qmap quantize --panel-cols): every decoder family runs them
    panel_checks(env, name, model, f32, paths, ids, V, d)

    # the same paths under ASan+UBSan
    if env.asan_tool:
        for how in ("f32", "f16", "q8"):
            try:
                a = env.logits(paths[how], ids[:20], V, "-b", "7", tool=env.asan_tool)
                b = env.logits(paths[how], ids[:20], V, "--step", tool=env.asan_tool)
                ok = np.isfinite(a).all() and np.isfinite(b).all()
                if how == "q8":
                    # a Q8_ROW session is a batch of one: the default (normed rows in one int8 term in
                    # batches and steps alike) and --act precise give a step the bits of its batch
                    p = env.logits(paths[how], ids[:20], V, "-b", "7", "--act", "precise", tool=env.asan_tool)
                    ps = env.logits(paths[how], ids[:20], V, "--step", "--act", "precise", tool=env.asan_tool)
                    ok = ok and np.isfinite(p).all() and np.array_equal(p, ps) and np.array_equal(a, b)
                else:
                    ok = ok and rel(a, b) <= 1e-3
                c.check(name, "ASan+UBSan: %s batches and steps run clean" % how, ok)
            except RuntimeError as ex:
                c.check(name, "ASan+UBSan: %s batches and steps run clean" % how, False, str(ex)[-400:])
    summary.append(row)
    return f32


def kv_bytes_per_position(path, elem=2):
    """Bytes of K and V one cached position holds over every layer, from the tensor table (F16 cache)."""
    ks = [t for t in spec_reader.read(path).tensors.values() if t.name.endswith("attn_k.weight")]
    return 2 * sum(t.shape[0] for t in ks) * elem


def bench_depth_cases(env, g, llama_f32, mistral_f32):
    """qmap bench -d N: the tests run at a context depth; a tg row's speed of light counts the KV cache its
    steps read, which the steps' positions (and a sliding window) give."""
    c = env.c
    D, N = 5, 3
    r = run([env.qmap, "bench", llama_f32, "-p", "4", "-n", str(N), "-d", str(D), "-r", "1", "-t", "1", "--json"])
    try:
        rows = json.loads(r.stdout) if r.returncode == 0 else []
    except ValueError:
        rows = []
    tg = [x for x in rows if x["test"] == "tg%d" % N]
    # steps at positions D .. D+N-1 see every position up to their own: (D+1 + ... + D+N) / N of them
    want = kv_bytes_per_position(llama_f32) * sum(p + 1 for p in range(D, D + N)) / N
    c.check(g, "qmap bench -d %d --json: pp and tg rows at depth %d; tg reads %.0f bytes of KV cache a token "
            "(positions %d..%d, every one before them)" % (D, D, want, D, D + N - 1),
            [(x["test"], x["n_depth"]) for x in rows] == [("pp4", D), ("tg%d" % N, D)] and len(tg) == 1
            and tg[0]["kv_bytes_per_token"] == want
            and 0 < tg[0]["fraction_of_speed_of_light"]["median"]
            and (tg[0]["weights_fit_cache"] or tg[0]["fraction_of_speed_of_light"]["median"] <= 1.05),
            r.stdout[-600:] + r.stderr)
    r = run([env.qmap, "bench", llama_f32, "-p", "0", "-n", str(N), "-d", str(D), "-r", "1", "-t", "1"])
    table = [ln for ln in r.stdout.splitlines() if ln.startswith("|")]
    c.check(g, "qmap bench -d: the test column says 'tg%d @ d%d', every line as wide as the header" % (N, D),
            r.returncode == 0 and len(table) == 3 and "tg%d @ d%d" % (N, D) in table[2]
            and len({len(ln) for ln in table}) == 1, r.stdout + r.stderr)
    if mistral_f32:
        # a sliding window of 8: from position 7 on, each step reads 8 positions
        D = 20
        r = run([env.qmap, "bench", mistral_f32, "-p", "0", "-n", str(N), "-d", str(D), "-r", "1", "-t", "1", "--csv"])
        rows = list(csv.reader(io.StringIO(r.stdout)))
        ok = r.returncode == 0 and len(rows) == 2 and len(rows[1]) == len(rows[0])
        got = float(rows[1][rows[0].index("kv_bytes_per_token")]) if ok else float("nan")
        want = kv_bytes_per_position(mistral_f32) * 8
        c.check(g, "qmap bench -d %d --csv on a sliding window of 8: %.0f bytes of KV cache a token, 8 positions' "
                "(%.0f), and the n_depth column" % (D, got, want),
                ok and got == want and rows[1][rows[0].index("n_depth")] == str(D), r.stdout + r.stderr)


def error_cases(env, llama_f32, workdir, mistral_f32=None):
    c = env.c
    d = fresh_dir(os.path.join(workdir, "errors"))
    g = "errors"
    r = run([env.tool, llama_f32, os.path.join(d, "o"), "1", "2", "97"])
    c.check(g, "an id outside the vocabulary is refused, naming it",
            r.returncode == 1 and "token id 97" in r.stderr and "vocabulary of 97" in r.stderr, r.stderr)
    r = run([env.qmap, "run", llama_f32, "--tokens", "1 2 300"])
    c.check(g, "qmap run --tokens: out-of-range id, exit 1", r.returncode == 1 and "300" in r.stderr, r.stderr)
    r = run([env.qmap, "run", llama_f32, "--tokens", " ".join(["1"] * (CTX + 1))])
    c.check(g, "qmap run: a prompt longer than the context, exit 1",
            r.returncode == 1 and "context" in r.stderr, r.stderr)
    r = run([env.qmap, "run", llama_f32, "--tokens", "1 2", "-n", "500", "--quiet", "--temp", "0"])
    c.check(g, "qmap run stops at the context limit and says so",
            r.returncode == 0 and "context limit" in r.stderr, r.stderr)
    r = run([env.qmap, "run", llama_f32, "-p", "hello"])
    c.check(g, "qmap run -p on a container without a tokenizer, exit 1 naming --tokens",
            r.returncode == 1 and "--tokens" in r.stderr, r.stderr)
    r = run([env.qmap, "run", llama_f32, "--tokens", "1", "--kv", "f8"])
    c.check(g, "qmap run: a bad flag value is a usage error (2)", r.returncode == 2 and "--kv" in r.stderr, r.stderr)

    # a classifier takes rows (--input), not tokens
    m, cfg = mlp.build(seed=3) if hasattr(mlp, "build") else (None, None)
    if m is not None:
        md = fresh_dir(os.path.join(d, "mlp"))
        srcs, _ = save_torch(m, cfg, md)
        mq = os.path.join(d, "mlp.qmap")
        rc = run([env.qmap, "convert", *srcs, "-o", mq, "--quiet"])
        if c.check(g, "convert an mlp", rc.returncode == 0, rc.stderr):
            r = run([env.qmap, "run", mq, "--tokens", "1"])
            c.check(g, "qmap run --tokens on an mlp: says a classifier needs --input, exit 1",
                    r.returncode == 1 and "classifier" in r.stderr and "--input" in r.stderr, r.stderr)
            r = run([env.qmap, "bench", mq, "-r", "1"])
            c.check(g, "qmap bench on an mlp: not a language model, exit 1",
                    r.returncode == 1 and "not a language model" in r.stderr, r.stderr)
            bad = os.path.join(d, "mlp-panels.qmap")
            r = run([env.qmap, "quantize", "--q8", mq, "-o", bad, "--panel-cols", "64", "--quiet"])
            c.check(g, "quantize --panel-cols on an mlp container: refused (decoder LMs only), nothing written",
                    r.returncode == 1 and "decoder LM" in r.stderr and not os.path.exists(bad), r.stderr.strip())

    # qmap bench MODEL: one row per test, figures and the limits beside them (a smoke test: speed is make bench's)
    # (one thread: a decode step of this tiny model lasts microseconds, and a loaded machine can stall a
    # two-thread team's baseline; the speed of light itself is make bench's business)
    r = run([env.qmap, "bench", llama_f32, "-p", "8", "-n", "16", "-r", "3", "-t", "1", "--json"])
    try:
        rows = json.loads(r.stdout) if r.returncode == 0 else []
    except ValueError:
        rows = []
    tests = [(x["test"], x["threads"]) for x in rows]
    c.check(g, "qmap bench --json: pp8 and tg16 rows", tests == [("pp8", 1), ("tg16", 1)],
            r.stdout[-400:] + r.stderr)
    tg = [x for x in rows if x["test"] == "tg16"]
    # every run's fraction, not only the median, is in (0, 1.05]: a run above it is taken again (at most 3
    # times, counted in "reruns") or the command fails; unless the weights fit in twice the LLC (this tiny
    # model's do): then memory's limit does not bind the decode, nothing is taken again, and the row says so.
    # The limit is the better of the two readings, over a buffer of at least 4 x the LLC and the model.
    def tg_ok(x):
        fits = x["weights_fit_cache"]
        bw = {"anonymous": x["bandwidth_anonymous"]["median"], "mapping": x["bandwidth_file_mapping"]["median"]}
        return (x["tokens_per_second"]["median"] > 0 and min(bw.values()) > 0 and x["speed_of_light"]["median"] > 0
                and bw[x["limit_reading"]] == max(bw.values())
                and x["limit_buffer_bytes"] >= max(4 * (x["llc_bytes"] or (256 << 20)), x["bytes_per_token"])
                and fits == (x["bytes_per_token"] <= 2 * (x["llc_bytes"] or (256 << 20)))
                and 0 < x["fraction_of_speed_of_light"]["min"]
                and (fits or x["fraction_of_speed_of_light"]["max"] <= 1.05)
                and isinstance(x["reruns"], int) and 0 <= x["reruns"] <= (0 if fits else 3 * 3)
                and x["tokens_per_second"]["runs"] == 3)
    c.check(g, "qmap bench: tg rows give t/s, both bandwidths, which is the limit, the speed of light and every run's "
            "fraction of it in (0, 1.05] (weights larger than the cache), and the reruns",
            len(tg) == 1 and all(tg_ok(x) for x in tg), str(tg)[:600])
    # each run in order (samples_*, as llama-bench's samples_ts): t/s, fraction, the limit read before and
    # after; a run whose two readings differ by more than 10% is not steady, and the fraction over the
    # steady runs is theirs (null when none held)
    def steady_ok(x, frac):
        ts, fr = x.get("samples_ts", []), x.get("samples_fraction", [])
        b, a = x.get("samples_limit_before", []), x.get("samples_limit_after", [])
        if not (len(ts) == len(fr) == len(b) == len(a) == 3 and min(b + a) > 0):
            return False
        held = sorted(f for f, u, v in zip(fr, b, a) if min(u, v) >= 0.9 * max(u, v))
        fs = x.get("fraction_steady", 0)
        same = (fs is None) if not held else (isinstance(fs, dict) and fs["runs"] == len(held)
                                              and fs["min"] == held[0] and fs["max"] == held[-1])
        return (x.get("steady_runs") == len(held) and same and sorted(ts) == [x["tokens_per_second"][k] for k in
                                                                                ("min", "median", "max")]
                and sorted(fr) == [x[frac][k] for k in ("min", "median", "max")])
    c.check(g, "qmap bench --json: every row gives each run's t/s, fraction and limit read before and after, "
            "counts the runs whose two readings agree within 10% and gives the fraction over them",
            len(rows) == 2 and all(steady_ok(x, "fraction_of_speed_of_light" if x["test"] == "tg16" else "fraction_of_peak")
                                   for x in rows), str(rows)[:800])
    pp = [x for x in rows if x["test"] == "pp8"]
    c.check(g, "qmap bench: pp rows give t/s, the multiply-add peak and every run's fraction of it in (0, 1.05]",
            len(pp) == 1 and all(x["tokens_per_second"]["median"] > 0 and x["peak"]["median"] > 0
                                 and 0 < x["fraction_of_peak"]["min"] and x["fraction_of_peak"]["max"] <= 1.05
                                 and isinstance(x["reruns"], int) and 0 <= x["reruns"] <= 3 * 3
                                 for x in pp), str(pp)[:600])
    r = run([env.qmap, "bench", llama_f32, "-p", "4", "-n", "2", "-r", "1", "-t", "1", "--csv"])
    lines = r.stdout.strip().split("\n")
    c.check(g, "qmap bench --csv: a header and one line per test", r.returncode == 0 and len(lines) == 3
            and lines[0].startswith("model,") and ",pp," in lines[1] and ",tg," in lines[2], r.stdout + r.stderr)
    r = run([env.qmap, "bench", llama_f32, "-p", "4", "-n", "2", "-r", "1", "-t", "1", "--act", "int8", "--csv"])
    lines = r.stdout.strip().split("\n")
    head = lines[0].split(",")
    c.check(g, "qmap bench --act int8 --csv: the activation mode in the column act of every row",
            r.returncode == 0 and "act" in head and len(lines) == 3
            and all(x.split(",")[head.index("act")] == "int8" for x in lines[1:]), r.stdout + r.stderr)
    # a Q8_ROW model's pp row counts the int8 terms the session ran (qmap_session_get_counters), which
    # show which products took one term and which two: int8_terms = int8 multiply-adds / weight multiply-adds
    # of the prompt (every layer matrix P times, the head once, as the one-row decode product it is: in 0
    # terms where the CPU widens one row, 2 where it splits it in two)
    q8 = os.path.join(os.path.dirname(llama_f32), "q8.qmap")
    P = 4
    mats = {t.name: int(np.prod(t.shape)) for t in spec_reader.read(q8).tensors.values() if len(t.shape) == 2}
    down = sum(v for k, v in mats.items() if k.endswith("ffn_down.weight"))
    head = mats["output.weight"]
    layers = sum(v for k, v in mats.items() if k.startswith("blk."))
    weight_madds = layers * P + head
    want = {"precise": [(2 * layers * P + h * head) / weight_madds for h in (0, 2)],
            "int8x2": [2.0], "int8": [1.0],
            "auto": [((layers - down) * P + 2 * down * P + h * head) / weight_madds for h in (0, 2)]}
    for act, wanted in want.items():
        r = run([env.qmap, "bench", q8, "-p", str(P), "-n", "2", "-r", "1", "-t", "1", "--csv", "--act", act])
        rows = list(csv.reader(io.StringIO(r.stdout)))
        ok = r.returncode == 0 and len(rows) == 3 and all(len(x) == len(rows[0]) for x in rows)
        terms = float(rows[1][rows[0].index("int8_terms")]) if ok else float("nan")
        c.check(g, "qmap bench --csv on Q8_ROW --act %s: every row has the header's fields; pp ran %.4f int8 "
                "terms per weight multiply-add (the model's shapes give %s)"
                % (act, terms, " or ".join("%.4f" % x for x in wanted)),
                ok and rows[1][rows[0].index("limit_unit")] == "GOP/s int8"
                and any(abs(terms - x) < 1e-5 for x in wanted), r.stdout + r.stderr)
    # the same with the down projections in column panels (rank 3): the same multiply-adds, the same terms
    # (q8-panels.qmap: made by the llama case's panel checks, which run before these)
    q8p = os.path.join(os.path.dirname(llama_f32), "q8-panels.qmap")
    r = run([env.qmap, "bench", q8p, "-p", str(P), "-n", "2", "-r", "1", "-t", "1", "--csv", "--act", "auto"])
    rows = list(csv.reader(io.StringIO(r.stdout)))
    ok = r.returncode == 0 and len(rows) == 3
    terms = float(rows[1][rows[0].index("int8_terms")]) if ok else float("nan")
    c.check(g, "qmap bench --csv on Q8_ROW in column panels --act auto: %.4f int8 terms, as stored (%s)"
            % (terms, " or ".join("%.4f" % x for x in want["auto"])),
            ok and any(abs(terms - x) < 1e-5 for x in want["auto"]), r.stdout + r.stderr)
    r = run([env.qmap, "bench", llama_f32, "-n", "2", "--act", "int4"])
    c.check(g, "qmap bench --act int4: not a mode, usage error (2) naming the choices",
            r.returncode == 2 and "auto" in r.stderr and "int8" in r.stderr, r.stderr)
    r = run([env.qmap, "bench", llama_f32, "-p", "0", "-n", "0"])
    c.check(g, "qmap bench -p 0 -n 0: nothing to measure, usage error (2)", r.returncode == 2, r.stderr)
    # --mmap 0,1: the same model over the mapping and over an anonymous copy, one row each, a ratio line
    r = run([env.qmap, "bench", llama_f32, "-p", "4", "-n", "4", "-r", "2", "-t", "1", "--mmap", "0,1", "--json"])
    try:
        rows = json.loads(r.stdout) if r.returncode == 0 else []
    except ValueError:
        rows = []
    c.check(g, "qmap bench --mmap 0,1 --json: each test over an anonymous copy and over the mapping",
            [(x["test"], x["mmap"]) for x in rows] == [("pp4", False), ("pp4", True), ("tg4", False), ("tg4", True)],
            r.stdout[-400:] + r.stderr)
    r = run([env.qmap, "bench", llama_f32, "-p", "0", "-n", "4", "-r", "2", "-t", "1", "--mmap", "0,1"])
    c.check(g, "qmap bench --mmap 0,1: prints the mapping / anonymous ratio",
            r.returncode == 0 and "over the mapping / over an anonymous copy =" in r.stdout, r.stdout + r.stderr)
    # the table's model column widens to the longest file name given (it once cut names at 28 characters)
    long_name = os.path.join(d, "llama-f32-under-a-file-name-longer-than-the-old-column.qmap")
    if not os.path.lexists(long_name):
        os.symlink(os.path.abspath(llama_f32), long_name)
    r = run([env.qmap, "bench", long_name, llama_f32, "-p", "0", "-n", "2", "-r", "1", "-t", "1"])
    table = [ln for ln in r.stdout.splitlines() if ln.startswith("|")]
    c.check(g, "qmap bench table: the long file name whole, a header, a rule and a row per model, every line as "
            "wide as the header", r.returncode == 0 and len(table) == 4 and os.path.basename(long_name) in r.stdout
            and len({len(ln) for ln in table}) == 1, r.stdout + r.stderr)
    # below the table: how much of each mapping is in 2 MiB pages (Linux's smaps has FilePmdMapped since 4.8)
    smaps_pmd = False
    if os.path.exists("/proc/self/smaps"):
        with open("/proc/self/smaps") as f:
            smaps_pmd = "FilePmdMapped:" in f.read()
    if smaps_pmd:
        below = r.stdout.split("the mapping in 2 MiB pages after the runs", 1)[-1]
        c.check(g, "qmap bench: below the table, each model's mapping in 2 MiB pages (X of its size)",
                r.returncode == 0 and "after the runs" in r.stdout and all(
                    re.search(re.escape(p) + r": [0-9.]+ [MG]iB of [0-9.]+ [MG]iB$", below, re.M)
                    for p in (long_name, llama_f32)), r.stdout)
        r = run([env.qmap, "bench", llama_f32, "-p", "0", "-n", "2", "-r", "1", "-t", "1", "--json"])
        try:
            rows = json.loads(r.stdout) if r.returncode == 0 else []
        except ValueError:
            rows = []
        c.check(g, "qmap bench --json: a tg row over the mapping gives mapping_2mib_bytes, at most the file's size",
                len(rows) == 1 and isinstance(rows[0].get("mapping_2mib_bytes"), int)
                and 0 <= rows[0]["mapping_2mib_bytes"] <= rows[0]["size_bytes"], r.stdout + r.stderr)
    bench_depth_cases(env, g, llama_f32, mistral_f32)
    r = run([env.qmap, "bench", llama_f32, "--mmap", "2"])
    c.check(g, "qmap bench --mmap 2: usage error (2) naming the choices", r.returncode == 2 and "0,1" in r.stderr,
            r.stderr)

    # a tensor of the wrong shape, a missing key: refused at open, naming them
    bad = os.path.join(d, "shape.qmap")
    qf = spec_reader.read(llama_f32)
    rows, cols = qf.tensors["blk.1.attn_k.weight"].shape
    mutate(llama_f32, bad, reshape=("blk.1.attn_k.weight", (rows * 2, cols // 2)))
    r = run([env.tool, bad, os.path.join(d, "o"), "1"])
    c.check(g, "a tensor of the wrong shape is refused naming it and both shapes",
            r.returncode == 1 and "blk.1.attn_k.weight" in r.stderr and "[%d, %d]" % (rows, cols) in r.stderr
            and "QM_ERR_SHAPE" in r.stderr, r.stderr)
    # a down projection of rank 3 that is not [P >= 2, dim, ffn / P]: refused, naming the panel form too
    dd, ff = qf.tensors["blk.0.ffn_down.weight"].shape
    for shape in ((2, dd // 2, ff), (1, dd, ff)):
        bad = os.path.join(d, "panels.qmap")
        mutate(llama_f32, bad, reshape=("blk.0.ffn_down.weight", shape))
        r = run([env.tool, bad, os.path.join(d, "o"), "1"])
        c.check(g, "a down projection of shape %s is refused, naming the column-panel shape" % (shape,),
                r.returncode == 1 and "blk.0.ffn_down.weight" in r.stderr and "column panels" in r.stderr
                and "QM_ERR_SHAPE" in r.stderr, r.stderr)
    # panels where ffn < dim (hidden 192, ffn 128): a later panel's product needs dim floats a row of the
    # hidden buffer; F16 panels equal F16 as stored, and run clean under ASan (the buffer once held ffn floats)
    narrow, ncfg = llama.build(seed=5, variant="llama", hidden_size=192, intermediate_size=128,
                               max_position_embeddings=CTX)
    nd = fresh_dir(os.path.join(d, "narrow"))
    srcs, _ = save_safetensors(narrow, ncfg, nd)
    nq = os.path.join(d, "narrow.qmap")
    r = run([env.qmap, "convert", *srcs, "-o", nq, "--quiet"])
    if c.check(g, "convert a llama with ffn 128 < dim 192", r.returncode == 0, r.stderr):
        nf16, nf16p = os.path.join(d, "narrow-f16.qmap"), os.path.join(d, "narrow-f16-panels.qmap")
        r1 = run([env.qmap, "quantize", "--f16", nq, "-o", nf16, "--quiet"])
        r2 = run([env.qmap, "quantize", "--f16", nq, "-o", nf16p, "--panel-cols", "64", "--quiet"])
        shape = spec_reader.read(nf16p).tensors["blk.0.ffn_down.weight"].shape if r2.returncode == 0 else None
        if c.check(g, "ffn < dim: quantize --f16 --panel-cols 64 writes [2, 192, 64]",
                   r1.returncode == 0 and list(shape or []) == [2, 192, 64], r1.stderr + r2.stderr):
            ids_n = [(7 * i + 3) % ncfg["vocab_size"] for i in range(24)]
            e = rel(env.logits(nf16p, ids_n, ncfg["vocab_size"], "--kv", "f32"),
                    env.logits(nf16, ids_n, ncfg["vocab_size"], "--kv", "f32"))
            c.check(g, "ffn < dim: F16 in panels = F16 as stored, within float summation order (1e-5)", e <= 1e-5,
                    "%.3g" % e)
            if env.asan_tool:
                try:
                    a = env.logits(nf16p, ids_n, ncfg["vocab_size"], "-b", "7", tool=env.asan_tool)
                    b = env.logits(nf16p, ids_n, ncfg["vocab_size"], "--step", tool=env.asan_tool)
                    c.check(g, "ffn < dim: ASan+UBSan, F16 panels in batches and steps run clean",
                            np.isfinite(a).all() and np.isfinite(b).all() and rel(a, b) <= 1e-5)
                except RuntimeError as ex:
                    c.check(g, "ffn < dim: ASan+UBSan, F16 panels in batches and steps run clean", False,
                            str(ex)[-400:])
    bad = os.path.join(d, "key.qmap")
    mutate(llama_f32, bad, drop_key="llama.n_heads")
    r = run([env.tool, bad, os.path.join(d, "o"), "1"])
    c.check(g, "a missing metadata key is refused naming it",
            r.returncode == 1 and "llama.n_heads" in r.stderr and "QM_ERR_NOT_FOUND" in r.stderr, r.stderr)
    bad = os.path.join(d, "notqmap.qmap")
    with open(bad, "wb") as fp:
        fp.write(b"not a container at all" * 10)
    r = run([env.qmap, "run", bad, "--tokens", "1"])
    c.check(g, "qmap run on a file that is not a container, exit 1",
            r.returncode == 1 and "QM_ERR_BAD_MAGIC" in r.stderr, r.stderr)

    # no allocation per token, and the counter seen to count
    r = run([env.tool, llama_f32, os.path.join(d, "o"), "--alloc-check", "1", "2", "3", "4"])
    c.check(g, "100 decode steps allocate nothing", r.returncode == 0 and ": 0" in r.stdout, r.stdout + r.stderr)
    r = run([env.tool, llama_f32, os.path.join(d, "o"), "--alloc-check", "-t", "2", "1", "2", "3"])
    c.check(g, "100 decode steps allocate nothing (2 threads)", r.returncode == 0, r.stdout + r.stderr)
    r = run([env.tool, llama_f32, os.path.join(d, "o"), "--alloc-check", "1", "2"],
            env=dict(os.environ, LM_LOGITS_SELFTEST="1"))
    c.check(g, "the allocation counter sees an allocation (self-test)", r.returncode == 1 and ": 1" in r.stdout,
            r.stdout)

    # same seed, same text
    a = run([env.qmap, "run", llama_f32, "--tokens", "5 6 7", "-n", "24", "-s", "42", "--json"])
    b = run([env.qmap, "run", llama_f32, "--tokens", "5 6 7", "-n", "24", "-s", "42", "--json"])
    ok = a.returncode == 0 and b.returncode == 0 and json.loads(a.stdout)["ids"] == json.loads(b.stdout)["ids"]
    c.check(g, "qmap run: the same seed gives the same ids", ok, a.stderr + b.stderr)
    # --no-mmap reads the same bytes into anonymous memory: the same ids, all of it resident
    n = run([env.qmap, "run", llama_f32, "--tokens", "5 6 7", "-n", "24", "-s", "42", "--json", "--no-mmap"])
    ok_n = ok and n.returncode == 0 and json.loads(n.stdout)["ids"] == json.loads(a.stdout)["ids"]
    c.check(g, "qmap run --no-mmap: the same ids as over the mapping", ok_n, n.stderr)
    if ok:
        j = json.loads(a.stdout)
        c.check(g, "qmap run --json: ids, counts and figures, the KV type and activation mode (defaults)",
                len(j["ids"]) == 24 and j["prompt_tokens"] == 3 and j["gen_tok_per_s"] > 0
                and j["peak_rss_bytes"] > 0 and j.get("kv") == "f16" and j.get("act") == "auto", a.stdout)
    r = run([env.qmap, "run", llama_f32, "--tokens", "5 6 7", "-n", "2", "--json", "--kv", "f32", "--act", "precise"])
    jr = json.loads(r.stdout) if r.returncode == 0 else {}
    c.check(g, "qmap run --json names --kv f32 --act precise when given", jr.get("kv") == "f32"
            and jr.get("act") == "precise", r.stdout + r.stderr)


def fused_shape_case(env, workdir):
    """A Phi-3 qkv_proj one row short of (H + 2·KV)·hd cannot be split: refused naming the tensor."""
    model, cfg = phi3.build(seed=3)
    d = fresh_dir(os.path.join(workdir, "phi3-bad"))
    sd = drop_shared(model.state_dict())
    name = "model.layers.1.self_attn.qkv_proj.weight"
    sd[name] = sd[name][:-1].clone()
    write_json(os.path.join(d, "config.json"), cfg)
    path = os.path.join(d, "model.safetensors")
    write_safetensors(path, sd, metadata={"format": "pt"})
    r = run([env.qmap, "convert", path, "-o", os.path.join(d, "o.qmap"), "--no-tokenizer", "--quiet"])
    env.c.check("phi3", "a fused qkv_proj of the wrong row count is refused naming it",
                r.returncode != 0 and name in r.stderr and "QM_ERR_SHAPE" in r.stderr, r.stderr.strip())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--qmap", required=True)
    ap.add_argument("--tool", required=True)
    ap.add_argument("--asan-tool")
    ap.add_argument("--workdir", required=True)
    ap.add_argument("-k", dest="filt")
    args = ap.parse_args()
    c = Checks(args.filt)
    env = Env(args, c)
    os.makedirs(args.workdir, exist_ok=True)
    torch.set_num_threads(2)
    summary = []
    f32s = {}
    for name, mod, kw, saver, window in CASES:
        if c.want(name):
            f32s[name] = family_case(env, name, mod, kw, saver, window, args.workdir, summary)
    if c.want("phi3"):
        fused_shape_case(env, args.workdir)
    llama_f32 = f32s.get("llama")
    if llama_f32 and c.want("errors"):
        error_cases(env, llama_f32, args.workdir, f32s.get("mistral"))

    print("\n%-8s %6s %10s %10s %10s   %-28s %-28s %-28s" % ("model", "std", "F32", "F32 kv16", "F16",
                                                          "Q8 precise: top1 KL (vs F32)", "Q8 auto: top1 KL (vs F32)",
                                                          "Q8 int8: top1 KL (vs F32)"))
    for r in summary:
        qp, qa, qi = r.get("q8_precise"), r.get("q8_auto"), r.get("q8_int8")
        fmt = lambda q: "%.3f %.1e (%.3f %.1e)" % q if q else "-"  # noqa: E731
        print("%-8s %6.2f %10.2e %10.2e %10.2e   %-28s %-28s %-28s" % (r["case"], r["std"], r.get("f32", np.nan),
                                                                  r.get("f32_kv16", np.nan), r.get("f16", np.nan),
                                                                  fmt(qp), fmt(qa), fmt(qi)))
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
