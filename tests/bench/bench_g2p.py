#!/usr/bin/python3
"""bench_g2p.py — encoder-decoder throughput: `qmap run -f` against PyTorch on the shipped G2P model.

The model of tests/data/g2p (nn.Transformer, trained on the CMU dictionary) is converted to F32 and Q8_ROW;
the sentences are the first --words held-out words (tests/tools/g2p_data.py). Measured, in sentences
(words) per second, 1 and 2 threads:
  qmap greedy and beam 4, F32 and Q8_ROW: `qmap run -f WORDS -b 64 [--beam 4] --json` (its own timing of
    the translate loop: encoder batches of 64 words, then each word decoded with a KV cache);
  torch greedy, one word at a time (a service answering requests), the tutorial's loop: encode once, then
    the decoder re-run over the growing prefix each step (nn.Transformer has no KV cache);
  torch greedy, batched: all words of one length at a time (torch at its most efficient, no padding).
Runs alternate between configurations, --runs times; medians with [min, max]. torch has no beam search of
its own, so beam 4 has no torch figure. Not a test: nothing here passes or fails on speed.

    /usr/bin/python3 tests/bench/bench_g2p.py --qmap build/qmap --dir build/bench/g2p [--runs 3] [--words 1000]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, os.path.join(ROOT, "tests", "tools"))
import g2p_data  # noqa: E402


def qmap_rate(qmap, model, path, threads, beam):
    time.sleep(0.5)   # let torch's BLAS threads, which busy-wait after a call, go to sleep first
    r = subprocess.run([qmap, "run", model, "-f", path, "-b", "64", "-t", str(threads), "--beam", str(beam), "--json",
                        "-q"], capture_output=True, text=True, check=True)
    return json.loads(r.stdout)["sentences_per_s"]


@torch.no_grad()
def torch_one_by_one(model, srcs, bos, eos, max_new):
    t0 = time.perf_counter()
    for s in srcs:
        model.greedy_decode(torch.tensor([s]), max_new, bos, eos)
    return len(srcs) / (time.perf_counter() - t0)


def torch_batched(model, srcs, bos, eos, max_new):
    t0 = time.perf_counter()
    g2p_data.greedy_decode_batch(model, srcs, bos, eos, max_new)
    return len(srcs) / (time.perf_counter() - t0)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--qmap", required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--words", type=int, default=1000)
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    src = os.path.join(ROOT, "tests", "data", "g2p")
    f32, q8 = os.path.join(a.dir, "g2p.qmap"), os.path.join(a.dir, "g2p-q8.qmap")
    subprocess.run([a.qmap, "convert", os.path.join(src, "model.pt"), "--src-tokenizer",
                    os.path.join(src, "src", "tokenizer.json"), "--tgt-tokenizer",
                    os.path.join(src, "tgt", "tokenizer.json"), "-o", f32, "-q"], check=True)
    subprocess.run([a.qmap, "quantize", "--q8", f32, "-o", q8, "-q"], check=True)
    words = [w for w, _ in g2p_data.read_cmudict() if g2p_data.held_out(w)][:a.words]
    path = os.path.join(a.dir, "words.txt")
    with open(path, "w") as f:
        f.write("\n".join(words) + "\n")
    model, cfg, sv, tv = g2p_data.load_model(src)
    srcs = [[sv[c] for c in w] for w in words]
    bos, eos, max_new = tv["<s>"], tv["</s>"], cfg["max_len"] - 1

    def torch_with(fn, t):
        torch.set_num_threads(t)
        return fn(model, srcs, bos, eos, max_new)

    systems = {
        "qmap F32 greedy": lambda t: qmap_rate(a.qmap, f32, path, t, 1),
        "qmap Q8_ROW greedy": lambda t: qmap_rate(a.qmap, q8, path, t, 1),
        "qmap F32 beam 4": lambda t: qmap_rate(a.qmap, f32, path, t, 4),
        "qmap Q8_ROW beam 4": lambda t: qmap_rate(a.qmap, q8, path, t, 4),
        "torch F32 greedy, one word at a time": lambda t: torch_with(torch_one_by_one, t),
        "torch F32 greedy, batched by length": lambda t: torch_with(torch_batched, t),
    }
    rates = {(s, t): [] for s in systems for t in (1, 2)}
    for _ in range(a.runs):
        for t in (1, 2):
            for s, fn in systems.items():
                rates[(s, t)].append(fn(t))
    print("G2P (nn.Transformer d %d, %d+%d layers) on %d held-out words: words/s, median of %d [min, max]"
          % (cfg["d_model"], cfg["num_encoder_layers"], cfg["num_decoder_layers"], len(words), a.runs))
    for t in (1, 2):
        print("%d thread%s" % (t, "" if t == 1 else "s"))
        for s in systems:
            v = rates[(s, t)]
            print("  %-40s %9.0f  [%.0f, %.0f]" % (s, statistics.median(v), min(v), max(v)))
        base = statistics.median(rates[("torch F32 greedy, one word at a time", t)])
        batched = statistics.median(rates[("torch F32 greedy, batched by length", t)])
        q = statistics.median(rates[("qmap F32 greedy", t)])
        print("  qmap F32 greedy / torch one at a time = %.1f, / torch batched = %.1f" % (q / base, q / batched))
    return 0


if __name__ == "__main__":
    sys.exit(main())
