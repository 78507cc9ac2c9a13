#!/usr/bin/python3
"""train_fashion_mlp.py — train the Fashion-MNIST classifier that ships in tests/data/fashion_mlp.

A 784-256-128-10 ReLU MLP trained with PyTorch (Debian's python3-torch) on the 60,000 training images of
Fashion-MNIST as Debian's dataset-fashion-mnist ships them (IDX files, gzip, under
/usr/share/datasets/fashion-mnist/), fixed seeds, a few minutes on 2 cores. The pixels are fed to the
network as torchvision's ToTensor + Normalize would: x = (pixel / 255 - mean) / std, with one mean and one
std over the training pixels; the same map is written to config.json as `input_scale` = 1 / (255 std)
and `input_offset` = -mean / std, so that `qmap run --input t10k-images-idx3-ubyte.gz` feeds the
network exactly what torch saw. Writes into OUTDIR:
  model.pt      torch.save(state_dict) (zip format), float32
  config.json   model_type mlp, activation relu, input_scale, input_offset, id2label (class names)
  train.log     the training log (loss per epoch, test accuracy)
Only the 60,000 training images are used for training; the 10,000 test images are for the tests, which
compute torch's predictions on them from model.pt themselves (tests/run/test_mlp.py).

    /usr/bin/python3 tests/tools/train_fashion_mlp.py tests/data/fashion_mlp [--epochs 12]
"""
import argparse
import gzip
import json
import os
import struct
import time

import numpy as np
import torch
import torch.nn as nn

DATA = "/usr/share/datasets/fashion-mnist"
CLASSES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
           "Ankle boot"]


def read_idx(path):
    """An IDX file (gzip) as a numpy array: magic 0 0 type rank, rank big-endian u32 dims, the data."""
    with gzip.open(path, "rb") as f:
        raw = f.read()
    zero, kind, rank = struct.unpack(">HBB", raw[:4])
    assert zero == 0 and kind == 0x08, "%s: not a uint8 IDX file" % path
    dims = struct.unpack(">%dI" % rank, raw[4:4 + 4 * rank])
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * rank).reshape(dims)


def build():
    return nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("outdir")
    ap.add_argument("--epochs", type=int, default=12)
    a = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(os.cpu_count() or 1)
    xtr = read_idx(os.path.join(DATA, "train-images-idx3-ubyte.gz")).reshape(-1, 784)
    ytr = read_idx(os.path.join(DATA, "train-labels-idx1-ubyte.gz")).astype(np.int64)
    xte = read_idx(os.path.join(DATA, "t10k-images-idx3-ubyte.gz")).reshape(-1, 784)
    yte = read_idx(os.path.join(DATA, "t10k-labels-idx1-ubyte.gz")).astype(np.int64)
    mean = float(xtr.mean() / 255.0)
    std = float((xtr / 255.0).std())
    scale, offset = 1.0 / (255.0 * std), -mean / std

    def prep(u8):
        # the map qmap applies to uint8 input, computed the same way (float32: scale and offset are
        # stored as F32)
        return torch.from_numpy(u8.astype(np.float32) * np.float32(scale) + np.float32(offset))

    xt, yt, xv = prep(xtr), torch.from_numpy(ytr), prep(xte)
    model = build()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=a.epochs)
    log = []

    def say(line):
        print(line, flush=True)
        log.append(line)

    say("Fashion-MNIST MLP 784-256-128-10 (ReLU), Adam lr 1e-3 cosine, batch 128, %d epochs, seed 0" % a.epochs)
    say("input map: x = pixel * %.9g + %.9g  (mean %.6f, std %.6f over the training pixels)" % (scale, offset, mean, std))
    t0 = time.time()
    for epoch in range(a.epochs):
        model.train()
        perm = torch.randperm(len(xt))
        total, batches = 0.0, 0
        for i in range(0, len(xt), 128):
            idx = perm[i:i + 128]
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(xt[idx]), yt[idx])
            loss.backward()
            opt.step()
            total += float(loss)
            batches += 1
        sched.step()
        model.eval()
        with torch.no_grad():
            acc = float((model(xv).argmax(1).numpy() == yte).mean())
        say("epoch %2d  train loss %.4f  test accuracy %.4f  (%.0f s)" % (epoch + 1, total / batches, acc, time.time() - t0))
    say("final test accuracy %.4f on %d images" % (acc, len(yte)))
    os.makedirs(a.outdir, exist_ok=True)
    torch.save(model.state_dict(), os.path.join(a.outdir, "model.pt"))
    cfg = {"model_type": "mlp", "activation": "relu", "input_scale": scale, "input_offset": offset,
           "id2label": {str(i): c for i, c in enumerate(CLASSES)}}
    with open(os.path.join(a.outdir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
        f.write("\n")
    with open(os.path.join(a.outdir, "train.log"), "w") as f:
        f.write("\n".join(log) + "\n")


if __name__ == "__main__":
    main()
