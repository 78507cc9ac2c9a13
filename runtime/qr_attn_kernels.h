/* qr_attn_kernels.h — the two inner loops of attention, per instruction set (internal to qr_attn.c).
 *
 * A score is a dot product of a query row with a key row; an output row is a sum of value rows weighted by
 * the probabilities. Keys and values are F32 or F16 (qr_kv.h). qr_attn.c holds the portable versions;
 * qr_attn_avx2.c (AVX2 + FMA + F16C, compiled with those flags) is chosen at run time when the CPU has
 * them and QMAP_CPU allows (format/qm_cpu.h). */
#ifndef QR_ATTN_KERNELS_H
#define QR_ATTN_KERNELS_H

#include <stddef.h>
#include <stdint.h>

typedef struct qr_attn_kernels {
    float (*dot_f32)(const float *q, const float *k, size_t n);
    float (*dot_f16)(const float *q, const uint16_t *k, size_t n);
    void (*axpy_f32)(float *y, float a, const float *v, size_t n);     /* y += a·v */
    void (*axpy_f16)(float *y, float a, const uint16_t *v, size_t n);
} qr_attn_kernels;

extern const qr_attn_kernels qr_attn_kernels_avx2;

#endif /* QR_ATTN_KERNELS_H */
