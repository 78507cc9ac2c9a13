#!/usr/bin/env python3
"""qmap beside llama.cpp on the same weights, same host, same run (make bench-peer; issues 46 and 49).

    peer_llamacpp.py bench --qmap QMAP --llama-cpp DIR --models DIR [--threads 1,2] [--reps 3]
                           [--pairs q8,f16,f32] [--parallel 1,4,8] [--batched-threads LIST]
                           [-p 512] [--tg 128] [--npp 128] [--ntg 32] [--json OUT.json]
    peer_llamacpp.py check --qmap QMAP --llama-cpp DIR --models DIR [-n 16] [--prompt TEXT]

DIR (--llama-cpp) is a llama.cpp source tree built as mk/peer.mk builds it (tools in build/bin, the built
commit in COMMIT); --models holds the same random TinyLlama-1.1B-shape weights for both engines:
tinyllama-{q8,f16}.qmap and tinyllama-{q8_0,f16}.gguf, and the F32 pair tinyllama-f32.{qmap,gguf} for
`check` and, when it is there (make bench-peer PEER_KEEP_F32=1 keeps it), for bench.

bench runs the engines alternately on the same thread count and weights, and for tg/pp brackets every
llama.cpp run between two qmap runs (qmap, llama.cpp, qmap, llama.cpp, ..., qmap): a pair is one llama.cpp
run and the mean of the qmap runs on either side, and it is *steady* when those two runs agree within 10%,
both in the memory bandwidth qmap bench read beside them and in their tokens/s (the host did not change
state around the llama.cpp run; on the hosts this was written on it swings 1.5-2x within minutes, and a
state can change between a limit reading and the run beside it). Each figure is the median over the steady pairs
and each ratio the median of their ratios, with the count of pairs left out as unsteady (all pairs are used,
and the table says so, when none is steady). Sections:
  - tg128 and pp512: `qmap bench -r 1` vs `llama-bench -r 1` (each after its own warm-up), Q8_ROW vs Q8_0,
    F16 vs F16 and F32 vs F32 (--pairs picks; by default every pair whose two files are in --models, the
    output names any left out): tokens/s, and for tg the GB/s of weights read: the bytes the file stores for the
    matrices one token reads (every matrix of rank >= 2 but the token embedding, of which a token reads
    one row) divided by the time of one token;
  - batched decode: `qmap bench --parallel` vs `llama-batched-bench` (-npp 128 -ntg 32, P sequences each):
    aggregate tg tokens/s and its ratio to one sequence's, on the Q8 pair (when the run has it);
  - every pair in run order with the load average (1 min) before and after it.
check runs both engines greedy on the F32 files and passes when llama-simple's output is, byte for byte,
the pieces of the prompt and the 16 tokens `qmap run --temp 0` generated (exit status 1 otherwise).
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

PAIRS = {  # --pairs name: (label, qmap file, GGUF file), in run order whatever order --pairs gives
    "q8": ("Q8_ROW vs Q8_0", "tinyllama-q8.qmap", "tinyllama-q8_0.gguf"),
    "f16": ("F16 vs F16", "tinyllama-f16.qmap", "tinyllama-f16.gguf"),
    "f32": ("F32 vs F32", "tinyllama-f32.qmap", "tinyllama-f32.gguf"),
}
BATCHED_PAIR = PAIRS["q8"]
F32_PAIR = PAIRS["f32"]


def load_average():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def run(cmd, **kw):
    p = subprocess.run([str(c) for c in cmd], capture_output=True, **kw)
    if p.returncode != 0:
        err = p.stderr.decode(errors="replace") if isinstance(p.stderr, bytes) else p.stderr
        raise SystemExit(f"{' '.join(map(str, cmd))}: exit {p.returncode}\n{err[-3000:]}")
    return p


def int_list(s):
    return [int(x) for x in s.split(",") if x]


# ---- bytes of the matrices a token reads --------------------------------------------------------------

def matrix_bytes(named_sizes, embedding, head):
    """Bytes of every matrix but the token embedding (one row a token), which is the head when tied."""
    total = sum(size for name, ndim, size in named_sizes if ndim >= 2 and name != embedding)
    if not any(name == head for name, _, _ in named_sizes):
        total += sum(size for name, ndim, size in named_sizes if name == embedding)
    return total


def qmap_matrix_bytes(qmap, path):
    info = json.loads(run([qmap, "inspect", "--json", path], text=True).stdout)
    sizes = [(t["name"], len(t["shape"]), t["size"]) for t in info["tensors"]]
    return matrix_bytes(sizes, "tok_embd.weight", "output.weight")


def gguf_matrix_bytes(llama_cpp, path):
    sys.path.insert(0, str(Path(llama_cpp) / "gguf-py"))
    import gguf
    reader = gguf.GGUFReader(path, "r")
    sizes = [(t.name, len(t.shape), int(t.n_bytes)) for t in reader.tensors]
    return matrix_bytes(sizes, "token_embd.weight", "output.weight")


# ---- one measurement of each engine ----------------------------------------------------------------------

def qmap_pp_tg(a, model, threads):
    out = run([a.qmap, "bench", model, "-p", a.pp, "-n", a.tg, "-r", 1, "-t", threads, "--json"], text=True)
    res = {}
    for row in json.loads(out.stdout):
        kind = "pp" if row["test"].startswith("pp") else "tg"
        res[kind] = row["tokens_per_second"]["median"]
        if kind == "tg":
            res["limit_gbs"] = max(row["bandwidth_anonymous"]["median"], row["bandwidth_file_mapping"]["median"])
    return res


def llama_pp_tg(a, model, threads):
    out = run([a.bin / "llama-bench", "-m", model, "-p", a.pp, "-n", a.tg, "-r", 1, "-t", threads, "-o", "json"],
              text=True)
    res = {}
    for row in json.loads(out.stdout):
        kind = "pp" if row["n_prompt"] > 0 else "tg"
        res[kind] = row["avg_ts"]
    return res


def qmap_batched(a, model, threads):
    out = run([a.qmap, "bench", model, "--parallel", a.parallel, "-p", a.npp, "-n", a.ntg, "-r", 1,
               "-t", threads, "--json"], text=True)
    return {row["P"]: {"pp": row["pp_tok_s"], "tg": row["tg_tok_s"]} for row in json.loads(out.stdout)}


def llama_batched(a, model, threads):
    ps = int_list(a.parallel)
    ctx = max(ps) * (a.npp + a.ntg)
    out = run([a.bin / "llama-batched-bench", "-m", model, "-c", ctx, "-b", 2048, "-ub", 512, "-npp", a.npp,
               "-ntg", a.ntg, "-npl", a.parallel, "-t", threads, "-tb", threads, "--output-format", "jsonl"],
              text=True)
    res = {}
    for line in (out.stdout + "\n" + out.stderr).splitlines():
        if line.startswith("{") and '"speed_tg"' in line:
            row = json.loads(line)
            res[row["pl"]] = {"pp": row["speed_pp"], "tg": row["speed_tg"]}
    if sorted(res) != sorted(ps):
        raise SystemExit(f"llama-batched-bench gave P = {sorted(res)}, asked for {ps}")
    return res


# Two qmap runs whose bandwidth readings, or whose tok/s, are further apart than this did not see one host
# state, and neither may the llama.cpp run between them.
STEADY_SPREAD = 0.10


def bracketed(a, label, threads, qmap_model, llama_model, log):
    """a.reps pairs of tg/pp: each llama.cpp run between two qmap runs, the qmap figures their mean."""
    q_prev = qmap_pp_tg(a, qmap_model, threads)
    for _ in range(a.reps):
        before = load_average()
        l = llama_pp_tg(a, llama_model, threads)
        q_next = qmap_pp_tg(a, qmap_model, threads)
        after = load_average()
        limits, tgs = (q_prev["limit_gbs"], q_next["limit_gbs"]), (q_prev["tg"], q_next["tg"])
        record(log, "pp_tg", label, threads, {k: (q_prev[k] + q_next[k]) / 2 for k in q_prev}, l, before, after,
               qmap_before=q_prev, qmap_after=q_next,
               steady=all(max(v) <= (1 + STEADY_SPREAD) * min(v) for v in (limits, tgs)))
        q_prev = q_next


def alternate(a, section, label, threads, qmap_fn, qmap_model, llama_fn, llama_model, log):
    """One pair: qmap then llama.cpp, the load average around it."""
    before = load_average()
    q = qmap_fn(a, qmap_model, threads)
    l = llama_fn(a, llama_model, threads)
    return record(log, section, label, threads, q, l, before, load_average())


def record(log, section, label, threads, q, l, before, after, **more):
    """One pair into the log and onto stderr as it happens."""
    entry = {"section": section, "pair": label, "threads": threads, "qmap": q, "llama_cpp": l,
             "load_before": before, "load_after": after, "time": time.strftime("%H:%M:%S", time.gmtime()), **more}
    log.append(entry)
    print(f"  [{entry['time']}] {section} {label} t={threads}: {pair_summary(entry)}; "
          f"load {before:.2f} -> {after:.2f}", file=sys.stderr, flush=True)
    return entry


# ---- summaries -----------------------------------------------------------------------------------------

def med(xs):
    return statistics.median(xs) if xs else float("nan")


def summarize_pp_tg(a, pairs, log, gb):
    rows = []
    for label, qf, lf in pairs:
        for t in a.threads:
            every = [e for e in log if e["section"] == "pp_tg" and e["pair"] == label and e["threads"] == t]
            runs = [e for e in every if e["steady"]] or every
            for test in ("tg", "pp") if a.pp else ("tg",):
                qs = [e["qmap"][test] for e in runs]
                ls = [e["llama_cpp"][test] for e in runs]
                ratios = [q / l for q, l in zip(qs, ls)]
                row = {"pair": label, "threads": t, "test": f"{test}{a.tg if test == 'tg' else a.pp}",
                       "qmap_tok_s": med(qs), "llama_cpp_tok_s": med(ls), "ratio": med(ratios),
                       "ratio_min": min(ratios), "ratio_max": max(ratios), "pairs": len(runs),
                       "unsteady_left_out": len(every) - len(runs) if runs is not every else 0,
                       "all_unsteady": runs is every and not any(e["steady"] for e in every),
                       "qmap_samples": qs, "llama_cpp_samples": ls}
                if test == "tg":
                    row["qmap_gb_s"] = med(qs) * gb[qf] / 1e9
                    row["llama_cpp_gb_s"] = med(ls) * gb[lf] / 1e9
                    row["qmap_limit_gb_s"] = med([e["qmap"]["limit_gbs"] for e in runs])
                rows.append(row)
    return rows


def summarize_batched(a, log):
    rows = []
    ps = int_list(a.parallel)
    for t in a.batched_threads:
        runs = [e for e in log if e["section"] == "batched" and e["threads"] == t]
        for p in ps:
            row = {"threads": t, "P": p, "pairs": len(runs)}
            for eng in ("qmap", "llama_cpp"):
                tg = [e[eng][p]["tg"] for e in runs]
                row[f"{eng}_tg_tok_s"] = med(tg)
                row[f"{eng}_pp_tok_s"] = med([e[eng][p]["pp"] for e in runs])
                row[f"{eng}_tg_x_p1"] = med([e[eng][p]["tg"] / e[eng][ps[0]]["tg"] for e in runs])
            row["ratio"] = med([e["qmap"][p]["tg"] / e["llama_cpp"][p]["tg"] for e in runs])
            rows.append(row)
    return rows


def fmt(x, nd=1):
    return "—" if x is None or x != x else f"{x:.{nd}f}"


def print_pp_tg(rows, gb):
    print("### tg and pp: qmap bench vs llama-bench (median over steady bracketed pairs)\n")
    print("Matrix bytes a token reads: " + ", ".join(f"{k} {v / 1e9:.3f} GB" for k, v in gb.items()) + "\n")
    print("| weights | threads | test | qmap tok/s | llama.cpp tok/s | qmap GB/s | llama.cpp GB/s "
          "| qmap / llama.cpp [min–max] | qmap's limit reading GB/s | pairs (unsteady left out) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        kept = f"{r['pairs']} (none steady: all used)" if r["all_unsteady"] else \
            f"{r['pairs']} ({r['unsteady_left_out']})"
        print(f"| {r['pair']} | {r['threads']} | {r['test']} | {fmt(r['qmap_tok_s'], 2)} | "
              f"{fmt(r['llama_cpp_tok_s'], 2)} | {fmt(r.get('qmap_gb_s'))} | {fmt(r.get('llama_cpp_gb_s'))} | "
              f"**{fmt(r['ratio'], 2)}** [{fmt(r['ratio_min'], 2)}–{fmt(r['ratio_max'], 2)}] | "
              f"{fmt(r.get('qmap_limit_gb_s'))} | {kept} |")
    print()


def print_batched(a, rows):
    print(f"### Batched decode, {BATCHED_PAIR[0]}: qmap bench --parallel vs llama-batched-bench "
          f"(-npp {a.npp} -ntg {a.ntg}; aggregate tok/s, median over alternating pairs)\n")
    print("| threads | P | qmap tg | llama.cpp tg | qmap / llama.cpp | qmap tg × P1 | llama.cpp tg × P1 "
          "| qmap pp | llama.cpp pp |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['threads']} | {r['P']} | {fmt(r['qmap_tg_tok_s'], 2)} | {fmt(r['llama_cpp_tg_tok_s'], 2)} | "
              f"**{fmt(r['ratio'], 2)}** | {fmt(r['qmap_tg_x_p1'], 2)} | {fmt(r['llama_cpp_tg_x_p1'], 2)} | "
              f"{fmt(r['qmap_pp_tok_s'])} | {fmt(r['llama_cpp_pp_tok_s'])} |")
    print()


def pair_summary(e):
    if e["section"] == "pp_tg":
        return (f"tg {fmt(e['qmap_before']['tg'], 2)}, {fmt(e['llama_cpp']['tg'], 2)}, "
                f"{fmt(e['qmap_after']['tg'], 2)} (limit {fmt(e['qmap_before']['limit_gbs'])}, "
                f"{fmt(e['qmap_after']['limit_gbs'])} GB/s: {'steady' if e['steady'] else 'UNSTEADY'}), "
                f"pp {fmt(e['qmap'].get('pp'))} / {fmt(e['llama_cpp'].get('pp'))}")
    return ", ".join(f"P{p} tg {fmt(e['qmap'][p]['tg'], 2)} / {fmt(e['llama_cpp'][p]['tg'], 2)}"
                     for p in sorted(e["qmap"]))


def print_pairs(log):
    print("### Every pair in run order (tg: qmap, llama.cpp, qmap tok/s; pp: qmap / llama.cpp; load average, 1 min)\n")
    print("| time (UTC) | section | weights | threads | figures | load before | load after |")
    print("|---|---|---|---|---|---|---|")
    for e in log:
        print(f"| {e['time']} | {e['section']} | {e['pair']} | {e['threads']} | {pair_summary(e)} | "
              f"{e['load_before']:.2f} | {e['load_after']:.2f} |")
    print()


def host_facts(a):
    cpu = "unknown"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    commit = (Path(a.llama_cpp) / "COMMIT").read_text().strip() if (Path(a.llama_cpp) / "COMMIT").exists() else "?"
    version = run([a.qmap, "--version"], text=True).stdout.strip().replace("\n", "; ")
    return {"cpu": cpu, "cpus": os.cpu_count(), "kernel": platform.release(), "llama_cpp_commit": commit,
            "qmap_version": version, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def pair_names(s):
    names = [x for x in s.split(",") if x]
    unknown = [x for x in names if x not in PAIRS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"pairs are {','.join(PAIRS)}, not {s!r}")
    return names


def missing_files(models, names):
    return [f for n in names for f in PAIRS[n][1:] if not (models / f).exists()]


def bench_pairs(a, models):
    """The pairs asked for (all must be there), or by default every pair whose two files are there."""
    if a.pairs:
        missing = missing_files(models, a.pairs)
        if missing:
            raise SystemExit(f"{models}: missing {', '.join(missing)} (make bench-peer makes them; "
                             f"the F32 pair only with PEER_KEEP_F32=1)")
        return [PAIRS[n] for n in PAIRS if n in a.pairs], []
    present = [n for n in PAIRS if not missing_files(models, [n])]
    absent = [n for n in PAIRS if n not in present]
    if not present:
        raise SystemExit(f"{models}: none of the pairs' files are there (make bench-peer makes them)")
    return [PAIRS[n] for n in present], absent


def bench(a):
    models = Path(a.models)
    pairs, absent = bench_pairs(a, models)
    skipped = [f"{PAIRS[n][0]} ({', '.join(missing_files(models, [n]))} not in {models})" for n in absent]
    if a.parallel and BATCHED_PAIR not in pairs:
        skipped.append(f"batched decode (it runs on the {BATCHED_PAIR[0]} pair, which this run leaves out)")
        a.parallel = ""
    for s in skipped:
        print(f"  left out: {s}", file=sys.stderr, flush=True)
    gb = {}
    for _, qf, lf in pairs:
        gb[qf] = qmap_matrix_bytes(a.qmap, models / qf)
        gb[lf] = gguf_matrix_bytes(a.llama_cpp, models / lf)
    facts = host_facts(a)
    log = []
    for t in a.threads:
        for label, qf, lf in pairs:
            bracketed(a, label, t, models / qf, models / lf, log)
    if a.parallel:
        label, qf, lf = BATCHED_PAIR
        for t in a.batched_threads:
            for _ in range(a.reps):
                alternate(a, "batched", label, t, qmap_batched, models / qf, llama_batched, models / lf, log)
    pp_tg = summarize_pp_tg(a, pairs, log, gb)
    batched = summarize_batched(a, log) if a.parallel else []
    print(f"## qmap beside llama.cpp ({facts['date']}; {facts['cpu']}, {facts['cpus']} CPUs; "
          f"llama.cpp {facts['llama_cpp_commit'][:10]}, CPU, native; {facts['qmap_version']})\n")
    for s in skipped:
        print(f"Left out: {s}.\n")
    print_pp_tg(pp_tg, gb)
    if batched:
        print_batched(a, batched)
    print_pairs(log)
    if a.json:
        doc = {"host": facts, "left_out": skipped, "matrix_bytes": gb, "pp_tg": pp_tg, "batched": batched,
               "pairs": [dict(e, qmap={str(k): v for k, v in e["qmap"].items()},
                              llama_cpp={str(k): v for k, v in e["llama_cpp"].items()}) for e in log]}
        Path(a.json).write_text(json.dumps(doc, indent=1) + "\n")
    return 0


# ---- check: greedy F32 output equal ---------------------------------------------------------------------

def piece_bytes(vocab, token_id):
    """The bytes llama.cpp's SPM vocabulary prints for a token (llama_token_to_piece, special=true)."""
    piece = vocab[token_id]
    if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
        return bytes([int(piece[3:5], 16)])
    return piece.replace("\u2581", " ").encode("utf-8")


def gguf_vocab(llama_cpp, path):
    sys.path.insert(0, str(Path(llama_cpp) / "gguf-py"))
    import gguf
    field = gguf.GGUFReader(path, "r").fields["tokenizer.ggml.tokens"]
    return [bytes(field.parts[i]).decode("utf-8") for i in field.data]


def check(a):
    models = Path(a.models)
    _, qf, lf = F32_PAIR
    q = json.loads(run([a.qmap, "run", models / qf, "-p", a.prompt, "-n", a.n, "--temp", 0, "--json", "-t", 2],
                       text=True).stdout)
    l = run([a.bin / "llama-simple", "-m", models / lf, "-n", a.n, a.prompt]).stdout
    vocab = gguf_vocab(a.llama_cpp, models / lf)
    ids = q["prompt_ids"] + q["ids"]
    expect = b"".join(piece_bytes(vocab, i) for i in ids) + b"\n"
    ok = l == expect and len(q["ids"]) == a.n
    print(f"prompt {a.prompt!r}: qmap ids {q['prompt_ids']} + {q['ids']}")
    print(f"qmap (as llama.cpp prints those ids): {expect!r}")
    print(f"llama-simple:                        {l!r}")
    print(f"greedy F32 continuation of {a.n} tokens: {'EQUAL' if ok else 'DIFFERENT'}")
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["bench", "check"])
    ap.add_argument("--qmap", required=True)
    ap.add_argument("--llama-cpp", required=True, help="the llama.cpp tree (tools in build/bin)")
    ap.add_argument("--models", required=True)
    ap.add_argument("--threads", type=int_list, default=[1, 2])
    ap.add_argument("--reps", type=int, default=3, help="pairs per row (tg/pp: llama.cpp runs, each between two qmap runs; default 3)")
    ap.add_argument("--pairs", type=pair_names,
                    help="bench: the weights to compare, of q8,f16,f32 (default: every pair whose files exist)")
    ap.add_argument("-p", "--pp", type=int, default=512)
    ap.add_argument("--tg", type=int, default=128)
    ap.add_argument("--parallel", default="1,4,8", help="sequences for batched decode; '' skips it")
    ap.add_argument("--batched-threads", type=int_list, help="thread counts of batched decode (default --threads)")
    ap.add_argument("--npp", type=int, default=128)
    ap.add_argument("--ntg", type=int, default=32)
    ap.add_argument("--json", help="also write every figure and pair to this file")
    ap.add_argument("-n", type=int, default=16, help="check: tokens to generate")
    ap.add_argument("--prompt", default="Once upon a time")
    a = ap.parse_args()
    a.bin = Path(a.llama_cpp) / "build" / "bin"
    a.batched_threads = a.batched_threads or a.threads
    return bench(a) if a.mode == "bench" else check(a)


if __name__ == "__main__":
    sys.exit(main())
