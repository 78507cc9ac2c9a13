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

    def finish(self):
        """Print the closing count line (and each failure); the exit status for sys.exit."""
        print("\n%d passed, %d failed" % (self.passed, len(self.failed)))
        for f in self.failed:
            print("FAILED: " + f)
        return 1 if self.failed else 0


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
