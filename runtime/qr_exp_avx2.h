/* qr_exp_avx2.h — e^x on eight floats with AVX2 + FMA, shared by the AVX2 files of runtime/ (attention's
 * softmax, the activations). Include only from files compiled with -mavx2 -mfma. */
#ifndef QR_EXP_AVX2_H
#define QR_EXP_AVX2_H

#include <immintrin.h>
#include "qr_exp_consts.h"

/* e^x for x <= 0 (or -inf): x = n·ln2 + r with |r| <= ln2/2, e^r by Cephes' degree-6 expf polynomial (with FMA
 * within 2 ulp), times 2^n built in the exponent bits. Below -87.33 (where 2^n would leave the normal
 * range) the result is 0: those weights are under 2^-126 of the largest, which is 1. NaN stays NaN. */
static inline __attribute__((always_inline)) __m256 qr_exp8(__m256 x)
{
    const __m256 under = _mm256_cmp_ps(x, _mm256_set1_ps(QR_EXP_UNDER), _CMP_LT_OQ);
    x = _mm256_min_ps(_mm256_set1_ps(QR_EXP_OVER), x);   /* min(c, NaN) is NaN: NaN passes through */
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(QR_EXP_LOG2E)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(QR_EXP_LN2_HI), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(QR_EXP_LN2_LO), r);
    __m256 p = _mm256_set1_ps(QR_EXP_P0);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(QR_EXP_P1));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(QR_EXP_P2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(QR_EXP_P3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(QR_EXP_P4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(QR_EXP_P5));
    __m256 y = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    y = _mm256_mul_ps(y, _mm256_castsi256_ps(e));
    return _mm256_andnot_ps(under, y);
}

#endif /* QR_EXP_AVX2_H */
