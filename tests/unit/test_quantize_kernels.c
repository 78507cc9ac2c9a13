/* test_quantize_kernels — every quantize kernel variant this CPU has (generic, AVX2, AVX-512) gives the
 * same bytes as a plain transcription of spec/FORMAT.md 6.1 written here (one loop per step, no lanes),
 * and the same statistics as each other, bit for bit, for row lengths around every vector width and for
 * the edge cases of the rule: zero rows, one outlier, ±FLT_MAX, subnormal rows whose scale underflows,
 * exact rounding ties, NaN and ±Inf; and the F16 row conversion against format/qm_half.c on a sweep of
 * the 2^32 float patterns. Variants the CPU lacks are skipped, and say so. */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "qm_half.h"
#include "qq_kernels.h"

/* Spec 6.1, literally: binary32 max, binary32 division by 127, per-element binary32 division, rint
 * (nearest-even in the default rounding mode), clamp, exact integer sum. */
static bool spec_q8row(const float *w, uint64_t cols, int8_t *q, float *scale, int32_t *sum)
{
    float amax = 0;
    for (uint64_t j = 0; j < cols; j++) {
        if (!isfinite(w[j])) return false;
        if (fabsf(w[j]) > amax) amax = fabsf(w[j]);
    }
    volatile float s = amax / 127.0f;   /* volatile: the division happens in binary32, as written */
    *sum = 0;
    if (s == 0.0f) {
        *scale = 0.0f;
        memset(q, 0, cols);
        return true;
    }
    *scale = s;
    for (uint64_t j = 0; j < cols; j++) {
        volatile float x = w[j] / s;
        float r = rintf(x);
        if (r > 127) r = 127;
        if (r < -127) r = -127;
        q[j] = (int8_t)r;
        *sum += q[j];
    }
    return true;
}

static uint64_t rng_state = 88172645463325252ull;
static float frand(void)
{
    rng_state ^= rng_state << 13; rng_state ^= rng_state >> 7; rng_state ^= rng_state << 17;
    return (float)((rng_state >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}

enum { KIND_RANDOM, KIND_ZERO, KIND_OUTLIER, KIND_FLTMAX, KIND_SUBNORMAL, KIND_TIES, KIND_NAN, KIND_INF, KIND_COUNT };

static void fill(float *w, uint64_t cols, int kind)
{
    for (uint64_t j = 0; j < cols; j++) w[j] = frand() * 0.05f;
    switch (kind) {
    case KIND_ZERO: memset(w, 0, cols * sizeof *w); break;
    case KIND_OUTLIER: w[cols / 2] = 40.0f; break;
    case KIND_FLTMAX: w[0] = FLT_MAX; if (cols > 1) w[cols - 1] = -FLT_MAX; break;
    case KIND_SUBNORMAL:
        for (uint64_t j = 0; j < cols; j++) w[j] = frand() * 0x1p-140f;   /* amax/127 underflows to 0 */
        break;
    case KIND_TIES: {
        /* amax = 127 exactly, so scale = 1 and w = k + 0.5 are exact ties */
        for (uint64_t j = 0; j < cols; j++) w[j] = (float)((int)(frand() * 120)) + 0.5f;
        w[0] = 127.0f;
        break;
    }
    case KIND_NAN: w[cols - 1] = NAN; break;
    case KIND_INF: w[0] = -INFINITY; break;
    default: break;
    }
}

static void check_variant(const qq_kernels *k, const qq_kernels *ref)
{
    static const uint64_t lens[] = { 1, 3, 15, 16, 17, 31, 33, 63, 64, 65, 127, 784, 4095 };
    float *w = malloc(4096 * sizeof *w);
    int8_t *q = malloc(4096), *qs = malloc(4096);
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
        for (int kind = 0; kind < KIND_COUNT; kind++)
            for (int rep = 0; rep < 3; rep++) {
                uint64_t cols = lens[li];
                fill(w, cols, kind);
                float scale = -1, scale_s = -1;
                int32_t sum = 12345, sum_s = 0;
                bool ok = k->q8row(w, cols, q, &scale, &sum);
                bool ok_s = spec_q8row(w, cols, qs, &scale_s, &sum_s);
                assert_int_equal(ok, ok_s);
                if (!ok) continue;
                assert_memory_equal(&scale, &scale_s, 4);   /* bits, so +0 and -0 differ */
                assert_int_equal(sum, sum_s);
                assert_memory_equal(q, qs, cols);
                qq_row_stats a, b;
                k->stats(w, NULL, q, scale, cols, true, &a);
                ref->stats(w, NULL, q, scale, cols, true, &b);
                assert_memory_equal(&a.sq_err, &b.sq_err, sizeof(double));
                assert_memory_equal(&a.sq_w, &b.sq_w, sizeof(double));
                assert_memory_equal(&a.max_err, &b.max_err, sizeof(double));
                assert_int_equal(a.outlier, b.outlier);
            }
    free(w);
    free(q);
    free(qs);
}

static void test_generic(void **state)
{
    (void)state;
    check_variant(&qq_kernels_ref, &qq_kernels_ref);
}

static void run_level(qm_cpu_level level)
{
    const qq_kernels *k = qq_kernels_for(level);
    if (!k) {
        print_message("no %s on this CPU: variant skipped\n", qm_cpu_level_name(level));
        skip();
    }
    check_variant(k, &qq_kernels_ref);
}

static void test_avx2(void **state) { (void)state; run_level(QM_CPU_AVX2); }
static void test_avx512(void **state) { (void)state; run_level(QM_CPU_AVX512); }

/* The statistics mean what the report says: a row quantized with scale s has max error ≤ s/2 (plus
 * f32 rounding of q·s) and its relative error is small. */
static void test_stats_meaning(void **state)
{
    (void)state;
    float w[256];
    int8_t q[256];
    for (int j = 0; j < 256; j++) w[j] = frand();
    float scale;
    int32_t sum;
    assert_true(qq_kernels_ref.q8row(w, 256, q, &scale, &sum));
    qq_row_stats st;
    qq_kernels_ref.stats(w, NULL, q, scale, 256, true, &st);
    assert_true(st.max_err <= scale * 0.5 * (1 + 1e-6));
    assert_true(st.sq_err / st.sq_w < 1e-3);
    assert_int_equal(st.outlier, 0);
    w[7] = 100.0f;                      /* one value far above the row's RMS */
    assert_true(qq_kernels_ref.q8row(w, 256, q, &scale, &sum));
    qq_kernels_ref.stats(w, NULL, q, scale, 256, true, &st);
    assert_int_equal(st.outlier, 1);
}


/* f16row against format/qm_half.c (itself held equal to the CPU's F16C in test_half): every 97th of the
 * 2^32 float patterns, in rows of 61 (odd, so the lane tails run too), plus the range edges. */
static void check_f16(const qq_kernels *k)
{
    enum { COLS = 61 };
    float w[COLS], back[COLS];
    uint16_t h[COLS];
    uint64_t pattern = 0;
    while (pattern < (1ull << 32)) {
        for (int j = 0; j < COLS; j++, pattern += 97) {
            uint32_t u = (uint32_t)pattern;
            memcpy(&w[j], &u, 4);
        }
        int want = 0;
        for (int j = 0; j < COLS; j++) {
            if (!isfinite(w[j])) { want = 1; break; }
            if (!qm_f32_fits_f16(w[j])) want = 2;
        }
        int got = k->f16row(w, COLS, h, back);
        assert_int_equal(got, want);
        if (got) continue;
        for (int j = 0; j < COLS; j++) {
            uint16_t ref = qm_f32_to_f16(w[j]);
            if (h[j] != ref) fail_msg("%s: f32 %a -> %04x, reference %04x", k->name, (double)w[j], h[j], ref);
            float b = qm_f16_to_f32(ref);
            assert_memory_equal(&back[j], &b, 4);
        }
    }
    static const float edges[] = { 65504.0f, 65519.99f, 0x1p-24f, 0x1p-25f, 0x1.8p-25f, 0x1p-14f, 0x1.ffcp-15f,
                                   -0.0f, 0.0f, 1.0f + 0x1p-11f, 1.0f + 0x3p-11f, -65504.0f };
    float e[12];
    memcpy(e, edges, sizeof e);
    assert_int_equal(k->f16row(e, 12, h, back), 0);
    for (int j = 0; j < 12; j++) assert_int_equal(h[j], qm_f32_to_f16(e[j]));
    e[3] = 65520.0f;
    assert_int_equal(k->f16row(e, 12, h, back), 2);
    e[5] = NAN;
    assert_int_equal(k->f16row(e, 12, h, back), 1);
}

static void test_f16_generic(void **state) { (void)state; check_f16(&qq_kernels_ref); }
static void test_f16_avx2(void **state)
{
    (void)state;
    const qq_kernels *k = qq_kernels_for(QM_CPU_AVX2);
    if (!k) { print_message("no avx2 on this CPU: variant skipped\n"); skip(); }
    check_f16(k);
}
static void test_f16_avx512(void **state)
{
    (void)state;
    const qq_kernels *k = qq_kernels_for(QM_CPU_AVX512);
    if (!k) { print_message("no avx512 on this CPU: variant skipped\n"); skip(); }
    check_f16(k);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_generic),
        cmocka_unit_test(test_avx2),
        cmocka_unit_test(test_avx512),
        cmocka_unit_test(test_stats_meaning),
        cmocka_unit_test(test_f16_generic),
        cmocka_unit_test(test_f16_avx2),
        cmocka_unit_test(test_f16_avx512),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
