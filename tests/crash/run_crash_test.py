#!/usr/bin/python3
"""run_crash_test.py — SIGKILL the atomic writer at random moments and check the target is never torn.

    /usr/bin/python3 tests/crash/run_crash_test.py --writer build/tests/crash_writer \
        --qmap build/qmap --trials 60 --dir build/tests/crash

Property (qm_writer.h): the target path is only ever replaced, never partially written. After every kill
the file at the target must exist and be EITHER byte-identical to the previous good file OR byte-identical
to a reference file written uninterrupted with the same seed (the writer is deterministic), which must
also pass `qmap verify` when --qmap exists. Files are compared byte for byte (no hashes). The only other names allowed in the directory are the
writer's temporaries `.<name>.tmp.*`, and only after a kill in the writer's finish phase: it writes into a
file without a name (O_TMPFILE) and names it only once complete, just before the rename, so a kill while
writing must leave no entry at all. They are counted and removed after each trial. Reference files live in a sibling directory (<dir>.ref), never in <dir>.

Kill delays are drawn from the writer's measured run time (median of three uninterrupted runs): uniform
over the whole run; after the writer's "finish" marker (CRASH_WRITER_PHASES=1: table, header checksum,
fsync, rename, directory fsync — its duration timed by the writer itself); just before the end; and just
past the end so that some writes complete. Python standard library only. Exit 0 if every trial passed.
"""
import argparse
import collections
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time

TARGET_NAME = "model.qmap"
MAX_MB = 512


def same_bytes(a, b):
    """True if files a and b hold exactly the same bytes (a direct comparison: no hash can collide)."""
    if os.path.getsize(a) != os.path.getsize(b):
        return False
    with open(a, "rb") as fa, open(b, "rb") as fb:
        while True:
            x = fa.read(4 << 20)
            y = fb.read(4 << 20)
            if x != y:
                return False
            if not x:
                return True


def run_writer(writer, target, mb, seed, timing=False):
    """Run the writer to completion. Returns (wall seconds, finish_start, total) — the last two from the
    writer's own timing line when timing is set (else None)."""
    env = dict(os.environ)
    if timing:
        env["CRASH_WRITER_TIMING"] = "1"
    t0 = time.monotonic()
    p = subprocess.run([writer, target, str(mb), str(seed)], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, universal_newlines=True)
    wall = time.monotonic() - t0
    if p.returncode != 0:
        sys.exit("run_crash_test: writer failed (exit %d) for seed %d: %s" % (p.returncode, seed, p.stderr.strip()))
    fin = tot = None
    m = re.search(r"finish_start=([0-9.]+) total=([0-9.]+)", p.stderr)
    if m:
        fin, tot = float(m.group(1)), float(m.group(2))
    return wall, fin, tot


def qmap_verify(qmap, path):
    p = subprocess.run([qmap, "verify", path], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True)
    return p.returncode == 0, p.stdout.strip()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--writer", default="build/tests/crash_writer")
    ap.add_argument("--qmap", default="build/qmap")
    ap.add_argument("--trials", type=int, default=60)
    ap.add_argument("--dir", default="build/tests/crash")
    ap.add_argument("--mb", type=int, default=0,
                    help="size of each file in MiB (default: calibrated so one write takes ~0.5 s)")
    ap.add_argument("--seed", type=int, default=None, help="seed of the random kill schedule")
    ap.add_argument("-q", "--quiet", action="store_true", help="no line per trial, only the summary")
    args = ap.parse_args()

    if not os.access(args.writer, os.X_OK):
        sys.exit("run_crash_test: writer not found: %s" % args.writer)
    have_qmap = os.access(args.qmap, os.X_OK)
    rng_seed = args.seed if args.seed is not None else int(time.time())
    rng = random.Random(rng_seed)

    d = os.path.abspath(args.dir)
    refdir = d.rstrip("/") + ".ref"
    shutil.rmtree(d.rstrip("/") + ".failures", ignore_errors=True)
    for p in (d, refdir):
        shutil.rmtree(p, ignore_errors=True)
        os.makedirs(p)
    target = os.path.join(d, TARGET_NAME)
    tmp_re = re.compile(r"^\." + re.escape(TARGET_NAME) + r"\.tmp\..+$")

    # Calibrate the size so one write takes ~0.3-1 s (aim: 0.5 s), unless given.
    mb = args.mb
    if mb <= 0:
        mb = 16
        probe = os.path.join(refdir, "probe.qmap")
        while True:
            wall = sorted(run_writer(args.writer, probe, mb, 0)[0] for _ in range(3))[1]
            if wall >= 0.3 or mb >= MAX_MB:
                break
            mb = min(MAX_MB, max(mb * 2, int(mb * 0.5 / max(wall, 0.005))))
        os.unlink(probe)

    # The first good file (seed 1) is written at the target; then three uninterrupted runs at the target
    # (same seed, so the good file stays the same) measure the run time and the finish phase.
    run_writer(args.writer, target, mb, 1)
    # A copy of the good file, to compare with after each kill. It is written by the writer itself into
    # the reference directory (the writer is deterministic), never linked to the target: a writer that
    # modified the target in place would change a hard link too.
    good_copy = os.path.join(refdir, "good-1.qmap")
    run_writer(args.writer, good_copy, mb, 1)
    if not same_bytes(target, good_copy):
        sys.exit("run_crash_test: the writer is not deterministic: seed 1 gave different bytes on a rerun")
    runs = sorted(run_writer(args.writer, target, mb, 1, timing=True) for _ in range(3))
    run_time, fin, tot = runs[1]
    if fin is not None and tot is not None:
        finish_len = max(tot - fin, 0.001)
        finish_start = max(0.0, run_time - finish_len)
    else:
        finish_len = 0.2 * run_time
        finish_start = 0.8 * run_time
    for f in os.listdir(d):
        if f != TARGET_NAME:
            sys.exit("run_crash_test: unexpected file after an uninterrupted write: %s" % f)
    good_seed = 1
    if not same_bytes(target, good_copy):
        sys.exit("run_crash_test: the writer is not deterministic: seed 1 gave different bytes on a rerun")
    if have_qmap:
        ok, out = qmap_verify(args.qmap, target)
        if not ok:
            sys.exit("run_crash_test: qmap verify fails on the first good file: %s" % out)
    print("run_crash_test: %d MiB per file, write takes %.3f s (finish phase %.3f s), kill schedule seed %d%s"
          % (mb, run_time, finish_len, rng_seed, "" if have_qmap else ", no qmap binary: byte comparison only"))

    classes = collections.Counter()
    failures = 0
    tmp_total = 0
    t_start = time.monotonic()
    for trial in range(args.trials):
        seed = trial + 2
        u = rng.random()
        after_marker = False
        if u < 0.40:
            delay = rng.uniform(0.0, run_time)                       # anywhere in the run
        elif u < 0.75:
            after_marker = True                                       # after "finish": fsync / rename
            delay = rng.uniform(0.0, finish_len * 1.2)
        elif u < 0.85:
            delay = rng.uniform(finish_start, run_time)              # just before the end (by the clock)
        else:
            delay = rng.uniform(run_time, run_time * 1.25)           # after the end: completed writes
        env = dict(os.environ)
        env["CRASH_WRITER_PHASES"] = "1"
        p = subprocess.Popen([args.writer, target, str(mb), str(seed)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env=env)
        if after_marker:
            p.stdout.readline()  # returns at "finish" (or at EOF if the writer died)
        time.sleep(delay)
        killed = p.poll() is None
        if killed:
            p.send_signal(signal.SIGKILL)
        _, errtext = p.communicate()
        rc = p.returncode

        problems = []
        stray = []
        tmps = []
        for f in sorted(os.listdir(d)):
            if f == TARGET_NAME:
                continue
            (tmps if tmp_re.match(f) else stray).append(f)
        if stray:
            problems.append("unexpected files: %s" % ", ".join(stray))
        tmp_total += len(tmps)
        # The writer writes into a file without a name (O_TMPFILE) and names it only once it is complete
        # and fsynced, just before the rename: a kill before the finish phase can leave no entry at all.
        if tmps and killed and not after_marker:
            problems.append("a kill while writing left a named temporary file: %s" % ", ".join(tmps))

        if rc not in (0, -signal.SIGKILL):
            outcome = "writer-error"
            problems.append("writer exit %d: %s" % (rc, errtext.decode(errors="replace").strip()))
        elif not os.path.exists(target):
            outcome = "missing"
            problems.append("target is missing")
        else:
            ref = None
            if same_bytes(target, good_copy):
                outcome = "old-intact"
                if rc == 0:
                    # The writer finished, so the rename must have happened: the old file must be gone.
                    problems.append("writer exited 0 but the target still holds the previous file")
            else:
                # A reference written uninterrupted with the same seed.
                ref = os.path.join(refdir, "good-%d.qmap" % seed)
                run_writer(args.writer, ref, mb, seed)
            if ref is not None and same_bytes(target, ref):
                outcome = "new-complete"
                if have_qmap:
                    ok, out = qmap_verify(args.qmap, target)
                    if not ok:
                        problems.append("qmap verify failed: %s" % out)
                os.unlink(good_copy)
                good_copy, good_seed = ref, seed
            elif ref is not None:
                os.unlink(ref)
                outcome = "torn"
                keep = d.rstrip("/") + ".failures"
                os.makedirs(keep, exist_ok=True)
                shutil.copyfile(target, os.path.join(keep, "trial-%d-seed-%d.qmap" % (trial + 1, seed)))
                problems.append("target is neither the previous file (seed %d) nor the new one (seed %d), size %d"
                                % (good_seed, seed, os.path.getsize(target)))
                run_writer(args.writer, target, mb, good_seed)  # restore, so later trials are judged alone
        for f in tmps:
            os.unlink(os.path.join(d, f))

        cls = outcome + (" (killed)" if killed else " (finished)")
        if problems:
            cls = "FAIL " + cls
            failures += 1
        classes[cls] += 1
        if not args.quiet or problems:
            print("trial %2d: seed %2d delay %.3fs%s %-6s -> %s%s%s" % (
                trial + 1, seed, delay, " after finish marker" if after_marker else "",
                "killed" if killed else "exited", outcome,
                " [tmp left: %d]" % len(tmps) if tmps else "",
                ("  FAIL: " + "; ".join(problems)) if problems else ""))

    elapsed = time.monotonic() - t_start
    print("run_crash_test: outcome classes:")
    for cls, n in sorted(classes.items()):
        print("  %-28s %d" % (cls, n))
    print("run_crash_test: %d temporary files left behind by killed writers (removed after each trial)" % tmp_total)
    print("run_crash_test: %d trials in %.1f s" % (args.trials, elapsed))
    shutil.rmtree(refdir, ignore_errors=True)
    passed = args.trials - failures
    print("%d passed, %d failed" % (passed, failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
