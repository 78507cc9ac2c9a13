/* crc32_check.c — every CRC-32 variant of convert/qc_crc32.c against a bit-at-a-time reference and zlib,
 * on random lengths, alignments and split points; then the speed of each (MB/s). Built and run by
 * tests/convert/test_torch_fast.py (it compiles this with convert/qc_crc32*.c and format/qm_cpu.c):
 *
 *     crc32_check [--bench MB]     exit 0 when every variant the CPU has agrees everywhere
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zlib.h>

#include "qc_crc32.h"

/* the definition itself, one bit at a time: nothing shared with what is tested */
static uint32_t crc_bitwise(uint32_t crc, const uint8_t *p, size_t n)
{
    crc = ~crc;
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        for (int b = 0; b < 8; b++) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
    }
    return ~crc;
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    size_t bench_mb = argc == 3 && !strcmp(argv[1], "--bench") ? (size_t)strtoull(argv[2], NULL, 10) : 0;
    enum { MAX = 1 << 16 };
    uint8_t *buf = malloc(MAX + 64);
    if (!buf) return 2;
    for (size_t i = 0; i < MAX + 64; i++) buf[i] = (uint8_t)rnd();
    qc_crc32_impl best = qc_crc32_best();
    printf("best variant here: %s\n", qc_crc32_impl_name(best));
    unsigned long bad = 0, cases = 0;
    for (int impl = QC_CRC32_ZLIB; impl <= (int)best; impl++) {
        for (int trial = 0; trial < 3000; trial++) {
            /* lengths: every one up to 1100 once (all block/tail mixes of both paths), then random ones
             * up to 64 KiB; every alignment; a random start value; a random split into two calls */
            size_t len = trial < 1100 ? (size_t)trial : (size_t)(rnd() % MAX);
            size_t align = (size_t)(rnd() % 64);
            uint32_t start = trial % 3 ? (uint32_t)rnd() : 0;
            const uint8_t *p = buf + align;
            uint32_t want = crc_bitwise(start, p, len);
            uint32_t zl = (uint32_t)crc32_z(start, p, len);
            uint32_t got = qc_crc32_with((qc_crc32_impl)impl, start, p, len);
            size_t cut = len ? (size_t)(rnd() % (len + 1)) : 0;
            uint32_t split = qc_crc32_with((qc_crc32_impl)impl, qc_crc32_with((qc_crc32_impl)impl, start, p, cut),
                                           p + cut, len - cut);
            cases++;
            if (got != want || zl != want || split != want) {
                if (bad++ < 10)
                    printf("MISMATCH %s: len %zu align %zu start %08x: reference %08x zlib %08x got %08x split@%zu %08x\n",
                           qc_crc32_impl_name((qc_crc32_impl)impl), len, align, start, want, zl, got, cut, split);
            }
        }
        /* the known answer: "123456789" -> CBF43926 */
        if (qc_crc32_with((qc_crc32_impl)impl, 0, "123456789", 9) != 0xCBF43926u) bad++;
        printf("%s: %s\n", qc_crc32_impl_name((qc_crc32_impl)impl), bad ? "MISMATCH" : "agrees with the reference");
    }
    if (bench_mb) {
        size_t n = bench_mb << 20;
        uint8_t *big = malloc(n);
        if (!big) return 2;
        for (size_t i = 0; i < n; i++) big[i] = (uint8_t)(i * 2654435761u >> 13);
        for (int impl = QC_CRC32_ZLIB; impl <= (int)best; impl++) {
            double bestt = 1e9;
            uint32_t c = 0;
            for (int r = 0; r < 5; r++) {
                double t = now();
                c = qc_crc32_with((qc_crc32_impl)impl, 0, big, n);
                t = now() - t;
                if (t < bestt) bestt = t;
            }
            printf("%-8s %8.0f MB/s  (%zu MiB, crc %08x)\n", qc_crc32_impl_name((qc_crc32_impl)impl),
                   (double)n / bestt / 1e6, bench_mb, c);
        }
        free(big);
    }
    free(buf);
    printf("%lu cases, %lu mismatches\n", cases, bad);
    return bad ? 1 : 0;
}
