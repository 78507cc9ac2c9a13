/* crash_writer.c — write a valid .qmap of about MB megabytes through the atomic writer, slowly enough
 * (64 KB chunks) that a SIGKILL can land at any point of the write, fsync or rename.
 *
 *     crash_writer TARGET MB SEED
 *
 * The file is a pure function of (MB, SEED): the same arguments give byte-identical files, so a test
 * harness can compare a file that survived a kill with a reference written uninterrupted. Contents:
 * metadata (name, seed, size), an F32, an I32 and a BF16 tensor sharing ~MB MiB of pseudo-random bytes,
 * and a small Q8_ROW tensor whose data passes full verification. Default alignment (4096).
 * Exit status 0 once qm_writer_finish() returned QM_OK, 1 on a writer error, 2 on a usage error.
 * With CRASH_WRITER_TIMING=1 in the environment, prints "finish_start=S total=S" (seconds since start)
 * to stderr; with CRASH_WRITER_PHASES=1, prints "finish" on stdout (flushed) just before calling
 * qm_writer_finish(). Both let a harness aim kills at the fsync/rename phase.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "qm_error.h"
#include "qm_format.h"
#include "qm_writer.h"

#define CHUNK (64u * 1024u)

static uint64_t g_state;

static uint64_t rnd(void)
{
    /* splitmix64 */
    uint64_t z = (g_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int fail(const char *what, const qm_error *err)
{
    fprintf(stderr, "crash_writer: %s: %s (%s)\n", what, err->message, qm_status_name(err->code));
    return 1;
}

static bool parse_u64(const char *s, uint64_t *out)
{
    char *end = NULL;
    if (s == NULL || *s == '\0' || *s == '-')
        return false;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end != '\0')
        return false;
    *out = v;
    return true;
}

int main(int argc, char **argv)
{
    uint64_t mb, seed;
    if (argc != 4 || !parse_u64(argv[2], &mb) || !parse_u64(argv[3], &seed) || mb > 65536) {
        fprintf(stderr, "usage: %s TARGET MB SEED   (MB <= 65536)\n", argc > 0 ? argv[0] : "crash_writer");
        return 2;
    }
    const char *target = argv[1];
    bool timing = getenv("CRASH_WRITER_TIMING") != NULL;
    bool phases = getenv("CRASH_WRITER_PHASES") != NULL;
    double t0 = now();
    g_state = seed * 0xD1B54A32D192ED03ull + 1;

    const uint64_t bytes = mb << 20;
    uint64_t r1 = bytes / 2 / (4 * 1024), r2 = bytes / 4 / (4 * 512), r3 = bytes / 4 / (2 * 2 * 512);
    const uint64_t d_f32[2] = { r1 ? r1 : 1, 1024 };
    const uint64_t d_i32[2] = { r2 ? r2 : 1, 512 };
    const uint64_t d_bf16[3] = { r3 ? r3 : 1, 2, 512 };
    const uint64_t d_q8[2] = { 8, 100 };

    qm_error err;
    qm_error_clear(&err);
    qm_writer *w = NULL;
    if (qm_writer_create(target, NULL, &w, &err) != QM_OK)
        return fail("create", &err);

#define TRY(what, call)                         \
    do {                                        \
        if ((call) != QM_OK) {                  \
            qm_writer_abort(w);                 \
            return fail((what), &err);          \
        }                                       \
    } while (0)

    TRY("meta", qm_writer_meta_string(w, "general.name", "crash-test", 10, &err));
    TRY("meta", qm_writer_meta_string(w, "general.tool", "crash_writer", 12, &err));
    TRY("meta", qm_writer_meta_u64(w, "crash.seed", seed, &err));
    TRY("meta", qm_writer_meta_u64(w, "crash.mb", mb, &err));
    TRY("tensor", qm_writer_add_tensor(w, "blk.0.f32", QM_DTYPE_F32, 2, d_f32, &err));
    TRY("tensor", qm_writer_add_tensor(w, "blk.0.i32", QM_DTYPE_I32, 2, d_i32, &err));
    TRY("tensor", qm_writer_add_tensor(w, "blk.0.bf16", QM_DTYPE_BF16, 3, d_bf16, &err));
    TRY("tensor", qm_writer_add_tensor(w, "blk.0.q8", QM_DTYPE_Q8_ROW, 2, d_q8, &err));

    /* The three plain tensors are contiguous in the write stream: any bytes are valid data for them. */
    uint64_t plain = d_f32[0] * d_f32[1] * 4 + d_i32[0] * d_i32[1] * 4 + d_bf16[0] * d_bf16[1] * d_bf16[2] * 2;
    static uint64_t chunk[CHUNK / 8];
    for (uint64_t done = 0; done < plain;) {
        uint64_t n = plain - done < CHUNK ? plain - done : CHUNK;
        for (uint64_t i = 0; i < (n + 7) / 8; i++)
            chunk[i] = rnd();
        TRY("write", qm_writer_write(w, chunk, (size_t)n, &err));
        done += n;
    }

    /* Q8_ROW: default alignment (the writer's), data valid under full verification. */
    qm_q8row_layout L;
    if (qm_q8row_layout_of(2, d_q8, QM_DEFAULT_ALIGNMENT, &L) != QM_OK) {
        qm_writer_abort(w);
        fprintf(stderr, "crash_writer: qm_q8row_layout_of failed\n");
        return 1;
    }
    uint8_t *q8 = calloc(1, (size_t)L.size);
    if (q8 == NULL) {
        qm_writer_abort(w);
        fprintf(stderr, "crash_writer: out of memory\n");
        return 1;
    }
    for (uint64_t r = 0; r < L.rows; r++) {
        int32_t sum = 0;
        for (uint64_t j = 0; j < L.cols; j++) {
            int v = (int)(rnd() % 255) - 127;
            q8[r * L.row_stride + j] = (uint8_t)(int8_t)v;
            sum += v;
        }
        float scale = 0.01f * (float)(r + 1);
        memcpy(q8 + L.scales_offset + 4 * r, &scale, 4);
        memcpy(q8 + L.sums_offset + 4 * r, &sum, 4);
    }
    qm_status st = qm_writer_write(w, q8, (size_t)L.size, &err);
    free(q8);
    if (st != QM_OK) {
        qm_writer_abort(w);
        return fail("write q8", &err);
    }

    if (phases) {
        /* Tell a harness that only the finish phase (table, checksums, fsync, rename) is left. */
        fputs("finish\n", stdout);
        fflush(stdout);
    }
    double t_finish = now();
    if (qm_writer_finish(w, &err) != QM_OK)
        return fail("finish", &err);
    if (timing)
        fprintf(stderr, "finish_start=%.6f total=%.6f\n", t_finish - t0, now() - t0);
    return 0;
}
