#!/usr/bin/env python3
"""test_hostile.py — the runtime under hostile files and input (issue 43), each case on the exact input the
issue names, each checked against a reference that is not qmap: torch's model configs, the tokenizer
files themselves, python3-sentencepiece, numpy.

  null      every API function with NULL in each pointer (tests/run/api_null.c, ASan+UBSan build)
  ctx       llama.context_length = 4194304 on the KJV model: `run -p x -n 4` within a small peak RSS; the
            default context is min(the model's, 4096), and -c raises it
  hparams   NaN / inf / -1 / denormal float hyperparameters of every family are refused at open, naming
            the key and the value (normal build and ASan)
  tokenize  `qmap tokenize g2p.qmap -p tomato` prints the source vocabulary's pieces
  verify    `qmap verify --full` fails on a NaN in an F32 tensor, an inf in an F16 one and a NaN Q8_ROW
            scale (checksums repaired), naming the tensor and the first index
  regex     a pre_split of `(x+x+)+y|.` on x-runs fails fast with an error naming the pattern, never a
            silently different tokenization
  spm       a SentencePiece text long enough to span many encoder segments gives sentencepiece's ids, and a
            100 MB one runs through perplexity within a bounded peak RSS

Every container is made here, from the shipped models in tests/data and tiny torch models (tests/models),
and rewritten with tests/spec_writer.py (which computes the checksums, so only the runtime's checks stand
between the lie and the model).
"""
import argparse
import math
import os
import re
import struct
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)
ROOT = os.path.dirname(TESTS)
sys.path.insert(0, TESTS)
sys.path.insert(0, os.path.join(TESTS, "convert"))
sys.path.insert(0, os.path.join(TESTS, "tools"))

import spec_reader  # noqa: E402
import spec_writer  # noqa: E402
from checks import Checks, fresh_dir  # noqa: E402

KJV = os.path.join(ROOT, "tests", "data", "kjv_llama")
G2P = os.path.join(ROOT, "tests", "data", "g2p")
DIGITS = os.path.join(ROOT, "tests", "data", "digits_mlp")


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


# Run argv[1:] with stdout to /dev/null and print its exit code, peak RSS and stderr. Linux keeps a process's
# peak RSS across exec, and a child forked from this (large, torch-holding) interpreter starts with the
# interpreter's RSS: so the command is forked from this small fresh interpreter instead.
RSS_PROBE = """
import json, os, subprocess, sys
p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
err = p.stderr.read()
_, status, ru = os.wait4(p.pid, 0)
print(json.dumps([os.waitstatus_to_exitcode(status), ru.ru_maxrss * 1024, err.decode("utf-8", "replace")]))
"""


def run_rss_alone(cmd):
    """(returncode, stderr, peak RSS in bytes) of cmd, measured by RSS_PROBE."""
    import json
    r = subprocess.run([sys.executable, "-c", RSS_PROBE, *cmd], capture_output=True, text=True)
    rc, rss, err = json.loads(r.stdout)
    return rc, err, rss


def rewrite(src, dst, meta=None, tensors=None):
    """Container src rewritten as dst: meta {key: (type name, value)} replaces or adds entries, tensors
    {name: bytes} replaces a tensor's data; every checksum computed afresh by the independent writer."""
    meta = dict(meta or {})
    tensors = tensors or {}
    qf = spec_reader.read(src)
    entries = []
    for e in qf.meta_entries:
        if e.key in meta:
            tname, value = meta.pop(e.key)
            entries.append(spec_writer.meta_entry(e.key, tname, value))
        else:
            entries.append(spec_writer.meta_entry(e.key, e.type_id, None, raw_value=bytes(e.raw)))
    for key, (tname, value) in meta.items():
        entries.append(spec_writer.meta_entry(key, tname, value))
    defs = [spec_writer.TensorDef(t.name, t.dtype_id, t.shape, tensors.get(t.name, bytes(t.raw)))
            for t in qf.tensors.values()]
    spec_writer.write(dst, spec_writer.build(entries, defs, alignment=qf.header["alignment"]))
    return dst


class Env:
    def __init__(self, args, c):
        self.qmap, self.asan_qmap, self.api_null = args.qmap, args.asan_qmap, args.api_null
        self.c = c
        self.work = args.workdir
        self.models = {}

    def model(self, name):
        """The path of a converted container, made once: kjv (llama + SentencePiece), g2p (seq2seq + two
        word-level vocabularies), digits (mlp), gpt2 / gpt_neo (tiny torch models, no tokenizer)."""
        if name in self.models:
            return self.models[name]
        out = os.path.join(self.work, name + ".qmap")
        if name == "kjv":
            cmd = [os.path.join(KJV, "pytorch_model.bin")]
        elif name == "g2p":
            cmd = [os.path.join(G2P, "model.pt"), "--src-tokenizer", os.path.join(G2P, "src", "tokenizer.json"),
                   "--tgt-tokenizer", os.path.join(G2P, "tgt", "tokenizer.json")]
        elif name == "digits":
            cmd = [os.path.join(DIGITS, "model.pt")]
        elif name == "gpt2-tok":   # a tiny gpt2 with a byte-level BPE tokenizer (tests/convert/savers.py)
            from savers import build_model, save_safetensors, write_tokenizer
            model, cfg = build_model("gpt2", seed=3)
            d = fresh_dir(os.path.join(self.work, name + "-src"))
            cmd = save_safetensors(model, cfg, d)[0]
            write_tokenizer("gpt2", d)
        else:
            from models import gpt2, gpt_neo
            from savers import save_safetensors
            mod = {"gpt2": gpt2, "gpt_neo": gpt_neo}[name]
            model, cfg = mod.build(seed=3)
            d = fresh_dir(os.path.join(self.work, name + "-src"))
            cmd = save_safetensors(model, cfg, d)[0] + ["--no-tokenizer"]
        r = run([self.qmap, "convert", *cmd, "-o", out, "--quiet"])
        if r.returncode != 0:
            raise RuntimeError("convert %s: %s" % (name, r.stderr))
        self.models[name] = out
        return out


def api_functions_not_called():
    """Functions qmap.h exports that api_null.c never calls: the NULL rule is checked only where it is called."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    header = open(os.path.join(root, "include", "qmap.h")).read()
    source = open(os.path.join(root, "tests", "run", "api_null.c")).read()
    names = re.findall(r"QMAP_API\s[^;(]*?\b(qmap_\w+)\s*\(", header)
    return sorted(n for n in set(names) if not re.search(r"\b%s\s*\(" % n, source))


def case_null(env):
    c = env.c
    missing = api_functions_not_called()
    c.check("null", "api_null.c calls every function qmap.h exports", not missing, "not called: %s" % missing)
    r = run([env.api_null, env.model("kjv"), env.model("digits"), env.model("g2p")])
    c.check("null", "every API function takes NULL in each pointer without a crash, as qmap.h states",
            r.returncode == 0, (r.stdout + r.stderr)[-1500:])


def case_ctx(env):
    c = env.c
    kjv = env.model("kjv")
    big = rewrite(kjv, os.path.join(env.work, "kjv-ctx4m.qmap"), meta={"llama.context_length": ("U32", 1 << 22)})
    rc, err, rss = run_rss_alone([env.qmap, "run", big, "-p", "In the beginning", "-n", "4", "--temp", "0", "-q"])
    # the weights (19.7 MB) and a 4096-position cache (8 MB F16) — not the 4.3 GB of 2^22 positions
    c.check("ctx", "context_length 2^22: run -n 4 works within 256 MB of peak RSS", rc == 0 and rss < 256 << 20,
            "rc %d, peak RSS %.0f MB: %s" % (rc, rss / 2**20, err[-300:]))
    # a prompt of more than 4096 tokens: refused at the default, accepted with -c 8192
    words = " ".join(["and the LORD said unto Moses"] * 800)
    r = run([env.qmap, "run", big, "-p", words, "-n", "1", "--temp", "0", "-q"])
    c.check("ctx", "the default context is 4096 when the model's is larger (a longer prompt is refused)",
            r.returncode != 0 and "context of 4096" in r.stderr, r.stderr[-300:])
    r = run([env.qmap, "run", big, "-p", words, "-n", "1", "--temp", "0", "-q", "-c", "8192"])
    c.check("ctx", "-c 8192 raises it", r.returncode == 0, r.stderr[-300:])
    r = run([env.qmap, "run", kjv, "-p", " ".join(["and"] * 600), "-n", "1", "--temp", "0", "-q"])
    c.check("ctx", "a model's own context below 4096 (512) stays the default",
            r.returncode != 0 and "context of 512" in r.stderr, r.stderr[-300:])


# (family, key, values): the issue's 17 files, and the keys' neighbours of the same kind
HPARAM_CASES = [
    ("gpt2", "gpt2.norm_eps", [math.nan, math.inf, -math.inf, -1.0, 1e-45]),
    ("gpt_neo", "gpt_neo.norm_eps", [math.nan, math.inf, -math.inf, -1.0]),
    ("g2p", "seq2seq.norm_eps", [math.nan, math.inf, -math.inf]),
    ("g2p", "seq2seq.embed_scale", [math.nan, math.inf, -math.inf]),
    ("kjv", "llama.norm_eps", [math.inf, math.nan, 0.0]),
    ("kjv", "llama.rope_theta", [1e-45, math.nan, math.inf, -10000.0]),
    ("digits", "mlp.input_scale", [math.nan, math.inf]),
]


def run_args(family, path):
    if family == "digits":
        return ["run", path, "--input", os.path.join(DIGITS, "test.npz")]
    if family == "g2p":
        return ["run", path, "-p", "tomato", "-q"]
    return ["run", path, "--tokens", "1 2 3", "-n", "2", "--temp", "0", "-q"]


def case_hparams(env):
    c = env.c
    d = fresh_dir(os.path.join(env.work, "hparams"))
    for family, key, values in HPARAM_CASES:
        src = env.model(family)
        for v in values:
            path = os.path.join(d, "%s-%s.qmap" % (key, repr(v).replace("-", "m")))
            rewrite(src, path, meta={key: ("F32", v)})
            for tag, exe in (("", env.qmap), (" (ASan)", env.asan_qmap)):
                if tag and family == "kjv" and v != 1e-45:
                    continue   # the sanitizer build once per family is enough
                r = run([exe, *run_args(family, path)])
                want = "%g" % np.float32(v)
                c.check("hparams", "%s = %s is refused, naming the key and the value%s" % (key, want, tag),
                        r.returncode == 1 and key in r.stderr and want in r.stderr.replace("-nan", "nan"),
                        "rc %d: %s" % (r.returncode, r.stderr.strip()[-300:]))
    # the values real models use still open
    for family, key, v in (("gpt2", "gpt2.norm_eps", 1e-12), ("kjv", "llama.rope_theta", 500000.0)):
        path = rewrite(env.model(family), os.path.join(d, "ok-%s.qmap" % key), meta={key: ("F32", v)})
        r = run([env.qmap, *run_args(family, path)])
        c.check("hparams", "%s = %g (a real model's) still runs" % (key, v), r.returncode == 0, r.stderr[-300:])


def source_vocab(path):
    import json
    with open(path, encoding="utf-8") as f:
        tok = json.load(f)
    return {i: p for p, i in tok["model"]["vocab"].items()}


def case_tokenize(env):
    c = env.c
    g2p = env.model("g2p")
    r = run([env.qmap, "tokenize", g2p, "-p", "tomato", "--no-bos"])
    rows = [line.split() for line in r.stdout.splitlines() if line.strip()]
    vocab = source_vocab(os.path.join(G2P, "src", "tokenizer.json"))
    got = [(int(row[0]), row[1]) for row in rows]
    want_pieces = [vocab[i] for i, _ in got]
    c.check("tokenize", "g2p -p tomato: one id per letter, each with its source-vocabulary piece",
            r.returncode == 0 and [p for _, p in got] == want_pieces == list("tomato"),
            "%s vs %s: %s" % (got, want_pieces, r.stderr[-200:]))


def first_nonfinite(path, name):
    """numpy's answer: the first element of tensor `name` that is NaN or infinite, or None."""
    t = spec_reader.read(path).tensors[name]
    bad = np.flatnonzero(~np.isfinite(np.asarray(t.to_float32(), dtype=np.float32).ravel()))
    return int(bad[0]) if bad.size else None


def case_verify(env):
    c = env.c
    d = fresh_dir(os.path.join(env.work, "verify"))
    kjv = env.model("kjv")
    f16 = os.path.join(d, "kjv-f16.qmap")
    q8 = os.path.join(d, "kjv-q8.qmap")
    for how, out in (("--f16", f16), ("--q8", q8)):
        r = run([env.qmap, "quantize", how, kjv, "-o", out, "--quiet"])
        c.check("verify", "quantize %s the KJV model" % how, r.returncode == 0, r.stderr[-300:])
    name = "blk.1.attn_q.weight"
    cases = []
    qf = spec_reader.read(kjv)
    raw = bytearray(qf.tensors[name].raw)
    struct.pack_into("<f", raw, 4 * 12345, float("nan"))
    cases.append(("F32 NaN", rewrite(kjv, os.path.join(d, "f32-nan.qmap"), tensors={name: bytes(raw)}), 12345))
    raw = bytearray(spec_reader.read(f16).tensors[name].raw)
    struct.pack_into("<H", raw, 2 * 777, 0x7C00)   # +inf
    struct.pack_into("<H", raw, 2 * 9000, 0xFE00)  # a NaN further on: the first one is named
    cases.append(("F16 inf", rewrite(f16, os.path.join(d, "f16-inf.qmap"), tensors={name: bytes(raw)}), 777))
    for what, path, index in cases:
        c.check("verify", "%s: numpy finds the first non-finite element at %d" % (what, index),
                first_nonfinite(path, name) == index)
        r = run([env.qmap, "verify", path])
        c.check("verify", "%s: plain verify passes (the checksums were repaired)" % what, r.returncode == 0,
                r.stdout[-300:])
        r = run([env.qmap, "verify", "--full", path])
        c.check("verify", "%s: verify --full fails naming %s and element %d" % (what, name, index),
                r.returncode == 1 and name in r.stdout and "element %d " % index in r.stdout, r.stdout[-400:])
    qt = spec_reader.read(q8).tensors[name]
    rows, _, _, scales_off, _, _ = spec_writer.q8row_layout(qt.shape, qf.header["alignment"])
    raw = bytearray(qt.raw)
    struct.pack_into("<f", raw, scales_off + 4 * 5, float("nan"))
    path = rewrite(q8, os.path.join(d, "q8-scale-nan.qmap"), tensors={name: bytes(raw)})
    r = run([env.qmap, "verify", "--full", path])
    c.check("verify", "Q8_ROW NaN scale of row 5: verify --full fails naming the tensor and the row",
            r.returncode == 1 and name in r.stdout and "row 5" in r.stdout, r.stdout[-400:])
    r = run([env.qmap, "verify", "--full", kjv])
    c.check("verify", "the untouched model still passes verify --full", r.returncode == 0, r.stdout[-300:])


HOSTILE_PATTERN = "(x+x+)+y|."


def case_regex(env):
    c = env.c
    from savers import gpt2_byte_alphabet, gpt2_tokenizer
    d = fresh_dir(os.path.join(env.work, "regex"))
    path = rewrite(env.model("gpt2-tok"), os.path.join(d, "gpt2-hostile.qmap"),
                   meta={"tokenizer.pre_split": ("STRING", HOSTILE_PATTERN)})
    vocab, _ = gpt2_tokenizer()
    alphabet = gpt2_byte_alphabet()
    # short x-runs: the pattern is cheap there, and python's re (the reference) splits every character
    # apart (no y follows), so the ids are the characters' byte tokens
    text = "xxxx xx xxxxx x " * 256
    import re
    pieces = [m.group(0) for m in re.finditer(HOSTILE_PATTERN, text)]
    want = [vocab[alphabet[b]] for p in pieces for b in p.encode()]
    f = os.path.join(d, "short-runs.txt")
    with open(f, "w") as fp:
        fp.write(text)
    r = run([env.qmap, "tokenize", path, "-f", f, "--ids", "--no-bos"], timeout=600)
    got = [int(x) for x in r.stdout.split()] if r.returncode == 0 else None
    c.check("regex", "short x-runs: the ids of python re's split (%d pieces)" % len(pieces), got == want,
            r.stderr[-300:])
    # long x-runs: every call backtracks exponentially; the text must be refused, naming the pattern
    f = os.path.join(d, "long-runs.txt")
    with open(f, "w") as fp:
        fp.write(("x" * 40 + " ") * (1 << 14))
    for tag, exe in (("", env.qmap), (" (ASan)", env.asan_qmap)):
        r = run([exe, "tokenize", path, "-f", f, "--ids", "--no-bos"], timeout=600)
        c.check("regex", "640 KB of 40-x runs: refused with an error naming the key and the pattern%s" % tag,
                r.returncode == 1 and "tokenizer.pre_split" in r.stderr and HOSTILE_PATTERN in r.stderr,
                "rc %d: %s" % (r.returncode, (r.stderr or r.stdout)[-300:]))


def kjv_text():
    sys.path.insert(0, os.path.join(TESTS, "tools"))
    import kjv_data
    return "".join(kjv_data.book_text(verses) for _, verses in kjv_data.read_books())


def case_spm(env):
    c = env.c
    import sentencepiece as spm
    d = fresh_dir(os.path.join(env.work, "spm"))
    kjv = env.model("kjv")
    sp = spm.SentencePieceProcessor(model_file=os.path.join(KJV, "tokenizer.model"))
    text = kjv_text()
    # spaces in runs and in odd places, so that chunk boundaries fall next to them
    text = text.replace("LORD", "  LORD").replace("\n", " \n")
    small = os.path.join(d, "kjv.txt")
    with open(small, "w", encoding="utf-8") as f:
        f.write(text)
    r = run([env.qmap, "tokenize", kjv, "-f", small, "--ids", "--no-bos"])
    got = [int(x) for x in r.stdout.split()] if r.returncode == 0 else []
    want = sp.encode(text)
    c.check("spm", "the whole KJV (%.1f MB, hundreds of encoder chunks): sentencepiece's %d ids"
            % (len(text) / 1e6, len(want)), got == want,
            "rc %d, %d ids vs %d: %s" % (r.returncode, len(got), len(want), r.stderr[-200:]))
    big = os.path.join(d, "kjv-100mb.txt")
    reps = (100 << 20) // len(text) + 1
    with open(big, "w", encoding="utf-8") as f:
        for _ in range(reps):
            f.write(text)
    size = os.path.getsize(big)
    # perplexity tokenizes the whole text before its first window: the text and its ids (4 bytes per id,
    # about a quarter of the bytes), the 20 MB model, and the encoder's bounded scratch
    rc, err, rss = run_rss_alone([env.qmap, "perplexity", kjv, "-f", big, "-c", "64", "--chunks", "2"])
    bound = 2 * size + (64 << 20)
    c.check("spm", "perplexity on a %.0f MB text runs within 2x its size + 64 MB of peak RSS" % (size / 1e6),
            rc == 0 and rss < bound, "rc %d, peak RSS %.0f MB (bound %.0f): %s" % (rc, rss / 2**20, bound / 2**20, err[-300:]))
    os.unlink(big)


CASES = [("null", case_null), ("ctx", case_ctx), ("hparams", case_hparams), ("tokenize", case_tokenize),
         ("verify", case_verify), ("regex", case_regex), ("spm", case_spm)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--qmap", required=True)
    ap.add_argument("--asan-qmap", required=True)
    ap.add_argument("--api-null", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("-k", dest="filt")
    args = ap.parse_args()
    c = Checks(args.filt)
    os.makedirs(args.workdir, exist_ok=True)
    env = Env(args, c)
    for name, fn in CASES:
        if c.want(name):
            fn(env)
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
