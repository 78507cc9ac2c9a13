#!/usr/bin/python3
"""bench_quantize.py — `qmap quantize` throughput on a >= 1 GB F32 container in page cache.

Makes the container with tests/bench/bench_convert.py's Llama-shaped checkpoint (safetensors ->
`qmap convert`), then times `qmap quantize --q8` and `--f16` with 1 and 2 threads, interleaved, and prints
GB/s of input (median [min, max] of --runs). Output is fsync'd by the writer like every qmap write; a
plain copy + fsync of the input is timed in the same run as the reference point. Not a test.

    /usr/bin/python3 tests/bench/bench_quantize.py --qmap build/qmap --dir build/bench [--runs 5]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_convert  # noqa: E402  (same folder)
import numpy as np  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--qmap", default="build/qmap")
    ap.add_argument("--dir", default="build/bench")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--gb", type=float, default=1.3)
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    src = os.path.join(a.dir, "quant-in.safetensors")
    shapes, config = bench_convert.llama_shapes(a.gb * 1e9)
    rng = np.random.default_rng(1)
    bench_convert.write_safetensors(src, [(n, rng.standard_normal(s, dtype=np.float32) * 0.02) for n, s in shapes])
    with open(os.path.join(a.dir, "config.json"), "w") as f:
        json.dump(config, f)
    inp = os.path.join(a.dir, "quant-in.qmap")
    subprocess.run([a.qmap, "convert", src, "-o", inp, "--quiet", "--no-tokenizer"], check=True)
    os.unlink(src)
    size = os.path.getsize(inp)
    out = os.path.join(a.dir, "quant-out.qmap")
    cases = [("--q8", 1), ("--q8", 2), ("--f16", 1), ("--f16", 2)]
    times = {c: [] for c in cases}
    copies = []
    bench_convert.copy_file(inp, out, True)  # page cache warm
    for _ in range(a.runs):
        for scheme, threads in cases:
            t = time.perf_counter()
            subprocess.run([a.qmap, "quantize", scheme, inp, "-o", out, "--threads", str(threads), "--quiet"],
                           check=True)
            times[(scheme, threads)].append(time.perf_counter() - t)
        t = time.perf_counter()
        bench_convert.copy_file(inp, out + ".copy", True)
        copies.append(time.perf_counter() - t)
    print(f"input: {size / 1e9:.2f} GB F32 container; {a.runs} runs each, GB/s of input, median [min, max]")
    for (scheme, threads), ts in times.items():
        med = statistics.median(ts)
        print(f"quantize {scheme:5s} {threads} thread{'s' if threads > 1 else ' '}  {size / med / 1e9:6.2f} GB/s  "
              f"[{size / max(ts) / 1e9:.2f}, {size / min(ts) / 1e9:.2f}]")
    med = statistics.median(copies)
    print(f"copy + fsync (reference) {size / med / 1e9:6.2f} GB/s  [{size / max(copies) / 1e9:.2f}, "
          f"{size / min(copies) / 1e9:.2f}]")
    os.unlink(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
