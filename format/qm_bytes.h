/* qm_bytes.h — internal to format/: little-endian field access and overflow-checked size arithmetic.
 * Every header/metadata/table field is read through these (the sections are not aligned, spec §1). */
#ifndef QM_BYTES_H
#define QM_BYTES_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

static inline uint16_t qm_load_u16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline uint32_t qm_load_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static inline uint64_t qm_load_u64(const uint8_t *p)
{
    return (uint64_t)qm_load_u32(p) | ((uint64_t)qm_load_u32(p + 4) << 32);
}
static inline void qm_store_u16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static inline void qm_store_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline void qm_store_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* Checked arithmetic: return false (and leave *out unspecified) on overflow. R-GEN-1. */
static inline bool qm_add_u64(uint64_t a, uint64_t b, uint64_t *out) { return !__builtin_add_overflow(a, b, out); }
static inline bool qm_mul_u64(uint64_t a, uint64_t b, uint64_t *out) { return !__builtin_mul_overflow(a, b, out); }
/* align must be a power of two. */
static inline bool qm_align_up_u64(uint64_t x, uint64_t align, uint64_t *out)
{
    uint64_t t;
    if (!qm_add_u64(x, align - 1, &t)) return false;
    *out = t & ~(align - 1);
    return true;
}

#endif /* QM_BYTES_H */
