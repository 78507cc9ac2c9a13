#!/usr/bin/python3
"""test_seq2seq.py — `qmap run` on encoder-decoders (seq2seq) against PyTorch's nn.Transformer (issue 14 §2).

Random-init models of the translation tutorial's layout (tests/models/seq2seq.py) — post-norm with ReLU,
and pre-norm (norm_first) with GELU — saved with torch.save, word-level vocabularies written here, converted:
  - teacher-forced logits (tests/run/s2s_logits.c, the public API) within 1e-4 (relative to the largest
    logit) of torch's forward in F32 with an F32 KV cache, 1e-3 with the F16 cache; F16 containers within
    1e-5 and Q8_ROW within 5e-4 of torch running the same F16-rounded / dequantized weights; 1 and 2 threads
    the same bits;
  - greedy decoding (`qmap run --tokens … --json`) gives torch's greedy ids on every one of 20 sources;
  - beam search: beam 1 equals greedy, beam 4's best hypothesis scores at least greedy's under the model
    (log P / length), --n-best 3 lists three hypotheses best first;
  - -f FILE with several lines per batch gives what each line gives alone.
The shipped G2P model (tests/data/g2p, trained by tests/tools/train_g2p.py on the CMU dictionary of
Debian's festlex-cmu), when present, on the held-out words: F32 greedy output identical to torch's greedy
on every word, beam 4 identical to torch's beam search by the same rule on the first 150, word accuracy and phone error rate printed for F32, Q8_ROW and beam 4; Q8_ROW word accuracy
within 1 point of F32, beam 4 at least as accurate as greedy.
Errors: a source id outside the vocabulary, a container without its target vocabulary, characters outside
the source vocabulary (read as <unk>, said once).
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))

from checks import Checks, fresh_dir  # noqa: E402
import spec_writer  # noqa: E402
from models import seq2seq as s2s  # noqa: E402
sys.path.insert(0, os.path.join(ROOT, "tests", "tools"))
import g2p_data  # noqa: E402  (greedy decoding in torch, the G2P data rules)
from wordlevel import SPLIT_WHITESPACE, write_wordlevel  # noqa: E402


def run(*args, **kw):
    return subprocess.run(list(args), capture_output=True, **kw)


def rel(a, b):
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


def weights_as(model, how):
    """A copy whose 2-D float weights (what quantize selects) hold what the container stores."""
    import copy
    m = copy.deepcopy(model)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if p.dim() != 2:
                continue
            w = p.detach().numpy().astype(np.float32)
            if how == "f16":
                d = w.astype(np.float16).astype(np.float32)
            else:
                q, s, _ = spec_writer.quantize_q8row(np.ascontiguousarray(w))
                d = q.astype(np.float32) * s.astype(np.float32)[:, None]
            p.copy_(torch.from_numpy(d))
    return m


class Suite:
    def __init__(self, a):
        self.c = Checks(None)
        self.qmap, self.tool = a.qmap, a.tool
        self.d = fresh_dir(a.workdir)

    def logits(self, path, src, tgt, *extra):
        r = run(self.tool, path, " ".join(map(str, src)), " ".join(map(str, tgt)), *extra)
        if r.returncode != 0:
            return None, r.stderr.decode().strip()
        return np.frombuffer(r.stdout, np.float32), ""

    def translate(self, path, src_ids, *extra):
        r = run(self.qmap, "run", path, "--tokens", " ".join(map(str, src_ids)), "--json", "-q", *extra, text=True)
        if r.returncode != 0:
            return None, r.stderr.strip()
        return json.loads(r.stdout)["translations"][0], ""

    def random_model(self, name, **over):
        c = self.c
        model, cfg = s2s.build(seed=len(name), **over)
        src = fresh_dir(os.path.join(self.d, name))
        torch.save(model.state_dict(), os.path.join(src, "model.pt"))
        with open(os.path.join(src, "config.json"), "w") as f:
            json.dump(cfg, f)
        sv, tv = cfg["src_vocab_size"], cfg["tgt_vocab_size"]
        src_tok = write_wordlevel(os.path.join(src, "src"), ["<pad>", "<unk>"] + ["s%d" % i for i in range(2, sv)],
                                  SPLIT_WHITESPACE, False)
        tgt_tok = write_wordlevel(os.path.join(src, "tgt"), ["<pad>", "<unk>", "<s>", "</s>"] +
                                  ["t%d" % i for i in range(4, tv)], SPLIT_WHITESPACE, True)
        f32 = os.path.join(self.d, name + ".qmap")
        r = run(self.qmap, "convert", os.path.join(src, "model.pt"), "--src-tokenizer", src_tok, "--tgt-tokenizer",
                tgt_tok, "-o", f32, "-q", text=True)
        if not c.check(name, "convert with both vocabularies", r.returncode == 0, r.stderr.strip()):
            return None
        paths = {"f32": f32}
        for how in ("f16", "q8"):
            paths[how] = os.path.join(self.d, "%s-%s.qmap" % (name, how))
            r = run(self.qmap, "quantize", "--" + how, f32, "-o", paths[how], "-q", text=True)
            c.check(name, "quantize --" + how, r.returncode == 0, r.stderr.strip())
        return model, cfg, paths

    def parity(self, name, **over):
        c = self.c
        got = self.random_model(name, **over)
        if not got:
            return
        model, cfg, paths = got
        rng = np.random.RandomState(len(name))
        tv = cfg["tgt_vocab_size"]
        for trial in range(3):
            src = rng.randint(2, cfg["src_vocab_size"], size=rng.randint(3, 20)).tolist()
            tgt = [2] + rng.randint(4, tv, size=rng.randint(2, 15)).tolist()
            with torch.no_grad():
                ref = model(torch.tensor([src]), torch.tensor([tgt]))[0].numpy().astype(np.float64)
            out, err = self.logits(paths["f32"], src, tgt, "f32")
            if c.check(name, "teacher-forced logits (F32 cache)", out is not None, err):
                e = rel(out.reshape(-1, tv), ref)
                c.check(name, "F32 logits within 1e-4 of torch, trial %d (%.1e)" % (trial, e), e < 1e-4)
            out16, err = self.logits(paths["f32"], src, tgt, "f16")
            if c.check(name, "teacher-forced logits (F16 cache)", out16 is not None, err):
                e = rel(out16.reshape(-1, tv), ref)
                c.check(name, "F32 weights, F16 cache within 1e-3 of torch, trial %d (%.1e)" % (trial, e), e < 1e-3)
            if trial == 0:
                o1, _ = self.logits(paths["f32"], src, tgt, "f32", "1")
                o2, _ = self.logits(paths["f32"], src, tgt, "f32", "2")
                c.check(name, "1 and 2 threads give the same bits", o1 is not None and o2 is not None
                        and np.array_equal(o1, o2))
                for how in ("f16", "q8"):
                    with torch.no_grad():
                        refq = weights_as(model, how)(torch.tensor([src]), torch.tensor([tgt]))[0].numpy()
                    oq, err = self.logits(paths[how], src, tgt, "f32")
                    if c.check(name, how + " logits", oq is not None, err):
                        e = rel(oq.reshape(-1, tv), refq.astype(np.float64))
                        tol = 1e-5 if how == "f16" else 5e-4   # Q8_ROW: two int8 terms for X (qr_matmul.h)
                        c.check(name, "%s within %g of torch on the same weights (%.1e)" % (how.upper(), tol, e), e < tol)
        # greedy, beam
        same, n = 0, 20
        for i in range(n):
            src = rng.randint(2, cfg["src_vocab_size"], size=rng.randint(3, 20)).tolist()
            ref = model.greedy_decode(torch.tensor([src]), cfg["max_len"] - 1, 2, 3)
            if ref and ref[-1] == 3:
                ref = ref[:-1]
            out, err = self.translate(paths["f32"], src, "--kv", "f32")
            if out is None:
                c.check(name, "greedy translation runs", False, err)
                return
            same += out[0]["ids"] == ref
            if i < 5:
                b1, _ = self.translate(paths["f32"], src, "--kv", "f32", "--beam", "1")
                b4, _ = self.translate(paths["f32"], src, "--kv", "f32", "--beam", "4", "--n-best", "3")
                c.check(name, "source %d: --beam 1 equals greedy" % i, b1 is not None and b1[0]["ids"] == out[0]["ids"])
                ok = b4 is not None and len(b4) == 3 and b4[0]["score"] >= out[0]["score"] - 1e-5 \
                    and b4[0]["score"] >= b4[1]["score"] >= b4[2]["score"]
                c.check(name, "source %d: beam 4 scores at least greedy's, 3 best first" % i, ok,
                        "" if b4 is None else str([h["score"] for h in b4]) + " greedy %s" % out[0]["score"])
        c.check(name, "greedy ids equal torch's greedy on %d of %d sources" % (same, n), same == n)
        # a file of several lines gives what each line gives alone
        lines = [" ".join("s%d" % v for v in rng.randint(2, cfg["src_vocab_size"], size=rng.randint(2, 12)))
                 for _ in range(7)]
        fp = os.path.join(self.d, name + "-lines.txt")
        with open(fp, "w") as f:
            f.write("\n".join(lines) + "\n")
        r = run(self.qmap, "run", paths["f32"], "-f", fp, "-b", "3", "-q", text=True)
        alone = [run(self.qmap, "run", paths["f32"], "-p", ln, "-q", text=True).stdout.strip() for ln in lines]
        c.check(name, "-f with 3 lines per batch = each line alone", r.returncode == 0
                and r.stdout.strip().split("\n") == alone, r.stderr.strip())
        return paths

    def errors(self, paths):
        c = self.c
        r = run(self.qmap, "run", paths["f32"], "--tokens", "5 99999", text=True)
        c.check("errors", "a source id outside the vocabulary is named", r.returncode == 1 and "99999" in r.stderr,
                r.stderr.strip())
        r = run(self.qmap, "run", paths["f32"], "-p", "s5 nosuchword s7", text=True)
        c.check("errors", "a word outside the source vocabulary is read as <unk>, said once",
                r.returncode == 0 and r.stderr.count("unknown token") == 1, r.stderr.strip())
        # a container without its target vocabulary
        src = os.path.join(self.d, "post-relu")
        out = os.path.join(self.d, "no-tgt.qmap")
        r = run(self.qmap, "convert", os.path.join(src, "model.pt"), "--src-tokenizer",
                os.path.join(src, "src", "tokenizer.json"), "-o", out, "-q", text=True)
        if r.returncode == 0:
            r = run(self.qmap, "run", out, "-p", "s5 s6", text=True)
            c.check("errors", "a container without the target vocabulary says what is missing", r.returncode == 1
                    and "tgt" in r.stderr, r.stderr.strip())
        else:
            c.check("errors", "convert refuses a seq2seq with only a source vocabulary, saying so",
                    "tgt" in r.stderr, r.stderr.strip())


def numbers_cases(s):
    """The shipped number-words -> digits models (tests/tools/train_numbers.py): every number 0 .. 9999."""
    c = s.c
    import train_numbers as tn
    words = [tn.words(n) for n in range(10000)]
    wp = os.path.join(s.d, "numbers.txt")
    with open(wp, "w") as f:
        f.write("\n".join(words) + "\n")
    for name in ("post-relu", "pre-gelu"):
        src_dir = os.path.join(ROOT, "tests", "data", "numbers", name)
        tag = "numbers/" + name
        with open(os.path.join(src_dir, "config.json")) as f:
            cfg = json.load(f)
        f32 = os.path.join(s.d, "numbers-%s.qmap" % name)
        r = run(s.qmap, "convert", os.path.join(src_dir, "model.pt"), "--src-tokenizer",
                os.path.join(src_dir, "src", "tokenizer.json"), "--tgt-tokenizer",
                os.path.join(src_dir, "tgt", "tokenizer.json"), "-o", f32, "-q", text=True)
        if not c.check(tag, "convert", r.returncode == 0, r.stderr.strip()):
            continue
        q8 = f32.replace(".qmap", "-q8.qmap")
        r = run(s.qmap, "quantize", "--q8", f32, "-o", q8, "-q", text=True)
        c.check(tag, "quantize --q8", r.returncode == 0, r.stderr.strip())
        model = s2s.Seq2SeqTransformer(cfg)
        model.load_state_dict(torch.load(os.path.join(src_dir, "model.pt")))
        model.eval()
        srcs = [[tn.SRC_TOKENS.index(w) for w in ws.split()] for ws in words]
        ref = g2p_data.greedy_decode_batch(model, srcs, 2, 3, 8)
        ref_text = [" ".join(tn.TGT_TOKENS[i] for i in seq) for seq in ref]
        truth = [tn.digits(n) for n in range(10000)]
        outs = {}
        for how, path in (("F32", f32), ("Q8_ROW", q8)):
            r = run(s.qmap, "run", path, "-f", wp, "-b", "256", text=True)
            lines = r.stdout.rstrip("\n").split("\n")
            if not c.check(tag, "%s translates the 10,000 numbers" % how, r.returncode == 0 and len(lines) == 10000,
                           r.stderr.strip()):
                continue
            outs[how] = lines
            speed = r.stderr.strip().split("\n")[-1]
            right = [sum(lines[n] == truth[n] for n in range(10000) if tn.held_out(n) == h) for h in (False, True)]
            n_held = sum(tn.held_out(n) for n in range(10000))
            print("     %s %s: exact on %d/%d training numbers, %d/%d held-out; %s"
                  % (name, how, right[0], 10000 - n_held, right[1], n_held, speed.replace("qmap run: ", "")))
        if "F32" in outs:
            diff = sum(a != b for a, b in zip(outs["F32"], ref_text))
            c.check(tag, "F32 output equals torch's greedy on every number (%d differ)" % diff, diff == 0)
            exact = sum(a == b for a, b in zip(outs["F32"], truth))
            c.check(tag, "F32 writes the exact digits of at least 99%% of the numbers (%d)" % exact, exact >= 9900)
        if "F32" in outs and "Q8_ROW" in outs:
            q = sum(a == b for a, b in zip(outs["Q8_ROW"], truth))
            f = sum(a == b for a, b in zip(outs["F32"], truth))
            c.check(tag, "Q8_ROW exact within 0.5 points of F32 (%d vs %d)" % (q, f), q >= f - 50)


def g2p_cases(s):
    """The shipped G2P model (tests/data/g2p) on its held-out words (tests/tools/g2p_data.py)."""
    c = s.c
    src_dir = os.path.join(ROOT, "tests", "data", "g2p")
    if not os.path.exists(os.path.join(src_dir, "model.pt")):
        c.check("g2p", "the shipped model is present", False, src_dir)
        return
    entries = g2p_data.read_cmudict()
    held = [(w, ps) for w, ps in entries if g2p_data.held_out(w)]
    words = [w for w, _ in held]
    refs = [ps for _, ps in held]
    wp = os.path.join(s.d, "g2p-held-out.txt")
    with open(wp, "w") as f:
        f.write("\n".join(words) + "\n")
    f32, q8 = os.path.join(s.d, "g2p.qmap"), os.path.join(s.d, "g2p-q8.qmap")
    r = run(s.qmap, "convert", os.path.join(src_dir, "model.pt"), "--src-tokenizer",
            os.path.join(src_dir, "src", "tokenizer.json"), "--tgt-tokenizer",
            os.path.join(src_dir, "tgt", "tokenizer.json"), "-o", f32, "-q", text=True)
    if not c.check("g2p", "convert", r.returncode == 0, r.stderr.strip()):
        return
    r = run(s.qmap, "quantize", "--q8", f32, "-o", q8, "-q", text=True)
    c.check("g2p", "quantize --q8", r.returncode == 0, r.stderr.strip())
    model, cfg, sv, tv = g2p_data.load_model(src_dir)
    inv = {i: t for t, i in tv.items()}
    torch.set_num_threads(2)
    ref_ids = g2p_data.greedy_decode_batch(model, [[sv[ch] for ch in w] for w in words], tv["<s>"], tv["</s>"],
                                 cfg["max_len"] - 1)
    torch_out = [[inv[i] for i in ids] for ids in ref_ids]
    torch.set_num_threads(1)
    acc, per = {}, {}
    outs = {}
    for tag, path, extra in (("F32 greedy", f32, ()), ("Q8_ROW greedy", q8, ()), ("F32 beam 4", f32, ("--beam", "4")),
                             ("Q8_ROW beam 4", q8, ("--beam", "4"))):
        r = run(s.qmap, "run", path, "-f", wp, "-b", "256", *extra, text=True)
        lines = r.stdout.rstrip("\n").split("\n")
        if not c.check("g2p", "%s on the %d held-out words" % (tag, len(words)), r.returncode == 0
                       and len(lines) == len(words), r.stderr.strip()[-300:]):
            continue
        outs[tag] = [ln.split() for ln in lines]
        acc[tag], per[tag] = g2p_data.scores(outs[tag], refs)
        print("     G2P %-14s word accuracy %.2f%%, phone error rate %.2f%%   (%s)"
              % (tag, 100 * acc[tag], 100 * per[tag], r.stderr.strip().split("\n")[-1].replace("qmap run: ", "")))
    ta, tp = g2p_data.scores(torch_out, refs)
    print("     G2P torch greedy   word accuracy %.2f%%, phone error rate %.2f%%" % (100 * ta, 100 * tp))
    if "F32 greedy" in outs:
        diff = [w for w, o, t in zip(words, outs["F32 greedy"], torch_out) if o != t]
        c.check("g2p", "F32 greedy output identical to torch's greedy on every held-out word (%d differ%s)"
                % (len(diff), ": " + ", ".join(diff[:5]) if diff else ""), not diff)
    if "F32 beam 4" in outs:
        # torch beam search by the same rule (tests/tools/g2p_data.py beam_search = runtime/qr_beam.h), on the
        # first 150 words (torch takes 30 ms a word)
        n_b = 150
        tb = [[inv[i] for i in g2p_data.beam_decode(model, [sv[ch] for ch in w], tv["<s>"], tv["</s>"],
                                                      cfg["max_len"] - 1, 4)] for w in words[:n_b]]
        diff = [w for w, o, t in zip(words[:n_b], outs["F32 beam 4"][:n_b], tb) if o != t]
        c.check("g2p", "F32 beam 4 identical to torch's beam search (same rule) on the first %d words (%d differ%s)"
                % (n_b, len(diff), ": " + ", ".join(diff[:5]) if diff else ""), not diff)
    if "F32 greedy" in acc and "Q8_ROW greedy" in acc:
        c.check("g2p", "Q8_ROW word accuracy within 1 point of F32 (%.2f vs %.2f)"
                % (100 * acc["Q8_ROW greedy"], 100 * acc["F32 greedy"]), acc["Q8_ROW greedy"] >= acc["F32 greedy"] - 0.01)
    if "F32 greedy" in acc and "F32 beam 4" in acc:
        c.check("g2p", "beam 4 at least as accurate as greedy (%.2f vs %.2f)"
                % (100 * acc["F32 beam 4"], 100 * acc["F32 greedy"]), acc["F32 beam 4"] >= acc["F32 greedy"])
    r = run(s.qmap, "run", f32, "-p", "qmap", text=True)
    c.check("g2p", "-p WORD prints its phones", r.returncode == 0 and len(r.stdout.split()) >= 3, r.stderr.strip())
    r = run(s.qmap, "run", f32, "-p", "caf\u00e9s", text=True)
    c.check("g2p", "a character outside the source vocabulary is read as <unk>, said once",
            r.returncode == 0 and r.stderr.count("unknown token") == 1, r.stderr.strip())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--qmap", required=True)
    ap.add_argument("--tool", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--quick", action="store_true", help="random models only (the sanitizer pass)")
    a = ap.parse_args()
    torch.set_num_threads(1)
    s = Suite(a)
    paths = s.parity("post-relu")
    s.parity("pre-gelu", norm_first=True, activation="gelu", d_model=48, nhead=3, num_encoder_layers=3)
    if paths:
        s.errors(paths)
    numbers_cases(s)
    if not a.quick:
        g2p_cases(s)
    return s.c.finish()


if __name__ == "__main__":
    sys.exit(main())
