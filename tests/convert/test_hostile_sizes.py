#!/usr/bin/env python3
"""test_hostile_sizes.py — inputs built to cost memory (issue 11 item 9), beside a real checkpoint.

Before the caps, a 50 MB tokenizer.json of small nested arrays took 2.5 GB for 13 s before it was refused
(jansson builds the whole tree first), and a 1 MB zip whose deflated entry inflates to 1 GiB converted. Each
case here runs `qmap convert` as a child and reads that child's own peak RSS (os.wait4):

- JSON files above their kind's cap (tokenizer 64 MiB, config 4 MiB, shard index 16 MiB, manifest 16 MiB)
  are refused before they are read, naming --json-limit; the same file converts with --json-limit raised.
- A file under the size cap whose tree would be too big (50 MB of `[[],[],…]`, 50 MB of short merges) is
  refused after one pass over its text: exit 1 within seconds and a small peak RSS.
- Real tokenizer files pass (the GPT-2 and Llama-2 ones are converted by tokenizer-test; here a 40 MB
  genuine-looking tokenizer.json of 300,000 tokens stays under the budget).
- An .npz and a torch.save zip whose deflated entries inflate 256 MiB at ~1000x are refused naming
  --allow-large, with a small peak RSS; with --allow-large they convert and the summary says what inflated.
"""
import argparse
import json
import os
import subprocess
import sys
import time
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from checks import Checks, fresh_dir  # noqa: E402

MIB = 1 << 20


# The child's peak RSS must not include this process's: a child forked from here starts with our pages
# (ru_maxrss keeps the high-water mark across exec), so qmap runs as the grandchild of a small Python.
MEASURE = ("import resource, subprocess, sys\n"
           "r = subprocess.run(sys.argv[1:], stdin=subprocess.DEVNULL)\n"
           "sys.stderr.write('\\n@@maxrss %d\\n' % resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
           "sys.exit(r.returncode if r.returncode >= 0 else 128 - r.returncode)\n")


def run_rss(qmap, args, timeout=120):
    """(exit status, stderr, stdout, qmap's own peak RSS in MB, seconds) of one qmap run."""
    t = time.time()
    try:
        r = subprocess.run([sys.executable, "-c", MEASURE, qmap] + args, capture_output=True, text=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        return -9, "timed out", "", 0.0, time.time() - t
    err, _, tail = r.stderr.rpartition("\n@@maxrss ")
    return r.returncode, err, r.stdout, int(tail.split()[0]) / 1024.0 if tail else 0.0, time.time() - t


WORK = None


def main():
    global WORK
    ap = argparse.ArgumentParser()
    ap.add_argument("--qmap", required=True)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    c = Checks(None)
    WORK = d = fresh_dir(a.workdir)
    import numpy as np
    import torch
    from models import llama
    md = fresh_dir(os.path.join(d, "model"))
    m, cfg = llama.build(seed=1, variant="llama")
    torch.save(m.state_dict(), os.path.join(md, "model.pt"))
    cfg_path = os.path.join(md, "config.json")
    with open(cfg_path, "w") as f:
        json.dump(cfg, f)
    out = os.path.join(d, "out.qmap")
    conv = ["convert", os.path.join(md, "model.pt"), "-o", out, "--quiet"]
    rc, err, _, base_rss, _ = run_rss(a.qmap, conv + ["--no-tokenizer"])
    c.check("base", "the checkpoint converts (peak RSS %.0f MB)" % base_rss, rc == 0, err.strip())
    if os.path.exists(out):
        os.remove(out)
    small_rss = base_rss + 64   # what a refusal may cost above a plain conversion of this small model

    tok = os.path.join(md, "tokenizer.json")

    def tokenizer_case(what, body, expect_words, budget_mb=small_rss):
        with open(tok, "w") as f:
            f.write(body)
        rc, err, _, rss, secs = run_rss(a.qmap, conv)
        c.check("json", "%s (%.0f MB): refused in %.1f s, peak RSS %.0f MB" % (what, len(body) / 1e6, secs, rss),
                rc == 1 and all(w in err for w in expect_words) and rss < budget_mb and secs < 20
                and not os.path.exists(out), "exit %d, %.0f MB: %s" % (rc, rss, err.strip()))
        return rc, err

    # 50 MB of small nested arrays: under the 64 MiB file cap, but ~45x that in tree
    n = 50_000_000 // 3
    tokenizer_case("nested arrays", "[" + "[]," * (n - 1) + "[]]", ["--json-limit", "memory", "tokenizer.json"])
    # 50 MB of short merges in an otherwise valid tokenizer.json
    merges = ",".join(['"a b"'] * (50_000_000 // 6))
    tokenizer_case("flat merges", '{"model":{"type":"BPE","vocab":{"a":0,"b":1},"merges":[%s]}}' % merges,
                   ["--json-limit", "memory"])
    # above the file cap: refused from its size alone (a sparse file: nothing is read)
    with open(tok, "w") as f:
        f.truncate(64 * MIB + 1)
    rc, err, _, rss, secs = run_rss(a.qmap, conv)
    c.check("json", "tokenizer.json above 64 MiB refused by its size, naming the cap and --json-limit",
            rc == 1 and "cap for tokenizer files" in err and "--json-limit" in err, err.strip())
    os.remove(tok)

    # a genuine-looking big tokenizer: 300,000 tokens with merges, ~10 MB; converts under the default caps
    vocab = {"t%06d" % i: i for i in range(300_000)}
    big = {"model": {"type": "WordLevel", "vocab": vocab, "unk_token": "t000000"}}
    with open(tok, "w") as f:
        json.dump(big, f)
    rc, err, _, rss, secs = run_rss(a.qmap, conv + ["--arch", "none"])
    # (--arch none: the small llama has 256 embedding rows, fewer than 300,000 tokens; the plain store has
    # no embedding to check the vocabulary against)
    c.check("json", "a 300,000-token tokenizer.json (%.1f MB) passes the caps" % (os.path.getsize(tok) / 1e6),
            rc == 0, err.strip())
    if os.path.exists(out):
        os.remove(out)
    os.remove(tok)

    # config.json: 4 MiB cap, raised by --json-limit
    body = json.dumps(cfg)
    with open(cfg_path, "w") as f:
        f.write(body + " " * (4 * MIB + 16 - len(body)))
    rc, err, _, _, _ = run_rss(a.qmap, conv + ["--no-tokenizer"])
    c.check("json", "config.json above 4 MiB refused naming the cap and --json-limit",
            rc == 1 and "config.json" in err and "4194304-byte cap for config files" in err and "--json-limit" in err,
            err.strip())
    rc, err, _, _, _ = run_rss(a.qmap, conv + ["--no-tokenizer", "--json-limit", "8"])
    c.check("json", "the same config.json converts with --json-limit 8", rc == 0, err.strip())
    if os.path.exists(out):
        os.remove(out)
    with open(cfg_path, "w") as f:
        json.dump(cfg, f)
    rc, err, _, _, _ = run_rss(a.qmap, conv + ["--json-limit", "0"])
    c.check("json", "--json-limit 0 is a usage error", rc == 2 and "--json-limit" in err, err.strip())

    # a shard index and a raw-dump manifest above 16 MiB
    sys.path.insert(0, HERE)
    from savers import write_safetensors
    sd = m.state_dict()
    shard_dir = fresh_dir(os.path.join(d, "shards"))
    write_safetensors(os.path.join(shard_dir, "model-00001-of-00001.safetensors"), sd)
    with open(os.path.join(shard_dir, "config.json"), "w") as f:
        json.dump(cfg, f)
    index = {"metadata": {"pad": "x" * (16 * MIB)},
             "weight_map": {k: "model-00001-of-00001.safetensors" for k in sd}}
    ip = os.path.join(shard_dir, "model.safetensors.index.json")
    with open(ip, "w") as f:
        json.dump(index, f)
    rc, err, _, _, _ = run_rss(a.qmap, ["convert", ip, "-o", out, "--quiet", "--no-tokenizer"])
    c.check("json", "a shard index above 16 MiB refused naming the cap",
            rc == 1 and "cap for shard index files" in err and "--json-limit" in err, err.strip())
    rc, err, _, _, _ = run_rss(a.qmap, ["convert", ip, "-o", out, "--quiet", "--no-tokenizer", "--json-limit", "32"])
    c.check("json", "... and converts with --json-limit 32", rc == 0, err.strip())
    if os.path.exists(out):
        os.remove(out)
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "..", "convert"))
    from export_torch import export
    dump = os.path.join(d, "dump")
    export(m, dump, config=cfg)
    mp = os.path.join(dump, "manifest.json")
    man = json.load(open(mp))
    with open(mp, "w") as f:
        f.write(json.dumps(man) + " " * (16 * MIB))
    rc, err, _, _, _ = run_rss(a.qmap, ["convert", dump, "-o", out, "--quiet"])
    c.check("json", "a raw-dump manifest above 16 MiB refused naming the cap",
            rc == 1 and "cap for raw-dump manifests" in err, err.strip())

    # zip bombs: 256 MiB of zeros deflated (~250 KB), as an .npz and as a torch.save zip rewritten deflated
    zeros = np.zeros((64 * 1024, 1024), dtype=np.float32)
    npz = os.path.join(d, "bomb.npz")
    np.savez_compressed(npz, table=zeros)
    rc, err, _, rss, secs = run_rss(a.qmap, ["convert", npz, "-o", out, "--arch", "none", "--quiet"])
    c.check("zip", "an .npz inflating %d KB to 256 MiB refused naming --allow-large (peak RSS %.0f MB)"
            % (os.path.getsize(npz) // 1024, rss),
            rc == 1 and "--allow-large" in err and "inflate" in err and rss < small_rss and not os.path.exists(out),
            "exit %d, %.0f MB: %s" % (rc, rss, err.strip()))
    rc, err, sout, rss, secs = run_rss(a.qmap, ["convert", npz, "-o", out, "--arch", "none"] + ["--allow-large"])
    c.check("zip", "... converts with --allow-large, the summary saying what inflated",
            rc == 0 and "inflated" in sout, err.strip() + sout)
    if os.path.exists(out):
        os.remove(out)
    pt = os.path.join(d, "bomb.pt")
    torch.save({"table": torch.zeros(64 * 1024, 1024)}, pt)
    deflated = os.path.join(d, "bomb-deflated.pt")
    with zipfile.ZipFile(pt) as zi, zipfile.ZipFile(deflated, "w", zipfile.ZIP_DEFLATED) as zo:
        for info in zi.infolist():
            zo.writestr(info.filename, zi.read(info.filename))
    os.remove(pt)
    rc, err, _, rss, secs = run_rss(a.qmap, ["convert", deflated, "-o", out, "--arch", "none", "--quiet"])
    c.check("zip", "a deflated torch.save zip inflating %d KB to 256 MiB refused naming --allow-large"
            % (os.path.getsize(deflated) // 1024),
            rc == 1 and "--allow-large" in err and rss < small_rss, "exit %d, %.0f MB: %s" % (rc, rss, err.strip()))
    rc, err, _, _, _ = run_rss(a.qmap, ["convert", deflated, "-o", out, "--arch", "none", "--quiet", "--allow-large"])
    c.check("zip", "... converts with --allow-large", rc == 0, err.strip())
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
