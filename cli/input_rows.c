/* input_rows.c — see input_rows.h. */
#include "input_rows.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "qm_fileio.h"

void input_rows_free(input_array *a)
{
    qc_source_free(a->src);
    qc_idx_free(&a->idx);
    memset(a, 0, sizeof *a);
}

/* The decompressed size an IDX file of `file_size` bytes may reach: 0 (qc_idx's own 4 GiB cap) for a
 * plain file or with --allow-large. */
static uint64_t idx_cap(const uint8_t *head, uint64_t file_size, bool allow_large)
{
    bool gzip = head[0] == 0x1f && head[1] == 0x8b;
    if (!gzip || allow_large) return 0;
    uint64_t ratio = file_size > UINT64_MAX / INPUT_MAX_INFLATION ? UINT64_MAX : file_size * INPUT_MAX_INFLATION;
    return ratio > INPUT_INFLATE_FREE ? ratio : INPUT_INFLATE_FREE;
}

static int open_idx(const char *path, const char *what, uint64_t cap, uint64_t file_size, input_array *a)
{
    qm_error e;
    if (qc_idx_read(path, cap, &a->idx, &e) != QM_OK) {
        fprintf(stderr, "qmap run: %s: %s\n", what, e.message);
        if (cap && e.code == QM_ERR_UNSUPPORTED)
            fprintf(stderr, "qmap run: %s: a gzip file of %llu bytes may inflate to %ux its size or %llu MiB, "
                            "whichever is more (a gzip bomb inflates further); if the file is genuine, "
                            "--allow-large reads it\n",
                    what, (unsigned long long)file_size, INPUT_MAX_INFLATION,
                    (unsigned long long)(INPUT_INFLATE_FREE >> 20));
        return 1;
    }
    a->dtype = a->idx.dtype;
    a->rank = a->idx.rank;
    a->shape = a->idx.shape;
    a->bytes = a->idx.data;
    return 0;
}

static int open_npy(const char *path, const char *what, input_array *a)
{
    qm_error e;
    if (qc_open_npy(path, &a->src, &e) != QM_OK) {
        fprintf(stderr, "qmap run: %s: %s\n", what, e.message);
        return 1;
    }
    const qc_tensor *t = &a->src->tensors[0];
    if (!qc_tensor_is_contiguous(t)) {
        fprintf(stderr, "qmap run: %s: %s: a Fortran-order array; save it C-contiguous (np.ascontiguousarray)\n", what,
                path);
        return 1;
    }
    if (qc_source_load(a->src, t->storage, &a->bytes, &e) != QM_OK) {
        fprintf(stderr, "qmap run: %s: %s\n", what, e.message);
        return 1;
    }
    a->bytes += t->offset * qc_dtype_size(t->dtype);
    a->dtype = t->dtype;
    a->rank = t->rank;
    a->shape = t->shape;
    return 0;
}

int input_rows_open(const char *path, const char *what, bool allow_large, input_array *a)
{
    memset(a, 0, sizeof *a);
    qm_error e;
    uint8_t head[8] = { 0 };
    ssize_t got = -1;
    struct stat st;
    int fd = qm_open_regular(path, &st, &e);
    if (fd >= 0) {
        got = read(fd, head, sizeof head);
        close(fd);
    }
    if (fd < 0 || got < 0) {
        fprintf(stderr, "qmap run: %s: %s\n", what, fd < 0 ? e.message : strerror(errno));
        return 1;
    }
    if (qc_idx_sniff(head, (size_t)got) && memcmp(head, "\x93NUMPY", got >= 6 ? 6 : (size_t)got))
        return open_idx(path, what, idx_cap(head, (uint64_t)st.st_size, allow_large), (uint64_t)st.st_size, a);
    if (got < 6 || memcmp(head, "\x93NUMPY", 6)) {
        fprintf(stderr, "qmap run: %s: %s is neither an .npy file nor an IDX file (plain or .gz)%s\n", what, path,
                got >= 2 && head[0] == 'P' && head[1] == 'K' ? "; for an .npz, save the one array as .npy" : "");
        return 1;
    }
    return open_npy(path, what, a);
}

bool input_rows_int_at(const input_array *a, uint64_t i, int64_t *v)
{
    switch (a->dtype) {
    case QC_I64: memcpy(v, a->bytes + 8 * i, 8); return true;
    case QC_I32: { int32_t w; memcpy(&w, a->bytes + 4 * i, 4); *v = w; return true; }
    case QC_I16: { int16_t w; memcpy(&w, a->bytes + 2 * i, 2); *v = w; return true; }
    case QC_I8: *v = (int8_t)a->bytes[i]; return true;
    case QC_U8: *v = a->bytes[i]; return true;
    default: return false;
    }
}

bool input_rows_numeric(const input_array *a)
{
    int64_t v;
    return a->dtype == QC_F32 || a->dtype == QC_F64 || (a->rank && input_rows_int_at(a, 0, &v));
}

void input_rows_features(const input_array *a, uint64_t first, uint64_t count, uint64_t d, float scale,
                         float offset, float *dst)
{
    uint64_t i0 = first * d, n = count * d;
    if (a->dtype == QC_F32) {
        memcpy(dst, a->bytes + 4 * i0, n * sizeof *dst);
    } else if (a->dtype == QC_F64) {
        for (uint64_t i = 0; i < n; i++) {
            double v;
            memcpy(&v, a->bytes + 8 * (i0 + i), 8);
            dst[i] = (float)v;
        }
    } else {
        for (uint64_t i = 0; i < n; i++) {
            int64_t v = 0;
            input_rows_int_at(a, i0 + i, &v);
            dst[i] = (float)v * scale + offset;
        }
    }
}
