#!/usr/bin/python3
"""train_g2p.py — train the grapheme-to-phoneme model that ships in tests/data/g2p.

A small torch.nn.Transformer (the translation tutorial's layout, tests/models/seq2seq.py: post-norm, ReLU,
d 128, 4 heads, 2 + 2 layers, feed-forward 512, 0.8 M parameters) from spelling to pronunciation on the CMU Pronouncing
Dictionary of Debian's festlex-cmu (tests/tools/g2p_data.py reads it, holds out 5% of the words by a fixed
hash). Characters in (no BOS/EOS on the source), "<s> phones </s>" out. Adam with warm-up and inverse
square-root decay, label smoothing 0.1, no dropout (the modules stay in eval mode while gradients flow: a
few epochs over 100,000 words do not overfit, and it is a third faster), batches of similar-length words;
fixed seeds; about 20 minutes on 2 cores with OpenBLAS as libblas.so.3 (Debian's reference BLAS is 5x
slower). Writes into OUTDIR:
  model.pt       torch.save(state_dict), float32
  config.json    the seq2seq config (spec/ARCHITECTURES.md §7)
  src/, tgt/     tokenizer.json + tokenizer_config.json: word-level vocabularies, the source split into
                 characters (a Split pre-tokenizer on "."), the target at spaces, <s> and </s> as bos/eos
  train.log      loss per epoch, held-out greedy word accuracy and phone error rate

    /usr/bin/python3 tests/tools/train_g2p.py tests/data/g2p [--epochs 8]
"""
import argparse
import json
import math
import os
import random
import sys
import time

import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
import g2p_data  # noqa: E402
from models.seq2seq import Seq2SeqTransformer, make_config  # noqa: E402


def write_vocab(d, tokens, pre, bos_eos):
    os.makedirs(d, exist_ok=True)
    specials = [t for t in tokens if t.startswith("<")]
    tj = {"version": "1.0", "truncation": None, "padding": None,
          "added_tokens": [{"id": tokens.index(t), "content": t, "single_word": False, "lstrip": False,
                            "rstrip": False, "normalized": False, "special": True} for t in specials],
          "normalizer": None, "pre_tokenizer": pre, "post_processor": None, "decoder": None,
          "model": {"type": "WordLevel", "vocab": {t: i for i, t in enumerate(tokens)}, "unk_token": "<unk>"}}
    with open(os.path.join(d, "tokenizer.json"), "w") as f:
        json.dump(tj, f, indent=1)
    cfg = {"unk_token": "<unk>", "pad_token": "<pad>", "add_bos_token": False, "add_eos_token": False}
    if bos_eos:
        cfg.update(bos_token="<s>", eos_token="</s>")
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=1)


def pad(seqs):
    n = max(map(len, seqs))
    return torch.tensor([s + [0] * (n - len(s)) for s in seqs])


def loss_of(model, src, tgt, smoothing):
    inp, out = tgt[:, :-1], tgt[:, 1:]
    mem = model.transformer.encoder(model.positional_encoding(model.src_tok_emb(src)), src_key_padding_mask=src == 0)
    dec = model.transformer.decoder(model.positional_encoding(model.tgt_tok_emb(inp)), mem,
                                    tgt_mask=model.causal_mask(inp.size(1)), tgt_key_padding_mask=inp == 0,
                                    memory_key_padding_mask=src == 0)
    logits = model.generator(dec)
    return nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), out.reshape(-1), ignore_index=0,
                                       label_smoothing=smoothing)


@torch.no_grad()
def greedy_batch(model, srcs, bos, eos, max_new):
    """Greedy decoding grouped by source length (no padding): lists of ids without EOS."""
    out = [None] * len(srcs)
    by_len = {}
    for i, s in enumerate(srcs):
        by_len.setdefault(len(s), []).append(i)
    for _, idx in by_len.items():
        for k in range(0, len(idx), 512):
            part = idx[k:k + 512]
            src = torch.tensor([srcs[i] for i in part])
            mem = model.encode(src)
            ys = torch.full((len(part), 1), bos, dtype=torch.long)
            done = torch.zeros(len(part), dtype=torch.bool)
            for _ in range(max_new):
                nxt = model.generator(model.decode(ys, mem)[:, -1]).argmax(-1)
                nxt = torch.where(done, torch.full_like(nxt, eos), nxt)
                ys = torch.cat([ys, nxt[:, None]], dim=1)
                done |= nxt == eos
                if bool(done.all()):
                    break
            for j, i in enumerate(part):
                seq = ys[j, 1:].tolist()
                out[i] = seq[:seq.index(eos)] if eos in seq else seq
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("outdir")
    ap.add_argument("--epochs", type=int, default=8)
    a = ap.parse_args()
    torch.manual_seed(0)
    random.seed(0)
    torch.set_num_threads(2)
    entries = g2p_data.read_cmudict()
    src_tokens, tgt_tokens = g2p_data.vocabularies(entries)
    S, T = {t: i for i, t in enumerate(src_tokens)}, {t: i for i, t in enumerate(tgt_tokens)}
    train = [([S[c] for c in w], [2] + [T[p] for p in ps] + [3]) for w, ps in entries if not g2p_data.held_out(w)]
    held = [(w, ps) for w, ps in entries if g2p_data.held_out(w)]
    cfg = make_config(d_model=128, nhead=4, num_encoder_layers=2, num_decoder_layers=2, dim_feedforward=512,
                      src_vocab_size=len(src_tokens), tgt_vocab_size=len(tgt_tokens), max_len=32)
    model = Seq2SeqTransformer(cfg)
    for p in model.parameters():
        if p.dim() > 1:
            nn.init.xavier_uniform_(p)
    opt = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    warm = 1000
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 2e-3 * min((s + 1) / warm, math.sqrt(warm / (s + 1))))
    log = []

    def say(line):
        print(line, flush=True)
        log.append(line)

    say("G2P on CMUdict (festlex-cmu 0.4): %d words, %d training, %d held out; vocab %d chars, %d phones; "
        "config %s" % (len(entries), len(train), len(held), len(src_tokens), len(tgt_tokens), json.dumps(cfg)))
    t0 = time.time()
    held_src = [[S[c] for c in w] for w, _ in held]
    held_ref = [ps for _, ps in held]
    model.eval()      # no dropout (see above); gradients still flow
    for epoch in range(a.epochs):
        # batches of words of similar length: less padding, same content
        order = sorted(range(len(train)), key=lambda i: (len(train[i][0]) + random.random()))
        batches = [order[i:i + 256] for i in range(0, len(order), 256)]
        random.shuffle(batches)
        total = 0.0
        for b in batches:
            src, tgt = pad([train[i][0] for i in b]), pad([train[i][1] for i in b])
            loss = loss_of(model, src, tgt, 0.1)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            total += float(loss)
        hyp = greedy_batch(model, held_src, 2, 3, 24)
        acc, per = g2p_data.scores([[tgt_tokens[i] for i in h] for h in hyp], held_ref)
        say("epoch %2d  loss %.4f  held-out greedy: word accuracy %.4f, phone error rate %.4f  (%.0f s)"
            % (epoch + 1, total / len(batches), acc, per, time.time() - t0))
        os.makedirs(a.outdir, exist_ok=True)
        torch.save(model.state_dict(), os.path.join(a.outdir, "model.pt"))   # every epoch: a usable model
        with open(os.path.join(a.outdir, "config.json"), "w") as f:
            json.dump(cfg, f, indent=1)
        write_vocab(os.path.join(a.outdir, "src"), src_tokens,
                    {"type": "Split", "pattern": {"Regex": "."}, "behavior": "Isolated", "invert": False}, False)
        write_vocab(os.path.join(a.outdir, "tgt"), tgt_tokens, {"type": "WhitespaceSplit"}, True)
        with open(os.path.join(a.outdir, "train.log"), "w") as f:
            f.write("\n".join(log) + "\n")


if __name__ == "__main__":
    main()
