#!/usr/bin/env python3
"""test_spm.py — SentencePiece tokenizer.model files read by `qmap convert` (convert/qc_spm.c,
spec/TOKENIZER.md §2.6) and encoded by qmap's runtime tokenizer, against python3-sentencepiece (issue 16 §1).

Material, made here and never committed: SentencePiece BPE models trained with python3-sentencepiece on
the King James Bible (Debian bible-kjv; every 10th verse held out), with what Llama 2 and Mistral use
(byte_fallback, identity normalizer, spaces kept), and variants: no dummy prefix; user-defined and control
symbols; no byte fallback. Each goes beside a tiny Llama checkpoint (tests/models) and is converted.

Checked:
- the stored metadata equals the model's: pieces in order, bos/eos/unk (sentencepiece's own ids), control
  pieces special, user-defined ones added, byte_fallback, add_bos (true when a bos exists; a
  tokenizer_config.json beside it still decides), prepend_scheme `first`; tokenizer.json is preferred to
  tokenizer.model in a directory; `--tokenizer X.model` takes any *.model name.
- `qmap tokenize --json --no-bos` gives sp.encode's ids token for token on hard strings (contractions,
  runs of spaces/tabs/newlines, leading/trailing spaces, digits, punctuation, emoji with ZWJ, flags, CJK,
  Thai, combining marks, the empty string, one space), on held-out verses one by one, and on ~300 KB of
  held-out text as one input: zero differing ids. decode(encode(x)) equals sp.decode(sp.encode(x)).
- The documented differences (spec §2.6) are exactly what they say: a literal control-piece string ("<s>")
  is read as the special token; a text that starts with a user-defined piece gets no lone U+2581 before it;
  without byte fallback a run of unknown characters is one unk in sentencepiece and one unk per
  character in qmap; qmap decodes unk as its piece.
- Refusals, each naming its field (and the byte offset where there is one): a unigram model, the nmt_nfkc
  normalizer, remove_extra_whitespaces true, an UNUSED piece, a truncated file, a flipped length varint,
  a group wire type.
"""
import argparse
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)
from checks import Checks, fresh_dir  # noqa: E402
import spm_proto as P  # noqa: E402

HARD = [
    "", " ", "  ", "Hello world", " Hello world", "Hello world ", "hello   world", "\tindented\ttabs\t",
    "line one\nline two\n\n\nthree", "\r\n windows \r\n", "it's I'm you're we've they'll he'd IT'S I'M YOU'RE",
    "don't DON'T Don't 'quoted' ''double''", "1 12 123 1234 12345 123456 1234567 12345678 123456789 1234567890",
    "3.14159 -42 +7 1e10 0x1F 1,000,000", "!!! ??? ... --- *** ((())) [[]] {{}} <<>>", "a.b,c;d:e!f?g",
    "email@example.com https://example.org/path?q=1&r=2#frag",
    "😀 😃👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 🇫🇷🇯🇵 ❤️", "日本語のテキスト、漢字とかな。", "中文文本测试，标点符号！", "한국어 텍스트",
    "ภาษาไทยไม่มีช่องว่าง", "Ελληνικά κείμενα", "Русский текст с ёжиком", "العربية من اليمين", "हिन्दी पाठ",
    "e\u0301 a\u0300 n\u0303 combining marks", "ﬁ ligature ℌ ℍ ①②", "\u00a0nbsp\u2003em\u3000ideo",
    "    leading four", "trailing four    ", "mixed \t\n spaces", "ALLCAPS lowercase MiXeD", "x" * 300,
    "And God said, Let there be light: and there was light.", "Ge1:1 In the beginning",
    "thee thou thine ye hath doth saith LORD Lord lord", "  And  the   LORD    spake     unto",
    "naïve café résumé", "\u2581 a visible space \u2581\u2581", "<< s >> <sx> </ s> <unk>", "\u200b zero width \u200d joiner",
]


USER_DEFINED = ["<sep>", "<mask>", "LORD", "{{", "ﬁ"]


def run(args, **kw):
    return subprocess.run(args, capture_output=True, text=True, **kw)


def kjv_split():
    text = run(["bible", "-f", "Gen1:1-Rev22:21"]).stdout
    lines = [l for l in text.split("\n") if l]
    train = [l for i, l in enumerate(lines) if i % 10]
    held = [l for i, l in enumerate(lines) if i % 10 == 0]
    return text, train, held


def train(spm, path_prefix, corpus, **over):
    opts = dict(input=corpus, model_prefix=path_prefix, vocab_size=3000, model_type="bpe", byte_fallback=True,
                normalization_rule_name="identity", remove_extra_whitespaces=False, input_sentence_size=20000,
                shuffle_input_sentence=True, num_threads=1, minloglevel=2)
    opts.update(over)
    spm.SentencePieceTrainer.train(**opts)
    return path_prefix + ".model"


def model_dir(d, name, n_vocab, tok_src, tok_name="tokenizer.model"):
    """A tiny Llama checkpoint with config.json and the tokenizer file beside it."""
    import torch
    from models import llama
    out = fresh_dir(os.path.join(d, name))
    m, c = llama.build(seed=1, variant="llama", vocab_size=n_vocab, hidden_size=16, intermediate_size=32,
                       num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1)
    torch.save(m.state_dict(), os.path.join(out, "pytorch_model.bin"))
    json.dump(c, open(os.path.join(out, "config.json"), "w"))
    if tok_src:
        shutil.copy(tok_src, os.path.join(out, tok_name))
    return out


def handmade_model(pieces):
    """A BPE ModelProto written field by field: <unk>, <s>, </s>, then `pieces` [(string, score, type)];
    identity normalizer, no dummy prefix, spaces kept."""
    top = []
    for p, score, typ in [("<unk>", 0.0, P.UNKNOWN), ("<s>", 0.0, P.CONTROL), ("</s>", 0.0, P.CONTROL)] + pieces:
        sub = [(1, 2, p.encode()), (2, 5, struct.pack("<f", score))] + ([(3, 0, typ)] if typ != P.NORMAL else [])
        top.append((1, 2, P.serialize(sub)))
    top.append((2, 2, P.serialize([(3, 0, 2), (40, 0, 0), (41, 0, 1), (42, 0, 2)])))
    top.append((3, 2, P.serialize([(1, 2, b"identity"), (3, 0, 0), (4, 0, 0), (5, 0, 1)])))
    return P.serialize(top)


def inspect_meta(qmap, path):
    j = json.loads(run([qmap, "inspect", "--json", "--max-items", "0", path]).stdout)
    md = j["metadata"]
    return {e["key"]: e["value"] for e in md} if isinstance(md, list) else md


def tokenize(qmap, cont, text, bos=False):
    r = run([qmap, "tokenize", cont, "-p", text, "--json"] + ([] if bos else ["--no-bos"]))
    if r.returncode:
        return "error: " + r.stderr
    return json.loads(r.stdout)


def tokenize_file(qmap, cont, path):
    r = run([qmap, "tokenize", cont, "-f", path, "--json", "--no-bos"])
    return json.loads(r.stdout) if r.returncode == 0 else "error: " + r.stderr


class Lib:
    """decode through libqmap (the CLI has no decode command)."""
    def __init__(self, path):
        from test_tokenizer_real import load_lib
        self.lib = load_lib(path)

    def model(self, cont):
        from test_tokenizer_real import Model
        return Model(self.lib, cont)


def expand_unk_runs(ids, pieces_of_text, unk):
    """sentencepiece without byte fallback joins a run of unknown pieces into one unk; qmap emits one per
    character. Given sp's pieces (out_type=str), the ids qmap is documented to give."""
    out = []
    for pid, piece in pieces_of_text:
        out.extend([unk] * len(piece) if pid == unk else [pid])
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--qmap", required=True)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("-k", dest="filt")
    args = ap.parse_args()
    import sentencepiece as spm
    c = Checks(args.filt)
    d = fresh_dir(args.workdir)

    full, train_lines, held = kjv_split()
    c.check("setup", "the King James Bible text is there (bible-kjv)", len(full) > 4_000_000, "%d bytes" % len(full))
    corpus = os.path.join(d, "train.txt")
    open(corpus, "w").write("\n".join(train_lines) + "\n")
    held_text = "\n".join(held)[:300_000]
    held_path = os.path.join(d, "held.txt")
    open(held_path, "w").write(held_text)

    t0 = time.perf_counter()
    models = {
        "main": train(spm, os.path.join(d, "main"), corpus),
        "nodummy": train(spm, os.path.join(d, "nodummy"), corpus, vocab_size=2000, add_dummy_prefix=False),
        "userdef": train(spm, os.path.join(d, "userdef"), corpus, vocab_size=2000,
                         user_defined_symbols=USER_DEFINED, control_symbols=["<ctl>"]),
        "nofallback": train(spm, os.path.join(d, "nofallback"), corpus, vocab_size=2000, byte_fallback=False),
    }
    print("trained %d models in %.1f s" % (len(models), time.perf_counter() - t0))
    lib = Lib(args.lib)

    for name, mpath in models.items():
        if not c.want(name):
            continue
        sp = spm.SentencePieceProcessor(model_file=mpath)
        n = sp.get_piece_size()
        md = model_dir(d, name, n, mpath)
        cont = os.path.join(d, name + ".qmap")
        t0 = time.perf_counter()
        r = run([args.qmap, "convert", os.path.join(md, "pytorch_model.bin"), "-o", cont, "--quiet"])
        secs = time.perf_counter() - t0
        if not c.check(name, "converts with tokenizer.model beside it (%.2f s)" % secs, r.returncode == 0, r.stderr):
            continue
        meta = inspect_meta(args.qmap, cont)
        tok = meta.get("tokenizer.tokens", [])
        pieces = [sp.id_to_piece(i) for i in range(n)]
        c.check(name, "kind bpe_sentencepiece, source tokenizer.model, %d tokens = the pieces in order" % n,
                meta.get("tokenizer.kind") == "bpe_sentencepiece" and meta.get("tokenizer.source") == "tokenizer.model"
                and tok == pieces, str({k: meta.get(k) for k in ("tokenizer.kind", "tokenizer.source")}))
        c.check(name, "bos/eos/unk are sentencepiece's (%d, %d, %d), no pad" % (sp.bos_id(), sp.eos_id(), sp.unk_id()),
                meta.get("tokenizer.bos_id") == sp.bos_id() and meta.get("tokenizer.eos_id") == sp.eos_id()
                and meta.get("tokenizer.unk_id") == sp.unk_id() and "tokenizer.pad_id" not in meta,
                str({k: meta.get(k) for k in ("tokenizer.bos_id", "tokenizer.eos_id", "tokenizer.unk_id", "tokenizer.pad_id")}))
        ctl = [i for i in range(n) if sp.is_control(i)]
        udef = [i for i in range(n) if sp.id_to_piece(i) in USER_DEFINED and name == "userdef"]
        c.check(name, "control pieces are special and added, user-defined ones added",
                meta.get("tokenizer.special_ids") == ctl and meta.get("tokenizer.added_ids") == sorted(ctl + udef),
                "%s %s" % (meta.get("tokenizer.special_ids"), meta.get("tokenizer.added_ids")))
        fb = name != "nofallback"
        dummy = name != "nodummy"
        c.check(name, "byte_fallback %s, add_bos true, add_eos false, add_prefix_space %s%s" %
                (fb, dummy, ", prepend_scheme first" if dummy else ""),
                meta.get("tokenizer.byte_fallback") is fb and meta.get("tokenizer.add_bos") is True
                and meta.get("tokenizer.add_eos") is False and meta.get("tokenizer.add_prefix_space") is dummy
                and meta.get("tokenizer.prepend_scheme") == ("first" if dummy else None)
                and meta.get("tokenizer.ignore_merges") is False,
                str({k: v for k, v in meta.items() if k.startswith("tokenizer.") and not isinstance(v, list)}))
        merges = meta.get("tokenizer.merges", [])
        c.check(name, "%d merges, each two pieces whose concatenation is a piece" % len(merges),
                len(merges) > n // 2 and all(m.count(" ") == 1 and m.replace(" ", "") in set(pieces) for m in merges))

        # --- ids against sp.encode
        unk = sp.unk_id()
        texts = HARD + (["<sep>x", "a<sep>b LORD{{c", "The LORD is my shepherd<mask>", "ﬁx"] if name == "userdef" else [])
        mismatch = []
        documented = 0
        for t in texts:
            mine = tokenize(args.qmap, cont, t)
            ref = sp.encode(t)
            if name == "nofallback" and unk in ref:
                # sentencepiece joins a run of unknown characters into one unk; qmap emits one per character
                ref = expand_unk_runs(ref, zip(ref, sp.encode(t, out_type=str)), unk)
                documented += mine == ref
            if name == "userdef" and any(t.startswith(u) for u in USER_DEFINED):
                # sentencepiece puts the dummy prefix U+2581 before the whole text, a lone piece before the
                # user-defined one; qmap's added-token split does not (spec §2.6)
                if ref[:1] == [sp.piece_to_id("\u2581")]:
                    ref = ref[1:]
                documented += mine == ref
            if mine != ref:
                mismatch.append((t, mine, ref))
        c.check(name, "qmap tokenize --json --no-bos = sp.encode on all %d hard strings" % len(texts), not mismatch,
                "; ".join("%r: qmap %s sp %s" % (t[:40], str(a)[:80], str(b)[:80]) for t, a, b in mismatch[:3]))
        if name in ("nofallback", "userdef"):
            c.check(name, "the documented differences are exactly as spec §2.6 says (%d texts)" % documented,
                    documented > 0)
        if name == "main":
            bad = [l for l in held[:300] if tokenize(args.qmap, cont, l) != sp.encode(l)]
            c.check(name, "ids equal on 300 held-out verses, each as its own text", not bad, repr(bad[:2]))
            # the one case where stored ranks could differ from sentencepiece's leftmost rule (spec §2.6): two
            # cuts of one piece overlapping, x‖y = y‖z; texts made of pieces that overlap themselves
            m = lib.model(cont)
            words = [sp.id_to_piece(i).replace("\u2581", " ") for i in range(n)
                     if not (sp.is_control(i) or sp.is_unknown(i) or sp.is_byte(i))]
            overlap = [w for w in words if any(w[k:] == w[:len(w) - k] for k in range(1, len(w)))]
            rng = random.Random(7)
            bad = []
            for _ in range(20000):
                t = "".join(rng.choice(overlap if rng.random() < 0.5 else words) for _ in range(rng.randint(1, 5)))
                if m.encode(t) != sp.encode(t):
                    bad.append(t)
            m.close()
            c.check(name, "ids equal on 20,000 random concatenations of pieces, half of them self-overlapping "
                    "(%d such pieces)" % len(overlap), not bad and len(overlap) > 10, repr(bad[:3]))
        mine = tokenize_file(args.qmap, cont, held_path)
        ref = sp.encode(held_text)
        if name == "nofallback":
            ref = expand_unk_runs(ref, zip(ref, sp.encode(held_text, out_type=str)), unk)
        ndiff = sum(a != b for a, b in zip(mine, ref)) + abs(len(mine) - len(ref)) if isinstance(mine, list) else -1
        c.check(name, "ids equal on %d KB of held-out KJV text as one input (%d ids, %d differ)" %
                (len(held_text) // 1000, len(ref), ndiff), mine == ref, str(mine)[:200])

        # --- decoding
        m = lib.model(cont)
        rt_bad = []
        for t in texts + held[:100]:
            ids = sp.encode(t)
            if unk in ids:
                continue   # sentencepiece decodes unk as " ⁇ ", qmap as its piece: documented, checked below
            if m.decode(ids).decode("utf-8") != sp.decode(ids):
                rt_bad.append(t)
        c.check(name, "decode(ids) == sp.decode(ids) on every text without unk", not rt_bad,
                "; ".join("%r -> %r vs %r" % (t[:30], m.decode(sp.encode(t))[:40], sp.decode(sp.encode(t))[:40])
                          for t in rt_bad[:3]))
        if name == "nofallback":
            ids = sp.encode("a 中 b")
            c.check(name, "qmap decodes unk as its piece, sentencepiece as \" \u2047 \" (documented)",
                    unk in ids and b"<unk>" in m.decode(ids) and "\u2047" in sp.decode(ids),
                    "%r %r" % (m.decode(ids), sp.decode(ids)))
        with_bos = tokenize(args.qmap, cont, "In the beginning", bos=True)
        c.check(name, "without --no-bos the bos comes first",
                with_bos == [sp.bos_id()] + sp.encode("In the beginning"), str(with_bos))
        sp_ids = tokenize(args.qmap, cont, "<s>")
        c.check(name, "a literal \"<s>\" is the bos token (documented: sentencepiece spells it out)",
                sp_ids == [sp.bos_id()], str(sp_ids))
        m.close()

    # --- the ways a tokenizer.model is found
    if c.want("find"):
        sp = spm.SentencePieceProcessor(model_file=models["main"])
        n = sp.get_piece_size()
        md = model_dir(d, "cfg", n, models["main"])
        json.dump({"add_bos_token": False, "add_eos_token": True}, open(os.path.join(md, "tokenizer_config.json"), "w"))
        out = os.path.join(d, "cfg.qmap")
        r = run([args.qmap, "convert", os.path.join(md, "pytorch_model.bin"), "-o", out, "--quiet"])
        meta = inspect_meta(args.qmap, out) if r.returncode == 0 else {}
        c.check("find", "tokenizer_config.json beside it decides add_bos/add_eos",
                meta.get("tokenizer.add_bos") is False and meta.get("tokenizer.add_eos") is True
                and meta.get("tokenizer.source") == "tokenizer.model,tokenizer_config.json", r.stderr + str(meta.get("tokenizer.source")))
        md = model_dir(d, "named", n, None)
        other = os.path.join(d, "named", "spm-kjv.model")
        shutil.copy(models["main"], other)
        r = run([args.qmap, "convert", os.path.join(md, "pytorch_model.bin"), "--tokenizer", other, "-o",
                 os.path.join(d, "named.qmap"), "--quiet"])
        meta = inspect_meta(args.qmap, os.path.join(d, "named.qmap")) if r.returncode == 0 else {}
        c.check("find", "--tokenizer spm-kjv.model takes the SentencePiece reader",
                meta.get("tokenizer.source") == "spm-kjv.model" and len(meta.get("tokenizer.tokens", [])) == n, r.stderr)
        # a directory with both: tokenizer.json first
        md = model_dir(d, "both", n, models["main"])
        from convert import savers
        savers.write_llama_tokenizer(md)
        r = run([args.qmap, "convert", os.path.join(md, "pytorch_model.bin"), "-o", os.path.join(d, "both.qmap"), "--quiet"])
        meta = inspect_meta(args.qmap, os.path.join(d, "both.qmap")) if r.returncode == 0 else {}
        c.check("find", "tokenizer.json is preferred to tokenizer.model", meta.get("tokenizer.source") == "tokenizer.json",
                r.stderr + str(meta.get("tokenizer.source")))

    # --- the tie case of spec §2.6 sought on purpose: models over {a, b} made of periodic pieces (aba, abab,
    # ...) with shuffled scores, where two cuts of one piece overlap most often
    if c.want("periodic"):
        rng = random.Random(11)
        subs = ["ab", "ba", "aba", "bab", "abab", "baba", "aab", "abb", "bba", "baa", "aa", "bb", "aaa", "bbb",
                "abba", "baab", "ababa"]
        md = model_dir(d, "periodic", 40, None)
        bad, n_models = [], 60
        for _ in range(n_models):
            chosen = rng.sample(subs, rng.randint(3, len(subs)))
            order = list(range(len(chosen)))
            rng.shuffle(order)
            blob = handmade_model([("a", -100.0, P.NORMAL), ("b", -101.0, P.NORMAL)] +
                                  [(w, -float(k), P.NORMAL) for w, k in zip(chosen, order)])
            open(os.path.join(md, "tokenizer.model"), "wb").write(blob)
            cont = os.path.join(d, "periodic.qmap")
            r = run([args.qmap, "convert", os.path.join(md, "pytorch_model.bin"), "-o", cont, "--quiet"])
            if r.returncode:
                bad.append(r.stderr)
                break
            sp = spm.SentencePieceProcessor(model_proto=blob)
            m = lib.model(cont)
            for _ in range(300):
                t = "".join(rng.choice("ab") for _ in range(rng.randint(2, 14)))
                if m.encode(t) != sp.encode(t):
                    bad.append((chosen, t, m.encode(t), sp.encode(t)))
                    break
            m.close()
        c.check("periodic", "%d models of periodic pieces, 300 strings each: ids equal to sentencepiece's" % n_models,
                not bad, str(bad[:2]))

    # --- refusals
    if c.want("refuse"):
        main = open(models["main"], "rb").read()
        bad = {}
        bad["unigram"] = open(train(spm, os.path.join(d, "unigram"), corpus, model_type="unigram", vocab_size=2000), "rb").read()
        bad["nfkc"] = open(train(spm, os.path.join(d, "nfkc"), corpus, vocab_size=2000,
                                 normalization_rule_name="nmt_nfkc"), "rb").read()
        bad["rmws"] = open(train(spm, os.path.join(d, "rmws"), corpus, vocab_size=2000,
                                 remove_extra_whitespaces=True), "rb").read()
        bad["unused"] = P.edit_pieces(main, lambda i, p: (p[0], p[1], P.UNUSED) if i == 300 else p)
        bad["truncated"] = main[:len(main) // 2]
        # the length varint of normalizer_spec (top-level field 3) with its continuation bit set: the length
        # takes the next byte too and runs past the end of the file
        top, pos = P.parse(main), 0
        for f, w, v in top:
            key = P.enc_varint(f << 3 | w)
            if f == 3:
                norm_at = pos
                break
            pos += len(key) + (len(P.enc_varint(len(v))) + len(v) if w == 2 else len(P.enc_varint(v)) if w == 0
                               else len(v))
        flipped = bytearray(main)
        flipped[norm_at + 1] |= 0x80
        bad["flipped"] = bytes(flipped)
        bad["group"] = main + bytes([0x3B])   # field 7, wire type 3: a start-group
        want = {
            "unigram": ("QM_ERR_UNSUPPORTED", "trainer_spec.model_type",
                        "unigram models are not supported (Viterbi encoding is not implemented)"),
            "nfkc": ("QM_ERR_UNSUPPORTED", "normalizer_spec.name", "normalizer \"nmt_nfkc\" is not supported; only \"identity\""),
            "rmws": ("QM_ERR_UNSUPPORTED", "normalizer_spec.remove_extra_whitespaces", "true is not supported; only false"),
            "unused": ("QM_ERR_UNSUPPORTED", "pieces[300]", "UNUSED piece"),
            "truncated": ("QM_ERR_BAD_SOURCE", "", "runs past the end"),
            "flipped": ("QM_ERR_BAD_SOURCE", "normalizer_spec at offset %d" % (norm_at + 1), "runs past the end of its message"),
            "group": ("QM_ERR_BAD_SOURCE", "ModelProto at offset %d" % len(main), "is a group (wire type 3)"),
        }
        for name, blob in bad.items():
            md = model_dir(d, "bad-" + name, 3000, None)
            open(os.path.join(md, "tokenizer.model"), "wb").write(blob)
            out = os.path.join(d, "bad-%s.qmap" % name)
            r = run([args.qmap, "convert", os.path.join(md, "pytorch_model.bin"), "-o", out, "--quiet"])
            code, field, text = want[name]
            c.check("refuse", "%s: exit 1, %s naming tokenizer.model, %r, %r" % (name, code, field, text[:50]),
                    r.returncode == 1 and code in r.stderr and "tokenizer.model" in r.stderr and field in r.stderr
                    and text in r.stderr and not os.path.exists(out), r.stderr.strip())
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
