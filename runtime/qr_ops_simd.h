/* qr_ops_simd.h — the vector versions of qr_ops.c's exponential-based activations (internal).
 * qr_ops_avx2.c is compiled with -mavx2 -mfma (mk/k.mk); qr_ops.c calls it only when the CPU has both and
 * QMAP_CPU allows (format/qm_cpu.h). Same definitions as the portable loops, same accuracy bounds. */
#ifndef QR_OPS_SIMD_H
#define QR_OPS_SIMD_H

#include <stddef.h>

void qr_ops_sigmoid_avx2(float *x, size_t n);
void qr_ops_silu_avx2(float *x, size_t n);
void qr_ops_gelu_tanh_avx2(float *x, size_t n);
void qr_ops_swiglu_avx2(float *gate, const float *up, size_t n);

#endif /* QR_OPS_SIMD_H */
