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
        /* gzread reports a stream cut short as end of data plus an error code */
        int zerr = Z_OK;
        const char *msg = got <= 0 ? gzerror(in->gz, &zerr) : NULL;
        if (got < 0 || (got == 0 && zerr != Z_OK && zerr != Z_STREAM_END)) {
            in->st = qm_fail(in->err, QM_ERR_BAD_SOURCE, in->name, NULL, QM_NO_OFFSET,
                             "the gzip stream is damaged or cut short: %s", msg ? msg : "read error");
            return -1;
        }
        if (got == 0) break;
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

void qc_idx_to_host(void *data, uint64_t n, size_t esize)
{
    uint8_t *p = data;
    for (uint64_t i = 0; i < n; i++, p += esize) {
        if (esize == 2) { uint16_t v; memcpy(&v, p, 2); v = __builtin_bswap16(v); memcpy(p, &v, 2); }
        else if (esize == 4) { uint32_t v; memcpy(&v, p, 4); v = __builtin_bswap32(v); memcpy(p, &v, 4); }
        else if (esize == 8) { uint64_t v; memcpy(&v, p, 8); v = __builtin_bswap64(v); memcpy(p, &v, 8); }
    }
}

/* The type, rank and dimensions; each count checked before it is used. */
static qm_status read_header(idx_in *in, uint64_t max_bytes, qc_idx_header *h)
{
    qm_error *err = in->err;
    memset(h, 0, sizeof *h);
    uint8_t head[4];
    long long got = in_read(in, head, 4);
    if (got < 0) return in->st;
    if (got < 4 || head[0] || head[1])
        return qm_fail(err, QM_ERR_BAD_SOURCE, in->name, "magic", 0,
                       "not an IDX file: it must start with two zero bytes, a type and a rank (MNIST's format)");
    h->dtype = idx_type(head[2], &h->esize);
    if (!h->esize)
        return qm_fail(err, QM_ERR_UNSUPPORTED, in->name, "type", 2,
                       "IDX element type 0x%02x is not one of 0x08 (uint8), 0x09, 0x0B, 0x0C, 0x0D, 0x0E", head[2]);
    h->rank = head[3];
    if (h->rank == 0 || h->rank > QC_MAX_RANK)
        return qm_fail(err, QM_ERR_BAD_SOURCE, in->name, "rank", 3, "IDX rank %u is outside 1..%d", h->rank,
                       QC_MAX_RANK);
    uint8_t dims[4 * QC_MAX_RANK];
    got = in_read(in, dims, 4 * h->rank);
    if (got < 0) return in->st;
    if ((uint64_t)got < 4ull * h->rank)
        return qm_fail(err, QM_ERR_BAD_SOURCE, in->name, "dimensions", 4,
                       "the file ends inside its %u dimensions", h->rank);
    uint64_t n = 1;
    for (uint32_t i = 0; i < h->rank; i++) {
        const uint8_t *p = dims + 4 * i;
        uint64_t d = (uint64_t)p[0] << 24 | (uint64_t)p[1] << 16 | (uint64_t)p[2] << 8 | p[3];
        if (d == 0)
            return qm_fail(err, QM_ERR_BAD_SOURCE, in->name, "dimensions", 4 + 4 * i, "IDX dimension %u is 0", i);
        if (n > max_bytes / h->esize / d && max_bytes == UINT64_MAX)
            return qm_fail(err, QM_ERR_UNSUPPORTED, in->name, "dimensions", 4 + 4 * i,
                           "the IDX dimensions overflow 64 bits");
        if (n > max_bytes / h->esize / d)
            return qm_fail(err, QM_ERR_UNSUPPORTED, in->name, "dimensions", 4 + 4 * i,
                           "the dimensions describe more than %llu bytes of data",
                           (unsigned long long)max_bytes);
        n *= d;
        h->shape[i] = d;
    }
    h->n_elements = n;
    return QM_OK;
}

/* All of the data after the header, growing with what arrives: a header may claim gigabytes in a file
 * of a few bytes. Nothing may follow the last element. */
static qm_status read_data(idx_in *in, const qc_idx_header *h, uint8_t **data)
{
    qm_error *err = in->err;
    uint64_t nbytes = h->n_elements * h->esize;
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
        long long got = in_read(in, buf + have, (size_t)(cap - have));
        if (got < 0) { free(buf); return in->st; }
        if (got == 0) break;
        have += (uint64_t)got;
    }
    uint64_t header = 4 + 4ull * h->rank;
    if (have < nbytes) {
        free(buf);
        return qm_fail(err, QM_ERR_BAD_SOURCE, in->name, "data", header,
                       "the data ends after %llu of the %llu bytes its dimensions need", (unsigned long long)have,
                       (unsigned long long)nbytes);
    }
    uint8_t extra;
    long long got = in_read(in, &extra, 1);
    if (got != 0) {
        free(buf);
        if (got < 0) return in->st;
        return qm_fail(err, QM_ERR_BAD_SOURCE, in->name, "data", header + nbytes,
                       "bytes follow the last element its dimensions describe");
    }
    *data = buf;
    return QM_OK;
}

static qm_status read_idx(idx_in *in, uint64_t max_bytes, qc_idx *out)
{
    qc_idx_header h;
    qm_status st = read_header(in, max_bytes, &h);
    if (st != QM_OK) return st;
    uint8_t *data = NULL;
    if ((st = read_data(in, &h, &data)) != QM_OK) return st;
    qc_idx_to_host(data, h.n_elements, h.esize);
    out->dtype = h.dtype;
    out->rank = h.rank;
    memcpy(out->shape, h.shape, sizeof out->shape);
    out->n_elements = h.n_elements;
    out->data = data;
    return QM_OK;
}

qm_status qc_idx_read_header(struct gzFile_s *gz, const char *name, uint64_t max_bytes, qc_idx_header *h,
                             qm_error *err)
{
    idx_in in = { .name = name, .gz = gz, .err = err };
    return read_header(&in, max_bytes ? max_bytes : IDX_DEFAULT_MAX, h);
}

long long qc_idx_read_bytes(struct gzFile_s *gz, const char *name, void *dst, size_t n, qm_error *err)
{
    idx_in in = { .name = name, .gz = gz, .err = err };
    return in_read(&in, dst, n);
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
