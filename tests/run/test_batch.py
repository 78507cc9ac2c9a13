#!/usr/bin/env python3
"""test_batch.py — several sequences in one forward pass (qmap_batch, issue 46 §1) against PyTorch and
against themselves.

For llama (grouped-query heads; once more at a width whose products run on the thread pool), gpt2
(learned positions, tied head) and gpt_neo (a local layer whose window the sequence passes), a random-init model of tests/models is saved as a real checkpoint, converted
and quantized (`--f16`, `--q8`) as tests/run/test_lm.py does, and run by tests/run/batch_logits.c through
the public API. Checked:

- Batch invariance, byte for byte: a sequence's logits alone (one token per call) equal its logits with its
  prompt in one call and in chunks of 5, and in batches of 1..7 other sequences at other positions (its own
  chunks cut differently, its slot and its place among the items changing, others starting, finishing and
  being reset around it, some steps leaving it out), and a qmap_session (what `qmap run` decodes with) over the
  same tokens in chunks of 1..7, after every call (so `qmap run` and `qmap serve` give the same tokens; a Q8_ROW
  session as it is by default, F32/F16 and --act f32 with batch_invariant): for every dtype, with the default act mode, and for
  Q8_ROW with every act mode; on every kernel table this CPU has (QMAP_CPU=avx512, avx2, generic); with 1
  and 2 threads.
- Parity with torch of the alone logits, the tolerances of test_lm.py: F32 weights and F32 KV within 1e-4 ·
  max|logit|; Q8_ROW (the default act: normed rows in one int8 term, the rest in two) against torch on the dequantized weights: top-1 >= 95%,
  mean KL <= 1e-3.
- Errors: a seq given twice or out of range, an empty item, an id outside the vocabulary, more tokens than
  n_batch, a sequence past n_ctx, no items: each QMAP_ERR_INVALID_ARGUMENT, no position moved.
- No allocation in the batched steps (counted malloc family); the same runs under ASan+UBSan.
- `qmap bench MODEL --parallel 1,2 --json` runs and reports sane fields (no timing is asserted).
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "convert"))

from checks import Checks, fresh_dir  # noqa: E402
from models import gpt2, gpt_neo, llama  # noqa: E402
from savers import save_safetensors, save_torch  # noqa: E402
from test_lm import kl, quantized_copy, rel, spread_logits, torch_logits  # noqa: E402

T = 40          # tokens of the target sequence
CTX = 64

CASES = [
    ("llama", llama, dict(variant="llama", max_position_embeddings=CTX), save_safetensors),
    ("gpt2", gpt2, dict(n_positions=CTX, n_ctx=CTX), save_torch),
    # wide enough that its products go to the thread pool (and, on a table with decode regions, one row's
    # products in regions): the threaded paths under the same byte-for-byte checks
    ("llama-wide", llama, dict(variant="llama", max_position_embeddings=CTX, hidden_size=256, intermediate_size=1024,
                               num_attention_heads=8, num_key_value_heads=2, vocab_size=1024), save_safetensors),
    ("gpt_neo", gpt_neo, dict(max_position_embeddings=CTX, window_size=8,
                              attention_types=[[["global", "local"], 1]]), save_safetensors),
]


def run(cmd, env=None):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run(cmd, capture_output=True, text=True, env=e)


def cpu_levels(qmap):
    """The QMAP_CPU levels this CPU runs (each one's kernel table differs)."""
    flags = open("/proc/cpuinfo").read()
    levels = ["generic"]
    if " avx2 " in flags and " fma " in flags and " f16c " in flags:
        levels.append("avx2")
    if all(" %s " % f in flags for f in ("avx512f", "avx512bw", "avx512vl", "avx512_vnni")):
        levels.append("avx512")
    return levels


def batch_run(c, tool, path, ids, V, name, what, *opts, env=None):
    out = path + ".batch.f32"
    r = run([tool, path, out, *opts] + [str(i) for i in ids], env=env)
    ok = c.check(name, what, r.returncode == 0, (r.stderr.strip() or r.stdout.strip())[-600:])
    if not ok:
        return None
    return np.fromfile(out, dtype=np.float32).reshape(len(ids), V)


def family_case(c, args, name, mod, kw, saver):
    model, cfg = mod.build(seed=5, **kw)
    V = cfg["vocab_size"]
    g = torch.Generator().manual_seed(sum(map(ord, name)) + 46)
    ids = torch.randint(0, V, (T,), generator=g).tolist()
    spread_logits(model, ids)
    d = fresh_dir(os.path.join(args.workdir, name))
    srcs, _ = saver(model, cfg, d)
    paths = {"f32": os.path.join(d, "f32.qmap")}
    r = run([args.qmap, "convert", *srcs, "-o", paths["f32"], "--no-tokenizer", "--quiet"])
    if not c.check(name, "convert", r.returncode == 0, r.stderr.strip()):
        return None
    for how in ("f16", "q8"):
        paths[how] = os.path.join(d, how + ".qmap")
        r = run([args.qmap, "quantize", "--" + how, paths["f32"], "-o", paths[how], "--quiet"])
        c.check(name, "quantize --" + how, r.returncode == 0, r.stderr.strip())

    # batch invariance on every kernel table, every dtype (default act), 2 threads
    for level in cpu_levels(args.qmap):
        env = {"QMAP_CPU": level}
        for how in ("f32", "f16", "q8"):
            # a Q8_ROW session is a batch of one by default; F32/F16 ones with batch_invariant
            batch_run(c, args.tool, paths[how], ids, V, name,
                      "%s weights, QMAP_CPU=%s: alone = in batches of 1..7 others = a session, bit for bit"
                      % (how, level), "-t", "2", *(["--session-default"] if how == "q8" else []), env=env)
        for act in ("int8", "f32", "int8x2", "precise"):
            batch_run(c, args.tool, paths["q8"], ids, V, name,
                      "Q8_ROW --act %s, QMAP_CPU=%s: alone = in batches = a session, bit for bit" % (act, level),
                      "-t", "2", "--act", act, "--max-others", "3",
                      *(["--session-default"] if act != "f32" else []), env=env)
    one = batch_run(c, args.tool, paths["q8"], ids, V, name, "Q8_ROW, 1 thread: bit for bit", "-t", "1",
                    "--max-others", "3")
    two = batch_run(c, args.tool, paths["q8"], ids, V, name, "Q8_ROW, 2 threads, no allocation per step",
                    "-t", "2", "--alloc-check")
    if one is not None and two is not None:
        c.check(name, "1 and 2 threads give the same bits", np.array_equal(one, two))

    # parity with torch
    ref = torch_logits(model, ids)
    got = batch_run(c, args.tool, paths["f32"], ids, V, name, "F32 weights, F32 KV", "--kv", "f32",
                    "--max-others", "2")
    if got is not None:
        e = rel(got, ref)
        c.check(name, "F32 weights, F32 KV: logits within 1e-4 of torch", e <= 1e-4, "max rel diff %.3g" % e)
    refq = torch_logits(quantized_copy(model, name if name == "gpt2" else "", "q8"), ids)
    got = batch_run(c, args.tool, paths["q8"], ids, V, name, "Q8_ROW, F32 KV", "--kv", "f32", "--max-others", "2")
    if got is not None:
        top1 = float(np.mean(got.argmax(-1) == refq.argmax(-1)))
        mkl = float(kl(refq, got).mean())
        c.check(name, "Q8_ROW: top-1 agreement with torch on the dequantized weights >= 95%", top1 >= 0.95,
                "%.3f" % top1)
        c.check(name, "Q8_ROW: mean KL to torch on the dequantized weights <= 1e-3", mkl <= 1e-3, "%.3g" % mkl)

    if args.asan_tool:
        batch_run(c, args.asan_tool, paths["q8"], ids[:16], V, name, "ASan+UBSan: Q8_ROW batches run clean",
                  "--max-others", "3")
        batch_run(c, args.asan_tool, paths["f16"], ids[:16], V, name, "ASan+UBSan: F16 batches run clean",
                  "--max-others", "2")
    return paths["q8"]


def bench_case(c, args, path):
    """qmap bench --parallel: runs, and its fields are sane (counts as asked, speeds positive and finite)."""
    r = run([args.qmap, "bench", path, "--parallel", "1,2", "-p", "8", "-n", "4", "-r", "1", "-t", "2", "--json"])
    if not c.check("bench", "qmap bench --parallel 1,2 --json runs", r.returncode == 0, r.stderr.strip()[-400:]):
        return
    try:
        rows = json.loads(r.stdout)
        assert isinstance(rows, list)
    except (ValueError, AssertionError) as ex:
        c.check("bench", "its output is one JSON array", False, "%s: %s" % (ex, r.stdout[:300]))
        return
    c.check("bench", "one row per P, in order", [x.get("P") for x in rows] == [1, 2], str(rows)[:300])
    for x in rows:
        ok = (x.get("pp_tokens") == 8 * x["P"] and x.get("tg_tokens") == 4 * x["P"] and
              all(np.isfinite(x.get(k, np.nan)) and x[k] > 0
                  for k in ("pp_tok_s", "tg_tok_s", "tg_tok_s_per_seq")))
        c.check("bench", "P=%d: token counts and positive speeds" % x["P"], ok, str(x))
        if ok:
            c.check("bench", "P=%d: per-sequence tg is the aggregate / P" % x["P"],
                    abs(x["tg_tok_s_per_seq"] * x["P"] - x["tg_tok_s"]) <= 1e-6 * x["tg_tok_s"] + 1e-9, str(x))
    r = run([args.qmap, "bench", path, "--parallel", "1,2", "-p", "4", "-n", "2", "-r", "1"])
    c.check("bench", "the table form runs and names its columns",
            r.returncode == 0 and "tg/seq" in r.stdout and "pp" in r.stdout, (r.stdout + r.stderr)[-400:])
    r = run([args.qmap, "bench", path, "--parallel", "0"])
    c.check("bench", "--parallel 0 is refused", r.returncode != 0 and "parallel" in r.stderr, r.stderr[-300:])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--qmap", required=True)
    ap.add_argument("--tool", required=True)
    ap.add_argument("--asan-tool")
    ap.add_argument("--workdir", required=True)
    ap.add_argument("-k", dest="filt")
    args = ap.parse_args()
    c = Checks(args.filt)
    os.makedirs(args.workdir, exist_ok=True)
    torch.set_num_threads(2)
    q8 = None
    for name, mod, kw, saver in CASES:
        if c.want(name):
            q8 = family_case(c, args, name, mod, kw, saver) or q8
    if q8 and c.want("bench"):
        bench_case(c, args, q8)
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
