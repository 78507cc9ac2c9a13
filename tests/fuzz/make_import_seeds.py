#!/usr/bin/python3
"""make_import_seeds.py — write the importer seed files in tests/fuzz/seeds/{npy,npz,safetensors}/.

    /usr/bin/python3 tests/fuzz/make_import_seeds.py [OUTDIR]      (default: tests/fuzz/seeds)

The .npy/.npz files come from NumPy itself (np.save, np.savez, np.savez_compressed,
np.lib.format.write_array for versions 2.0 and 3.0), so the importer is tested against what the real
writer produces. The safetensors package is not available here, so that file is written from the format
description: u64 LE header length, JSON header padded with spaces to a multiple of 8, then the tensors
back to back. The unit tests (tests/unit/test_importers.c) read some of these files and know their
contents, so change both together. Reproducers of fixed fuzzer findings live beside these seeds and are
not written by this script.
"""
import json
import os
import struct
import sys

import numpy as np


def arange(shape, dtype):
    n = int(np.prod(shape)) if len(shape) else 1
    return (np.arange(n) % 100).astype(dtype).reshape(shape)


def write_npy(out):
    d = os.path.join(out, "npy")
    os.makedirs(d, exist_ok=True)
    # every dtype the importer accepts, ranks 0..4
    cases = {
        "f4_2x3": arange((2, 3), "<f4"),
        "f2_4": arange((4,), "<f2"),
        "f8_scalar": np.array(1.5, dtype="<f8"),
        "i8_2x2x2": arange((2, 2, 2), "<i8"),
        "i4_1x2x3x4": arange((1, 2, 3, 4), "<i4"),
        "i2_3": arange((3,), "<i2"),
        "i1_5": arange((5,), "i1"),
        "u1_5": arange((5,), "u1"),
        "b1_4": np.array([True, False, True, True]),
        "f4_empty_0x3": np.zeros((0, 3), dtype="<f4"),
    }
    for name, a in cases.items():
        np.save(os.path.join(d, name + ".npy"), a)
    # column-major: the bytes are the transpose's, the header says fortran_order True
    np.save(os.path.join(d, "f4_fortran_2x3.npy"), np.asfortranarray(arange((2, 3), "<f4")))
    for ver in ((2, 0), (3, 0)):
        with open(os.path.join(d, "f4_v%d.npy" % ver[0]), "wb") as f:
            np.lib.format.write_array(f, arange((2, 2), "<f4"), version=ver)
    # refusals the fuzzer should start from
    np.save(os.path.join(d, "bad_big_endian.npy"), arange((3,), ">f4"))
    np.save(os.path.join(d, "bad_object.npy"), np.array([1, "x"], dtype=object), allow_pickle=True)


def write_npz(out):
    d = os.path.join(out, "npz")
    os.makedirs(d, exist_ok=True)
    arrays = {"w": arange((2, 3), "<f4"), "b": arange((3,), "<f2"), "n": arange((2, 2), "<i8")}
    np.savez(os.path.join(d, "stored.npz"), **arrays)
    np.savez_compressed(os.path.join(d, "deflated.npz"), **arrays)
    np.savez(os.path.join(d, "positional.npz"), arange((4,), "<f4"), np.asfortranarray(arange((2, 3), "<f8")))


def write_safetensors(path, tensors, metadata=None):
    """tensors: list of (name, numpy array); laid out in list order."""
    header, blobs, at = {}, [], 0
    if metadata is not None:
        header["__metadata__"] = metadata
    dt = {"float32": "F32", "float16": "F16", "float64": "F64", "int64": "I64", "int32": "I32",
          "int16": "I16", "int8": "I8", "uint8": "U8", "bool": "BOOL"}
    for name, a in tensors:
        b = np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": dt[a.dtype.name], "shape": list(a.shape), "data_offsets": [at, at + len(b)]}
        blobs.append(b)
        at += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def write_st(out):
    d = os.path.join(out, "safetensors")
    os.makedirs(d, exist_ok=True)
    write_safetensors(os.path.join(d, "model.safetensors"), [
        ("model.embed.weight", arange((4, 3), "<f4")),
        ("model.norm.weight", arange((3,), "<f2")),
        ("model.layers.0.bias", arange((3,), "<f8")),
        ("position_ids", arange((1, 4), "<i8")),
        ("scale", np.array(2.0, dtype="<f4")),
    ], metadata={"format": "pt"})
    bf16 = (arange((2, 2), "<f4").view("<u4") >> 16).astype("<u2")
    tensors = [("t.i32", arange((2, 2, 2, 2), "<i4")), ("t.i16", arange((2,), "<i2")),
               ("t.i8", arange((3,), "i1")), ("t.u8", arange((3,), "u1")), ("t.bool", np.array([True, False])),
               ("t.empty", np.zeros((0,), "<f4"))]
    write_safetensors(os.path.join(d, "dtypes.safetensors"), tensors)
    # BF16 has no NumPy dtype: patch its header entry by hand
    p = os.path.join(d, "bf16.safetensors")
    write_safetensors(p, [("w", bf16.view("<i2"))])
    with open(p, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    hdr = raw[8:8 + n].replace(b'"I16"', b'"BF16"')
    hdr = hdr.rstrip(b" ")
    hdr += b" " * ((8 - len(hdr) % 8) % 8)
    with open(p, "wb") as f:
        f.write(struct.pack("<Q", len(hdr)) + hdr + raw[8 + n:])


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "seeds")
    write_npy(out)
    write_npz(out)
    write_st(out)


if __name__ == "__main__":
    main()
