/* qc_crc32_clmul.c — CRC-32 by carry-less multiplication folding (PCLMULQDQ, and VPCLMULQDQ on AVX-512).
 *
 * The method is the one of Gopal et al., "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ
 * Instruction" (Intel, 2009), in the bit-reflected form zip's CRC-32 uses. Several 128-bit accumulators
 * each hold a block of message; multiplying an accumulator's two 64-bit halves by x^(D+32) and x^(D-32)
 * mod P moves its contribution D bits further down the message, where it is XORed into the block found
 * there. At the end the accumulators are folded into one, then reduced to 32 bits (Barrett).
 *
 * The constants are x^n mod P for P = 0x104C11DB7, bit-reflected and shifted left by one (33 bits), as
 * PCLMULQDQ on reflected operands needs; mu = x^64 div P likewise. They were computed, not copied: for
 * k(n) = reflect32(x^n mod P) << 1, fold by 512 bits (4 x 128) uses k(544), k(480); by 128 bits k(160),
 * k(96); 64 -> 32 bits k(64); by 2048 bits (4 x 512) k(2080), k(2016).
 *
 * Functions carry their instruction sets as target attributes, so this file needs no special compiler
 * flags and nothing here runs unless qc_crc32_best() found the instructions on this CPU.
 */
#include "qc_crc32.h"

#if defined(__x86_64__) && defined(__GNUC__)

#include <immintrin.h>

#define TARGET_CLMUL __attribute__((target("sse4.1,pclmul")))
#define TARGET_VPCLMUL __attribute__((target("sse4.1,pclmul,avx2,avx512f,vpclmulqdq")))

/* {k(544), k(480)}: fold 4 x 128 bits forward; {k(160), k(96)}: fold 128 bits; k(64); {P', mu'} */
#define K_FOLD512_LO  0x154442bd4ull
#define K_FOLD512_HI  0x1c6e41596ull
#define K_FOLD128_LO  0x1751997d0ull
#define K_FOLD128_HI  0x0ccaa009eull
#define K_64          0x163cd6124ull
#define K_POLY        0x1db710641ull
#define K_MU          0x1f7011641ull
#define K_FOLD2048_LO 0x11542778aull
#define K_FOLD2048_HI 0x1322d1430ull

/* acc moved forward by the distance k encodes, XORed into the block `data` found there */
TARGET_CLMUL static inline __m128i fold(__m128i acc, __m128i k, __m128i data)
{
    __m128i lo = _mm_clmulepi64_si128(acc, k, 0x00);
    __m128i hi = _mm_clmulepi64_si128(acc, k, 0x11);
    return _mm_xor_si128(_mm_xor_si128(lo, hi), data);
}

/* The rest of the message once four accumulators x[0..3] hold the 64 bytes before buf: 64-byte folds,
 * then one accumulator, 16-byte folds, and the reduction. len is a multiple of 16. Returns the CRC in
 * its inverted (register) form. */
TARGET_CLMUL static inline uint32_t finish(__m128i x0, __m128i x1, __m128i x2, __m128i x3, const uint8_t *buf,
                                          size_t len)
{
    const __m128i k512 = _mm_set_epi64x((long long)K_FOLD512_HI, (long long)K_FOLD512_LO);
    while (len >= 64) {
        x0 = fold(x0, k512, _mm_loadu_si128((const __m128i *)(buf + 0)));
        x1 = fold(x1, k512, _mm_loadu_si128((const __m128i *)(buf + 16)));
        x2 = fold(x2, k512, _mm_loadu_si128((const __m128i *)(buf + 32)));
        x3 = fold(x3, k512, _mm_loadu_si128((const __m128i *)(buf + 48)));
        buf += 64;
        len -= 64;
    }
    const __m128i k128 = _mm_set_epi64x((long long)K_FOLD128_HI, (long long)K_FOLD128_LO);
    __m128i x = fold(x0, k128, x1);
    x = fold(x, k128, x2);
    x = fold(x, k128, x3);
    for (; len >= 16; buf += 16, len -= 16) x = fold(x, k128, _mm_loadu_si128((const __m128i *)buf));

    /* 128 -> 64 bits: the low half times x^96 into the high half */
    const __m128i mask32 = _mm_setr_epi32(-1, 0, -1, 0);
    x = _mm_xor_si128(_mm_srli_si128(x, 8), _mm_clmulepi64_si128(x, k128, 0x10));
    /* 64 -> 32 bits: the low 32 bits times x^64 into the rest */
    const __m128i k64 = _mm_set_epi64x(0, (long long)K_64);
    x = _mm_xor_si128(_mm_srli_si128(x, 4), _mm_clmulepi64_si128(_mm_and_si128(x, mask32), k64, 0x00));
    /* Barrett: q = (low 32 bits * mu) mod x^32, remainder = x - q * P */
    const __m128i pmu = _mm_set_epi64x((long long)K_MU, (long long)K_POLY);
    __m128i q = _mm_and_si128(_mm_clmulepi64_si128(_mm_and_si128(x, mask32), pmu, 0x10), mask32);
    x = _mm_xor_si128(x, _mm_clmulepi64_si128(q, pmu, 0x00));
    return (uint32_t)_mm_extract_epi32(x, 1);
}

TARGET_CLMUL uint32_t qc_crc32_clmul_blocks(uint32_t crc, const uint8_t *buf, size_t len)
{
    /* the running CRC is XORed into the first 32 bits of message, inverted as the register holds it */
    __m128i x0 = _mm_xor_si128(_mm_loadu_si128((const __m128i *)buf), _mm_cvtsi32_si128((int)~crc));
    __m128i x1 = _mm_loadu_si128((const __m128i *)(buf + 16));
    __m128i x2 = _mm_loadu_si128((const __m128i *)(buf + 32));
    __m128i x3 = _mm_loadu_si128((const __m128i *)(buf + 48));
    return ~finish(x0, x1, x2, x3, buf + 64, len - 64);
}

/* the 512-bit form of fold(): four 128-bit lanes at once, XOR of three in one ternary-logic op */
TARGET_VPCLMUL static inline __m512i fold512(__m512i acc, __m512i k, __m512i data)
{
    __m512i lo = _mm512_clmulepi64_epi128(acc, k, 0x00);
    __m512i hi = _mm512_clmulepi64_epi128(acc, k, 0x11);
    return _mm512_ternarylogic_epi64(lo, hi, data, 0x96);
}

TARGET_VPCLMUL uint32_t qc_crc32_vpclmul_blocks(uint32_t crc, const uint8_t *buf, size_t len)
{
    /* below two rounds of 256 bytes the 128-bit path is as fast */
    if (len < 512) return qc_crc32_clmul_blocks(crc, buf, len);
    __m512i z0 = _mm512_xor_si512(_mm512_loadu_si512((const void *)buf),
                                  _mm512_castsi128_si512(_mm_cvtsi32_si128((int)~crc)));
    __m512i z1 = _mm512_loadu_si512((const void *)(buf + 64));
    __m512i z2 = _mm512_loadu_si512((const void *)(buf + 128));
    __m512i z3 = _mm512_loadu_si512((const void *)(buf + 192));
    buf += 256;
    len -= 256;
    /* four 512-bit accumulators = 16 lanes of 128 bits, each folded 2048 bits forward per round */
    const __m512i k2048 = _mm512_broadcast_i32x4(_mm_set_epi64x((long long)K_FOLD2048_HI, (long long)K_FOLD2048_LO));
    while (len >= 256) {
        z0 = fold512(z0, k2048, _mm512_loadu_si512((const void *)(buf + 0)));
        z1 = fold512(z1, k2048, _mm512_loadu_si512((const void *)(buf + 64)));
        z2 = fold512(z2, k2048, _mm512_loadu_si512((const void *)(buf + 128)));
        z3 = fold512(z3, k2048, _mm512_loadu_si512((const void *)(buf + 192)));
        buf += 256;
        len -= 256;
    }
    /* 256 bytes of state -> 64: each accumulator moves 512 bits forward onto the next */
    const __m512i k512 = _mm512_broadcast_i32x4(_mm_set_epi64x((long long)K_FOLD512_HI, (long long)K_FOLD512_LO));
    __m512i z = fold512(z0, k512, z1);
    z = fold512(z, k512, z2);
    z = fold512(z, k512, z3);
    /* the four lanes of z are the four 128-bit accumulators of the 128-bit path, in message order */
    return ~finish(_mm512_extracti32x4_epi32(z, 0), _mm512_extracti32x4_epi32(z, 1),
                   _mm512_extracti32x4_epi32(z, 2), _mm512_extracti32x4_epi32(z, 3), buf, len);
}

#else

/* Not x86-64 with GCC/Clang: qc_crc32_best() never chooses these, and qc_crc32.c never calls them. */
typedef int qc_crc32_clmul_unused;

#endif
