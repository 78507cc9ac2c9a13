/* test_hash — every XXH3 variant (generic libxxhash, AVX2, AVX-512) gives the reference value, for
 * lengths around every internal block boundary of XXH3 and for unaligned starts; QMAP_CPU caps the
 * variant qm_checksum uses. Variants the CPU lacks are skipped, and say so. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "qm_hash.h"
#include "qm_reader.h"

static uint8_t *random_bytes(size_t n, uint64_t seed)
{
    uint8_t *b = malloc(n + 64);
    for (size_t i = 0; i < n + 64; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        b[i] = (uint8_t)(seed >> 56);
    }
    return b;
}

static void check_variant(qm_hash_fn fn)
{
    /* XXH3 switches code paths at 16, 128, 240 bytes and works in 64-byte stripes / 1 KiB blocks */
    static const size_t lens[] = { 0, 1, 3, 4, 8, 9, 16, 17, 128, 129, 240, 241, 255, 256, 1023, 1024, 1025,
                                   4095, 65536 + 7, (1u << 20) + 13 };
    uint8_t *buf = random_bytes((1u << 20) + 64, 42);
    for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++)
        for (size_t off = 0; off < 3; off++) /* unaligned starts */
            assert_int_equal(fn(buf + off, lens[k]), qm_xxh3_generic(buf + off, lens[k]));
    free(buf);
}

static void test_generic_matches_known_value(void **state)
{
    (void)state;
    /* XXH3-64 of the empty input, seed 0, as published by the xxHash project */
    assert_int_equal(qm_xxh3_generic("", 0), 0x2D06800538D394C2ull);
}

static void test_avx2(void **state)
{
    (void)state;
    if (!__builtin_cpu_supports("avx2")) { skip(); return; }
    check_variant(qm_xxh3_avx2);
}

static void test_avx512(void **state)
{
    (void)state;
    if (!__builtin_cpu_supports("avx512f")) { skip(); return; }
    check_variant(qm_xxh3_avx512);
}

static void test_force_generic(void **state)
{
    (void)state;
    const char *name;
    setenv("QMAP_CPU", "generic", 1);
    assert_ptr_equal(qm_hash_select(&name), qm_xxh3_generic);
    assert_string_equal(name, "generic");
    assert_string_equal(qm_checksum_impl(), "generic");
    unsetenv("QMAP_CPU");
    uint8_t *b = random_bytes(5000, 7);
    assert_int_equal(qm_checksum(b, 5000), qm_xxh3_generic(b, 5000));
    free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_generic_matches_known_value),
        cmocka_unit_test(test_avx2),
        cmocka_unit_test(test_avx512),
        cmocka_unit_test(test_force_generic),
    };
    return cmocka_run_group_tests_name("hash variants", tests, NULL, NULL);
}
