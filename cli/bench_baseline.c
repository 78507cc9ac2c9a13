/* bench_baseline.c — sections 1 and 2 of `qmap bench kernels`: the machine's memory read bandwidth (over
 * anonymous memory and a file mapping, by every reader of bench_measure.h) and its multiply-add peak; the
 * baselines kept for the run, against which sections 3 and 4 measure every kernel run. */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bench_sections.h"

/* ---- 1. memory read bandwidth ------------------------------------------------------------------- */

/* len bytes of a file in dir, mapped read-only and unlinked at once (nothing to clean up after a signal). */
static uint8_t *file_mapping(const char *dir, size_t len)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/qmap-bench-bw-XXXXXX", dir);
    int fd = mkstemp(path);
    if (fd < 0) return NULL;
    unlink(path);
    uint8_t *block = malloc(MIB);
    bool ok = block != NULL;
    if (ok) memset(block, 0x5a, MIB);
    for (size_t off = 0; ok && off < len; off += MIB) {
        size_t n = len - off < MIB ? len - off : MIB;
        ok = write(fd, block, n) == (ssize_t)n;
    }
    free(block);
    uint8_t *m = ok ? mmap(NULL, len, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0) : MAP_FAILED;
    close(fd);
    return m == MAP_FAILED ? NULL : m;
}

int bench_bandwidth(const bench_cfg *c, baseline *base, json_out *j)
{
    size_t len = c->bw_bytes;
    int max_t = 1;
    for (int ti = 0; ti < c->n_threads; ti++) if (c->threads[ti] > max_t) max_t = c->threads[ti];
    uint8_t *anon = bm_anon_buffer(len, max_t);
    if (!anon) {
        set_error("bandwidth: cannot map %zu MiB of anonymous memory: %s", len / MIB, strerror(errno));
        return -1;
    }
    uint8_t *file = file_mapping(c->dir, len);
    if (!file) {
        set_error("bandwidth: cannot write and map a %zu MiB file in %s: %s", len / MIB, c->dir, strerror(errno));
        munmap(anon, len);
        return -1;
    }
    const bm_reader *rd;
    size_t n_rd = bm_readers(&rd);
    double *rates = malloc((size_t)c->runs * sizeof *rates);
    if (!rates) { munmap(anon, len); munmap(file, len); set_error("out of memory"); return -1; }
    if (!c->json)
        printf("\n1. memory read bandwidth: %zu MiB read by each method (each thread its own part of the buffer, "
               "or of each 256 MiB for '/256M'), anonymous memory and a file mapping of the same size;\n   the "
               "baseline of sections 3-4 is the best method of each moment, timed beside each run\n", len / MIB);
    else {
        jo_begin_object(j, "bandwidth");
        jo_u64(j, "buffer_bytes", len);
        jo_begin_array(j, "results");
    }
    for (int ti = 0; ti < c->n_threads; ti++) {
        int t = c->threads[ti];
        for (int where = 0; where < 2; where++) {
            const uint8_t *buf = where ? file : anon;
            for (size_t m = 0; m <= n_rd; m++) {   /* every reader, then (m = n_rd) the baseline */
                if (m < n_rd && !bm_reader_applies(&rd[m], len)) continue;   /* its plain twin's row */
                if (m < n_rd) bm_read_once(&rd[m], buf, len, t);   /* warm-up */
                for (int r = 0; r < c->runs; r++)
                    rates[r] = m < n_rd ? bm_read_once(&rd[m], buf, len, t) : bm_bandwidth(buf, len, t, NULL);
                const bm_stats st = bm_stats_of(rates, c->runs);
                const char *name = m < n_rd ? rd[m].name : "best of each run";
                if (!c->json) {
                    printf("   %-9s threads %-3d %-21s ", where ? "file map" : "anonymous", t, name);
                    bm_print_stats(&st, "GB/s");
                    printf("\n");
                } else {
                    jo_begin_object(j, NULL);
                    jo_cstring(j, "memory", where ? "file_mapping" : "anonymous");
                    jo_u64(j, "threads", (uint64_t)t);
                    jo_cstring(j, "method", m < n_rd ? rd[m].name : "best");
                    bm_json_stats(j, &st, "GB/s");
                    jo_end_object(j);
                }
            }
            if (!c->json) fflush(stdout);
        }
    }
    if (c->json) {
        jo_end_array(j);
        jo_end_object(j);
    }
    free(rates);
    munmap(file, len);
    base->buf = anon; /* unmapped by run_kernels */
    base->len = len;
    return 0;
}

/* ---- 2. instruction peak ------------------------------------------------------------------------ */

int bench_peak(const bench_cfg *c, baseline *base, json_out *j)
{
    static const struct { bm_peak_kind kind; const char *key, *unit, *lacks; } kinds[2] = {
        { BM_PEAK_INT8, "int8", "GOP/s", "AVX2" }, { BM_PEAK_FMA, "fma_f32", "GFLOP/s", "FMA" },
    };
    base->peak_iters = c->peak_iters;
    double *rates = malloc((size_t)c->runs * sizeof *rates);
    if (!rates) { set_error("out of memory"); return -1; }
    if (!c->json)
        printf("\n2. instruction peak: independent multiply-add chains on every thread at once (total); "
               "a multiply-add counts as 2 operations\n");
    else jo_begin_array(j, "peak");
    for (int k = 0; k < 2; k++) {
        const char *label = bm_peak_label(kinds[k].kind);
        for (int ti = 0; ti < c->n_threads; ti++) {
            int t = c->threads[ti];
            bm_stats rate = { 0 };
            if (label) {
                bm_peak_once(kinds[k].kind, c->peak_iters, t); /* warm-up */
                for (int r = 0; r < c->runs; r++) rates[r] = bm_peak_once(kinds[k].kind, c->peak_iters, t);
                rate = bm_stats_of(rates, c->runs);
            }
            if (!c->json) {
                printf("   %-22s threads %-3d  ", label ? label : kinds[k].key, t);
                if (label) bm_print_stats(&rate, kinds[k].unit);
                else printf("     n/a (the CPU lacks %s)", kinds[k].lacks);
                printf("\n");
            } else {
                jo_begin_object(j, NULL);
                jo_cstring(j, "kind", kinds[k].key);
                if (label) jo_cstring(j, "instruction", label);
                else jo_null(j, "instruction");
                jo_u64(j, "threads", (uint64_t)t);
                if (label) {
                    jo_u64(j, "instructions_per_thread", bm_peak_instructions(kinds[k].kind, c->peak_iters));
                    bm_json_stats(j, &rate, kinds[k].unit);
                } else {
                    jo_null(j, "median");
                    jo_cstring(j, "unit", kinds[k].unit);
                }
                jo_end_object(j);
            }
        }
    }
    if (c->json) jo_end_array(j);
    free(rates);
    return 0;
}
