/* test_half — the F16/BF16 conversions of format/qm_half.c against the CPU's own F16C instructions
 * (IEEE round-to-nearest-even in hardware) and against exact arithmetic: every one of the 65,536 halves
 * widens exactly, and f32 -> f16 agrees with the hardware on a dense sweep of the 2^32 bit patterns
 * (every 61st pattern, plus every pattern around the subnormal, rounding-tie and overflow boundaries).
 * Without F16C the hardware comparison is skipped, and says so. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>
#include <cpuid.h>
#include <immintrin.h>

#include "qm_half.h"

static float bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint32_t f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

/* exact value of a binary16 from its fields, in double */
static double half_value(uint16_t h)
{
    int e = (h >> 10) & 31, m = h & 1023;
    double v = e ? ldexp(1024 + m, e - 25) : ldexp(m, -24);
    return (h & 0x8000) ? -v : v;
}

static void test_f16_widening_is_exact(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = qm_f16_to_f32((uint16_t)h);
        int e = (h >> 10) & 31;
        if (e == 31) {
            if (h & 1023) assert_true(isnan(f));
            else assert_true(isinf(f) && (signbit(f) != 0) == ((h & 0x8000) != 0));
            continue;
        }
        assert_true((double)f == half_value((uint16_t)h));
        assert_true((signbit(f) != 0) == ((h & 0x8000) != 0));   /* -0 stays -0 */
    }
}

__attribute__((target("f16c"))) static uint16_t hw_f32_to_f16(float f)
{
    return (uint16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

static void check_pattern(uint32_t u)
{
    float f = bits_f32(u);
    uint16_t a = qm_f32_to_f16(f), b = hw_f32_to_f16(f);
    if (isnan(f)) {                       /* payloads may differ; both must be NaN of the same sign */
        assert_true((a & 0x7c00) == 0x7c00 && (a & 0x3ff) && (a & 0x8000) == (b & 0x8000));
        return;
    }
    if (a != b) fail_msg("f32 %08x: qm %04x, F16C %04x", u, a, b);
}

static void test_f32_to_f16_matches_hardware(void **state)
{
    (void)state;
    unsigned eax, ebx, ecx, edx;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !(ecx & (1u << 29))) {   /* CPUID.1:ECX.F16C[bit 29] */
        print_message("no F16C on this CPU: hardware comparison skipped\n");
        skip();
    }
    for (uint64_t u = 0; u < (1ull << 32); u += 61) check_pattern((uint32_t)u);
    /* every pattern near the edges: subnormal range, smallest normal, largest finite, overflow */
    static const float edges[] = { 5.96046448e-08f, 6.10351562e-05f, 65504.0f, 65520.0f, 1.0f, 2048.0f };
    for (size_t k = 0; k < sizeof edges / sizeof edges[0]; k++)
        for (int s = 0; s < 2; s++) {
            uint32_t c = f32_bits(s ? -edges[k] : edges[k]);
            for (uint32_t d = 0; d < 20000; d++) { check_pattern(c + d); check_pattern(c - d); }
        }
}

static void test_f16_range_and_ties(void **state)
{
    (void)state;
    assert_true(qm_f32_fits_f16(65504.0f));
    assert_true(qm_f32_fits_f16(65519.99f));     /* rounds down to 65504 */
    assert_false(qm_f32_fits_f16(65520.0f));     /* the tie rounds to even: to infinity */
    assert_false(qm_f32_fits_f16(INFINITY));
    assert_false(qm_f32_fits_f16(NAN));
    assert_int_equal(qm_f32_to_f16(1.0f + 0x1p-11f), 0x3c00);   /* tie between 1 and 1+2^-10: even (1) */
    assert_int_equal(qm_f32_to_f16(1.0f + 0x3p-11f), 0x3c02);   /* tie: rounds up to the even 1+2^-9 */
    assert_int_equal(qm_f32_to_f16(0x1p-25f), 0x0000);          /* half the smallest subnormal: to 0 */
    assert_int_equal(qm_f32_to_f16(0x1.8p-25f), 0x0001);        /* above half: smallest subnormal */
    assert_int_equal(qm_f32_to_f16(-0.0f), 0x8000);
}

static void test_bf16_widening(void **state)
{
    (void)state;
    for (uint32_t b = 0; b < 65536; b++) {
        float f = qm_bf16_to_f32((uint16_t)b);
        assert_int_equal(f32_bits(f), b << 16);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f16_widening_is_exact),
        cmocka_unit_test(test_f32_to_f16_matches_hardware),
        cmocka_unit_test(test_f16_range_and_ties),
        cmocka_unit_test(test_bf16_widening),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
