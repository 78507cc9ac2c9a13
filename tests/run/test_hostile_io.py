#!/usr/bin/env python3
"""test_hostile_io.py — the I/O faults of issue 43 (1, 2, 4, 5, 6, 12), each on the input the issue names.

- writers (1): every command that writes a file (convert -o, quantize -o and --report, run --input X -o,
  perplexity --save-logits) pointed at an existing device node (mknod c 1 3, as root), FIFO or directory
  must exit 1 saying it refuses to replace it and what it is, and leave the destination as it was; a
  regular file and a symlink are replaced (the symlink itself, never its target); no temporary file stays.
- planted symlinks (2): symlinks at `OUT.tmp.<pid>` for the next pids (the name run -o used to open with
  fopen) pointing at a victim file: the victim is never written.
- text readers (4, 5): -f of run, tokenize, perplexity and seq2seq run, and perplexity --kl-base, given a
  FIFO (which blocks open() without O_NONBLOCK), /dev/zero, a directory and a sparse file over the 1 GiB
  cap, exit 1 at once naming the file and what it is (or its size and the cap).
- gzip bomb (6): a 1 MB gzip IDX that inflates to 1 GiB (made here with Python's gzip) is refused by
  `run --input` (and --labels) naming --allow-large, with a small peak RSS; with --allow-large a 128 MiB
  one is read as a stream of row slices (peak RSS under 96 MB; normal build only, for time).
- shrinking model (12): `qmap run` on a copy of the KJV model while the file is truncated (truncate -s
  8192) or overwritten in place (cp over it): repeated until the change lands during the run; never a
  death by signal (SIGBUS: exit 135), always exit 1 with "the model file changed while mapped".

Run by `make hostile-io-test` on the normal build and once more on build/asan/qmap (ASan+UBSan).
"""
import argparse
import gzip
import os
import shutil
import signal
import stat
import struct
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))
from checks import Checks, fresh_dir  # noqa: E402

DATA = os.path.join(ROOT, "tests", "data")
TIMEOUT = 60   # a hung FIFO open shows as a timeout, reported as a failure (never a timing assertion)


def run(qmap, args, **kw):
    try:
        return subprocess.run([qmap] + args, capture_output=True, text=True, timeout=kw.pop("timeout", TIMEOUT), **kw)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(args, "timeout", "", "still running after %d s" % TIMEOUT)


def build_models(c, qmap, d):
    """digits (classifier), kjv (llama + SentencePiece), g2p (seq2seq): converted from tests/data."""
    m = {"digits": os.path.join(d, "digits.qmap"), "kjv": os.path.join(d, "kjv.qmap"), "g2p": os.path.join(d, "g2p.qmap")}
    g2p = os.path.join(DATA, "g2p")
    cmds = {
        "digits": ["convert", os.path.join(DATA, "digits_mlp", "model.pt"), "--config",
                   os.path.join(DATA, "digits_mlp", "config.json"), "-o", m["digits"], "--quiet"],
        "kjv": ["convert", os.path.join(DATA, "kjv_llama"), "-o", m["kjv"], "--quiet"],
        "g2p": ["convert", os.path.join(g2p, "model.pt"), "--src-tokenizer", os.path.join(g2p, "src", "tokenizer.json"),
                "--tgt-tokenizer", os.path.join(g2p, "tgt", "tokenizer.json"), "-o", m["g2p"], "--quiet"],
    }
    for name, args in cmds.items():
        r = run(qmap, args)
        c.check("setup", "convert %s" % name, r.returncode == 0, r.stderr.strip())
    return m


def write_npy_u8(path, rows, feats):
    """A uint8 .npy [rows, feats] (written by hand: the suite needs no numpy)."""
    hdr = "{'descr': '|u1', 'fortran_order': False, 'shape': (%d, %d), }" % (rows, feats)
    hdr += " " * ((64 - (10 + len(hdr) + 1) % 64) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(hdr)) + hdr.encode() +
                bytes(i % 251 for i in range(rows * feats)))


def special_destinations(c, d):
    """name -> (make(path), test(lstat) that it is still that kind). A device node only as root."""
    kinds = {
        "fifo": (os.mkfifo, stat.S_ISFIFO),
        "directory": (os.mkdir, stat.S_ISDIR),
    }
    if os.geteuid() == 0:
        kinds["character device"] = (lambda p: os.mknod(p, 0o644 | stat.S_IFCHR, os.makedev(1, 3)), stat.S_ISCHR)
    else:
        print("note: not root, so no device node (mknod c 1 3) is tried")
    return kinds


def leftovers(d, before):
    return sorted(n for n in set(os.listdir(d)) - before if ".tmp" in n)


def test_writers(c, qmap, m, d):
    wd = fresh_dir(os.path.join(d, "writers"))
    text = os.path.join(d, "text.txt")
    x = os.path.join(d, "x.npy")
    write_npy_u8(x, 3, 64)
    writers = {
        "convert -o": lambda o: ["convert", os.path.join(DATA, "digits_mlp", "model.pt"), "--config",
                                 os.path.join(DATA, "digits_mlp", "config.json"), "-o", o, "--quiet"],
        "quantize -o": lambda o: ["quantize", "--q8", m["digits"], "-o", o, "--quiet"],
        "quantize --report": lambda o: ["quantize", "--q8", m["digits"], "-o", os.path.join(wd, "r.qmap"), "--quiet",
                                        "--report", o],
        "run --input X -o": lambda o: ["run", m["digits"], "--input", x, "-o", o, "-q"],
        "perplexity --save-logits": lambda o: ["perplexity", m["kjv"], "-f", text, "-c", "64", "--save-logits", o],
    }
    for kind, (make, still) in special_destinations(c, d).items():
        for name, args in writers.items():
            dest = os.path.join(wd, "dest-" + kind.replace(" ", "-"))
            if not os.path.lexists(dest):
                make(dest)
            before = set(os.listdir(wd))
            r = run(qmap, args(dest))
            word = "a " + kind if kind != "fifo" else "a FIFO"
            c.check("writers", "%s onto a %s: exit 1, 'refusing to replace it: it is %s'" % (name, kind, word),
                    r.returncode == 1 and "refusing to replace it" in r.stderr and word in r.stderr and dest in r.stderr,
                    "%s %s" % (r.returncode, r.stderr.strip()))
            c.check("writers", "%s onto a %s: it is still one, no temporary file left" % (name, kind),
                    still(os.lstat(dest).st_mode) and not leftovers(wd, before), str(leftovers(wd, before)))
    # a regular file and a symlink are replaced; the symlink's target is left alone
    for name, args in writers.items():
        reg, target, link = os.path.join(wd, "reg"), os.path.join(wd, "target"), os.path.join(wd, "link")
        for p in (reg, target, link):
            if os.path.lexists(p):
                os.remove(p)
        open(reg, "w").write("old")
        open(target, "w").write("target")
        os.symlink(target, link)
        r1, r2 = run(qmap, args(reg)), run(qmap, args(link))
        c.check("writers", "%s replaces a regular file and a symlink (not the symlink's target)" % name,
                r1.returncode == 0 and r2.returncode == 0 and open(reg, "rb").read(3) != b"old" and
                not os.path.islink(link) and open(target).read() == "target", r1.stderr.strip() + r2.stderr.strip())


def last_pid():
    try:
        return int(open("/proc/sys/kernel/ns_last_pid").read())
    except OSError:
        return None


def test_planted_symlink(c, qmap, m, d):
    """run -o used to open OUT.tmp.<pid> with fopen(…, "wb"): plant that name for the next pids."""
    wd = fresh_dir(os.path.join(d, "planted"))
    x = os.path.join(d, "x.npy")
    out, victim = os.path.join(wd, "out.npy"), os.path.join(wd, "victim")
    open(victim, "w").write("precious")
    pid = last_pid()
    if pid is None:
        c.check("symlink", "/proc/sys/kernel/ns_last_pid readable (to predict the pid)", False)
        return
    for p in range(pid + 1, pid + 400):
        os.symlink(victim, "%s.tmp.%d" % (out, p))
    r = run(qmap, ["run", m["digits"], "--input", x, "-o", out, "-q"])
    c.check("symlink", "run -o with symlinks planted at OUT.tmp.<pid>: the output written, the victim untouched",
            r.returncode == 0 and os.path.isfile(out) and not os.path.islink(out) and open(victim, "rb").read() == b"precious",
            "%s %s; victim now %r" % (r.returncode, r.stderr.strip(), open(victim, "rb").read()[:20]))


def test_text_readers(c, qmap, m, d):
    wd = fresh_dir(os.path.join(d, "readers"))
    fifo, dirp, big = os.path.join(wd, "fifo"), os.path.join(wd, "dir"), os.path.join(wd, "big.txt")
    os.mkfifo(fifo)
    os.mkdir(dirp)
    with open(big, "wb") as f:   # sparse: no disk, no time
        f.truncate((1 << 30) + (1 << 20))
    text = os.path.join(d, "text.txt")
    readers = {
        "run -f": lambda p: ["run", m["kjv"], "-f", p, "-n", "1"],
        "tokenize -f": lambda p: ["tokenize", m["kjv"], "-f", p],
        "perplexity -f": lambda p: ["perplexity", m["kjv"], "-f", p, "-c", "64"],
        "perplexity --kl-base": lambda p: ["perplexity", m["kjv"], "-f", text, "-c", "64", "--kl-base", p],
        "seq2seq run -f": lambda p: ["run", m["g2p"], "-f", p],
    }
    inputs = {"a FIFO": (fifo, "it is a FIFO"), "/dev/zero": ("/dev/zero", "it is a character device"),
              "a directory": (dirp, "it is a directory")}
    for name, args in readers.items():
        for what, (path, says) in inputs.items():
            r = run(qmap, args(path))
            c.check("readers", "%s %s: exit 1 at once, naming it: '%s'" % (name, what, says),
                    r.returncode == 1 and path in r.stderr and says in r.stderr, "%s %s" % (r.returncode, r.stderr.strip()))
        if name != "perplexity --kl-base":   # --kl-base streams a file of any size, checked against its header
            r = run(qmap, args(big))
            c.check("readers", "%s over the 1 GiB cap: exit 1 naming the file, its size and the cap" % name,
                    r.returncode == 1 and big in r.stderr and str((1 << 30) + (1 << 20)) in r.stderr and
                    str(1 << 30) in r.stderr, "%s %s" % (r.returncode, r.stderr.strip()))


def run_rss(qmap, args):
    """(exit status, stderr, peak RSS in kB) of one run: os.wait4 gives that child's own rusage."""
    p = subprocess.Popen([qmap] + args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    err = p.stderr.read()
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    return p.returncode, err, ru.ru_maxrss


def make_bomb(path, total, feats):
    """An IDX uint8 [total // feats, feats] of zeros, gzip-compressed: about 1 MB per GiB."""
    n = total // feats
    with gzip.open(path, "wb", compresslevel=6) as f:
        f.write(struct.pack(">BBBBIII", 0, 0, 8, 3, n, 8, feats // 8))
        z, left = bytes(1 << 22), n * feats
        while left > 0:
            f.write(z[:min(left, len(z))])
            left -= min(left, len(z))


def test_gzip_bomb(c, qmap, m, d, asan):
    wd = fresh_dir(os.path.join(d, "bomb"))
    bomb = os.path.join(wd, "bomb.gz")
    make_bomb(bomb, 1 << 30, 64)
    size = os.path.getsize(bomb)
    c.check("bomb", "the bomb: %d bytes of gzip for 1 GiB of IDX" % size, size < 2 << 20)
    rc, err, rss_kb = run_rss(qmap, ["run", m["digits"], "--input", bomb])
    c.check("bomb", "run --input bomb.gz: exit 1, naming --allow-large",
            rc == 1 and bomb in err and "--allow-large" in err, "%s %s" % (rc, err.strip()))
    c.check("bomb", "... without inflating it (peak RSS %d MB < 64 MB)" % (rss_kb >> 10), rss_kb < 64 << 10)
    if not asan:   # reading 128 MiB through ASan takes minutes: the normal build checks the streaming
        allowed = os.path.join(wd, "bomb128.gz")
        make_bomb(allowed, 128 << 20, 64)
        rc, err, rss_kb = run_rss(qmap, ["run", m["digits"], "--input", allowed, "--allow-large", "-q"])
        c.check("bomb", "--allow-large reads a 128 MiB one, rows streamed: peak RSS %d MB < 96 MB" % (rss_kb >> 10),
                rc == 0 and rss_kb < 96 << 10, "%s %s" % (rc, err.strip()))
    x = os.path.join(d, "x.npy")
    lab = os.path.join(wd, "labels.gz")
    with gzip.open(lab, "wb") as f:   # 64 MiB + 4 of labels from a 64 kB file
        n = (64 << 20) + 4
        f.write(struct.pack(">BBBBI", 0, 0, 8, 1, n))
        f.write(bytes(n))
    write_npy_u8(x, 3, 64)
    r = run(qmap, ["run", m["digits"], "--input", x, "--labels", lab])
    c.check("bomb", "--labels bomb.gz: exit 1 naming --allow-large", r.returncode == 1 and "--allow-large" in r.stderr,
            r.stderr.strip())
    # a gzip IDX of real size (4.8x, as MNIST) still reads; --allow-large lifts the bound
    small = os.path.join(wd, "small.gz")
    with gzip.open(small, "wb") as f:
        f.write(struct.pack(">BBBBIII", 0, 0, 8, 3, 5, 8, 8) + bytes(i % 251 for i in range(5 * 64)))
    r = run(qmap, ["run", m["digits"], "--input", small, "-q"])
    c.check("bomb", "a small gzip IDX within the bound classifies", r.returncode == 0, r.stderr.strip())


def exited_by_signal(rc):
    return isinstance(rc, int) and (rc < 0 or rc == 128 + signal.SIGBUS)


def test_shrinking_model(c, qmap, m, d, asan):
    wd = fresh_dir(os.path.join(d, "shrink"))
    model = os.path.join(wd, "model.qmap")
    want = "the model file changed while mapped; replace files with rename, as qmap's writers do"
    for how in ("truncate -s 8192", "cp over it in place"):
        hits, signals, other = 0, [], []
        for attempt in range(30):
            shutil.copyfile(m["kjv"], model)
            p = subprocess.Popen([qmap, "run", model, "-p", "In the beginning", "-n", "4000", "-c", "4096", "-t", "2"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            # a delay that grows per attempt: from the start of the run (while it maps and prefetches) into
            # its decode; the change must land while the model is in use, which the message tells
            time.sleep(0.02 * attempt * (4 if asan else 1))
            if how.startswith("truncate"):
                os.truncate(model, 8192)
            else:
                with open(model, "r+b") as f:   # as cp does: truncate to 0, then write the new content
                    f.truncate(0)
                    f.write(open(m["digits"], "rb").read())
            try:
                _, err = p.communicate(timeout=120)
            except subprocess.TimeoutExpired:
                p.kill()
                _, err = p.communicate()
            if exited_by_signal(p.returncode):
                signals.append(p.returncode)
            elif p.returncode == 1 and want in err and model in err:
                hits += 1
                if hits >= 3:
                    break
            elif p.returncode not in (0, 1):
                other.append("%s: %s" % (p.returncode, err.strip()[-200:]))
        c.check("sigbus", "%s under qmap run: never a signal (SIGBUS, exit 135)" % how, not signals, str(signals))
        c.check("sigbus", "%s under qmap run: exit 1 with '%s…' naming the file (%d times)" % (how, want[:30], hits),
                hits > 0, "no attempt landed during the run")
        c.check("sigbus", "%s: no other failure" % how, not other, "; ".join(other[:3]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--qmap", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--asan", action="store_true", help="the binary is the ASan+UBSan build (slower)")
    ap.add_argument("-k", dest="filt", help="only the groups whose name contains this")
    a = ap.parse_args()
    c = Checks(a.filt)
    d = fresh_dir(a.workdir)
    m = build_models(c, a.qmap, d)
    open(os.path.join(d, "text.txt"), "w").write(
        "In the beginning God created the heaven and the earth. And the earth was without form, and void. " * 6)
    write_npy_u8(os.path.join(d, "x.npy"), 3, 64)
    if c.want("writers"):
        test_writers(c, a.qmap, m, d)
    if c.want("symlink"):
        test_planted_symlink(c, a.qmap, m, d)
    if c.want("readers"):
        test_text_readers(c, a.qmap, m, d)
    if c.want("bomb"):
        test_gzip_bomb(c, a.qmap, m, d, a.asan)
    if c.want("sigbus"):
        test_shrinking_model(c, a.qmap, m, d, a.asan)
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
