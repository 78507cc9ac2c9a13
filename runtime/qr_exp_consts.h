/* qr_exp_consts.h — the constants of qmap's vector e^x (x <= 0), written once for every width that
 * computes it (qr_exp_avx2.h: 8 lanes; qr_attn_avx512.c: 16). The method: x = n·ln2 + r with |r| <= ln2/2
 * (ln2 split in a high part exact in float and a low correction), e^r by Cephes' degree-6 expf polynomial
 * (with FMA within 2 ulp), times 2^n built in the exponent bits; below QR_EXP_UNDER the result is 0. */
#ifndef QR_EXP_CONSTS_H
#define QR_EXP_CONSTS_H

#define QR_EXP_UNDER (-87.33654475f)        /* below this, 2^n leaves the normal range: the result is 0 */
#define QR_EXP_OVER 88.0f                   /* x is clamped to this (the inputs are <= 0; NaN passes) */
#define QR_EXP_LOG2E 1.44269504088896341f
#define QR_EXP_LN2_HI 0.693359375f
#define QR_EXP_LN2_LO (-2.12194440e-4f)
#define QR_EXP_P0 1.9875691500e-4f          /* the polynomial, highest degree first */
#define QR_EXP_P1 1.3981999507e-3f
#define QR_EXP_P2 8.3334519073e-3f
#define QR_EXP_P3 4.1665795894e-2f
#define QR_EXP_P4 1.6666665459e-1f
#define QR_EXP_P5 5.0000001201e-1f

#endif /* QR_EXP_CONSTS_H */
