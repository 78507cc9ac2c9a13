#!/usr/bin/python3
"""test_convert.py — end-to-end tests of `qmap convert` against PyTorch.

    /usr/bin/python3 tests/convert/test_convert.py --qmap build/qmap --workdir build/tests/convert [-k FILTER]

For every model variant (tests/models: mlp, gpt2, gpt_neo, llama, mistral, qwen2, qwen3, seq2seq) and every save
route (tests/convert/savers.py: raw dump, torch.save zip, wrapped checkpoint, safetensors, sharded
safetensors by index and by shard list, sharded torch, npz, compressed npz) the model is saved, converted,
and the container read back with the independent tests/spec_reader.py. What must hold:
  (a) the tensor names are exactly the canonical set (expected.py maps the torch names independently);
  (b) every tensor is bit-identical to the torch tensor after the mapping's transpose/squeeze, in F32, or
      with --dtype f16 in torch's .half() for rank >= 2 and F32 for rank 1;
  (c) all routes of one model give byte-identical tensors (per-tensor XXH3 compared across routes);
  (d) the metadata holds the architecture's hyperparameters equal to the config, and general.* provenance
      (source files, sizes and XXH3 matching the files on disk);
  (e) gpt2 and llama carry tokenizer metadata with one token per vocabulary entry.
Also fp16/bf16 sources, non-contiguous views, hostile inputs (pickles calling os.system / eval, truncated
and corrupt zips, legacy torch.save, malformed safetensors, big-endian npy, configs contradicting shapes,
missing/extra tensors, unknown --arch, NaN, f16 overflow: each must fail with one error line naming the
file and leave no output or temporary file) and convert/export_torch.py as a command.

Each check prints one line ("ok" / "FAIL" with details); the last line counts them; exit status 1 on any
failure. -k FILTER runs only the groups whose name contains FILTER (e.g. -k llama, -k bad/, -k export).
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import time
import zipfile
from collections import OrderedDict

import numpy as np
import torch
import torch.nn as nn

sys.dont_write_bytecode = True     # keep tests/ free of __pycache__
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))

import savers              # noqa: E402
import checks              # noqa: E402  (tests/checks.py)
import spec_reader         # noqa: E402
import test_torch_fast     # noqa: E402  (stored torch.save storages read in place)
from expected import (ARCH_OF, expected_metadata, expected_mlp_metadata, expected_tensors,  # noqa: E402
                      values_equal)

EXPORT_TORCH = os.path.join(ROOT, "convert", "export_torch.py")
PYTHON = "/usr/bin/python3"
TIMEOUT = 120

# ------------------------------------------------------------------------------------------- harness


Checks = checks.Checks
fresh_dir = checks.fresh_dir
short = checks.short
xxh3_file = checks.xxh3_file


class Converter:
    def __init__(self, qmap):
        self.qmap = qmap

    def run(self, srcs, out, *opts):
        cmd = [self.qmap, "convert"] + list(srcs) + ["-o", out] + list(opts)
        try:
            p = subprocess.run(cmd, capture_output=True, timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            return -999, "", "timed out after %ds: %s" % (TIMEOUT, " ".join(cmd))
        return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")

# ------------------------------------------------------------------------------------------- container checks


def check_tensors(ck, group, qf, plan, f16=False):
    """(a) name set, (b) dtype, shape and exact bytes. Returns {name: XXH3 of the stored bytes} for (c)."""
    names = set(qf.tensors)
    want = set(plan)
    ck.check(group, "source names all mapped by the test's table", not plan.unmatched,
             "unmatched: %s" % (list(plan.unmatched),))
    ck.check(group, "tensor names are the canonical set (%d)" % len(want), names == want,
             "missing %s; unexpected %s" % (sorted(want - names), sorted(names - want)))
    bad = []
    sums = {name: t.checksum for name, t in qf.tensors.items()}     # XXH3 of the stored bytes (verified)
    for name in sorted(names & want):
        t, e = qf.tensors[name], plan[name]
        exp = e.value(f16)
        want_dtype = "F16" if exp.dtype == np.float16 else "F32"
        if t.dtype != want_dtype:
            bad.append("%s: dtype %s, want %s" % (name, t.dtype, want_dtype))
            continue
        if tuple(t.shape) != tuple(exp.shape):
            bad.append("%s: shape %s, want %s (from %s %s)" % (name, list(t.shape), list(exp.shape),
                                                               e.source_name, list(e.tensor.shape)))
            continue
        got = np.asarray(t.raw)
        wantb = np.frombuffer(exp.tobytes(), dtype=np.uint8)
        if got.shape != wantb.shape or not np.array_equal(got, wantb):
            g = got.view(exp.dtype).reshape(-1) if got.size == wantb.size else None
            w = exp.reshape(-1)
            if g is not None:
                diff = np.nonzero(g.view(np.uint16 if f16 and exp.dtype == np.float16 else np.uint32)
                                  != w.view(np.uint16 if exp.dtype == np.float16 else np.uint32))[0]
                i = int(diff[0])
                bad.append("%s (from %s): %d of %d elements differ, first at flat index %d: got %r want %r"
                           % (name, e.source_name, diff.size, w.size, i, float(g[i]), float(w[i])))
            else:
                bad.append("%s: %d bytes, want %d" % (name, got.size, wantb.size))
            continue
    ck.check(group, "every tensor bit-identical to torch (%s)" % ("f16 rank>=2, f32 rank 1" if f16 else "f32"),
             not bad, "; ".join(bad[:6]) + (" ... (%d tensors)" % len(bad) if len(bad) > 6 else ""))
    return sums


def check_metadata(ck, group, qf, want, what):
    """Every key of `want` ({key: (type name, value)}) present with that type and value."""
    problems = []
    for key, (typ, value) in want.items():
        if key not in qf.metadata:
            problems.append("%s missing" % key)
        elif qf.metadata_types[key] != typ:
            problems.append("%s is %s %r, want %s %r" % (key, qf.metadata_types[key], qf.metadata[key], typ, value))
        elif not values_equal(qf.metadata[key], value):
            problems.append("%s = %r, want %r" % (key, qf.metadata[key], value))
    ck.check(group, what, not problems, "; ".join(problems))


def resolve_source(name, srcs):
    """Find the file a general.source.files entry names: as given, or relative to a source's folder."""
    cands = [name]
    for s in srcs:
        base = s if os.path.isdir(s) else os.path.dirname(s)
        cands += [os.path.join(base, name), os.path.join(base, os.path.basename(name))]
    for c in cands:
        if os.path.isfile(c):
            return c
    return None


def check_general(ck, group, qf, variant, srcs, f16):
    md = qf.metadata
    problems = []
    if md.get("general.architecture") != ARCH_OF[variant]:
        problems.append("general.architecture %r, want %r" % (md.get("general.architecture"), ARCH_OF[variant]))
    if md.get("general.file_type") != ("f16" if f16 else "f32"):
        problems.append("general.file_type %r" % md.get("general.file_type"))
    conv = md.get("general.converter")
    if not isinstance(conv, str) or not conv.startswith("qmap "):
        problems.append("general.converter %r" % conv)
    if not isinstance(md.get("general.source.kind"), str) or not md.get("general.source.kind"):
        problems.append("general.source.kind %r" % md.get("general.source.kind"))
    files = md.get("general.source.files")
    sizes = md.get("general.source.sizes")
    hashes = md.get("general.source.xxh3")
    if not isinstance(files, list) or not files:
        problems.append("general.source.files %r" % (files,))
    elif sizes is None or hashes is None or len(sizes) != len(files) or len(hashes) != len(files):
        problems.append("general.source.sizes/xxh3 missing or not one per file (%d files, sizes %r, xxh3 %r)"
                        % (len(files), sizes, hashes))
    else:
        found = 0
        for f, size, h in zip(files, sizes, hashes):
            path = resolve_source(f, srcs)
            if path is None:
                continue
            found += 1
            if int(size) != os.path.getsize(path) or int(h) != xxh3_file(path):
                problems.append("%s: size %d / xxh3 %016x, file has %d / %016x" % (
                    f, int(size), int(h), os.path.getsize(path), xxh3_file(path)))
        if not found:
            problems.append("no general.source.files entry found on disk: %r" % (files,))
    ck.check(group, "general.* metadata (architecture, file_type, converter, source files/sizes/xxh3)",
             not problems, "; ".join(problems))


def check_config_json(ck, group, qf, srcs, cfg):
    """general.config_json: the text of config.json beside the source, or (raw dump) the manifest config."""
    got = qf.metadata.get("general.config_json")
    beside = os.path.join(os.path.dirname(os.path.abspath(srcs[0])), "config.json")
    if os.path.isfile(beside) and not os.path.isdir(srcs[0]):
        text = open(beside, encoding="utf-8").read()
        ck.check(group, "general.config_json is config.json verbatim", got == text,
                 "got %s" % short(repr(got), 120))
    else:
        try:
            ok = json.loads(got) == json.loads(json.dumps(cfg))
        except (TypeError, ValueError):
            ok = False
        ck.check(group, "general.config_json parses to the manifest config", ok, "got %s" % short(repr(got), 120))


# Tokenizer metadata the two test tokenizers must give (spec/TOKENIZER.md 2.1, 2.2, 2.5).
TOKENIZER_META = {
    "gpt2": lambda n: {"tokenizer.kind": ("STRING", "bpe_bytelevel"), "tokenizer.bos_id": ("U32", n - 1),
                       "tokenizer.eos_id": ("U32", n - 1), "tokenizer.special_ids": ("ARRAY[U32]", [n - 1]),
                       "tokenizer.added_ids": ("ARRAY[U32]", [n - 1])},
    "llama": lambda n: {"tokenizer.kind": ("STRING", "bpe_sentencepiece"), "tokenizer.unk_id": ("U32", 0),
                        "tokenizer.bos_id": ("U32", 1), "tokenizer.eos_id": ("U32", 2),
                        "tokenizer.special_ids": ("ARRAY[U32]", [0, 1, 2]),
                        "tokenizer.added_ids": ("ARRAY[U32]", [0, 1, 2]), "tokenizer.add_bos": ("BOOL", True),
                        "tokenizer.byte_fallback": ("BOOL", True), "tokenizer.add_prefix_space": ("BOOL", True)},
}


def check_tokenizer(ck, group, qf, variant):
    vocab, merges = savers.TOKENIZERS[variant][1]()
    md = qf.metadata
    tokens = md.get("tokenizer.tokens")
    ok = isinstance(tokens, list) and len(tokens) == len(vocab) and isinstance(md.get("tokenizer.kind"), str)
    ck.check(group, "tokenizer.kind and tokenizer.tokens (%d)" % len(vocab), ok,
             "tokenizer.kind %r, tokens %s" % (md.get("tokenizer.kind"),
                                               len(tokens) if isinstance(tokens, list) else repr(tokens)))
    if ok:
        by_id = sorted(vocab, key=vocab.get)
        diff = [i for i, (a, b) in enumerate(zip(tokens, by_id)) if a != b]
        ck.check(group, "tokenizer.tokens in id order equal the vocabulary", not diff,
                 "first difference at id %d: %r, want %r" % (diff[0], tokens[diff[0]], by_id[diff[0]])
                 if diff else "")
    got = md.get("tokenizer.merges")
    want = ["%s %s" % m for m in merges]
    ck.check(group, "tokenizer.merges equal merges.txt / model.merges (%d)" % len(merges), got == want,
             "tokenizer.merges %s" % (("%d entries, first %r" % (len(got), got[:3])) if isinstance(got, list)
                                      else repr(got)))
    check_metadata(ck, group, qf, TOKENIZER_META[variant](len(vocab)), "tokenizer kind and special ids")


def open_container(ck, group, out):
    try:
        qf = spec_reader.read(out)
        spec_reader.verify(qf, full=True)
    except (spec_reader.SpecError, OSError, ValueError) as e:
        ck.check(group, "container valid per spec_reader (full verify)", False, str(e))
        return None
    ck.check(group, "container valid per spec_reader (full verify)", True)
    return qf

# ------------------------------------------------------------------------------------------- good routes


class Suite:
    def __init__(self, args):
        self.ck = Checks(args.k)
        self.conv = Converter(args.qmap)
        self.work = os.path.abspath(args.workdir)
        self.models = {}
        self.route_sums = OrderedDict()       # variant -> route -> {name: xxh3}

    def model(self, variant):
        if variant not in self.models:
            self.models[variant] = savers.build_model(variant)
        return self.models[variant]

    def convert_and_check(self, group, variant, sd, cfg, srcs, opts, f16=False, tokenizer=False,
                          mlp_meta=None):
        """Convert `srcs`, then check (a), (b), (d), (e). Returns the per-tensor checksums or None."""
        ck = self.ck
        out = os.path.join(os.path.dirname(os.path.abspath(srcs[0])), "out.qmap")
        if os.path.exists(out):
            os.remove(out)
        t0 = time.time()
        rc, so, se = self.conv.run(srcs, out, *(opts + (["--dtype", "f16"] if f16 else [])))
        if not ck.check(group, "convert exits 0 (%.2fs)" % (time.time() - t0), rc == 0 and os.path.isfile(out),
                        "rc %d, stderr: %s" % (rc, short(se))):
            return None
        qf = open_container(ck, group, out)
        if qf is None:
            return None
        plan = expected_tensors(variant, sd)
        sums = check_tensors(ck, group, qf, plan, f16=f16)
        check_general(ck, group, qf, variant, srcs, f16)
        if ARCH_OF[variant] == "mlp":
            want = mlp_meta or expected_mlp_metadata(sd, ["relu", "relu", "identity"])
        else:
            want = expected_metadata(variant, cfg, plan.tied)
        check_metadata(ck, group, qf, want, "%s.* hyperparameter metadata (%d keys)" % (ARCH_OF[variant], len(want)))
        check_config_json(ck, group, qf, srcs, cfg)
        if tokenizer:
            check_tokenizer(ck, group, qf, variant)
        return sums

    def run_routes(self):
        for variant in savers.models.VARIANTS:
            for route, saver in savers.ROUTES.items():
                group = "%s/%s" % (variant, route)
                if not self.ck.want(group):
                    continue
                model, cfg = self.model(variant)
                d = fresh_dir(os.path.join(self.work, "routes", variant, route))
                srcs, opts = saver(model, cfg, d)
                tok = bool(savers.write_tokenizer(variant, d if route != "raw" else fresh_dir(
                    os.path.join(d, "tokenizer"))))
                if tok and route == "raw":
                    tdir = os.path.join(d, "tokenizer")
                    opts = opts + ["--tokenizer", tdir if variant == "gpt2" else os.path.join(tdir, "tokenizer.json")]
                sums = self.convert_and_check(group, variant, model.state_dict(), cfg, srcs, opts, tokenizer=tok)
                if sums is not None:
                    self.route_sums.setdefault(variant, OrderedDict())[route] = sums
            group = "%s/torch+f16" % variant
            if self.ck.want(group):
                model, cfg = self.model(variant)
                d = fresh_dir(os.path.join(self.work, "routes", variant, "torch_f16"))
                srcs, opts = savers.save_torch(model, cfg, d)
                self.convert_and_check(group, variant, model.state_dict(), cfg, srcs, opts, f16=True)

    def run_special(self):
        for route, (variant, saver, dtype) in savers.SPECIAL_ROUTES.items():
            for f16 in (False, True):
                group = "%s/%s%s" % (variant, route, "+f16" if f16 else "")
                if not self.ck.want(group) or (f16 and route == "noncontig"):
                    continue
                model, cfg = self.model(variant)
                d = fresh_dir(os.path.join(self.work, "special", route + ("_f16" if f16 else "")))
                srcs, opts = saver(model, cfg, d)
                if dtype == torch.float32:
                    sd = model.state_dict()
                else:
                    sd = savers.lowp_state_dict(model, dtype)
                sums = self.convert_and_check(group, variant, sd, cfg, srcs, opts, f16=f16)
                if sums is not None and dtype == torch.float32 and not f16:
                    self.route_sums.setdefault(variant, OrderedDict())[route] = sums
        # a half-precision state_dict through the raw dump: the exporter widens exactly like .float()
        group = "llama/fp16_raw"
        if self.ck.want(group):
            model, cfg = self.model("llama")
            d = fresh_dir(os.path.join(self.work, "special", "fp16_raw"))
            sd = savers.lowp_state_dict(model, torch.float16)
            savers.export(sd, os.path.join(d, "dump"), config=cfg)
            self.convert_and_check(group, "llama", sd, cfg, [os.path.join(d, "dump")], [])

    def seq2seq_vocabularies(self):
        """A translation model carries two vocabularies: --src-tokenizer / --tgt-tokenizer store them as
        tokenizer.src.* and tokenizer.tgt.*, token for token."""
        group = "seq2seq/vocabularies"
        if not self.ck.want(group):
            return
        model, cfg = self.model("seq2seq")
        d = fresh_dir(os.path.join(self.work, "special", "seq2seq_vocab"))
        srcs, opts = savers.save_torch(model, cfg, d)
        vocabs = {}
        for side, n in (("src", cfg["src_vocab_size"]), ("tgt", cfg["tgt_vocab_size"])):
            words = ["<pad>", "<s>", "</s>", "<unk>"] + ["%s_w%d" % (side, i) for i in range(n - 4)]
            path = os.path.join(d, "%s_vocab.txt" % side)
            with open(path, "w", encoding="utf-8") as f:
                f.write("\n".join(words) + "\n")
            vocabs[side] = (path, words)
        out = os.path.join(d, "out.qmap")
        rc, so, se = self.conv.run(srcs, out, *(opts + ["--src-tokenizer", vocabs["src"][0],
                                                        "--tgt-tokenizer", vocabs["tgt"][0]]))
        if not self.ck.check(group, "convert with two vocabularies exits 0", rc == 0, short(se)):
            return
        qf = open_container(self.ck, group, out)
        if qf is None:
            return
        md = qf.metadata
        for side, (path, words) in vocabs.items():
            self.ck.check(group, "tokenizer.%s.tokens equal %s (%d)" % (side, os.path.basename(path), len(words)),
                          md.get("tokenizer.%s.tokens" % side) == words and
                          md.get("tokenizer.%s.kind" % side) == "wordlevel",
                          "kind %r" % md.get("tokenizer.%s.kind" % side))
        self.ck.check(group, "no plain tokenizer.* keys beside the two vocabularies",
                      not any(k.startswith("tokenizer.") and not k.startswith(("tokenizer.src.", "tokenizer.tgt."))
                              for k in md), "")

    def f16_rounding(self):
        """--dtype f16 on values chosen to exercise rounding: exact ties between neighbouring f16 values
        (normal and subnormal), values that underflow to +-0, -0.0, and the largest finite f16 and values
        just below the overflow threshold (which round down to 65504)."""
        group = "mlp/f16_rounding"
        if not self.ck.want(group):
            return
        model, cfg = self.model("mlp")
        sd = OrderedDict((k, v.clone()) for k, v in model.state_dict().items())
        gen = np.random.default_rng(7)
        h = gen.integers(0, 0x7BFF, 4000, dtype=np.uint16)            # finite positive f16 bit patterns
        lo = h.view(np.float16).astype(np.float32)
        hi = (h + 1).view(np.float16).astype(np.float32)
        ties = (lo + hi) / 2                                          # exact in f32: a tie in f16
        special = np.array([0.0, -0.0, 65504.0, 65519.996, -65519.996, 2.0 ** -24, 2.0 ** -25, 2.0 ** -26,
                            3 * 2.0 ** -26, 1e-10, -1e-10, 6.1e-5, 6.09e-5], dtype=np.float32)
        vals = np.concatenate([ties, -ties[:1000], special, lo + (hi - lo) * 0.25])
        w = sd["1.weight"].reshape(-1)
        w[:vals.size] = torch.from_numpy(vals)
        d = fresh_dir(os.path.join(self.work, "special", "f16_rounding"))
        srcs, opts = savers.save_safetensors(_Holder(sd), cfg, d)
        self.convert_and_check(group, "mlp", sd, cfg, srcs, opts, f16=True)

    def cross_route(self):
        """(c): all routes of one model give the same bytes for every tensor."""
        for variant, routes in self.route_sums.items():
            if len(routes) < 2:
                continue
            group = "%s/all-routes" % variant
            ref_route, ref = next(iter(routes.items()))
            diffs = []
            for route, sums in routes.items():
                for name in sorted(set(ref) | set(sums)):
                    if ref.get(name) != sums.get(name):
                        diffs.append("%s: %s vs %s" % (name, ref_route, route))
            self.ck.check(group, "%d routes give byte-identical tensors" % len(routes), not diffs,
                          "; ".join(diffs[:8]))


class _Holder:
    """Stands in for a model where a saver only needs .state_dict()."""

    def __init__(self, sd):
        self._sd = sd

    def state_dict(self):
        return self._sd


def check_cli_output(suite):
    """--quiet prints nothing; --json prints one JSON document on success and on failure."""
    ck = suite.ck
    group = "cli/quiet_json"
    if not ck.want(group):
        return
    model, cfg = suite.model("gpt_neo")
    d = fresh_dir(os.path.join(suite.work, "cli"))
    srcs, _ = savers.save_torch(model, cfg, d)
    out = os.path.join(d, "out.qmap")
    rc, so, se = suite.conv.run(srcs, out, "--quiet")
    ck.check(group, "--quiet: exit 0, nothing on stdout or stderr", rc == 0 and not so and not se,
             "rc %d, stdout %r, stderr %r" % (rc, short(so, 100), short(se, 100)))
    rc, so, se = suite.conv.run(srcs, out, "--json")
    try:
        doc = json.loads(so)
    except ValueError:
        doc = None
    ck.check(group, "--json: exit 0 and stdout is one JSON document", rc == 0 and doc is not None,
             "rc %d, stdout %r" % (rc, short(so, 200)))
    rc, so, se = suite.conv.run(srcs, out, "--json", "--arch", "bogusarch")
    docs = []
    for text in (so, se):
        try:
            docs.append(json.loads(text))
        except ValueError:
            pass
    ck.check(group, "--json on failure: exit 1 and the error as JSON", rc == 1 and len(docs) == 1,
             "rc %d, stdout %r, stderr %r" % (rc, short(so, 150), short(se, 150)))

# ------------------------------------------------------------------------------------------- bad inputs


class SystemCall:
    """Pickles as a call to os.system: a checkpoint that runs a command when naively unpickled."""

    def __init__(self, command):
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


class EvalCall:
    def __init__(self, expr):
        self.expr = expr

    def __reduce__(self):
        import builtins
        return (builtins.eval, (self.expr,))


def zip_entry_data_offset(path, suffix):
    """File offset and size of the (stored) data of the zip member whose name ends with `suffix`."""
    with zipfile.ZipFile(path) as z:
        info = max((i for i in z.infolist() if i.filename.endswith(suffix)), key=lambda i: i.file_size)
    with open(path, "rb") as f:
        f.seek(info.header_offset)
        local = f.read(30)
    name_len, extra_len = struct.unpack_from("<HH", local, 26)
    return info.header_offset + 30 + name_len + extra_len, info.file_size


def st_header_file(path, header, data):
    hj = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)) + hj + data)


class BadInputs:
    """Inputs that must be refused: non-zero exit, one stderr line naming the file, no output left."""

    def __init__(self, suite):
        self.s = suite
        self.ck = suite.ck

    def case(self, name, build, opts=(), mention=(), patterns=(), marker=None, one_line=True):
        """build(d) writes the input into the fresh directory d and returns the SRC list."""
        group = "bad/" + name
        if not self.ck.want(group):
            return
        d = fresh_dir(os.path.join(self.s.work, "bad", name))
        srcs = build(d)
        outdir = fresh_dir(os.path.join(d, "out"))
        out = os.path.join(outdir, "model.qmap")
        rc, so, se = self.s.conv.run(srcs, out, *opts)
        ck = self.ck
        ck.check(group, "refused (exit status > 0, no crash)", 0 < rc < 128,
                 "rc %d, stderr: %s" % (rc, short(se)))
        lines = [l for l in se.splitlines() if l.strip()]
        if one_line:
            ck.check(group, "exactly one stderr line", len(lines) == 1, "%d lines: %s" % (len(lines), short(se)))
        # The case's directory name must not satisfy a check: match against the message with it removed.
        msg = se.replace(d, "<dir>")
        names = list(mention) if mention else [os.path.basename(srcs[0].rstrip("/"))]
        ck.check(group, "error names %s" % " / ".join(names), any(n in msg for n in names), short(se))
        for pat in patterns:
            alts = pat.split("|")
            ck.check(group, "error mentions %s" % pat, any(a.lower() in msg.lower() for a in alts), short(se))
        left = os.listdir(outdir)
        ck.check(group, "no output or temporary file left", not left, "left: %s" % left)
        if marker is not None:
            ck.check(group, "pickle payload did not run (%s absent)" % os.path.basename(marker),
                     not os.path.exists(marker))

    def run(self):
        model, cfg = self.s.model("gpt2")
        sd = model.state_dict()
        work = self.s.work

        def torch_file(obj, name="pytorch_model.bin", config=cfg, **kw):
            def build(d):
                if config is not None:
                    savers.write_json(os.path.join(d, "config.json"), config)
                path = os.path.join(d, name)
                torch.save(obj, path, **kw)
                return [path]
            return build

        good_zip = os.path.join(work, "bad", "good.bin")
        os.makedirs(os.path.dirname(good_zip), exist_ok=True)
        torch.save(sd, good_zip)
        good = open(good_zip, "rb").read()

        def bytes_file(data, name="pytorch_model.bin"):
            def build(d):
                savers.write_json(os.path.join(d, "config.json"), cfg)
                path = os.path.join(d, name)
                with open(path, "wb") as f:
                    f.write(data)
                return [path]
            return build

        # hostile pickles
        marker = os.path.join(work, "bad", "PWNED_system")
        if os.path.exists(marker):
            os.remove(marker)
        evil = OrderedDict(sd)
        evil["payload"] = SystemCall("touch " + marker)
        self.case("pickle_os_system", torch_file(evil), patterns=["system|forbidden|not allowed|global"],
                  marker=marker)
        marker2 = os.path.join(work, "bad", "PWNED_eval")
        if os.path.exists(marker2):
            os.remove(marker2)
        evil2 = OrderedDict(sd)
        evil2["payload"] = EvalCall("__import__('os').system('touch %s')" % marker2)
        self.case("pickle_builtins_eval", torch_file(evil2), patterns=["eval|forbidden|not allowed|global"],
                  marker=marker2)

        # damaged zips
        for cut in (100, len(good) // 2, len(good) - 22, len(good) - 1):
            self.case("truncated_zip_at_%d" % cut, bytes_file(good[:cut]),
                      patterns=["truncat|corrupt|end of central|short"])
        off, size = zip_entry_data_offset(good_zip, "/data/0")
        crc = bytearray(good)
        crc[off + size // 2] ^= 0x55
        self.case("zip_entry_crc", bytes_file(bytes(crc)), patterns=["crc|checksum|corrupt"])

        # a central-directory entry whose size passes the end of the file: named with its size (libzip
        # alone said "no end-of-central-directory record", which is there)
        big = bytearray(good)
        eocd = big.rfind(b"PK\x05\x06")
        n_entries, cd_off = struct.unpack_from("<H", big, eocd + 10)[0], struct.unpack_from("<I", big, eocd + 16)[0]
        p = cd_off
        for _ in range(n_entries):
            nl, xl, cl = struct.unpack_from("<HHH", big, p + 28)
            if bytes(big[p + 46:p + 46 + nl]).endswith(b"/data/0"):
                struct.pack_into("<II", big, p + 20, 4 * len(big), 4 * len(big))
            p += 46 + nl + xl + cl
        self.case("zip_entry_size_past_end", bytes_file(bytes(big)), patterns=["data/0", str(4 * len(big))])

        self.case("legacy_torch_save", torch_file(sd, _use_new_zipfile_serialization=False),
                  patterns=["re-sav|resav"])

        # a shard index naming no shard (once a segfault: the planners read the first source)
        for idx in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
            self.case("empty_index_" + idx.split(".")[0], bytes_file(b'{"weight_map": {}}', idx),
                      patterns=["no shard|no tensors"])
            self.case("empty_index_arch_" + idx.split(".")[0], bytes_file(b'{"weight_map": {}}', idx),
                      opts=("--arch", "llama"), patterns=["no shard|no tensors"])

        # malformed safetensors
        st_path = os.path.join(work, "bad", "good.safetensors")
        savers.write_safetensors(st_path, savers.drop_shared(sd))
        st = open(st_path, "rb").read()
        self.case("st_header_len_beyond_file",
                  bytes_file(struct.pack("<Q", len(st)) + st[8:], "model.safetensors"), patterns=["header"])
        self.case("st_header_len_huge",
                  bytes_file(struct.pack("<Q", 1 << 62) + st[8:], "model.safetensors"), patterns=["header"])
        self.case("st_trailing_bytes", bytes_file(st + b"\0" * 16, "model.safetensors"))

        def st_overlap(d):
            savers.write_json(os.path.join(d, "config.json"), cfg)
            header = {"a": {"dtype": "F32", "shape": [64], "data_offsets": [0, 256]},
                      "b": {"dtype": "F32", "shape": [64], "data_offsets": [128, 384]}}
            path = os.path.join(d, "model.safetensors")
            st_header_file(path, header, b"\0" * 384)
            return [path]
        self.case("st_overlapping_offsets", st_overlap, patterns=["overlap"])

        def npy_big_endian(d):
            path = os.path.join(d, "weights.npy")
            np.save(path, np.arange(12, dtype=">f4").reshape(3, 4))
            return [path]
        self.case("npy_big_endian", npy_big_endian, opts=["--arch", "mlp"],
                  patterns=["endian|byte order|>f4|big"])

        # configs contradicting the tensors
        self.case("config_n_embd_48", torch_file(sd, config=dict(cfg, n_embd=48)),
                  mention=["wte", "tok_embd", "c_attn", "attn_qkv", "wpe", "pos_embd", "ln_1", "ln1"],
                  patterns=["48", "64"])
        self.case("config_n_head_5", torch_file(sd, config=dict(cfg, n_head=5)),
                  mention=["config.json", "pytorch_model.bin"], patterns=["head"])
        lmodel, lcfg = self.s.model("llama")
        self.case("config_kv_heads_4", torch_file(lmodel.state_dict(), config=dict(lcfg, num_key_value_heads=4)),
                  mention=["k_proj", "attn_k", "v_proj", "attn_v"], patterns=["32", "64"])

        missing = OrderedDict((k, v) for k, v in sd.items() if k != "transformer.h.1.mlp.c_fc.bias")
        self.case("missing_tensor", torch_file(missing), mention=["h.1.mlp.c_fc.bias", "blk.1.ffn_up.bias"])
        extra = OrderedDict(sd)
        extra["transformer.h.0.attn.extra_proj.weight"] = torch.zeros(4, 4)
        self.case("unexpected_tensor", torch_file(extra), mention=["extra_proj"])

        self.case("unknown_arch", torch_file(sd), opts=["--arch", "bogusarch"], mention=["bogusarch"])
        self.case("missing_source", lambda d: [os.path.join(d, "does_not_exist.safetensors")])

        # NaN: a warning by default, an error with --strict
        nan = OrderedDict(sd)
        w = sd["transformer.h.0.mlp.c_fc.weight"].clone()
        w[3, 5] = float("nan")
        nan["transformer.h.0.mlp.c_fc.weight"] = w
        self.case("nan_strict", torch_file(nan), opts=["--strict"],
                  mention=["c_fc", "ffn_up"], patterns=["nan"], one_line=False)
        group = "bad/nan_warning"
        if self.ck.want(group):
            d = fresh_dir(os.path.join(work, "bad", "nan_warning"))
            srcs = torch_file(nan)(d)
            out = os.path.join(d, "out.qmap")
            rc, so, se = self.s.conv.run(srcs, out)
            self.ck.check(group, "NaN without --strict converts (exit 0)", rc == 0 and os.path.isfile(out),
                          "rc %d: %s" % (rc, short(se)))
            msg = se.replace(d, "<dir>")
            self.ck.check(group, "NaN warning on stderr names the tensor",
                          "nan" in msg.lower() and ("c_fc" in msg or "ffn_up" in msg), short(se))

        big = OrderedDict(sd)
        w = sd["transformer.h.1.mlp.c_proj.weight"].clone()
        w[0, 0] = 1e5
        big["transformer.h.1.mlp.c_proj.weight"] = w
        self.case("f16_overflow", torch_file(big), opts=["--dtype", "f16"],
                  mention=["c_proj", "ffn_down"], patterns=["f16|half"])

# ------------------------------------------------------------------------------------------- export_torch.py


class ExportCommand:
    def __init__(self, suite):
        self.s = suite
        self.ck = suite.ck

    def cli(self, *args):
        p = subprocess.run([PYTHON, EXPORT_TORCH] + list(args), capture_output=True, timeout=TIMEOUT)
        return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")

    def run(self):
        ck = self.ck
        group = "export/whole_sequential"
        if ck.want(group):
            torch.manual_seed(5)
            model = nn.Sequential(nn.Flatten(), nn.Linear(784, 32), nn.GELU(), nn.Linear(32, 16), nn.Tanh(),
                                  nn.Dropout(0.1), nn.Linear(16, 10), nn.LogSoftmax(dim=-1)).eval()
            savers.models.common.perturb_vectors(model, 5)
            d = fresh_dir(os.path.join(self.s.work, "export", "whole_sequential"))
            pt = os.path.join(d, "mnist_mlp.pt")
            torch.save(model, pt)
            dump = os.path.join(d, "dump")
            rc, so, se = self.cli(pt, dump)
            if ck.check(group, "export_torch.py MODEL.pt OUTDIR exits 0", rc == 0, short(se)):
                man = json.load(open(os.path.join(dump, "manifest.json")))
                types = [l["type"] for l in man.get("layers", [])]
                ck.check(group, "manifest layers list", man.get("arch") == "mlp" and types == [
                    "flatten", "linear", "gelu", "linear", "tanh", "dropout", "linear", "log_softmax"],
                    "arch %r, layers %r" % (man.get("arch"), types))
                meta = expected_mlp_metadata(model.state_dict(), ["gelu", "tanh", "identity"], "log_softmax")
                self.s.convert_and_check(group, "mlp", model.state_dict(), {"model_type": "mlp"}, [dump], [],
                                         mlp_meta=meta)

        group = "export/state_dict_config"
        if ck.want(group):
            model, cfg = self.s.model("gpt_neo")
            d = fresh_dir(os.path.join(self.s.work, "export", "state_dict_config"))
            pt = os.path.join(d, "weights.pt")
            torch.save(model.state_dict(), pt)
            savers.write_json(os.path.join(d, "my_config.json"), cfg)
            dump = os.path.join(d, "dump")
            rc, so, se = self.cli(pt, dump, "--config", os.path.join(d, "my_config.json"))
            if ck.check(group, "export_torch.py MODEL.pt OUTDIR --config exits 0", rc == 0, short(se)):
                man = json.load(open(os.path.join(dump, "manifest.json")))
                bools = [k for k, t in model.state_dict().items() if not t.is_floating_point()]
                ck.check(group, "manifest config, tensor order and skipped buffers",
                         man.get("config") == cfg and man.get("skipped") == bools
                         and list(man["tensors"]) == [k for k in model.state_dict() if k not in bools],
                         "skipped %r" % man.get("skipped"))
                self.s.convert_and_check(group, "gpt_neo", model.state_dict(), cfg, [dump], [])

        group = "export/unsupported_layer"
        if ck.want(group):
            d = fresh_dir(os.path.join(self.s.work, "export", "unsupported_layer"))
            pt = os.path.join(d, "conv.pt")
            torch.save(nn.Sequential(nn.Conv2d(1, 4, 3), nn.Flatten(), nn.Linear(2704, 10)), pt)
            rc, so, se = self.cli(pt, os.path.join(d, "dump"))
            ck.check(group, "refused with an error naming Conv2d", rc != 0 and "Conv2d" in se, short(se))
            ck.check(group, "no output directory left", os.listdir(d) == ["conv.pt"], str(os.listdir(d)))

# ------------------------------------------------------------------------------------------- main


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--qmap", default=os.path.join(ROOT, "build", "qmap"), help="the qmap binary")
    p.add_argument("--workdir", default=os.path.join(ROOT, "build", "tests", "convert"),
                   help="scratch directory (recreated per case)")
    p.add_argument("-k", metavar="FILTER", help="run only groups whose name contains FILTER")
    args = p.parse_args()
    if not os.access(args.qmap, os.X_OK):
        print("test_convert.py: %s is not an executable" % args.qmap, file=sys.stderr)
        return 2
    os.makedirs(args.workdir, exist_ok=True)
    t0 = time.time()
    suite = Suite(args)
    suite.run_routes()
    suite.run_special()
    suite.seq2seq_vocabularies()
    suite.f16_rounding()
    suite.cross_route()
    check_cli_output(suite)
    BadInputs(suite).run()
    test_torch_fast.run(suite.ck, args.qmap, suite.work)
    ExportCommand(suite).run()
    return suite.ck.finish(time.time() - t0)


if __name__ == "__main__":
    sys.exit(main())
