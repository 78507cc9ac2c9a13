#!/usr/bin/env python3
"""test_mlp.py — `qmap run` on classifiers (mlp) against PyTorch (issue 14 §1).

- The shipped digits classifier (tests/data/digits_mlp: trained on scikit-learn's 1,797 real 8x8 digits,
  its held-out 450 rows and torch's logits saved beside it): F32 logits within 1e-5 x max|logit| of
  torch's and the same predicted class on every row; accuracy printed; Q8_ROW accuracy within 1 point of
  F32 (and both printed).
- Models built here with every activation the format names (relu, gelu, silu, tanh, sigmoid), with and
  without biases, ending in logits, softmax or log_softmax: F32 within 1e-5 of torch; F16 within 1e-5 of
  torch running the F16-rounded weights; Q8_ROW within 2e-4 of torch running the dequantized weights
  (spec/FORMAT.md 6.1, tests/spec_writer.py).
- Batches: -b 1, 7 and 4096 give the same outputs (1e-6: a one-row product may sum in another order);
  1 and 2 threads the same bits; --output writes exactly the outputs as a float32 .npy; --json lists the
  predictions, the accuracy and the confusion matrix (checked against numpy's).
- Inputs: float64 and uint8 .npy are read (converted to float), [n, 8, 8] is flattened.
- The shipped Fashion-MNIST classifier (tests/data/fashion_mlp, trained by tests/tools/train_fashion_mlp.py)
  on the 10,000 real test images as Debian's dataset-fashion-mnist ships them (IDX, gzip): the pixels
  mapped by the container's input_scale/input_offset, F32 predicts exactly torch's class on every image
  (torch computed here from model.pt), F16 and Q8_ROW accuracy within 0.3 points of F32 (all printed);
  the same images as a plain IDX, a uint8 .npy and a big-endian float32 IDX give the same outputs; class
  names (id2label) in the output and --json.
- Errors: a wrong feature count, an empty input, an input of another dtype, a label out of range, a
  classifier without --input, labels of another length, a gzip IDX cut short, an IDX with bytes after its data, a file that is neither .npy nor IDX, an
  id2label that does not name every class — each one line and exit 1.
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np
import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))

from checks import Checks, fresh_dir  # noqa: E402
import spec_writer  # noqa: E402


def run(qmap, *args):
    return subprocess.run([qmap] + list(args), capture_output=True, text=True)


def rel(a, b):
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


def qmap_outputs(c, qmap, model_path, x_path, d, tag, *extra):
    out = os.path.join(d, "out-%s.npy" % tag)
    r = run(qmap, "run", model_path, "--input", x_path, "-o", out, "-q", *extra)
    if not c.check(tag, "qmap run --input", r.returncode == 0, r.stderr.strip()):
        return None
    return np.load(out)


def weights_as(model, how):
    """A copy whose Linear weights hold what the container stores: F16-rounded or Q8_ROW dequantized."""
    import copy
    m = copy.deepcopy(model)
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, nn.Linear):
                w = mod.weight.detach().numpy().astype(np.float32)
                if how == "f16":
                    d = w.astype(np.float16).astype(np.float32)
                else:
                    q, s, _ = spec_writer.quantize_q8row(np.ascontiguousarray(w))
                    d = q.astype(np.float32) * s.astype(np.float32)[:, None]
                mod.weight.copy_(torch.from_numpy(d))
    return m


ACTS = {"relu": nn.ReLU, "gelu": nn.GELU, "silu": nn.SiLU, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid}


def built_cases(c, qmap, d, rng):
    cases = [
        ("relu-logits", ["relu", "relu"], True, "logits"),
        ("gelu-softmax", ["gelu", "tanh"], True, "softmax"),
        ("silu-logsoftmax", ["silu", "sigmoid"], False, "log_softmax"),
    ]
    x = rng.randn(300, 48).astype(np.float32)
    xp = os.path.join(d, "x48.npy")
    np.save(xp, x)
    for name, acts, bias, output in cases:
        torch.manual_seed(len(name))
        layers = [nn.Linear(48, 96, bias=bias), ACTS[acts[0]](), nn.Linear(96, 40, bias=bias), ACTS[acts[1]](),
                  nn.Linear(40, 7, bias=bias)]
        if output == "softmax":
            layers.append(nn.Softmax(dim=-1))
        elif output == "log_softmax":
            layers.append(nn.LogSoftmax(dim=-1))
        model = nn.Sequential(*layers).eval()
        src = fresh_dir(os.path.join(d, name))
        torch.save(model.state_dict(), os.path.join(src, "model.pt"))
        with open(os.path.join(src, "config.json"), "w") as f:
            json.dump({"model_type": "mlp", "activations": acts + ["identity"], "output": output}, f)
        f32 = os.path.join(d, name + ".qmap")
        r = run(qmap, "convert", os.path.join(src, "model.pt"), "-o", f32, "-q")
        if not c.check(name, "convert", r.returncode == 0, r.stderr.strip()):
            continue
        with torch.no_grad():
            ref = model(torch.from_numpy(x)).numpy().astype(np.float64)
        got = qmap_outputs(c, qmap, f32, xp, d, name)
        if got is not None:
            c.check(name, "F32 within 1e-5 of torch (%.1e)" % rel(got, ref), rel(got, ref) < 1e-5)
        for how, tol in (("f16", 1e-5), ("q8", 2e-4)):   # Q8_ROW: two int8 terms for X (qr_matmul.h)
            qp = os.path.join(d, "%s-%s.qmap" % (name, how))
            r = run(qmap, "quantize", "--" + how, f32, "-o", qp, "-q")
            if not c.check(name, "quantize --%s" % how, r.returncode == 0, r.stderr.strip()):
                continue
            with torch.no_grad():
                ref_q = weights_as(model, how)(torch.from_numpy(x)).numpy().astype(np.float64)
            got = qmap_outputs(c, qmap, qp, xp, d, name + "-" + how)
            if got is not None:
                c.check(name, "%s within %g of torch on the same weights (%.1e)" % (how.upper(), tol, rel(got, ref_q)),
                        rel(got, ref_q) < tol)


FASHION = "/usr/share/datasets/fashion-mnist"


def read_idx_gz(path):
    import gzip
    import struct
    with gzip.open(path, "rb") as f:
        raw = f.read()
    rank = raw[3]
    dims = struct.unpack(">%dI" % rank, raw[4:4 + 4 * rank])
    return raw, np.frombuffer(raw, np.uint8, offset=4 + 4 * rank).reshape(dims)


def fashion_cases(c, q, d):
    src = os.path.join(ROOT, "tests", "data", "fashion_mlp")
    with open(os.path.join(src, "config.json")) as f:
        cfg = json.load(f)
    xgz, ygz = os.path.join(FASHION, "t10k-images-idx3-ubyte.gz"), os.path.join(FASHION, "t10k-labels-idx1-ubyte.gz")
    raw, images = read_idx_gz(xgz)
    _, labels = read_idx_gz(ygz)
    # torch on the same input map qmap applies (float32 scale and offset, as the container stores them)
    sd = torch.load(os.path.join(src, "model.pt"))
    model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10)).eval()
    model.load_state_dict(sd)
    feats = images.reshape(-1, 784).astype(np.float32) * np.float32(cfg["input_scale"]) + np.float32(cfg["input_offset"])
    with torch.no_grad():
        ref = model(torch.from_numpy(feats)).numpy().astype(np.float64)
    torch_acc = float((ref.argmax(1) == labels).mean())
    paths = {"f32": os.path.join(d, "fashion.qmap")}
    r = run(q, "convert", os.path.join(src, "model.pt"), "-o", paths["f32"], "-q")
    if not c.check("fashion", "convert", r.returncode == 0, r.stderr.strip()):
        return
    for how in ("f16", "q8"):
        paths[how] = os.path.join(d, "fashion-%s.qmap" % how)
        r = run(q, "quantize", "--" + how, paths["f32"], "-o", paths[how], "-q")
        c.check("fashion", "quantize --" + how, r.returncode == 0, r.stderr.strip())
    got = qmap_outputs(c, q, paths["f32"], xgz, d, "fashion-f32")
    if got is not None:
        pred = got.argmax(1)
        c.check("fashion", "F32 logits within 1e-5 of torch's (%.1e)" % rel(got, ref), rel(got, ref) < 1e-5)
        c.check("fashion", "F32 predicts torch's class on every one of the %d test images (%d differ)"
                % (len(labels), int((pred != ref.argmax(1)).sum())), (pred == ref.argmax(1)).all())
    accs = {}
    for how, path in paths.items():
        r = run(q, "run", path, "--input", xgz, "--labels", ygz, "--json")
        res = json.loads(r.stdout) if r.returncode == 0 else {}
        accs[how] = res.get("accuracy", -1)
        if how == "f32":
            c.check("fashion", "--json names the classes from id2label",
                    res.get("class_names") == [cfg["id2label"][str(i)] for i in range(10)], r.stderr.strip())
    print("     Fashion-MNIST test accuracy (10,000 images): torch F32 %.2f%%, qmap F32 %.2f%%, F16 %.2f%%, "
          "Q8_ROW %.2f%%" % (100 * torch_acc, 100 * accs["f32"], 100 * accs["f16"], 100 * accs["q8"]))
    c.check("fashion", "qmap F32 accuracy equals torch's", abs(accs["f32"] - torch_acc) < 1e-12)
    for how in ("f16", "q8"):
        c.check("fashion", "%s accuracy within 0.3 points of F32" % how.upper(), abs(accs[how] - accs["f32"]) <= 0.003)
    r = run(q, "run", paths["f32"], "--input", xgz, "--labels", ygz)
    c.check("fashion", "the text output names the classes", r.returncode == 0 and "(Ankle boot)" in r.stdout
            and "accuracy 89." in r.stdout, r.stderr.strip())
    # the same images in other containers
    plain = os.path.join(d, "t10k-images.idx")
    with open(plain, "wb") as f:
        f.write(raw)
    u8 = os.path.join(d, "t10k-images-u8.npy")
    np.save(u8, images)
    import struct
    f32be = os.path.join(d, "t10k-feats-f32be.idx")
    with open(f32be, "wb") as f:
        f.write(bytes([0, 0, 0x0D, 2]) + struct.pack(">II", len(feats), 784) + feats.astype(">f4").tobytes())
    if got is not None:
        for what, path in (("plain IDX", plain), ("uint8 .npy [n, 28, 28]", u8), ("big-endian float32 IDX", f32be)):
            o = qmap_outputs(c, q, paths["f32"], path, d, "fashion-" + what.split()[0])
            if o is not None:
                c.check("fashion", "%s gives the same outputs as the gzip IDX" % what, np.array_equal(o, got))
    # bad input
    cut = os.path.join(d, "cut.idx.gz")
    with open(xgz, "rb") as f:
        blob = f.read()
    with open(cut, "wb") as f:
        f.write(blob[:len(blob) // 2])
    r = run(q, "run", paths["f32"], "--input", cut)
    c.check("errors", "a gzip IDX cut short is refused naming the file", r.returncode == 1 and "cut.idx.gz" in r.stderr
            and ("cut short" in r.stderr or "ends after" in r.stderr), r.stderr.strip())
    trail = os.path.join(d, "trailing.idx")
    with open(trail, "wb") as f:
        f.write(raw[:4 + 12 + 784 * 2] .replace(struct.pack(">I", 10000), struct.pack(">I", 1), 1) + b"x")
    r = run(q, "run", paths["f32"], "--input", trail)
    c.check("errors", "an IDX with bytes after its data is refused", r.returncode == 1 and "follow" in r.stderr,
            r.stderr.strip())
    other = os.path.join(d, "notes.txt")
    with open(other, "w") as f:
        f.write("pixels\n")
    r = run(q, "run", paths["f32"], "--input", other)
    c.check("errors", "a file that is neither .npy nor IDX says so", r.returncode == 1 and "neither" in r.stderr,
            r.stderr.strip())
    short_y = os.path.join(d, "labels-short.npy")
    np.save(short_y, labels[:100].astype(np.int64))
    r = run(q, "run", paths["f32"], "--input", xgz, "--labels", short_y)
    c.check("errors", "labels of another length name both counts", r.returncode == 1 and "100" in r.stderr
            and "10000" in r.stderr, r.stderr.strip())
    bad = fresh_dir(os.path.join(d, "bad-id2label"))
    torch.save(sd, os.path.join(bad, "model.pt"))
    with open(os.path.join(bad, "config.json"), "w") as f:
        json.dump(dict(cfg, id2label={"0": "a", "1": "b"}), f)
    r = run(q, "convert", os.path.join(bad, "model.pt"), "-o", os.path.join(d, "bad.qmap"), "-q")
    c.check("errors", "an id2label that does not name every class is refused", r.returncode == 1
            and "id2label" in r.stderr and "10" in r.stderr, r.stderr.strip())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--qmap", required=True)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    c = Checks(None)
    d = fresh_dir(a.workdir)
    q = a.qmap
    rng = np.random.RandomState(5)

    # the shipped, really trained digits classifier
    data = os.path.join(ROOT, "tests", "data", "digits_mlp")
    z = np.load(os.path.join(data, "test.npz"))
    x, y, logits = z["x"], z["y"], z["logits"].astype(np.float64)
    xp, yp = os.path.join(d, "digits-x.npy"), os.path.join(d, "digits-y.npy")
    np.save(xp, x)
    np.save(yp, y)
    f32, q8 = os.path.join(d, "digits.qmap"), os.path.join(d, "digits-q8.qmap")
    r = run(q, "convert", os.path.join(data, "model.pt"), "-o", f32, "-q")
    c.check("digits", "convert", r.returncode == 0, r.stderr.strip())
    r = run(q, "quantize", "--q8", f32, "-o", q8, "-q")
    c.check("digits", "quantize --q8", r.returncode == 0, r.stderr.strip())
    got = qmap_outputs(c, q, f32, xp, d, "digits")
    if got is not None:
        c.check("digits", "F32 logits within 1e-5 of torch's (%.1e)" % rel(got, logits), rel(got, logits) < 1e-5)
        c.check("digits", "the same class as torch on all %d held-out digits" % len(y),
                (got.argmax(1) == logits.argmax(1)).all())
    accs = {}
    for tag, path in (("f32", f32), ("q8", q8)):
        r = run(q, "run", path, "--input", xp, "--labels", yp, "--json")
        res = json.loads(r.stdout) if r.returncode == 0 else {}
        accs[tag] = res.get("accuracy", -1)
        if tag == "f32":
            pred = np.array(res.get("predictions", []))
            conf = np.zeros((10, 10), dtype=int)
            for t, p in zip(y, pred):
                conf[t, p] += 1
            c.check("digits", "--json: predictions, accuracy and confusion matrix as numpy computes them",
                    len(pred) == len(y) and abs(accs[tag] - (pred == y).mean()) < 1e-12
                    and np.array_equal(np.array(res.get("confusion")), conf), r.stderr.strip())
    print("     digits accuracy: F32 %.2f%%, Q8_ROW %.2f%% (torch %.2f%%)" %
          (100 * accs["f32"], 100 * accs["q8"], 100 * (logits.argmax(1) == y).mean()))
    c.check("digits", "Q8_ROW accuracy within 1 point of F32", abs(accs["q8"] - accs["f32"]) <= 0.01)

    # batches and threads
    outs = {b: qmap_outputs(c, q, f32, xp, d, "b%d" % b, "-b", str(b)) for b in (1, 7, 4096)}
    if all(o is not None for o in outs.values()):
        c.check("batch", "-b 1, 7 and 4096 give the same outputs (1e-6)",
                rel(outs[1], outs[4096]) < 1e-6 and rel(outs[7], outs[4096]) < 1e-6)
    t1 = qmap_outputs(c, q, q8, xp, d, "t1", "-t", "1", "-b", "64")
    t2 = qmap_outputs(c, q, q8, xp, d, "t2", "-t", "2", "-b", "64")
    if t1 is not None and t2 is not None:
        c.check("batch", "1 and 2 threads give the same bits (Q8_ROW, batch 64)", np.array_equal(t1, t2))

    # other input types
    for what, arr in (("float64", x.astype(np.float64)), ("[n, 8, 8]", x.reshape(-1, 8, 8))):
        p = os.path.join(d, "x-%s.npy" % what.replace(" ", "").replace(",", "-").strip("[]"))
        np.save(p, arr)
        o = qmap_outputs(c, q, f32, p, d, "in-" + what)
        if o is not None:
            c.check("input", "%s rows give the float32 outputs" % what, rel(o, got) < 1e-6)
    u8 = (x * 16).round().astype(np.uint8)
    p = os.path.join(d, "x-u8.npy")
    np.save(p, u8)
    pf = os.path.join(d, "x-u8-as-f32.npy")
    np.save(pf, u8.astype(np.float32))
    o, of = qmap_outputs(c, q, f32, p, d, "in-u8"), qmap_outputs(c, q, f32, pf, d, "in-u8f")
    if o is not None and of is not None:
        c.check("input", "uint8 rows are read as their values (= the same values as float32)", np.array_equal(o, of))

    built_cases(c, q, d, rng)
    fashion_cases(c, q, d)

    # errors
    bad = os.path.join(d, "x-bad.npy")
    np.save(bad, x[:, :60])
    r = run(q, "run", f32, "--input", bad)
    c.check("errors", "a wrong feature count names both", r.returncode == 1 and "60" in r.stderr and "64" in r.stderr,
            r.stderr.strip())
    yb = os.path.join(d, "y-bad.npy")
    np.save(yb, np.where(np.arange(len(y)) == 3, 10, y))
    r = run(q, "run", f32, "--input", xp, "--labels", yb)
    c.check("errors", "a label out of range names its row", r.returncode == 1 and "row 3" in r.stderr, r.stderr.strip())
    empty = os.path.join(d, "x-empty.npy")
    np.save(empty, np.zeros((0, 64), np.float32))
    r = run(q, "run", f32, "--input", empty)
    c.check("errors", "an empty input (0 rows) is refused saying so", r.returncode == 1 and "0 rows" in r.stderr,
            r.stderr.strip())
    boolx = os.path.join(d, "x-bool.npy")
    np.save(boolx, x > 0.5)
    r = run(q, "run", f32, "--input", boolx)
    c.check("errors", "an input of another dtype (bool) names the dtypes it takes", r.returncode == 1
            and "float32" in r.stderr, r.stderr.strip())
    r = run(q, "run", f32, "-p", "hello")
    c.check("errors", "a classifier without --input says what it needs", r.returncode == 1 and "--input" in r.stderr,
            r.stderr.strip())
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
