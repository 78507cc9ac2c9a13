#!/usr/bin/python3
"""test_spec_reader.py — check the format against the independent reader written from spec/FORMAT.md.

    /usr/bin/python3 tests/test_spec_reader.py --fixture-tool build/tests/write_fixture \\
        --qmap build/qmap --workdir build/tests/spec

(a) tests/spec_reader.py reads every tests/golden/valid file, rejects every tests/golden/invalid file with
    the rule its name gives, and fails verification of tests/golden/verify files as named; the golden
    tree is what make_golden.py generates, byte for byte.
(b) the C fixture tool (public writer API) writes containers (default alignment and 64); the reader
    reads them, every tensor byte and metadata value matches what the tool says it wrote, Q8_ROW data
    is the spec 6.1 quantization of the source values, placement follows spec section 9, verify passes,
    and the tool's output is deterministic.
(c) `qmap inspect --json` on the fixture agrees with the reader (skipped if --qmap is absent).
Prints "ok - name" / "FAIL - name: why" / "skip - name: why", then "N passed, M failed".
"""
import argparse
import filecmp
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import traceback

import numpy as np

TESTS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TESTS)
sys.path.insert(0, TESTS)

import spec_reader as sr  # noqa: E402
import spec_writer as sw  # noqa: E402

PASSED = 0
FAILED = 0


def ok(name):
    global PASSED
    PASSED += 1
    print("ok - %s" % name)


def fail(name, why):
    global FAILED
    FAILED += 1
    print("FAIL - %s: %s" % (name, why))


def skip(name, why):
    print("skip - %s: %s" % (name, why))


def check(name, cond, why=""):
    if cond:
        ok(name)
    else:
        fail(name, why or "condition false")
    return cond


def run_check(name, fn):
    """Run fn(); it returns None (pass) or a failure string; exceptions are failures."""
    try:
        r = fn()
    except Exception as e:  # noqa: BLE001
        fail(name, "%s: %s" % (type(e).__name__, e))
        if os.environ.get("SPEC_TEST_DEBUG"):
            traceback.print_exc()
        return False
    if r:
        fail(name, r)
        return False
    ok(name)
    return True


# ------------------------------------------------------------------------------------ error names

def load_error_rules():
    """{ERROR_NAME: set of rules} from the X-macro comments of the status list (include/qmap_errors.h, which
    format/qm_error.h spells with the prefix QM_)."""
    path = os.path.join(ROOT, "include", "qmap_errors.h")
    names = {}
    if not os.path.exists(path):
        return None
    for line in open(path, encoding="utf-8"):
        m = re.search(r'X\(P##(?:ERR_)?(\w+),\s*\d+,\s*"[^"]*"\)\s*(?:/\*(.*?)\*/)?', line)
        if not m:
            continue
        rules = set()
        for part in re.findall(r"R-[A-Z]+-[\d,\s]+", m.group(2) or ""):
            prefix = re.match(r"R-[A-Z]+-", part).group(0)
            for n in re.findall(r"\d+", part[len(prefix):]):
                rules.add(prefix + n)
        names[m.group(1)] = rules
    return names


NAME_RE = re.compile(r"^(R-(?:GEN|HDR|META|TENSOR|DATA)-\d+)(-[A-Za-z0-9-]+)?\.([A-Z0-9_]+)\.qmap$")


# ------------------------------------------------------------------------------------ (a) golden

def test_golden(workdir):
    gdir = os.path.join(TESTS, "golden")
    errs = load_error_rules()
    if errs is None:
        skip("error names", "include/qmap_errors.h not found")

    for fn in sorted(os.listdir(os.path.join(gdir, "valid"))):
        if not fn.endswith(".qmap"):
            continue
        path = os.path.join(gdir, "valid", fn)

        def t(path=path):
            qf = sr.read(path)
            sr.verify(qf, full=True)
            for tn in qf.tensors.values():
                if tn.dtype == "Q8_ROW":
                    if tn.dequantize().shape != tn.shape:
                        return "dequantize shape"
                else:
                    tn.to_float32()
        run_check("golden valid/%s reads and verifies" % fn, t)

    invalid = sorted(f for f in os.listdir(os.path.join(gdir, "invalid")) if f.endswith(".qmap"))
    rules_seen = set()
    for fn in invalid:
        path = os.path.join(gdir, "invalid", fn)
        m = NAME_RE.match(fn)
        if not m:
            fail("golden invalid/%s" % fn, "name does not follow <RULE>[-variant].<ERROR>.qmap")
            continue
        rule, err = m.group(1), m.group(3)
        rules_seen.add(rule)
        if errs is not None:
            if err not in errs:
                fail("golden invalid/%s error name" % fn, "%s is not in qmap_errors.h" % err)
            elif rule not in errs[err]:
                fail("golden invalid/%s error name" % fn, "qmap_errors.h says %s covers %s, not %s"
                     % (err, sorted(errs[err]), rule))

        def t(path=path, rule=rule, err=err):
            try:
                sr.read(path)
            except sr.SpecError as e:
                if e.rule != rule:
                    return "rejected with %s (%s), expected %s" % (e.rule, e.message, rule)
                if rule == "R-HDR-1" and e.kind != err:
                    return "R-HDR-1 reported as %s, expected %s" % (e.kind, err)
                return None
            return "accepted"
        run_check("golden invalid/%s rejected with %s" % (fn, rule), t)

    wanted = (["R-GEN-1"] + ["R-HDR-%d" % i for i in range(1, 11)] + ["R-META-%d" % i for i in range(1, 10)]
              + ["R-TENSOR-%d" % i for i in range(1, 15)])
    missing = [r for r in wanted if r not in rules_seen]
    check("golden invalid/ covers every rule of spec section 7", not missing, "missing %s" % missing)
    check("golden invalid/ has R-HDR-1 as BAD_MAGIC and TRUNCATED",
          any(f.startswith("R-HDR-1") and f.endswith(".BAD_MAGIC.qmap") for f in invalid)
          and any(f.startswith("R-HDR-1") and f.endswith(".TRUNCATED.qmap") for f in invalid))

    for fn in sorted(f for f in os.listdir(os.path.join(gdir, "verify")) if f.endswith(".qmap")):
        path = os.path.join(gdir, "verify", fn)
        m = NAME_RE.match(fn)
        if not m:
            fail("golden verify/%s" % fn, "bad name")
            continue
        rule, err = m.group(1), m.group(3)

        def t(path=path, rule=rule, err=err):
            qf = sr.read(path)
            if rule == "R-DATA-1":
                try:
                    sr.verify(qf)
                except sr.SpecError as e:
                    return None if e.rule == "R-DATA-1" else "verify: %s" % e
                return "verify passed"
            sr.verify(qf)  # plain verification must pass
            try:
                sr.verify(qf, full=True)
            except sr.SpecError as e:
                if e.rule != rule:
                    return "full verify: %s" % e
                kind = {"padding": "PADDING_NONZERO", "data": "BAD_TENSOR_DATA", "nonfinite": "NONFINITE"}[e.kind]
                return None if kind == err else "full verify found %s (%s), expected %s" % (kind, e.message, err)
            return "full verify passed"
        run_check("golden verify/%s opens, fails %s" % (fn, rule), t)

    # the committed tree is exactly what the generator produces
    def regen():
        out = os.path.join(workdir, "golden-regen")
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        subprocess.run([sys.executable, os.path.join(gdir, "make_golden.py"), "--out", out], check=True,
                       stdout=subprocess.DEVNULL)
        diffs = []
        for kind in ("valid", "invalid", "verify"):
            a = sorted(f for f in os.listdir(os.path.join(gdir, kind)) if f.endswith(".qmap"))
            b = sorted(f for f in os.listdir(os.path.join(out, kind)) if f.endswith(".qmap"))
            if a != b:
                diffs.append("%s/ file lists differ: %s" % (kind, sorted(set(a) ^ set(b))))
                continue
            for f in a:
                if not filecmp.cmp(os.path.join(gdir, kind, f), os.path.join(out, kind, f), shallow=False):
                    diffs.append("%s/%s" % (kind, f))
        if not filecmp.cmp(os.path.join(gdir, "README.md"), os.path.join(out, "README.md"), shallow=False):
            diffs.append("README.md")
        return ("differ from make_golden.py output: %s" % diffs[:5]) if diffs else None
    run_check("golden tree matches make_golden.py (deterministic)", regen)


# ------------------------------------------------------------------------------------ (b) fixture

def hexbytes(s):
    return bytes.fromhex(s)


def compare_meta(qf, expect):
    """Returns a list of problems."""
    probs = []
    got_keys = [e.key for e in qf.meta_entries]
    exp_keys = [hexbytes(m["key_hex"]).decode("utf-8") for m in expect]
    if got_keys != exp_keys:
        return ["metadata keys/order differ: got %d keys, expected %d; first difference at %s" % (
            len(got_keys), len(exp_keys),
            next((i for i, (a, b) in enumerate(zip(got_keys, exp_keys)) if a != b), min(len(got_keys),
                                                                                      len(exp_keys))))]
    for e, m in zip(qf.meta_entries, expect):
        k = e.key
        if m["key"] != k:
            probs.append("%r: JSON 'key' field %r differs from key_hex" % (k, m["key"]))
        if e.type_name != m["type"]:
            probs.append("%r: type %s, expected %s" % (k, e.type_name, m["type"]))
            continue
        t = m["type"]
        v = qf.metadata[k]
        if t in ("U32", "I32", "U64", "I64"):
            if not isinstance(v, int) or isinstance(v, bool) or v != m["value"]:
                probs.append("%r: %r, expected %r" % (k, v, m["value"]))
        elif t == "BOOL":
            if v is not m["value"]:
                probs.append("%r: %r, expected %r" % (k, v, m["value"]))
        elif t == "F32":
            bits = struct.unpack("<I", e.raw)[0]
            if bits != int(m["bits"], 16) or not isinstance(v, float):
                probs.append("%r: bits %#010x, expected %s" % (k, bits, m["bits"]))
        elif t == "F64":
            bits = struct.unpack("<Q", e.raw)[0]
            if bits != int(m["bits"], 16) or not isinstance(v, float):
                probs.append("%r: bits %#018x, expected %s" % (k, bits, m["bits"]))
        elif t == "STRING":
            want = hexbytes(m["hex"])
            if not isinstance(v, str) or v.encode("utf-8") != want or e.raw[8:] != want:
                probs.append("%r: %r, expected %r" % (k, v, want))
        elif t == "ARRAY[STRING]":
            want = [hexbytes(h) for h in m["hex"]]
            if not isinstance(v, list) or [s.encode("utf-8") for s in v] != want:
                probs.append("%r: string array differs (%d vs %d elements)" % (k, len(v), len(want)))
        elif t.startswith("ARRAY["):
            el = t[6:-1]
            npdt = {"U32": np.uint32, "I32": np.int32, "U64": np.uint64, "I64": np.int64, "F32": np.float32,
                    "F64": np.float64, "BOOL": np.bool_}[el]
            if not isinstance(v, np.ndarray) or v.dtype != npdt:
                probs.append("%r: %s, expected numpy %s" % (k, type(v).__name__, np.dtype(npdt)))
                continue
            if el in ("F32", "F64"):
                ub = np.uint32 if el == "F32" else np.uint64
                want = np.array([int(b, 16) for b in m["bits"]], dtype=ub)
                if not np.array_equal(v.view(ub), want):
                    probs.append("%r: float bits differ" % k)
            else:
                want = np.array(m["values"], dtype=npdt)
                if len(v) != len(want) or not np.array_equal(v, want):
                    probs.append("%r: %r, expected %r" % (k, v[:8], want[:8]))
        else:
            probs.append("%r: unexpected type %s" % (k, t))
    return probs


def test_fixture(tool, workdir, alignment, qmap):
    tag = "fixture(alignment %s)" % (alignment or "default")
    out = os.path.join(workdir, "fixture-%s.qmap" % (alignment or "default"))
    exp_dir = os.path.join(workdir, "fixture-%s" % (alignment or "default"))
    shutil.rmtree(exp_dir, ignore_errors=True)
    args = [tool, out, exp_dir] + ([str(alignment)] if alignment else [])
    r = subprocess.run(args, capture_output=True, text=True)
    if not check("%s: write_fixture runs" % tag, r.returncode == 0,
                 "exit %d: %s" % (r.returncode, (r.stderr or r.stdout).strip()[-500:])):
        return
    with open(os.path.join(exp_dir, "expect.json"), encoding="utf-8") as f:
        expect = json.load(f)

    qf = None
    try:
        qf = sr.read(out)
        ok("%s: spec_reader opens it" % tag)
    except sr.SpecError as e:
        fail("%s: spec_reader opens it" % tag, "rejected: %s" % e)
        return

    h = qf.header
    want_align = expect["alignment"]

    def header():
        probs = []
        if h["major_version"] != 1 or h["minor_version"] != 0:
            probs.append("version %d.%d" % (h["major_version"], h["minor_version"]))
        if h["alignment"] != want_align:
            probs.append("alignment %d, expected %d" % (h["alignment"], want_align))
        if h["metadata_count"] != len(expect["metadata"]) or h["tensor_count"] != len(expect["tensors"]):
            probs.append("counts %d/%d" % (h["metadata_count"], h["tensor_count"]))
        if h["file_size"] != os.path.getsize(out):
            probs.append("file_size")
        return "; ".join(probs)
    run_check("%s: header fields" % tag, header)

    run_check("%s: metadata keys, types and values exact" % tag,
              lambda: "; ".join(compare_meta(qf, expect["metadata"])[:6]))

    def tensor_table():
        probs = []
        got = list(qf.tensors.values())
        if len(got) != len(expect["tensors"]):
            return "%d tensors, expected %d" % (len(got), len(expect["tensors"]))
        for t, e in zip(got, expect["tensors"]):
            name = hexbytes(e["name_hex"]).decode("utf-8")
            if t.name != name or t.dtype != e["dtype"] or list(t.shape) != e["shape"] or t.size != e["size"]:
                probs.append("%r %s %s size %d, expected %r %s %s size %d" % (
                    t.name, t.dtype, t.shape, t.size, name, e["dtype"], e["shape"], e["size"]))
        return "; ".join(probs[:5])
    run_check("%s: tensor names, dtypes, shapes, sizes, order" % tag, tensor_table)

    def placement():
        pos = h["data_offset"]
        for t in qf.tensors.values():
            want = sw.align_up(pos, want_align)
            if t.offset != want:
                return "%r at %d, spec section 9 places it at %d" % (t.name, t.offset, want)
            pos = t.offset + t.size
        return None
    run_check("%s: writer placement follows spec section 9" % tag, placement)

    for t, e in zip(qf.tensors.values(), expect["tensors"]):
        with open(os.path.join(exp_dir, e["file"]), "rb") as f:
            want = f.read()

        def data(t=t, e=e, want=want):
            if bytes(t.raw) != want:
                diff = next((i for i, (a, b) in enumerate(zip(bytes(t.raw), want)) if a != b), None)
                return "bytes differ (first at %s, sizes %d/%d)" % (diff, t.size, len(want))
            if t.dtype in ("F32", "F16", "I32"):
                dt = {"F32": "<f4", "F16": "<f2", "I32": "<i4"}[t.dtype]
                ref = np.frombuffer(want, dtype=dt).reshape(t.shape)
                if t.array.shape != t.shape or not np.array_equal(t.array.view(np.uint8), ref.view(np.uint8)):
                    return "array view differs"
            elif t.dtype == "BF16":
                ref = np.frombuffer(want, dtype="<u2").reshape(t.shape)
                if not np.array_equal(t.array, ref):
                    return "raw bf16 differs"
                f = t.to_float32()
                ref32 = (ref.astype(np.uint32) << 16).view(np.float32)
                if f.shape != t.shape or not np.array_equal(f.view(np.uint32), ref32.view(np.uint32)):
                    return "bf16 -> f32 differs"
            else:  # Q8_ROW: re-quantize the source by the spec rule and compare
                L = t.layout
                src = np.fromfile(os.path.join(exp_dir, e["source"]), dtype="<f4").reshape(L["rows"], L["cols"])
                q, s, sums = sw.quantize_q8row(src)
                if not np.array_equal(t.q, q):
                    bad = np.argwhere(t.q != q)[0]
                    return "q differs from spec 6.1 quantization at %s: %d vs %d (w=%r)" % (
                        tuple(bad), t.q[tuple(bad)], q[tuple(bad)], src[tuple(bad)])
                if not np.array_equal(t.scales.view(np.uint32), s.view(np.uint32)):
                    return "scales differ from spec 6.1"
                if not np.array_equal(t.row_sums, sums):
                    return "row_sums differ from spec 6.1"
                packed = sw.q8row_pack(q, s, sums, t.shape, want_align)
                if packed != want:
                    return "layout (padding/offsets) differs from spec 6.1"
                dq = t.dequantize()
                ref = (q.astype(np.float32) * s[:, None]).astype(np.float32).reshape(t.shape)
                if dq.shape != t.shape or not np.array_equal(dq, ref):
                    return "dequantize differs"
            return None
        run_check("%s: tensor %r (%s %s) bytes exact" % (tag, t.name, t.dtype, t.shape), data)

    def ver():
        sr.verify(qf, full=True)
    run_check("%s: verify (R-DATA-1) and full verify (R-DATA-2) pass" % tag, ver)

    def determinism():
        out2 = out + ".again"
        d2 = exp_dir + ".again"
        shutil.rmtree(d2, ignore_errors=True)
        r = subprocess.run([tool, out2, d2] + ([str(alignment)] if alignment else []), capture_output=True)
        if r.returncode:
            return "second run failed"
        same = filecmp.cmp(out, out2, shallow=False)
        os.remove(out2)
        shutil.rmtree(d2, ignore_errors=True)
        return None if same else "two runs of the same input gave different files (spec section 9)"
    run_check("%s: same input gives a byte-identical file" % tag, determinism)

    if qmap is not None:
        test_inspect(qmap, out, qf, tag)


# ------------------------------------------------------------------------------------ (c) qmap inspect

def as_int(v):
    if isinstance(v, str):
        return int(v, 16) if not v.lower().startswith("0x") else int(v, 0)
    return v


def test_inspect(qmap, path, qf, tag):
    r = subprocess.run([qmap, "inspect", "--json", path], capture_output=True, text=True)
    if not check("%s: qmap inspect --json runs" % tag, r.returncode == 0,
                 "exit %d: %s" % (r.returncode, r.stderr.strip()[-300:])):
        return
    try:
        j = json.loads(r.stdout)
    except ValueError as e:
        fail("%s: qmap inspect --json output is JSON" % tag, str(e))
        return
    ok("%s: qmap inspect --json output is JSON" % tag)
    for sec in ("header", "metadata", "tensors"):
        if sec not in j:
            fail("%s: inspect JSON has %r" % (tag, sec), "missing")
            return

    def header():
        probs = []
        for k, v in qf.header.items():
            if k in ("magic", "reserved0", "reserved1"):
                continue
            if k not in j["header"]:
                probs.append("missing %s" % k)
            elif as_int(j["header"][k]) != v:
                probs.append("%s: %r, reader says %r" % (k, j["header"][k], v))
        return "; ".join(probs)
    run_check("%s: inspect header fields match the reader" % tag, header)

    def tensors():
        jt = j["tensors"]
        if len(jt) != len(qf.tensors):
            return "%d tensors, reader has %d" % (len(jt), len(qf.tensors))
        probs = []
        for a, t in zip(jt, qf.tensors.values()):
            for k, v in (("name", t.name), ("dtype", t.dtype), ("shape", list(t.shape)), ("offset", t.offset),
                         ("size", t.size), ("checksum", t.checksum)):
                if k in a and (as_int(a[k]) if k in ("offset", "size", "checksum") else a[k]) != v:
                    probs.append("%s.%s: %r, reader says %r" % (t.name, k, a[k], v))
        return "; ".join(probs[:5])
    run_check("%s: inspect tensor table matches the reader" % tag, tensors)

    def meta():
        jm = j["metadata"]
        if isinstance(jm, dict):
            keys = list(jm.keys())
        else:
            keys = [m.get("key") for m in jm]
        if keys != [e.key for e in qf.meta_entries]:
            return "keys differ"
        if isinstance(jm, list):
            probs = []
            for m, e in zip(jm, qf.meta_entries):
                if "type" in m and m["type"] != e.type_name and not (
                        e.type_id == 9 and m["type"] in ("ARRAY", e.type_name)):
                    probs.append("%s: type %r, reader says %s" % (e.key, m["type"], e.type_name))
                v = m.get("value")
                if e.type_id in (1, 2, 3, 4, 7) and "value" in m and v != e.value:
                    probs.append("%s: %r, reader says %r" % (e.key, v, e.value))
                if e.type_id == 8 and isinstance(v, str) and v != e.value:
                    probs.append("%s: %r, reader says %r" % (e.key, v, e.value))
            return "; ".join(probs[:5])
        return None
    run_check("%s: inspect metadata keys/types/values match the reader" % tag, meta)


# ------------------------------------------------------------------------------------ main

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixture-tool")
    ap.add_argument("--qmap")
    ap.add_argument("--workdir", default=os.path.join(ROOT, "build", "tests", "spec"))
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)

    test_golden(a.workdir)

    qmap = a.qmap if a.qmap and os.path.exists(a.qmap) else None
    if qmap is None:
        skip("(c) qmap inspect --json", "--qmap not given or %r does not exist" % a.qmap)
    if a.fixture_tool and os.path.exists(a.fixture_tool):
        test_fixture(a.fixture_tool, a.workdir, None, qmap)
        test_fixture(a.fixture_tool, a.workdir, 64, qmap)
    else:
        fail("(b) fixture", "--fixture-tool not given or %r does not exist" % a.fixture_tool)

    print("%d passed, %d failed" % (PASSED, FAILED))
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
