#!/usr/bin/env python3
"""Tensor-parallel decoding over MPI (qmap-mpi, issue 51) against one process.

The reference is the same container run by one process: `qmap run` for the greedy continuations, and
tests/mpi/tp_logits at one rank for the logits (the plain decode path: at N = 1 no shard is applied).

1. Greedy continuations (`qmap-mpi run --temp 0`) at N = 1, 2, 4 equal `qmap run`'s, for a small llama with
   grouped-query attention (8 heads, 4 KV heads) and a small gpt2, each in F32 and Q8_ROW. The Q8_ROW llama
   has its down projection in 2 column panels (at N=2 a rank takes one, at N=4 half of one), the Q8_ROW gpt2 none (each
   rank repacks its columns). Q8_ROW runs at the default --act (int8 activations where the CPU's table takes
   them) and at --act int8 (one term): where ranks share a panel's columns (o always here, down at N=4 in the
   llama and at every N in the gpt2) their int8 scales are joined by an MPI_MAX all-reduce, so a rank's int8
   activations are one process's.
2. Logits of every position of a prompt (one forward pass) and of the decode path (one token per pass) at
   N = 2 and 4 are within 1e-5 relative (L2 norm per position) of one rank's: only the order of the sums
   across ranks differs. Within 1e-4 where X is split into two int8 terms (--act int8x2, and --act auto
   wherever the CPU's table takes two): the second term rounds the residual x − s1·q1 on a grid 127 times
   finer than the first, so the last-bit difference the other order of the sums leaves in the residual
   stream moves some of its values across a rounding boundary, each by 1/16129 of the row's max (measured
   on Zen 4: worst 1.2e-5 at --act auto, 5.6e-5 at int8x2; 2e-7 at --act int8, whose one grid is coarse). With an F32 KV cache: in F16, a key that differs in its last float bit (the
   residual stream after layer 0 is summed in another order) can round to another half, and that 2^-11
   step shows in the logits at about 1e-5.
3. A rank count that does not divide the KV heads (3 for 4) fails with the key named, on every rank, fast.
4. Ranks given different containers (MPMD launch) exit 1 with "not the same container".
5. The King James Llama that ships in tests/data/kjv_llama (trained; 8 heads, 2 KV heads): at N=2 its greedy
   continuation of a text prompt equals qmap run's in F32 and in Q8_ROW with the default activations (and
   a sampled one, --temp 0.8, in F32), and
   `qmap-mpi perplexity` on the held-out books equals `qmap perplexity` to 4 digits (F32, Q8_ROW --act int8;
   Q8_ROW at the default --act within 1e-4 relative, as 2. says).
6. A rank killed mid-decode makes the job exit non-zero within 30 s; a rank stopped (SIGSTOP: alive, silent)
   makes the others' watchdog (QMAP_MPI_TIMEOUT=3) end the job within 30 s.
7. `qmap-mpi bench --json` at N=2 on the small llama: every field, the tokens asked for, 2 x layers
   all-reduces per token (the layers from the container's metadata), one logits gather per token, tok/s
   above 0; a bad flag exits 2 with the flag and the usage printed once (rank 0).
8. Containers written for the ranks (`qmap quantize --shards N`: the attention output in N column panels, the
   down projection in a multiple of N), a llama (GQA) and a gpt2 of dim 256 at N = 4 and 2: greedy
   continuations at the default --act at every N dividing it equal qmap run's; logits at N = 2 of a
   --shards 2 file at the default --act equal one rank's bit for bit (a rank holds one panel, and a sum of
   two floats has one order), those of a --shards 4 file as in 2 (--act f32, and the default). One process
   runs them as the same weights unpanelled: --f16 --shards 4 as --f16, and --q8 --shards 4 as its own
   weights dequantized to F32 and unpanelled.

    test_mpi.py --qmap build/qmap --qmap-mpi build/qmap-mpi --tp-logits build/tests/tp_logits \
                --mpirun "mpirun --allow-run-as-root --oversubscribe" --workdir DIR [-k FILTER]
"""
import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tools"))
from checks import Checks, fresh_dir  # noqa: E402
import make_lm  # noqa: E402
import spec_reader  # noqa: E402
import spec_writer  # noqa: E402
import kjv_data  # noqa: E402

VOCAB = 101   # not a multiple of 2 or 4: the ranks' vocabulary slices are uneven
PROMPT = "1 2 3 4 5 6 7 8"
LLAMA = dict(model_type="llama", hidden_size=64, num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=4,
             intermediate_size=256, vocab_size=VOCAB, max_position_embeddings=64)
GPT2 = dict(model_type="gpt2", n_embd=64, n_layer=2, n_head=4, n_positions=64, vocab_size=VOCAB)
# the killed-rank run decodes for long enough to be killed in the middle
LONG = dict(LLAMA, max_position_embeddings=32768)
REL_TOL = 1e-5
REL_TOL_TWO_TERMS = 1e-4   # two int8 terms of X: see 2. above
EXIT_BOUND_S = 30


def run(cmd, timeout=120, env=None):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


class Suite:
    def __init__(self, a):
        self.a = a
        self.mpirun = shlex.split(a.mpirun)
        self.c = Checks(a.k)
        self.dir = fresh_dir(a.workdir)

    def model(self, name, cfg, quant=None):
        """Convert (and quantize: a list of `qmap quantize` options) a random-init model; its path."""
        src = os.path.join(self.dir, name)
        make_lm.write_lm(cfg, src, seed=1, std=0.2)   # std 0.2: peaked logits, no near-ties for argmax
        out = os.path.join(self.dir, name + ".qmap")
        r = run([self.a.qmap, "convert", os.path.join(src, "model.safetensors"), "-o", out, "--quiet"])
        assert r.returncode == 0, r.stderr
        if quant:
            q = os.path.join(self.dir, name + "-q8.qmap")
            r = run([self.a.qmap, "quantize", "--q8", *quant, out, "-o", q, "--quiet"])
            assert r.returncode == 0, r.stderr
            return q
        return out

    def mpi(self, n, *args, env=None, timeout=120):
        return run([*self.mpirun, "-np", str(n), *args], timeout=timeout, env=env)

    def logits(self, n, model, act, step, out):
        opts = ["--act", act, "--kv", "f32"] + (["--step"] if step else [])
        r = self.mpi(n, self.a.tp_logits, model, out, *opts, *PROMPT.split())
        if r.returncode != 0:
            return None, r.stderr.strip()[-400:]
        return np.fromfile(out, dtype=np.float32).reshape(-1, VOCAB), ""

    def greedy_and_logits(self, group, model, act, q8=False):
        if not self.c.want(group):
            return
        act_opt = ["--act", act]
        ref = run([self.a.qmap, "run", model, "--tokens", PROMPT, "-n", "24", "--temp", "0", "-t", "1", "-q", *act_opt])
        self.c.check(group, "qmap run (the reference) generates", ref.returncode == 0 and ref.stdout.strip(), ref.stderr)
        for n in (1, 2, 4):
            r = self.mpi(n, self.a.qmap_mpi, "run", model, "--tokens", PROMPT, "-n", "24", "--temp", "0", "-t", "1",
                         "-q", *act_opt)
            self.c.check(group, "greedy continuation at N=%d equals qmap run's" % n,
                         r.returncode == 0 and r.stdout == ref.stdout,
                         "rc %d, %r against %r; %s" % (r.returncode, r.stdout.strip(), ref.stdout.strip(),
                                                       r.stderr.strip()[-300:]))
        for step in (False, True):
            path = "decode (one token per pass)" if step else "prompt (one pass)"
            base, err = self.logits(1, model, act, step, os.path.join(self.dir, "one.f32"))
            if not self.c.check(group, "%s: logits at N=1" % path, base is not None, err):
                continue
            for n in (2, 4):
                got, err = self.logits(n, model, act, step, os.path.join(self.dir, "n%d.f32" % n))
                if not self.c.check(group, "%s: logits at N=%d" % (path, n), got is not None and got.shape == base.shape,
                                    err):
                    continue
                rel = np.linalg.norm(got - base, axis=1) / np.linalg.norm(base, axis=1)
                tol = REL_TOL_TWO_TERMS if q8 and act in ("auto", "int8x2") else REL_TOL
                self.c.check(group, "%s: logits at N=%d within %g relative of one rank's (worst %.2e)" %
                             (path, n, tol, rel.max()), rel.max() <= tol)

    def bad_rank_count(self, model):
        group = "bad-rank-count"
        if not self.c.want(group):
            return
        t0 = time.monotonic()
        r = self.mpi(3, self.a.qmap_mpi, "run", model, "--tokens", PROMPT, "-n", "4", "--temp", "0", "-t", "1",
                     timeout=EXIT_BOUND_S * 2)
        dt = time.monotonic() - t0
        self.c.check(group, "N=3 for 4 KV heads exits non-zero in %.1f s" % dt, r.returncode != 0 and dt < EXIT_BOUND_S,
                     "rc %d" % r.returncode)
        self.c.check(group, "the error names llama.n_kv_heads and the rank count",
                     "llama.n_kv_heads is 4, not a multiple of the 3 ranks" in r.stderr, r.stderr.strip()[-400:])
        self.c.check(group, "rank 0 alone prints it", r.stderr.count("not a multiple of the 3 ranks") == 1,
                     r.stderr.strip()[-400:])

    def container_mismatch(self, a_model, b_model):
        group = "container-mismatch"
        if not self.c.want(group):
            return
        cmd = [*self.mpirun, "-np", "1", self.a.qmap_mpi, "run", a_model, "--tokens", PROMPT, "-n", "4", "-t", "1", ":",
               "-np", "1", self.a.qmap_mpi, "run", b_model, "--tokens", PROMPT, "-n", "4", "-t", "1"]
        r = run(cmd, timeout=EXIT_BOUND_S * 2)
        self.c.check(group, "two containers: every rank exits 1", r.returncode != 0, "rc %d" % r.returncode)
        self.c.check(group, "rank 0 says the container differs", "is not the same container on every rank" in r.stderr,
                     r.stderr.strip()[-400:])
        self.c.check(group, "nothing generated", r.stdout.strip() == "", r.stdout[:200])
        same = run([*self.mpirun, "-np", "2", self.a.qmap_mpi, "run", a_model, "--tokens", PROMPT, "-n", "4", "-t", "1",
                    "-q"])
        self.c.check(group, "the control: one container on both ranks runs", same.returncode == 0, same.stderr[-300:])

    def rank_pids(self, model):
        """PIDs of the qmap-mpi processes running `model` (this suite's own path)."""
        pids = []
        for p in os.listdir("/proc"):
            if not p.isdigit():
                continue
            try:
                with open("/proc/%s/cmdline" % p, "rb") as fp:
                    argv = fp.read().split(b"\0")
            except OSError:
                continue
            if argv and argv[0].endswith(b"qmap-mpi") and model.encode() in argv:
                pids.append(int(p))
        return sorted(pids)

    def lost_rank(self, model, sig, env_extra):
        """Start a long decode on 2 ranks, send `sig` to one rank once both decode; (rc, seconds to exit, err)."""
        env = dict(os.environ, **env_extra)
        cmd = [*self.mpirun, "-np", "2", self.a.qmap_mpi, "run", model, "--tokens", PROMPT, "-n", "30000", "-c",
               "32768", "--temp", "0", "-t", "1", "-q"]
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
        pids, deadline = [], time.monotonic() + 30
        while len(pids) < 2 and time.monotonic() < deadline and p.poll() is None:
            time.sleep(0.1)
            pids = self.rank_pids(model)
        time.sleep(1.0)   # both ranks past the container check and decoding
        if len(pids) < 2 or p.poll() is not None:
            p.kill()
            return None, 0, "the run ended (or never started) before a rank could be stopped"
        victim = pids[-1]
        os.kill(victim, sig)
        t0 = time.monotonic()
        try:
            _, err = p.communicate(timeout=EXIT_BOUND_S)
        except subprocess.TimeoutExpired:
            p.kill()
            os.kill(victim, signal.SIGKILL)
            return None, EXIT_BOUND_S, "still running after %d s" % EXIT_BOUND_S
        finally:
            for q in pids:
                try:
                    os.kill(q, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        return p.returncode, time.monotonic() - t0, err

    def dead_rank(self, model):
        group = "dead-rank"
        if not self.c.want(group):
            return
        rc, dt, err = self.lost_rank(model, signal.SIGKILL, {})
        self.c.check(group, "a killed rank: the job exits non-zero within %d s (%.1f s)" % (EXIT_BOUND_S, dt),
                     rc is not None and rc != 0, "rc %s: %s" % (rc, err.strip()[-300:]))
        rc, dt, err = self.lost_rank(model, signal.SIGSTOP, {"QMAP_MPI_TIMEOUT": "3"})
        self.c.check(group, "a stopped rank: the watchdog ends the job within %d s (%.1f s)" % (EXIT_BOUND_S, dt),
                     rc is not None and rc != 0, "rc %s: %s" % (rc, err.strip()[-300:]))
        self.c.check(group, "the waiting rank says why", "a collective has waited over 3 s" in (err or ""),
                     (err or "").strip()[-300:])

    def kjv(self):
        group = "kjv"
        if not self.c.want(group):
            return
        f32 = os.path.join(self.dir, "kjv.qmap")
        q8 = os.path.join(self.dir, "kjv-q8.qmap")
        r = run([self.a.qmap, "convert", os.path.join(os.path.dirname(HERE), "data", "kjv_llama"), "-o", f32, "--quiet"])
        r2 = run([self.a.qmap, "quantize", "--q8", f32, "-o", q8, "--quiet"])
        if not self.c.check(group, "convert and quantize", r.returncode == 0 and r2.returncode == 0, r.stderr + r2.stderr):
            return
        gen = ["-p", "In the beginning", "-n", "32", "--temp", "0", "-t", "1", "-q"]
        for model in (f32, q8):
            ref = run([self.a.qmap, "run", model, *gen])
            got = self.mpi(2, self.a.qmap_mpi, "run", model, *gen)
            self.c.check(group, "%s: greedy text at N=2 equals qmap run's" % os.path.basename(model),
                         ref.returncode == 0 and got.returncode == 0 and got.stdout == ref.stdout and ref.stdout.strip(),
                         "%r against %r %s" % (got.stdout[:120], ref.stdout[:120], got.stderr[-300:]))
        # sampled: every rank holds the same gathered logits and draws with the same seed
        gen = ["-p", "And God said", "-n", "32", "--temp", "0.8", "-s", "5", "-t", "1", "-q"]
        ref = run([self.a.qmap, "run", f32, *gen])
        got = self.mpi(2, self.a.qmap_mpi, "run", f32, *gen)
        self.c.check(group, "kjv.qmap: sampled text (--temp 0.8 -s 5) at N=2 equals qmap run's",
                     ref.returncode == 0 and got.stdout == ref.stdout and ref.stdout.strip(),
                     "%r against %r" % (got.stdout[:120], ref.stdout[:120]))
        text = os.path.join(self.dir, "heldout.txt")
        kjv_data.write_heldout(text)
        ppl = ["-f", text, "-c", "128", "--chunks", "8", "-t", "1", "--json", "-q"]
        for model, act in ((f32, "auto"), (q8, "int8"), (q8, "auto")):
            ref = run([self.a.qmap, "perplexity", model, *ppl, "--act", act])
            got = self.mpi(2, self.a.qmap_mpi, "perplexity", model, *ppl, "--act", act)
            if not self.c.check(group, "%s: perplexity at N=2 runs" % os.path.basename(model),
                                ref.returncode == 0 and got.returncode == 0, ref.stderr[-300:] + got.stderr[-300:]):
                continue
            p1, p2 = json.loads(ref.stdout)["ppl"], json.loads(got.stdout)["ppl"]
            if model == q8 and act == "auto":   # two int8 terms where the table takes them: see 2. above
                self.c.check(group, "%s --act auto: perplexity at N=2 %.4f within %g relative of one process's %.4f" %
                             (os.path.basename(model), p2, REL_TOL_TWO_TERMS, p1),
                             abs(p2 - p1) <= REL_TOL_TWO_TERMS * p1)
                continue
            self.c.check(group, "%s --act %s: perplexity at N=2 %.4f equals one process's %.4f to 4 digits" %
                         (os.path.basename(model), act, p2, p1), "%.4g" % p1 == "%.4g" % p2)

    def main(self):
        llama = self.model("llama", LLAMA)
        # down in 2 panels of 128 columns: at N=2 each rank takes a panel, at N=4 half of one
        llama_q8 = self.model("llama", LLAMA, ["--panel-cols", "128"])
        gpt2 = self.model("gpt2", GPT2)
        gpt2_q8 = self.model("gpt2", GPT2, ["--panel-cols", "0"])        # down: [d, F], repacked per rank
        self.greedy_and_logits("llama-f32", llama, "auto")
        self.greedy_and_logits("llama-q8", llama_q8, "auto", q8=True)
        self.greedy_and_logits("llama-q8-int8", llama_q8, "int8", q8=True)
        self.greedy_and_logits("gpt2-f32", gpt2, "auto")
        self.greedy_and_logits("gpt2-q8", gpt2_q8, "auto", q8=True)
        self.kjv()
        self.bad_rank_count(llama)
        self.container_mismatch(llama, llama_q8)
        if self.c.want("dead-rank"):
            self.dead_rank(self.model("long", LONG))
        self.bench(llama)
        shard_cases(self)
        return self.c.finish()

    def bench(self, model):
        """qmap-mpi bench at N=2: --json's fields, the tokens asked for, 2 all-reduces per layer per token
        (the layers from the container's metadata), a bad flag refused once, on rank 0, with status 2."""
        group = "bench"
        if not self.c.want(group):
            return
        meta = json.loads(run([self.a.qmap, "inspect", model, "--json"]).stdout)["metadata"]
        arch = next(m["value"] for m in meta if m["key"] == "general.architecture")
        layers = next(m["value"] for m in meta if m["key"] == arch + ".n_layers")
        r = self.mpi(2, self.a.qmap_mpi, "bench", model, "--json", "-p", "16", "-n", "8", "-r", "1", "-t", "1")
        if not self.c.check(group, "bench --json at N=2 exits 0", r.returncode == 0,
                            "rc %d: %s" % (r.returncode, r.stderr.strip()[-400:])):
            return
        try:
            b = json.loads(r.stdout)
        except ValueError as e:
            self.c.check(group, "--json prints one JSON object", False, "%s: %r" % (e, r.stdout[:300]))
            return
        fields = {"pp": ["tokens", "tokens_per_second", "samples_ts"], "tg": ["tokens", "tokens_per_second", "samples_ts"],
                  "allreduce": ["calls_per_token", "bytes_per_call", "bytes_per_token", "mean_latency_us",
                                "alone_latency_us"],
                  "gather": ["calls_per_token", "bytes_per_token", "mean_latency_us", "alone_latency_us"],
                  "allreduce_max": ["calls_per_token", "bytes_per_token", "mean_latency_us", "alone_latency_us"],
                  "multi_host_model": ["compute_ms_per_token", "slowest_rank", "allreduces_per_token",
                                       "allreduce_latency_us", "gather_latency_us", "ms_per_token", "tokens_per_second",
                                       "measured_ms_per_token"]}
        missing = [k for k in list(fields) + ["n_ranks", "n_layers", "ranks"] if k not in b]
        missing += ["%s.%s" % (k, f) for k, fs in fields.items() if isinstance(b.get(k), dict) for f in fs
                    if f not in b[k]]
        if not self.c.check(group, "the JSON has every field", not missing, "missing %s" % missing):
            return
        self.c.check(group, "pp and tg ran the tokens asked for (16, 8)",
                     b["pp"]["tokens"] == 16 and b["tg"]["tokens"] == 8 and b["n_ranks"] == 2,
                     "pp %s tg %s ranks %s" % (b["pp"]["tokens"], b["tg"]["tokens"], b["n_ranks"]))
        self.c.check(group, "all-reduces per token %s = 2 x %d layers (the container's %s.n_layers)" %
                     (b["allreduce"]["calls_per_token"], layers, arch),
                     b["allreduce"]["calls_per_token"] == 2 * layers and b["n_layers"] == layers and
                     b["multi_host_model"]["allreduces_per_token"] == 2 * layers)
        self.c.check(group, "one gather of the logits per token", b["gather"]["calls_per_token"] == 1,
                     str(b["gather"]))
        tps = [b[t]["tokens_per_second"]["median"] for t in ("pp", "tg")] + [b["multi_host_model"]["tokens_per_second"]]
        self.c.check(group, "tok/s above 0 (pp, tg, the model's)", all(v and v > 0 for v in tps), str(tps))
        self.c.check(group, "both ranks give compute per token and a PSS of the mapping",
                     [x["rank"] for x in b["ranks"]] == [0, 1] and
                     all(x["compute_ms_per_token"] > 0 and x["mapping_pss_bytes"] > 0 for x in b["ranks"]),
                     str(b["ranks"]))
        bad = self.mpi(2, self.a.qmap_mpi, "bench", model, "--no-such-flag")
        self.c.check(group, "a bad flag: exit 2", bad.returncode == 2, "rc %d" % bad.returncode)
        self.c.check(group, "a bad flag: the flag and the usage on rank 0 only",
                     bad.stderr.count("unknown option '--no-such-flag'") == 1 and
                     bad.stderr.count("usage: mpirun -np N qmap-mpi bench") == 1 and bad.stdout == "",
                     bad.stderr.strip()[-400:])


# ---- containers written for N ranks (qmap quantize --shards N): the attention output in N column panels ----

# d = 256 so that d / 4 = 64 columns, the narrowest panel quantize writes; 8 heads, 4 KV heads (GQA)
LLAMA_WIDE = dict(LLAMA, hidden_size=256, intermediate_size=512)
GPT2_WIDE = dict(GPT2, n_embd=256)


def shard_greedy_and_logits(s, group, model, ranks, panels):
    """The greedy continuation at every N of `ranks` equals `qmap run`'s at the default --act. Logits at
    N > 1: equal to one rank's at the default --act where N = `panels` (o's panel count) = 2, where
    rank r holds panel r of o and of down and the sum over ranks is one process's sum of two; in float
    activations (--act f32) otherwise, as a rank holding two panels adds them before the all-reduce (another
    order than one process's, which int8 rounding of the next product can turn into a step of ~1e-5)."""
    if not s.c.want(group):
        return
    gen = ["--tokens", PROMPT, "-n", "24", "--temp", "0", "-t", "1", "-q"]
    ref = run([s.a.qmap, "run", model, *gen])
    s.c.check(group, "qmap run (the reference) generates", ref.returncode == 0 and ref.stdout.strip(), ref.stderr)
    for n in ranks:
        r = s.mpi(n, s.a.qmap_mpi, "run", model, *gen)
        s.c.check(group, "default --act: greedy continuation at N=%d equals qmap run's" % n,
                  r.returncode == 0 and r.stdout == ref.stdout,
                  "rc %d, %r against %r; %s" % (r.returncode, r.stdout.strip(), ref.stdout.strip(), r.stderr[-300:]))
    # (act, tolerance): 2 panels at N = 2 at the default --act: one process's logits bit for bit (a rank
    # holds one panel; the sum of two floats is one order); 4 panels also --act f32, and the default within
    # the two-term bound of 2.
    checks = [("auto", 0.0)] if panels == 2 else [("f32", REL_TOL), ("auto", REL_TOL_TWO_TERMS)]
    for act, tol in checks:
        base, err = s.logits(1, model, act, True, os.path.join(s.dir, "s1.f32"))
        if not s.c.check(group, "--act %s: decode logits at N=1" % act, base is not None, err):
            continue
        for n in ranks[1:]:
            got, err = s.logits(n, model, act, True, os.path.join(s.dir, "s%d.f32" % n))
            ok = got is not None and got.shape == base.shape
            rel = np.linalg.norm(got - base, axis=1) / np.linalg.norm(base, axis=1) if ok else np.array([np.inf])
            s.c.check(group, "--act %s: decode logits at N=%d within %g relative of one rank's (worst %.2e)" %
                      (act, n, tol, rel.max()), ok and rel.max() <= tol, err)


def unpanelled_f32(src, dst):
    """Container src rewritten as dst with every Q8_ROW matrix dequantized (spec 6.1) to F32 and every matrix
    in column panels [P, rows, w] put back as [rows, P·w] (ARCHITECTURES.md §6), through the independent
    reader and writer of tests/."""
    qf = spec_reader.read(src)
    meta = [spec_writer.meta_entry(e.key, e.type_id, None, raw_value=bytes(e.raw)) for e in qf.meta_entries]
    tensors = []
    for t in qf.tensors.values():
        if t.dtype != "Q8_ROW":
            tensors.append(spec_writer.TensorDef(t.name, t.dtype_id, t.shape, bytes(t.raw)))
            continue
        v = t.dequantize()
        if len(t.shape) == 3:
            p, r, w = t.shape
            v = v.transpose(1, 0, 2).reshape(r, p * w)
        tensors.append(spec_writer.TensorDef(t.name, "F32", v.shape, np.ascontiguousarray(v, "<f4").tobytes()))
    spec_writer.write(dst, spec_writer.build(meta, tensors, alignment=qf.header["alignment"]))


def shard_one_process(s, group, name, cfg):
    """One process runs a --shards 4 container as the same weights unpanelled: F16 (the same values as
    --f16 writes) and Q8_ROW (against its own weights dequantized to F32 and unpanelled, --act f32) within
    float summation order (1e-5)."""
    if not s.c.want(group):
        return
    f32 = s.model(name, cfg)
    paths = {how: os.path.join(s.dir, "%s-%s.qmap" % (name, how)) for how in ("f16", "f16-s4", "q8-s4", "q8-s4-deq")}
    for how, opts in (("f16", ["--f16"]), ("f16-s4", ["--f16", "--shards", "4"]), ("q8-s4", ["--q8", "--shards", "4"])):
        r = run([s.a.qmap, "quantize", *opts, f32, "-o", paths[how], "--quiet"])
        s.c.check(group, "quantize %s" % " ".join(opts), r.returncode == 0, r.stderr[-300:])
    unpanelled_f32(paths["q8-s4"], paths["q8-s4-deq"])
    lg = {}
    for how in paths:
        lg[how], err = s.logits(1, paths[how], "f32", False, os.path.join(s.dir, "one-%s.f32" % how))
        if not s.c.check(group, "%s: logits in one process" % how, lg[how] is not None, err):
            return
    for a, b, what in (("f16-s4", "f16", "F16 --shards 4 = F16 as stored"),
                       ("q8-s4", "q8-s4-deq", "Q8_ROW --shards 4 = its weights dequantized and unpanelled")):
        rel = float(np.abs(lg[a] - lg[b]).max() / np.abs(lg[b]).max())
        s.c.check(group, "%s, one process, within float summation order (1e-5; %.2e)" % (what, rel), rel <= 1e-5)


def shard_cases(s):
    for fam, cfg in (("llama", LLAMA_WIDE), ("gpt2", GPT2_WIDE)):
        for n, ranks in ((4, (1, 2, 4)), (2, (1, 2))):
            model = s.model("%s_wide_s%d" % (fam, n), cfg, ["--shards", str(n)])
            shard_greedy_and_logits(s, "shards-%s-q8-s%d" % (fam, n), model, ranks, n)
        shard_one_process(s, "shards-one-process-" + fam, fam + "_wide", cfg)

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--qmap", required=True)
    ap.add_argument("--qmap-mpi", required=True)
    ap.add_argument("--tp-logits", required=True)
    ap.add_argument("--mpirun", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("-k", default="", help="run only the groups whose name contains this")
    a = ap.parse_args()
    for k in ("qmap", "qmap_mpi", "tp_logits", "workdir"):
        setattr(a, k, os.path.abspath(getattr(a, k)))
    sys.exit(Suite(a).main())


if __name__ == "__main__":
    main()
