#!/usr/bin/python3
"""bench_mlp.py — classifier throughput: `qmap run --input` against PyTorch on the same MLP and rows.

The shipped Fashion-MNIST classifier (tests/data/fashion_mlp, 784-256-128-10) is converted to F32 and
Q8_ROW; the rows are the 10,000 real test images (Debian's dataset-fashion-mnist) as float32 features.
For batch sizes 1, 64 and 4096 and 1 and 2 threads it measures rows/s of:
  qmap F32, qmap Q8_ROW (default activations: float accuracy), qmap Q8_ROW --act int8 (int8 activations,
  as torch's dynamic quantization does), torch F32, torch dynamic int8
  (torch.ao.quantization.quantize_dynamic on the Linear layers, fbgemm).
qmap's figure is its own timing of the classify loop (`--json` rows_per_s: the rows in batches through the
public API, no file reading); torch's is the same loop in Python (inference_mode, one warm-up pass). For
batches of 64 and more the 10,000 rows are repeated 4 times (40,000 rows), so that a run lasts long enough
to time. Runs
alternate between all configurations, --runs times; medians with [min, max]. Ratios are qmap / torch.
Not a test: nothing here passes or fails on speed; the issue's targets are printed beside the figures.

    /usr/bin/python3 tests/bench/bench_mlp.py --qmap build/qmap --dir build/bench/mlp [--runs 5] [--json]
"""
import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn as nn

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz"
BATCHES = (1, 64, 4096)
THREADS = (1, 2)


def load_rows(cfg):
    with gzip.open(DATA, "rb") as f:
        raw = f.read()
    px = np.frombuffer(raw, np.uint8, offset=16).reshape(-1, 784).astype(np.float32)
    return np.ascontiguousarray(px * np.float32(cfg["input_scale"]) + np.float32(cfg["input_offset"]))


def qmap_rate(qmap, model, xpath, batch, threads, *extra):
    # torch's BLAS threads busy-wait for a while after each call (OpenBLAS: up to ~0.1 s) and would take
    # the cores from the qmap process that follows: let them go to sleep first
    time.sleep(0.5)
    r = subprocess.run([qmap, "run", model, "--input", xpath, "-b", str(batch), "-t", str(threads), "--json", "-q",
                        *extra], capture_output=True, text=True, check=True)
    return json.loads(r.stdout)["rows_per_s"]


def torch_rate(model, x, batch, threads):
    torch.set_num_threads(threads)
    with torch.inference_mode():
        for i in range(0, min(len(x), 4 * batch), batch):   # warm-up
            model(x[i:i + batch])
        t0 = time.perf_counter()
        for i in range(0, len(x), batch):
            model(x[i:i + batch])
        return len(x) / (time.perf_counter() - t0)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--qmap", required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    src = os.path.join(ROOT, "tests", "data", "fashion_mlp")
    with open(os.path.join(src, "config.json")) as f:
        cfg = json.load(f)
    f32, q8 = os.path.join(a.dir, "fashion.qmap"), os.path.join(a.dir, "fashion-q8.qmap")
    subprocess.run([a.qmap, "convert", os.path.join(src, "model.pt"), "-o", f32, "-q"], check=True)
    subprocess.run([a.qmap, "quantize", "--q8", f32, "-o", q8, "-q"], check=True)
    x1 = load_rows(cfg)
    x = np.ascontiguousarray(np.tile(x1, (4, 1)))
    xpath, x1path = os.path.join(a.dir, "x.npy"), os.path.join(a.dir, "x1.npy")
    np.save(xpath, x)
    np.save(x1path, x1)
    model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10)).eval()
    model.load_state_dict(torch.load(os.path.join(src, "model.pt")))
    if "fbgemm" in torch.backends.quantized.supported_engines:
        torch.backends.quantized.engine = "fbgemm"
    dyn = torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8).eval()
    xt, x1t = torch.from_numpy(x), torch.from_numpy(x1)

    def rows(b):
        return (xpath, xt) if b > 1 else (x1path, x1t)

    systems = {
        "qmap F32": lambda b, t: qmap_rate(a.qmap, f32, rows(b)[0], b, t),
        "qmap Q8_ROW": lambda b, t: qmap_rate(a.qmap, q8, rows(b)[0], b, t),
        "qmap Q8_ROW int8": lambda b, t: qmap_rate(a.qmap, q8, rows(b)[0], b, t, "--act", "int8"),
        "torch F32": lambda b, t: torch_rate(model, rows(b)[1], b, t),
        "torch dyn-int8": lambda b, t: torch_rate(dyn, rows(b)[1], b, t),
    }
    rates = {(s, b, t): [] for s in systems for b in BATCHES for t in THREADS}
    for _ in range(a.runs):          # every configuration once per round: drift hits all alike
        for b in BATCHES:
            for t in THREADS:
                for s, fn in systems.items():
                    rates[(s, b, t)].append(fn(b, t))
    med = {k: statistics.median(v) for k, v in rates.items()}
    if a.json:
        print(json.dumps({"rows": len(x), "runs": a.runs,
                          "rows_per_s": {"%s|b%d|t%d" % k: {"median": med[k], "min": min(v), "max": max(v)}
                                         for k, v in rates.items()}}, indent=1))
        return 0
    print("Fashion-MNIST MLP 784-256-128-10, %d rows (batch 1: %d), rows/s, median of %d [min, max]"
          % (len(x), len(x1), a.runs))
    for b in BATCHES:
        for t in THREADS:
            print("batch %4d, %d thread%s" % (b, t, "" if t == 1 else "s"))
            for s in systems:
                v = rates[(s, b, t)]
                print("  %-18s %12.0f  [%.0f, %.0f]" % (s, med[(s, b, t)], min(v), max(v)))
            r32 = med[("qmap F32", b, t)] / med[("torch F32", b, t)]
            r8 = med[("qmap Q8_ROW", b, t)] / med[("torch dyn-int8", b, t)]
            r8i = med[("qmap Q8_ROW int8", b, t)] / med[("torch dyn-int8", b, t)]
            goal = 5.0 if b == 1 else 1.5 if b == 4096 else None
            print("  qmap F32 / torch F32 = %.2f%s" % (r32, "" if goal is None else "  (target >= %.1f: %s)"
                                                        % (goal, "met" if r32 >= goal else "NOT met")))
            print("  qmap Q8_ROW / torch dyn-int8 = %.2f, with --act int8 %.2f  (target > 1: %s)"
                  % (r8, r8i, "met" if max(r8, r8i) > 1 else "NOT met"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
