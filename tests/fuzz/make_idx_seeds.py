#!/usr/bin/python3
"""make_idx_seeds.py — seeds for fuzz_idx from the real Fashion-MNIST files (Debian dataset-fashion-mnist).

The real files are too large for a fuzzer's inputs, so the seeds are real data made small: the first
images and labels of the test split with their headers rewritten to match (plain and gzip), the real
t10k image file's first 4 KiB (a gzip stream cut short, its header claiming 10,000 images), and one IDX
of each other element type holding real pixels (big-endian, as the format says).

    /usr/bin/python3 tests/fuzz/make_idx_seeds.py tests/fuzz/seeds/idx
"""
import gzip
import os
import struct
import sys

import numpy as np

DATA = "/usr/share/datasets/fashion-mnist"


def read(name):
    with gzip.open(os.path.join(DATA, name), "rb") as f:
        raw = f.read()
    kind, rank = raw[2], raw[3]
    dims = struct.unpack(">%dI" % rank, raw[4:4 + 4 * rank])
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * rank).reshape(dims)


def idx(arr, code, be):
    return bytes([0, 0, code, arr.ndim]) + struct.pack(">%dI" % arr.ndim, *arr.shape) + arr.astype(be).tobytes()


def main(out):
    os.makedirs(out, exist_ok=True)
    images = read("t10k-images-idx3-ubyte.gz")[:3]
    labels = read("t10k-labels-idx1-ubyte.gz")[:100]
    seeds = {
        "images3.idx": idx(images, 0x08, ">u1"),
        "labels100.idx": idx(labels, 0x08, ">u1"),
        "images1-i8.idx": idx(images[:1].astype(np.int8), 0x09, ">i1"),
        "images1-i16.idx": idx(images[:1], 0x0B, ">i2"),
        "images1-i32.idx": idx(images[:1], 0x0C, ">i4"),
        "images1-f32.idx": idx(images[:1] / 255.0, 0x0D, ">f4"),
        "images1-f64.idx": idx(images[:1, :4, :4] / 255.0, 0x0E, ">f8"),
    }
    seeds["images3.idx.gz"] = gzip.compress(seeds["images3.idx"], mtime=0)
    seeds["labels100.idx.gz"] = gzip.compress(seeds["labels100.idx"], mtime=0)
    with open(os.path.join(DATA, "t10k-images-idx3-ubyte.gz"), "rb") as f:
        seeds["t10k-images-cut.gz"] = f.read(4096)
    for name, data in seeds.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main(sys.argv[1])
