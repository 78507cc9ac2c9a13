#!/usr/bin/env python3
"""qmap serve throughput (a benchmark, not a test): for each --parallel P, P streaming clients each generate
--tokens tokens greedily at once; prints aggregate and per-stream tokens/s, time to first token and the
longest gap between two tokens of a stream. Then one long prompt arriving while P-1 streams decode: its
time to first token beside its time alone, and the others' longest gap meanwhile. The host may be shared:
each figure is printed with the 1-minute load average read as it was measured.
usage: bench_serve.py --qmap build/qmap --model M.qmap [--parallel 1,4,8] [--tokens 64] [-t THREADS]
                      [--chunk N] [--long-tokens 512]"""
import argparse
import http.client
import json
import re
import signal
import subprocess
import threading
import time


def load_avg():
    with open("/proc/loadavg") as f:
        return f"load {f.read().split()[0]}"


def start(a, p):
    cmd = [a.qmap, "serve", a.model, "--port", "0", "--parallel", str(p), "-t", str(a.threads), "-q"]
    if a.chunk:
        cmd += ["--chunk", str(a.chunk)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    port = int(re.search(r":(\d+) ", proc.stdout.readline()).group(1))
    return proc, port


def stream(port, prompt, n, out):
    t0 = time.monotonic()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    c.request("POST", "/v1/completions", json.dumps({"prompt": prompt, "max_tokens": n, "temperature": 0,
                                                     "stream": True, "stream_options": {"include_usage": True}}),
              {"Content-Type": "application/json"})
    r = c.getresponse()
    times, tokens = [], 0
    for line in r.fp:
        if line.startswith(b"data: [DONE]"):
            break
        if not line.startswith(b"data: "):
            continue
        ev = json.loads(line[6:])
        if ev.get("usage"):
            tokens = ev["usage"]["completion_tokens"]
        elif ev["choices"] and ev["choices"][0]["text"]:
            times.append(time.monotonic())
    c.close()
    gaps = [b - a for a, b in zip(times, times[1:])]
    out.append({"ttft": times[0] - t0 if times else None, "tokens": tokens, "end": time.monotonic(), "start": t0,
                "max_gap": max(gaps) if gaps else 0, "times": times})


def run_parallel(a, p):
    proc, port = start(a, p)
    stream(port, "In the beginning", 8, [])   # warm the mapping
    out = []
    ts = [threading.Thread(target=stream, args=(port, "In the beginning", a.tokens, out)) for _ in range(p)]
    t0 = time.monotonic()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    wall = time.monotonic() - t0
    total = sum(o["tokens"] for o in out)
    per = sum(o["tokens"] / (o["end"] - o["start"]) for o in out) / len(out)
    print(f"parallel {p}: {total} tokens in {wall:.2f} s: aggregate {total / wall:.1f} tok/s, per stream {per:.1f} tok/s, "
          f"TTFT max {max(o['ttft'] for o in out) * 1e3:.0f} ms, longest gap {max(o['max_gap'] for o in out) * 1e3:.0f} ms "
          f"({load_avg()})", flush=True)
    proc.send_signal(signal.SIGTERM)
    proc.wait()


def run_long_prompt(a, p):
    proc, port = start(a, p)
    text = "And God said, Let there be light: and there was light. " * (a.long_tokens // 4)
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    c.request("POST", "/tokenize", json.dumps({"content": text, "add_special": True}), {"Content-Type": "application/json"})
    long_prompt = json.loads(c.getresponse().read())["tokens"][:a.long_tokens]
    c.close()
    alone = []
    stream(port, long_prompt, 4, alone)
    alone_load = load_avg()
    out = []
    busy = [threading.Thread(target=stream, args=(port, "In the beginning", a.tokens * 4, out)) for _ in range(p - 1)]
    for t in busy:
        t.start()
    time.sleep(0.5)
    late = []
    stream(port, long_prompt, 4, late)
    for t in busy:
        t.join()
    lo, hi = late[0]["start"], late[0]["start"] + (late[0]["ttft"] or 0)
    during = [b - x for o in out for x, b in zip(o["times"], o["times"][1:]) if x <= hi and b >= lo]
    print(f"long prompt ({len(long_prompt)} tokens) with {p - 1} streams decoding: TTFT {late[0]['ttft'] * 1e3:.0f} ms "
          f"({load_avg()}; alone {alone[0]['ttft'] * 1e3:.0f} ms, {alone_load}); the others' longest gap meanwhile "
          f"{max(during or [0]) * 1e3:.0f} ms", flush=True)
    proc.send_signal(signal.SIGTERM)
    proc.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--qmap", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--parallel", default="1,4,8")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--long-tokens", type=int, default=512)
    ap.add_argument("--chunk", type=int, default=0, help="qmap serve --chunk (0: its default)")
    ap.add_argument("--skip-parallel", action="store_true", help="only the long prompt")
    ap.add_argument("-t", "--threads", type=int, default=0)
    a = ap.parse_args()
    ps = [int(x) for x in a.parallel.split(",")]
    for p in ps if not a.skip_parallel else []:
        run_parallel(a, p)
    run_long_prompt(a, max(ps))


if __name__ == "__main__":
    main()
