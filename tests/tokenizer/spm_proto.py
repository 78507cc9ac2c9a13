"""spm_proto.py — a minimal protobuf wire-format reader/writer for SentencePiece's ModelProto, so tests can
edit a trained tokenizer.model (mark a piece UNUSED, change a normalizer flag) without python3-protobuf.

Field numbers are sentencepiece_model.proto's: ModelProto.pieces = 1 (SentencePiece: piece 1, score 2,
type 3), trainer_spec = 2, normalizer_spec = 3; a message is kept as a list of (field, wire type, value),
value an int (varint), bytes (length-delimited) or 4/8 raw bytes (fixed32/fixed64), so that writing it back
gives the same bytes for fields that were not touched.
"""
import struct

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6


def varint(b, i):
    r = s = 0
    while True:
        c = b[i]
        i += 1
        r |= (c & 0x7F) << s
        s += 7
        if c < 0x80:
            return r, i


def enc_varint(v):
    if v < 0:
        v += 1 << 64
    out = bytearray()
    while True:
        c = v & 0x7F
        v >>= 7
        if v:
            out.append(c | 0x80)
        else:
            out.append(c)
            return bytes(out)


def parse(b):
    """bytes -> [(field, wire, value)]"""
    i, out = 0, []
    while i < len(b):
        k, i = varint(b, i)
        f, w = k >> 3, k & 7
        if w == 0:
            v, i = varint(b, i)
        elif w == 2:
            n, i = varint(b, i)
            v = bytes(b[i:i + n])
            i += n
        elif w == 5:
            v = bytes(b[i:i + 4])
            i += 4
        elif w == 1:
            v = bytes(b[i:i + 8])
            i += 8
        else:
            raise ValueError("wire type %d" % w)
        out.append((f, w, v))
    return out


def serialize(fields):
    out = bytearray()
    for f, w, v in fields:
        out += enc_varint(f << 3 | w)
        if w == 0:
            out += enc_varint(v)
        elif w == 2:
            out += enc_varint(len(v)) + v
        else:
            out += v
    return bytes(out)


def piece(fields):
    """A SentencePiece message's fields -> (piece str, score float, type int)."""
    p, s, t = "", 0.0, NORMAL
    for f, w, v in fields:
        if f == 1:
            p = v.decode("utf-8")
        elif f == 2:
            s = struct.unpack("<f", v)[0]
        elif f == 3:
            t = v
    return p, s, t


def set_field(fields, field, wire, value):
    """Replace every occurrence of `field` by one (field, wire, value) at the first one's place (or the end)."""
    idx = [i for i, x in enumerate(fields) if x[0] == field]
    rest = [x for x in fields if x[0] != field]
    at = idx[0] if idx else len(fields)
    rest.insert(at if at <= len(rest) else len(rest), (field, wire, value))
    return rest


def edit_sub(model, field, fn):
    """Apply fn to the fields of sub-message `field` (2 trainer_spec, 3 normalizer_spec) of a ModelProto."""
    top = parse(model)
    out = []
    for f, w, v in top:
        if f == field and w == 2:
            v = serialize(fn(parse(v)))
        out.append((f, w, v))
    return serialize(out)


def edit_pieces(model, fn):
    """fn(index, (piece, score, type)) -> new (piece, score, type) or the same tuple."""
    top = parse(model)
    out, i = [], 0
    for f, w, v in top:
        if f == 1 and w == 2:
            sub = parse(v)
            new = fn(i, piece(sub))
            sub = set_field(sub, 1, 2, new[0].encode("utf-8"))
            sub = set_field(sub, 2, 5, struct.pack("<f", new[1]))
            sub = set_field(sub, 3, 0, new[2])
            v = serialize(sub)
            i += 1
        out.append((f, w, v))
    return serialize(out)


def pieces(model):
    return [piece(parse(v)) for f, w, v in parse(model) if f == 1 and w == 2]
