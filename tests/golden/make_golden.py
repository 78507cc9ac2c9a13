#!/usr/bin/python3
"""make_golden.py — generate the golden .qmap files from spec/FORMAT.md (deterministic: same bytes on
every run). Usage: /usr/bin/python3 tests/golden/make_golden.py [--out DIR]

    valid/    files every reader must open (and verify --full must pass)
    invalid/  one or more files per rejection rule of spec section 7, named
              <RULE-ID>[-<variant>].<ERROR_NAME>.qmap; each breaks only that rule where the format allows
              it, and otherwise that rule is the first a careful reader meets (see README.md)
    verify/   files that open fine but fail verification: R-DATA-1 (plain verify) or R-DATA-2
              (full verify), same naming scheme
README.md is regenerated too.
"""
import os
import struct
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
OUTDIR = HERE  # --out DIR writes the tree elsewhere (the test runner uses it to check determinism)

from spec_writer import (Bits, TensorDef, align_up, meta_entry, pack_table_entry, plan,  # noqa: E402
                         q8row_bytes, q8row_layout, q8row_pack, quantize_q8row)

U64 = (1 << 64) - 1


class SplitMix64:
    def __init__(self, seed):
        self.s = seed & U64

    def next(self):
        self.s = (self.s + 0x9E3779B97F4A7C15) & U64
        z = self.s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & U64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & U64
        return z ^ (z >> 31)

    def floats(self, n, scale=1.0):
        """n float32 in [-scale, scale)."""
        return np.array([((self.next() >> 40) / float(1 << 24) * 2 - 1) * scale for _ in range(n)],
                        dtype=np.float32)

    def u32s(self, n):
        return np.array([self.next() & 0xFFFFFFFF for _ in range(n)], dtype=np.uint32)


def f32_bytes(shape, seed):
    return SplitMix64(seed).floats(int(np.prod(shape)), 4.0).astype("<f4").tobytes()


def f16_bytes(shape, seed):
    return SplitMix64(seed).floats(int(np.prod(shape)), 100.0).astype("<f2").tobytes()


def bf16_bytes(shape, seed):
    f = SplitMix64(seed).floats(int(np.prod(shape)), 3.0)
    return (f.view(np.uint32) >> 16).astype("<u2").tobytes()


def i32_bytes(shape, seed):
    return SplitMix64(seed).u32s(int(np.prod(shape))).astype("<u4").tobytes()


def q8_source(shape, seed, zero_row=None, tie_row=None):
    rows, cols = q8row_layout(shape, 64)[:2]
    w = SplitMix64(seed).floats(rows * cols, 2.0).reshape(rows, cols)
    if zero_row is not None:
        w[zero_row] = 0
    if tie_row is not None:
        # amax 127 gives scale 1 exactly, so x.5 values test round-half-even.
        w[tie_row] = 0
        ties = [127, 63.5, -63.5, 0.5, 1.5, 2.5, -2.5, -0.5, 126.5, -127]
        w[tie_row, :len(ties)] = ties
    return w


def q8(shape, seed, alignment, **kw):
    return q8row_bytes(q8_source(shape, seed, **kw), shape, alignment)


# ---------------------------------------------------------------------------------------------- output

OUT = {"valid": [], "invalid": [], "verify": []}


def emit(kind, name, data, what):
    path = os.path.join(OUTDIR, kind, name + ".qmap")
    with open(path, "wb") as f:
        f.write(data)
    OUT[kind].append((name + ".qmap", len(data), what))


def base_meta():
    return [meta_entry("general.name", "STRING", "golden"), meta_entry("test.count", "U32", 3)]


def base_tensors(alignment=64):
    return [TensorDef("a", "F32", (4, 4), f32_bytes((4, 4), 1)),
            TensorDef("b", "Q8_ROW", (2, 70), q8((2, 70), 2, alignment))]


def base_plan(alignment=64, meta=None, tensors=None):
    return plan(base_meta() if meta is None else meta,
                base_tensors(alignment) if tensors is None else tensors, alignment)


def place(p, offsets, file_size=None):
    """Move tensors to explicit offsets (data bytes follow), file_size = end of last unless given."""
    for e, off in zip(p.table, offsets):
        e["offset"] = off
    p.placements = list(offsets)
    end = p.table[-1]["offset"] + p.table[-1]["size"]
    p.header["file_size"] = end if file_size is None else file_size
    p.length = p.header["file_size"]


def set_file_size(p, n):
    p.header["file_size"] = n
    p.length = n


# ---------------------------------------------------------------------------------------------- valid

def gen_valid():
    emit("valid", "empty", plan([], [], 4096).to_bytes(),
         "no metadata, no tensors, alignment 4096 (file_size = data_offset = 4096)")
    emit("valid", "empty-align64", plan([], [], 64).to_bytes(),
         "no metadata, no tensors, alignment 64: the smallest valid file (128 bytes)")

    meta = [
        meta_entry("u32.zero", "U32", 0), meta_entry("u32.max", "U32", 0xFFFFFFFF),
        meta_entry("i32.min", "I32", -2**31), meta_entry("i32.max", "I32", 2**31 - 1),
        meta_entry("u64.max", "U64", U64), meta_entry("i64.min", "I64", -2**63),
        meta_entry("i64.minus1", "I64", -1),
        meta_entry("f32.pi", "F32", np.float32(np.pi).item()),
        meta_entry("f32.nan_payload", "F32", Bits(0x7FC01234)),
        meta_entry("f32.snan", "F32", Bits(0x7F800001)),
        meta_entry("f32.neg_zero", "F32", Bits(0x80000000)),
        meta_entry("f32.inf", "F32", Bits(0x7F800000)),
        meta_entry("f32.denormal", "F32", Bits(0x00000001)),
        meta_entry("f64.e", "F64", float(np.e)),
        meta_entry("f64.nan_payload", "F64", Bits(0xFFF8000000ABCDEF)),
        meta_entry("f64.neg_inf", "F64", Bits(0xFFF0000000000000)),
        meta_entry("bool.false", "BOOL", False), meta_entry("bool.true", "BOOL", True),
        meta_entry("str.empty", "STRING", ""),
        meta_entry("str.nul", "STRING", "a\x00b\x00"),
        meta_entry("str.unicode", "STRING", "h\u00e9llo \u4e16\u754c \U0001F642 \uFFFD \U0010FFFF"),
        meta_entry("k\u00e9y.\u043a\u043b\u044e\u0447.\U0001F511", "STRING", "non-ASCII key"),
        meta_entry("k" * 256, "U32", 256),
        meta_entry("arr.u32", "ARRAY[U32]", [0, 1, 0xFFFFFFFF]),
        meta_entry("arr.i32", "ARRAY[I32]", [-1, 2**31 - 1, -2**31]),
        meta_entry("arr.u64", "ARRAY[U64]", [U64, 1, 0]),
        meta_entry("arr.i64", "ARRAY[I64]", [-2**63, 2**63 - 1]),
        meta_entry("arr.f32", "ARRAY[F32]", [1.5, -0.25, Bits(0x7FC00000)]),
        meta_entry("arr.f64", "ARRAY[F64]", [1e300, -2.5, Bits(0x0000000000000001)]),
        meta_entry("arr.bool", "ARRAY[BOOL]", [True, False, True, True]),
        meta_entry("arr.string", "ARRAY[STRING]", ["", "a", "b\x00c", "\u00e9\U0001F642", ""]),
        meta_entry("arr.empty.u32", "ARRAY[U32]", []),
        meta_entry("arr.empty.f64", "ARRAY[F64]", []),
        meta_entry("arr.empty.bool", "ARRAY[BOOL]", []),
        meta_entry("arr.empty.string", "ARRAY[STRING]", []),
        meta_entry("general.architecture", "STRING", "test"),
    ]
    emit("valid", "metadata-all-types", plan(meta, [], 64).to_bytes(),
         "every metadata type and array element type, extreme values, NaN payloads, -0, denormals, "
         "strings with NUL and 4-byte UTF-8, a 256-byte key, a non-ASCII key, empty arrays; no tensors")

    def dtype_tensors(a):
        return [
            TensorDef("f32.r1", "F32", (7,), f32_bytes((7,), 10)),
            TensorDef("f32.r2", "F32", (3, 5), f32_bytes((3, 5), 11)),
            TensorDef("f32.r3", "F32", (2, 3, 4), f32_bytes((2, 3, 4), 12)),
            TensorDef("f32.r4", "F32", (2, 1, 3, 2), f32_bytes((2, 1, 3, 2), 13)),
            TensorDef("f16.r2", "F16", (3, 3), f16_bytes((3, 3), 14)),
            TensorDef("bf16.r3", "BF16", (2, 2, 5), bf16_bytes((2, 2, 5), 15)),
            TensorDef("i32.r1", "I32", (9,), i32_bytes((9,), 16)),
            TensorDef("q8.r1", "Q8_ROW", (130,), q8((130,), 17, a)),
            TensorDef("q8.r2", "Q8_ROW", (5, 100), q8((5, 100), 18, a, zero_row=2, tie_row=4)),
            TensorDef("q8.r3", "Q8_ROW", (2, 3, 64), q8((2, 3, 64), 19, a, zero_row=0)),
            TensorDef("q8.r4", "Q8_ROW", (2, 2, 1, 3), q8((2, 2, 1, 3), 20, a)),
            TensorDef("\u00fcnicode.\u540d\u524d", "F32", (1,), f32_bytes((1,), 21)),
        ]
    meta = [meta_entry("general.architecture", "STRING", "test"), meta_entry("test.layers", "U32", 2)]
    emit("valid", "dtypes-align64", plan(meta, dtype_tensors(64), 64).to_bytes(),
         "every dtype, ranks 1..4, Q8_ROW with row padding, a zero row, ties, cols 130/100/64/3; alignment 64")
    tensors = [TensorDef("f32", "F32", (3, 5), f32_bytes((3, 5), 30)),
               TensorDef("q8", "Q8_ROW", (3, 100), q8((3, 100), 31, 4096, zero_row=1)),
               TensorDef("f16", "F16", (4,), f16_bytes((4,), 32)),
               TensorDef("bf16", "BF16", (2, 3), bf16_bytes((2, 3), 33)),
               TensorDef("i32", "I32", (1, 1, 1, 2), i32_bytes((2,), 34))]
    emit("valid", "dtypes-align4096", plan(meta, tensors, 4096).to_bytes(),
         "default alignment 4096: one page per tensor, Q8_ROW scales at +4096")

    p = base_plan()
    d = p.header["data_offset"]
    a_end = d + 64 + p.table[0]["size"]
    place(p, [d + 64, align_up(a_end, 64) + 128])
    emit("valid", "gaps", p.to_bytes(),
         "first tensor one alignment unit after data_offset, extra zero gap before the second (allowed: "
         "a reader checks positions, not that they are the tightest)")

    p = plan(base_meta(), base_tensors(64), 64, minor=9)
    emit("valid", "minor-newer", p.to_bytes(), "minor_version 9 (a newer minor version is readable)")

    name = ("n\U0001F600" * 205)[:1024]
    name = name.encode("utf-8")[:1024].decode("utf-8", "ignore")
    name = name + "x" * (1024 - len(name.encode("utf-8")))
    assert len(name.encode("utf-8")) == 1024
    key = "k\u00e9" * 85 + "z"
    assert len(key.encode("utf-8")) == 256
    p = plan([meta_entry(key, "STRING", "longest key")],
             [TensorDef(name, "I32", (2,), i32_bytes((2,), 40))], 128)
    emit("valid", "long-names", p.to_bytes(),
         "a 256-byte key and a 1024-byte tensor name (with multi-byte UTF-8); alignment 128")

    p = plan([], [TensorDef("one", "F32", (1,), f32_bytes((1,), 41))], 64)
    emit("valid", "single-scalar", p.to_bytes(), "one F32 tensor of shape (1,), no metadata")


# ---------------------------------------------------------------------------------------------- invalid

def bad(name, data, what):
    emit("invalid", name, data, what)


def gen_invalid_general_header():
    # R-GEN-1 ------------------------------------------------------------------------------------
    p = plan(base_meta(), [TensorDef("t", "F32", (32,), f32_bytes((32,), 50))], 64)
    p.table[0]["offset"] = (1 << 64) - 64
    bad("R-GEN-1-tensor-end.OVERFLOW", p.to_bytes(),
        "tensor offset 2^64-64 (aligned) + size 128 wraps 64 bits (checked before R-TENSOR-12)")

    p = plan([], [], 64)
    p.header["metadata_size"] = (1 << 64) - 64
    p.header["table_offset"] = 64             # (128 + metadata_size) mod 2^64
    p.header["data_offset"] = 64              # align_up(64 + 0, 64)
    bad("R-GEN-1-metadata-size.OVERFLOW", p.to_bytes(),
        "metadata_size 2^64-64: metadata_offset + metadata_size wraps to the stored table_offset 64")

    p = plan(base_meta(), [], 64)
    to = p.header["table_offset"]
    p.header["table_size"] = (1 << 64) - to + 64  # table_offset + table_size wraps to 64
    p.header["data_offset"] = 64
    bad("R-GEN-1-table-size.OVERFLOW", p.to_bytes(),
        "table_offset + table_size wraps 64 bits (to 64, = the stored data_offset)")

    p = plan(base_meta(), [], 64)
    p.header["table_size"] = (1 << 64) - 32 - to  # table end 2^64-32: align_up to 64 overflows
    p.header["data_offset"] = 0
    bad("R-GEN-1-data-offset.OVERFLOW", p.to_bytes(),
        "table_offset + table_size = 2^64-32; align_up(., 64) overflows (wraps to the stored 0)")

    # R-HDR-1 -------------------------------------------------------------------------------------
    good = base_plan().to_bytes()
    p = base_plan()
    p.header["magic"] = b"QMAQ\r\n\x1a\n"
    bad("R-HDR-1.BAD_MAGIC", p.to_bytes(), "magic byte 3 is 'Q' instead of 'P'")
    bad("R-HDR-1-crlf.BAD_MAGIC", good.replace(b"\r\n", b"\n"),
        "a valid file after CRLF -> LF conversion")
    bad("R-HDR-1-short.BAD_MAGIC", good[:5], "5 bytes (a prefix of the magic): shorter than 8 bytes")
    bad("R-HDR-1-empty.BAD_MAGIC", b"", "empty file")
    p = base_plan()
    p.header["magic"] = b"GGUF\x03\x00\x00\x00"
    bad("R-HDR-1-other-format.BAD_MAGIC", p.to_bytes(), "another format's magic")
    bad("R-HDR-1.TRUNCATED", good[:100], "right magic, 100 bytes: shorter than the header")
    bad("R-HDR-1-magic-only.TRUNCATED", good[:8], "right magic, nothing else")
    bad("R-HDR-1-127.TRUNCATED", good[:127], "right magic, 127 bytes")

    # R-HDR-2 -------------------------------------------------------------------------------------
    for v, tag in ((2, ""), (0, "-zero"), (0xFFFF, "-ffff")):
        p = base_plan()
        p.header["major_version"] = v
        bad("R-HDR-2%s.UNSUPPORTED_VERSION" % tag, p.to_bytes(), "major_version %d" % v)

    # R-HDR-3 / 4 ---------------------------------------------------------------------------------
    bad("R-HDR-3.TRUNCATED", good[:-10], "last 10 bytes of the last tensor missing")
    bad("R-HDR-3-in-metadata.TRUNCATED", good[:150], "file cut at byte 150, inside the metadata")
    bad("R-HDR-3-at-data.TRUNCATED", good[:base_plan().header["data_offset"]],
        "file cut at data_offset: all tensor data missing")
    bad("R-HDR-4.TRAILING_BYTES", good + b"\0", "one zero byte after file_size")
    bad("R-HDR-4-page.TRAILING_BYTES", good + b"\0" * 4096, "4096 zero bytes after file_size")

    # R-HDR-5 -------------------------------------------------------------------------------------
    for a, tag, what in ((96, "-not-pow2", "alignment 96 (not a power of two; layout consistent with 96)"),
                         (32, "-too-small", "alignment 32 (power of two below 64; layout consistent)"),
                         (0, "-zero", "alignment 0")):
        p = plan(base_meta(), [], 64)
        p.header["alignment"] = a
        if a:
            p.header["data_offset"] = align_up(p.header["table_offset"] + p.header["table_size"], a)
        set_file_size(p, p.header["data_offset"])
        bad("R-HDR-5%s.BAD_ALIGNMENT" % tag, p.to_bytes(), what)
    p = base_plan()
    p.header["alignment"] = 1 << 31
    bad("R-HDR-5-too-large.BAD_ALIGNMENT", p.to_bytes(),
        "alignment 2^31 (above 2^30); a 2^31-aligned layout would need a 2 GiB file, so data_offset "
        "is the 64-aligned one: R-HDR-8 can only be judged once the alignment is known valid")

    # R-HDR-6 -------------------------------------------------------------------------------------
    p = base_plan()
    p.header["reserved0"] = 1
    bad("R-HDR-6-reserved0.RESERVED_NONZERO", p.to_bytes(), "reserved0 = 1")
    p = base_plan()
    p.header["reserved1"] = [0, 0, 0, 1 << 63]
    bad("R-HDR-6-reserved1.RESERVED_NONZERO", p.to_bytes(), "reserved1[3] = 2^63")
    p = base_plan()
    p.header["reserved1"] = [0, 0x100, 0, 0]
    bad("R-HDR-6-reserved1-1.RESERVED_NONZERO", p.to_bytes(), "reserved1[1] = 256")

    # R-HDR-7 -------------------------------------------------------------------------------------
    p = base_plan()
    p.header["metadata_count"] = (1 << 20) + 1
    bad("R-HDR-7-metadata.TOO_MANY", p.to_bytes(), "metadata_count 2^20 + 1")
    p = base_plan()
    p.header["tensor_count"] = (1 << 20) + 1
    bad("R-HDR-7-tensors.TOO_MANY", p.to_bytes(), "tensor_count 2^20 + 1")
    p = base_plan()
    p.header["tensor_count"] = U64
    bad("R-HDR-7-tensors-max.TOO_MANY", p.to_bytes(), "tensor_count 2^64 - 1")

    # R-HDR-8 -------------------------------------------------------------------------------------
    p = base_plan()
    h = p.header
    h["metadata_offset"] = 192
    h["table_offset"] = 192 + h["metadata_size"]
    h["data_offset"] = align_up(h["table_offset"] + h["table_size"], 64)
    d = h["data_offset"]
    place(p, [d, align_up(d + p.table[0]["size"], 64)])
    bad("R-HDR-8-metadata-offset.BAD_LAYOUT", p.to_bytes(),
        "metadata_offset 192 (table_offset and data_offset consistent with it)")
    p = base_plan()
    p.header["table_offset"] += 8
    bad("R-HDR-8-table-offset.BAD_LAYOUT", p.to_bytes(), "table_offset = metadata_offset + metadata_size + 8")
    p = base_plan()
    p.header["data_offset"] += 64
    bad("R-HDR-8-data-offset.BAD_LAYOUT", p.to_bytes(), "data_offset one alignment unit too far")
    p = base_plan()
    p.header["data_offset"] -= 64
    assert p.header["data_offset"] >= 128
    bad("R-HDR-8-data-offset-early.BAD_LAYOUT", p.to_bytes(), "data_offset one alignment unit too early")
    p = plan(base_meta(), [], 64)
    table_end = p.header["table_offset"] + p.header["table_size"]
    assert table_end % 64
    set_file_size(p, table_end)
    bad("R-HDR-8-data-beyond-file.BAD_LAYOUT", p.to_bytes(),
        "no tensors, file_size = end of table < data_offset = align_up(end of table)")

    # R-HDR-9 -------------------------------------------------------------------------------------
    p = base_plan()
    data = bytearray(p.to_bytes())
    data[120] ^= 1
    bad("R-HDR-9.HEADER_CHECKSUM", bytes(data), "header_checksum with bit 0 flipped")
    data = bytearray(good)
    i = good.index(b"golden")
    data[i] = ord("h")
    bad("R-HDR-9-metadata-byte.HEADER_CHECKSUM", bytes(data),
        "a metadata string byte changed ('golden' -> 'holden', still valid) after checksumming")
    p = base_plan()
    data = bytearray(good)
    i = p.header["table_offset"] + 4 + 1 + 8 + 32 + 8  # tensor[0].size
    data[i] ^= 0x80
    bad("R-HDR-9-table-byte.HEADER_CHECKSUM", bytes(data),
        "tensor[0].size changed after checksumming (the table is covered by the header checksum)")
    p = base_plan()
    p.header["minor_version"] = 1
    data = bytearray(p.to_bytes())
    data[120:128] = good[120:128]
    bad("R-HDR-9-minor.HEADER_CHECKSUM", bytes(data),
        "minor_version changed after checksumming (bytes [0,120) are covered)")

    # R-HDR-10 ------------------------------------------------------------------------------------
    p = base_plan()
    table_end = p.header["table_offset"] + p.header["table_size"]
    assert table_end < p.header["data_offset"]
    p.patches.append((p.header["data_offset"] - 1, b"\x01"))
    bad("R-HDR-10.PADDING_NONZERO", p.to_bytes(),
        "last padding byte before data_offset is 1 (header checksum recomputed)")
    p = base_plan()
    p.patches.append((table_end, b"\x80"))
    bad("R-HDR-10-first.PADDING_NONZERO", p.to_bytes(),
        "first padding byte after the table is 0x80 (header checksum recomputed)")


def meta_plan(entries, count=None, tensors=None):
    """A file whose metadata section is exactly `entries` (bytes), with the base tensors."""
    p = plan([], base_tensors(64) if tensors is None else tensors, 64)
    p.meta_bytes = b"".join(entries)
    p.header["metadata_count"] = len(entries) if count is None else count
    p.relayout()
    return p


def gen_invalid_meta():
    ok = meta_entry("general.name", "STRING", "golden")

    # R-META-1 ------------------------------------------------------------------------------------
    p = meta_plan([ok], count=2)
    bad("R-META-1-entry.META_OVERRUN", p.to_bytes(),
        "metadata_count 2 but the section holds one entry: key_len of entry 2 is past the end")
    p = meta_plan([ok, b"\x05\x00"], count=2)
    bad("R-META-1-key-len.META_OVERRUN", p.to_bytes(), "only 2 of key_len's 4 bytes are in the section")
    p = meta_plan([ok, struct.pack("<I", 200) + b"short"], count=2)
    bad("R-META-1-key.META_OVERRUN", p.to_bytes(), "key_len 200 (valid) but 5 bytes left")
    p = meta_plan([ok, struct.pack("<I", 3) + b"abc" + b"\x01\x00"], count=2)
    bad("R-META-1-type.META_OVERRUN", p.to_bytes(), "only 2 bytes of the type id left")
    e = meta_entry("v", "U64", 0x12345678)  # high 4 bytes are zero: they land in the (zero) padding
    p = meta_plan([ok, e], tensors=[])
    p.header["metadata_size"] -= 4
    p.header["table_offset"] -= 4
    p.header["data_offset"] = align_up(p.header["table_offset"], 64)
    set_file_size(p, p.header["data_offset"])
    assert p.header["data_offset"] >= 128 + len(p.meta_bytes)
    bad("R-META-1-value.META_OVERRUN", p.to_bytes(),
        "last entry is a U64 whose last 4 bytes lie past metadata_size (they are zero padding)")
    p = meta_plan([ok, meta_entry("s", "STRING", "hello", str_len=1000)])
    bad("R-META-1-string.META_OVERRUN", p.to_bytes(), "string length 1000 (under the cap), 5 bytes left")
    p = meta_plan([ok, meta_entry("s", "STRING", "", str_len=None)[:-5]], count=2)
    bad("R-META-1-string-len.META_OVERRUN", p.to_bytes(), "only 3 of a string's 8 length bytes left")
    p = meta_plan([ok, meta_entry("arr", "ARRAY[U64]", [1, 2], count=1000)])
    bad("R-META-1-array.META_OVERRUN", p.to_bytes(),
        "ARRAY[U64] count 1000: count x 8 exceeds the 16 bytes left (checked before walking)")
    p = meta_plan([ok, meta_entry("arr", "ARRAY[STRING]", ["x"], count=1 << 32)])
    bad("R-META-1-string-array.META_OVERRUN", p.to_bytes(),
        "ARRAY[STRING] count 2^32 (at the cap): count x 8 exceeds what is left")
    p = meta_plan([ok, meta_entry("arr", "ARRAY[STRING]", ["abc", "de"])[:-1]])
    bad("R-META-1-string-array-elem.META_OVERRUN", p.to_bytes(),
        "ARRAY[STRING] of 2: the last element's bytes run 1 past the section")
    p = meta_plan([ok, meta_entry("arr", "ARRAY[BOOL]", [1, 0, 1], count=4)])
    bad("R-META-1-bool-array.META_OVERRUN", p.to_bytes(), "ARRAY[BOOL] count 4, 3 bytes left")

    # R-META-2 ------------------------------------------------------------------------------------
    p = meta_plan([ok, meta_entry("", "U32", 1)])
    bad("R-META-2-empty.BAD_KEY", p.to_bytes(), "key_len 0")
    p = meta_plan([ok, meta_entry("k" * 257, "U32", 1)])
    bad("R-META-2-long.BAD_KEY", p.to_bytes(), "key_len 257 (all 257 key bytes present)")

    # R-META-3 ------------------------------------------------------------------------------------
    for tag, key, what in (("nul", b"a\x00b", "NUL byte in the key"),
                           ("overlong", b"a\xc0\xafb", "overlong encoding C0 AF"),
                           ("overlong3", b"\xe0\x80\xaf", "overlong 3-byte encoding E0 80 AF"),
                           ("surrogate", b"x\xed\xa0\x80", "UTF-16 surrogate U+D800 (ED A0 80)"),
                           ("above-max", b"\xf4\x90\x80\x80", "code point above U+10FFFF (F4 90 80 80)"),
                           ("truncated", b"ab\xe2\x82", "truncated 3-byte sequence at the end of the key"),
                           ("continuation", b"\x80abc", "lone continuation byte"),
                           ("ff", b"ok\xff", "byte FF")):
        p = meta_plan([ok, meta_entry(key, "U32", 1)])
        bad("R-META-3-%s.BAD_UTF8" % tag, p.to_bytes(), "key: " + what)

    # R-META-4 ------------------------------------------------------------------------------------
    for tag, tid in (("zero", 0), ("ten", 10), ("max", 0xFFFFFFFF)):
        p = meta_plan([ok, meta_entry("x", "U32", 1, type_id=tid)])
        bad("R-META-4-%s.UNKNOWN_META_TYPE" % tag, p.to_bytes(), "value type id %d (4 value bytes follow)" % tid)
    p = meta_plan([ok, meta_entry("x", "ARRAY[U32]", [], elem_type_id=9)])
    bad("R-META-4-nested.UNKNOWN_META_TYPE", p.to_bytes(), "ARRAY whose element type is ARRAY (count 0)")
    p = meta_plan([ok, meta_entry("x", "ARRAY[U32]", [], elem_type_id=0)])
    bad("R-META-4-array-zero.UNKNOWN_META_TYPE", p.to_bytes(), "ARRAY with element type 0 (count 0)")
    p = meta_plan([ok, meta_entry("x", "ARRAY[U32]", [], elem_type_id=10)])
    bad("R-META-4-array-ten.UNKNOWN_META_TYPE", p.to_bytes(), "ARRAY with element type 10 (count 0)")

    # R-META-5 ------------------------------------------------------------------------------------
    p = meta_plan([ok, meta_entry("b", "BOOL", b"\x02")])
    bad("R-META-5.BAD_BOOL", p.to_bytes(), "BOOL byte 2")
    p = meta_plan([ok, meta_entry("b", "ARRAY[BOOL]", [b"\x01", b"\x00", b"\xff"])])
    bad("R-META-5-array.BAD_BOOL", p.to_bytes(), "ARRAY[BOOL] element 2 is FF")

    # R-META-6 ------------------------------------------------------------------------------------
    p = meta_plan([ok, meta_entry("s", "STRING", "abc", str_len=(1 << 30) + 1)])
    bad("R-META-6-string.META_TOO_LONG", p.to_bytes(),
        "string length 2^30+1 (necessarily also past the section; the cap is checked first)")
    p = meta_plan([ok, meta_entry("a", "ARRAY[BOOL]", [1], count=(1 << 32) + 1)])
    bad("R-META-6-array.META_TOO_LONG", p.to_bytes(),
        "ARRAY[BOOL] count 2^32+1 (necessarily also past the section; the cap is checked first)")
    p = meta_plan([ok, meta_entry("a", "ARRAY[U64]", [], count=1 << 61)])
    bad("R-META-6-array-wraps.META_TOO_LONG", p.to_bytes(),
        "ARRAY[U64] count 2^61: count x 8 wraps to 0 in 64 bits (the cap check comes first)")
    p = meta_plan([ok, meta_entry("a", "ARRAY[STRING]", [b""], raw_value=struct.pack("<IQ", 8, 1)
                                  + struct.pack("<Q", 1 << 62) + b"xyz")])
    bad("R-META-6-string-in-array.META_TOO_LONG", p.to_bytes(), "string array element with length 2^62")

    # R-META-7 ------------------------------------------------------------------------------------
    p = meta_plan([ok, meta_entry("s", "STRING", b"abc\xff")])
    bad("R-META-7.BAD_UTF8", p.to_bytes(), "string value ends with byte FF")
    p = meta_plan([ok, meta_entry("s", "STRING", b"\xed\xbf\xbf")])
    bad("R-META-7-surrogate.BAD_UTF8", p.to_bytes(), "string value is the surrogate U+DFFF")
    p = meta_plan([ok, meta_entry("s", "STRING", b"\xf0\x9f\x99")])
    bad("R-META-7-truncated.BAD_UTF8", p.to_bytes(), "string value is a truncated 4-byte sequence")
    p = meta_plan([ok, meta_entry("s", "ARRAY[STRING]", ["ok", b"\xc1\xbf", "fine"])])
    bad("R-META-7-array.BAD_UTF8", p.to_bytes(), "string array element 1 is an overlong C1 BF")

    # R-META-8 ------------------------------------------------------------------------------------
    p = meta_plan([ok, meta_entry("x", "U32", 1), meta_entry("x", "STRING", "again")])
    bad("R-META-8.DUPLICATE_KEY", p.to_bytes(), "key 'x' twice (different types)")
    p = meta_plan([ok, meta_entry("general.name", "STRING", "golden")])
    bad("R-META-8-identical.DUPLICATE_KEY", p.to_bytes(), "the same entry twice")

    # R-META-9 ------------------------------------------------------------------------------------
    p = meta_plan([ok, b"\0\0\0\0"], count=1)
    bad("R-META-9.META_SIZE", p.to_bytes(), "4 zero bytes left over after the last entry")
    p = meta_plan([ok], count=0)
    bad("R-META-9-count-zero.META_SIZE", p.to_bytes(), "metadata_count 0, but the section holds an entry")


def table_plan(tensors, alignment=64, mutate=None):
    p = plan(base_meta(), tensors, alignment)
    if mutate:
        mutate(p)
        p.relayout()
    return p


def gen_invalid_table():
    A = lambda: TensorDef("a", "F32", (4, 4), f32_bytes((4, 4), 1))  # noqa: E731
    B = lambda: TensorDef("b", "F32", (8,), f32_bytes((8,), 3))      # noqa: E731

    # R-TENSOR-1 ----------------------------------------------------------------------------------
    p = plan(base_meta(), [A()], 64)
    cut = pack_table_entry(p.table[0])[:4 + 1 + 8 + 16]  # up to dims[1]; the rest is cut off
    p.table[0] = {"raw": cut}
    h = p.header
    h["table_size"] = len(cut)
    h["data_offset"] = align_up(h["table_offset"] + len(cut), 64)
    p.placements = [h["data_offset"]]
    set_file_size(p, h["data_offset"] + 64)
    bad("R-TENSOR-1-cut.TABLE_OVERRUN", p.to_bytes(),
        "table_size ends inside the entry (after dims[1]); offset/size/checksum/reserved are missing")
    p = plan(base_meta(), [A()], 64)
    p.header["tensor_count"] = 2
    bad("R-TENSOR-1-count.TABLE_OVERRUN", p.to_bytes(), "tensor_count 2, the table holds one entry")
    p = plan(base_meta(), [A()], 64)
    p.table_extra = b"\0" * 8
    p.relayout()
    bad("R-TENSOR-1-leftover.TABLE_OVERRUN", p.to_bytes(), "8 zero bytes left over after the last entry")
    p = plan(base_meta(), [A()], 64)
    p.table[0]["name_len"] = 900  # valid length, entry needs 976 bytes
    bad("R-TENSOR-1-name.TABLE_OVERRUN", p.to_bytes(), "name_len 900 (valid) runs past the table")

    # R-TENSOR-2 ----------------------------------------------------------------------------------
    p = table_plan([TensorDef("", "F32", (4, 4), f32_bytes((4, 4), 1)),
                    TensorDef("bb", "F32", (8,), f32_bytes((8,), 3))])
    bad("R-TENSOR-2-empty.BAD_NAME", p.to_bytes(),
        "tensor[0].name_len 0 (a 76-byte entry); a second tensor named 'bb' makes table_size (154) at "
        "least tensor_count x 77, so even a reader that pre-checks that minimum sees only R-TENSOR-2")
    p = table_plan([TensorDef("", "F32", (4, 4), f32_bytes((4, 4), 1))])
    bad("R-TENSOR-2-empty-alone.BAD_NAME", p.to_bytes(),
        "the only tensor has name_len 0: a complete 76-byte entry filling the 76-byte table exactly (no "
        "entry extends past the table, so this is not R-TENSOR-1)")
    p = table_plan([TensorDef("n" * 1025, "F32", (4, 4), f32_bytes((4, 4), 1))])
    bad("R-TENSOR-2-long.BAD_NAME", p.to_bytes(), "name_len 1025 (all 1025 bytes present)")

    # R-TENSOR-3 ----------------------------------------------------------------------------------
    for tag, name, what in (("nul", b"a\x00b", "NUL byte in the name"),
                            ("overlong", b"\xc0\x80", "overlong NUL C0 80"),
                            ("surrogate", b"w\xed\xb0\x80", "surrogate U+DC00"),
                            ("above-max", b"\xf5\x80\x80\x80", "lead byte F5 (above U+10FFFF)"),
                            ("truncated", b"w\xf0\x9f", "truncated 4-byte sequence"),
                            ("continuation", b"\xbf", "lone continuation byte")):
        p = table_plan([TensorDef(name, "F32", (4, 4), f32_bytes((4, 4), 1)), B()])
        bad("R-TENSOR-3-%s.BAD_UTF8" % tag, p.to_bytes(), "tensor name: " + what)

    # R-TENSOR-4 ----------------------------------------------------------------------------------
    p = plan(base_meta(), [A(), TensorDef("a", "F32", (8,), f32_bytes((8,), 3))], 64)
    bad("R-TENSOR-4.DUPLICATE_NAME", p.to_bytes(), "two tensors named 'a'")

    # R-TENSOR-5 ----------------------------------------------------------------------------------
    for tag, d in (("zero", 0), ("six", 6), ("max", 0xFFFFFFFF)):
        p = plan(base_meta(), [A(), B()], 64)
        p.table[0]["dtype"] = d
        bad("R-TENSOR-5-%s.UNKNOWN_DTYPE" % tag, p.to_bytes(), "tensor[0].dtype %d (size 64 as for F32)" % d)

    # R-TENSOR-6 ----------------------------------------------------------------------------------
    p = plan(base_meta(), [A(), B()], 64)
    p.table[0]["rank"] = 0
    p.table[0]["dims"] = [0, 0, 0, 0]
    bad("R-TENSOR-6-zero.BAD_RANK", p.to_bytes(), "rank 0, dims all zero")
    p = plan(base_meta(), [A(), B()], 64)
    p.table[0]["rank"] = 5
    p.table[0]["dims"] = [4, 4, 1, 1]
    bad("R-TENSOR-6-five.BAD_RANK", p.to_bytes(), "rank 5")

    # R-TENSOR-7 ----------------------------------------------------------------------------------
    p = plan(base_meta(), [A(), B()], 64)
    p.table[0]["dims"] = [4, 0, 0, 0]
    p.table[0]["size"] = 0
    p.placements = [None, p.table[1]["offset"]]
    bad("R-TENSOR-7-zero.BAD_DIM", p.to_bytes(), "dims (4, 0), size 0")
    p = plan(base_meta(), [A(), B()], 64)
    p.table[0]["rank"] = 1
    p.table[0]["dims"] = [(1 << 32) + 1, 0, 0, 0]
    bad("R-TENSOR-7-big.BAD_DIM", p.to_bytes(), "rank 1, dims[0] = 2^32+1")
    p = plan(base_meta(), [A(), B()], 64)
    p.table[1]["rank"] = 4
    p.table[1]["dims"] = [1, 1, 1, 1 << 63]
    bad("R-TENSOR-7-last.BAD_DIM", p.to_bytes(), "tensor[1] dims (1, 1, 1, 2^63)")

    # R-TENSOR-8 ----------------------------------------------------------------------------------
    p = plan(base_meta(), [A(), B()], 64)
    p.table[0]["dims"] = [1 << 21, 1 << 20, 0, 0]
    p.table[0]["size"] = 4 << 41
    bad("R-TENSOR-8.TOO_MANY_ELEMENTS", p.to_bytes(), "dims (2^21, 2^20): 2^41 elements (size 2^43 matches)")
    p = plan(base_meta(), [A(), B()], 64)
    p.table[0]["rank"] = 4
    p.table[0]["dims"] = [1 << 32] * 4
    p.table[0]["size"] = 0
    bad("R-TENSOR-8-product-wraps.TOO_MANY_ELEMENTS", p.to_bytes(),
        "dims (2^32, 2^32, 2^32, 2^32) (each allowed): 2^128 elements, a 64-bit product wraps to 0; "
        "size 0 matches the wrapped count")

    p = plan(base_meta(), [A(), B()], 64)
    p.table[0]["dims"] = [1 << 32, 1 << 32, 0, 0]
    p.table[0]["size"] = 0
    bad("R-TENSOR-8-product-2-64.TOO_MANY_ELEMENTS", p.to_bytes(),
        "dims (2^32, 2^32) (each allowed): 2^64 elements, a 64-bit product wraps to 0; size 0 matches "
        "the wrapped count")

    # R-TENSOR-9 ----------------------------------------------------------------------------------
    p = plan(base_meta(), [A(), B()], 64)
    p.table[0]["dims"] = [4, 4, 0, 1]
    bad("R-TENSOR-9-dims.RESERVED_NONZERO", p.to_bytes(), "rank 2 with dims[3] = 1")
    p = plan(base_meta(), [A(), B()], 64)
    p.table[1]["reserved"] = 1
    bad("R-TENSOR-9-reserved.RESERVED_NONZERO", p.to_bytes(), "tensor[1].reserved = 1")

    # R-TENSOR-10 ---------------------------------------------------------------------------------
    t = A()
    t.data += b"\0" * 4
    p = plan(base_meta(), [t], 64)
    bad("R-TENSOR-10.SIZE_MISMATCH", p.to_bytes(), "F32 (4,4) with size 68 (the file really holds 68 bytes)")
    shape = (2, 70)
    src = q8_source(shape, 2)
    wrong = q8row_bytes(src, shape, 64)  # laid out with alignment 64 in a 4096-aligned file
    p = plan(base_meta(), [TensorDef("q", "Q8_ROW", shape, wrong)], 4096)
    bad("R-TENSOR-10-q8row-alignment.SIZE_MISMATCH", p.to_bytes(),
        "Q8_ROW (2,70) laid out with alignment 64 (size 328) in a 4096-aligned file (needs 4168)")
    q, s, sums = quantize_q8row(src)
    dense = q.tobytes() + s.astype("<f4").tobytes() + sums.astype("<i4").tobytes()
    p = plan(base_meta(), [TensorDef("q", "Q8_ROW", shape, dense)], 64)
    bad("R-TENSOR-10-q8row-packed.SIZE_MISMATCH", p.to_bytes(),
        "Q8_ROW (2,70) with q, scales and row_sums packed with no padding (size %d, needs 328)" % len(dense))
    t = TensorDef("h", "BF16", (4,), f32_bytes((4,), 5))
    p = plan(base_meta(), [A(), t], 64)
    bad("R-TENSOR-10-bf16.SIZE_MISMATCH", p.to_bytes(), "BF16 (4,) with 4 bytes per element (size 16)")

    # R-TENSOR-11 ---------------------------------------------------------------------------------
    p = plan(base_meta(), [A(), B()], 64)
    place(p, [p.table[0]["offset"], p.table[1]["offset"] + 32])
    bad("R-TENSOR-11.MISALIGNED", p.to_bytes(), "tensor[1].offset 32 past an alignment boundary")
    p = plan(base_meta(), [A()], 4096)
    place(p, [p.table[0]["offset"] + 64])
    bad("R-TENSOR-11-4096.MISALIGNED", p.to_bytes(), "offset data_offset + 64 in a 4096-aligned file")

    # R-TENSOR-12 ---------------------------------------------------------------------------------
    p = plan(base_meta(), [A(), B()], 64)
    d = p.header["data_offset"]
    p.table[0]["offset"] = d - 64
    bad("R-TENSOR-12-before-data.OUT_OF_BOUNDS", p.to_bytes(),
        "tensor[0].offset = data_offset - 64 (aligned, inside the table; the second tensor is fine)")
    p = plan(base_meta(), [A(), B()], 64)
    p.table[0]["offset"] = 0
    bad("R-TENSOR-12-zero.OUT_OF_BOUNDS", p.to_bytes(), "tensor[0].offset = 0 (the header)")
    p = plan(base_meta(), [A(), B()], 64)
    p.table[1]["offset"] += 64
    bad("R-TENSOR-12-past-end.OUT_OF_BOUNDS", p.to_bytes(),
        "last tensor moved one alignment unit on: ends 64 bytes past file_size")
    p = plan(base_meta(), [A(), B()], 64)
    p.table[1]["offset"] = 1 << 63
    bad("R-TENSOR-12-huge.OUT_OF_BOUNDS", p.to_bytes(), "tensor[1].offset 2^63 (no overflow)")

    # R-TENSOR-13 ---------------------------------------------------------------------------------
    p = plan(base_meta(), [TensorDef("a", "F32", (16,), f32_bytes((16,), 6)),
                           TensorDef("b", "F32", (32,), f32_bytes((32,), 7))], 64)
    d = p.header["data_offset"]
    place(p, [d, d])
    bad("R-TENSOR-13-overlap.TENSOR_OVERLAP", p.to_bytes(),
        "both tensors at data_offset (second one longer and ending at file_size)")
    p = plan(base_meta(), [TensorDef("a", "F32", (16,), f32_bytes((16,), 6)),
                           TensorDef("b", "F32", (32,), f32_bytes((32,), 7))], 64)
    place(p, [d + 128, d], file_size=d + 192)
    bad("R-TENSOR-13-order.TENSOR_OVERLAP", p.to_bytes(),
        "tensor[0] at data_offset+128, tensor[1] at data_offset (out of order)")
    p = plan(base_meta(), [TensorDef("a", "F32", (32,), f32_bytes((32,), 6)),
                           TensorDef("b", "F32", (32,), f32_bytes((32,), 7))], 64)
    place(p, [d, d + 64])
    bad("R-TENSOR-13-partial.TENSOR_OVERLAP", p.to_bytes(),
        "tensor[0] is 128 bytes, tensor[1] starts 64 bytes into it")

    # R-TENSOR-14 ---------------------------------------------------------------------------------
    p = plan(base_meta(), [A(), B()], 64)
    set_file_size(p, p.header["file_size"] + 64)
    bad("R-TENSOR-14-gap-at-end.DATA_END", p.to_bytes(), "64 zero bytes after the last tensor, inside file_size")
    p = plan(base_meta(), [], 64)
    set_file_size(p, p.header["data_offset"] + 64)
    bad("R-TENSOR-14-no-tensors.DATA_END", p.to_bytes(), "no tensors, file_size = data_offset + 64")


# ---------------------------------------------------------------------------------------------- verify

def gen_verify():
    def q8plan():
        shape = (3, 70)
        q, s, sums = quantize_q8row(q8_source(shape, 60))
        return shape, q, s, sums

    def mk(qbytes, shape, gap_patch=None):
        t = [TensorDef("a", "F32", (5,), f32_bytes((5,), 61)), TensorDef("q", "Q8_ROW", shape, qbytes)]
        p = plan(base_meta(), t, 64)
        if gap_patch is not None:
            p.patches.append((p.table[0]["offset"] + p.table[0]["size"] + gap_patch, b"\x07"))
        return p.to_bytes()

    shape, q, s, sums = q8plan()
    good = q8row_pack(q, s, sums, shape, 64)
    L = dict(zip(("rows", "cols", "row_stride", "scales_offset", "sums_offset", "size"),
                 q8row_layout(shape, 64)))
    data = bytearray(good)
    data[5] ^= 0x01
    t = [TensorDef("a", "F32", (5,), f32_bytes((5,), 61)), TensorDef("q", "Q8_ROW", shape, good)]
    p = plan(base_meta(), t, 64)
    p.tensors[1] = TensorDef("q", "Q8_ROW", shape, bytes(data))  # checksum in the table is of `good`
    emit("verify", "R-DATA-1.TENSOR_CHECKSUM", p.to_bytes(), "a q byte of tensor 'q' changed after checksumming")
    p = plan(base_meta(), t, 64)
    p.table[0]["checksum"] ^= 1 << 40
    emit("verify", "R-DATA-1-field.TENSOR_CHECKSUM", p.to_bytes(),
         "tensor[0].checksum wrong (header checksum recomputed)")

    emit("verify", "R-DATA-2-gap.PADDING_NONZERO", mk(good, shape, gap_patch=3),
         "non-zero byte in the gap between tensor 'a' (20 bytes) and tensor 'q'")
    t0 = TensorDef("a", "F32", (5,), f32_bytes((5,), 61))
    p = plan(base_meta(), [t0, TensorDef("q", "Q8_ROW", shape, good)], 64)
    d = p.header["data_offset"]
    place(p, [d + 64, align_up(d + 64 + 20, 64)])
    p.patches.append((d + 10, b"\x01"))
    emit("verify", "R-DATA-2-leading-gap.PADDING_NONZERO", p.to_bytes(),
         "first tensor starts at data_offset + 64; a non-zero byte in [data_offset, first tensor)")

    def variant(name, what, mod):
        qq, ss, su = q.copy(), s.copy(), sums.copy()
        raw = None
        r = mod(qq, ss, su)
        raw = bytearray(q8row_pack(qq, ss, su, shape, 64))
        if r is not None:
            r(raw)
        emit("verify", name, mk(bytes(raw), shape), what)

    def pad_row(raw):
        raw[L["row_stride"] + 70] = 1

    def pad_scales_sums(raw):
        raw[L["scales_offset"] + 4 * L["rows"]] = 1
    variant("R-DATA-2-row-padding.PADDING_NONZERO", "Q8_ROW row 1 padding byte (col 70) is 1",
            lambda qq, ss, su: pad_row)
    # With alignment 64 there is never a gap between q and scales; use alignment 128 and 3 rows of 64.
    shape2 = (3, 50)
    L2 = dict(zip(("rows", "cols", "row_stride", "scales_offset", "sums_offset", "size"),
                  q8row_layout(shape2, 128)))
    assert L2["scales_offset"] > L2["rows"] * L2["row_stride"]
    raw = bytearray(q8row_bytes(q8_source(shape2, 62), shape2, 128))
    raw[L2["rows"] * L2["row_stride"] + 5] = 1
    p = plan(base_meta(), [TensorDef("q", "Q8_ROW", shape2, bytes(raw))], 128)
    emit("verify", "R-DATA-2-q-scales-gap.PADDING_NONZERO", p.to_bytes(),
         "alignment 128, Q8_ROW (3,50): a byte between the end of q (192) and scales (256) is 1")
    variant("R-DATA-2-scales-sums-gap.PADDING_NONZERO", "Q8_ROW byte between scales and row_sums is 1",
            lambda qq, ss, su: pad_scales_sums)

    def bad_sum(qq, ss, su):
        su[1] += 1
    variant("R-DATA-2-row-sum.BAD_TENSOR_DATA", "Q8_ROW row_sum[1] off by one", bad_sum)

    def neg_scale(qq, ss, su):
        ss[0] = -ss[0]
    variant("R-DATA-2-scale-negative.BAD_TENSOR_DATA", "Q8_ROW scale[0] negative", neg_scale)

    def nan_scale(qq, ss, su):
        ss[2] = np.float32("nan")
    variant("R-DATA-2-scale-nan.BAD_TENSOR_DATA", "Q8_ROW scale[2] NaN", nan_scale)

    def inf_scale(qq, ss, su):
        ss[1] = np.float32("inf")
    variant("R-DATA-2-scale-inf.BAD_TENSOR_DATA", "Q8_ROW scale[1] +Inf", inf_scale)

    def minus128(qq, ss, su):
        old = int(qq[2, 5])
        qq[2, 5] = -128
        su[2] += -128 - old
    variant("R-DATA-2-q-minus-128.BAD_TENSOR_DATA", "Q8_ROW q[2][5] = -128 (row_sum adjusted)", minus128)


# ---------------------------------------------------------------------------------------------- main

def write_readme():
    lines = ["# Golden .qmap files", "",
             "Generated by `make_golden.py` from spec/FORMAT.md alone (deterministic: re-running gives "
             "identical bytes). Do not edit the files by hand; change the generator and re-run "
             "`/usr/bin/python3 tests/golden/make_golden.py`.", "",
             "File names: `<RULE-ID>[-<variant>].<ERROR_NAME>.qmap`; ERROR_NAME is the qm_status name "
             "without `QM_ERR_` (format/qm_error.h).", "",
             "- `valid/`: every reader must open these, and full verification must pass.",
             "- `invalid/`: opening must fail with the named rule. Each file breaks only that rule where the "
             "format allows it (header checksum valid unless the rule is R-HDR-9). Where a file must break "
             "a second rule too, the named rule is the one a careful reader meets first "
             "(noted in the description).",
             "- `verify/`: these open fine; R-DATA-1 files fail plain verification, R-DATA-2 files pass "
             "plain verification and fail full verification.", "",
             "Check order assumed where the spec leaves a choice (see tests/spec_reader.py): R-HDR-6 and "
             "R-HDR-5 before R-HDR-8; a length/count cap (R-META-6) before the bounds test of what it "
             "announces (R-META-1); the element count cap (R-TENSOR-8) is judged on the exact product "
             "(never reported as R-GEN-1); offset + size overflow (R-GEN-1) before R-TENSOR-12; per-entry "
             "rules before R-META-9 / R-TENSOR-1 (left-over bytes) and R-TENSOR-14.", ""]
    for kind in ("valid", "invalid", "verify"):
        lines += ["## %s/" % kind, "", "| File | Bytes | What it is / breaks |", "|---|---:|---|"]
        for name, size, what in sorted(OUT[kind]):
            lines.append("| `%s` | %d | %s |" % (name, size, what.replace("|", "\\|")))
        lines.append("")
    with open(os.path.join(OUTDIR, "README.md"), "w") as f:
        f.write("\n".join(lines))


def main():
    global OUTDIR
    if len(sys.argv) == 3 and sys.argv[1] == "--out":
        OUTDIR = sys.argv[2]
    for kind in OUT:
        d = os.path.join(OUTDIR, kind)
        os.makedirs(d, exist_ok=True)
        for fn in os.listdir(d):
            if fn.endswith(".qmap"):
                os.remove(os.path.join(d, fn))
    gen_valid()
    gen_invalid_general_header()
    gen_invalid_meta()
    gen_invalid_table()
    gen_verify()
    write_readme()
    print("wrote %d valid, %d invalid, %d verify files" % tuple(len(OUT[k]) for k in ("valid", "invalid",
                                                                                       "verify")))


if __name__ == "__main__":
    main()
