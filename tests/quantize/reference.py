"""reference.py — what `qmap quantize` must write, computed with numpy from spec/FORMAT.md section 6.1 and the
quantize contract alone (no code shared with the C implementation or with tests/spec_writer.py).

    q, scales, sums = quantize_rows(w2d)                 # spec 6.1 quantization rule, binary32 throughout
    data = q8_bytes(w, shape, alignment)                 # the tensor's exact Q8_ROW bytes (layout + padding)
    half = f16_values(w)                                 # --f16: IEEE half, round to nearest even
    stats = error_stats(w, w_hat)                        # sums for rel_rms_error / max_abs_error (float64)
    n = outlier_rows(w2d)                                # rows whose max|w| > 8 x RMS

Every function takes float32 numpy arrays. `MUTATIONS` lists deliberately wrong variants of the rule; the test
suite's --mutate option installs one of them (set_mutation) to show that its checks catch the difference.
"""
import numpy as np

F32 = np.float32
F64 = np.float64

# Deliberately wrong variants, used only by test_quantize.py --mutate to prove the checks can fail.
MUTATIONS = {
    "reciprocal": "q = rint(w * (1/scale)) instead of rint(w / scale)",
    "half_away": "round half away from zero instead of half to even",
    "f64_division": "w / scale divided in binary64, then rounded to an integer",
    "scale_mul": "scale = amax * (1/127) instead of amax / 127",
    "no_clamp": "q not clamped to [-127, 127] (wraps through int8)",
    "f16_truncate": "--f16 rounds toward zero instead of to nearest even",
    "outlier_ge": "outlier row when max|w| >= 8 x RMS (instead of >)",
}
_mutation = None


def set_mutation(name):
    global _mutation
    if name is not None and name not in MUTATIONS:
        raise ValueError("unknown mutation %r (known: %s)" % (name, ", ".join(MUTATIONS)))
    _mutation = name


def align_up(x, a):
    return (x + a - 1) // a * a


def rows_cols(shape):
    """Spec 6.1: cols is the last dim, rows the product of the others (1 for rank 1)."""
    rows = 1
    for d in shape[:-1]:
        rows *= d
    return rows, shape[-1]


def q8_layout(shape, alignment):
    """Spec 6.1 layout: rows, cols, row_stride, scales_offset, sums_offset and the tensor size."""
    rows, cols = rows_cols(shape)
    stride = align_up(cols, 64)
    scales_offset = align_up(rows * stride, alignment)
    sums_offset = scales_offset + align_up(4 * rows, 64)
    return {"rows": rows, "cols": cols, "row_stride": stride, "scales_offset": scales_offset,
            "sums_offset": sums_offset, "size": sums_offset + 4 * rows}


def _round_half_even(x):
    if _mutation == "half_away":
        x = x.astype(F64)
        return np.where(x >= 0, np.floor(x + 0.5), np.ceil(x - 0.5))
    return np.rint(x)  # IEEE round to nearest integer, ties to even


def quantize_rows(w2d):
    """Spec 6.1 for a [rows, cols] float32 array -> (q int8 [rows, cols], scales f32 [rows], sums int64 [rows]).
    Every operation is a binary32 operation: numpy keeps float32 op float32 in float32, correctly rounded."""
    w = np.ascontiguousarray(w2d, dtype=F32)
    assert np.all(np.isfinite(w)), "the reference is only defined for finite weights"
    amax = np.max(np.abs(w), axis=1)                       # exact: abs and max do not round
    if _mutation == "scale_mul":
        scale = amax * (F32(1) / F32(127))
    else:
        scale = amax / F32(127)                            # step 2: one binary32 division
    zero = scale == 0                                      # amax == 0, or amax/127 underflowed to 0
    divisor = np.where(zero, F32(1), scale).astype(F32)
    if _mutation == "reciprocal":
        x = w * (F32(1) / divisor)[:, None]
    elif _mutation == "f64_division":
        x = w.astype(F64) / divisor.astype(F64)[:, None]
    else:
        x = w / divisor[:, None]                           # step 3: binary32 division per element
    r = _round_half_even(x)
    if _mutation == "no_clamp":
        q = r.astype(np.int64).astype(np.int8)
    else:
        q = np.clip(r, -127, 127).astype(np.int8)
    q[zero] = 0
    scale = np.where(zero, F32(0), scale).astype(F32)      # the stored scale of a zero row is +0
    sums = q.astype(np.int64).sum(axis=1)                  # step 4: exact integer sums
    return q, scale, sums


def pack_q8(q, scales, sums, shape, alignment):
    """The Q8_ROW data bytes: q rows at row_stride, scales at scales_offset, sums at sums_offset, zeros elsewhere."""
    L = q8_layout(shape, alignment)
    rows, cols, stride = L["rows"], L["cols"], L["row_stride"]
    buf = np.zeros(L["size"], dtype=np.uint8)
    qpad = np.zeros((rows, stride), dtype=np.int8)
    qpad[:, :cols] = q
    buf[:rows * stride] = qpad.reshape(-1).view(np.uint8)
    buf[L["scales_offset"]:L["scales_offset"] + 4 * rows] = np.asarray(scales, "<f4").view(np.uint8)
    buf[L["sums_offset"]:L["sums_offset"] + 4 * rows] = np.asarray(sums, "<i4").view(np.uint8)
    return buf.tobytes()


def q8_bytes(w, shape, alignment):
    """Quantize float32 values w (any shape with shape's element count) and lay them out as Q8_ROW."""
    rows, cols = rows_cols(shape)
    q, scales, sums = quantize_rows(np.asarray(w, dtype=F32).reshape(rows, cols))
    return pack_q8(q, scales, sums, shape, alignment)


def dequantize(q, scales):
    """Element (r, j) = q[r][j] * scale[r], one binary32 multiplication (spec 6.1)."""
    return q.astype(F32) * np.asarray(scales, dtype=F32)[:, None]


def f16_values(w):
    """--f16: IEEE binary16, round to nearest even (numpy's float32 -> float16 conversion does exactly that)."""
    w = np.asarray(w, dtype=F32)
    h = w.astype(np.float16)
    if _mutation == "f16_truncate":
        wider = np.abs(h.astype(F64)) > np.abs(w.astype(F64))
        h = np.where(wider, np.nextafter(h, np.float16(0)), h).astype(np.float16)
    return h


def f16_overflows(w):
    """True where --f16 must refuse: the value rounds beyond the F16 range (|w| >= 65520)."""
    return np.abs(np.asarray(w, dtype=F64)) >= 65520.0


def error_stats(w, w_hat):
    """float64 sums for the report: sum((w - w_hat)^2), sum(w^2), max|w - w_hat|. The differences of two
    binary32 numbers are exact in binary64, so these are the exact sums up to the summation order."""
    d = np.asarray(w, dtype=F64).reshape(-1) - np.asarray(w_hat, dtype=F64).reshape(-1)
    w64 = np.asarray(w, dtype=F64).reshape(-1)
    return {"sq_err": float(np.dot(d, d)), "sq": float(np.dot(w64, w64)),
            "max_abs": float(np.max(np.abs(d))) if d.size else 0.0}


def rel_rms(sq_err, sq):
    return 0.0 if sq == 0 else float(np.sqrt(sq_err) / np.sqrt(sq))


def outlier_ratio(w2d):
    """Per row: max|w| / RMS(w) with RMS = sqrt(mean(w^2)), in float64 (0 for a zero row)."""
    w = np.asarray(w2d, dtype=F64)
    mx = np.max(np.abs(w), axis=1)
    rms = np.sqrt(np.mean(w * w, axis=1))
    return np.where(mx > 0, mx / np.where(rms > 0, rms, 1.0), 0.0)


def outlier_rows(w2d):
    """Rows whose max|w| > 8 x RMS of the row; a zero row is not an outlier."""
    w = np.asarray(w2d, dtype=F64)
    mx = np.max(np.abs(w), axis=1)
    rms = np.sqrt(np.mean(w * w, axis=1))
    if _mutation == "outlier_ge":
        return int(np.count_nonzero((mx >= 8 * rms) & (mx > 0)))
    return int(np.count_nonzero((mx > 8 * rms) & (mx > 0)))
