#!/usr/bin/python3
"""train_kjv_llama.py — train the small Llama that ships in tests/data/kjv_llama (issue 16 §2).

Corpus: the King James Bible of Debian's bible-kjv, split by tests/tools/kjv_data.py (every 7th book held
out). Tokenizer: a SentencePiece BPE trained with python3-sentencepiece on the training books' verses (one
verse a sentence): vocab 4096, byte fallback, identity normalization, whitespace kept as it is, a dummy
prefix, unk 0 / bos 1 / eos 2, no pad (Llama's layout). Model: tests/models/llama.py's LlamaForCausalLM
(Hugging Face names; RMSNorm, RoPE, GQA 8 heads / 2 kv heads, SwiGLU, untied head), dim 256, 4 layers,
feed-forward 688, 4.87 M parameters. Each training book is encoded as one text (BOS, then its verses with
their newlines) and the books are concatenated; a batch is random windows of 257 tokens whose first token is
replaced by BOS, as llama.cpp's perplexity evaluates a window. AdamW (betas 0.9/0.95, weight decay 0.1 on
matrices), linear warm-up then cosine decay to a tenth, gradient clipping at 1, no dropout, fixed seeds,
torch on 2 threads. Writes into OUTDIR:
  tokenizer.model    the SentencePiece model (ModelProto)
  pytorch_model.bin  torch.save(state_dict), float32, Hugging Face key names
  config.json        LlamaForCausalLM config
  train.log          command line, sizes, train loss and held-out loss during training, wall time, and the
                     final held-out perplexity in torch by llama.cpp's method (-c 256: windows of 256 tokens
                     from the held-out text's ids without BOS, first token replaced by BOS, second half scored)

    /usr/bin/python3 tests/tools/train_kjv_llama.py tests/data/kjv_llama --steps N
    /usr/bin/python3 tests/tools/train_kjv_llama.py tests/data/kjv_llama --measure 5   (time 5 steps, write nothing)
    /usr/bin/python3 tests/tools/train_kjv_llama.py tests/data/kjv_llama --evaluate    (only the final perplexity)
"""
import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
import kjv_data  # noqa: E402
from models.llama import LlamaForCausalLM, make_config  # noqa: E402

VOCAB = 4096
SEQ = 256
BOS = 1


def config():
    return make_config("llama", vocab_size=VOCAB, hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                       num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=512,
                       rope_theta=10000.0, rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2)


def train_tokenizer(outdir, train_books):
    import sentencepiece as spm
    tmp = tempfile.mkdtemp()
    try:
        src = os.path.join(tmp, "train.txt")
        with open(src, "w", encoding="utf-8") as f:
            for _, text in train_books:
                f.write(text)
        spm.SentencePieceTrainer.train(
            input=src, model_prefix=os.path.join(tmp, "tokenizer"), vocab_size=VOCAB, model_type="bpe",
            byte_fallback=True, normalization_rule_name="identity", remove_extra_whitespaces=False,
            add_dummy_prefix=True, unk_id=0, bos_id=1, eos_id=2, pad_id=-1, character_coverage=1.0,
            num_threads=2, input_sentence_size=0, shuffle_input_sentence=False, minloglevel=2)
        shutil.copy(os.path.join(tmp, "tokenizer.model"), os.path.join(outdir, "tokenizer.model"))
    finally:
        shutil.rmtree(tmp)


def load_tokenizer(outdir):
    import sentencepiece as spm
    return spm.SentencePieceProcessor(model_file=os.path.join(outdir, "tokenizer.model"))


def windows(ids, ctx, bos=BOS):
    """llama.cpp's perplexity windows: non-overlapping, first token replaced by BOS."""
    out = []
    for k in range(len(ids) // ctx):
        w = list(ids[k * ctx:(k + 1) * ctx])
        w[0] = bos
        out.append(w)
    return out


def window_nll(model, wins, ctx, batch=16):
    """Per-token negative log-likelihoods of the second half of each window (llama.cpp's scored tokens:
    logits at positions ctx/2 .. ctx-2 predicting the next token), as a float64 tensor."""
    out = []
    with torch.no_grad():
        for i in range(0, len(wins), batch):
            x = torch.tensor(wins[i:i + batch])
            lp = torch.log_softmax(model(x).double(), dim=-1)
            first = ctx // 2
            tgt = x[:, first + 1:]
            out.append(-lp[:, first:ctx - 1].gather(-1, tgt.unsqueeze(-1)).squeeze(-1).reshape(-1))
    return torch.cat(out)


def perplexity(model, ids, ctx=SEQ):
    """(ppl, its standard error as llama.cpp computes it, windows, scored tokens)."""
    nll = window_nll(model, windows(ids, ctx), ctx)
    n = nll.numel()
    mean = float(nll.mean())
    err = float(nll.std(unbiased=False)) / math.sqrt(max(n - 1, 1))
    ppl = math.exp(mean)
    return ppl, ppl * err, len(ids) // ctx, n


def init_weights(model, n_layers):
    for name, p in model.named_parameters():
        if p.dim() < 2:
            continue
        std = 0.02
        if name.endswith("o_proj.weight") or name.endswith("down_proj.weight"):
            std = 0.02 / math.sqrt(2 * n_layers)
        torch.nn.init.normal_(p, 0.0, std)


def encode_books(sp, books):
    stream = []
    for _, text in books:
        stream.append(BOS)
        stream.extend(sp.encode(text))
    return torch.tensor(stream, dtype=torch.long)


def lr_at(step, steps, peak, warmup):
    if step < warmup:
        return peak * (step + 1) / warmup
    t = (step - warmup) / max(1, steps - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("outdir")
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=16, help="windows of %d tokens per step" % SEQ)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--eval-every", type=int, default=200)
    ap.add_argument("--eval-windows", type=int, default=64, help="held-out windows for the running loss")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--measure", type=int, default=0, help="time this many steps and exit")
    ap.add_argument("--evaluate", action="store_true", help="only the final held-out perplexity")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    t_start = time.time()
    os.makedirs(a.outdir, exist_ok=True)
    books = kjv_data.read_books()
    train_books, held_books = kjv_data.split(books)
    cfg = config()
    log_path = os.path.join(a.outdir, "train.log")

    if a.evaluate:
        sp = load_tokenizer(a.outdir)
        model = LlamaForCausalLM(cfg)
        model.load_state_dict(torch.load(os.path.join(a.outdir, "pytorch_model.bin")))
        model.eval()
        ids = sp.encode(kjv_data.heldout_text(books))
        ppl, err, nw, n = perplexity(model, ids)
        print("held-out perplexity (torch, -c %d, %d windows, %d scored tokens): %.4f +/- %.4f"
              % (SEQ, nw, n, ppl, err))
        return

    log_lines = []

    def log(s):
        print(s)
        sys.stdout.flush()
        log_lines.append(s)
        if not a.measure:
            with open(log_path, "w") as f:
                f.write("\n".join(log_lines) + "\n")

    if not a.measure or not os.path.exists(os.path.join(a.outdir, "tokenizer.model")):
        train_tokenizer(a.outdir, train_books)
    sp = load_tokenizer(a.outdir)
    train_ids = encode_books(sp, train_books)
    held_ids = sp.encode(kjv_data.heldout_text(books))
    held_wins = windows(held_ids, SEQ)
    g = torch.Generator().manual_seed(a.seed)
    eval_pick = torch.randperm(len(held_wins), generator=g)[:a.eval_windows].tolist()
    eval_wins = [held_wins[i] for i in sorted(eval_pick)]

    model = LlamaForCausalLM(cfg)
    init_weights(model, cfg["num_hidden_layers"])
    n_params = sum(p.numel() for p in model.parameters())
    log("command: %s" % " ".join(["/usr/bin/python3"] + sys.argv))
    log("corpus: bible-kjv, %d books; training %d books (%d bytes, %d tokens with a BOS per book), held out %d "
        "books %s (%d bytes, %d tokens, %d windows of %d)"
        % (len(books), len(train_books), sum(len(t) for _, t in train_books), len(train_ids), len(held_books),
           " ".join(n for n, _ in held_books), sum(len(t) for _, t in held_books), len(held_ids),
           len(held_wins), SEQ))
    log("tokenizer: SentencePiece BPE, vocab %d, byte fallback, identity normalization, dummy prefix; "
        "%.2f bytes per token on the training books" % (sp.get_piece_size(),
                                                           sum(len(t) for _, t in train_books) / len(train_ids)))
    log("model: %s" % json.dumps(cfg))
    log("parameters: %d (%.2f MB as float32)" % (n_params, n_params * 4 / 1e6))
    log("training: %d steps x %d windows of %d tokens (%.2f M tokens, %.2f epochs), AdamW lr %g betas "
        "0.9/0.95 wd 0.1, warm-up %d, cosine to lr/10, clip 1.0, seed %d, %d threads"
        % (a.steps, a.batch, SEQ, a.steps * a.batch * SEQ / 1e6, a.steps * a.batch * SEQ / len(train_ids),
           a.lr, a.warmup, a.seed, a.threads))

    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    n_starts = len(train_ids) - (SEQ + 1)
    steps = a.measure or a.steps
    t0 = time.time()
    run_loss, run_n = 0.0, 0
    for step in range(steps):
        model.train()
        starts = torch.randint(0, n_starts, (a.batch,), generator=g)
        x = torch.stack([train_ids[s:s + SEQ + 1] for s in starts.tolist()])
        x[:, 0] = BOS
        for grp in opt.param_groups:
            grp["lr"] = lr_at(step, a.steps, a.lr, a.warmup)
        logits = model(x[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), x[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        run_loss += float(loss)
        run_n += 1
        if a.measure or (step + 1) % 10 == 0:
            print("step %d loss %.4f  %.2f s/step" % (step + 1, float(loss), (time.time() - t0) / (step + 1)))
            sys.stdout.flush()
        if a.measure:
            continue
        if (step + 1) % a.eval_every == 0 or step + 1 == a.steps:
            model.eval()
            nll = window_nll(model, eval_wins, SEQ)
            log("step %5d  lr %.2e  train loss %.4f  held-out loss %.4f (ppl %.2f, %d windows)  %.0f s"
                % (step + 1, lr_at(step, a.steps, a.lr, a.warmup), run_loss / run_n, float(nll.mean()),
                   math.exp(float(nll.mean())), len(eval_wins), time.time() - t0))
            run_loss, run_n = 0.0, 0
            torch.save(model.state_dict(), os.path.join(a.outdir, "pytorch_model.bin"))
    if a.measure:
        return
    t_train = time.time() - t0
    model.eval()
    sd = {k: v.contiguous() for k, v in model.state_dict().items()}
    torch.save(sd, os.path.join(a.outdir, "pytorch_model.bin"))
    with open(os.path.join(a.outdir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
        f.write("\n")
    t1 = time.time()
    ppl, err, nw, n = perplexity(model, held_ids)
    log("final held-out perplexity (torch, llama.cpp's method: -c %d, %d windows, BOS first, %d scored tokens): "
        "%.4f +/- %.4f  (%.0f s)" % (SEQ, nw, n, ppl, err, time.time() - t1))
    with torch.no_grad():
        ids = [BOS] + sp.encode("In the beginning")
        for _ in range(48):
            ids.append(int(model(torch.tensor([ids]))[0, -1].argmax()))
    log("greedy from \"In the beginning\": %r" % sp.decode(ids[1:]))
    sizes = {f: os.path.getsize(os.path.join(a.outdir, f)) for f in ("pytorch_model.bin", "config.json",
                                                                       "tokenizer.model")}
    log("files: %s; together %.2f MB" % (", ".join("%s %d" % kv for kv in sizes.items()), sum(sizes.values()) / 1e6))
    log("wall time: training %.0f s, total %.0f s" % (t_train, time.time() - t_start))


if __name__ == "__main__":
    main()
