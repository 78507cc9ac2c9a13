#!/usr/bin/python3
"""train_numbers.py — tiny nn.Transformer translators with an exactly checkable answer: English number
words to digits ("three thousand forty two" -> "3 0 4 2"), for 0 .. 9999.

Two models ship in tests/data/numbers/ (post-norm with ReLU, and pre-norm (norm_first) with GELU), each a
few hundred KB, so that tests/run/test_seq2seq.py checks both layouts against the true answer of every
number in a second, without training anything. The model layout is the translation tutorial's
(tests/models/seq2seq.py). A tenth of the numbers, chosen by a CRC-32 of their digits, are held out of training; the test reports
accuracy on them separately. Fixed seeds; about two minutes per model on 2 cores. Writes into OUTDIR/NAME:
  model.pt, config.json, src/tokenizer.json (+ tokenizer_config.json), tgt/…, train.log

    /usr/bin/python3 tests/tools/train_numbers.py tests/data/numbers
"""
import json
import os
import sys
import time
import zlib

import torch
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from models.seq2seq import Seq2SeqTransformer, make_config  # noqa: E402
from wordlevel import SPLIT_WHITESPACE, write_wordlevel  # noqa: E402

ONES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
        "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]
TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]


def words(n):
    """English words of 0 <= n <= 9999, without "and": 3042 -> "three thousand forty two"."""
    if n == 0:
        return "zero"
    out = []
    if n >= 1000:
        out += [ONES[n // 1000], "thousand"]
        n %= 1000
    if n >= 100:
        out += [ONES[n // 100], "hundred"]
        n %= 100
    if n >= 20:
        out.append(TENS[n // 10])
        n %= 10
        if n:
            out.append(ONES[n])
    elif n:
        out.append(ONES[n])
    return " ".join(out)


def digits(n):
    return " ".join(str(n))


SRC_TOKENS = ["<pad>", "<unk>"] + sorted({w for n in range(10000) for w in words(n).split()})
TGT_TOKENS = ["<pad>", "<unk>", "<s>", "</s>"] + [str(i) for i in range(10)]


def held_out(n):
    return zlib.crc32(str(n).encode()) % 10 == 0


def batch(nums):
    s = [[SRC_TOKENS.index(w) for w in words(n).split()] for n in nums]
    t = [[2] + [TGT_TOKENS.index(c) for c in digits(n).split()] + [3] for n in nums]
    S, T = max(map(len, s)), max(map(len, t))
    src = torch.tensor([x + [0] * (S - len(x)) for x in s])
    tgt = torch.tensor([x + [0] * (T - len(x)) for x in t])
    return src, tgt


def train(outdir, name, seed, **over):
    torch.manual_seed(seed)
    cfg = make_config(d_model=64, nhead=4, num_encoder_layers=2, num_decoder_layers=2, dim_feedforward=128,
                      src_vocab_size=len(SRC_TOKENS), tgt_vocab_size=len(TGT_TOKENS), max_len=16, **over)
    model = Seq2SeqTransformer(cfg)
    for p in model.parameters():
        if p.dim() > 1:
            nn.init.xavier_uniform_(p)
    train_nums = [n for n in range(10000) if not held_out(n)]
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    log = []
    t0 = time.time()
    for epoch in range(12):
        model.train()
        perm = torch.randperm(len(train_nums)).tolist()
        total = 0.0
        for i in range(0, len(perm), 128):
            src, tgt = batch([train_nums[j] for j in perm[i:i + 128]])
            inp, out = tgt[:, :-1], tgt[:, 1:]
            mem = model.transformer.encoder(model.positional_encoding(model.src_tok_emb(src)),
                                            src_key_padding_mask=src == 0)
            dec = model.transformer.decoder(model.positional_encoding(model.tgt_tok_emb(inp)), mem,
                                            tgt_mask=model.causal_mask(inp.size(1)),
                                            tgt_key_padding_mask=inp == 0, memory_key_padding_mask=src == 0)
            loss = nn.functional.cross_entropy(model.generator(dec).reshape(-1, len(TGT_TOKENS)), out.reshape(-1),
                                               ignore_index=0)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += float(loss)
        log.append("epoch %2d  loss %.4f  (%.0f s)" % (epoch + 1, total / (len(perm) / 128), time.time() - t0))
        print(name, log[-1], flush=True)
    model.eval()
    right = {True: 0, False: 0}
    for n in range(10000):
        src, _ = batch([n])
        got = model.greedy_decode(src, 8, 2, 3)
        right[held_out(n)] += got == [TGT_TOKENS.index(c) for c in digits(n).split()] + [3]
    n_held = sum(held_out(n) for n in range(10000))
    log.append("greedy exact: training numbers %d/%d, held-out numbers %d/%d" %
               (right[False], 10000 - n_held, right[True], n_held))
    print(name, log[-1], flush=True)
    d = os.path.join(outdir, name)
    os.makedirs(d, exist_ok=True)
    torch.save(model.state_dict(), os.path.join(d, "model.pt"))
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    write_wordlevel(os.path.join(d, "src"), SRC_TOKENS, SPLIT_WHITESPACE, False)
    write_wordlevel(os.path.join(d, "tgt"), TGT_TOKENS, SPLIT_WHITESPACE, True)
    with open(os.path.join(d, "train.log"), "w") as f:
        f.write("\n".join(log) + "\n")


if __name__ == "__main__":
    torch.set_num_threads(1)
    out = sys.argv[1]
    which = sys.argv[2] if len(sys.argv) > 2 else "both"
    if which in ("both", "post"):
        train(out, "post-relu", 1, norm_first=False, activation="relu")
    if which in ("both", "pre"):
        train(out, "pre-gelu", 2, norm_first=True, activation="gelu")
