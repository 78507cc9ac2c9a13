/* tp.c — a qmap_shard over MPI: MPI_Allreduce (in place, f32 sum) after attention and after the FFN, MPI_MAX
 * of the int8 activation maxima of a matrix several ranks share the columns of,
 * MPI_Allgatherv of the vocabulary slices of the logits, each timed and watched. */
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tp.h"

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void *watchdog_main(void *arg)
{
    tp_ctx *ctx = arg;
    while (!atomic_load(&ctx->stop)) {
        int64_t since = atomic_load(&ctx->busy_since_ms);
        if (since && now_ms() - since > (int64_t)ctx->timeout_s * 1000) {
            fprintf(stderr, "qmap-mpi: rank %d: a collective has waited over %d s for the other ranks: one has "
                    "died or stopped; exiting\n", ctx->rank, ctx->timeout_s);
            _exit(1);
        }
        usleep(200 * 1000);
    }
    return NULL;
}

int tp_init(tp_ctx *ctx, MPI_Comm comm, int timeout_s)
{
    memset(ctx, 0, sizeof *ctx);
    ctx->comm = comm;
    MPI_Comm_rank(comm, &ctx->rank);
    MPI_Comm_size(comm, &ctx->size);
    ctx->counts = calloc((size_t)ctx->size, sizeof *ctx->counts);
    ctx->displs = calloc((size_t)ctx->size, sizeof *ctx->displs);
    if (!ctx->counts || !ctx->displs) return -1;
    ctx->timeout_s = timeout_s;
    atomic_init(&ctx->busy_since_ms, 0);
    atomic_init(&ctx->stop, false);
    if (timeout_s > 0) {
        if (pthread_create(&ctx->watchdog, NULL, watchdog_main, ctx) != 0) return -1;
        ctx->watchdog_running = true;
    }
    return 0;
}

void tp_free(tp_ctx *ctx)
{
    if (ctx->watchdog_running) {
        atomic_store(&ctx->stop, true);
        pthread_join(ctx->watchdog, NULL);
    }
    free(ctx->counts);
    free(ctx->displs);
}

static void count(tp_counter *c, size_t n, double t0)
{
    c->s += MPI_Wtime() - t0;
    c->calls++;
    c->floats += n;
}

/* An in-place MPI_Allreduce of n floats with `op`, watched, counted in ctx->coll[k]. */
static int watched_allreduce(tp_ctx *ctx, float *buf, size_t n, MPI_Op op, int k)
{
    if (n > INT_MAX) return -1;
    double t0 = MPI_Wtime();
    atomic_store(&ctx->busy_since_ms, now_ms());
    int rc = MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, op, ctx->comm);
    atomic_store(&ctx->busy_since_ms, 0);
    count(&ctx->coll[k], n, t0);
    return rc == MPI_SUCCESS ? 0 : -1;
}

static int tp_allreduce(void *p, float *buf, size_t n)
{
    return watched_allreduce(p, buf, n, MPI_SUM, TP_SUM);
}

static int tp_allreduce_max(void *p, float *buf, size_t n)
{
    return watched_allreduce(p, buf, n, MPI_MAX, TP_MAX);
}

static int tp_allgather(void *p, float *buf, size_t n)
{
    tp_ctx *ctx = p;
    if (n > INT_MAX) return -1;
    for (int r = 0; r < ctx->size; r++) {
        /* the split of qr_shard_begin: rank r holds [n·r/N, n·(r+1)/N) */
        size_t b = n * (size_t)r / (size_t)ctx->size, e = n * (size_t)(r + 1) / (size_t)ctx->size;
        ctx->displs[r] = (int)b;
        ctx->counts[r] = (int)(e - b);
    }
    if (ctx->measure_pss) {
        uint64_t pss, rss;
        if (tp_mapping_pss(ctx->model_path, &pss, &rss) == 0) {
            if (pss > ctx->max_pss_kb) ctx->max_pss_kb = pss;
            if (rss > ctx->max_rss_kb) ctx->max_rss_kb = rss;
        }
    }
    double t0 = MPI_Wtime();
    atomic_store(&ctx->busy_since_ms, now_ms());
    int rc = MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, ctx->counts, ctx->displs, MPI_FLOAT, ctx->comm);
    atomic_store(&ctx->busy_since_ms, 0);
    count(&ctx->coll[TP_GATHER], n, t0);
    return rc == MPI_SUCCESS ? 0 : -1;
}

qmap_shard tp_shard(tp_ctx *ctx)
{
    return (qmap_shard){ .rank = (uint32_t)ctx->rank, .n_ranks = (uint32_t)ctx->size, .allreduce_sum = tp_allreduce,
                         .allgather = tp_allgather, .ctx = ctx, .allreduce_max = tp_allreduce_max };
}

int tp_mapping_pss(const char *path, uint64_t *pss_kb, uint64_t *rss_kb)
{
    char real[PATH_MAX];
    if (!realpath(path, real)) return -1;
    FILE *fp = fopen("/proc/self/smaps", "r");
    if (!fp) return -1;
    char line[PATH_MAX + 256];
    bool in_file = false;
    uint64_t pss = 0, rss = 0, v;
    size_t rl = strlen(real);
    while (fgets(line, sizeof line, fp)) {
        /* a mapping's header line: "start-end perms offset dev inode   path" */
        char *sp = strchr(line, ' ');
        if (sp && strchr(line, '-') && strchr(line, '-') < sp) {
            char *slash = strchr(line, '/');
            in_file = slash && !strncmp(slash, real, rl) && (slash[rl] == '\n' || slash[rl] == '\0');
            continue;
        }
        if (!in_file) continue;
        if (sscanf(line, "Pss: %" SCNu64 " kB", &v) == 1) pss += v;
        else if (sscanf(line, "Rss: %" SCNu64 " kB", &v) == 1) rss += v;
    }
    fclose(fp);
    *pss_kb = pss;
    *rss_kb = rss;
    return 0;
}
