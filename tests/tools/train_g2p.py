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
  train.log      loss per epoch, held-out greedy word accuracy and phone error rate; at the end the final
                 model's held-out word accuracy and phone error rate in torch, greedy and beam 4

    /usr/bin/python3 tests/tools/train_g2p.py tests/data/g2p [--epochs 8] [--minutes M]
    /usr/bin/python3 tests/tools/train_g2p.py tests/data/g2p --evaluate      (only the final evaluation)
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


def write_outputs(outdir, model, cfg, src_tokens, tgt_tokens, log):
    os.makedirs(outdir, exist_ok=True)
    torch.save(model.state_dict(), os.path.join(outdir, "model.pt"))
    with open(os.path.join(outdir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    g2p_data.write_tokenizer(os.path.join(outdir, "src"), src_tokens, "src")
    g2p_data.write_tokenizer(os.path.join(outdir, "tgt"), tgt_tokens, "tgt")
    with open(os.path.join(outdir, "train.log"), "w") as f:
        f.write("\n".join(log) + "\n")


def evaluate(outdir, beam=4):
    """The model in outdir on the held-out words, greedy and beam `beam` (length penalty 1), in torch;
    appended to outdir/train.log."""
    torch.set_num_threads(2)
    model, cfg, sv, tv = g2p_data.load_model(outdir)
    inv = {i: t for t, i in tv.items()}
    held = [(w, ps) for w, ps in g2p_data.read_cmudict() if g2p_data.held_out(w)]
    srcs, refs = [[sv[c] for c in w] for w, _ in held], [ps for _, ps in held]
    bos, eos, max_new = tv["<s>"], tv["</s>"], cfg["max_len"] - 1
    lines = []
    t0 = time.time()
    greedy = [[inv[i] for i in h] for h in g2p_data.greedy_decode_batch(model, srcs, bos, eos, max_new)]
    lines.append("final, %d held-out words, torch: greedy  word accuracy %.4f, phone error rate %.4f  (%.0f s)"
                 % (len(held), g2p_data.word_accuracy(greedy, refs), g2p_data.phone_error_rate(greedy, refs),
                    time.time() - t0))
    print(lines[-1], flush=True)
    t0 = time.time()
    beamed = [[inv[i] for i in g2p_data.beam_decode(model, s, bos, eos, max_new, beam)] for s in srcs]
    lines.append("final, %d held-out words, torch: beam %d  word accuracy %.4f, phone error rate %.4f  "
                 "(length penalty 1, %.0f s)" % (len(held), beam, g2p_data.word_accuracy(beamed, refs),
                                                 g2p_data.phone_error_rate(beamed, refs), time.time() - t0))
    print(lines[-1], flush=True)
    with open(os.path.join(outdir, "train.log"), "a") as f:
        f.write("\n".join(lines) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("outdir")
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--minutes", type=float, default=0, help="stop after the epoch that passes this (0: no limit)")
    ap.add_argument("--evaluate", action="store_true", help="no training: evaluate the model in OUTDIR")
    a = ap.parse_args()
    if a.evaluate:
        evaluate(a.outdir)
        return
    torch.manual_seed(0)
    random.seed(0)
    torch.set_num_threads(2)
    entries = g2p_data.read_cmudict()
    src_tokens, tgt_tokens = g2p_data.vocabularies(entries)
    S, T = {t: i for i, t in enumerate(src_tokens)}, {t: i for i, t in enumerate(tgt_tokens)}
    cfg = make_config(d_model=128, nhead=4, num_encoder_layers=2, num_decoder_layers=2, dim_feedforward=512,
                      src_vocab_size=len(src_tokens), tgt_vocab_size=len(tgt_tokens), max_len=32)
    # a word longer than max_len characters, or longer than max_len - 2 phones, is skipped (none in 0.4)
    entries = [(w, ps) for w, ps in entries if len(w) <= cfg["max_len"] and len(ps) + 2 <= cfg["max_len"]]
    train = [([S[c] for c in w], [2] + [T[p] for p in ps] + [3]) for w, ps in entries if not g2p_data.held_out(w)]
    held = [(w, ps) for w, ps in entries if g2p_data.held_out(w)]
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
        hyp = g2p_data.greedy_decode_batch(model, held_src, 2, 3, cfg["max_len"] - 1)
        acc, per = g2p_data.scores([[tgt_tokens[i] for i in h] for h in hyp], held_ref)
        say("epoch %2d  loss %.4f  held-out greedy: word accuracy %.4f, phone error rate %.4f  (%.0f s)"
            % (epoch + 1, total / len(batches), acc, per, time.time() - t0))
        write_outputs(a.outdir, model, cfg, src_tokens, tgt_tokens, log)   # every epoch: a usable model
        if a.minutes and time.time() - t0 > 60 * a.minutes:
            say("stopping: past %g minutes" % a.minutes)
            write_outputs(a.outdir, model, cfg, src_tokens, tgt_tokens, log)
            break
    evaluate(a.outdir)


if __name__ == "__main__":
    main()
