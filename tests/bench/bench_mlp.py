#!/usr/bin/python3
"""bench_mlp.py — classifier throughput: `qmap run --input` against PyTorch on the same MLP and rows.

The model is, by default, the shipped Fashion-MNIST classifier (tests/data/fashion_mlp, 784-256-128-10)
on the 10,000 real test images (Debian's dataset-fashion-mnist) as float32 features; `--model random` is
the same shape with torch.manual_seed(0) weights, and `--model PATH.pt` any torch.save state dict of an MLP
with its config.json beside it (every 2-D "...weight" a Linear in natural name order, the config's
"activation" between them). Rows that are not images are np.random.RandomState(1) float32. The model is
converted to F32 and Q8_ROW; for batch sizes 1, 64 and 4096 and 1 and 2 threads it measures rows/s of
  qmap F32, qmap Q8_ROW (default activations: float accuracy), qmap Q8_ROW --act int8 (int8 activations,
  as torch's dynamic quantization does), torch F32, torch dynamic int8
  (torch.ao.quantization.quantize_dynamic on the Linear layers; fbgemm when this torch has it).
qmap's figure is its own timing of the classify loop (`--json` rows_per_s: the rows in batches through the
public API, no file reading); torch's is the same loop in Python (inference_mode, one warm-up pass). Batch
1 runs on min(--rows, 10,000) rows, larger batches on --rows (default 40,000: the test images 4 times), so
that every run lasts long enough to time. Runs alternate between all configurations, --runs times; medians
with [min, max]. Ratios are qmap / torch. Once, before timing, qmap F32's predictions are compared with
torch F32's argmax on the batch-1 rows (exit 1 below 99.9% agreement, or when qmap fails to run).
Not a test: nothing here passes or fails on speed; the issue's targets are printed beside the figures.

    /usr/bin/python3 tests/bench/bench_mlp.py --qmap build/qmap --dir build/bench/mlp [--runs 5] [--rows 40000]
                     [--model random|PATH.pt] [--json]
"""
import argparse
import gzip
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn as nn

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHIPPED = os.path.join(ROOT, "tests", "data", "fashion_mlp", "model.pt")
IMAGES = "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz"
BATCHES = (1, 64, 4096)
THREADS = (1, 2)
ACTS = {"relu": nn.ReLU, "gelu": nn.GELU, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid, "silu": nn.SiLU,
        "identity": nn.Identity}
SYSTEMS = ("qmap F32", "qmap Q8_ROW", "qmap Q8 int8", "torch F32", "torch dyn-int8")
TARGET_F32 = {1: 5.0, 4096: 1.5}     # the targets for qmap F32 / torch F32, by batch size


def natural_key(name):
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]


def mlp_from_state_dict(sd, activation):
    """nn.Sequential as qmap convert reads a bare state dict: 2-D "...weight" tensors in natural order."""
    names = sorted((k for k, v in sd.items() if k.endswith("weight") and v.dim() == 2), key=natural_key)
    layers = []
    for i, name in enumerate(names):
        w, b = sd[name], sd.get(name[:-len("weight")] + "bias")
        lin = nn.Linear(w.shape[1], w.shape[0], bias=b is not None)
        with torch.no_grad():
            lin.weight.copy_(w)
            if b is not None:
                lin.bias.copy_(b)
        layers += [lin] if i + 1 == len(names) else [lin, ACTS[activation]()]
    return nn.Sequential(*layers).eval()


def fail(msg):
    print("bench_mlp: " + msg, file=sys.stderr)
    sys.exit(1)


def qmap(*args):
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        fail("%s failed (exit %d):\n%s" % (" ".join(args), r.returncode, r.stderr.strip()))
    return r.stdout


def qmap_run(exe, model, xpath, batch, threads, *extra):
    # torch's BLAS threads busy-wait for a while after each call (OpenBLAS: up to ~0.1 s) and would take
    # the cores from the qmap process that follows: let them go to sleep first
    time.sleep(0.5)
    return json.loads(qmap(exe, "run", model, "--input", xpath, "-b", str(batch), "-t", str(threads),
                           "--json", "-q", *extra))


def torch_rate(model, x, batch, threads):
    torch.set_num_threads(threads)
    with torch.inference_mode():
        for i in range(0, min(len(x), 4 * batch), batch):   # warm-up: first-call allocations, thread pool
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
    ap.add_argument("--rows", type=int, default=40000, help="rows for batches > 1 (batch 1: at most 10,000)")
    ap.add_argument("--model", default=SHIPPED, help="a state dict .pt with config.json beside it, or 'random'")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    pt = os.path.join(a.dir, "model.pt")
    if a.model == "random":
        torch.manual_seed(0)   # speed does not depend on the values
        net = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))
        torch.save(net.state_dict(), pt)
        cfg = {"model_type": "mlp", "activation": "relu"}
    else:
        # copied beside each other into DIR: convert reads the config.json next to the checkpoint
        with open(os.path.join(os.path.dirname(os.path.abspath(a.model)), "config.json")) as f:
            cfg = json.load(f)
        if not os.path.exists(pt) or not os.path.samefile(a.model, pt):
            shutil.copyfile(a.model, pt)
    with open(os.path.join(a.dir, "config.json"), "w") as f:
        json.dump(cfg, f)
    model = mlp_from_state_dict(torch.load(pt), cfg.get("activation", "relu"))
    f32, q8 = os.path.join(a.dir, "f32.qmap"), os.path.join(a.dir, "q8.qmap")
    qmap(a.qmap, "convert", pt, "-o", f32, "-q")
    qmap(a.qmap, "quantize", "--q8", f32, "-o", q8, "-q")

    features, n1 = model[0].in_features, min(a.rows, 10000)
    if "input_scale" in cfg and features == 784 and os.path.exists(IMAGES):
        # an image model: its real inputs, mapped as it was trained (the speed is the same, the
        # prediction check below is not clouded by the near ties of random rows)
        with gzip.open(IMAGES, "rb") as f:
            px = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 784).astype(np.float32)
        base = px * np.float32(cfg["input_scale"]) + np.float32(cfg.get("input_offset", 0.0))
        x = np.ascontiguousarray(np.resize(base, (a.rows, 784)))   # the images repeated up to --rows
    else:
        x = np.random.RandomState(1).standard_normal((a.rows, features)).astype(np.float32)
    x1 = np.ascontiguousarray(x[:n1])
    xpath, x1path = os.path.join(a.dir, "x.npy"), os.path.join(a.dir, "x1.npy")
    np.save(xpath, x)
    np.save(x1path, x1)
    xt, x1t = torch.from_numpy(x), torch.from_numpy(x1)

    # fbgemm is not in every build (Debian's torch 1.13 has qnnpack and onednn, x86's fbgemm successor)
    if "fbgemm" in torch.backends.quantized.supported_engines:
        torch.backends.quantized.engine = "fbgemm"
    engine = torch.backends.quantized.engine
    dyn = torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8).eval()

    # once: qmap F32 classifies the rows as torch F32 does
    pred = np.array(qmap_run(a.qmap, f32, x1path, 0, 0)["predictions"])
    with torch.inference_mode():
        ref = model(x1t).argmax(1).numpy()
    differ = int((pred != ref).sum()) if len(pred) == len(ref) else len(ref)
    agree = 1 - differ / len(ref)

    def rows(b):
        return (xpath, xt) if b > 1 else (x1path, x1t)

    run = {
        "qmap F32": lambda b, t: qmap_run(a.qmap, f32, rows(b)[0], b, t)["rows_per_s"],
        "qmap Q8_ROW": lambda b, t: qmap_run(a.qmap, q8, rows(b)[0], b, t)["rows_per_s"],
        "qmap Q8 int8": lambda b, t: qmap_run(a.qmap, q8, rows(b)[0], b, t, "--act", "int8")["rows_per_s"],
        "torch F32": lambda b, t: torch_rate(model, rows(b)[1], b, t),
        "torch dyn-int8": lambda b, t: torch_rate(dyn, rows(b)[1], b, t),
    }
    rates = {(s, b, t): [] for s in SYSTEMS for b in BATCHES for t in THREADS}
    if agree >= 0.999:
        for _ in range(a.runs):          # every configuration once per round: drift hits all alike
            for b in BATCHES:
                for t in THREADS:
                    for s in SYSTEMS:
                        rates[(s, b, t)].append(run[s](b, t))
    med = {k: statistics.median(v) for k, v in rates.items() if v}

    def ratio(num, den, b, t):
        return med[(num, b, t)] / med[(den, b, t)] if (num, b, t) in med else float("nan")

    # the targets, judged per (batch, threads) row on the medians
    f32_met = {(b, t): ratio("qmap F32", "torch F32", b, t) >= TARGET_F32[b] for b in TARGET_F32 for t in THREADS}
    q8_met = {(b, t): ratio("qmap Q8_ROW", "torch dyn-int8", b, t) > 1 for b in BATCHES for t in THREADS}
    q8i_met = {(b, t): ratio("qmap Q8 int8", "torch dyn-int8", b, t) > 1 for b in BATCHES for t in THREADS}
    shape = "-".join([str(features)] + [str(m.out_features) for m in model if isinstance(m, nn.Linear)])
    if a.json:
        print(json.dumps({
            "model": a.model, "shape": shape, "rows": a.rows, "rows_batch1": n1, "runs": a.runs,
            "torch": torch.__version__, "quantized_engine": engine,
            "predictions": {"rows": len(ref), "differ": differ, "agree": agree},
            "rows_per_s": {"%s|b%d|t%d" % k: {"median": statistics.median(v), "min": min(v), "max": max(v),
                                               "runs": v} for k, v in rates.items() if v},
            "targets": {"f32_vs_torch_f32": {"b%d|t%d" % k: v for k, v in f32_met.items()},
                        "q8_vs_torch_dyn_int8": {"b%d|t%d" % k: v for k, v in q8_met.items()},
                        "q8_int8_vs_torch_dyn_int8": {"b%d|t%d" % k: v for k, v in q8i_met.items()}}},
            indent=1))
        return 0 if agree >= 0.999 else 1
    print("predictions: qmap F32 and torch F32 argmax differ on %d of %d rows (%.3f%% agree)"
          % (differ, len(ref), 100 * agree))
    if agree < 0.999:
        fail("qmap F32 agrees with torch F32 on fewer than 99.9%% of the rows: no timings")
    print("MLP %s (%s), %d rows (batch 1: %d); torch %s, dyn-int8 engine %s"
          % (shape, "random" if a.model == "random" else os.path.relpath(a.model), a.rows, n1, torch.__version__,
             engine))
    print("thousand rows/s, median of %d interleaved runs [min, max]; ratios qmap / torch from the medians" % a.runs)
    print("%-8s" % "batch,t" + "".join("%-24s" % s for s in SYSTEMS) + "F32 ratio   Q8 ratio (int8)")
    for b in BATCHES:
        for t in THREADS:
            cells = "".join("%-24s" % ("%.1f [%.1f, %.1f]" % (med[(s, b, t)] / 1e3, min(rates[(s, b, t)]) / 1e3,
                                                              max(rates[(s, b, t)]) / 1e3)) for s in SYSTEMS)
            print("%-8s%s%-12.2f%.2f (%.2f)" % ("%d,%d" % (b, t), cells, ratio("qmap F32", "torch F32", b, t),
                                                ratio("qmap Q8_ROW", "torch dyn-int8", b, t),
                                                ratio("qmap Q8 int8", "torch dyn-int8", b, t)))

    def verdict(met):
        return "MET" if all(met.values()) else "NOT MET (%s)" % "; ".join(
            "batch %d on %d thread%s" % (b, t, "s" * (t > 1)) for (b, t), ok in met.items() if not ok)
    print("targets (information, not pass/fail):")
    for b, goal in TARGET_F32.items():
        print("  qmap F32 >= %.1fx torch F32 at batch %d: %s"
              % (goal, b, verdict({k: v for k, v in f32_met.items() if k[0] == b})))
    print("  Q8_ROW ahead of torch dynamic int8 at every batch size: %s; with --act int8: %s"
          % (verdict(q8_met), verdict(q8i_met)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
