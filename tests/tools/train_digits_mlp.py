#!/usr/bin/python3
"""train_digits_mlp.py — train the small model that ships with the repo (the quick start converts it).

An MLP classifier (64-128-64-10, ReLU) for scikit-learn's 8x8 handwritten digits, trained with PyTorch
(Debian's python3-torch, python3-sklearn), fixed seeds. Writes into OUTDIR:
  model.pt      torch.save(state_dict) (zip format)
  config.json   {"model_type": "mlp", "activation": "relu"} (what qmap convert needs besides the tensors)
  test.npz      the held-out test split (x float32 [n, 64] scaled to [0, 1], y int64) and PyTorch's logits
                on it, for checking a runtime against PyTorch later
Prints the test accuracy. Usage: /usr/bin/python3 tests/tools/train_digits_mlp.py OUTDIR
"""
import json
import os
import sys

import numpy as np
import torch
import torch.nn as nn
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split


def main(outdir):
    torch.manual_seed(0)
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=0.25, random_state=0, stratify=y)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 10))
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    xt, yt = torch.from_numpy(xtr), torch.from_numpy(ytr)
    for epoch in range(60):
        perm = torch.randperm(len(xt))
        for i in range(0, len(xt), 64):
            idx = perm[i:i + 64]
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(xt[idx]), yt[idx])
            loss.backward()
            opt.step()
    model.eval()
    with torch.no_grad():
        logits = model(torch.from_numpy(xte)).numpy()
    acc = float((logits.argmax(1) == yte).mean())
    os.makedirs(outdir, exist_ok=True)
    torch.save(model.state_dict(), os.path.join(outdir, "model.pt"))
    with open(os.path.join(outdir, "config.json"), "w") as f:
        json.dump({"model_type": "mlp", "activation": "relu"}, f, indent=1)
        f.write("\n")
    np.savez_compressed(os.path.join(outdir, "test.npz"), x=xte, y=yte, logits=logits)
    print(f"digits MLP 64-128-64-10: test accuracy {acc:.4f} on {len(yte)} images")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__)
        sys.exit(2)
    main(sys.argv[1])
