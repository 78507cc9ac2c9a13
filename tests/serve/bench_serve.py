#!/usr/bin/env python3
"""qmap serve throughput (a benchmark, not a test): for each --parallel P, P streaming clients each generate
--tokens tokens greedily at once; prints aggregate and per-stream tokens/s, time to first token and the
longest gap between two tokens of a stream. Then one long prompt arriving while P-1 streams decode: its
time to first token beside its time alone, and the others' longest gap meanwhile.
usage: bench_serve.py --qmap build/qmap --model M.qmap [--parallel 1,4,8] [--tokens 64] [-t THREADS]"""
import argparse
import http.client
import json
import re
import signal
import subprocess
import threading
import time


def start(a, p):
    proc = subprocess.Popen([a.qmap, "serve", a.model, "--port", "0", "--parallel", str(p), "-t", str(a.threads), "-q"],
                            stdout=subprocess.PIPE, text=True)
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
          f"TTFT max {max(o['ttft'] for o in out) * 1e3:.0f} ms, longest gap {max(o['max_gap'] for o in out) * 1e3:.0f} ms")
    proc.send_signal(signal.SIGTERM)
    proc.wait()


def run_long_prompt(a, p):
    proc, port = start(a, p)
    long_prompt = "And God said, Let there be light: and there was light. " * a.long_repeat
    alone = []
    stream(port, long_prompt, 4, alone)
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
    print(f"long prompt ({a.long_repeat * 13} words) with {p - 1} streams decoding: TTFT {late[0]['ttft'] * 1e3:.0f} ms "
          f"(alone {alone[0]['ttft'] * 1e3:.0f} ms); the others' longest gap meanwhile {max(during or [0]) * 1e3:.0f} ms")
    proc.send_signal(signal.SIGTERM)
    proc.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--qmap", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--parallel", default="1,4,8")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--long-repeat", type=int, default=30)
    ap.add_argument("-t", "--threads", type=int, default=0)
    a = ap.parse_args()
    ps = [int(x) for x in a.parallel.split(",")]
    for p in ps:
        run_parallel(a, p)
    run_long_prompt(a, max(ps))


if __name__ == "__main__":
    main()
