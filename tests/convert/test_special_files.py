#!/usr/bin/env python3
"""test_special_files.py — files that are not what they seem (issue 11 items 7 and 10): a FIFO where a file
is expected must never hang a command, and a raw dump may not reach outside its directory or carry keys the
format does not define.

Every command that reads a file is pointed at a FIFO (with no writer, whose open() would block for ever
without O_NONBLOCK): the container itself (inspect, verify, quantize, run, tokenize, convert), and a FIFO
`config.json` beside a real checkpoint (convert). Each must exit with status 1 within the time limit and
say "not a regular file", naming the path; no output file may appear. A directory given as a container is
refused the same way.
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from checks import Checks, fresh_dir  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--qmap", required=True)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    c = Checks(None)
    d = fresh_dir(a.workdir)
    fifo = os.path.join(d, "model.qmap")
    os.mkfifo(fifo)
    out = os.path.join(d, "out.qmap")
    cmds = {
        "inspect": ["inspect", fifo], "verify": ["verify", fifo], "quantize": ["quantize", "--q8", fifo, "-o", out],
        "run": ["run", fifo, "--tokens", "1"], "tokenize": ["tokenize", fifo, "-p", "x"],
        "convert": ["convert", fifo, "-o", out], "inspect a directory": ["inspect", d],
    }
    for name, args in cmds.items():
        try:
            r = subprocess.run([a.qmap] + args, capture_output=True, text=True, timeout=20)
            c.check("fifo", "%s: exit 1, 'not a regular file' naming the path" % name,
                    r.returncode == 1 and "not a regular file" in r.stderr and (fifo in r.stderr or d in r.stderr),
                    r.stderr.strip())
        except subprocess.TimeoutExpired:
            c.check("fifo", "%s: returns instead of blocking on the FIFO" % name, False, "still running after 20 s")
    # a FIFO config.json beside a real checkpoint (tar-extracted model directories can hold one)
    sys.path.insert(0, os.path.dirname(HERE))
    import torch
    from models import llama
    md = fresh_dir(os.path.join(d, "model"))
    m, cfg = llama.build(seed=1, variant="llama")
    torch.save(m.state_dict(), os.path.join(md, "model.pt"))
    os.mkfifo(os.path.join(md, "config.json"))
    try:
        r = subprocess.run([a.qmap, "convert", os.path.join(md, "model.pt"), "-o", out], capture_output=True, text=True,
                           timeout=20)
        c.check("fifo", "convert with a FIFO config.json: exit 1 naming it",
                r.returncode == 1 and "config.json" in r.stderr and "not a regular file" in r.stderr, r.stderr.strip())
    except subprocess.TimeoutExpired:
        c.check("fifo", "convert with a FIFO config.json returns", False, "still running after 20 s")
    c.check("fifo", "no output file written", not os.path.exists(out))

    # raw dumps (issue 11 item 10): a tensor file that is a symlink out of the dump directory, and a key
    # the manifest format does not have, are refused by name
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "..", "convert"))
    from export_torch import export
    dump = os.path.join(d, "dump")
    export(m, dump, config=cfg)
    rc = subprocess.run([a.qmap, "convert", dump, "-o", out, "--quiet"], capture_output=True, text=True)
    c.check("raw", "the untouched dump converts", rc.returncode == 0, rc.stderr.strip())
    os.remove(out)
    man_path = os.path.join(dump, "manifest.json")
    man = json.load(open(man_path))
    victim = next(iter(man["tensors"].values()))["file"]
    outside = os.path.join(d, "outside.bin")
    os.replace(os.path.join(dump, victim), outside)
    os.symlink(os.path.join("..", "outside.bin"), os.path.join(dump, victim))
    r = subprocess.run([a.qmap, "convert", dump, "-o", out], capture_output=True, text=True)
    c.check("raw", "a symlink leading out of the dump directory is refused, naming the file",
            r.returncode == 1 and victim in r.stderr and "outside the dump directory" in r.stderr, r.stderr.strip())
    os.remove(os.path.join(dump, victim))
    os.replace(outside, os.path.join(dump, victim))
    for where in ("top", "tensor"):
        bad = json.loads(json.dumps(man))
        (bad if where == "top" else next(iter(bad["tensors"].values())))["offset"] = -1
        json.dump(bad, open(man_path, "w"))
        r = subprocess.run([a.qmap, "convert", dump, "-o", out], capture_output=True, text=True)
        c.check("raw", "an unknown key (%s level) is refused naming it" % where,
                r.returncode == 1 and '"offset"' in r.stderr, r.stderr.strip())
    json.dump(man, open(man_path, "w"))
    c.check("raw", "no output file written", not os.path.exists(out))

    # --arch none (issue 11 item 4): a plain tensor file is stored as it is, quantize takes every float
    # matrix, run refuses it; without --arch the refusal mentions it
    import numpy as np
    npz = os.path.join(d, "tables.npz")
    emb, bias = np.random.RandomState(1).randn(100, 16).astype(np.float32), np.arange(16, dtype=np.float32)
    np.savez(npz, **{"my.table": emb, "offsets": bias})
    plain, plain8 = os.path.join(d, "plain.qmap"), os.path.join(d, "plain8.qmap")
    r = subprocess.run([a.qmap, "convert", npz, "-o", plain], capture_output=True, text=True)
    c.check("none", "without --arch: unknown architecture, the message names --arch none",
            r.returncode == 1 and "--arch none" in r.stderr, r.stderr.strip())
    r = subprocess.run([a.qmap, "convert", npz, "-o", plain, "--arch", "none", "--quiet"], capture_output=True, text=True)
    if c.check("none", "convert --arch none", r.returncode == 0, r.stderr.strip()):
        sys.path.insert(0, os.path.dirname(HERE))
        import spec_reader
        qf = spec_reader.read(plain)
        c.check("none", "tensors under their own names and shapes, values exact, architecture none",
                qf.metadata.get("general.architecture") == "none" and set(qf.tensors) == {"my.table", "offsets"}
                and np.array_equal(qf.tensors["my.table"].array, emb) and np.array_equal(qf.tensors["offsets"].array, bias))
        r = subprocess.run([a.qmap, "quantize", "--q8", plain, "-o", plain8, "--quiet"], capture_output=True, text=True)
        qf8 = spec_reader.read(plain8) if r.returncode == 0 else None
        c.check("none", "quantize --q8: every float matrix (whatever its name) to Q8_ROW, vectors copied",
                qf8 is not None and qf8.tensors["my.table"].dtype == "Q8_ROW" and qf8.tensors["offsets"].dtype == "F32",
                r.stderr.strip())
        r = subprocess.run([a.qmap, "run", plain, "--tokens", "1"], capture_output=True, text=True)
        c.check("none", "run refuses a plain tensor store, saying so", r.returncode == 1 and "--arch none" in r.stderr,
                r.stderr.strip())
    # a model directory as the hub ships it: `qmap convert DIR` finds the checkpoint by its conventional name
    sys.path.insert(0, HERE)
    from savers import write_safetensors
    hub = fresh_dir(os.path.join(d, "hub"))
    json.dump(cfg, open(os.path.join(hub, "config.json"), "w"))
    r = subprocess.run([a.qmap, "convert", hub, "-o", out], capture_output=True, text=True)
    c.check("hub", "a directory with no checkpoint: the message lists the names looked for",
            r.returncode == 1 and "model.safetensors" in r.stderr and "pytorch_model.bin" in r.stderr, r.stderr.strip())
    torch.save(m.state_dict(), os.path.join(hub, "pytorch_model.bin"))
    r = subprocess.run([a.qmap, "convert", hub, "-o", out, "--json"], capture_output=True, text=True)
    kind = json.loads(r.stdout).get("input_kind", "") if r.returncode == 0 else ""
    c.check("hub", "DIR with pytorch_model.bin converts it", r.returncode == 0 and kind == "torch.save zip",
            r.stderr.strip() + r.stdout)
    write_safetensors(os.path.join(hub, "model.safetensors"), m.state_dict())
    r = subprocess.run([a.qmap, "convert", hub, "-o", out, "--json"], capture_output=True, text=True)
    kind = json.loads(r.stdout).get("input_kind", "") if r.returncode == 0 else ""
    c.check("hub", "with model.safetensors beside it, that is preferred (as transformers does)",
            r.returncode == 0 and kind == "safetensors", r.stderr.strip() + r.stdout)
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
