/* test_bench_measure.c — the benchmarks' baselines (cli/bench_measure.c) against their reference.
 *
 * Every read method the CPU has must return exactly bm_read_reference's sum (the 64-bit words of the
 * buffer, wrapping) on buffers of every multiple of its granule up to 8 granules and on a large one, so
 * that each reads every byte once and nothing else; bm_read_once over several threads must read the parts
 * the threads were given; the anonymous buffer is filled; the statistics are the median, min and max. */
#include <stdarg.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "bench_measure.h"

static uint8_t *random_buffer(size_t n, uint64_t seed)
{
    uint8_t *p = aligned_alloc(64, n + 4096);   /* + the prefetch distance: prefetches may look past the end */
    assert_non_null(p);
    for (size_t i = 0; i < n + 4096; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        p[i] = (uint8_t)(seed >> 56);
    }
    return p;
}

static void readers_equal_reference(void **state)
{
    (void)state;
    const bm_reader *r;
    size_t n = bm_readers(&r);
    assert_true(n >= 1);
    for (size_t k = 0; k < n; k++) {
        for (size_t m = 1; m <= 8; m++) {
            size_t len = m * r[k].granule;
            uint8_t *p = random_buffer(len, 17 * m + k);
            assert_int_equal(r[k].fn(p, len), bm_read_reference(p, len));
            free(p);
        }
        size_t big = (size_t)3 << 20;
        uint8_t *p = random_buffer(big, 99);
        p[big - 1] ^= 0xff;   /* the last byte counts */
        assert_int_equal(r[k].fn(p, big), bm_read_reference(p, big));
        /* all-ones words: the sums wrap, and must wrap the same way */
        memset(p, 0xff, big);
        assert_int_equal(r[k].fn(p, big), bm_read_reference(p, big));
        free(p);
    }
}

static void reference_is_the_word_sum(void **state)
{
    (void)state;
    uint8_t b[16] = { 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0x80 };
    assert_int_equal(bm_read_reference(b, 16), 1u + 0x8000000000000100ull);
}

static void bandwidth_and_buffer(void **state)
{
    (void)state;
    size_t len = (size_t)8 << 20;
    uint8_t *buf = bm_anon_buffer(len, 2);
    assert_non_null(buf);
    assert_int_equal(buf[0], 0x5a);
    assert_int_equal(buf[len / 2], 0x5a);
    assert_int_equal(buf[len - 1], 0x5a);
    const bm_reader *r;
    bm_readers(&r);
    for (int t = 1; t <= 3; t++) assert_true(bm_read_once(&r[0], buf, len, t) > 0);
    const char *best = NULL;
    double g = bm_bandwidth(buf, len, 2, &best);
    assert_true(g > 0 && isfinite(g));
    assert_non_null(best);
    munmap(buf, len);
}

static void statistics(void **state)
{
    (void)state;
    double v[5] = { 5, 1, 4, 2, 3 };
    bm_stats s = bm_stats_of(v, 5);
    assert_true(s.median == 3 && s.min == 1 && s.max == 5 && s.runs == 5);
    double w[4] = { 4, 1, 3, 2 };
    s = bm_stats_of(w, 4);
    assert_true(s.median == 2.5 && s.min == 1 && s.max == 4);
    assert_true(isnan(bm_ratio(1, 0)));
    assert_true(bm_ratio(3, 2) == 1.5);
}

static void peak(void **state)
{
    (void)state;
    for (int k = 0; k < 2; k++) {
        double g = bm_peak_once((bm_peak_kind)k, 1000, 2);
        if (bm_peak_label((bm_peak_kind)k)) assert_true(g > 0 && isfinite(g) && bm_peak_ops_per_trip((bm_peak_kind)k) > 0);
        else assert_true(isnan(g));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(reference_is_the_word_sum),
        cmocka_unit_test(readers_equal_reference),
        cmocka_unit_test(bandwidth_and_buffer),
        cmocka_unit_test(statistics),
        cmocka_unit_test(peak),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
