/* qr_exp_avx2.h — e^x on eight floats with AVX2 + FMA, shared by the AVX2 files of runtime/ (attention's
 * softmax, the activations). Include only from files compiled with -mavx2 -mfma. */
#ifndef QR_EXP_AVX2_H
#define QR_EXP_AVX2_H

#include <immintrin.h>

/* e^x for x <= 0 (or -inf): x = n·ln2 + r with |r| <= ln2/2, e^r by Cephes' degree-6 expf polynomial (with FMA
 * within 2 ulp), times 2^n built in the exponent bits. Below -87.33 (where 2^n would leave the normal
 * range) the result is 0: those weights are under 2^-126 of the largest, which is 1. NaN stays NaN. */
static inline __attribute__((always_inline)) __m256 qr_exp8(__m256 x)
{
    const __m256 under = _mm256_cmp_ps(x, _mm256_set1_ps(-87.33654475f), _CMP_LT_OQ);
    x = _mm256_min_ps(_mm256_set1_ps(88.0f), x);   /* min(c, NaN) is NaN: NaN passes through */
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    __m256 y = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    y = _mm256_mul_ps(y, _mm256_castsi256_ps(e));
    return _mm256_andnot_ps(under, y);
}

#endif /* QR_EXP_AVX2_H */
