/* qmap_mpi.c — qmap-mpi: qmap run, qmap perplexity and qmap bench with a decoder LM split across the
 * ranks of an MPI job (tensor parallel: runtime/qr_shard.h). Every rank maps the same container and runs
 * the same command on its part; rank 0 prints, the others are silent.
 *
 *   mpirun -np N qmap-mpi run MODEL.qmap -p PROMPT -n 64 --temp 0
 *   mpirun -np N qmap-mpi perplexity MODEL.qmap -f TEXT
 *   mpirun -np N qmap-mpi bench MODEL.qmap -p 128 -n 64 -r 3
 *   mpirun -np N qmap-mpi allreduce [FLOATS [CALLS]]
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_tp.h"
#include "cli.h"
#include "qm_reader.h"
#include "tp.h"

/* A collective that waits this long means a rank is gone (QMAP_MPI_TIMEOUT overrides; 0 = no watchdog). */
#define TIMEOUT_DEFAULT_S 60

static void usage(FILE *fp)
{
    fprintf(fp,
            "usage: mpirun -np N qmap-mpi run MODEL.qmap [qmap run options]\n"
            "       mpirun -np N qmap-mpi perplexity MODEL.qmap -f TEXT [qmap perplexity options]\n"
            "       mpirun -np N qmap-mpi bench MODEL.qmap [-p 128] [-n 64] [-r 3] [-t T] [--json]\n"
            "       mpirun -np N qmap-mpi allreduce [FLOATS [CALLS]]\n"
            "\n"
            "Runs a decoder LM (gpt2, gpt_neo, llama) tensor-parallel over N MPI ranks: each rank maps the same\n"
            "container and holds 1/N of every layer's attention heads (and KV heads and their cache), of the FFN\n"
            "units and of the vocabulary; an MPI_Allreduce after attention and after the FFN of every layer and\n"
            "an MPI_Allgatherv of the logits per token join them. N must divide the heads, the KV heads and the\n"
            "FFN size. MODEL.qmap comes right after the command; the options are those of qmap run / qmap\n"
            "perplexity (see 'qmap run --help'), given to every rank alike. Rank 0 prints; the others print\n"
            "nothing (QMAP_MPI_VERBOSE=1 keeps their stderr). -t defaults to the CPUs a rank may run on: one\n"
            "core when mpirun binds ranks to cores (its default up to 2 ranks), every CPU with --oversubscribe.\n"
            "Q8_ROW with int8 activations (the default --act auto): where ranks share a panel's columns (the\n"
            "attention output and the FFN down projection, unless they are in column panels the ranks share out\n"
            "whole: qmap quantize --shards N writes both so for N ranks, or any count dividing N, and each rank\n"
            "then maps only its own panels) an MPI_MAX all-reduce per product joins their int8 scales, so each\n"
            "rank's int8 activations are one process's. Logits equal one process's to 1e-5 (F32, F16, --act\n"
            "f32 and int8) or 1e-4 (two int8 terms: a last-bit difference from the other order of the sums\n"
            "can move a value of the fine second term across a rounding boundary).\n"
            "\n"
            "bench times prompt processing and decode as qmap bench MODEL does, on the ranks' parts, and\n"
            "prints beside them the all-reduces and gathers per token (count, bytes, latency in the runs and\n"
            "alone), each rank's compute per token and PSS/RSS of its mapping, and the model of multi-host\n"
            "speed: per token, the slowest rank's compute + 2 x layers x the all-reduce latency + the logits\n"
            "gather's ('qmap-mpi bench --help' lists its options and --json's fields).\n"
            "\n"
            "allreduce times CALLS (default 2000) in-place MPI_Allreduce sums of FLOATS (default 2048: a 1.1B\n"
            "Llama's hidden vector) the way a decode step calls them, and prints the mean and median latency\n"
            "per call: a decode step makes 2 x layers of them, so this is the link's cost per token.\n"
            "\n"
            "At start the ranks compare a fingerprint of the container (XXH3-64 of its header, metadata and\n"
            "tensor table, which holds every tensor's checksum) and all exit 1 if any differs.\n"
            "\n"
            "environment:\n"
            "  QMAP_MPI_TIMEOUT=S  a rank waiting S seconds in one collective exits 1 (default %d; 0: never)\n"
            "  QMAP_MPI_STATS=1    rank 0 prints each rank's all-reduce and gather counts, bytes and mean\n"
            "                      latency, and the largest PSS/RSS of its mapping of MODEL.qmap\n"
            "exit status: 0 done, 1 an error (on any rank), 2 usage error\n",
            TIMEOUT_DEFAULT_S);
}

/* XXH3-64 of the container's bytes before its tensor data (header, metadata, tensor table with every
 * tensor's checksum), mixed with the file size; 0 with *ok = 0 if the file does not open. */
static uint64_t container_fingerprint(const char *path, int *ok, char *msg, size_t msg_size)
{
    qm_file *f = NULL;
    qm_error err;
    if (qm_open(path, &f, &err) != QM_OK) {
        snprintf(msg, msg_size, "%s", err.message);
        *ok = 0;
        return 0;
    }
    const qm_header_info *h = qm_file_header(f);
    uint64_t fp = qm_checksum(qm_file_bytes(f), (size_t)h->data_offset) ^ (h->file_size * 0x9E3779B97F4A7C15ull);
    qm_close(f);
    *ok = 1;
    return fp;
}

/* Every rank's fingerprint of `path` compared; 0 if all ranks opened the same container. Rank 0 says
 * what differs. */
static int check_same_container(const tp_ctx *ctx, const char *path)
{
    char msg[700] = "";
    int ok;
    uint64_t fp = container_fingerprint(path, &ok, msg, sizeof msg);
    /* max of fp and of ~fp: the largest and the smallest fingerprint in one call */
    uint64_t v[2] = { fp, ~fp }, m[2];
    int all_ok;
    if (MPI_Allreduce(v, m, 2, MPI_UINT64_T, MPI_MAX, ctx->comm) != MPI_SUCCESS ||
        MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, ctx->comm) != MPI_SUCCESS) {
        fprintf(stderr, "qmap-mpi: rank %d: MPI_Allreduce failed comparing the containers\n", ctx->rank);
        return 1;
    }
    if (!ok) fprintf(stderr, "qmap-mpi: rank %d: %s\n", ctx->rank, msg);
    if (!all_ok) {
        if (ctx->rank == 0 && ok) fprintf(stderr, "qmap-mpi: %s: another rank cannot open it\n", path);
        return 1;
    }
    if (m[0] != ~m[1]) {
        if (ctx->rank == 0)
            fprintf(stderr, "qmap-mpi: %s is not the same container on every rank (fingerprints from %016" PRIx64
                    " to %016" PRIx64 "; rank 0 has %016" PRIx64 "): every rank must map the same file\n",
                    path, ~m[1], m[0], fp);
        return 1;
    }
    return 0;
}

/* Rank 0 prints every rank's counters (QMAP_MPI_STATS=1). Collective. */
static void print_stats(const tp_ctx *ctx)
{
    enum { K = 3 * TP_N_COLL + 2 };   /* calls, floats, seconds of each collective; PSS, RSS */
    double mine[K];
    for (int c = 0; c < TP_N_COLL; c++) {
        mine[3 * c] = (double)ctx->coll[c].calls;
        mine[3 * c + 1] = (double)ctx->coll[c].floats;
        mine[3 * c + 2] = ctx->coll[c].s;
    }
    mine[K - 2] = (double)ctx->max_pss_kb;
    mine[K - 1] = (double)ctx->max_rss_kb;
    double *all = ctx->rank == 0 ? calloc((size_t)ctx->size * K, sizeof *all) : NULL;
    if (ctx->rank == 0 && !all) return;
    MPI_Gather(mine, K, MPI_DOUBLE, all, K, MPI_DOUBLE, 0, ctx->comm);
    for (int r = 0; ctx->rank == 0 && r < ctx->size; r++) {
        const double *a = all + (size_t)r * K;
        fprintf(stderr, "qmap-mpi stats: rank %d:", r);
        for (int c = 0; c < TP_N_COLL; c++) {
            const double calls = a[3 * c];
            fprintf(stderr, " %.0f %s calls of %.0f B (%.1f us each),", calls, TP_COLL_LABEL[c],
                    calls ? a[3 * c + 1] * 4 / calls : 0.0, calls ? a[3 * c + 2] / calls * 1e6 : 0.0);
        }
        fprintf(stderr, " mapping PSS %.1f MB RSS %.1f MB\n", a[K - 2] / 1024, a[K - 1] / 1024);
    }
    free(all);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* qmap-mpi allreduce: the latency of one decode step's all-reduce on this job's ranks and links. */
static int bench_allreduce(int argc, char **argv, int rank, int size)
{
    long floats = argc >= 3 ? atol(argv[2]) : 2048, calls = argc >= 4 ? atol(argv[3]) : 2000;
    if (floats < 1 || floats > (1L << 28) || calls < 1 || calls > 10000000) {
        if (rank == 0) usage(stderr);
        return 2;
    }
    float *buf = calloc((size_t)floats, sizeof *buf);
    double *t = calloc((size_t)calls, sizeof *t);
    if (!buf || !t) return 1;
    for (int warm = 0; warm < 50; warm++)
        MPI_Allreduce(MPI_IN_PLACE, buf, (int)floats, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    int rc = 0;
    for (long i = 0; i < calls && rc == 0; i++) {
        double t0 = MPI_Wtime();
        if (MPI_Allreduce(MPI_IN_PLACE, buf, (int)floats, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) != MPI_SUCCESS) rc = 1;
        t[i] = MPI_Wtime() - t0;
    }
    double sum = 0;
    for (long i = 0; i < calls; i++) sum += t[i];
    qsort(t, (size_t)calls, sizeof *t, cmp_double);
    if (rank == 0 && rc == 0)
        printf("allreduce: %d ranks, %ld floats (%ld B) per call, %ld calls: mean %.1f us, median %.1f us, "
               "p90 %.1f us\n", size, floats, floats * 4, calls, sum / (double)calls * 1e6, t[calls / 2] * 1e6,
               t[calls * 9 / 10] * 1e6);
    free(buf);
    free(t);
    return rc;
}

static int env_int(const char *name, int def)
{
    const char *s = getenv(name);
    return s && *s ? atoi(s) : def;
}

int main(int argc, char **argv)
{
    /* the session's worker threads and the watchdog never call MPI: only the main thread does */
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    /* errors come back as codes (a dead peer fails the collective where the transport can tell) */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (argc >= 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        if (rank == 0) usage(stdout);
        MPI_Finalize();
        return 0;
    }
    if (argc >= 2 && !strcmp(argv[1], "allreduce")) {
        int size;
        MPI_Comm_size(MPI_COMM_WORLD, &size);
        int rc = bench_allreduce(argc, argv, rank, size);
        MPI_Finalize();
        return rc;
    }
    const bool is_run = argc >= 3 && !strcmp(argv[1], "run"), is_ppl = argc >= 3 && !strcmp(argv[1], "perplexity");
    const bool is_bench = argc >= 2 && !strcmp(argv[1], "bench");
    if ((!is_run && !is_ppl && !is_bench) || (!is_bench && argv[2][0] == '-')) {
        if (rank == 0) usage(stderr);
        MPI_Finalize();
        return 2;
    }
    /* rank 0 speaks for the job */
    if (rank != 0 && !freopen("/dev/null", "w", stdout)) return 1;
    if (rank != 0 && env_int("QMAP_MPI_VERBOSE", 0) == 0 && !freopen("/dev/null", "w", stderr)) return 1;
    tp_bench_cfg bench = { 0 };
    if (is_bench) {
        /* every rank parses the same argv: a usage error or --help ends every rank alike, before any collective */
        int prc = tp_bench_parse(argc - 1, argv + 1, &bench);
        if (prc != 0) {
            MPI_Finalize();
            return prc == 1 ? 0 : 2;
        }
    }

    tp_ctx ctx;
    if (tp_init(&ctx, MPI_COMM_WORLD, env_int("QMAP_MPI_TIMEOUT", TIMEOUT_DEFAULT_S)) != 0) {
        fprintf(stderr, "qmap-mpi: rank %d: out of memory or no watchdog thread\n", rank);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    const char *path = is_bench ? bench.model : argv[2];
    if (check_same_container(&ctx, path) != 0) {
        tp_free(&ctx);
        MPI_Finalize();
        return 1;
    }
    const bool stats = env_int("QMAP_MPI_STATS", 0) != 0;
    ctx.model_path = path;
    ctx.measure_pss = stats;
    qmap_shard shard = tp_shard(&ctx);
    int rc = is_bench ? tp_bench_run(&bench, &ctx)
             : is_run ? cmd_run_shard(argc - 1, argv + 1, &shard) : cmd_perplexity_shard(argc - 1, argv + 1, &shard);
    fflush(stdout);
    fflush(stderr);
    if (rc != 0) {
        /* a rank that failed alone would leave the others waiting in a collective: end the job */
        MPI_Abort(MPI_COMM_WORLD, rc);
    }
    if (stats) print_stats(&ctx);
    tp_free(&ctx);
    MPI_Finalize();
    return 0;
}
