/* qr_ops_avx2.c — sigmoid, SiLU, tanh-GELU and SwiGLU on eight floats at a time (see qr_ops_simd.h).
 *
 * sigmoid(x) = 1/(1 + e) for x >= 0 and e/(1 + e) for x < 0, with e = e^-|x| in (0, 1]: the exponential
 * never overflows, and a very negative x keeps its relative accuracy. tanh-GELU uses the identity
 * 0.5·x·(1 + tanh(u)) = x·sigmoid(2u), which avoids the cancellation of 1 + tanh(u) for negative x. */
#include <immintrin.h>

#include "qm_half.h"
#include "qr_exp_avx2.h"
#include "qr_ops_simd.h"

static inline __m256 sigmoid8(__m256 x)
{
    const __m256 one = _mm256_set1_ps(1.0f), sign = _mm256_set1_ps(-0.0f);
    __m256 e = qr_exp8(_mm256_or_ps(x, sign));                 /* e^-|x| */
    __m256 d = _mm256_add_ps(one, e);
    __m256 neg = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ);
    return _mm256_div_ps(_mm256_blendv_ps(one, e, neg), d);
}

static inline __m256 gelu8(__m256 x)
{
    const __m256 k2 = _mm256_set1_ps(2.0f * 0.7978845608028654f), c = _mm256_set1_ps(0.044715f);
    __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
    __m256 u2 = _mm256_mul_ps(k2, _mm256_fmadd_ps(c, x3, x));
    return _mm256_mul_ps(x, sigmoid8(u2));
}

/* The tail runs through the same vector code on a padded copy, so every element gets the same function. */
#define MAP(NAME, EXPR)                                                                          \
    void NAME(float *x, size_t n)                                                                \
    {                                                                                            \
        size_t i = 0;                                                                            \
        for (; i + 8 <= n; i += 8) {                                                             \
            __m256 v = _mm256_loadu_ps(x + i);                                                   \
            _mm256_storeu_ps(x + i, EXPR);                                                       \
        }                                                                                        \
        if (i < n) {                                                                             \
            float b[8] = { 0 };                                                                  \
            for (size_t j = 0; j < n - i; j++) b[j] = x[i + j];                                  \
            __m256 v = _mm256_loadu_ps(b);                                                       \
            _mm256_storeu_ps(b, EXPR);                                                           \
            for (size_t j = 0; j < n - i; j++) x[i + j] = b[j];                                  \
        }                                                                                        \
    }

MAP(qr_ops_sigmoid_avx2, sigmoid8(v))
MAP(qr_ops_silu_avx2, _mm256_mul_ps(v, sigmoid8(v)))
MAP(qr_ops_gelu_tanh_avx2, gelu8(v))

void qr_ops_swiglu_avx2(float *gate, const float *up, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 g = _mm256_loadu_ps(gate + i);
        _mm256_storeu_ps(gate + i, _mm256_mul_ps(_mm256_mul_ps(g, sigmoid8(g)), _mm256_loadu_ps(up + i)));
    }
    if (i < n) {
        float g[8] = { 0 }, u[8] = { 0 };
        for (size_t j = 0; j < n - i; j++) { g[j] = gate[i + j]; u[j] = up[i + j]; }
        __m256 vg = _mm256_loadu_ps(g);
        _mm256_storeu_ps(g, _mm256_mul_ps(_mm256_mul_ps(vg, sigmoid8(vg)), _mm256_loadu_ps(u)));
        for (size_t j = 0; j < n - i; j++) gate[i + j] = g[j];
    }
}

void qr_ops_f32_to_f16_f16c(const float *src, uint16_t *dst, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(void *)(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    for (; i < n; i++) dst[i] = qm_f32_to_f16(src[i]);
}
