"""checks.py — the small harness the Python suites share (tests/convert, tests/quantize).

A suite calls `check(group, what, ok, detail)` once per assertion: it prints "ok   group: what" or
"FAIL group: what: detail", counts, and returns ok. A group is one test case; `-k FILTER` on the command
line runs only the groups whose name contains FILTER (`want`).
"""
import os
import shutil
import sys


class Checks:
    def __init__(self, filt):
        self.filt = filt
        self.passed = 0
        self.failed = []

    def want(self, group, *aliases):
        """True when no filter is set or the filter occurs in `group` or one of its aliases."""
        return not self.filt or any(self.filt in name for name in (group,) + aliases)

    def check(self, group, what, ok, detail=""):
        if ok:
            self.passed += 1
            print("ok   %s: %s" % (group, what))
        else:
            self.failed.append("%s: %s" % (group, what))
            print("FAIL %s: %s%s" % (group, what, (": " + detail) if detail else ""))
        sys.stdout.flush()
        return bool(ok)

    def finish(self, seconds=None):
        """Print the closing count line (with the run's time when given) and each failure; the exit status
        for sys.exit."""
        took = "" if seconds is None else " (%.1f s)" % seconds
        print("\n%d passed, %d failed%s" % (self.passed, len(self.failed), took))
        for f in self.failed:
            print("FAILED: " + f)
        return 1 if self.failed else 0


def short(s, n=400):
    """s on one line, cut to n characters: a subprocess's output in a FAIL line."""
    s = s.strip().replace("\n", " | ")
    return s if len(s) <= n else s[:n - 3] + "..."


def xxh3_file(path):
    """The XXH3-64 of a file's bytes, read 1 MiB at a time."""
    import xxhash   # here, not at the top: the suites that do not hash files need not have it
    h = xxhash.xxh3_64()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.intdigest()


def fresh_dir(path):
    """An empty directory at `path` (removed first if it exists)."""
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


def parse_suite_args(ap):
    """Add the options every suite takes (--workdir, -k FILTER) to `ap`, parse, create the workdir; returns
    (args, Checks)."""
    ap.add_argument("--workdir", required=True)
    ap.add_argument("-k", dest="filt")
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    return args, Checks(args.filt)
