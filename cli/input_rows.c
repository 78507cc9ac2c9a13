/* input_rows.c — see input_rows.h. */
#include "input_rows.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "qc_idx.h"
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

/* Print "qmap run: WHAT: message" for an error the IDX or .npy reader set (its message names the file)
 * and return 1. */
static int fail_with(const input_array *a, const qm_error *e)
{
    fprintf(stderr, "qmap run: %s: %s\n", a->what, e->message);
    return 1;
}

/* Up to n bytes of the IDX stream; fewer only at its end. -1 after printing the error (a damaged or cut
 * gzip stream). */
static long long read_stream(const input_array *a, void *dst, size_t n)
{
    qm_error e;
    long long got = qc_idx_read_bytes(a->gz, a->path, dst, n, &e);
    if (got < 0) fail_with(a, &e);
    return got;
}

/* The header through convert's IDX reader (the one the fuzzer covers); only the row cap is checked here. */
static int read_idx_header(input_array *a, uint64_t *n_bytes)
{
    qc_idx_header h;
    qm_error e;
    if (qc_idx_read_header(a->gz, a->path, UINT64_MAX, &h, &e) != QM_OK) return fail_with(a, &e);
    a->dtype = h.dtype;
    a->esize = h.esize;
    a->rank = h.rank;
    memcpy(a->shape, h.shape, sizeof a->shape);
    a->row_elems = h.n_elements / h.shape[0];
    if (a->row_elems * a->esize > IDX_MAX_ROW_BYTES) return fail(a, "a row of more than 1 GiB");
    *n_bytes = h.n_elements * h.esize;
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
    if (fd < 0) return fail_with(a, &e);
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
    qc_idx_to_host(a->held, count * a->row_elems, a->esize);
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
