#!/usr/bin/env python3
"""test_perplexity.py — `qmap perplexity` against the same computation in PyTorch and numpy (issues 16, 44).

A small Llama (tests/models, GQA, untied head scaled to a trained model's logit spread) with the small
SentencePiece-style tokenizer of tests/convert/savers.py (adds BOS) is saved, converted and quantized to
Q8_ROW; a small GPT-2 with the byte-level BPE of savers.py (adds no BOS) beside it. The text is English (the
King James Bible when Debian's bible-kjv is installed, else the test corpus repeated). The test takes
qmap's token ids of the text (`qmap tokenize --json --no-bos`) and builds llama-perplexity's windows itself
(llama.cpp tools/perplexity/perplexity.cpp, perplexity()): the stream is the text's ids after the BOS the
tokenizer adds, cut into non-overlapping windows of -c, slot 0 of each replaced by BOS where the tokenizer
adds one, positions c/2 .. c-2 scored against the next token. Then:

- F32 containers with an F32 KV cache, Llama and GPT-2: perplexity equal to torch's on those windows within
  relative 5e-5 (a one-token shift of the windows moves it by more); the Llama also with -b smaller than -c.
- --kl-base: the Q8_ROW container against the F32 one. Torch runs the F32 model and a copy holding the
  dequantized Q8_ROW weights (spec/FORMAT.md 6.1 via tests/spec_writer.py) on the same windows; qmap's mean
  KL, its median and 99th percentile, same top and ln(PPL/PPL_base) must match the statistics numpy
  computes from torch's logits (KL and the ratio within 10% + 1e-6 / 1e-5 of each other, same top within 1
  point: qmap's Q8 products sum in another order than the dequantized float model). qmap runs with
  `--act precise` here, float activations as torch's.
- --save-logits of the F32 run, then the Q8_ROW run with that file as --kl-base: the same statistics as
  the same-pass run; a file from another -c, window count or text, or a truncated one, is refused.
- The statistics themselves (cli/ppl_stats.h, llama-perplexity's KL-divergence output): a second Llama
  (another seed, same vocabulary) runs with the F32 run's file as --kl-base and saves its own
  log-probabilities; numpy computes every reported figure from the two files (np.percentile, np.cov,
  np.corrcoef, ...) and qmap's --json must equal them (relative 1e-5).
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
from models import gpt2  # noqa: E402
from savers import (CORPUS, gpt2_tokenizer, llama_tokenizer, save_safetensors, save_torch,  # noqa: E402
                    write_gpt2_tokenizer, write_llama_tokenizer)

CTX = 128
CHUNKS = 40     # windows scored (qmap --chunks), enough for stable statistics at test speed
GPT2_CHUNKS = 16
REL_F32 = 5e-5  # qmap's F32 perplexity against torch's; a one-token shift of the windows is 10x this or more
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
    """llama-perplexity's windows of a text's ids (no special tokens): the stream starts with the BOS the
    tokenizer adds (bos None: it adds none), windows of CTX from it, slot 0 of each replaced by BOS."""
    stream = ([bos] if bos is not None else []) + list(ids)
    out = []
    for k in range(min(n_chunks, len(stream) // CTX)):
        w = stream[k * CTX:(k + 1) * CTX]
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



def scale_head(model, cfg, n_vocab):
    """A trained model's logit spread (std ~2.5), so KL and same top see quantization error."""
    with torch.no_grad():
        probe = [int(i) % n_vocab for i in range(3, 3 + CTX)]
        std = float(model(torch.tensor([probe]))[0].std())
        model.lm_head.weight.mul_(2.5 / std)


def read_logits(path, n_vocab):
    """A --save-logits file's log-probabilities, one row per scored token (ppl_logits.h: 64-byte header)."""
    return np.fromfile(path, dtype="<f4", offset=64).reshape(-1, n_vocab).astype(np.float64)


PCTS = (("min", 0), ("p0_1", 0.1), ("p1", 1), ("p5", 5), ("p10", 10), ("p25", 25), ("median", 50),
        ("p75", 75), ("p90", 90), ("p95", 95), ("p99", 99), ("p99_9", 99.9), ("max", 100))


def numpy_stats(lp, lpb, targets):
    """Every figure of qmap's "base" object from per-token log-probabilities of the model (lp) and the base
    (lpb), by the definitions of llama-perplexity's KL-divergence mode, with numpy's own estimators."""
    n = len(targets)
    rows = np.arange(n)
    lp = lp - np.log(np.exp(lp).sum(axis=-1, keepdims=True))    # renormalize the float32 rounding away
    lpb = lpb - np.log(np.exp(lpb).sum(axis=-1, keepdims=True))
    nll, nllb = -lp[rows, targets], -lpb[rows, targets]
    kl = (np.exp(lpb) * (lpb - lp)).sum(axis=-1)
    dp = np.exp(-nll) - np.exp(-nllb)
    sem = lambda x: x.std(ddof=1) / np.sqrt(n)  # noqa: E731
    ppl, pplb = np.exp(nll.mean()), np.exp(nllb.mean())
    cov = np.cov(nll, nllb, ddof=1)[0, 1] / n
    ln_ratio = (nll - nllb).mean()
    rms = np.sqrt((dp ** 2).mean())
    top1 = float((lp.argmax(axis=-1) == lpb.argmax(axis=-1)).mean())
    out = {"ppl": pplb, "ppl_err": pplb * sem(nllb), "nll_correlation": np.corrcoef(nll, nllb)[0, 1],
           "ln_ppl_ratio": ln_ratio, "ln_ppl_ratio_err": sem(nll - nllb),
           "ppl_ratio": np.exp(ln_ratio), "ppl_ratio_err": np.exp(ln_ratio) * sem(nll - nllb),
           "ppl_diff": ppl - pplb,
           "ppl_diff_err": np.sqrt((ppl * sem(nll)) ** 2 + (pplb * sem(nllb)) ** 2 - 2 * ppl * pplb * cov),
           "kl_mean": kl.mean(), "kl_mean_err": sem(kl), "dp_mean": dp.mean(), "dp_mean_err": sem(dp),
           "dp_rms": rms, "dp_rms_err": 0.5 / rms * sem(dp ** 2),
           "top1": top1, "top1_err": np.sqrt(top1 * (1 - top1) / (n - 1))}
    for name, q in PCTS:
        out["kl_" + name] = np.percentile(kl, q)
        out["dp_" + name] = np.percentile(dp, q)
    return out, ppl


def check_f32(c, a, group, model, path, txt, ws, chunks, want_bos, extras=([],)):
    """qmap's F32 perplexity on `path` against torch's `model` on the windows ws; returns qmap's JSON."""
    nll = np.concatenate([scored(torch_window_logprobs(model, w), w) for w in ws])
    ppl_torch = float(np.exp(nll.mean()))
    res = {}
    for extra in extras:
        r = subprocess.run([a.qmap, "perplexity", path, "-f", txt, "-c", str(CTX), "--chunks", str(chunks),
                            "--kv", "f32", "--json", "-q"] + extra, capture_output=True, text=True)
        res = json.loads(r.stdout) if r.returncode == 0 else {}
        got = res.get("ppl", float("nan"))
        c.check(group, "PPL %.6f = torch's %.6f on llama-perplexity's windows (relative %.1e <= %.0e)%s"
                % (got, ppl_torch, abs(got / ppl_torch - 1), REL_F32, " (-b %s)" % extra[-1] if extra else ""),
                abs(got / ppl_torch - 1) < REL_F32 and res.get("scored_tokens") == len(nll)
                and res.get("bos_first") == want_bos, r.stderr.strip())
    err_torch = ppl_torch * nll.std(ddof=1) / np.sqrt(len(nll))
    c.check(group, "the standard error %.4f is torch's %.4f (within 1%%)" % (res.get("ppl_err", 0), err_torch),
            abs(res.get("ppl_err", 0) / err_torch - 1) < 0.01)
    return res, ppl_torch


def gpt2_case(c, a, d, txt):
    """A BOS-less tokenizer: the windows are the text's ids as they are."""
    vocab, _ = gpt2_tokenizer()
    model, cfg = gpt2.build(seed=5, vocab_size=len(vocab), n_positions=CTX, n_ctx=CTX)
    scale_head(model, cfg, len(vocab))      # the head is tied: the embeddings scale with it
    src = fresh_dir(os.path.join(d, "gpt2"))
    write_gpt2_tokenizer(src)
    save_torch(model, cfg, src)
    path = os.path.join(d, "gpt2-f32.qmap")
    r = subprocess.run([a.qmap, "convert", src, "-o", path, "--quiet"], capture_output=True, text=True)
    c.check("gpt2", "convert", r.returncode == 0, r.stderr)
    tok = [subprocess.run([a.qmap, "tokenize", path, "-f", txt, "--json"] + extra, capture_output=True, text=True)
           for extra in ([], ["--no-bos"])]
    ids = json.loads(tok[1].stdout)
    c.check("gpt2", "the tokenizer adds no BOS (tokenize with and without special tokens agree)",
            json.loads(tok[0].stdout) == ids)
    check_f32(c, a, "gpt2", model, path, txt, windows(ids, None, GPT2_CHUNKS), GPT2_CHUNKS, False)


def stats_case(c, a, d, vocab, txt, ws, base_logits):
    """Every statistic against numpy's, on two models far enough apart that float32 files round nothing
    that matters: a Llama of another seed, same vocabulary, against the F32 run's saved file."""
    model, cfg = llama.build(seed=7, variant="llama", vocab_size=len(vocab), max_position_embeddings=CTX)
    scale_head(model, cfg, len(vocab))
    src = fresh_dir(os.path.join(d, "second"))
    write_llama_tokenizer(src)
    save_safetensors(model, cfg, src)
    path, saved = os.path.join(d, "second.qmap"), os.path.join(d, "second.logits")
    r = subprocess.run([a.qmap, "convert", src, "-o", path, "--quiet"], capture_output=True, text=True)
    c.check("stats", "convert a second Llama", r.returncode == 0, r.stderr)
    r = subprocess.run([a.qmap, "perplexity", path, "-f", txt, "-c", str(CTX), "--chunks", str(len(ws)), "--kv",
                        "f32", "--kl-base", base_logits, "--save-logits", saved, "--json", "-q"],
                       capture_output=True, text=True)
    c.check("stats", "--kl-base FILE with --save-logits runs", r.returncode == 0, r.stderr.strip())
    if r.returncode:
        return
    res = json.loads(r.stdout)
    targets = np.array([w[j + 1] for w in ws for j in range(CTX // 2, CTX - 1)])
    want, ppl = numpy_stats(read_logits(saved, len(vocab)), read_logits(base_logits, len(vocab)), targets)
    got = res["base"]
    bad = ["%s %.9g != numpy %.9g" % (k, got.get(k, float("nan")), v) for k, v in want.items()
           if not abs(got.get(k, float("nan")) - v) <= 1e-5 * abs(v) + (1.5 / len(targets) if k == "top1" else 1e-9)]
    print("     second model vs F32: PPL %.3f / %.3f, KL mean %.4f p99 %.4f, same top %.2f%%, RMS dp %.2f%%"
          % (ppl, want["ppl"], want["kl_mean"], want["kl_p99"], 100 * want["top1"], 100 * want["dp_rms"]))
    c.check("stats", "all %d figures of --json's base object = numpy's from the two saved files (1e-5)"
            % len(want), not bad and abs(res["ppl"] / ppl - 1) < 1e-5, "; ".join(bad))
    text = subprocess.run([a.qmap, "perplexity", path, "-f", txt, "-c", str(CTX), "--chunks", str(len(ws)),
                           "--kv", "f32", "--kl-base", base_logits, "-q"], capture_output=True, text=True).stdout
    c.check("stats", "the text output names every group (ratio, KL percentiles, delta-p, same top)",
            all(w in text for w in ("PPL(Q)/PPL(base)", "ln(PPL(Q)/PPL(base))", "Cor(", "p99.9", "p95", "RMS",
                                    "p0.1", "same top")), text)

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
    scale_head(model, cfg, len(vocab))
    save_safetensors(model, cfg, src)
    f32, q8 = os.path.join(d, "m-f32.qmap"), os.path.join(d, "m-q8.qmap")
    r = subprocess.run([a.qmap, "convert", src, "-o", f32, "--quiet"], capture_output=True, text=True)
    c.check("setup", "convert", r.returncode == 0, r.stderr)
    r = subprocess.run([a.qmap, "quantize", "--q8", f32, "-o", q8, "--quiet"], capture_output=True, text=True)
    c.check("setup", "quantize --q8", r.returncode == 0, r.stderr)
    r = subprocess.run([a.qmap, "tokenize", f32, "-f", txt, "--json", "--no-bos"], capture_output=True, text=True)
    ids = json.loads(r.stdout)
    bos = vocab["<s>"]
    ws = windows(ids, bos, CHUNKS)
    print("     text: %s, %d tokens and BOS, the first %d windows of %d" % (what, len(ids), len(ws), CTX))

    # F32 perplexity against torch, one call per window and in batches of 48
    _, ppl_torch = check_f32(c, a, "f32", model, f32, txt, ws, CHUNKS, True, extras=([], ["-b", "48"]))
    gpt2_case(c, a, d, txt)

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
    stats_case(c, a, d, vocab, txt, ws, saved)
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
