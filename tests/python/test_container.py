"""qmap.open (the container without a model) against torch, `qmap inspect --json`, `qmap verify` and the numpy
reference of spec 6.1 (tests/quantize/reference.py); tensors as views of the mapping."""
import json
import os
import shutil
import subprocess

import numpy as np
import pytest
import torch

import qmap
from conftest import QMAP_BIN, run_qmap
from quantize import reference


def _checkpoint(path):
    """A small module's state dict, saved with torch.save: matrices whose rows are not a multiple of 64 long,
    a rank-4 convolution weight, an all-zero matrix and a bias. Names ending in .weight of rank >= 2 are what
    qmap quantize quantizes."""
    torch.manual_seed(47)
    sd = {
        "fc1.weight": torch.randn(48, 100),
        "fc1.bias": torch.randn(48),
        "conv.weight": torch.randn(6, 3, 5, 5) * 0.1,
        "fc2.weight": torch.randn(10, 64) * 3,
        "zero.weight": torch.zeros(4, 8),
    }
    sd["fc2.weight"][3] = 0.0   # a zero row: scale +0, q 0
    torch.save(sd, path)
    return {k: v.numpy() for k, v in torch.load(path).items()}


@pytest.fixture(scope="module")
def plain(workdir):
    """The checkpoint, converted by the library with --arch none (every tensor under its own name), and
    quantized to Q8_ROW."""
    pt = os.path.join(workdir, "plain.pt")
    ref = _checkpoint(pt)
    f32 = os.path.join(workdir, "plain.qmap")
    qmap.convert(pt, f32, arch="none")
    q8 = os.path.join(workdir, "plain-q8.qmap")
    qmap.quantize(f32, q8, q8=True)
    return {"pt": pt, "ref": ref, "f32": f32, "q8": q8}


def test_every_tensor_equals_the_checkpoint(plain):
    with qmap.open(plain["f32"]) as c:
        assert set(c.tensors) == set(plain["ref"])
        for name, want in plain["ref"].items():
            got = c.tensors[name]
            assert got.shape == want.shape, name
            assert got.dtype == want.dtype, name
            assert np.array_equal(got, want), name


def test_tensors_are_read_only_views(plain):
    with qmap.open(plain["f32"]) as c:
        a = c.tensors["fc1.weight"]
        b = c.tensors["fc1.weight"]
        assert not a.flags.owndata and not a.flags.writeable
        assert np.shares_memory(a, b)
        with pytest.raises(ValueError):
            a[0, 0] = 1.0
        with pytest.raises(ValueError):
            a.flags.writeable = True
        q = qmap.open(plain["q8"]).tensors["conv.weight"]
        for v in (q.q, q.scale, q.row_sums):
            assert not v.flags.owndata and not v.flags.writeable


def test_f16_container_equals_torch_half(plain, workdir):
    f16 = os.path.join(workdir, "plain-f16.qmap")
    qmap.convert(plain["pt"], f16, arch="none", dtype="f16")
    with qmap.open(f16) as c:
        for name, want in plain["ref"].items():
            got = c.tensors[name]
            if want.ndim >= 2 and want.dtype == np.float32:
                assert got.dtype == np.float16, name
                assert np.array_equal(got, torch.from_numpy(want).half().numpy()), name
            else:
                assert np.array_equal(got, want), name


def test_q8_row_equals_the_numpy_reference(plain):
    quantized = 0
    with qmap.open(plain["q8"]) as c:
        for name, w in plain["ref"].items():
            t = c.tensors[name]
            if not isinstance(t, qmap.Q8RowTensor):
                assert np.array_equal(t, w), name
                continue
            quantized += 1
            rows, cols = reference.rows_cols(w.shape)
            q, scales, sums = reference.quantize_rows(w.reshape(rows, cols))
            assert t.shape == w.shape and t.q.shape == w.shape and t.scale.shape == w.shape[:-1]
            assert np.array_equal(t.q.reshape(rows, cols), q), name
            assert np.array_equal(t.scale.reshape(rows), scales), name
            assert np.array_equal(t.row_sums.reshape(rows), sums), name
            deq = t.dequantize()
            assert deq.dtype == np.float32 and deq.flags.owndata
            assert np.array_equal(deq.reshape(rows, cols), reference.dequantize(q, scales)), name
    assert quantized == 4   # fc1, conv, fc2 and zero


def test_metadata_and_table_as_qmap_inspect_reads_them(kjv):
    inspected = json.loads(run_qmap("inspect", "--json", "--max-items", "0", kjv["q8"]))
    with qmap.open(kjv["q8"]) as c:
        md = c.metadata
        assert list(md) == [e["key"] for e in inspected["metadata"]]
        for e in inspected["metadata"]:
            got = md[e["key"]]
            if e["type"] in ("F32", "F64"):
                assert got == pytest.approx(e["value"], rel=1e-15), e["key"]
            elif e["type"] == "ARRAY" and isinstance(e["value"], list) and e["value"] \
                    and isinstance(e["value"][0], float):
                assert got == pytest.approx(e["value"], rel=1e-15), e["key"]
            else:
                assert got == e["value"], e["key"]
        assert list(c.tensors) == [t["name"] for t in inspected["tensors"]]
        for t in inspected["tensors"]:
            info = c.tensor_info(t["name"])
            assert info["dtype"] == t["dtype"] and list(info["shape"]) == t["shape"]
            assert (info["offset"], info["size"]) == (t["offset"], t["size"])
            assert "%016x" % info["checksum"] == t["checksum"]
        assert c.info["tensor_count"] == len(inspected["tensors"])
        assert "arch=llama" in repr(c) and "Q8_ROW" in repr(c)


def test_verify_finds_a_flipped_byte(plain, tmp_path):
    bad = str(tmp_path / "flipped.qmap")
    shutil.copyfile(plain["f32"], bad)
    with qmap.open(bad) as c:
        c.verify()
        c.verify(full=True, threads=1)
        at = c.tensor_info("fc2.weight")["offset"] + 17
    with open(bad, "r+b") as f:
        f.seek(at)
        byte = f.read(1)[0]
        f.seek(at)
        f.write(bytes([byte ^ 0x10]))
    with qmap.open(bad) as c:   # opening reads no tensor byte
        with pytest.raises(qmap.ChecksumError) as e:
            c.verify()
        assert "fc2.weight" in str(e.value) and e.value.status == "QMAP_ERR_TENSOR_CHECKSUM"
        assert e.value.bad_tensors == {"fc2.weight": "QMAP_ERR_TENSOR_CHECKSUM"}
    assert subprocess.run([QMAP_BIN, "verify", "-q", bad]).returncode == 1   # the CLI agrees


def test_views_outlive_close_and_the_container_refuses_calls(plain):
    c = qmap.open(plain["q8"])
    w = c.tensors["fc1.bias"]
    q = c.tensors["fc1.weight"]
    c.close()
    c.close()
    assert c.closed and "closed" in repr(c)
    assert np.array_equal(w, plain["ref"]["fc1.bias"])   # the views keep the mapping
    assert q.dequantize().shape == (48, 100)
    for call in (lambda: c.tensors, lambda: c.metadata, c.verify, lambda: c.tensor_info("fc1.bias")):
        with pytest.raises(qmap.StateError):
            call()


def test_open_errors(tmp_path, plain):
    with pytest.raises(qmap.FileIOError):
        qmap.open(str(tmp_path / "absent.qmap"))
    text = tmp_path / "text.qmap"
    text.write_bytes(b"not a container" * 20)
    with pytest.raises(qmap.FormatError):
        qmap.open(str(text))
    with pytest.raises(qmap.FileIOError):
        qmap.open("/dev/null")
    for bad in (None, "", "a\0b", 3):
        with pytest.raises(qmap.InvalidArgumentError):
            qmap.open(bad)
    with qmap.open(plain["f32"]) as c:
        with pytest.raises(KeyError):
            c.tensors["absent"]
        assert "absent" not in c.tensors and "fc1.bias" in c.tensors and 3 not in c.tensors
        with pytest.raises(qmap.InvalidArgumentError):
            c.verify(threads=-1)


def _rss_kib():
    """RssAnon (private memory: a copy would land here) and RssFile (file pages mapped) of this process."""
    fields = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("RssAnon", "RssFile"):
                fields[key] = int(value.split()[0])
    return fields["RssAnon"], fields["RssFile"]


def test_reading_400_mb_costs_the_mapping_not_a_copy(tmp_path):
    """Reading every tensor of a ~400 MB container grows the process's file-backed RSS by about the file and
    its anonymous RSS by nothing like it."""
    n_tensors, n = 4, 25 << 20   # 4 x 100 MiB of float32
    npz = str(tmp_path / "big.npz")
    np.savez(npz, **{"t%d" % i: np.arange(n, dtype=np.float32) * np.float32(i + 1) for i in range(n_tensors)})
    big = str(tmp_path / "big.qmap")
    qmap.convert(npz, big, arch="none")
    os.unlink(npz)
    size = os.path.getsize(big)
    assert size >= 400 << 20
    with qmap.open(big) as c:
        anon0, file0 = _rss_kib()
        total = 0.0
        for name in c.tensors:
            t = c.tensors[name]
            assert not t.flags.owndata
            total += float(t[:: 1 << 20].sum())
            t.max()          # touches every page
        anon1, file1 = _rss_kib()
    want = sum(float(np.arange(n, dtype=np.float32)[:: 1 << 20].sum()) * (i + 1) for i in range(n_tensors))
    assert total == want
    size_kib = size >> 10
    assert file1 - file0 > 0.9 * size_kib, (file0, file1, size_kib)
    assert anon1 - anon0 < 0.05 * size_kib, (anon0, anon1, size_kib)
