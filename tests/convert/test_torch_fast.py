#!/usr/bin/python3
"""test_torch_fast.py — torch.save storages read in place (stored zip entries used from the mapping).

`qmap convert` uses a stored (uncompressed) storage entry of a torch.save zip straight from the mapped
file, at the data offset its own walk of the central directory and local header finds, and checks the
entry's CRC-32 itself (convert/qc_torch.c, qc_source.c, qc_crc32*.c). This suite checks that:

  crc32      every CRC-32 variant the CPU has equals a bit-at-a-time reference and zlib on random lengths,
             alignments and split points (tests/convert/crc32_check.c, compiled here with the sources)
  same       the in-place path gives the container the libzip path gives: a torch.save file and the same
             entries re-packed deflated (which go through libzip) convert to identical tensors and metadata
             (all but general.source.*, which describe the input file itself)
  crc        a byte flipped in a stored storage (first, middle, last byte) fails the conversion naming the
             file, the entry and the entry's data offset ("archive entry data/N fails its CRC-32 check: the
             file is damaged") — the offset shows the in-place path caught it — and leaves no output
  local      a local header naming another entry, a local-header offset outside the file or on no local
             header, a local extra field running into the central directory: refused, said plainly
  zip64      zip64 archives: Python's force_zip64 (zip64 sizes in the local headers) and a hand-made one
             with every central-directory size and offset in zip64 extra fields and a zip64 end record
             (as torch writes past 4 GiB), 64-byte aligned like torch's: same container, CRC checked in place

Run by tests/convert/test_convert.py (so by make convert-test, also under ASan), or alone:

    /usr/bin/python3 tests/convert/test_torch_fast.py --qmap build/qmap [--workdir DIR] [-k FILTER]
    /usr/bin/python3 tests/convert/test_torch_fast.py --write-seeds tests/fuzz/seeds/torchzip
"""
import argparse
import io
import os
import struct
import subprocess
import sys
import zipfile
import zlib

import torch

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))

import checks              # noqa: E402  (tests/checks.py)
import savers              # noqa: E402
import spec_reader         # noqa: E402

TIMEOUT = 120

# ------------------------------------------------------------------------------------------- zip helpers


def entries_of(data):
    """[(name, bytes)] of an archive, in order."""
    z = zipfile.ZipFile(io.BytesIO(data))
    return [(i.filename, z.read(i.filename)) for i in z.infolist()]


def data_offset(data, suffix):
    """(data offset, size, name) of the stored member whose name ends with `suffix`."""
    z = zipfile.ZipFile(io.BytesIO(data))
    info = [i for i in z.infolist() if i.filename.endswith(suffix)][0]
    nl, xl = struct.unpack_from("<HH", data, info.header_offset + 26)
    return info.header_offset + 30 + nl + xl, info.file_size, info.filename


def largest_storage(data):
    z = zipfile.ZipFile(io.BytesIO(data))
    info = max((i for i in z.infolist() if "/data/" in i.filename), key=lambda i: i.file_size)
    return info.filename[info.filename.index("/data/") + 1:]          # "data/N"


def repack(data, compression=zipfile.ZIP_STORED, zip64=False):
    """The same entries written by Python's zipfile (deflated, or with force_zip64 local headers)."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=compression) as z:
        for name, body in entries_of(data):
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = compression
            with z.open(info, "w", force_zip64=zip64) as f:
                f.write(body)
    return out.getvalue()


def zip64_full(entries, align=64):
    """A stored archive whose every central-directory size and offset is in a zip64 extra field
    (0xffffffff in the record), with zip64 sizes in the local headers, a zip64 end record and locator, and
    each entry's data 64-byte aligned by a padding extra field, as torch's writer does."""
    out, cd = bytearray(), bytearray()
    for name, body in entries:
        nb = name.encode()
        crc = zlib.crc32(body)
        off = len(out)
        z64l = struct.pack("<HHQQ", 1, 16, len(body), len(body))
        pad = -(off + 30 + len(nb) + len(z64l) + 4) % align
        extra = z64l + struct.pack("<HH", 0x4246, pad) + b"Z" * pad     # id "FB", as torch's padding
        out += struct.pack("<IHHHHHIIIHH", 0x04034b50, 45, 0, 0, 0, 0x21, crc, 0xffffffff, 0xffffffff,
                           len(nb), len(extra)) + nb + extra + body
        z64c = struct.pack("<HHQQQ", 1, 24, len(body), len(body), off)
        cd += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014b50, 45, 45, 0, 0, 0, 0x21, crc, 0xffffffff, 0xffffffff,
                          len(nb), len(z64c), 0, 0, 0, 0, 0xffffffff) + nb + z64c
    cd_off, n = len(out), len(entries)
    out += cd
    eocd64 = len(out)
    out += struct.pack("<IQHHIIQQQQ", 0x06064b50, 44, 45, 45, 0, 0, n, n, len(cd), cd_off)
    out += struct.pack("<IIQI", 0x07064b50, 0, eocd64, 1)
    out += struct.pack("<IHHHHIIH", 0x06054b50, 0, 0, 0xffff, 0xffff, 0xffffffff, 0xffffffff, 0)
    return bytes(out)


def central_records(data):
    """[(record offset, name, local offset)] of a 32-bit archive's central directory."""
    eocd = data.rfind(b"PK\x05\x06")
    n, cd_off = struct.unpack_from("<H", data, eocd + 10)[0], struct.unpack_from("<I", data, eocd + 16)[0]
    out, p = [], cd_off
    for _ in range(n):
        nl, xl, cl = struct.unpack_from("<HHH", data, p + 28)
        out.append((p, data[p + 46:p + 46 + nl].decode(), struct.unpack_from("<I", data, p + 42)[0]))
        p += 46 + nl + xl + cl
    return out


def flip(data, at):
    b = bytearray(data)
    b[at] ^= 0x20
    return bytes(b)


def saved_bytes(obj):
    b = io.BytesIO()
    torch.save(obj, b)
    return b.getvalue()

# ------------------------------------------------------------------------------------------- checks


def comparable(path):
    """Tensors (name, dtype, shape, bytes) and metadata of a container, without general.source.*."""
    qf = spec_reader.read(path)
    spec_reader.verify(qf, full=True)
    meta = {k: v for k, v in qf.metadata.items() if not k.startswith("general.source.")}
    tensors = [(t.name, t.dtype, tuple(t.shape), bytes(t.raw)) for t in qf.tensors.values()]
    return tensors, meta


class Suite:
    def __init__(self, ck, qmap, work):
        self.ck, self.qmap, self.work = ck, qmap, os.path.abspath(work)
        model, self.cfg = savers.build_model("gpt2")
        self.good = saved_bytes(model.state_dict())

    def run_qmap(self, src, out, *opts):
        cmd = [self.qmap, "convert", src, "-o", out] + list(opts)
        try:
            p = subprocess.run(cmd, capture_output=True, timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            return -999, "timed out"
        return p.returncode, p.stderr.decode("utf-8", "replace")

    def case_dir(self, name, data, fname="pytorch_model.bin"):
        d = checks.fresh_dir(os.path.join(self.work, name))
        savers.write_json(os.path.join(d, "config.json"), self.cfg)
        path = os.path.join(d, fname)
        with open(path, "wb") as f:
            f.write(data)
        return d, path

    def convert_ok(self, group, name, data):
        d, path = self.case_dir(name, data)
        out = os.path.join(d, "out.qmap")
        rc, se = self.run_qmap(path, out)
        if not self.ck.check(group, "%s converts (exit 0)" % name, rc == 0 and os.path.isfile(out),
                             "rc %d: %s" % (rc, se.strip()[:400])):
            return None
        try:
            return comparable(out)
        except (spec_reader.SpecError, OSError, ValueError) as e:
            self.ck.check(group, "%s: container valid per spec_reader" % name, False, str(e))
            return None

    def refused(self, group, name, data, patterns, offset=None):
        """Convert must fail: exit 1, one stderr line naming the file and every pattern ('a|b': either),
        no output left. Returns the message."""
        d, path = self.case_dir(name, data)
        outdir = checks.fresh_dir(os.path.join(d, "out"))
        rc, se = self.run_qmap(path, os.path.join(outdir, "model.qmap"))
        ck = self.ck
        lines = [line for line in se.splitlines() if line.strip()]
        msg = se.replace(d, "<dir>")
        ck.check(group, "%s: refused (exit 1), one stderr line" % name, rc == 1 and len(lines) == 1,
                 "rc %d: %s" % (rc, se.strip()[:400]))
        ck.check(group, "%s: the message names the file" % name, "<dir>/pytorch_model.bin" in msg, msg.strip())
        for pat in patterns:
            ck.check(group, "%s: the message says %r" % (name, pat),
                     any(a.lower() in msg.lower() for a in pat.split("|")), msg.strip())
        if offset is not None:
            ck.check(group, "%s: the message gives the entry's data offset %d" % (name, offset),
                     ("at offset %d:" % offset) in msg, msg.strip())
        ck.check(group, "%s: no output or temporary file left" % name, not os.listdir(outdir), str(os.listdir(outdir)))
        return msg

    # ----------------------------------------------------------------------------------- cases

    def crc32_variants(self):
        group = "torch_fast/crc32"
        if not self.ck.want(group):
            return
        d = checks.fresh_dir(os.path.join(self.work, "crc32"))
        exe = os.path.join(d, "crc32_check")
        cc = os.environ.get("CC", "cc")
        cmd = [cc, "-std=c11", "-D_DEFAULT_SOURCE", "-O2", "-Wall", "-Wextra", "-I" + os.path.join(ROOT, "convert"),
               "-I" + os.path.join(ROOT, "format"), "-I" + os.path.join(ROOT, "include"),
               os.path.join(HERE, "crc32_check.c"), os.path.join(ROOT, "convert", "qc_crc32.c"),
               os.path.join(ROOT, "convert", "qc_crc32_clmul.c"), os.path.join(ROOT, "format", "qm_cpu.c"),
               "-lz", "-o", exe]
        p = subprocess.run(cmd, capture_output=True, timeout=TIMEOUT)
        if not self.ck.check(group, "crc32_check.c builds", p.returncode == 0, p.stderr.decode()[-600:]):
            return
        for level in ("generic", "avx2", "avx512"):
            p = subprocess.run([exe], capture_output=True, timeout=TIMEOUT, env=dict(os.environ, QMAP_CPU=level))
            out = p.stdout.decode()
            best = out.splitlines()[0] if out else ""
            self.ck.check(group, "QMAP_CPU=%s (%s): every variant equals the reference on random lengths, "
                          "alignments and splits" % (level, best.replace("best variant here: ", "up to ")),
                          p.returncode == 0, out[-600:])

    def same_as_libzip(self):
        group = "torch_fast/same"
        if not self.ck.want(group):
            return
        stored = self.convert_ok(group, "stored", self.good)
        deflated = self.convert_ok(group, "deflated", repack(self.good, zipfile.ZIP_DEFLATED))
        if stored and deflated:
            self.ck.check(group, "in place (stored) and libzip (deflated): identical tensors (%d) and metadata"
                          % len(stored[0]), stored == deflated,
                          "tensors equal: %s, metadata equal: %s" % (stored[0] == deflated[0], stored[1] == deflated[1]))

    def crc(self):
        group = "torch_fast/crc"
        if not self.ck.want(group):
            return
        key = largest_storage(self.good)
        off, size, _ = data_offset(self.good, "/" + key)
        for where, at in (("first", off), ("middle", off + size // 2), ("last", off + size - 1)):
            self.refused(group, "crc_%s_byte" % where, flip(self.good, at),
                         ["archive entry %s fails its CRC-32 check: the file is damaged" % key], offset=off)

    def local_headers(self):
        group = "torch_fast/local"
        if not self.ck.want(group):
            return
        good = self.good
        recs = central_records(good)
        by_name = {n: (p, lo) for p, n, lo in recs}
        names = [n for _, n, _ in recs]
        d0 = [n for n in names if n.endswith("/data/0")][0]
        d1 = [n for n in names if n.endswith("/data/1")][0]
        rec0, local0 = by_name[d0]
        # the local header of data/0 names data/1 (same length: nothing else moves)
        b = bytearray(good)
        b[local0 + 30:local0 + 30 + len(d1)] = d1.encode()
        self.refused(group, "local_name_differs", bytes(b), ["local header", d0, d1])
        # the central record's local-header offset points past the end of the file
        b = bytearray(good)
        struct.pack_into("<I", b, rec0 + 42, len(good) + 4096)
        self.refused(group, "local_offset_past_end", bytes(b), [d0, "past the end of the file", str(len(good) + 4096)])
        # ... into the central directory
        cd_off = recs[0][0]
        b = bytearray(good)
        struct.pack_into("<I", b, rec0 + 42, cd_off + 8)
        self.refused(group, "local_offset_in_central_directory", bytes(b), [d0, "local header", str(cd_off + 8)])
        # ... onto bytes that are no local header (the middle of data/1's data)
        off1, size1, _ = data_offset(good, "/data/1")
        b = bytearray(good)
        struct.pack_into("<I", b, rec0 + 42, off1 + size1 // 2)
        self.refused(group, "local_offset_on_data", bytes(b), [d0, "no local header|local header", str(off1 + size1 // 2)])
        # the last entry's local extra field claims to run into the central directory
        last_name, (last_rec, last_local) = names[-1], by_name[names[-1]]
        b = bytearray(good)
        struct.pack_into("<H", b, last_local + 28, 0xfff0)
        self.refused(group, "local_extra_past_directory", bytes(b), [last_name.split("/", 1)[1]])

    def zip64(self):
        group = "torch_fast/zip64"
        if not self.ck.want(group):
            return
        ref = self.convert_ok(group, "zip64_ref", self.good)
        forced = repack(self.good, zip64=True)
        full = zip64_full(entries_of(self.good))
        key = largest_storage(self.good)
        for name, data in (("zip64_local", forced), ("zip64_full", full)):
            got = self.convert_ok(group, name, data)
            if ref and got:
                self.ck.check(group, "%s: identical tensors and metadata to the torch.save file" % name, got == ref,
                              "tensors equal: %s, metadata equal: %s" % (got[0] == ref[0], got[1] == ref[1]))
            off, size, _ = data_offset(data, "/" + key)
            if name == "zip64_full":
                self.ck.check(group, "zip64_full: data 64-byte aligned like torch's", off % 64 == 0, str(off))
            self.refused(group, name + "_crc", flip(data, off + size // 3),
                         ["archive entry %s fails its CRC-32 check: the file is damaged" % key], offset=off)

    def run(self):
        self.crc32_variants()
        self.same_as_libzip()
        self.crc()
        self.local_headers()
        self.zip64()


def run(ck, qmap, workdir):
    """Entry point for test_convert.py: adds this suite's checks to its Checks."""
    Suite(ck, qmap, os.path.join(workdir, "torch_fast")).run()


def write_seeds(outdir):
    """Small fuzz seeds for tests/fuzz/fuzz_torchzip.c that reach the in-place path: a zip64 archive of the
    full kind, one whose stored storage fails its CRC, and one whose local header names another entry."""
    w = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    good = saved_bytes({"weight": w, "bias": torch.arange(3, dtype=torch.float32)})
    seeds = {"zip64_full.pt": zip64_full(entries_of(good))}
    off, size, _ = data_offset(good, "/data/0")
    seeds["stored_crc_flipped.pt"] = flip(good, off + size - 1)
    recs = central_records(good)
    names = [n for _, n, _ in recs]
    d0 = [r for r in recs if r[1].endswith("/data/0")][0]
    d1 = [n for n in names if n.endswith("/data/1")][0]
    b = bytearray(good)
    b[d0[2] + 30:d0[2] + 30 + len(d1)] = d1.encode()
    seeds["local_name_differs.pt"] = bytes(b)
    os.makedirs(outdir, exist_ok=True)
    for name, data in seeds.items():
        with open(os.path.join(outdir, name), "wb") as f:
            f.write(data)
        print("wrote %s (%d bytes)" % (os.path.join(outdir, name), len(data)))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--qmap", default=os.path.join(ROOT, "build", "qmap"), help="the qmap binary")
    p.add_argument("--workdir", default=os.path.join(ROOT, "build", "tests", "convert"), help="scratch directory")
    p.add_argument("-k", metavar="FILTER", help="run only groups whose name contains FILTER")
    p.add_argument("--write-seeds", metavar="DIR", help="write the fuzz seeds into DIR and stop")
    a = p.parse_args()
    if a.write_seeds:
        write_seeds(a.write_seeds)
        return 0
    ck = checks.Checks(a.k)
    run(ck, a.qmap, a.workdir)
    return ck.finish()


if __name__ == "__main__":
    sys.exit(main())
