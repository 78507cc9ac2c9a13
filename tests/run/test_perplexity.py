#!/usr/bin/env python3
"""test_perplexity.py — `qmap perplexity` against the same computation in PyTorch (issue 16 §3).

A small Llama (tests/models, GQA, untied head scaled to a trained model's logit spread) with the small
SentencePiece-style tokenizer of tests/convert/savers.py is saved, converted and quantized to Q8_ROW. The
text is English (the King James Bible when Debian's bible-kjv is installed, else the test corpus
repeated). The test takes qmap's own token ids (`qmap tokenize --json --no-bos`), cuts them into windows as
llama.cpp does (first token of each window replaced by BOS, second half scored) and computes in torch:

- F32 container with an F32 KV cache: perplexity equal to torch's to 4 significant digits (relative 5e-5);
  also with -b smaller than -c (the window evaluated in several calls).
- --kl-base: the Q8_ROW container against the F32 one. Torch runs the F32 model and a copy holding the
  dequantized Q8_ROW weights (spec/FORMAT.md 6.1 via tests/spec_writer.py) on the same windows; qmap's mean
  KL, its median and 99th percentile, top-1 agreement and ln(PPL/PPL_base) must match the statistics
  numpy computes from torch's logits (KL and the ratio within 10% + 1e-6 / 1e-5 of each other, top-1 within 1
  point: qmap's Q8 products sum in another order than the dequantized float model). qmap runs with
  `--act precise` here, float activations as torch's.
- --save-logits of the F32 run, then the Q8_ROW run with that file as --kl-base: the same statistics as
  the same-pass run; a file from another -c, window count or text, or a truncated one, is refused.
- Errors: a text shorter than two windows (says how many tokens it needs), a base with another vocabulary,
  a model without a tokenizer.
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "convert"))

from checks import Checks, fresh_dir  # noqa: E402
from models import llama  # noqa: E402
from savers import llama_tokenizer, save_safetensors, write_llama_tokenizer, CORPUS  # noqa: E402

CTX = 128
CHUNKS = 40     # windows scored (qmap --chunks), enough for stable statistics at test speed
KJV = "/usr/share/bible-kjv"


def english_text():
    """About 60 KB of English: Genesis from bible-kjv if installed, else the test corpus repeated."""
    try:
        r = subprocess.run(["bible", "-f", "Gen1:1-Gen12:20"], capture_output=True, text=True, timeout=60)
        if r.returncode == 0 and len(r.stdout) > 20000:
            return r.stdout, "bible-kjv Genesis 1-12"
    except (OSError, subprocess.TimeoutExpired):
        pass
    return (CORPUS + " ") * 200, "the test corpus repeated"


def log_softmax(x):
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def windows(ids, bos, n_chunks):
    out = []
    for k in range(n_chunks):
        w = list(ids[k * CTX:(k + 1) * CTX])
        if bos is not None:
            w[0] = bos
        out.append(w)
    return out


def torch_window_logprobs(model, w):
    with torch.no_grad():
        return log_softmax(model(torch.tensor([w]))[0].double().numpy())


def scored(lp, w):
    first = CTX // 2
    return np.array([-lp[j, w[j + 1]] for j in range(first, CTX - 1)])


def dequantized(model):
    import copy
    import spec_writer
    m = copy.deepcopy(model)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if p.dim() < 2 or not name.endswith("weight"):
                continue
            q, s, _ = spec_writer.quantize_q8row(np.ascontiguousarray(p.detach().numpy().astype(np.float32)))
            p.copy_(torch.from_numpy(q.astype(np.float32) * s.astype(np.float32)[:, None]))
    return m


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--qmap", required=True)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    c = Checks(None)
    d = fresh_dir(a.workdir)
    vocab, _ = llama_tokenizer()
    model, cfg = llama.build(seed=3, variant="llama", vocab_size=len(vocab), max_position_embeddings=CTX)
    text, what = english_text()
    txt = os.path.join(d, "text.txt")
    with open(txt, "w") as f:
        f.write(text)
    src = fresh_dir(os.path.join(d, "src"))
    write_llama_tokenizer(src)
    # a trained model's logit spread (std ~2.5), so KL and top-1 see quantization error
    with torch.no_grad():
        probe = [int(i) % len(vocab) for i in range(3, 3 + CTX)]
        std = float(model(torch.tensor([probe]))[0].std())
        model.lm_head.weight.mul_(2.5 / std)
    save_safetensors(model, cfg, src)
    f32, q8 = os.path.join(d, "m-f32.qmap"), os.path.join(d, "m-q8.qmap")
    r = subprocess.run([a.qmap, "convert", src, "-o", f32, "--quiet"], capture_output=True, text=True)
    c.check("setup", "convert", r.returncode == 0, r.stderr)
    r = subprocess.run([a.qmap, "quantize", "--q8", f32, "-o", q8, "--quiet"], capture_output=True, text=True)
    c.check("setup", "quantize --q8", r.returncode == 0, r.stderr)
    r = subprocess.run([a.qmap, "tokenize", f32, "-f", txt, "--json", "--no-bos"], capture_output=True, text=True)
    ids = json.loads(r.stdout)
    bos = vocab["<s>"]
    n_chunks = min(len(ids) // CTX, CHUNKS)
    print("     text: %s, %d tokens, the first %d windows of %d" % (what, len(ids), n_chunks, CTX))
    ws = windows(ids, bos, n_chunks)

    # F32 perplexity against torch, one call per window and in batches of 48
    nll = np.concatenate([scored(torch_window_logprobs(model, w), w) for w in ws])
    ppl_torch = float(np.exp(nll.mean()))
    for extra in ([], ["-b", "48"]):
        r = subprocess.run([a.qmap, "perplexity", f32, "-f", txt, "-c", str(CTX), "--chunks", str(CHUNKS), "--kv", "f32", "--json", "-q"]
                           + extra, capture_output=True, text=True)
        res = json.loads(r.stdout) if r.returncode == 0 else {}
        got = res.get("ppl", float("nan"))
        c.check("f32", "PPL %.6f = torch's %.6f to 4 significant digits%s" % (got, ppl_torch, " (-b 48)" if extra else ""),
                abs(got / ppl_torch - 1) < 5e-5 and res.get("scored_tokens") == len(nll) and res.get("bos_first"),
                r.stderr.strip())
    err_torch = ppl_torch * nll.std(ddof=1) / np.sqrt(len(nll))
    c.check("f32", "the standard error %.4f is torch's %.4f (within 1%%)" % (res.get("ppl_err", 0), err_torch),
            abs(res.get("ppl_err", 0) / err_torch - 1) < 0.01)

    # --kl-base: Q8_ROW against F32, both against torch's F32 and dequantized models
    mq = dequantized(model)
    kl, same, d_nll = [], [], []
    for w in ws:
        lb, lq = torch_window_logprobs(model, w), torch_window_logprobs(mq, w)
        sl = slice(CTX // 2, CTX - 1)
        kl.append((np.exp(lb[sl]) * (lb[sl] - lq[sl])).sum(axis=-1))
        same.append(lb[sl].argmax(axis=-1) == lq[sl].argmax(axis=-1))
        d_nll.append(scored(lq, w) - scored(lb, w))
    kl, same, d_nll = np.concatenate(kl), np.concatenate(same), np.concatenate(d_nll)
    # --act precise: torch's dequantized model multiplies float activations, as qmap's precise mode does
    # (the default rounds a prompt's normed rows to one int8 term, a difference of its own)
    r = subprocess.run([a.qmap, "perplexity", q8, "-f", txt, "-c", str(CTX), "--chunks", str(CHUNKS), "--kv", "f32", "--kl-base", f32,
                        "--act", "precise", "--json", "-q"], capture_output=True, text=True)
    res = json.loads(r.stdout) if r.returncode == 0 else {}
    b = res.get("base", {})
    c.check("kl", "--kl-base runs; the base's PPL is the F32 one", r.returncode == 0
            and abs(b.get("ppl", 0) / ppl_torch - 1) < 5e-5, r.stderr.strip())
    c.check("kl", "--json names the KV type and activation mode it ran with",
            res.get("kv") == "f32" and res.get("act") == "precise", str(res)[:300])

    def near(x, y, rel, absol=1e-6):
        return abs(x - y) <= rel * abs(y) + absol

    print("     torch: KL mean %.3g median %.3g p99 %.3g, top-1 %.2f%%, ln ratio %.5f" %
          (kl.mean(), np.median(kl), np.percentile(kl, 99), 100 * same.mean(), d_nll.mean()))
    print("     qmap:  KL mean %.3g median %.3g p99 %.3g, top-1 %.2f%%, ln ratio %.5f" %
          (b.get("kl_mean", 0), b.get("kl_median", 0), b.get("kl_p99", 0), 100 * b.get("top1", 0),
           b.get("ln_ppl_ratio", 0)))
    c.check("kl", "mean KL within 10% of torch's", near(b.get("kl_mean", 0), kl.mean(), 0.10))
    c.check("kl", "median and 99th percentile within 10% (+1e-6)",
            near(b.get("kl_median", 0), np.median(kl), 0.10) and near(b.get("kl_p99", 0), np.percentile(kl, 99), 0.10))
    c.check("kl", "top-1 agreement within 1 point", abs(b.get("top1", 0) - same.mean()) <= 0.01)
    c.check("kl", "ln(PPL/PPL_base) within 10% (+1e-5)", near(b.get("ln_ppl_ratio", 1), d_nll.mean(), 0.10, 1e-5))
    c.check("kl", "the KL error is the standard error of the mean",
            near(b.get("kl_mean_err", 0), kl.std(ddof=1) / np.sqrt(len(kl)), 0.15))

    # --save-logits from the F32 run, then --kl-base FILE: the same statistics as the same-pass run
    saved = os.path.join(d, "f32.logits")
    r = subprocess.run([a.qmap, "perplexity", f32, "-f", txt, "-c", str(CTX), "--chunks", str(CHUNKS), "--kv", "f32",
                        "--save-logits", saved, "-q"], capture_output=True, text=True)
    per = CTX - 1 - CTX // 2
    c.check("saved", "--save-logits writes 64 + tokens x vocab x 4 bytes",
            r.returncode == 0 and os.path.getsize(saved) == 64 + CHUNKS * per * len(vocab) * 4, r.stderr.strip())
    r = subprocess.run([a.qmap, "perplexity", q8, "-f", txt, "-c", str(CTX), "--chunks", str(CHUNKS), "--kv", "f32",
                        "--kl-base", saved, "--act", "precise", "--json", "-q"], capture_output=True, text=True)
    bf = json.loads(r.stdout).get("base", {}) if r.returncode == 0 else {}
    c.check("saved", "--kl-base FILE gives the same-pass statistics (PPL, KL mean/p99, top-1, ratio; 1e-5)",
            r.returncode == 0 and all(near(bf.get(k, -1), b.get(k, 0), 1e-5, 1e-9)
                                      for k in ("ppl", "kl_mean", "kl_p99", "top1", "ln_ppl_ratio")),
            r.stderr.strip() + " %s vs %s" % (bf, b))
    for what, extra in (("another -c", ["-c", str(CTX // 2), "--chunks", str(CHUNKS)]),
                        ("another window count", ["-c", str(CTX), "--chunks", str(CHUNKS - 1)])):
        r = subprocess.run([a.qmap, "perplexity", q8, "-f", txt, "--kl-base", saved, "-q"] + extra,
                           capture_output=True, text=True)
        c.check("saved", "a logits file from %s is refused saying so" % what,
                r.returncode == 1 and "computed" in r.stderr and saved in r.stderr, r.stderr.strip())
    other_txt = os.path.join(d, "other.txt")
    with open(other_txt, "w") as f:
        f.write(text[::-1])
    r = subprocess.run([a.qmap, "perplexity", q8, "-f", other_txt, "-c", str(CTX), "--chunks", str(CHUNKS),
                        "--kl-base", saved, "-q"], capture_output=True, text=True)
    c.check("saved", "a logits file of another text is refused", r.returncode == 1 and "another text" in r.stderr,
            r.stderr.strip())
    with open(saved, "r+b") as f:
        f.truncate(os.path.getsize(saved) - 4)
    r = subprocess.run([a.qmap, "perplexity", q8, "-f", txt, "-c", str(CTX), "--chunks", str(CHUNKS),
                        "--kl-base", saved, "-q"], capture_output=True, text=True)
    c.check("saved", "a truncated logits file is refused", r.returncode == 1 and "truncated" in r.stderr,
            r.stderr.strip())

    # errors
    short = os.path.join(d, "short.txt")
    with open(short, "w") as f:
        f.write(text[:300])
    r = subprocess.run([a.qmap, "perplexity", f32, "-f", short, "-c", str(CTX)], capture_output=True, text=True)
    c.check("errors", "a text shorter than two windows: says how many tokens it needs",
            r.returncode == 1 and "needs at least %d" % (2 * CTX) in r.stderr, r.stderr.strip())
    other_src = fresh_dir(os.path.join(d, "other"))
    m2, cfg2 = llama.build(seed=4, variant="llama", vocab_size=len(vocab) + 5, max_position_embeddings=CTX)
    save_safetensors(m2, cfg2, other_src)
    other = os.path.join(d, "other.qmap")
    subprocess.run([a.qmap, "convert", other_src, "-o", other, "--quiet", "--no-tokenizer"], check=True)
    r = subprocess.run([a.qmap, "perplexity", f32, "-f", txt, "-c", str(CTX), "--kl-base", other],
                       capture_output=True, text=True)
    c.check("errors", "a base with another vocabulary is refused naming both sizes",
            r.returncode == 1 and str(len(vocab)) in r.stderr and str(len(vocab) + 5) in r.stderr, r.stderr.strip())
    r = subprocess.run([a.qmap, "perplexity", other, "-f", txt, "-c", str(CTX)], capture_output=True, text=True)
    c.check("errors", "a model without a tokenizer is refused", r.returncode == 1 and "no tokenizer" in r.stderr,
            r.stderr.strip())
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
