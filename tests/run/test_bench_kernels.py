#!/usr/bin/env python3
"""test_bench_kernels.py — a smoke test of `qmap bench kernels` (speed itself is make bench's business).

`qmap bench kernels --quick --threads 1 --only matvec --cols 2048,5632 --json` must finish, and its JSON must
hold what the command promises: a bandwidth baseline and a matvec figure for every weight type measured at
each row length asked for (stacks of whole 4096-row layers), every run's
ratio to the bandwidth read beside it (min and max, not only the median) in (0, 1.05] — a run above it is
taken again, counted in "reruns" (at most 3 per run), or the command fails — and the mapping's speed
next to the anonymous copy's. An unknown --only section and a row length that is not a multiple of 64 are
usage errors (exit 2).
"""
import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from checks import Checks  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--qmap", required=True)
    ap.add_argument("--dir", required=True, help="where the temporary container goes")
    ap.add_argument("-k", default=None)
    a = ap.parse_args()
    c = Checks(a.k)
    g = "bench-kernels"
    os.makedirs(a.dir, exist_ok=True)
    r = subprocess.run([a.qmap, "bench", "kernels", "--quick", "--threads", "1", "--only", "matvec", "--cols",
                        "2048,5632", "--json", "--dir", a.dir], capture_output=True, text=True, timeout=600)
    try:
        d = json.loads(r.stdout) if r.returncode == 0 else {}
    except ValueError:
        d = {}
    c.check(g, "qmap bench kernels --quick --only matvec --json: exit 0, one JSON object",
            r.returncode == 0 and isinstance(d, dict) and "matvec" in d, (r.stdout[-400:] + r.stderr)[-800:])
    mv = d.get("matvec", [])
    kinds = sorted((x.get("cols"), x.get("dtype"), x.get("act") or "") for x in mv)
    want = sorted((cols, dt, act) for cols in (2048, 5632) for dt, act in
                  (("Q8_ROW", "int8"), ("Q8_ROW", "i8x2"), ("Q8_ROW", "f32"), ("F16", ""), ("F32", "")))
    c.check(g, "matvec figures for Q8_ROW (int8, i8x2, f32 activations), F16 and F32 at 1 thread, rows 2048 and 5632"
            " long, each a stack of whole 4096-row layers",
            kinds == want and d.get("matvec_cols") == [2048, 5632] and all(
                x.get("threads") == 1 and x.get("layer_rows") == 4096 and x.get("rows", 0) % 4096 == 0
                and x.get("rows", 0) > 0 for x in mv), str(kinds))
    runs = d.get("runs", 0)

    def ratios_ok(x):
        ok = x["bandwidth"]["median"] > 0 and isinstance(x.get("reruns"), int) and 0 <= x["reruns"] <= 3 * runs
        for where in ("anonymous", "mapped"):
            q = x[where]["ratio_to_bandwidth"]
            ok = ok and x[where]["median"] > 0 and 0 < q["min"] <= q["median"] <= q["max"] <= 1.05 and q["runs"] == runs
        return ok and x["mapped_over_anonymous"]["median"] > 0

    c.check(g, "every matvec run within (0, 1.05] x the bandwidth read beside it, reruns counted (0..3 per run)",
            len(mv) == 10 and runs >= 3 and all(ratios_ok(x) for x in mv), json.dumps(mv)[:800])
    # 4b: a batch's decode step; its cost at n = 1 is 1 by definition, the others are what batching pays
    r = subprocess.run([a.qmap, "bench", "kernels", "--quick", "--threads", "1", "--only", "rows", "--cols", "2048",
                        "--json", "--dir", a.dir], capture_output=True, text=True, timeout=600)
    try:
        rows = json.loads(r.stdout).get("batch_rows", []) if r.returncode == 0 else []
    except ValueError:
        rows = []
    shape = sorted((x.get("act"), x.get("n")) for x in rows)
    c.check(g, "qmap bench kernels --only rows: n = 1, 2, 4, 8, 15 for int8 and i8x2, n = 1 costing 1x itself, "
            "every fraction of the int8 peak in (0, 1.05]",
            r.returncode == 0 and shape == sorted((act, n) for act in ("int8", "i8x2") for n in (1, 2, 4, 8, 15))
            and all(x["cost_vs_n1"] == 1.0 for x in rows if x["n"] == 1)
            and all(x["cost_vs_n1"] > 0 and 0 < x["ratio_to_int8_peak"] <= 1.05 for x in rows),
            (r.stdout[-600:] + r.stderr)[-800:])
    r = subprocess.run([a.qmap, "bench", "kernels", "--only", "nothing"], capture_output=True, text=True, timeout=60)
    c.check(g, "qmap bench kernels --only nothing: a usage error (exit 2) naming the sections",
            r.returncode == 2 and "matvec" in r.stderr, r.stderr[-400:])
    r = subprocess.run([a.qmap, "bench", "kernels", "--cols", "2048,100"], capture_output=True, text=True, timeout=60)
    c.check(g, "qmap bench kernels --cols 2048,100: a usage error (exit 2) saying what a row length must be",
            r.returncode == 2 and "multiples of 64" in r.stderr, r.stderr[-400:])
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
