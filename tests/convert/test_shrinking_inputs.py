#!/usr/bin/env python3
"""test_shrinking_inputs.py — an input that shrinks while qmap reads it (issue 11 item 8).

The probe that filed the issue truncated a mapped input at a random moment: `verify` died of SIGBUS
(exit 135) 5 times in 5, `quantize` 3 in 3. Here the same is done, several trials per command, on a
512 MiB input: `verify --full` and `quantize --q8` of a container, `convert` of an .npy, each with the input
truncated to a third (or overwritten in place by a smaller file, as `cp` does) after a random delay.

Every trial must end in one of: exit 0 (the command finished first), or exit 1 with an error naming the
input — "changed while being read" when the cut came mid-read, or the reader's own complaint when it came
before the open. Never a signal, and never an output file after a failure. Trials whose timing missed the
read are counted, and at least one trial per command must have been caught mid-read, or the test says its
timing did not exercise the guard (and fails).
"""
import argparse
import os
import random
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from checks import Checks, fresh_dir  # noqa: E402

CHANGED = "changed while being read"


def trial(qmap, args, victim, src, delay, mode, out):
    shutil.copyfile(src, victim)
    if out and os.path.exists(out):
        os.remove(out)
    # stderr for convert and quantize, stdout for verify's report
    p = subprocess.Popen([qmap] + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    time.sleep(delay)
    size = os.path.getsize(victim)
    if mode == "truncate":
        os.truncate(victim, size // 3)
    else:   # overwrite in place with a smaller file, as cp does (O_TRUNC, then write)
        with open(victim, "r+b") as f:
            f.truncate(0)
            f.write(b"\0" * (size // 4))
    err, _ = p.communicate(timeout=300)
    return p.returncode, err.strip()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--qmap", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--trials", type=int, default=6)
    a = ap.parse_args()
    c = Checks(None)
    d = fresh_dir(a.workdir)
    import numpy as np
    rng = random.Random(11)
    src_npy = os.path.join(d, "big.npy")
    np.save(src_npy, (np.arange(128 << 20, dtype=np.float32) % 977 - 488) / 1000)   # 512 MiB
    src_qmap = os.path.join(d, "big.qmap")
    r = subprocess.run([a.qmap, "convert", src_npy, "-o", src_qmap, "--arch", "none", "--quiet"],
                       capture_output=True, text=True)
    if not c.check("setup", "a 512 MiB container", r.returncode == 0, r.stderr):
        return c.finish()
    victim_qmap, victim_npy, out = os.path.join(d, "v.qmap"), os.path.join(d, "v.npy"), os.path.join(d, "out.qmap")
    cases = [
        ("verify", ["verify", "--full", victim_qmap], victim_qmap, src_qmap, None),
        ("quantize", ["quantize", "--q8", victim_qmap, "-o", out, "--quiet"], victim_qmap, src_qmap, out),
        ("convert", ["convert", victim_npy, "-o", out, "--arch", "none", "--quiet"], victim_npy, src_npy, out),
    ]
    for name, args, victim, src, output in cases:
        # how long an undisturbed run takes, to aim the cuts inside it
        shutil.copyfile(src, victim)
        t = time.time()
        r = subprocess.run([a.qmap] + args, capture_output=True, text=True)
        span = time.time() - t
        c.check(name, "undisturbed run succeeds", r.returncode == 0, r.stderr.strip())
        print("     (%s takes %.3f s undisturbed; cuts at 0.02-0.9 of that)" % (name, span))
        outcomes = {"finished": 0, "caught mid-read": 0, "refused at open": 0}
        bad = []
        # The read is only part of a run (convert copies in the kernel, then fsyncs for most of the span),
        # so the cuts are spread from 2% to 90% of it; if none came mid-read, up to 10 more aim early.
        plan = [(0.02 + 0.88 * (i + rng.random()) / a.trials) * span for i in range(a.trials)]
        extra = [rng.uniform(0.005, 0.15) * span for _ in range(10)]
        i = 0
        while i < len(plan) or (outcomes["caught mid-read"] == 0 and extra):
            delay = plan[i] if i < len(plan) else extra.pop()
            mode = "truncate" if i % 3 != 2 else "overwrite"
            i += 1
            rc, err = trial(a.qmap, args, victim, src, delay, mode, output)
            if rc == 0:
                outcomes["finished"] += 1
            elif rc == 1 and CHANGED in err and victim in err:
                outcomes["caught mid-read"] += 1
            elif rc == 1 and victim in err:
                outcomes["refused at open"] += 1
            else:
                bad.append("%s after %.3f s: exit %d: %s" % (mode, delay, rc, err[-300:]))
            if rc != 0 and output and os.path.exists(output):
                bad.append("%s after %.3f s: output file left after a failure" % (mode, delay))
        c.check(name, "%d trials: never a signal, never an output after a failure (%s)"
                % (i, ", ".join("%s %d" % kv for kv in outcomes.items())), not bad, "; ".join(bad))
        c.check(name, "at least one cut came mid-read and was reported as '%s'" % CHANGED,
                outcomes["caught mid-read"] > 0, "the timing never hit the read: %s" % outcomes)
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
