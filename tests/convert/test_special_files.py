#!/usr/bin/env python3
"""test_special_files.py — a FIFO where a file is expected must never hang a command (issue 11 item 7).

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
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
