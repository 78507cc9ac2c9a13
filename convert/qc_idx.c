/* qc_idx.c — IDX files, plain or gzip (qc_idx.h). One reader over two byte sources: zlib's gzread for a
 * file (it reads a plain file as it is and inflates a gzip one) and a memory buffer for the fuzz target. */
#include "qc_idx.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "qm_fileio.h"

#define IDX_DEFAULT_MAX ((uint64_t)4 << 30)
#define IDX_CHUNK ((size_t)1 << 20)

/* Where the bytes come from: a gzFile, or a buffer with a read position. */
typedef struct idx_in {
    const char *name;
    gzFile gz;
    const uint8_t *mem;
    size_t mem_len, mem_pos;
    qm_error *err;
    qm_status st;                    /* why in_read returned -1 */
} idx_in;

/* Up to n bytes into dst; returns how many (< n only at the end of the data), or -1 with err set. */
static long long in_read(idx_in *in, void *dst, size_t n)
{
    if (!in->gz) {
        size_t k = in->mem_len - in->mem_pos < n ? in->mem_len - in->mem_pos : n;
        if (k) memcpy(dst, in->mem + in->mem_pos, k);
        in->mem_pos += k;
        return (long long)k;
    }
    size_t done = 0;
    while (done < n) {
        unsigned want = n - done > (1u << 30) ? 1u << 30 : (unsigned)(n - done);
        int got = gzread(in->gz, (uint8_t *)dst + done, want);
        if (got < 0 || (got == 0 && !gzeof(in->gz))) {
            int zerr;
            const char *msg = gzerror(in->gz, &zerr);
            in->st = qm_fail(in->err, QM_ERR_BAD_SOURCE, in->name, NULL, QM_NO_OFFSET,
                    "the gzip stream is damaged after %zu bytes of IDX data: %s", done, msg ? msg : "read error");
            return -1;
        }
        if (got == 0) {
            /* gzread reports a stream cut short as end of data plus an error code */
            int zerr;
            const char *msg = gzerror(in->gz, &zerr);
            if (zerr != Z_OK && zerr != Z_STREAM_END) {
                in->st = qm_fail(in->err, QM_ERR_BAD_SOURCE, in->name, NULL, QM_NO_OFFSET,
                        "the gzip stream is damaged or cut short: %s", msg ? msg : "read error");
                return -1;
            }
            break;
        }
        done += (size_t)got;
    }
    return (long long)done;
}

static qc_dtype idx_type(uint8_t code, size_t *size)
{
    switch (code) {
    case 0x08: *size = 1; return QC_U8;
    case 0x09: *size = 1; return QC_I8;
    case 0x0B: *size = 2; return QC_I16;
    case 0x0C: *size = 4; return QC_I32;
    case 0x0D: *size = 4; return QC_F32;
    case 0x0E: *size = 8; return QC_F64;
    default: *size = 0; return (qc_dtype)0;
    }
}

static void to_host(void *data, uint64_t n, size_t size)
{
    uint8_t *p = data;
    for (uint64_t i = 0; i < n; i++, p += size) {
        if (size == 2) { uint16_t v; memcpy(&v, p, 2); v = __builtin_bswap16(v); memcpy(p, &v, 2); }
        else if (size == 4) { uint32_t v; memcpy(&v, p, 4); v = __builtin_bswap32(v); memcpy(p, &v, 4); }
        else if (size == 8) { uint64_t v; memcpy(&v, p, 8); v = __builtin_bswap64(v); memcpy(p, &v, 8); }
    }
}

static qm_status read_idx(idx_in *in, uint64_t max_bytes, qc_idx *out)
{
    qm_error *err = in->err;
    uint8_t head[4];
    long long got = in_read(in, head, 4);
    if (got < 0) return in->st;
    if (got < 4 || head[0] || head[1])
        return qm_fail(err, QM_ERR_BAD_SOURCE, in->name, "magic", 0,
                       "not an IDX file: it must start with two zero bytes, a type and a rank (MNIST's format)");
    size_t esize;
    qc_dtype dt = idx_type(head[2], &esize);
    if (!esize)
        return qm_fail(err, QM_ERR_UNSUPPORTED, in->name, "type", 2,
                       "IDX element type 0x%02x is not one of 0x08 (uint8), 0x09, 0x0B, 0x0C, 0x0D, 0x0E", head[2]);
    uint32_t rank = head[3];
    if (rank == 0 || rank > QC_MAX_RANK)
        return qm_fail(err, QM_ERR_BAD_SOURCE, in->name, "rank", 3, "rank %u is outside 1..%d", rank, QC_MAX_RANK);
    uint8_t dims[4 * QC_MAX_RANK];
    got = in_read(in, dims, 4 * rank);
    if (got < 0) return in->st;
    if ((uint64_t)got < 4ull * rank)
        return qm_fail(err, QM_ERR_BAD_SOURCE, in->name, "dimensions", 4,
                       "the file ends inside its %u dimensions", rank);
    uint64_t n = 1;
    for (uint32_t i = 0; i < rank; i++) {
        uint64_t d = (uint64_t)dims[4 * i] << 24 | (uint64_t)dims[4 * i + 1] << 16 | (uint64_t)dims[4 * i + 2] << 8 |
                     dims[4 * i + 3];
        if (d == 0)
            return qm_fail(err, QM_ERR_BAD_SOURCE, in->name, "dimensions", 4 + 4 * i, "dimension %u is 0", i);
        if (n > max_bytes / esize / d)
            return qm_fail(err, QM_ERR_UNSUPPORTED, in->name, "dimensions", 4 + 4 * i,
                           "the dimensions describe more than %llu bytes of data",
                           (unsigned long long)max_bytes);
        n *= d;
        out->shape[i] = d;
    }
    uint64_t nbytes = n * esize;
    /* grow with what arrives: a header may claim gigabytes in a file of a few bytes */
    uint8_t *buf = NULL;
    uint64_t have = 0, cap = 0;
    while (have < nbytes) {
        if (have == cap) {
            uint64_t next = cap ? cap * 2 : IDX_CHUNK;
            if (next > nbytes) next = nbytes;
            uint8_t *nb = realloc(buf, (size_t)next);
            if (!nb) {
                free(buf);
                return qm_fail(err, QM_ERR_NOMEM, in->name, NULL, QM_NO_OFFSET, "out of memory at %llu bytes",
                               (unsigned long long)next);
            }
            buf = nb;
            cap = next;
        }
        got = in_read(in, buf + have, (size_t)(cap - have));
        if (got < 0) { free(buf); return in->st; }
        if (got == 0) break;
        have += (uint64_t)got;
    }
    uint64_t header = 4 + 4ull * rank;
    if (have < nbytes) {
        free(buf);
        return qm_fail(err, QM_ERR_BAD_SOURCE, in->name, "data", header,
                       "the data ends after %llu of the %llu bytes its dimensions need", (unsigned long long)have,
                       (unsigned long long)nbytes);
    }
    uint8_t extra;
    got = in_read(in, &extra, 1);
    if (got != 0) {
        free(buf);
        if (got < 0) return in->st;
        return qm_fail(err, QM_ERR_BAD_SOURCE, in->name, "data", header + nbytes,
                       "bytes follow the last element its dimensions describe");
    }
    to_host(buf, n, esize);
    out->dtype = dt;
    out->rank = rank;
    out->n_elements = n;
    out->data = buf;
    return QM_OK;
}

int qc_idx_sniff(const uint8_t *head, size_t len)
{
    if (len >= 2 && head[0] == 0x1f && head[1] == 0x8b) return 1;   /* gzip */
    size_t esize;
    return len >= 4 && !head[0] && !head[1] && idx_type(head[2], &esize) && head[3] >= 1 && head[3] <= QC_MAX_RANK;
}

qm_status qc_idx_parse(const void *data, size_t len, const char *name, uint64_t max_bytes, qc_idx *out,
                       qm_error *err)
{
    memset(out, 0, sizeof *out);
    idx_in in = { .name = name, .mem = data, .mem_len = data ? len : 0, .err = err };
    return read_idx(&in, max_bytes ? max_bytes : IDX_DEFAULT_MAX, out);
}

qm_status qc_idx_read(const char *path, uint64_t max_bytes, qc_idx *out, qm_error *err)
{
    memset(out, 0, sizeof *out);
    int fd = qm_open_regular(path, NULL, err);
    if (fd < 0) return err ? err->code : QM_ERR_IO;
    gzFile gz = gzdopen(fd, "rb");
    if (!gz) {
        close(fd);
        return qm_fail(err, QM_ERR_NOMEM, path, NULL, QM_NO_OFFSET, "cannot start reading (out of memory)");
    }
    gzbuffer(gz, 1u << 17);
    idx_in in = { .name = path, .gz = gz, .err = err };
    qm_status st = read_idx(&in, max_bytes ? max_bytes : IDX_DEFAULT_MAX, out);
    gzclose(gz);   /* closes fd */
    return st;
}

void qc_idx_free(qc_idx *x)
{
    if (!x) return;
    free(x->data);
    memset(x, 0, sizeof *x);
}
