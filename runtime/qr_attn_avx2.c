/* qr_attn_avx2.c — attention's inner loops with AVX2 + FMA + F16C (see qr_attn_kernels.h). Compiled with
 * -mavx2 -mfma -mf16c (mk/k.mk) and only called after qr_attn.c checked the CPU. */
#include <immintrin.h>

#include "qm_half.h"
#include "qr_attn_kernels.h"

static float hsum(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static float dot_f32(const float *q, const float *k, size_t n)
{
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_loadu_ps(k + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8), _mm256_loadu_ps(k + i + 8), a1);
    }
    for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_loadu_ps(k + i), a0);
    float s = hsum(_mm256_add_ps(a0, a1));
    for (; i < n; i++) s += q[i] * k[i];
    return s;
}

static float dot_f16(const float *q, const uint16_t *k, size_t n)
{
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 k0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(k + i)));
        __m256 k1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(k + i + 8)));
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), k0, a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8), k1, a1);
    }
    for (; i + 8 <= n; i += 8)
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(k + i))), a0);
    float s = hsum(_mm256_add_ps(a0, a1));
    for (; i < n; i++) s += q[i] * qm_f16_to_f32(k[i]);
    return s;
}

static void axpy_f32(float *y, float a, const float *v, size_t n)
{
    __m256 va = _mm256_set1_ps(a);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(v + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += a * v[i];
}

static void axpy_f16(float *y, float a, const uint16_t *v, size_t n)
{
    __m256 va = _mm256_set1_ps(a);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(v + i)));
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, x, _mm256_loadu_ps(y + i)));
    }
    for (; i < n; i++) y[i] += a * qm_f16_to_f32(v[i]);
}

const qr_attn_kernels qr_attn_kernels_avx2 = { dot_f32, dot_f16, axpy_f32, axpy_f16 };
