/* qr_ops_simd.h — the vector versions of qr_ops.c's exponential-based activations (internal).
 * qr_ops_avx2.c is compiled with -mavx2 -mfma (mk/k.mk); qr_ops.c calls it only when the CPU has both and
 * QMAP_CPU allows (format/qm_cpu.h). Same definitions as the portable loops, same accuracy bounds. */
#ifndef QR_OPS_SIMD_H
#define QR_OPS_SIMD_H

#include <stddef.h>
#include <stdint.h>

void qr_ops_sigmoid_avx2(float *x, size_t n);
void qr_ops_silu_avx2(float *x, size_t n);
void qr_ops_gelu_tanh_avx2(float *x, size_t n);
void qr_ops_swiglu_avx2(float *gate, const float *up, size_t n);
/* dst[i] = qm_f32_to_f16(src[i]) for i < n, eight at a time with F16C (vcvtps2ph, round to nearest even:
 * the same bits as the portable conversion, NaNs quieted with their payload's top bits kept as it does).
 * Needs F16C besides AVX2 (qr_kv.c checks). */
void qr_ops_f32_to_f16_f16c(const float *src, uint16_t *dst, size_t n);

#endif /* QR_OPS_SIMD_H */
