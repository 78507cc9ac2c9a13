/* qm_half.h — conversions between binary32 and the 16-bit float dtypes of the format (F16, BF16).
 *
 * These are the element conversions of the F16 and BF16 dtypes (spec section 6), exact and portable:
 * every module that reads or writes those dtypes goes through them, so one rounding rule holds
 * everywhere. Pure functions, no state.
 */
#ifndef QM_HALF_H
#define QM_HALF_H

#include <stdbool.h>
#include <stdint.h>

/* IEEE binary16 bits -> binary32 (exact; NaN payloads kept in the top bits, signalling NaNs stay NaN). */
float qm_f16_to_f32(uint16_t h);
/* binary32 -> binary16, round to nearest, ties to even. Values whose rounded magnitude exceeds 65504
 * become ±inf (callers that must refuse overflow check qm_f32_fits_f16 first). NaN stays NaN (quiet). */
uint16_t qm_f32_to_f16(float f);
/* True if `f` is finite and rounds to a finite binary16 (|f| < 65520). */
bool qm_f32_fits_f16(float f);

/* bfloat16 bits -> binary32 (exact). */
float qm_bf16_to_f32(uint16_t b);

#endif /* QM_HALF_H */
