#!/usr/bin/python3
"""spec_reader.py — an independent .qmap reader written from spec/FORMAT.md alone.

    qf = read("model.qmap")           # validates R-GEN-1, R-HDR-*, R-META-*, R-TENSOR-* (spec section 7)
    qf.header["tensor_count"]         # every header field, by its spec name
    qf.metadata["general.name"]       # Python values; numeric arrays as numpy arrays
    qf.metadata_types["x"]            # "U32", "STRING", "ARRAY[F32]", ...
    t = qf.tensors["w"]               # ordered by table position
    t.array                           # numpy view (memmap) into the file, in the tensor's shape
    verify(qf)                        # R-DATA-1;  verify(qf, full=True) also R-DATA-2

A rejected file raises SpecError(rule, message) with rule like "R-HDR-3".

Order of the open-time checks (the spec fixes only "no check reads outside the file" and R-HDR-9's
position; within that freedom this reader uses the order below; golden files are crafted so that only
one rule is broken wherever the format allows it):
  R-HDR-1, R-HDR-2, R-HDR-6, R-HDR-5, R-HDR-7, R-HDR-3/4, R-HDR-8 (R-GEN-1 on its arithmetic), R-HDR-9,
  R-HDR-10, then each metadata entry in order, R-META-9, then each table entry in order, R-TENSOR-1
  (left-over bytes), R-TENSOR-14.
  Metadata entry: key_len fits (META-1), key_len range (META-2), key fits (META-1), key UTF-8/NUL (META-3),
  duplicate (META-8), type fits (META-1), type id (META-4); value: for STRING the length field fits
  (META-1), length cap (META-6), bytes fit (META-1), UTF-8 (META-7); for ARRAY the element type fits
  (META-1) and is known and not ARRAY (META-4), the count fits (META-1), count cap (META-6),
  count x minimum element size fits (META-1), then each element as above; BOOL byte (META-5).
  Table entry: name_len fits (TENSOR-1), name_len range (TENSOR-2), whole entry fits (TENSOR-1), name
  UTF-8/NUL (TENSOR-3), duplicate (TENSOR-4), dtype (TENSOR-5), rank (TENSOR-6), dims (TENSOR-7),
  element count (TENSOR-8), dims tail and reserved (TENSOR-9), size (TENSOR-10), offset alignment
  (TENSOR-11), offset+size overflow (GEN-1), bounds (TENSOR-12), order/overlap (TENSOR-13).
"""
import os
import struct
import sys
from collections import OrderedDict

import numpy as np
import xxhash

MAGIC = b"QMAP\r\n\x1a\n"
HEADER_SIZE = 128
U64_LIMIT = 1 << 64
MAX_COUNT = 1 << 20
MAX_KEY_LEN = 256
MAX_NAME_LEN = 1024
MAX_STRING_LEN = 1 << 30
MAX_ARRAY_COUNT = 1 << 32
MAX_DIM = 1 << 32
MAX_ELEMENTS = 1 << 40
MIN_ALIGNMENT = 64
MAX_ALIGNMENT = 1 << 30

META_TYPE_NAMES = {1: "U32", 2: "I32", 3: "U64", 4: "I64", 5: "F32", 6: "F64", 7: "BOOL", 8: "STRING",
                   9: "ARRAY"}
META_SCALAR = {1: (4, "<u4"), 2: (4, "<i4"), 3: (8, "<u8"), 4: (8, "<i8"), 5: (4, "<f4"), 6: (8, "<f8"),
               7: (1, "u1")}
ARRAY_NP = {1: np.uint32, 2: np.int32, 3: np.uint64, 4: np.int64, 5: np.float32, 6: np.float64}
DTYPE_NAMES = {1: "F32", 2: "F16", 3: "BF16", 4: "I32", 5: "Q8_ROW"}
DTYPE_NP = {1: "<f4", 2: "<f2", 3: "<u2", 4: "<i4"}
DTYPE_ELEM_SIZE = {1: 4, 2: 2, 3: 2, 4: 4}


class SpecError(Exception):
    """A file broke rule `rule` ("R-HDR-3", ...). For R-DATA-2, `kind` is "padding" (a non-zero padding
    or gap byte) or "data" (bad row sum, scale or q value)."""

    def __init__(self, rule, message, kind=None):
        super().__init__("%s: %s" % (rule, message))
        self.rule = rule
        self.message = message
        self.kind = kind


def _add(a, b, what):
    r = a + b
    if r >= U64_LIMIT:
        raise SpecError("R-GEN-1", "%s overflows 64 bits (%d + %d)" % (what, a, b))
    return r


def _mul(a, b, what):
    r = a * b
    if r >= U64_LIMIT:
        raise SpecError("R-GEN-1", "%s overflows 64 bits (%d * %d)" % (what, a, b))
    return r


def _align_up(x, a, what):
    r = (x + a - 1) // a * a
    if r >= U64_LIMIT:
        raise SpecError("R-GEN-1", "%s: align_up(%d, %d) overflows 64 bits" % (what, x, a))
    return r


def _utf8_ok(b, allow_nul):
    if not allow_nul and b"\x00" in b:
        return False
    try:
        # Python's strict UTF-8 codec follows RFC 3629: it rejects overlong forms, surrogates,
        # code points above U+10FFFF and truncated sequences.
        b.decode("utf-8", "strict")
    except UnicodeDecodeError:
        return False
    return True


def q8row_layout(shape, alignment):
    """Spec 6.1: dict with rows, cols, row_stride, scales_offset, sums_offset, size."""
    cols = shape[-1]
    rows = 1
    for d in shape[:-1]:
        rows = _mul(rows, d, "Q8_ROW rows")
    row_stride = _align_up(cols, 64, "Q8_ROW row_stride")
    scales_offset = _align_up(_mul(rows, row_stride, "Q8_ROW q size"), alignment, "Q8_ROW scales_offset")
    sums_offset = _add(scales_offset, _align_up(_mul(4, rows, "Q8_ROW scales"), 64, "Q8_ROW scales"),
                       "Q8_ROW sums_offset")
    size = _add(sums_offset, _mul(4, rows, "Q8_ROW sums"), "Q8_ROW size")
    return {"rows": rows, "cols": cols, "row_stride": row_stride, "scales_offset": scales_offset,
            "sums_offset": sums_offset, "size": size}


def bf16_to_f32(raw):
    """BF16 raw uint16 values -> float32 (bf16 is the upper half of a binary32)."""
    return (np.asarray(raw, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


class Tensor:
    def __init__(self, qf, index, name, dtype_id, shape, offset, size, checksum, entry_offset):
        self._qf = qf
        self.index = index
        self.name = name
        self.dtype_id = dtype_id
        self.dtype = DTYPE_NAMES[dtype_id]
        self.shape = shape
        self.n_elements = int(np.prod(shape, dtype=object))
        self.offset = offset
        self.size = size
        self.checksum = checksum
        self.entry_offset = entry_offset

    @property
    def raw(self):
        """The tensor's `size` bytes, as a uint8 view into the file."""
        return self._qf._map()[self.offset:self.offset + self.size]

    @property
    def array(self):
        """F32/F16/I32: the values in the tensor's shape; BF16: raw uint16 (see to_float32());
        Q8_ROW: the raw bytes (use .q, .scales, .row_sums, .dequantize())."""
        if self.dtype_id in DTYPE_NP:
            return self.raw.view(DTYPE_NP[self.dtype_id]).reshape(self.shape)
        return self.raw

    def to_float32(self):
        if self.dtype_id == 3:
            return bf16_to_f32(self.array)
        if self.dtype_id == 5:
            return self.dequantize()
        return np.asarray(self.array, dtype=np.float32)

    # Q8_ROW -------------------------------------------------------------------------------------
    @property
    def layout(self):
        if self.dtype_id != 5:
            raise TypeError("%s is not Q8_ROW" % self.name)
        return q8row_layout(self.shape, self._qf.header["alignment"])

    @property
    def q(self):
        L = self.layout
        full = self.raw[:L["rows"] * L["row_stride"]].view(np.int8).reshape(L["rows"], L["row_stride"])
        return full[:, :L["cols"]]

    @property
    def scales(self):
        L = self.layout
        return self.raw[L["scales_offset"]:L["scales_offset"] + 4 * L["rows"]].view("<f4")

    @property
    def row_sums(self):
        L = self.layout
        return self.raw[L["sums_offset"]:L["sums_offset"] + 4 * L["rows"]].view("<i4")

    def dequantize(self):
        """Element (r, j) = q[r][j] * scale[r], in f32, in the tensor's shape."""
        v = self.q.astype(np.float32) * self.scales.astype(np.float32)[:, None]
        return v.astype(np.float32).reshape(self.shape)

    def __repr__(self):
        return "Tensor(%r, %s, %r, offset=%d, size=%d)" % (self.name, self.dtype, self.shape, self.offset,
                                                         self.size)


class MetaEntry:
    def __init__(self, key, type_id, elem_type, value, raw, entry_offset, value_offset):
        self.key = key
        self.type_id = type_id
        self.elem_type = elem_type
        self.value = value
        self.raw = raw                  # the encoded value bytes, exactly as in the file
        self.entry_offset = entry_offset
        self.value_offset = value_offset

    @property
    def type_name(self):
        if self.type_id == 9:
            return "ARRAY[%s]" % META_TYPE_NAMES[self.elem_type]
        return META_TYPE_NAMES[self.type_id]


class QmapFile:
    def __init__(self, path):
        self.path = path
        self.header = {}
        self.metadata = OrderedDict()
        self.metadata_types = OrderedDict()
        self.meta_entries = []
        self.tensors = OrderedDict()
        self._mm = None

    def _map(self):
        if self._mm is None:
            if self.header["file_size"] == 0:
                self._mm = np.zeros(0, dtype=np.uint8)
            else:
                self._mm = np.memmap(self.path, dtype=np.uint8, mode="r")
        return self._mm


# ------------------------------------------------------------------------------------------- header

def _check_header(hb, actual_size):
    if actual_size < 8 or hb[:8] != MAGIC:
        raise SpecError("R-HDR-1", "bad magic", kind="BAD_MAGIC")
    if actual_size < HEADER_SIZE:
        raise SpecError("R-HDR-1", "file is %d bytes, shorter than the 128-byte header" % actual_size,
                        kind="TRUNCATED")
    (major, minor, reserved0, alignment, file_size, metadata_offset, metadata_size, metadata_count,
     table_offset, table_size, tensor_count, data_offset) = struct.unpack_from("<HHIQQQQQQQQQ", hb, 8)
    reserved1 = list(struct.unpack_from("<4Q", hb, 88))
    (checksum,) = struct.unpack_from("<Q", hb, 120)
    h = {"magic": bytes(hb[:8]), "major_version": major, "minor_version": minor, "reserved0": reserved0,
         "alignment": alignment, "file_size": file_size, "metadata_offset": metadata_offset,
         "metadata_size": metadata_size, "metadata_count": metadata_count, "table_offset": table_offset,
         "table_size": table_size, "tensor_count": tensor_count, "data_offset": data_offset,
         "reserved1": reserved1, "header_checksum": checksum}
    if major != 1:
        raise SpecError("R-HDR-2", "major_version %d is not 1" % major)
    if reserved0 != 0:
        raise SpecError("R-HDR-6", "reserved0 is %d" % reserved0)
    for i, r in enumerate(reserved1):
        if r != 0:
            raise SpecError("R-HDR-6", "reserved1[%d] is %d" % (i, r))
    if alignment & (alignment - 1) or not MIN_ALIGNMENT <= alignment <= MAX_ALIGNMENT:
        raise SpecError("R-HDR-5", "alignment %d is not a power of two in [64, 2^30]" % alignment)
    if metadata_count > MAX_COUNT:
        raise SpecError("R-HDR-7", "metadata_count %d above 2^20" % metadata_count)
    if tensor_count > MAX_COUNT:
        raise SpecError("R-HDR-7", "tensor_count %d above 2^20" % tensor_count)
    if actual_size < file_size:
        raise SpecError("R-HDR-3", "file is %d bytes, header says %d" % (actual_size, file_size))
    if actual_size > file_size:
        raise SpecError("R-HDR-4", "file is %d bytes, header says %d" % (actual_size, file_size))
    if metadata_offset != HEADER_SIZE:
        raise SpecError("R-HDR-8", "metadata_offset %d is not 128" % metadata_offset)
    if table_offset != _add(metadata_offset, metadata_size, "metadata_offset + metadata_size"):
        raise SpecError("R-HDR-8", "table_offset %d is not metadata_offset + metadata_size" % table_offset)
    table_end = _add(table_offset, table_size, "table_offset + table_size")
    if data_offset != _align_up(table_end, alignment, "data_offset"):
        raise SpecError("R-HDR-8", "data_offset %d is not align_up(%d, %d)" % (data_offset, table_end,
                                                                                 alignment))
    if data_offset > file_size:
        raise SpecError("R-HDR-8", "data_offset %d beyond file_size %d" % (data_offset, file_size))
    return h


def _parse(qf, buf, actual_size):
    """buf holds at least bytes [0, min(actual_size, data_offset)) of the file."""
    h = _check_header(buf[:HEADER_SIZE], actual_size)
    qf.header = h
    data_offset = h["data_offset"]
    body = bytes(buf[:data_offset])
    if xxhash.xxh3_64_intdigest(body[:120] + body[128:]) != h["header_checksum"]:
        raise SpecError("R-HDR-9", "header checksum mismatch")
    table_end = h["table_offset"] + h["table_size"]
    pad = body[table_end:data_offset]
    if pad.count(0) != len(pad):
        i = next(i for i, c in enumerate(pad) if c)
        raise SpecError("R-HDR-10", "non-zero padding byte at offset %d" % (table_end + i))
    _parse_metadata(qf, body, h)
    _parse_table(qf, body, h)


# ------------------------------------------------------------------------------------------- metadata

class _Cursor:
    def __init__(self, buf, start, end, rule):
        self.buf, self.pos, self.end, self.rule = buf, start, end, rule

    def need(self, n, what):
        if n > self.end - self.pos:
            raise SpecError(self.rule, "%s at offset %d needs %d bytes, %d left in the section"
                            % (what, self.pos, n, self.end - self.pos))

    def take(self, n, what):
        self.need(n, what)
        b = self.buf[self.pos:self.pos + n]
        self.pos += n
        return b

    def u32(self, what):
        return struct.unpack("<I", self.take(4, what))[0]

    def u64(self, what):
        return struct.unpack("<Q", self.take(8, what))[0]


def _read_string(c, what):
    off = c.pos
    n = c.u64(what + " length")
    if n > MAX_STRING_LEN:
        raise SpecError("R-META-6", "%s at offset %d: length %d above 2^30" % (what, off, n))
    b = c.take(n, what)
    if not _utf8_ok(b, allow_nul=True):
        raise SpecError("R-META-7", "%s at offset %d is not valid UTF-8" % (what, off))
    return b.decode("utf-8")


def _read_scalar(c, tid, what):
    size, fmt = META_SCALAR[tid]
    off = c.pos
    b = c.take(size, what)
    v = np.frombuffer(b, dtype=fmt)[0]
    if tid == 7:
        if v > 1:
            raise SpecError("R-META-5", "%s at offset %d: BOOL byte %d" % (what, off, v))
        return bool(v)
    if tid in (5, 6):
        return float(v)
    return int(v)


def _parse_metadata(qf, body, h):
    start = h["metadata_offset"]
    c = _Cursor(body, start, h["table_offset"], "R-META-1")
    seen = set()
    for i in range(h["metadata_count"]):
        entry_offset = c.pos
        what = "metadata[%d]" % i
        key_len = c.u32(what + ".key_len")
        if key_len == 0 or key_len > MAX_KEY_LEN:
            raise SpecError("R-META-2", "%s.key_len %d at offset %d" % (what, key_len, entry_offset))
        kb = c.take(key_len, what + ".key")
        if not _utf8_ok(kb, allow_nul=False):
            raise SpecError("R-META-3", "%s.key at offset %d is not valid UTF-8 or has a NUL"
                            % (what, entry_offset + 4))
        key = kb.decode("utf-8")
        if key in seen:
            raise SpecError("R-META-8", "%s: duplicate key %r" % (what, key))
        seen.add(key)
        toff = c.pos
        tid = c.u32(what + ".type")
        if tid not in META_TYPE_NAMES:
            raise SpecError("R-META-4", "%s.type %d at offset %d unknown" % (what, tid, toff))
        value_offset = c.pos
        elem = None
        if tid == 8:
            value = _read_string(c, what + ".value")
        elif tid == 9:
            eoff = c.pos
            elem = c.u32(what + ".elem_type")
            if elem not in META_TYPE_NAMES or elem == 9:
                raise SpecError("R-META-4", "%s.elem_type %d at offset %d" % (what, elem, eoff))
            coff = c.pos
            count = c.u64(what + ".count")
            if count > MAX_ARRAY_COUNT:
                raise SpecError("R-META-6", "%s.count %d at offset %d above 2^32" % (what, count, coff))
            min_size = 8 if elem == 8 else META_SCALAR[elem][0]
            c.need(count * min_size, what + " elements")
            if elem == 8:
                value = [_read_string(c, "%s[%d]" % (what, j)) for j in range(count)]
            else:
                size, fmt = META_SCALAR[elem]
                eb = c.take(count * size, what + " elements")
                arr = np.frombuffer(eb, dtype=fmt)
                if elem == 7:
                    bad = np.nonzero(arr > 1)[0]
                    if len(bad):
                        raise SpecError("R-META-5", "%s[%d] at offset %d: BOOL byte %d"
                                        % (what, bad[0], c.pos - len(eb) + bad[0], arr[bad[0]]))
                    value = arr.astype(np.bool_)
                else:
                    value = arr.astype(ARRAY_NP[elem])
        else:
            value = _read_scalar(c, tid, what + ".value")
        e = MetaEntry(key, tid, elem, value, body[value_offset:c.pos], entry_offset, value_offset)
        qf.meta_entries.append(e)
        qf.metadata[key] = value
        qf.metadata_types[key] = e.type_name
    if c.pos != c.end:
        raise SpecError("R-META-9", "%d bytes left over after %d metadata entries (offset %d)"
                        % (c.end - c.pos, h["metadata_count"], c.pos))


# ------------------------------------------------------------------------------------------- table

def _parse_table(qf, body, h):
    a = h["alignment"]
    c = _Cursor(body, h["table_offset"], h["table_offset"] + h["table_size"], "R-TENSOR-1")
    prev_end = None
    for i in range(h["tensor_count"]):
        eoff = c.pos
        what = "tensor[%d]" % i
        name_len = c.u32(what + ".name_len")
        if name_len == 0 or name_len > MAX_NAME_LEN:
            raise SpecError("R-TENSOR-2", "%s.name_len %d at offset %d" % (what, name_len, eoff))
        c.need(name_len + 72, what + " entry")
        nb = c.take(name_len, what + ".name")
        if not _utf8_ok(nb, allow_nul=False):
            raise SpecError("R-TENSOR-3", "%s.name at offset %d is not valid UTF-8 or has a NUL"
                            % (what, eoff + 4))
        name = nb.decode("utf-8")
        if name in qf.tensors:
            raise SpecError("R-TENSOR-4", "%s: duplicate name %r" % (what, name))
        dtype, rank = struct.unpack("<II", c.take(8, what))
        dims = list(struct.unpack("<4Q", c.take(32, what)))
        offset, size, checksum, reserved = struct.unpack("<4Q", c.take(32, what))
        if dtype not in DTYPE_NAMES:
            raise SpecError("R-TENSOR-5", "%s.dtype %d unknown" % (what, dtype))
        if rank == 0 or rank > 4:
            raise SpecError("R-TENSOR-6", "%s.rank %d" % (what, rank))
        for k in range(rank):
            if dims[k] == 0 or dims[k] > MAX_DIM:
                raise SpecError("R-TENSOR-7", "%s.dims[%d] = %d" % (what, k, dims[k]))
        n = 1
        for k in range(rank):
            n *= dims[k]  # exact (Python integers): a product above 2^40 is R-TENSOR-8, not an overflow
        if n > MAX_ELEMENTS:
            raise SpecError("R-TENSOR-8", "%s has %d elements, above 2^40" % (what, n))
        for k in range(rank, 4):
            if dims[k] != 0:
                raise SpecError("R-TENSOR-9", "%s.dims[%d] = %d beyond rank %d" % (what, k, dims[k], rank))
        if reserved != 0:
            raise SpecError("R-TENSOR-9", "%s.reserved = %d" % (what, reserved))
        shape = tuple(dims[:rank])
        if dtype == 5:
            expect = q8row_layout(shape, a)["size"]
        else:
            expect = DTYPE_ELEM_SIZE[dtype] * n
        if size != expect:
            raise SpecError("R-TENSOR-10", "%s.size %d, dtype and dims give %d" % (what, size, expect))
        if offset % a:
            raise SpecError("R-TENSOR-11", "%s.offset %d not a multiple of %d" % (what, offset, a))
        end = _add(offset, size, what + ".offset + size")
        if offset < h["data_offset"]:
            raise SpecError("R-TENSOR-12", "%s.offset %d before data_offset %d" % (what, offset,
                                                                                  h["data_offset"]))
        if end > h["file_size"]:
            raise SpecError("R-TENSOR-12", "%s ends at %d, beyond file_size %d" % (what, end,
                                                                                  h["file_size"]))
        if prev_end is not None and offset < prev_end:
            raise SpecError("R-TENSOR-13", "%s.offset %d before the end %d of the previous tensor"
                            % (what, offset, prev_end))
        prev_end = end
        qf.tensors[name] = Tensor(qf, i, name, dtype, shape, offset, size, checksum, eoff)
    if c.pos != c.end:
        raise SpecError("R-TENSOR-1", "%d bytes left over after %d tensor entries (offset %d)"
                        % (c.end - c.pos, h["tensor_count"], c.pos))
    last_end = prev_end if prev_end is not None else h["data_offset"]
    if last_end != h["file_size"]:
        raise SpecError("R-TENSOR-14", "data ends at %d, file_size is %d" % (last_end, h["file_size"]))


# ------------------------------------------------------------------------------------------- API

def read(path):
    """Open and validate a .qmap file (spec section 7). Reads no tensor data."""
    qf = QmapFile(path)
    with open(path, "rb") as f:
        actual = os.fstat(f.fileno()).st_size
        hb = f.read(HEADER_SIZE)
        h = _check_header(hb, actual)
        f.seek(0)
        buf = f.read(h["data_offset"])
    _parse(qf, buf, actual)
    return qf


def read_bytes(data, path="<bytes>"):
    """Validate an in-memory image (tensor views are then taken from `data`)."""
    qf = QmapFile(path)
    _parse(qf, data, len(data))
    qf._mm = np.frombuffer(data, dtype=np.uint8)
    return qf


def verify(qf, full=False):
    """R-DATA-1 for every tensor; with full=True also R-DATA-2. Raises SpecError on the first failure
    in table order."""
    mm = qf._map()
    for t in qf.tensors.values():
        if xxhash.xxh3_64_intdigest(bytes(mm[t.offset:t.offset + t.size])) != t.checksum:
            raise SpecError("R-DATA-1", "tensor %r: checksum mismatch" % t.name)
    if not full:
        return
    pos = qf.header["data_offset"]
    for t in qf.tensors.values():
        # Gap before this tensor (from data_offset for the first one, else from the previous end).
        if np.any(mm[pos:t.offset]):
            raise SpecError("R-DATA-2", "non-zero byte in the gap before tensor %r" % t.name, "padding")
        pos = t.offset + t.size
        if t.dtype_id in (1, 2, 3):
            # every exponent bit set: NaN or infinite (BF16 is the top half of an F32)
            bits = t.raw.view("<u4") if t.dtype_id == 1 else t.raw.view("<u2")
            exp = {1: 0x7F800000, 2: 0x7C00, 3: 0x7F80}[t.dtype_id]
            bad = np.flatnonzero((bits & exp) == exp)
            if bad.size:
                raise SpecError("R-DATA-2", "tensor %r: element %d is NaN or infinite" % (t.name, bad[0]), "nonfinite")
        if t.dtype_id != 5:
            continue
        L = t.layout
        raw = t.raw
        qfull = raw[:L["rows"] * L["row_stride"]].reshape(L["rows"], L["row_stride"])
        if np.any(qfull[:, L["cols"]:]):
            raise SpecError("R-DATA-2", "tensor %r: non-zero Q8_ROW row padding" % t.name, "padding")
        if np.any(raw[L["rows"] * L["row_stride"]:L["scales_offset"]]):
            raise SpecError("R-DATA-2", "tensor %r: non-zero bytes between q and scales" % t.name,
                            "padding")
        if np.any(raw[L["scales_offset"] + 4 * L["rows"]:L["sums_offset"]]):
            raise SpecError("R-DATA-2", "tensor %r: non-zero bytes between scales and row_sums" % t.name,
                            "padding")
        q = t.q
        if np.any(q == -128):
            raise SpecError("R-DATA-2", "tensor %r: q value -128" % t.name, "data")
        s = t.scales
        if not np.all(np.isfinite(s)) or np.any(s < 0):
            raise SpecError("R-DATA-2", "tensor %r: scale negative, NaN or infinite" % t.name, "data")
        sums = q.astype(np.int64).sum(axis=1)
        if np.any(sums != t.row_sums.astype(np.int64)):
            raise SpecError("R-DATA-2", "tensor %r: row_sum differs from the sum of its row" % t.name,
                            "data")


def _short(v):
    if isinstance(v, np.ndarray):
        return "%s[%d]" % (v.dtype, len(v))
    if isinstance(v, list):
        return "[%d strings]" % len(v)
    r = repr(v)
    return r if len(r) <= 60 else r[:57] + "..."


def main(argv):
    args = [a for a in argv[1:] if not a.startswith("--")]
    if len(args) != 1:
        print("usage: spec_reader.py [--verify] [--full] FILE", file=sys.stderr)
        return 2
    try:
        qf = read(args[0])
        if "--verify" in argv or "--full" in argv:
            verify(qf, full="--full" in argv)
    except SpecError as e:
        print("REJECT %s: %s" % (e.rule, e.message))
        return 1
    h = qf.header
    print("%s: qmap %d.%d, alignment %d, %d bytes, %d metadata, %d tensors" % (
        args[0], h["major_version"], h["minor_version"], h["alignment"], h["file_size"],
        h["metadata_count"], h["tensor_count"]))
    def clip(s, n):
        return s if len(s) <= n else s[:n - 3] + "..."
    for k, v in qf.metadata.items():
        print("  meta %-32s %-14s %s" % (clip(k, 32), qf.metadata_types[k], _short(v)))
    for t in qf.tensors.values():
        print("  tensor %-30s %-6s %-20s offset %d size %d" % (clip(t.name, 30), t.dtype, t.shape, t.offset,
                                                              t.size))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
