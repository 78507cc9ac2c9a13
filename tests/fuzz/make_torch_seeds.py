#!/usr/bin/python3
"""make_torch_seeds.py — write the torch.save seeds and fixtures of the torch importer.

    /usr/bin/python3 tests/fuzz/make_torch_seeds.py [OUTDIR]      (default: tests/fuzz/seeds)

Writes OUTDIR/torchzip/*.pt (torch.save archives, a few KB each) and OUTDIR/pickle/*.pkl (their
data.pkl, plus hostile pickles). tests/unit/test_pickle.c reads the archives as fixtures and checks the
names, dtypes, shapes, strides and values written here, so values are small arange()s, not random.
Every file is reproducible byte for byte except legacy.pt, whose storage keys are memory addresses.
Needs torch (Debian's python3-torch: run with /usr/bin/python3).
"""
import collections
import io
import os
import pickle
import sys
import zipfile

import torch


def arange(n, dtype):
    return torch.arange(n, dtype=torch.float64).to(dtype)


def saved(obj, **kw):
    b = io.BytesIO()
    torch.save(obj, b, **kw)   # a BytesIO gets the top-level folder "archive"
    return b.getvalue()


def rezip(data, compression=zipfile.ZIP_STORED, edit=None, zip64=False):
    """Copy an archive entry by entry (optionally deflating, with ZIP64 sizes, or editing the entries)."""
    src = zipfile.ZipFile(io.BytesIO(data))
    entries = [(i.filename, src.read(i.filename)) for i in src.infolist()]
    if edit:
        entries = edit(entries)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=compression) as z:
        for name, body in entries:
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = compression
            with z.open(info, "w", force_zip64=zip64) as f:
                f.write(body)
    return out.getvalue()


def data_pkl(data):
    z = zipfile.ZipFile(io.BytesIO(data))
    return z.read([n for n in z.namelist() if n.endswith("/data.pkl")][0])


class Evil:
    """Pickles as a call to os.system: what torch.load without weights_only would run."""

    def __init__(self, mod, name, arg):
        self.mod, self.name, self.arg = mod, name, arg

    def __reduce__(self):
        fn = getattr(__import__(self.mod), self.name)
        return (fn, (self.arg,))


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "seeds")
    zdir, pdir = os.path.join(out, "torchzip"), os.path.join(out, "pickle")
    os.makedirs(zdir, exist_ok=True)
    os.makedirs(pdir, exist_ok=True)

    w = arange(12, torch.float32).reshape(3, 4)
    zips = {}
    # every storage type, one tensor each
    zips["dtypes.pt"] = saved(collections.OrderedDict([
        ("f32", arange(6, torch.float32).reshape(2, 3)),
        ("f16", arange(4, torch.float16)),
        ("bf16", arange(4, torch.bfloat16)),
        ("f64", arange(3, torch.float64)),
        ("i64", arange(2, torch.int64)),
        ("i32", arange(2, torch.int32)),
        ("i16", arange(2, torch.int16)),
        ("i8", arange(2, torch.int8)),
        ("u8", arange(2, torch.uint8)),
        ("bool", torch.tensor([True, False])),
    ]))
    # two names, one storage (tied embeddings)
    zips["tied.pt"] = saved(collections.OrderedDict([("embed.weight", w), ("lm_head.weight", w)]))
    # views of one storage: a transpose (strides 1, 4) and a slice starting at element 4
    zips["views.pt"] = saved(collections.OrderedDict([("base", w), ("t", w.t()), ("rows", w[1:])]))
    sd = collections.OrderedDict([("layer.weight", w), ("layer.bias", arange(4, torch.float32))])
    zips["wrap_state_dict.pt"] = saved({"state_dict": sd, "note": "trained", "lr": 0.5})
    zips["wrap_model.pt"] = saved({"model": sd, "epoch": 3, "optimizer": {"state": {}, "param_groups": []}})
    zips["parameter.pt"] = saved({"p": torch.nn.Parameter(arange(3, torch.float32))})
    zips["scalar.pt"] = saved({"s": torch.tensor(3.0)})
    lin = torch.nn.Linear(3, 2)
    with torch.no_grad():
        lin.weight.copy_(arange(6, torch.float32).reshape(2, 3))
        lin.bias.copy_(arange(2, torch.float32))
    zips["linear.pt"] = saved(lin.state_dict())          # OrderedDict + BUILD of _metadata
    zips["linear_proto4.pt"] = saved(lin.state_dict(), pickle_protocol=4)   # FRAME, STACK_GLOBAL, MEMOIZE
    zips["deflated.pt"] = rezip(zips["views.pt"], zipfile.ZIP_DEFLATED)
    zips["zip64.pt"] = rezip(zips["views.pt"], zip64=True)
    zips["byteorder_little.pt"] = rezip(zips["tied.pt"], edit=lambda e: e + [("archive/byteorder", b"little")])
    zips["byteorder_big.pt"] = rezip(zips["tied.pt"], edit=lambda e: e + [("archive/byteorder", b"big")])
    # hostile: a data.pkl that would run os.system under a plain torch.load
    hostile = pickle.dumps({"w": Evil("os", "system", "echo pwned")}, protocol=2)
    zips["hostile_os_system.pt"] = rezip(zips["scalar.pt"], edit=lambda e: [
        (n, hostile if n.endswith("/data.pkl") else b) for n, b in e])
    # broken archives: each must be refused with QM_ERR_BAD_SOURCE
    zips["bad_storage_size.pt"] = rezip(zips["tied.pt"], edit=lambda e: [
        (n, b[:-4] if n.endswith("/data/0") else b) for n, b in e])
    zips["missing_storage.pt"] = rezip(zips["tied.pt"], edit=lambda e: [(n, b) for n, b in e
                                                                        if not n.endswith("/data/0")])
    zips["two_folders.pt"] = rezip(zips["tied.pt"], edit=lambda e: e + [("other/x", b"x")])
    zips["no_data_pkl.pt"] = rezip(zips["tied.pt"], edit=lambda e: [(n, b) for n, b in e
                                                                    if not n.endswith("/data.pkl")])
    # legacy (pre-1.6) format: refused with a hint to re-save
    b = io.BytesIO()
    torch.save({"s": torch.tensor(1.0)}, b, _use_new_zipfile_serialization=False)
    zips["legacy.pt"] = b.getvalue()

    for name, data in sorted(zips.items()):
        with open(os.path.join(zdir, name), "wb") as f:
            f.write(data)
        if name not in ("legacy.pt", "no_data_pkl.pt"):
            with open(os.path.join(pdir, name[:-3] + ".pkl"), "wb") as f:
                f.write(data_pkl(data))
    evil = {
        "builtins_eval.pkl": pickle.dumps(Evil("builtins", "eval", "1+1"), protocol=2),
        "posix_system.pkl": pickle.dumps(Evil("posix", "system", "true"), protocol=4),
        "os_system_proto0.pkl": pickle.dumps(Evil("os", "system", "true"), protocol=0),
    }
    for name, data in evil.items():
        with open(os.path.join(pdir, name), "wb") as f:
            f.write(data)
    print("wrote %d archives to %s, %d pickles to %s" % (len(zips), zdir, len(os.listdir(pdir)), pdir))


if __name__ == "__main__":
    main()
