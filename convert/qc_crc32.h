/* qc_crc32.h — CRC-32 as zip (and zlib's crc32()) computes it: polynomial 0x04C11DB7, bit-reflected,
 * initial value and final XOR 0xFFFFFFFF.
 *
 * convert checks the CRC-32 of every stored torch.save entry it reads in place from the mapping (a
 * damaged download must not become a container). zlib's own crc32_z runs at 1-2 GB/s, slower than the
 * conversion it guards, so on x86-64 the bulk is folded with carry-less multiplies: PCLMULQDQ on 128-bit
 * lanes, VPCLMULQDQ on 512-bit ones where AVX-512 is allowed (tens of GB/s: the memory bus is the limit).
 * The variant is picked per call from the CPU and QMAP_CPU (format/qm_cpu.h), like every other per-ISA
 * choice; zlib is the portable fallback and the reference the others are tested against. No state.
 */
#ifndef QC_CRC32_H
#define QC_CRC32_H

#include <stddef.h>
#include <stdint.h>

typedef enum qc_crc32_impl {
    QC_CRC32_ZLIB = 0,       /* zlib's crc32_z: portable */
    QC_CRC32_CLMUL = 1,      /* SSE4.1 + PCLMULQDQ, 4 x 128-bit lanes (qm_cpu level avx2 or above) */
    QC_CRC32_VPCLMUL = 2,    /* AVX-512 F + VPCLMULQDQ, 4 x 512-bit lanes (qm_cpu level avx512) */
} qc_crc32_impl;

/* The CRC-32 of len bytes following a running value: crc = qc_crc32(crc, p, n) for each piece in order,
 * starting from 0 (as zlib's crc32). Any length and alignment; len 0 returns crc. */
uint32_t qc_crc32(uint32_t crc, const void *buf, size_t len);

/* The fastest variant this CPU has, no wider than QMAP_CPU allows. */
qc_crc32_impl qc_crc32_best(void);
/* "zlib", "pclmul", "vpclmul". */
const char *qc_crc32_impl_name(qc_crc32_impl impl);
/* qc_crc32 through a given variant (tests, benchmarks); a variant above qc_crc32_best() is not run:
 * the best one the CPU has is used instead, so this never executes an unsupported instruction. */
uint32_t qc_crc32_with(qc_crc32_impl impl, uint32_t crc, const void *buf, size_t len);

/* Per-variant bulk functions (qc_crc32_clmul.c): len >= 64 and a multiple of 16. Only call them after
 * qc_crc32_best() said the CPU has them. */
uint32_t qc_crc32_clmul_blocks(uint32_t crc, const uint8_t *buf, size_t len);
uint32_t qc_crc32_vpclmul_blocks(uint32_t crc, const uint8_t *buf, size_t len);

#endif /* QC_CRC32_H */
