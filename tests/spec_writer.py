#!/usr/bin/python3
"""spec_writer.py — a minimal, independent .qmap writer written from spec/FORMAT.md alone.

It exists to craft test files, so every step is exposed and can be corrupted:

    p = plan(meta=[meta_entry("general.name", "STRING", "x")],
             tensors=[TensorDef("w", "F32", (4,), np.arange(4, dtype="<f4").tobytes())])
    p.header["reserved0"] = 1          # corrupt a header field
    p.table[0]["reserved"] = 7         # corrupt a table field
    data = p.to_bytes()                # header checksum recomputed over the corrupted bytes
    data = p.to_bytes(checksum=False)  # ...or keep p.header["header_checksum"] as it is

Placement follows spec section 9: tensors in declaration order, each at align_up(end of previous,
alignment), data_offset = align_up(table end, alignment), zero padding everywhere.

Physical layout used by Plan.to_bytes() (independent of what the header *claims*):
    [0,128) header from p.header; [128, ...) p.meta_bytes; right after it the table (p.table entries,
    then p.table_extra); then zeros; each tensor's bytes at p.placements[i] (default: the table offset
    the plan computed); then p.patches applied; buffer length p.length (default: computed file size).
"""
import struct

import numpy as np
import xxhash

MAGIC = b"QMAP\r\n\x1a\n"
HEADER_SIZE = 128

META_TYPES = {"U32": 1, "I32": 2, "U64": 3, "I64": 4, "F32": 5, "F64": 6, "BOOL": 7, "STRING": 8, "ARRAY": 9}
SCALAR_FMT = {1: "<I", 2: "<i", 3: "<Q", 4: "<q", 5: "<f", 6: "<d", 7: "<B"}
DTYPES = {"F32": 1, "F16": 2, "BF16": 3, "I32": 4, "Q8_ROW": 5}
ELEM_SIZE = {1: 4, 2: 2, 3: 2, 4: 4}


def align_up(x, a):
    return (x + a - 1) // a * a


def xxh3(b):
    return xxhash.xxh3_64_intdigest(bytes(b))


class Bits:
    """An exact float bit pattern for an F32/F64 value (e.g. Bits(0x7fc00001) is a NaN with payload)."""

    def __init__(self, bits):
        self.bits = bits


# ---------------------------------------------------------------------------------------------- metadata

def _enc_scalar(tid, v):
    if isinstance(v, (bytes, bytearray)):
        return bytes(v)  # raw override
    if tid == 5 and isinstance(v, Bits):
        return struct.pack("<I", v.bits)
    if tid == 6 and isinstance(v, Bits):
        return struct.pack("<Q", v.bits)
    if tid == 7:
        return struct.pack("<B", int(v))
    return struct.pack(SCALAR_FMT[tid], v)


def _enc_string(s, length=None):
    b = s.encode("utf-8") if isinstance(s, str) else bytes(s)
    n = len(b) if length is None else length
    return struct.pack("<Q", n) + b


def _parse_type(type_name):
    """'U32' -> (1, None); 'ARRAY[STRING]' -> (9, 8); an int -> (int, None)."""
    if isinstance(type_name, int):
        return type_name, None
    if type_name.startswith("ARRAY[") and type_name.endswith("]"):
        return 9, META_TYPES[type_name[6:-1]]
    return META_TYPES[type_name], None


def encode_value(type_name, value, *, elem_type_id=None, count=None, str_len=None):
    """The encoded value (without key and type id). Overrides let a test write inconsistent fields:
    elem_type_id (array element type), count (array count), str_len (string length field)."""
    tid, elem = _parse_type(type_name)
    if elem_type_id is not None:
        elem = elem_type_id
    if tid in SCALAR_FMT:
        return _enc_scalar(tid, value)
    if tid == 8:
        return _enc_string(value, str_len)
    if tid == 9:
        vals = list(value)
        n = len(vals) if count is None else count
        out = [struct.pack("<IQ", elem, n)]
        for v in vals:
            if elem == 8:
                out.append(_enc_string(v))
            elif elem in SCALAR_FMT:
                out.append(_enc_scalar(elem, v.item() if isinstance(v, np.generic) else v))
            else:
                out.append(bytes(v))
        return b"".join(out)
    return bytes(value)  # unknown type: raw value bytes


def meta_entry(key, type_name, value, *, key_len=None, type_id=None, raw_value=None, **value_overrides):
    """One metadata entry's bytes. key: str or bytes. type_name: 'U32'...'STRING', 'ARRAY[F32]'.
    key_len/type_id/raw_value override the encoded fields."""
    kb = key.encode("utf-8") if isinstance(key, str) else bytes(key)
    tid, _ = _parse_type(type_name)
    if raw_value is None:
        raw_value = encode_value(type_name, value, **value_overrides)
    return (struct.pack("<I", len(kb) if key_len is None else key_len) + kb
            + struct.pack("<I", tid if type_id is None else type_id) + raw_value)


# ---------------------------------------------------------------------------------------------- tensors

def q8row_layout(shape, alignment):
    """(rows, cols, row_stride, scales_offset, sums_offset, size) per spec 6.1."""
    cols = shape[-1]
    rows = 1
    for d in shape[:-1]:
        rows *= d
    row_stride = align_up(cols, 64)
    scales_offset = align_up(rows * row_stride, alignment)
    sums_offset = scales_offset + align_up(4 * rows, 64)
    return rows, cols, row_stride, scales_offset, sums_offset, sums_offset + 4 * rows


def tensor_nbytes(dtype, shape, alignment):
    did = DTYPES[dtype] if isinstance(dtype, str) else dtype
    n = 1
    for d in shape:
        n *= d
    if did == 5:
        return q8row_layout(shape, alignment)[5]
    return ELEM_SIZE[did] * n


def quantize_q8row(w):
    """Spec 6.1 quantization of a 2-D float32 array -> (q int8 [rows, cols], scale f32 [rows], sums)."""
    w = np.ascontiguousarray(w, dtype=np.float32)
    if not np.all(np.isfinite(w)):
        raise ValueError("Q8_ROW input must be finite")
    rows, cols = w.shape
    q = np.zeros((rows, cols), dtype=np.int8)
    scales = np.zeros(rows, dtype=np.float32)
    for r in range(rows):
        amax = np.max(np.abs(w[r])).astype(np.float32)
        scale = np.float32(amax) / np.float32(127)  # binary32 division
        if scale == 0:  # amax is 0, or so small that amax/127 underflows: scale +0, every q 0 (spec 6.1)
            continue
        scales[r] = scale
        x = np.divide(w[r], scale, dtype=np.float32)  # binary32 division
        q[r] = np.clip(np.rint(x), -127, 127).astype(np.int8)  # rint: ties to even
    sums = q.astype(np.int64).sum(axis=1).astype(np.int32)
    return q, scales, sums


def q8row_bytes(w, shape, alignment):
    """The data bytes of a Q8_ROW tensor of `shape` quantized from float32 values w (any shape with the
    same element count)."""
    rows, cols, stride, soff, sumoff, size = q8row_layout(shape, alignment)
    q, scales, sums = quantize_q8row(np.asarray(w, dtype=np.float32).reshape(rows, cols))
    return q8row_pack(q, scales, sums, shape, alignment)


def q8row_pack(q, scales, sums, shape, alignment):
    rows, cols, stride, soff, sumoff, size = q8row_layout(shape, alignment)
    buf = bytearray(size)
    for r in range(rows):
        buf[r * stride:r * stride + cols] = np.asarray(q[r], dtype=np.int8).tobytes()
    buf[soff:soff + 4 * rows] = np.asarray(scales, dtype="<f4").tobytes()
    buf[sumoff:sumoff + 4 * rows] = np.asarray(sums, dtype="<i4").tobytes()
    return bytes(buf)


class TensorDef:
    def __init__(self, name, dtype, shape, data):
        self.name = name.encode("utf-8") if isinstance(name, str) else bytes(name)
        self.dtype = dtype
        self.shape = tuple(shape)
        self.data = bytes(data)


# ---------------------------------------------------------------------------------------------- plan

HEADER_FIELDS = ["magic", "major_version", "minor_version", "reserved0", "alignment", "file_size",
                 "metadata_offset", "metadata_size", "metadata_count", "table_offset", "table_size",
                 "tensor_count", "data_offset", "reserved1", "header_checksum"]


def pack_header(h):
    out = bytearray(h["magic"][:8].ljust(8, b"\0"))
    out += struct.pack("<HHIQQQQQQQQQ", h["major_version"], h["minor_version"], h["reserved0"],
                       h["alignment"], h["file_size"], h["metadata_offset"], h["metadata_size"],
                       h["metadata_count"], h["table_offset"], h["table_size"], h["tensor_count"],
                       h["data_offset"])
    out += struct.pack("<4Q", *h["reserved1"])
    out += struct.pack("<Q", h["header_checksum"] or 0)
    assert len(out) == HEADER_SIZE
    return bytes(out)


def pack_table_entry(e):
    if "raw" in e:
        return e["raw"]
    name = e["name"]
    name_len = len(name) if e.get("name_len") is None else e["name_len"]
    return (struct.pack("<I", name_len) + name
            + struct.pack("<II4QQQQQ", e["dtype"], e["rank"], *e["dims"], e["offset"], e["size"],
                          e["checksum"], e["reserved"]))


def header_checksum(buf, data_offset):
    end = min(data_offset, len(buf))
    return xxh3(bytes(buf[0:120]) + bytes(buf[128:end]))


class Plan:
    def __init__(self, meta, tensors, alignment=4096, minor=0):
        self.alignment = alignment
        self.meta_entries = [bytes(m) for m in meta]
        self.meta_bytes = b"".join(self.meta_entries)
        self.tensors = list(tensors)
        self.table = []
        for t in self.tensors:
            did = DTYPES[t.dtype] if isinstance(t.dtype, str) else t.dtype
            dims = list(t.shape) + [0] * (4 - len(t.shape))
            self.table.append({"name": t.name, "name_len": None, "dtype": did, "rank": len(t.shape),
                               "dims": dims, "offset": 0, "size": len(t.data),
                               "checksum": xxh3(t.data), "reserved": 0})
        self.table_extra = b""
        table_size = sum(len(pack_table_entry(e)) for e in self.table)
        table_offset = HEADER_SIZE + len(self.meta_bytes)
        data_offset = align_up(table_offset + table_size, alignment)
        pos = data_offset
        end = data_offset
        for e in self.table:
            pos = align_up(end, alignment)
            e["offset"] = pos
            end = pos + e["size"]
        self.placements = [e["offset"] for e in self.table]
        self.header = {"magic": MAGIC, "major_version": 1, "minor_version": minor, "reserved0": 0,
                       "alignment": alignment, "file_size": end, "metadata_offset": HEADER_SIZE,
                       "metadata_size": len(self.meta_bytes), "metadata_count": len(self.meta_entries),
                       "table_offset": table_offset, "table_size": table_size,
                       "tensor_count": len(self.table), "data_offset": data_offset,
                       "reserved1": [0, 0, 0, 0], "header_checksum": None}
        self.length = None     # physical file length; None = header file_size at plan time
        self._planned_size = end
        self.patches = []      # (absolute offset, bytes) applied after everything else

    def relayout(self):
        """Recompute table_size, data_offset, tensor offsets and file_size after editing entries
        (e.g. a longer name), keeping the placement rules of section 9."""
        a = self.header["alignment"]
        table_size = sum(len(pack_table_entry(e)) for e in self.table) + len(self.table_extra)
        self.header["metadata_size"] = len(self.meta_bytes)
        self.header["table_offset"] = HEADER_SIZE + len(self.meta_bytes)
        self.header["table_size"] = table_size
        self.header["data_offset"] = align_up(self.header["table_offset"] + table_size, a)
        end = self.header["data_offset"]
        for e in self.table:
            e["offset"] = align_up(end, a)
            end = e["offset"] + e["size"]
        self.placements = [e["offset"] for e in self.table]
        self.header["file_size"] = end
        self._planned_size = end

    def to_bytes(self, checksum=True):
        length = self._planned_size if self.length is None else self.length
        table = b"".join(pack_table_entry(e) for e in self.table) + self.table_extra
        body_end = HEADER_SIZE + len(self.meta_bytes) + len(table)
        data_end = max([p + len(t.data) for p, t in zip(self.placements, self.tensors) if p is not None]
                       + [0])
        buf = bytearray(max(length, body_end, data_end))
        buf[0:HEADER_SIZE] = pack_header(self.header)
        buf[HEADER_SIZE:HEADER_SIZE + len(self.meta_bytes)] = self.meta_bytes
        buf[HEADER_SIZE + len(self.meta_bytes):body_end] = table
        for p, t in zip(self.placements, self.tensors):
            if p is not None:
                buf[p:p + len(t.data)] = t.data
        for off, b in self.patches:
            buf[off:off + len(b)] = b
        if checksum:
            c = header_checksum(buf, self.header["data_offset"])
            buf[120:128] = struct.pack("<Q", c)
        else:
            buf[120:128] = struct.pack("<Q", self.header["header_checksum"] or 0)
        for off, b in self.patches:  # patches win, even over the checksum field
            if off < 128 and off + len(b) > 120:
                buf[off:off + len(b)] = b
        del buf[length:]
        return bytes(buf)


def plan(meta=(), tensors=(), alignment=4096, minor=0):
    return Plan(meta, tensors, alignment, minor)


def build(meta=(), tensors=(), alignment=4096, minor=0):
    """A valid file's bytes."""
    return plan(meta, tensors, alignment, minor).to_bytes()


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)
