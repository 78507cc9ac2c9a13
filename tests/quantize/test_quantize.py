#!/usr/bin/python3
"""test_quantize.py — tests of `qmap quantize (--q8 | --f16)` against spec/FORMAT.md 6.1 and the quantize contract.

    /usr/bin/python3 tests/quantize/test_quantize.py --qmap build/qmap --workdir build/tests/quantize [-k FILTER]

Input containers are written with tests/spec_writer.py, outputs read back with tests/spec_reader.py, and every
expected byte comes from tests/quantize/reference.py (numpy, written from the spec alone). Groups (-k FILTER runs
the groups whose name contains FILTER):

  q8/...        Q8_ROW bytes equal the reference bit for bit (q, scales, row sums, row padding, gaps, size) for
                random matrices and edge cases: zero rows, outliers, +-FLT_MAX, subnormal rows (amax/127
                underflowing to 0, and clamping at a subnormal scale), exact rounding ties, rows where dividing
                differs from multiplying by the reciprocal or from dividing in binary64, odd column counts, one-row,
                rank-3/4 tensors, F16 inputs, alignments 64 and 65536; plus the round-trip bound
                |w - q*scale| <= scale/2 (+ f32 slack, see roundtrip_tolerance).
  f16/...       --f16 output bits equal numpy's astype(float16) (round to nearest even), F16 range edges.
  threads/...   --threads 1, 2, 3 and the default give byte-identical files, and so do two runs.
  select/...    which tensors are quantized: rank >= 2, name ending in ".weight", not pos_embd.weight, no --keep
                match (fnmatch globs on the whole name); every other tensor copied bit for bit.
  meta/...      metadata carried over in order (every type, raw value bytes), general.file_type, quantize.*.
  report/...    --json prints the --report object; --quiet prints nothing. (Every case above also checks its
                --report JSON: schema, actions, byte sizes, error statistics, outlier rows.)
  refuse/...    refusals: exit 1, one stderr line naming the file and the tensor, nothing left behind.
  panels/...    decoder LM down projections in column panels (spec/ARCHITECTURES.md §6): the width --panel-cols
                auto (the default) picks for each ffn and scheme (llama, gpt2, gpt_neo), an explicit width, 0 (as
                stored), another architecture (mlp) left as stored; shapes, bytes (the reference applied to the
                panels) and the report's panels field; ffn < dim cut too.
  usage/...     usage errors exit 2.
  verify/...    every output passes spec_reader's full verification and `qmap verify --full`.
  e2e/...       tests/models gpt2 and llama: torch.save -> qmap convert -> quantize --q8 / --f16, and
                convert --dtype f16 -> quantize --q8.

--mutate NAME installs a deliberately wrong reference (reference.MUTATIONS) to show the checks catch it: such
a run must report failures.

Each check prints one line ("ok   group: what" or "FAIL group: what: details"); the last line counts them;
exit status 1 on any failure.
"""
import argparse
import fnmatch
import json
import math
import os
import re
import subprocess
import sys
import time

import numpy as np
import xxhash

sys.dont_write_bytecode = True     # keep tests/ free of __pycache__
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))

import reference as ref    # noqa: E402  (tests/quantize/reference.py)
import checks              # noqa: E402  (tests/checks.py)
import spec_reader         # noqa: E402
import spec_writer as sw   # noqa: E402

F32 = np.float32
F64 = np.float64
FLT_MAX = float(np.finfo(F32).max)
TIMEOUT = 120
REL_TOL = 1e-6      # report statistics: see check_report for why this is not 0
SCHEMES = {"q8": ("--q8", "q8_row", "Q8_ROW"), "f16": ("--f16", "f16", "F16")}

# ------------------------------------------------------------------------------------------- harness


class Checks(checks.Checks):
    def want(self, group):
        """A case runs when FILTER is in its group name or in "verify/<group>" (its verification checks)."""
        return super().want(group, "verify/" + group)


fresh_dir = checks.fresh_dir
short = checks.short
xxh3_file = checks.xxh3_file


def f32_bits(x):
    return int(np.asarray(x, dtype="<f4").view("<u4"))


# ------------------------------------------------------------------------------------------- input tensors


class In:
    """One tensor of an input container: name, dtype name, shape, data bytes, and (F32/F16) its float32 values."""

    def __init__(self, name, dtype, shape, data, values=None):
        self.name, self.dtype, self.shape, self.data, self.values = name, dtype, tuple(shape), data, values

    @property
    def rank(self):
        return len(self.shape)


def t_f32(name, arr):
    a = np.ascontiguousarray(arr, dtype="<f4")
    return In(name, "F32", a.shape, a.tobytes(), a.astype(F32))


def t_f16(name, arr):
    a = np.ascontiguousarray(arr, dtype="<f2")
    return In(name, "F16", a.shape, a.tobytes(), a.astype(F32))     # widening f16 -> f32 is exact


def t_raw(name, dtype, shape, data):
    return In(name, dtype, shape, data)


def t_q8(name, arr, alignment):
    a = np.asarray(arr, dtype=F32)
    return In(name, "Q8_ROW", a.shape, ref.q8_bytes(a, a.shape, alignment))


def base_meta():
    return [("general.architecture", "STRING", "test"), ("general.file_type", "STRING", "f32")]


def write_container(path, tensors, meta=None, alignment=4096):
    """meta: list of (key, type name, value) for spec_writer.meta_entry."""
    meta = base_meta() if meta is None else meta
    entries = [sw.meta_entry(k, t, v) for k, t, v in meta]
    defs = [sw.TensorDef(t.name, t.dtype, t.shape, t.data) for t in tensors]
    sw.write(path, sw.build(entries, defs, alignment))
    return path


def selected(t, keeps):
    """The contract's selection rule."""
    return (t.rank >= 2 and t.name.endswith(".weight") and t.name != "pos_embd.weight"
            and not any(fnmatch.fnmatchcase(t.name, k) for k in keeps))


def action_of(t, keeps):
    if selected(t, keeps):
        return "quantized"
    base_rule = t.rank >= 2 and t.name.endswith(".weight") and t.name != "pos_embd.weight"
    return "kept" if base_rule else "copied"


# ------------------------------------------------------------------------------------------- value generators


def log_uniform(rng, shape, lo, hi):
    """Values of random sign and magnitude spread evenly in log scale over [lo, hi]."""
    mag = np.exp(rng.uniform(np.log(lo), np.log(hi), size=shape))
    return (mag * rng.choice([-1.0, 1.0], size=shape)).astype(F32)


def rows_of_mixed_scale(rng, rows, cols):
    """Gaussian rows, each with its own scale between 1e-4 and 1e4."""
    return (rng.standard_normal((rows, cols)) * np.exp(rng.uniform(-9, 9, size=(rows, 1)))).astype(F32)


def step_ulps(x, steps):
    """x moved by `steps` units in the last place (away from zero for positive steps); x must be nonzero."""
    bits = np.asarray(x, dtype=F32).view(np.int32).astype(np.int64) + steps
    return bits.astype(np.int32).view(F32)


def tie_row(s, negative_amax=False):
    """A row whose scale is exactly s (127*s representable), followed by every exact tie (k + 0.5) * s."""
    amax = F32(127) * F32(s)
    assert F32(amax) / F32(127) == F32(s)
    ks = np.arange(-127, 127, dtype=F64) + 0.5
    ties = (ks * F64(s)).astype(F32)
    assert np.all(ties.astype(F64) == ks * F64(s)), "tie not exactly representable"
    return np.concatenate([[-amax if negative_amax else amax], ties]).astype(F32)


def sensitive_row(rng, cols, other):
    """A row (amax first) of values near ties where the spec rule rint(w / scale) differs from `other`:
    "reciprocal" (w * (1/scale)) or "f64" (the division done in binary64)."""
    while True:
        amax = F32(rng.uniform(0.5, 2.0) * 2.0 ** int(rng.integers(-30, 30)))
        s = amax / F32(127)
        n = 20000
        ks = rng.integers(-126, 126, size=n).astype(F64) + 0.5
        w = step_ulps((ks * F64(s)).astype(F32), rng.integers(-3, 4, size=n))
        right = np.rint(w / s)
        if other == "reciprocal":
            wrong = np.rint(w * (F32(1) / s))
        else:
            wrong = np.rint(w.astype(F64) / F64(s))
        picks = w[right != wrong]
        if len(picks) >= cols - 1:
            return np.concatenate([[amax], picks[:cols - 1]]).astype(F32)


def scale_sensitive_rows(rng, rows, cols):
    """Rows whose amax gives amax / 127 != amax * (1/127) in binary32."""
    cands = (rng.uniform(1, 2, size=20000) * 2.0 ** rng.integers(-40, 40, size=20000)).astype(F32)
    amaxes = cands[cands / F32(127) != cands * (F32(1) / F32(127))][:rows]
    assert len(amaxes) == rows
    out = rng.uniform(-1, 1, size=(rows, cols)).astype(F32) * amaxes[:, None]
    out[:, 0] = amaxes * np.where(np.arange(rows) % 2, -1, 1).astype(F32)
    return out.astype(F32)


def subnormal_rows():
    """Rows around the subnormal corner of step 2: amax/127 underflowing to 0 (amax <= 63 * 2^-149), the
    smallest scales, and rows where a subnormal scale rounds down so far that w/scale exceeds 127 (clamped)."""
    tiny = F64(2.0 ** -149)
    rows = []
    for amax_units, others in [(63, [1, -62, 0, 31, -63]), (64, [1, 2, -64, 63, 32]), (127, [1, -126, 64, 3, -5]),
                               (190, [-190, 100, 127, 128, -1]), (1000, [999, -500, 1, 0, 7]),
                               (1, [0, -1, 1, 0, 0])]:
        rows.append(np.array([amax_units] + others, dtype=F64) * tiny)
    rows.append(np.array([2.0 ** -126, -2.0 ** -127, 2.0 ** -130, 2.0 ** -140, 2.0 ** -149, 0]))  # min normal
    rows.append(np.array([3.3e-39, -1.1e-39, 5e-40, 2e-45, 0, 1e-38]))
    return np.array(rows).astype(F32)


def outlier_matrix(rng, rows, cols):
    """Gaussian rows; every third row gets one large spike (clear outlier), every fifth a moderate one (not)."""
    w = rng.standard_normal((rows, cols)).astype(F32)
    for r in range(rows):
        j = int(rng.integers(0, cols))
        if r % 3 == 0:
            w[r, j] = F32((-1) ** r * rng.uniform(30, 1000))
        elif r % 5 == 0:
            w[r, j] = F32(rng.uniform(4.5, 5))
    ratio = ref.outlier_ratio(w)
    assert np.all(np.abs(ratio - 8) > 1e-3), "a random row sits on the outlier threshold"
    return w


def outlier_boundary_matrix():
    """Rows exactly on the threshold max|w| = 8 x RMS (not outliers) and just above it; all exact in any
    precision: [64, 1 x 64] has RMS sqrt(4160 / 65) = 8; [3, 0 x 63] of the 64-column variant has RMS 3/8."""
    rows = []
    for spike in (64.0, -64.0, 65.0, -65.0):
        rows.append([spike] + [1.0] * 64)
    rows.append([0.0] * 65)
    rows.append([0.0] * 64 + [5.0])      # a single non-zero value among 65: max = sqrt(65) x RMS > 8 x RMS
    return np.array(rows, dtype=F32)


# ------------------------------------------------------------------------------------------- comparing outputs


def roundtrip_tolerance(w, scale):
    """Per-element bound on |w - q*scale| for spec 6.1 (float64, same shape as w).

    q = rint(fl(w/s)): fl() of the division is off by at most 2^-24 * |w/s| <= 2^-24 * 127.5, and the spec's
    binary32 product fl(q*s) by at most 2^-24 * 127 * s (or 2^-150 when the product is subnormal); together
    less than 2^-16 * s + 2^-149 on top of the s/2 of rounding to an integer. Clamping adds
    max(0, |w| - 127.5 * s): zero for a normal scale (amax <= 127 * s * (1 + 2^-24)), but a subnormal scale
    can be far below amax/127 (or 0 when amax/127 underflows), and then the clamped elements are further
    away. (A row with amax = FLT_MAX is the one case where the binary32 product 127 * s overflows to inf:
    fl(FLT_MAX / 127) rounds up. check_q8_roundtrip therefore forms q*s exactly in binary64.)"""
    s = np.asarray(scale, dtype=F64)[:, None]
    a = np.abs(np.asarray(w, dtype=F64))
    return s * (0.5 + 2.0 ** -16) + 2.0 ** -149 + np.maximum(0.0, a - 127.5 * s)


def describe_q8_diff(got, want, w2d, shape, alignment):
    """Where two Q8_ROW byte strings differ, in the spec's terms."""
    L = ref.q8_layout(shape, alignment)
    if len(got) != len(want):
        return "size %d, spec 6.1 gives %d" % (len(got), len(want))
    rows, cols, stride = L["rows"], L["cols"], L["row_stride"]
    so, su = L["scales_offset"], L["sums_offset"]
    g = np.frombuffer(got, dtype=np.uint8)
    e = np.frombuffer(want, dtype=np.uint8)
    parts = []
    gq = g[:rows * stride].view(np.int8).reshape(rows, stride)
    eq = e[:rows * stride].view(np.int8).reshape(rows, stride)
    gs, es = g[so:so + 4 * rows].view("<f4"), e[so:so + 4 * rows].view("<f4")
    bad = np.argwhere(gq[:, :cols] != eq[:, :cols])
    if len(bad):
        r, j = (int(x) for x in bad[0])
        wv = F32(w2d[r, j])
        parts.append("q differs in %d of %d elements, first [%d,%d]: got %d, want %d (w=%r, scale=%r, "
                     "w/scale in f32=%r)" % (len(bad), rows * cols, r, j, gq[r, j], eq[r, j], float(wv),
                                             float(es[r]), float(wv / es[r]) if es[r] else 0.0))
    if np.any(gq[:, cols:]):
        parts.append("non-zero row padding in %d rows" % int(np.count_nonzero(np.any(gq[:, cols:], axis=1))))
    if np.any(g[rows * stride:so]):
        parts.append("non-zero bytes between q and scales")
    sbad = np.nonzero(gs.view("<u4") != es.view("<u4"))[0]
    if len(sbad):
        r = int(sbad[0])
        parts.append("scale differs in %d of %d rows, first row %d: got %r (0x%08x), want %r (0x%08x), amax %r"
                     % (len(sbad), rows, r, float(gs[r]), f32_bits(gs[r]), float(es[r]), f32_bits(es[r]),
                        float(np.max(np.abs(w2d[r])))))
    if np.any(g[so + 4 * rows:su]):
        parts.append("non-zero bytes between scales and row sums")
    gsum, esum = g[su:su + 4 * rows].view("<i4"), e[su:su + 4 * rows].view("<i4")
    mbad = np.nonzero(gsum != esum)[0]
    if len(mbad):
        r = int(mbad[0])
        parts.append("row_sum differs in %d rows, first row %d: got %d, want %d"
                     % (len(mbad), r, gsum[r], esum[r]))
    return "; ".join(parts) or "bytes differ"


def describe_f16_diff(got, want, w):
    g = np.frombuffer(got, dtype="<u2")
    e = np.frombuffer(want, dtype="<u2")
    if len(g) != len(e):
        return "size %d, want %d" % (len(got), len(want))
    bad = np.nonzero(g != e)[0]
    i = int(bad[0])
    return ("%d of %d halves differ, first element %d: w=%r, got 0x%04x (%r), want 0x%04x (%r)"
            % (len(bad), len(g), i, float(w.reshape(-1)[i]), g[i], float(g[i:i + 1].view("<f2")[0]), e[i],
               float(e[i:i + 1].view("<f2")[0])))


def expected_bytes(t, scheme, alignment):
    """The data bytes a selected tensor must have in the output."""
    if scheme == "q8":
        return ref.q8_bytes(t.values, t.shape, alignment)
    return ref.f16_values(t.values).astype("<f2").tobytes()


def check_output(ck, group, tensors, out_path, scheme, keeps=(), alignment=4096, roundtrip=True):
    """Tensor names, order, dtypes, shapes and exact bytes of an output against the inputs and the reference.
    Returns the opened container (or None)."""
    try:
        qf = spec_reader.read(out_path)
    except (spec_reader.SpecError, OSError) as e:
        ck.check(group, "output opens with spec_reader", False, str(e))
        return None
    ck.check(group, "tensor names and order unchanged", list(qf.tensors) == [t.name for t in tensors],
             "got %s" % list(qf.tensors))
    ck.check(group, "alignment unchanged (%d)" % alignment, qf.header["alignment"] == alignment,
             "got %d" % qf.header["alignment"])
    out_dtype = SCHEMES[scheme][2]
    for t in tensors:
        o = qf.tensors.get(t.name)
        if o is None:
            continue
        got = bytes(o.raw)
        if selected(t, keeps):
            what = "%s %s %s -> %s bit for bit" % (t.name, list(t.shape), t.dtype, out_dtype)
            want = expected_bytes(t, scheme, alignment)
            if not ck.check(group, what + " (dtype, shape)", o.dtype == out_dtype and o.shape == t.shape,
                            "got %s %s" % (o.dtype, list(o.shape))):
                continue
            if got == want:
                ck.check(group, what, True)
            elif scheme == "q8":
                rows, cols = ref.rows_cols(t.shape)
                ck.check(group, what, False, describe_q8_diff(got, want, t.values.reshape(rows, cols), t.shape,
                                                              alignment))
            else:
                ck.check(group, what, False, describe_f16_diff(got, want, t.values))
            if roundtrip and scheme == "q8":
                check_q8_roundtrip(ck, group, t.name, t.values, o)
        else:
            ck.check(group, "%s %s %s copied unchanged (dtype, shape, bytes, checksum)"
                     % (t.name, list(t.shape), t.dtype),
                     o.dtype == t.dtype and o.shape == t.shape and got == t.data
                     and o.checksum == xxhash.xxh3_64_intdigest(t.data),
                     "got %s %s, %d bytes, bytes equal: %s" % (o.dtype, list(o.shape), len(got), got == t.data))
    return qf


def check_q8_roundtrip(ck, group, name, values, o):
    """|w - q*scale| <= scale/2 per element, up to the slack of roundtrip_tolerance, using the output's own
    q and scales (independent of whether the bytes equal the reference)."""
    rows, cols = ref.rows_cols(o.shape)
    w = np.asarray(values, dtype=F32).reshape(rows, cols)
    scales = np.array(o.scales)
    w_hat = np.array(o.q).astype(F64) * scales.astype(F64)[:, None]     # exact: 8 x 24 significant bits
    err = np.abs(w.astype(F64) - w_hat)
    tol = roundtrip_tolerance(w, scales)
    bad = np.argwhere(~(err <= tol))
    detail = ""
    if len(bad):
        r, j = (int(x) for x in bad[0])
        detail = ("%d elements, first [%d,%d]: w=%r, q=%d, scale=%r, |w - q*scale|=%r > %r"
                  % (len(bad), r, j, float(w[r, j]), int(o.q[r, j]), float(scales[r]), err[r, j], tol[r, j]))
    ck.check(group, "%s round trip |w - q*scale| <= scale/2 (+2^-16 scale + 2^-149)" % name, not len(bad), detail)


# ------------------------------------------------------------------------------------------- the report


def default_threads():
    """What "--threads: default all" means: OMP_NUM_THREADS when set, else the CPUs this process may run on."""
    env = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    return len(os.sched_getaffinity(0))


def _reject_constant(name):
    raise ValueError("%s is not JSON" % name)


def load_strict_json(text):
    """json.loads without Python's NaN / Infinity / -Infinity extensions."""
    return json.loads(text, parse_constant=_reject_constant)


def _is_num(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _close(got, want):
    return _is_num(got) and math.isfinite(got) and abs(got - want) <= REL_TOL * abs(want)


def _paths_equal(got, want):
    if not isinstance(got, str):
        return False
    return got == want or os.path.abspath(got) == os.path.abspath(want)


def check_report(ck, group, rep, tensors, in_path, out_path, scheme, keeps=(), threads=None, no_stats=()):
    """The --report JSON against the inputs and the output container.

    rel_rms_error and max_abs_error are compared with relative tolerance 1e-6, not exactly: the contract fixes
    the formula (w_hat = q*scale in f32, sums in double) but not the summation order (threads add their partial
    sums in some order, ~1e-16 relative per addition), nor whether w - w_hat is formed in binary32 (each term
    then off by up to 2^-24 = 6e-8 relative) nor how many digits the JSON prints. 1e-6 covers those and still
    catches a wrong formula (missing sqrt, wrong denominator, float32 accumulation on a large tensor).
    outlier_rows, rows and the byte counts are integers and compared exactly. Tensors in `no_stats` (a row with
    amax = FLT_MAX, whose binary32 w^ = 127 * scale overflows to inf) get no error statistics comparison, and
    then neither does the total."""
    top = {"input": str, "output": str, "scheme": str, "threads": int, "seconds": (int, float), "tensors": list,
           "total": dict}
    missing = [k for k in top if k not in rep]
    wrong = [k for k in top if k in rep and not (isinstance(rep[k], top[k]) and not isinstance(rep[k], bool))]
    if not ck.check(group, "report schema (top-level keys and types)", not missing and not wrong,
                    "missing %s, wrong type %s" % (missing, wrong)):
        return
    ck.check(group, "report input/output/scheme", _paths_equal(rep["input"], in_path)
             and _paths_equal(rep["output"], out_path) and rep["scheme"] == SCHEMES[scheme][1],
             "got %r %r %r" % (rep["input"], rep["output"], rep["scheme"]))
    want_threads = threads or default_threads()
    ck.check(group, "report threads = %d (%s)" % (want_threads, "--threads" if threads else "default: all cores"),
             rep["threads"] == want_threads, "got %r" % rep["threads"])
    ck.check(group, "report seconds >= 0", rep["seconds"] >= 0, "got %r" % rep["seconds"])
    entries = rep["tensors"]
    names = [e.get("name") if isinstance(e, dict) else e for e in entries]
    if not ck.check(group, "report lists every tensor in order", names == [t.name for t in tensors],
                    "got %s" % names):
        return
    qf = spec_reader.read(out_path)
    in_qf = spec_reader.read(in_path)
    keys = ["name", "action", "dtype_in", "dtype_out", "shape", "bytes_in", "bytes_out", "rel_rms_error",
            "max_abs_error", "outlier_rows", "rows", "panels"]
    bad = {k: [] for k in ("schema", "action", "dtypes", "shape", "bytes", "nulls", "rows_null", "rel_rms",
                           "max_abs", "outliers", "rows", "panels")}
    total_sq_err = total_sq = 0.0
    n_quantized = 0
    for t, e in zip(tensors, entries):
        o = qf.tensors[t.name]
        if sorted(e) != sorted(keys):
            bad["schema"].append("%s: keys %s" % (t.name, sorted(e)))
            continue
        act = action_of(t, keeps)
        if e["action"] != act:
            bad["action"].append("%s: %r, want %r" % (t.name, e["action"], act))
        if (str(e["dtype_in"]).upper(), str(e["dtype_out"]).upper()) != (t.dtype, o.dtype):
            bad["dtypes"].append("%s: %r -> %r, want %s -> %s" % (t.name, e["dtype_in"], e["dtype_out"], t.dtype,
                                                                   o.dtype))
        if e["shape"] != list(t.shape):
            bad["shape"].append("%s: %r" % (t.name, e["shape"]))
        if (e["bytes_in"], e["bytes_out"]) != (in_qf.tensors[t.name].size, o.size):
            bad["bytes"].append("%s: %r/%r, want %d/%d" % (t.name, e["bytes_in"], e["bytes_out"],
                                                            in_qf.tensors[t.name].size, o.size))
        if act != "quantized":
            if any(e[k] is not None for k in ("rel_rms_error", "max_abs_error", "outlier_rows")):
                bad["nulls"].append("%s: %r %r %r" % (t.name, e["rel_rms_error"], e["max_abs_error"],
                                                      e["outlier_rows"]))
            if e["rows"] is not None or e["panels"] is not None:
                bad["rows_null"].append("%s: rows %r, panels %r" % (t.name, e["rows"], e["panels"]))
            continue
        if e["panels"] != 1 or isinstance(e["panels"], bool):   # these cases hold no long decoder-LM down projection
            bad["panels"].append("%s: %r" % (t.name, e["panels"]))
        n_quantized += 1
        rows, cols = ref.rows_cols(t.shape)
        w = t.values.reshape(rows, cols)
        with np.errstate(over="ignore"):        # 127 * scale is inf in binary32 for amax = FLT_MAX
            w_hat = o.dequantize() if o.dtype == "Q8_ROW" else np.array(o.array).astype(F32)
        st = ref.error_stats(w, w_hat)
        total_sq_err += st["sq_err"]
        total_sq += st["sq"]
        want_rel = ref.rel_rms(st["sq_err"], st["sq"])
        if t.name not in no_stats and not _close(e["rel_rms_error"], want_rel):
            bad["rel_rms"].append("%s: %r, want %r" % (t.name, e["rel_rms_error"], want_rel))
        if t.name not in no_stats and not _close(e["max_abs_error"], st["max_abs"]):
            bad["max_abs"].append("%s: %r, want %r" % (t.name, e["max_abs_error"], st["max_abs"]))
        want_out = ref.outlier_rows(w) if scheme == "q8" else None
        if e["outlier_rows"] != want_out or isinstance(e["outlier_rows"], bool):
            bad["outliers"].append("%s: %r, want %r" % (t.name, e["outlier_rows"], want_out))
        if e["rows"] != rows or isinstance(e["rows"], bool):
            bad["rows"].append("%s: %r, want %d" % (t.name, e["rows"], rows))
    labels = {"schema": "tensor entries have exactly the contract's keys",
              "action": "actions quantized/kept/copied",
              "dtypes": "dtype_in/dtype_out",
              "shape": "shapes",
              "bytes": "bytes_in/bytes_out equal the containers' tensor sizes",
              "nulls": "copied/kept: rel_rms_error, max_abs_error, outlier_rows null",
              "rows_null": "copied/kept: rows and panels null",
              "panels": "quantized: panels 1 (column panels only for a long decoder-LM down projection)",
              "rel_rms": "rel_rms_error = sqrt(sum (w-w^)^2) / sqrt(sum w^2) (rel. tol. 1e-6)",
              "max_abs": "max_abs_error = max |w-w^| (rel. tol. 1e-6)",
              "outliers": "outlier_rows (max|w| > 8 RMS; null for f16)",
              "rows": "rows = product of the leading dims"}
    for k, lst in bad.items():
        ck.check(group, "report " + labels[k], not lst, "; ".join(lst[:4]) + (" ..." if len(lst) > 4 else ""))
    tot = rep["total"]
    want_tot = {"bytes_in": sum(in_qf.tensors[t.name].size for t in tensors),
                "bytes_out": sum(qf.tensors[t.name].size for t in tensors),
                "tensors_quantized": n_quantized, "tensors_copied": len(tensors) - n_quantized}
    got_tot = {k: tot.get(k) for k in want_tot}
    ck.check(group, "report total byte and tensor counts", got_tot == want_tot, "got %r, want %r" % (got_tot,
                                                                                                  want_tot))
    if n_quantized and not no_stats:
        want_rel = ref.rel_rms(total_sq_err, total_sq)
        ck.check(group, "report total.rel_rms_error over all quantized tensors",
                 _close(tot.get("rel_rms_error"), want_rel), "got %r, want %r" % (tot.get("rel_rms_error"), want_rel))


# ------------------------------------------------------------------------------------------- the suite


class Suite:
    def __init__(self, args):
        self.qmap = os.path.abspath(args.qmap)
        self.work = os.path.abspath(args.workdir)
        self.ck = Checks(args.k)
        self.outputs = []    # (group, path) of every output a case produced, for verify/

    def run(self, *args, timeout=TIMEOUT):
        cmd = [self.qmap] + [str(a) for a in args]
        try:
            p = subprocess.run(cmd, capture_output=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return -999, "", "timed out after %ds: %s" % (timeout, " ".join(cmd))
        return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")

    def quantize(self, group, scheme, inp, out, keeps=(), threads=None, report=True, extra=()):
        """Run quantize; check exit 0. Returns None when it failed, else the parsed report ({} when there is
        none or it is not a JSON object)."""
        args = ["quantize", SCHEMES[scheme][0], inp, "-o", out]
        for k in keeps:
            args += ["--keep", k]
        if threads is not None:
            args += ["--threads", threads]
        rpath = out + ".report.json"
        if report:
            args += ["--report", rpath]
        args += list(extra)
        rc, so, se = self.run(*args)
        what = "quantize %s%s%s exits 0" % (SCHEMES[scheme][0], "".join(" --keep " + k for k in keeps),
                                           " --threads %s" % threads if threads is not None else "")
        if not self.ck.check(group, what, rc == 0 and os.path.exists(out), "rc %d, stderr: %s" % (rc, short(se))):
            return None
        self.outputs.append((group, out))
        if not report:
            return {}
        try:
            with open(rpath, encoding="utf-8") as f:
                rep = load_strict_json(f.read())
        except (OSError, ValueError) as e:
            self.ck.check(group, "--report writes a JSON object (strict JSON: no NaN/Infinity)", False, str(e))
            return {}
        self.ck.check(group, "--report writes a JSON object (strict JSON: no NaN/Infinity)", isinstance(rep, dict),
                      type(rep).__name__)
        return rep if isinstance(rep, dict) else {}

    def case(self, group, scheme, tensors, keeps=(), alignment=4096, meta=None, threads=None, roundtrip=True,
             no_stats=()):
        """Write the input, quantize it, compare tensors and report. Returns (qf, report) or (None, None)."""
        if not self.ck.want(group):
            return None, None
        d = fresh_dir(os.path.join(self.work, group.replace("/", "_")))
        inp = write_container(os.path.join(d, "in.qmap"), tensors, meta, alignment)
        out = os.path.join(d, "out.qmap")
        rep = self.quantize(group, scheme, inp, out, keeps, threads)
        if rep is None:
            return None, None
        left = sorted(set(os.listdir(d)) - {"in.qmap", "out.qmap", "out.qmap.report.json"})
        self.ck.check(group, "no temporary file left beside the output", not left, "left: %s" % left)
        qf = check_output(self.ck, group, tensors, out, scheme, keeps, alignment, roundtrip)
        if qf is not None and rep:
            check_report(self.ck, group, rep, tensors, inp, out, scheme, keeps, threads, no_stats)
        return qf, rep

    # --------------------------------------------------------------------------------------- q8

    def q8_cases(self):
        rng = np.random.default_rng(1)
        shapes = [(37, 1), (5, 3), (9, 17), (11, 63), (8, 64), (7, 65), (300, 784)]
        layout = [t_f32("cols%d.weight" % s[1], rows_of_mixed_scale(rng, *s)) for s in shapes]
        layout += [t_f32("one_row.weight", rng.standard_normal((1, 100))),
                   t_f32("one_by_one.weight", [[-0.37]]),
                   t_f32("rank3.weight", rows_of_mixed_scale(rng, 15, 70).reshape(3, 5, 70)),
                   t_f32("rank4.weight", rows_of_mixed_scale(rng, 24, 33).reshape(2, 3, 4, 33)),
                   t_f32("uniform.weight", rng.uniform(-1, 1, size=(64, 200))),
                   t_f32("small_ints.weight", rng.integers(-300, 300, size=(40, 90)))]
        self.case("q8/layout_and_random", "q8", layout)

        zero_rows = rng.standard_normal((6, 40)).astype(F32)
        zero_rows[0] = 0
        zero_rows[2] = -0.0
        zero_rows[5] = 0
        below_max = float(np.nextafter(F32(FLT_MAX), F32(0)))
        extremes = np.array([[3.4e38, -3.4e38, 1.0, -1.0, 1e-45, 0, 3.3e38, -1e30, 1e30],
                             [below_max] * 9,
                             [-below_max] * 8 + [0.0],
                             [3.4e38, 1.0, -2.0, 1e37, -1e36, 5e37, 0, 0, 1],
                             [-3.4e38, 3.3e38, 1.7e38, -1.7e38, 2.6e36, 1.3e36, -2.6e36, 1e-30, 0]], dtype=F32)
        flt_max = np.array([[FLT_MAX, -FLT_MAX, 1.0, -1.0, 1e-45, 0, 3.4e38, 1.7e38],
                            [FLT_MAX] * 8,
                            [-FLT_MAX] * 7 + [0.0]], dtype=F32)
        ties = np.array([tie_row(s, neg) for s in (0.0625, 0.09375, 3.0, 2.0 ** -100, 1.5 * 2.0 ** 20, 2.0 ** -140)
                         for neg in (False, True)])
        edge = [t_f32("zero_rows.weight", zero_rows),
                t_f32("all_zero.weight", np.zeros((4, 16))),
                t_f32("neg_zero.weight", np.full((2, 8), -0.0)),
                t_f32("outliers.weight", outlier_matrix(rng, 64, 256)),
                t_f32("outlier_boundary.weight", outlier_boundary_matrix()),
                t_f32("outlier_boundary64.weight", [[1.0] + [0.0] * 63, [-3.0] + [0.0] * 63,
                                                    [0.0] * 63 + [2.0 ** -20]]),
                t_f32("extremes.weight", extremes),
                t_f32("subnormal.weight", subnormal_rows()),
                t_f32("ties.weight", ties),
                t_f32("reciprocal_sensitive.weight", np.array([sensitive_row(rng, 200, "reciprocal")
                                                               for _ in range(8)])),
                t_f32("f64_sensitive.weight", np.array([sensitive_row(rng, 200, "f64") for _ in range(8)])),
                t_f32("scale_sensitive.weight", scale_sensitive_rows(rng, 32, 50))]
        self.case("q8/edge_cases", "q8", edge)
        # amax = FLT_MAX: the bytes are well defined, but the binary32 value 127 * scale is inf (see
        # roundtrip_tolerance), so the report's error statistics are not compared for it.
        self.case("q8/flt_max", "q8", [t_f32("flt_max.weight", flt_max), t_f32("fine.weight", np.eye(3))],
                  no_stats=("flt_max.weight",))

        halves = rng.standard_normal((50, 100)).astype(np.float16)
        extreme_halves = np.array([[65504, -65504, 1, 2.0 ** -24, -2.0 ** -24, 0, 6e-5],
                                   [2.0 ** -24, -2.0 ** -23, 2.0 ** -14, 0, 0, 0, 0],
                                   [0.1, 0.2, 0.3, -0.4, 1000, -2000, 3e4]], dtype=np.float16)
        f16in = [t_f16("f16.weight", halves),
                 t_f16("f16_extreme.weight", extreme_halves),
                 t_f16("f16_rank3.weight", rng.standard_normal((2, 3, 65)).astype(np.float16)),
                 t_f32("f32_beside.weight", rng.standard_normal((3, 10))),
                 t_f16("f16_vector.weight", rng.standard_normal(10).astype(np.float16))]
        self.case("q8/f16_input", "q8", f16in)

        small = [t_f32("a.weight", rng.standard_normal((3, 17))),
                 t_f32("b.weight", rows_of_mixed_scale(rng, 100, 65)),
                 t_f32("c.bias", rng.standard_normal(7)),
                 t_f32("d.weight", rng.standard_normal((2, 5)))]
        self.case("q8/alignment_64", "q8", small, alignment=64)
        self.case("q8/alignment_65536", "q8", small, alignment=65536)

    # --------------------------------------------------------------------------------------- f16

    def f16_cases(self):
        rng = np.random.default_rng(2)
        # halves h with their neighbours: the f32 value exactly halfway between two halves is a tie
        h = log_uniform(rng, 3000, 2.0 ** -23, 65000).astype(np.float16)     # no zero, no 65504
        h_up = np.nextafter(h, np.float16(np.inf) * np.sign(h).astype(np.float16))
        mid = ((h.astype(F64) + h_up.astype(F64)) / 2).astype(F32)
        assert np.all(mid.astype(F64) == (h.astype(F64) + h_up.astype(F64)) / 2)
        ties = np.concatenate([mid, step_ulps(mid, 1), step_ulps(mid, -1)]).reshape(9, 1000)
        boundary = np.array([[65504, -65504, float(np.nextafter(F32(65520), F32(0))),
                              -float(np.nextafter(F32(65520), F32(0))), 65505, 65519, 6e-8, 2.0 ** -25,
                              -2.0 ** -25, 3 * 2.0 ** -26, 1e-10, -1e-30, 2.0 ** -24, 0.0, -0.0, 1.0]], dtype=F32)
        tensors = [t_f32("normal.weight", log_uniform(rng, (100, 300), 1e-9, 6e4)),
                   t_f32("ties.weight", ties),
                   t_f32("boundary.weight", boundary),
                   t_f32("rank3.weight", rng.standard_normal((2, 3, 50))),
                   t_f32("rank4.weight", rng.standard_normal((2, 1, 3, 5))),
                   t_f32("bias", rng.standard_normal(30)),
                   t_f16("vector.weight", rng.standard_normal(30).astype(np.float16)),
                   t_f32("pos_embd.weight", rng.standard_normal((8, 16)))]
        self.case("f16/values", "f16", tensors)

    # --------------------------------------------------------------------------------------- threads

    def thread_cases(self):
        rng = np.random.default_rng(3)
        tensors = [t_f32("a.weight", rows_of_mixed_scale(rng, 2048, 512)),
                   t_f32("a.bias", rng.standard_normal(512)),
                   t_f32("b.weight", rng.standard_normal((4, 16, 300))),
                   t_f32("c.weight", rng.standard_normal((1, 5000))),
                   t_f32("d.weight", outlier_matrix(rng, 999, 129))]
        for scheme in ("q8", "f16"):
            group = "threads/" + scheme
            if not self.ck.want(group):
                continue
            d = fresh_dir(os.path.join(self.work, group.replace("/", "_")))
            inp = write_container(os.path.join(d, "in.qmap"), tensors)
            outs = {}
            for label, threads in (("t1", 1), ("t2", 2), ("t3", 3), ("default", None), ("t2_again", 2)):
                out = os.path.join(d, "out_%s.qmap" % label)
                rep = self.quantize(group, scheme, inp, out, threads=threads)
                if rep is None:
                    continue
                outs[label] = out
                if rep:
                    want = threads or default_threads()
                    self.ck.check(group, "report threads for %s = %d" % (label, want), rep.get("threads") == want,
                                  "got %r" % rep.get("threads"))
            if "t1" not in outs:
                continue
            with open(outs["t1"], "rb") as f:
                first = f.read()
            for label, out in outs.items():
                if label == "t1":
                    continue
                with open(out, "rb") as f:
                    data = f.read()
                same = data == first
                detail = ""
                if not same:
                    n = min(len(data), len(first))
                    diff = next((i for i in range(n) if data[i] != first[i]), n)
                    detail = "sizes %d/%d, first differing byte at %d" % (len(first), len(data), diff)
                ck_what = "--threads 1 and %s give identical bytes" % label
                self.ck.check(group, ck_what, same, detail)
                self.ck.check(group, "XXH3 of --threads 1 and %s equal" % label,
                              xxh3_file(out) == xxh3_file(outs["t1"]))
            check_output(self.ck, group, tensors, outs["t1"], scheme)

    # --------------------------------------------------------------------------------------- selection

    def select_cases(self):
        rng = np.random.default_rng(4)
        with_nan = rng.standard_normal(16).astype(F32)
        with_nan[[2, 5, 9]] = [np.nan, np.inf, -np.inf]
        with_nan = with_nan.view(np.uint32)
        with_nan[3] = 0x7fc01234                                         # a NaN payload to keep bit for bit
        with_nan = with_nan.view(F32)
        mask = rng.standard_normal((4, 4)).astype(F32)
        mask[1, 1] = -np.inf
        nan_matrix = rng.standard_normal((4, 6)).astype(F32)
        nan_matrix[2, 3] = np.nan
        bf16 = rng.integers(0, 1 << 16, size=(4, 8)).astype("<u2")
        i32 = rng.integers(-2 ** 31, 2 ** 31, size=(3, 5)).astype("<i4")
        tensors = [t_f32("tok_embd.weight", rng.standard_normal((20, 16))),
                   t_f32("pos_embd.weight", rng.standard_normal((8, 16))),
                   t_f32("blk.0.attn_q.weight", rng.standard_normal((16, 16))),
                   t_q8("blk.0.prequantized.weight", rng.standard_normal((4, 70)), 4096),
                   t_raw("blk.0.bf16.weight", "BF16", (4, 8), bf16.tobytes()),
                   t_f32("blk.0.nan.weight", nan_matrix),
                   t_f32("blk.1.attn_q.weight", rng.standard_normal((16, 16))),
                   t_f32("blk.1.ln1.weight", with_nan),
                   t_f32("blk.1.attn_q.bias", rng.standard_normal(16)),
                   t_raw("blk.1.bf16_norm.weight", "BF16", (8,), bf16.reshape(-1)[:8].tobytes()),
                   t_raw("blk.1.i32_vector.weight", "I32", (5,), i32.reshape(-1)[:5].tobytes()),
                   t_f32("blk.1.mask", mask),
                   t_raw("blk.1.idx", "I32", (3, 5), i32.tobytes()),
                   t_raw("blk.1.table", "BF16", (4, 8), bf16.tobytes()),
                   t_f32("weight", rng.standard_normal((3, 3))),
                   t_f32("blk.1.proj.weights", rng.standard_normal((3, 3))),
                   t_f32("blk.1.proj_weight", rng.standard_normal((3, 3))),
                   t_f32("blk.1.conv.weight", rng.standard_normal((4, 3, 5))),
                   t_f16("blk.1.ffn_up.weight", rng.standard_normal((6, 16)).astype(np.float16)),
                   t_f32("blk.10.attn_q.weight", rng.standard_normal((16, 16))),
                   t_f32("output.weight", rng.standard_normal((20, 16)))]
        self.case("select/q8_keep_output_blk0", "q8", tensors, keeps=["output.*", "blk.0.*"])
        self.case("select/f16_keep_output_blk0_ffn_up", "f16", tensors,
                  keeps=["output.*", "blk.0.*", "blk.1.ffn_up.weight"])
        plain = [t for t in tensors if not t.name.startswith("blk.0.") and t.dtype != "F16"]
        self.case("select/q8_no_keep", "q8", plain)

        globs = [t_f32(n, rng.standard_normal((3, 4))) for n in (
            "blk.3.attn_q.weight", "blk.3.attn_k.weight", "blk.3.attn_v.weight", "blk.12.attn_k.weight",
            "blk.3.attn_Q.weight", "out_norm_proj.weight", "blk.1.ffn.weight", "attn_z.weight", "x.attn_o.weight",
            "blk.7.attn_q.weight.extra.weight")]
        self.case("select/keep_globs", "q8", globs,
                  keeps=["blk.?.attn_[qk].weight", "*norm*", "blk.1", "attn*"])

    # --------------------------------------------------------------------------------------- metadata

    def meta_cases(self):
        rng = np.random.default_rng(5)
        meta = [("general.architecture", "STRING", "llama"),
                ("test.u32", "U32", 4294967295),
                ("test.i32", "I32", -2147483648),
                ("general.file_type", "STRING", "f32"),
                ("test.u64", "U64", 2 ** 64 - 1),
                ("test.i64", "I64", -2 ** 63),
                ("test.f32_nan", "F32", sw.Bits(0x7fc01234)),
                ("test.f64_negzero", "F64", sw.Bits(0x8000000000000000)),
                ("test.bool", "BOOL", True),
                ("test.string", "STRING", "h\u00e9llo\u0000w\u00f6rld \U0001f600"),
                ("test.empty_string", "STRING", ""),
                ("test.arr_u32", "ARRAY[U32]", [1, 2, 3]),
                ("test.arr_i64", "ARRAY[I64]", [-1, 2 ** 62]),
                ("test.arr_f32", "ARRAY[F32]", [1.5, sw.Bits(0xffc00001)]),
                ("test.arr_f64", "ARRAY[F64]", [2.5]),
                ("test.arr_bool", "ARRAY[BOOL]", [True, False]),
                ("test.arr_string", "ARRAY[STRING]", ["a", "", "b\u0000c"]),
                ("test.arr_empty", "ARRAY[U64]", []),
                ("quantization.note", "STRING", "not ours")]
        tensors = [t_f32("a.weight", rng.standard_normal((5, 70))), t_f32("a.bias", rng.standard_normal(5)),
                   t_f32("output.weight", rng.standard_normal((3, 8))), t_f32("blk.3.x", rng.standard_normal((2, 2))),
                   t_f32("blk.3.y.weight", rng.standard_normal((2, 2)))]
        keeps = ["output.*", "blk.[0-9].y.weight", "?"]
        self.meta_case("meta/all_types_file_type_present", "q8", tensors, meta, keeps, alignment=8192)
        self.meta_case("meta/file_type_absent", "f16", tensors,
                       [m for m in meta if m[0] != "general.file_type"], (), alignment=4096)
        self.meta_case("meta/no_metadata", "q8", tensors, [], ("a.*",), alignment=64)
        self.requantize_case()

    def meta_case(self, group, scheme, tensors, meta, keeps, alignment):
        if not self.ck.want(group):
            return
        d = fresh_dir(os.path.join(self.work, group.replace("/", "_")))
        inp = write_container(os.path.join(d, "in.qmap"), tensors, meta, alignment)
        out = os.path.join(d, "out.qmap")
        if self.quantize(group, scheme, inp, out, keeps, report=False) is None:
            return
        ck = self.ck
        qi, qo = spec_reader.read(inp), spec_reader.read(out)
        check_output(ck, group, tensors, out, scheme, keeps, alignment)
        in_entries = [(e.key, e.type_name, bytes(e.raw)) for e in qi.meta_entries]
        out_entries = [(e.key, e.type_name, bytes(e.raw)) for e in qo.meta_entries]
        qkeys = ["quantize.scheme", "quantize.version", "quantize.source_xxh3", "quantize.keep"]
        ck.check(group, "the last four entries are quantize.scheme, .version, .source_xxh3, .keep",
                 [e[0] for e in out_entries[-4:]] == qkeys, "got %s" % [e[0] for e in out_entries[-4:]])
        carried = [e for e in out_entries[:-4] if e[0] != "general.file_type"]
        want = [e for e in in_entries if e[0] != "general.file_type"]
        bad = [w[0] for w, g in zip(want, carried) if w != g]
        ck.check(group, "every input entry carried over unchanged (key, type, value bytes) and in order",
                 len(carried) == len(want) and not bad,
                 "got %d entries for %d, differing: %s" % (len(carried), len(want), bad[:5]))
        ft = [i for i, e in enumerate(out_entries) if e[0] == "general.file_type"]
        scheme_name = SCHEMES[scheme][1]
        ck.check(group, "general.file_type STRING %r, once" % scheme_name,
                 len(ft) == 1 and qo.metadata_types["general.file_type"] == "STRING"
                 and qo.metadata["general.file_type"] == scheme_name,
                 "got %r %r" % (qo.metadata_types.get("general.file_type"), qo.metadata.get("general.file_type")))
        in_ft = [i for i, e in enumerate(in_entries) if e[0] == "general.file_type"]
        if in_ft:
            ck.check(group, "general.file_type kept in place (entry %d)" % in_ft[0], ft == in_ft, "at %s" % ft)
        expect = {"quantize.scheme": ("STRING", scheme_name), "quantize.version": ("U32", 1),
                  "quantize.source_xxh3": ("U64", xxh3_file(inp)), "quantize.keep": ("ARRAY[STRING]", list(keeps))}
        for k, (typ, val) in expect.items():
            got = (qo.metadata_types.get(k), qo.metadata.get(k))
            if isinstance(got[1], np.ndarray):
                got = (got[0], got[1].tolist())
            ck.check(group, "%s %s = %r" % (k, typ, val), got == (typ, val), "got %r" % (got,))
        ck.check(group, "metadata_count = input + 4 (+1 when general.file_type was absent)",
                 len(out_entries) == len(in_entries) + 4 + (0 if in_ft else 1), "got %d" % len(out_entries))

    def requantize_case(self):
        """An --f16 output (which carries quantize.* keys) quantized again with --q8: the F16 matrices are valid
        --q8 input; the result must be a valid container (no duplicate quantize.* keys) or a clean refusal."""
        group = "meta/requantize_f16_output"
        if not self.ck.want(group):
            return
        rng = np.random.default_rng(6)
        d = fresh_dir(os.path.join(self.work, group.replace("/", "_")))
        inp = write_container(os.path.join(d, "in.qmap"), [t_f32("a.weight", rng.standard_normal((4, 9)))])
        mid = os.path.join(d, "mid.qmap")
        if self.quantize(group, "f16", inp, mid, report=False) is None:
            return
        out = os.path.join(d, "out", "out.qmap")
        os.makedirs(os.path.dirname(out))
        rc, so, se = self.run("quantize", "--q8", mid, "-o", out)
        if rc == 0:
            try:
                qf = spec_reader.read(out)
                keys = list(qf.metadata)
                ok = (keys.count("quantize.scheme") == 1 and qf.metadata["quantize.scheme"] == "q8_row"
                      and qf.metadata["quantize.source_xxh3"] == xxh3_file(mid))
                ck_detail = "keys %s" % keys
            except spec_reader.SpecError as e:
                ok, ck_detail = False, str(e)
            self.ck.check(group, "accepted: valid container, one quantize.scheme = q8_row, source_xxh3 of the "
                          "--f16 file", ok, ck_detail)
            self.outputs.append((group, out))
        else:
            self.ck.check(group, "refused cleanly (exit 1, nothing left)", rc == 1 and not os.listdir(
                os.path.dirname(out)), "rc %d, stderr %s" % (rc, short(se)))

    # --------------------------------------------------------------------------------------- report/--json

    def report_cases(self):
        group = "report/json_stdout_and_quiet"
        if not self.ck.want(group):
            return
        rng = np.random.default_rng(7)
        tensors = [t_f32("a.weight", outlier_matrix(rng, 30, 100)), t_f32("a.bias", rng.standard_normal(30)),
                   t_f32("output.weight", rng.standard_normal((5, 7)))]
        d = fresh_dir(os.path.join(self.work, group.replace("/", "_")))
        inp = write_container(os.path.join(d, "in.qmap"), tensors)
        out = os.path.join(d, "out.qmap")
        rep = self.quantize(group, "q8", inp, out, keeps=["output.*"], threads=2, extra=["--json"])
        if rep is None:
            return
        rc, so, se = self.run("quantize", "--q8", inp, "-o", out + ".2", "--keep", "output.*", "--threads", 2,
                              "--json")
        try:
            js = load_strict_json(so)
        except ValueError as e:
            self.ck.check(group, "--json prints one JSON object on stdout", False, "%s: %s" % (e, short(so)))
            js = None
        if js is not None:
            self.ck.check(group, "--json prints one JSON object on stdout", isinstance(js, dict))
            a = {k: v for k, v in rep.items() if k not in ("seconds", "output")}
            b = {k: v for k, v in js.items() if k not in ("seconds", "output")}
            self.ck.check(group, "--json object equals the --report object (but seconds and output)", a == b,
                          "keys %s vs %s" % (sorted(a), sorted(b)))
            check_report(self.ck, group + "(--json)", js, tensors, inp, out + ".2", "q8", ["output.*"], 2)
        self.outputs.append((group, out + ".2"))
        rc, so, se = self.run("quantize", "--q8", inp, "-o", out + ".3", "--quiet")
        self.ck.check(group, "--quiet: exit 0 and nothing on stdout", rc == 0 and so.strip() == "",
                      "rc %d, stdout %s" % (rc, short(so)))
        rc, so, se = self.run("quantize", "--q8", inp, "-o", out + ".4")
        self.ck.check(group, "default output: exit 0, a human summary on stdout or stderr", rc == 0
                      and (so.strip() or se.strip()), "rc %d" % rc)

    # --------------------------------------------------------------------------------------- refusals

    def refuse_cases(self):
        rng = np.random.default_rng(8)
        good = [t_f32("blk.0.big.weight", rng.standard_normal((400, 784))),
                t_f32("blk.0.big.bias", rng.standard_normal(400))]

        def with_value(shape, index, value, f16=False):
            a = rng.standard_normal(shape).astype(np.float16 if f16 else F32)
            a[index] = value
            return a

        bad_name = "blk.9.bad_tensor.weight"
        bf16 = rng.integers(0, 16000, 15).astype("<u2").tobytes()
        cases = [
            ("already_q8", "q8", t_q8(bad_name, rng.standard_normal((3, 5)), 4096)),
            ("already_q8_f16", "f16", t_q8(bad_name, rng.standard_normal((3, 5)), 4096)),
            ("f16_on_f16", "f16", t_f16(bad_name, rng.standard_normal((3, 5)).astype(np.float16))),
            ("bf16_q8", "q8", t_raw(bad_name, "BF16", (3, 5), bf16)),
            ("bf16_f16", "f16", t_raw(bad_name, "BF16", (3, 5), bf16)),
            ("i32_q8", "q8", t_raw(bad_name, "I32", (3, 5), np.arange(15, dtype="<i4").tobytes())),
            ("i32_f16", "f16", t_raw(bad_name, "I32", (3, 5), np.arange(15, dtype="<i4").tobytes())),
            ("nan_q8", "q8", t_f32(bad_name, with_value((7, 9), (6, 8), np.nan))),
            ("nan_f16", "f16", t_f32(bad_name, with_value((7, 9), (0, 0), np.nan))),
            ("pos_inf_q8", "q8", t_f32(bad_name, with_value((7, 9), (3, 2), np.inf))),
            ("neg_inf_q8_rank3", "q8", t_f32(bad_name, with_value((2, 3, 9), (1, 2, 8), -np.inf))),
            ("inf_f16", "f16", t_f32(bad_name, with_value((7, 9), (3, 2), -np.inf))),
            ("f16_input_inf_q8", "q8", t_f16(bad_name, with_value((4, 4), (1, 1), np.inf, f16=True))),
            ("f16_input_nan_q8", "q8", t_f16(bad_name, with_value((4, 4), (3, 3), np.nan, f16=True))),
            ("f16_overflow_65520", "f16", t_f32(bad_name, with_value((7, 9), (5, 5), 65520.0))),
            ("f16_overflow_neg_65520", "f16", t_f32(bad_name, with_value((7, 9), (0, 8), -65520.0))),
            ("f16_overflow_flt_max", "f16", t_f32(bad_name, with_value((7, 9), (2, 2), FLT_MAX))),
        ]
        for name, scheme, bad in cases:
            group = "refuse/" + name
            if not self.ck.want(group):
                continue
            self.refusal(group, scheme, good[:1] + [bad] + good[1:], bad.name)

    def refusal(self, group, scheme, tensors, tensor_name):
        d = fresh_dir(os.path.join(self.work, group.replace("/", "_")))
        inp = write_container(os.path.join(d, "input_%s.qmap" % group.split("/")[1]), tensors)
        outdir = fresh_dir(os.path.join(d, "out"))
        out = os.path.join(outdir, "out.qmap")
        rc, so, se = self.run("quantize", SCHEMES[scheme][0], inp, "-o", out, "--report",
                              os.path.join(outdir, "r.json"))
        ck = self.ck
        ck.check(group, "refused with exit status 1", rc == 1, "rc %d, stderr: %s" % (rc, short(se)))
        lines = [l for l in se.splitlines() if l.strip()]
        ck.check(group, "exactly one stderr line", len(lines) == 1, "%d lines: %s" % (len(lines), short(se)))
        ck.check(group, "the error names the input file", os.path.basename(inp) in se, short(se))
        ck.check(group, "the error names the tensor %s" % tensor_name, tensor_name in se, short(se))
        left = os.listdir(outdir)
        ck.check(group, "nothing left in the output directory", not left, "left: %s" % left)

    # --------------------------------------------------------------------------------------- column panels

    # (ffn, scheme, the width the default --panel-cols auto must write blk.0.ffn_down.weight [64, ffn] in, or
    # None for as stored), from the rule of `qmap quantize --help` / qq_panel_cols_auto: Q8_ROW rows past 4096
    # columns and F16 rows past 2048 are cut, at the widest multiple of 64 dividing ffn within that bound
    # unless it is under half the bound, else at the narrowest one beyond it. 4224 = 66 * 64, 4160 = 65 * 64
    # (only 832 and narrower divide it), 11008 = 172 * 64 (Llama 2 7B: 2752 or 256 and narrower).
    AUTO_PANELS = [(4224, "q8", 2112), (4224, "f16", 1408), (4096, "q8", None), (4096, "f16", 2048),
                   (4160, "q8", None), (4160, "f16", None), (11008, "q8", 2752), (11008, "f16", 2752),
                   (2048, "f16", None)]

    def panel_case(self, group, scheme, arch, ffn, width, extra=(), dim=64):
        """A container of architecture `arch` with blk.0.ffn_down.weight [dim, ffn] (and a [ffn, dim] up
        projection, never cut) quantized with `extra`; the down projection must come out as
        [ffn / width, dim, width] (width None: as stored)."""
        if not self.ck.want(group):
            return
        ck = self.ck
        rng = np.random.default_rng(ffn)
        down = (rng.standard_normal((dim, ffn)) * 0.02).astype(F32)
        tensors = [t_f32("blk.0.ffn_up.weight", rng.standard_normal((ffn, dim)) * 0.02),
                   t_f32("blk.0.ffn_down.weight", down)]
        d = fresh_dir(os.path.join(self.work, group.replace("/", "_")))
        inp = write_container(os.path.join(d, "in.qmap"), tensors,
                              [("general.architecture", "STRING", arch), ("general.file_type", "STRING", "f32")])
        out = os.path.join(d, "out.qmap")
        rep = self.quantize(group, scheme, inp, out, extra=extra)
        if rep is None:
            return
        qf = spec_reader.read(out)
        o, up = qf.tensors["blk.0.ffn_down.weight"], qf.tensors["blk.0.ffn_up.weight"]
        p = 1 if width is None else ffn // width
        stored = down if width is None else np.ascontiguousarray(down.reshape(dim, p, width).transpose(1, 0, 2))
        want_shape = [dim, ffn] if width is None else [p, dim, width]
        if scheme == "q8":
            want = ref.q8_bytes(stored, stored.shape, 4096)
        else:
            want = ref.f16_values(stored).astype("<f2").tobytes()
        ck.check(group, "blk.0.ffn_down.weight [%d, %d] -> %s %s, its bytes the reference's on %s" % (
                 dim, ffn, SCHEMES[scheme][2], want_shape, "the panels" if width else "the matrix"),
                 list(o.shape) == want_shape and o.dtype == SCHEMES[scheme][2] and bytes(o.raw) == want,
                 "got %s %s, bytes equal: %s" % (o.dtype, list(o.shape), bytes(o.raw) == want))
        ck.check(group, "blk.0.ffn_up.weight stays [%d, %d]" % (ffn, dim), list(up.shape) == [ffn, dim], list(up.shape))
        ents = {e.get("name"): e for e in rep.get("tensors", []) if isinstance(e, dict)}
        e = ents.get("blk.0.ffn_down.weight", {})
        ck.check(group, "report: the down projection's shape as written and panels %d" % p,
                 e.get("shape") == want_shape and e.get("panels") == p, "got %r %r" % (e.get("shape"), e.get("panels")))

    def panel_cases(self):
        for ffn, scheme, width in self.AUTO_PANELS:
            self.panel_case("panels/auto_%s_ffn%d" % (scheme, ffn), scheme, "llama", ffn, width)
        self.panel_case("panels/explicit_auto_q8", "q8", "llama", 4224, 2112, ["--panel-cols", "auto"])
        self.panel_case("panels/zero_as_stored", "q8", "llama", 4224, None, ["--panel-cols", "0"])
        self.panel_case("panels/explicit_1408_q8", "q8", "llama", 4224, 1408, ["--panel-cols", "1408"])
        self.panel_case("panels/gpt2_auto_f16", "f16", "gpt2", 4224, 1408)
        self.panel_case("panels/gpt_neo_auto_q8", "q8", "gpt_neo", 4224, 2112)
        self.panel_case("panels/mlp_as_stored", "f16", "mlp", 4224, None)
        self.panel_case("panels/ffn_below_dim_q8", "q8", "llama", 128, 64, ["--panel-cols", "64"], dim=192)
        group = "panels/summary_line"
        if self.ck.want(group):
            d = fresh_dir(os.path.join(self.work, "panels_summary"))
            rng = np.random.default_rng(3)
            inp = write_container(os.path.join(d, "in.qmap"),
                                  [t_f32("blk.%d.ffn_down.weight" % i, rng.standard_normal((64, 4224)))
                                   for i in range(2)],
                                  [("general.architecture", "STRING", "llama")])
            rc, so, se = self.run("quantize", "--q8", inp, "-o", os.path.join(d, "out.qmap"))
            self.ck.check(group, "the summary names the panelled down projections and --panel-cols 0",
                          rc == 0 and "2 FFN down projections written in column panels" in so
                          and "2 x [64, 2112]" in so and "--panel-cols 0" in so, short(so[-300:] + se))
        group = "panels/refused"
        if self.ck.want(group):
            d = fresh_dir(os.path.join(self.work, "panels_refused"))
            inp = write_container(os.path.join(d, "in.qmap"),
                                  [t_f32("blk.0.ffn_down.weight", np.ones((192, 128)))],
                                  [("general.architecture", "STRING", "llama")])
            outdir = fresh_dir(os.path.join(d, "out"))
            rc, so, se = self.run("quantize", "--q8", inp, "-o", os.path.join(outdir, "out.qmap"), "--panel-cols", "96")
            self.ck.check(group, "--panel-cols 96 (not a multiple of 64): exit 2", rc == 2 and not os.listdir(outdir),
                          "rc %d: %s" % (rc, short(se)))

    def usage_cases(self):
        group = "usage/exit_2"
        if not self.ck.want(group):
            return
        d = fresh_dir(os.path.join(self.work, "usage"))
        inp = write_container(os.path.join(d, "in.qmap"), [t_f32("a.weight", np.ones((2, 2)))])
        outdir = fresh_dir(os.path.join(d, "out"))
        out = os.path.join(outdir, "out.qmap")
        for what, args in [("no --q8/--f16", [inp, "-o", out]),
                           ("both --q8 and --f16", ["--q8", "--f16", inp, "-o", out]),
                           ("no -o", ["--q8", inp]),
                           ("unknown option", ["--q8", "--frobnicate", inp, "-o", out]),
                           ("no input", ["--q8", "-o", out])]:
            rc, so, se = self.run("quantize", *args)
            self.ck.check(group, "%s: exit 2" % what, rc == 2, "rc %d, stderr: %s" % (rc, short(se)))
        self.ck.check(group, "nothing written", not os.listdir(outdir), "left: %s" % os.listdir(outdir))
        rc, so, se = self.run("quantize", "--help")
        self.ck.check(group, "--help exits 0 and mentions --keep", rc == 0 and "--keep" in so + se, "rc %d" % rc)

    # --------------------------------------------------------------------------------------- verify

    @staticmethod
    def nonfinite_tensors(qf):
        """Names of the F32/F16/BF16 tensors holding a NaN or an infinity (every exponent bit set)."""
        names = set()
        for t in qf.tensors.values():
            if t.dtype_id in (1, 2, 3):
                bits = t.raw.view("<u4") if t.dtype_id == 1 else t.raw.view("<u2")
                exp = {1: 0x7F800000, 2: 0x7C00, 3: 0x7F80}[t.dtype_id]
                if np.any((bits & exp) == exp):
                    names.add(t.name)
        return names

    def verify_outputs(self):
        """Every output passes full verification, except that a tensor the input gave NaN/Inf values (copied
        or kept byte for byte) is reported by R-DATA-2's non-finite rule, and only such tensors are."""
        for group, out in self.outputs:
            vgroup = "verify/" + group
            if not os.path.exists(out):
                continue
            qf = spec_reader.read(out)
            nonfinite = self.nonfinite_tensors(qf)
            try:
                spec_reader.verify(qf, full=True)
                ok, detail = not nonfinite, "passed, but %s hold NaN/Inf" % sorted(nonfinite)
            except spec_reader.SpecError as e:
                ok = bool(nonfinite) and getattr(e, "kind", None) == "nonfinite" and \
                    any(repr(n) in str(e) for n in nonfinite)
                detail = str(e)
            self.ck.check(vgroup, "%s: spec_reader full verification" % os.path.basename(out), ok, detail)
            rc, so, se = self.run("verify", "--full", out)
            bad = set(re.findall(r"^BAD\s+(\S+): .*\[QM_ERR_(\w+)\]", so + se, re.M))
            if nonfinite:
                ok = rc == 1 and bad == {(n, "NONFINITE") for n in nonfinite}
            else:
                ok = rc == 0
            self.ck.check(vgroup, "%s: qmap verify --full (NaN/Inf reported in exactly %s)"
                          % (os.path.basename(out), sorted(nonfinite) or "no tensor"), ok,
                          "rc %d: %s" % (rc, short(so + se)))

    # --------------------------------------------------------------------------------------- end to end

    E2E_ROUTES = (("f32", "q8"), ("f32", "f16"), ("f16", "q8"))    # (convert --dtype, quantize scheme)

    def e2e_cases(self):
        def group_of(variant, dtype, scheme):
            return "e2e/%s/%s_to_%s" % (variant, dtype, scheme)
        variants = [v for v in ("gpt2", "llama")
                    if any(self.ck.want(group_of(v, *r)) for r in self.E2E_ROUTES)]
        if not variants:
            return
        import torch                      # noqa: E402  (slow import: only when needed)
        sys.path.insert(0, os.path.join(ROOT, "tests", "convert"))
        import models                     # noqa: E402
        import savers                     # noqa: E402
        from expected import expected_tensors  # noqa: E402
        for variant in variants:
            group = "e2e/" + variant
            model, cfg = models.build(variant, seed=0)
            d = fresh_dir(os.path.join(self.work, group.replace("/", "_")))
            savers.write_json(os.path.join(d, "config.json"), cfg)
            pt = os.path.join(d, "pytorch_model.bin")
            torch.save(model.state_dict(), pt)
            plan = expected_tensors(variant, model.state_dict())
            for dtype in ("f32", "f16"):
                schemes = [sc for dt, sc in self.E2E_ROUTES if dt == dtype and self.ck.want(group_of(variant, dt, sc))]
                if not schemes:
                    continue
                conv = os.path.join(d, "model_%s.qmap" % dtype)
                rc, so, se = self.run("convert", pt, "-o", conv, "--dtype", dtype, "--quiet")
                if not self.ck.check(group, "qmap convert --dtype %s exits 0" % dtype, rc == 0,
                                     "rc %d: %s" % (rc, short(se))):
                    continue
                for scheme in schemes:
                    self.e2e_one(group_of(variant, dtype, scheme), conv, scheme, plan, torch)

    def e2e_one(self, group, conv, scheme, plan, torch):
        ck = self.ck
        out = conv.replace(".qmap", "_%s.qmap" % scheme)
        rep = self.quantize(group, scheme, conv, out)
        if rep is None:
            return
        src = spec_reader.read(conv)
        qf = spec_reader.read(out)
        inputs = []
        for name, t in src.tensors.items():
            values = np.array(t.array, dtype=F32) if t.dtype in ("F32", "F16") else None
            inputs.append(In(name, t.dtype, t.shape, bytes(t.raw), values))
        want_q = sorted(n for n, t in src.tensors.items()
                        if len(t.shape) >= 2 and n.endswith(".weight") and n != "pos_embd.weight")
        got_q = sorted(n for n, t in qf.tensors.items() if t.dtype == SCHEMES[scheme][2] and src.tensors[n].dtype
                       != t.dtype)
        ck.check(group, "quantized exactly the rank>=2 *.weight tensors but pos_embd.weight (%d)" % len(want_q),
                 got_q == want_q, "got %s, want %s" % (got_q, want_q))
        check_output(ck, group, inputs, out, scheme)
        if rep:
            check_report(ck, group, rep, inputs, conv, out, scheme)
        # Against the torch weights themselves (the source of the conversion).
        worst = []
        for name in want_q:
            o = qf.tensors[name]
            w = plan[name].value(f16=src.tensors[name].dtype == "F16").astype(F32)
            if scheme == "q8":
                rows, cols = ref.rows_cols(o.shape)
                err = np.abs(w.reshape(rows, cols).astype(F64) - o.dequantize().reshape(rows, cols).astype(F64))
                tol = roundtrip_tolerance(w.reshape(rows, cols), np.array(o.scales))
                if not np.all(err <= tol):
                    worst.append("%s: max excess %r" % (name, float(np.max(err - tol))))
            else:
                want = torch.from_numpy(w).half().numpy()
                if np.array(o.array).view("<u2").tobytes() != want.view("<u2").tobytes():
                    worst.append(name)
        if scheme == "q8":
            ck.check(group, "dequantized weights within scale/2 (+2^-16 scale + 2^-149) of the torch weights",
                     not worst, "; ".join(worst[:3]))
        else:
            ck.check(group, "F16 weights are torch's .half() of the torch weights, bit for bit", not worst,
                     "differ: %s" % worst[:5])

    # --------------------------------------------------------------------------------------- --shards N

    @staticmethod
    def auto_width(ffn, scheme):
        """--panel-cols auto (spec/ARCHITECTURES.md §1a): rows past the bound (Q8_ROW 4096, F16 2048) cut at
        the widest multiple of 64 dividing ffn within it unless under half of it, else the narrowest beyond
        it; None for no panels."""
        bound = 4096 if scheme == "q8" else 2048
        widths = [w for w in range(64, ffn, 64) if ffn % w == 0]
        below = [w for w in widths if w <= bound]
        above = [w for w in widths if w > bound]
        if ffn <= bound or ffn % 64:
            return None
        if below and below[-1] >= bound // 2:
            return below[-1]
        return above[0] if above else None

    def shard_down_panels(self, ffn, scheme, n, width=None):
        """§1a with --shards N: the smallest multiple of N at or above the panel count of --panel-cols
        (`width`, else auto) whose width is a multiple of 64 dividing ffn; None if there is none."""
        w = width or self.auto_width(ffn, scheme)
        least = ffn // w if w and ffn > w else 1
        for k in range(-(-least // n) * n, ffn // 64 + 1, n):
            if ffn % k == 0 and (ffn // k) % 64 == 0:
                return k
        return None

    def shard_case(self, group, scheme, arch, n, dim, ffn, down_in_panels=0, width=None):
        """A decoder LM layer (attention output [dim, dim], down projection [dim, ffn], up [ffn, dim]) quantized
        with --shards n: the attention output must come out in n column panels, the down projection in the
        panel count of shard_down_panels, each with the reference's bytes on its panels, the report saying
        so and quantize.shards = n in the metadata. down_in_panels > 0: the input (F16 for --q8, F32 for
        --f16) already holds the down projection in that many panels, which are cut anew (across their
        boundaries when the counts differ)."""
        if not self.ck.want(group):
            return
        ck = self.ck
        rng = np.random.default_rng(dim + ffn + n)
        o_name = "blk.0.attn_o.weight" if arch == "llama" else "blk.0.attn_out.weight"
        o = (rng.standard_normal((dim, dim)) * 0.02).astype(F32)
        down = (rng.standard_normal((dim, ffn)) * 0.02).astype(F32)
        up = (rng.standard_normal((ffn, dim)) * 0.02).astype(F32)
        if down_in_panels:   # F16 for --q8 (an F16 container), F32 for --f16
            t_in = t_f16 if scheme == "q8" else t_f32
            if scheme == "q8":
                o, down, up = (x.astype(np.float16).astype(F32) for x in (o, down, up))
            w = ffn // down_in_panels
            tensors = [t_in(o_name, o), t_in("blk.0.ffn_up.weight", up),
                       t_in("blk.0.ffn_down.weight", down.reshape(dim, down_in_panels, w).transpose(1, 0, 2))]
        else:
            tensors = [t_f32(o_name, o), t_f32("blk.0.ffn_up.weight", up), t_f32("blk.0.ffn_down.weight", down)]
        d = fresh_dir(os.path.join(self.work, group.replace("/", "_")))
        inp = write_container(os.path.join(d, "in.qmap"), tensors,
                              [("general.architecture", "STRING", arch), ("general.file_type", "STRING", "f32")])
        out = os.path.join(d, "out.qmap")
        extra = ["--panel-cols", str(width)] if width else []
        rep = self.quantize(group, scheme, inp, out, extra=["--shards", str(n), *extra])
        if rep is None:
            return
        qf = spec_reader.read(out)
        ents = {e.get("name"): e for e in rep.get("tensors", []) if isinstance(e, dict)}
        down_p = self.shard_down_panels(ffn, scheme, n, width)
        for name, m, p in ((o_name, o, n), ("blk.0.ffn_down.weight", down, down_p)):
            rows, cols = m.shape
            stored = np.ascontiguousarray(m.reshape(rows, p, cols // p).transpose(1, 0, 2))
            want = (ref.q8_bytes(stored, stored.shape, 4096) if scheme == "q8"
                    else ref.f16_values(stored).astype("<f2").tobytes())
            t = qf.tensors[name]
            ck.check(group, "%s [%d, %d] -> %s [%d, %d, %d], its bytes the reference's on the panels" % (
                     name, rows, cols, SCHEMES[scheme][2], p, rows, cols // p),
                     list(t.shape) == [p, rows, cols // p] and bytes(t.raw) == want,
                     "got %s %s, bytes equal: %s" % (t.dtype, list(t.shape), bytes(t.raw) == want))
            e = ents.get(name, {})
            ck.check(group, "report: %s panels %d" % (name, p), e.get("panels") == p, "got %r" % e.get("panels"))
        ck.check(group, "blk.0.ffn_up.weight stays [%d, %d]" % (ffn, dim),
                 list(qf.tensors["blk.0.ffn_up.weight"].shape) == [ffn, dim])
        ck.check(group, "metadata: quantize.shards U32 %d" % n,
                 qf.metadata.get("quantize.shards") == n and qf.metadata_types.get("quantize.shards") == "U32",
                 "got %r %r" % (qf.metadata.get("quantize.shards"), qf.metadata_types.get("quantize.shards")))

    def shard_refusal(self, group, arch, n, dim, ffn, scheme="q8", extra=(), names=()):
        """--shards n that cannot be written: exit 1, one line naming the input, --shards and `names`, and no
        output."""
        if not self.ck.want(group):
            return
        rng = np.random.default_rng(7)
        tensors = [t_f32("blk.0.attn_o.weight" if arch != "gpt2" else "blk.0.attn_out.weight",
                         rng.standard_normal((dim, dim))),
                   t_f32("blk.0.ffn_down.weight", rng.standard_normal((dim, ffn)))]
        d = fresh_dir(os.path.join(self.work, group.replace("/", "_")))
        inp = write_container(os.path.join(d, "in.qmap"), tensors, [("general.architecture", "STRING", arch)])
        outdir = fresh_dir(os.path.join(d, "out"))
        rc, so, se = self.run("quantize", SCHEMES[scheme][0], inp, "-o", os.path.join(outdir, "out.qmap"),
                              "--shards", n, *extra)
        lines = [l for l in se.splitlines() if l.strip()]
        self.ck.check(group, "--shards %s %s: exit 1, one line naming %s, nothing written" % (
                      n, " ".join(extra), ", ".join(names)),
                      rc == 1 and len(lines) == 1 and all(x in se for x in names) and not os.listdir(outdir),
                      "rc %d: %s" % (rc, short(se)))

    def shard_cases(self):
        self.shard_case("shards/llama_q8_2", "q8", "llama", 2, 256, 512)
        self.shard_case("shards/llama_q8_4", "q8", "llama", 4, 256, 5632)   # TinyLlama's ffn: 2 auto -> 4
        self.shard_case("shards/gpt2_f16_2", "f16", "gpt2", 2, 256, 4224)   # auto 3 of 1408 -> 6 of 704
        self.shard_case("shards/gpt_neo_q8_2_explicit", "q8", "gpt_neo", 2, 128, 512, width=128)
        self.shard_case("shards/f16_panels_recut", "q8", "llama", 2, 256, 512, down_in_panels=4)
        self.shard_case("shards/f32_panels_recut", "f16", "llama", 4, 256, 1536, down_in_panels=3)
        self.shard_refusal("shards/refused_3", "llama", "3", 256, 512, names=["blk.0.attn_o.weight", "--shards 3",
                                                                             "256"])
        self.shard_refusal("shards/refused_tiny", "gpt2", "2", 64, 256, names=["blk.0.attn_out.weight", "[64, 64]",
                                                                              "--shards 2", "multiple of 64"])
        self.shard_refusal("shards/refused_down", "llama", "4", 256, 4224, scheme="f16",
                           names=["blk.0.ffn_down.weight", "--shards 4"])
        self.shard_refusal("shards/refused_panel_cols", "llama", "2", 256, 512, extra=["--panel-cols", "0"],
                           names=["blk.0.ffn_down.weight", "--panel-cols 0", "--shards 2"])
        self.shard_refusal("shards/refused_mlp", "mlp", "2", 256, 512, names=["--shards", "decoder LM"])
        group = "shards/one_rank"
        if self.ck.want(group):
            d = fresh_dir(os.path.join(self.work, "shards_one"))
            rng = np.random.default_rng(5)
            inp = write_container(os.path.join(d, "in.qmap"),
                                  [t_f32("blk.0.attn_out.weight", rng.standard_normal((96, 96))),
                                   t_f32("blk.0.ffn_down.weight", rng.standard_normal((96, 688)))],
                                  [("general.architecture", "STRING", "gpt2")])
            out = os.path.join(d, "out.qmap")
            rc, so, se = self.run("quantize", "--q8", inp, "-o", out, "--shards", "1", "--quiet")
            qf = spec_reader.read(out) if rc == 0 else None
            self.ck.check(group, "--shards 1 on widths no panel fits (96, 688): as stored, quantize.shards 1",
                          qf is not None and list(qf.tensors["blk.0.attn_out.weight"].shape) == [96, 96]
                          and list(qf.tensors["blk.0.ffn_down.weight"].shape) == [96, 688]
                          and qf.metadata.get("quantize.shards") == 1, "rc %d: %s" % (rc, short(se)))
        group = "shards/none_without"
        if self.ck.want(group):
            d = fresh_dir(os.path.join(self.work, "shards_none"))
            inp = write_container(os.path.join(d, "in.qmap"), [t_f32("blk.0.attn_o.weight", np.ones((256, 256)))],
                                  [("general.architecture", "STRING", "llama")])
            out = os.path.join(d, "out.qmap")
            rc, so, se = self.run("quantize", "--q8", inp, "-o", out, "--quiet")
            qf = spec_reader.read(out) if rc == 0 else None
            self.ck.check(group, "without --shards: attention output as stored, no quantize.shards",
                          qf is not None and list(qf.tensors["blk.0.attn_o.weight"].shape) == [256, 256]
                          and "quantize.shards" not in qf.metadata, short(se))


# ------------------------------------------------------------------------------------------- main


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--qmap", default=os.path.join(ROOT, "build", "qmap"), help="the qmap binary")
    p.add_argument("--workdir", default=os.path.join(ROOT, "build", "tests", "quantize"),
                   help="scratch directory (recreated per case)")
    p.add_argument("-k", metavar="FILTER", help="run only groups whose name contains FILTER")
    p.add_argument("--mutate", choices=sorted(ref.MUTATIONS),
                   help="self-test: use a deliberately wrong reference; the run must report failures")
    args = p.parse_args()
    if not os.access(args.qmap, os.X_OK):
        print("test_quantize.py: %s is not an executable" % args.qmap, file=sys.stderr)
        return 2
    ref.set_mutation(args.mutate)
    if args.mutate:
        print("MUTATED REFERENCE (%s): failures are expected" % ref.MUTATIONS[args.mutate])
    os.makedirs(args.workdir, exist_ok=True)
    t0 = time.time()
    suite = Suite(args)
    suite.q8_cases()
    suite.f16_cases()
    suite.thread_cases()
    suite.select_cases()
    suite.meta_cases()
    suite.report_cases()
    suite.refuse_cases()
    suite.panel_cases()
    suite.shard_cases()
    suite.usage_cases()
    suite.e2e_cases()
    suite.verify_outputs()
    return suite.ck.finish(time.time() - t0)


if __name__ == "__main__":
    sys.exit(main())
