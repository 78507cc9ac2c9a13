/* qc_crc32.c — CRC-32 variant choice and the portable path (see qc_crc32.h). */
#include "qc_crc32.h"

#include <zlib.h>

#include "qm_cpu.h"

/* Below this the vector set-up (and the final reduction) costs more than zlib's table loop saves. */
#define CLMUL_MIN_BYTES 64u

qc_crc32_impl qc_crc32_best(void)
{
    qm_cpu_level level = qm_cpu_level_get();
#if defined(__x86_64__) && defined(__GNUC__)
    if (level >= QM_CPU_AVX512 && __builtin_cpu_supports("vpclmulqdq") && __builtin_cpu_supports("pclmul") &&
        __builtin_cpu_supports("sse4.1"))
        return QC_CRC32_VPCLMUL;
    if (level >= QM_CPU_AVX2 && __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1"))
        return QC_CRC32_CLMUL;
#else
    (void)level;
#endif
    return QC_CRC32_ZLIB;
}

const char *qc_crc32_impl_name(qc_crc32_impl impl)
{
    return impl == QC_CRC32_VPCLMUL ? "vpclmul" : impl == QC_CRC32_CLMUL ? "pclmul" : "zlib";
}

/* zlib takes its length as z_size_t (size_t where zlib is built for large files, as Debian's is); still
 * feed it in pieces below 1 GiB so that a narrower build can never truncate a length. */
static uint32_t crc_zlib(uint32_t crc, const uint8_t *p, size_t len)
{
    while (len) {
        size_t n = len < ((size_t)1 << 30) ? len : ((size_t)1 << 30);
        crc = (uint32_t)crc32_z(crc, p, (z_size_t)n);
        p += n;
        len -= n;
    }
    return crc;
}

uint32_t qc_crc32_with(qc_crc32_impl impl, uint32_t crc, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    qc_crc32_impl best = qc_crc32_best();
    if (impl > best) impl = best;
    if (impl == QC_CRC32_ZLIB || len < CLMUL_MIN_BYTES) return crc_zlib(crc, p, len);
    /* the folding works on whole 16-byte blocks; zlib finishes the tail of up to 15 bytes */
    size_t bulk = len & ~(size_t)15;
#if defined(__x86_64__) && defined(__GNUC__)
    crc = impl == QC_CRC32_VPCLMUL ? qc_crc32_vpclmul_blocks(crc, p, bulk) : qc_crc32_clmul_blocks(crc, p, bulk);
#else
    crc = crc_zlib(crc, p, bulk);
#endif
    return crc_zlib(crc, p + bulk, len - bulk);
}

uint32_t qc_crc32(uint32_t crc, const void *buf, size_t len)
{
    return qc_crc32_with(qc_crc32_best(), crc, buf, len);
}
