/* input_rows.c — see input_rows.h. */
#include "input_rows.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "qm_fileio.h"

#define IDX_MAX_ROW_BYTES ((uint64_t)1 << 30)

/* Print "qmap run: WHAT: PATH: message" and return 1. */
__attribute__((format(printf, 2, 3))) static int fail(const input_array *a, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "qmap run: %s: %s: %s\n", a->what, a->path, msg);
    return 1;
}

void input_rows_free(input_array *a)
{
    qc_source_free(a->src);
    if (a->gz) gzclose(a->gz);
    free(a->held);
    memset(a, 0, sizeof *a);
}

/* Up to n bytes of the IDX stream; fewer only at its end. -1 after printing the error (a damaged or cut
 * gzip stream). gzread reports a stream cut short as end of data plus an error code, hence the check on
 * a short read. */
static long long read_stream(const input_array *a, void *dst, size_t n)
{
    size_t done = 0;
    while (done < n) {
        unsigned want = n - done > (1u << 30) ? 1u << 30 : (unsigned)(n - done);
        int got = gzread(a->gz, (uint8_t *)dst + done, want);
        int zerr = Z_OK;
        const char *msg = got <= 0 ? gzerror(a->gz, &zerr) : NULL;
        if (got < 0 || (got == 0 && zerr != Z_OK && zerr != Z_STREAM_END)) {
            fail(a, "the gzip stream is damaged or cut short: %s", msg ? msg : "read error");
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

/* The type, rank and dimensions; each count checked before it is used. */
static int read_idx_header(input_array *a, uint64_t *n_bytes)
{
    uint8_t head[4 + 4 * QC_MAX_RANK];
    long long got = read_stream(a, head, 4);
    if (got < 0) return 1;
    if (got < 4 || head[0] || head[1])
        return fail(a, "not an IDX file: it must start with two zero bytes, a type and a rank (MNIST's format)");
    a->dtype = idx_type(head[2], &a->esize);
    if (!a->esize)
        return fail(a, "IDX element type 0x%02x is not one of 0x08 (uint8), 0x09, 0x0B, 0x0C, 0x0D, 0x0E", head[2]);
    a->rank = head[3];
    if (a->rank == 0 || a->rank > QC_MAX_RANK) return fail(a, "IDX rank %u is outside 1..%d", a->rank, QC_MAX_RANK);
    if ((got = read_stream(a, head + 4, 4 * a->rank)) < 0) return 1;
    if (got < 4 * (long long)a->rank) return fail(a, "the file ends inside its %u dimensions", a->rank);
    uint64_t n = 1;
    for (uint32_t i = 0; i < a->rank; i++) {
        const uint8_t *p = head + 4 + 4 * i;
        uint64_t d = (uint64_t)p[0] << 24 | (uint64_t)p[1] << 16 | (uint64_t)p[2] << 8 | p[3];
        if (d == 0) return fail(a, "IDX dimension %u is 0", i);
        if (n > UINT64_MAX / a->esize / d) return fail(a, "the IDX dimensions overflow 64 bits");
        n *= d;
        a->shape[i] = d;
    }
    a->row_elems = n / a->shape[0];
    if (a->row_elems * a->esize > IDX_MAX_ROW_BYTES) return fail(a, "a row of more than 1 GiB");
    *n_bytes = n * a->esize;
    return 0;
}

/* A plain file must hold exactly its data; a gzip one may inflate only so far (see input_rows.h). */
static int check_idx_size(const input_array *a, bool gzip, uint64_t file_size, uint64_t n_bytes, bool allow_large)
{
    uint64_t header = 4 + 4ull * a->rank;
    if (!gzip && file_size < header + n_bytes)
        return fail(a, "the data ends after %llu of the %llu bytes its dimensions need",
                    (unsigned long long)(file_size - header), (unsigned long long)n_bytes);
    if (!gzip && file_size > header + n_bytes)
        return fail(a, "%llu bytes follow the last element its dimensions describe",
                    (unsigned long long)(file_size - header - n_bytes));
    uint64_t ratio = file_size > UINT64_MAX / INPUT_MAX_INFLATION ? UINT64_MAX : file_size * INPUT_MAX_INFLATION;
    uint64_t cap = ratio > INPUT_INFLATE_FREE ? ratio : INPUT_INFLATE_FREE;
    if (gzip && !allow_large && n_bytes > cap)
        return fail(a, "its dimensions describe %llu bytes of data, %.0fx this gzip file of %llu bytes: above the "
                       "%ux (or %llu MiB) allowed, as a gzip bomb would inflate. If the file is genuine, "
                       "--allow-large reads it", (unsigned long long)n_bytes,
                    (double)n_bytes / (double)(file_size ? file_size : 1), (unsigned long long)file_size,
                    INPUT_MAX_INFLATION, (unsigned long long)(INPUT_INFLATE_FREE >> 20));
    return 0;
}

static int open_idx(input_array *a, int fd, bool gzip, uint64_t file_size, bool allow_large)
{
    if (lseek(fd, 0, SEEK_SET) != 0 || !(a->gz = gzdopen(fd, "rb"))) {
        close(fd);
        return fail(a, "cannot start reading: %s", strerror(errno ? errno : ENOMEM));
    }
    gzbuffer(a->gz, 1u << 17);
    uint64_t n_bytes = 0;
    if (read_idx_header(a, &n_bytes)) return 1;
    return check_idx_size(a, gzip, file_size, n_bytes, allow_large);
}

static int open_npy(input_array *a)
{
    qm_error e;
    if (qc_open_file(QC_INPUT_NPY, a->path, &a->src, &e) != QM_OK) {
        fprintf(stderr, "qmap run: %s: %s\n", a->what, e.message);
        return 1;
    }
    const qc_tensor *t = &a->src->tensors[0];
    if (!qc_tensor_is_contiguous(t)) return fail(a, "a Fortran-order array; save it C-contiguous (np.ascontiguousarray)");
    if (qc_source_load(a->src, t->storage, &a->bytes, &e) != QM_OK) {
        fprintf(stderr, "qmap run: %s: %s\n", a->what, e.message);
        return 1;
    }
    a->bytes += t->offset * qc_dtype_size(t->dtype);
    a->dtype = t->dtype;
    a->esize = qc_dtype_size(t->dtype);
    a->rank = t->rank;
    memcpy(a->shape, t->shape, sizeof a->shape);
    a->row_elems = 1;
    for (uint32_t i = 1; i < a->rank; i++) a->row_elems *= a->shape[i];
    return 0;
}

int input_rows_open(const char *path, const char *what, bool allow_large, input_array *a)
{
    memset(a, 0, sizeof *a);
    a->path = path;
    a->what = what;
    qm_error e;
    struct stat st;
    int fd = qm_open_regular(path, &st, &e);
    if (fd < 0) {
        fprintf(stderr, "qmap run: %s: %s\n", what, e.message);
        return 1;
    }
    uint8_t head[8] = { 0 };
    ssize_t got = pread(fd, head, sizeof head, 0);
    if (got < 0) {
        close(fd);
        return fail(a, "%s", strerror(errno));
    }
    bool gzip = got >= 2 && head[0] == 0x1f && head[1] == 0x8b, npy = got >= 6 && !memcmp(head, "\x93NUMPY", 6);
    if (gzip || (!npy && got >= 4 && !head[0] && !head[1])) return open_idx(a, fd, gzip, (uint64_t)st.st_size, allow_large);
    close(fd);
    if (!npy)
        return fail(a, "neither an .npy file nor an IDX file (plain or .gz)%s",
                    got >= 2 && head[0] == 'P' && head[1] == 'K' ? "; for an .npz, save the one array as .npy" : "");
    return open_npy(a);
}

static void to_host(uint8_t *p, uint64_t n, size_t size)
{
    for (uint64_t i = 0; i < n; i++, p += size) {
        if (size == 2) { uint16_t v; memcpy(&v, p, 2); v = __builtin_bswap16(v); memcpy(p, &v, 2); }
        else if (size == 4) { uint32_t v; memcpy(&v, p, 4); v = __builtin_bswap32(v); memcpy(p, &v, 4); }
        else if (size == 8) { uint64_t v; memcpy(&v, p, 8); v = __builtin_bswap64(v); memcpy(p, &v, 8); }
    }
}

const uint8_t *input_rows_slice(input_array *a, uint64_t first, uint64_t count)
{
    uint64_t row_bytes = a->row_elems * a->esize;
    if (a->src) return a->bytes + first * row_bytes;
    if (first != a->next_row || count > a->shape[0] - first) {
        fail(a, "rows %llu.. read out of order (the reader goes front to back)", (unsigned long long)first);
        return NULL;
    }
    if (count > SIZE_MAX / row_bytes) { fail(a, "out of memory"); return NULL; }
    size_t need = (size_t)(count * row_bytes);
    if (need > a->held_cap) {
        uint8_t *h = realloc(a->held, need);
        if (!h) { fail(a, "out of memory for %zu bytes of rows", need); return NULL; }
        a->held = h;
        a->held_cap = need;
    }
    long long got = read_stream(a, a->held, need);
    if (got < 0) return NULL;
    uint64_t total = a->shape[0] * row_bytes;
    if ((uint64_t)got < need) {
        fail(a, "the data ends after %llu of the %llu bytes its dimensions need (cut short)",
             (unsigned long long)(first * row_bytes + (uint64_t)got), (unsigned long long)total);
        return NULL;
    }
    to_host(a->held, count * a->row_elems, a->esize);
    a->next_row += count;
    uint8_t extra;
    if (a->next_row == a->shape[0] && (got = read_stream(a, &extra, 1)) != 0) {
        if (got > 0) fail(a, "bytes follow the last element its dimensions describe");
        return NULL;
    }
    return a->held;
}

bool input_rows_int_at(qc_dtype dt, const uint8_t *p, uint64_t i, int64_t *v)
{
    switch (dt) {
    case QC_I64: memcpy(v, p + 8 * i, 8); return true;
    case QC_I32: { int32_t w; memcpy(&w, p + 4 * i, 4); *v = w; return true; }
    case QC_I16: { int16_t w; memcpy(&w, p + 2 * i, 2); *v = w; return true; }
    case QC_I8: *v = (int8_t)p[i]; return true;
    case QC_U8: *v = p[i]; return true;
    default: return false;
    }
}

bool input_rows_numeric(const input_array *a)
{
    static const uint8_t zero[8];
    int64_t v;
    return a->dtype == QC_F32 || a->dtype == QC_F64 || input_rows_int_at(a->dtype, zero, 0, &v);
}

void input_rows_features(const input_array *a, const uint8_t *slice, uint64_t count, float scale, float offset,
                         float *dst)
{
    uint64_t n = count * a->row_elems;
    if (a->dtype == QC_F32) {
        memcpy(dst, slice, n * sizeof *dst);
    } else if (a->dtype == QC_F64) {
        for (uint64_t i = 0; i < n; i++) {
            double v;
            memcpy(&v, slice + 8 * i, 8);
            dst[i] = (float)v;
        }
    } else {
        for (uint64_t i = 0; i < n; i++) {
            int64_t v = 0;
            input_rows_int_at(a->dtype, slice, i, &v);
            dst[i] = (float)v * scale + offset;
        }
    }
}
