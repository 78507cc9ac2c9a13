/* qm_half.c — binary16/bfloat16 <-> binary32, bit manipulation only (no FPU rounding-mode dependence). */
#include "qm_half.h"

#include <string.h>

static uint32_t f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

float qm_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0x1f) return bits_f32(sign | 0x7f800000u | (man << 13));   /* inf / NaN */
    if (exp != 0) return bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
    if (man == 0) return bits_f32(sign);
    /* subnormal: value = man * 2^-24, exactly representable in binary32 */
    int e = -1;
    do { man <<= 1; e++; } while (!(man & 0x400u));
    return bits_f32(sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ffu) << 13));
}

uint16_t qm_f32_to_f16(float f)
{
    uint32_t u = f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t exp = (u >> 23) & 0xffu;
    uint32_t man = u & 0x7fffffu;
    if (exp == 0xff) return (uint16_t)(sign | 0x7c00u | (man ? (0x200u | (man >> 13)) : 0));
    int e = (int)exp - 127 + 15;          /* biased binary16 exponent */
    if (e >= 0x1f) return (uint16_t)(sign | 0x7c00u);
    if (e <= 0) {
        /* subnormal or zero in binary16: shift the full significand (with its implicit 1) */
        if (e < -10) return sign;         /* below half the smallest subnormal: rounds to 0 */
        uint32_t m = man | 0x800000u;
        uint32_t shift = (uint32_t)(14 - e);              /* 14..24 */
        uint32_t q = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1u);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1u))) q++;
        return (uint16_t)(sign | q);      /* a carry into bit 10 gives the smallest normal, correctly */
    }
    uint32_t q = ((uint32_t)e << 10) | (man >> 13);
    uint32_t rem = man & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (q & 1u))) q++;  /* carry may roll into the exponent: fine */
    return (uint16_t)(sign | q);          /* q == 0x7c00 after a carry is inf: the overflow case */
}

bool qm_f32_fits_f16(float f)
{
    uint16_t h = qm_f32_to_f16(f);
    return (h & 0x7c00u) != 0x7c00u;
}

float qm_bf16_to_f32(uint16_t b) { return bits_f32((uint32_t)b << 16); }
