/* bench_tensors.c — the test matrices of `qmap bench kernels` (bench_util.h): random weights laid out as
 * a container stores them, and the same bytes written to a temporary container and mapped. */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bench_util.h"
#include "qm_half.h"
#include "qm_writer.h"
#include "qq_kernels.h"

/* ---- test matrices -------------------------------------------------------------------------------- */

uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A weight tensor whose bytes are laid out exactly as in a .qmap file (spec/FORMAT.md 6.1 for Q8_ROW). */

const char *dtype_label(qm_dtype d)
{
    return d == QM_DTYPE_Q8_ROW ? "Q8_ROW" : d == QM_DTYPE_F16 ? "F16" : "F32";
}

void tensor_free(bench_tensor *t)
{
    if (t->bytes) munmap(t->bytes, t->size);
    t->bytes = NULL;
}

/* Rows of one tensor_make, filled by bm_run_threads' threads in contiguous parts (the threads end with
 * the fill: no team left spinning beside the measurements that follow). */
typedef struct fill_job {
    uint8_t *base;
    size_t stride, rows, cols;
    qm_dtype dtype;
    uint64_t scales_offset, sums_offset;   /* Q8_ROW */
    uint64_t seed;
} fill_job;

static void fill_part(void *ctx, int t, int nt)
{
    const fill_job *j = ctx;
    const size_t r0 = j->rows * (size_t)t / (size_t)nt, r1 = j->rows * ((size_t)t + 1) / (size_t)nt;
    const size_t cols = j->cols;
    for (size_t r = r0; r < r1; r++) {
        uint64_t s = j->seed ^ (r * 0x2545f4914f6cdd1dull), x = 0;
        uint8_t *row = j->base + r * j->stride;
        if (j->dtype == QM_DTYPE_Q8_ROW) {
            int32_t sum = 0;
            for (size_t c = 0; c < cols; c++) {
                if (c % 8 == 0) x = splitmix64(&s);
                int8_t q = (int8_t)(uint8_t)(x >> (8 * (c % 8)));
                if (q == -128) q = -127;
                row[c] = (uint8_t)q;
                sum += q;
            }
            float scale = (1.0f + (float)(splitmix64(&s) & 255) / 256.0f) / 127.0f;
            memcpy(j->base + j->scales_offset + 4 * r, &scale, 4);
            memcpy(j->base + j->sums_offset + 4 * r, &sum, 4);
        } else if (j->dtype == QM_DTYPE_F16) {
            for (size_t c = 0; c < cols; c++) {
                if (c % 4 == 0) x = splitmix64(&s);
                uint16_t b = (uint16_t)(x >> (16 * (c % 4)));
                /* sign, exponent 11..14 (|h| in [2^-4, 1)), mantissa: all finite normals */
                uint16_t h = (uint16_t)((b & 0x83ffu) | ((11u + ((b >> 10) & 3u)) << 10));
                memcpy(row + 2 * c, &h, 2);
            }
        } else {
            for (size_t c = 0; c < cols; c++) {
                float f = (float)((int64_t)(splitmix64(&s) >> 40) - (1 << 23)) / (float)(1 << 23);
                memcpy(row + 4 * c, &f, 4);
            }
        }
    }
}

/* Random contents: int8 in [-127, 127] with valid row sums and positive scales, or floats/halves in
 * [-1, 1]. Rows are filled in parallel from per-row seeds (the same bytes for any thread count). */
int tensor_make(bench_tensor *t, qm_dtype dtype, size_t rows, size_t cols, uint64_t seed)
{
    memset(t, 0, sizeof *t);
    t->dtype = dtype;
    t->rows = rows;
    t->cols = cols;
    uint64_t dims[2] = { rows, cols }, size;
    qm_q8row_layout lay = { 0 };
    if (qm_tensor_nbytes(dtype, 2, dims, QM_DEFAULT_ALIGNMENT, &size) != QM_OK ||
        (dtype == QM_DTYPE_Q8_ROW && qm_q8row_layout_of(2, dims, QM_DEFAULT_ALIGNMENT, &lay) != QM_OK)) {
        set_error("%s %zux%zu: bad shape", dtype_label(dtype), rows, cols);
        return -1;
    }
    t->size = (size_t)size;
    t->bytes = bm_anon_buffer(t->size, 1); /* 2 MiB pages, as the baseline's buffer and a mapped model */
    if (!t->bytes) {
        set_error("cannot allocate %zu MiB for the %s %zux%zu matrix", t->size / MIB, dtype_label(dtype), rows, cols);
        return -1;
    }
    memset(t->bytes, 0, t->size); /* Q8_ROW padding */
    qr_matrix *v = &t->view;
    v->dtype = dtype;
    v->rows = rows;
    v->cols = cols;
    v->data = t->bytes;
    if (dtype == QM_DTYPE_Q8_ROW) {
        v->row_stride = (size_t)lay.row_stride;
        v->scales = (const float *)(t->bytes + lay.scales_offset);
        v->row_sums = (const int32_t *)(t->bytes + lay.sums_offset);
        t->read_bytes = rows * v->row_stride + 8 * rows;
    } else {
        v->row_stride = cols * (dtype == QM_DTYPE_F16 ? 2 : 4);
        t->read_bytes = rows * v->row_stride;
    }
    fill_job j = { t->bytes, v->row_stride, rows, cols, dtype, lay.scales_offset, lay.sums_offset, seed };
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (isnan(bm_run_threads(cpus > 0 && cpus < 256 ? (int)cpus : 1, fill_part, &j))) {
        set_error("cannot start threads to fill the %s %zux%zu matrix: %s", dtype_label(dtype), rows, cols, strerror(errno));
        tensor_free(t);
        return -1;
    }
    return 0;
}

float *random_floats(size_t n, uint64_t seed)
{
    float *x = aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);
    if (!x) { set_error("out of memory (%zu floats)", n); return NULL; }
    for (size_t i = 0; i < n; i++) x[i] = (float)((int64_t)(splitmix64(&seed) >> 40) - (1 << 23)) / (float)(1 << 23);
    return x;
}

/* The mapped copy: t written as tensor "w" of the temporary container (tmp_register), opened and viewed. */
int mapped_make(const char *dir, const bench_tensor *t, mapped *m)
{
    memset(m, 0, sizeof *m);
    char name[4096];
    snprintf(name, sizeof name, "%s/qmap-bench-%ld-%s.qmap", dir, (long)getpid(), dtype_label(t->dtype));
    const char *path = tmp_register(name);
    qm_error err;
    qm_writer *w = NULL;
    uint64_t dims[2] = { t->rows, t->cols };
    if (qm_writer_create(path, NULL, &w, &err) != QM_OK) goto fail;
    if (qm_writer_meta_string(w, "general.name", "qmap bench kernels", 18, &err) != QM_OK ||
        qm_writer_add_tensor(w, "w", t->dtype, 2, dims, &err) != QM_OK)
        goto fail_abort;
    for (size_t off = 0; off < t->size;) {
        size_t len = t->size - off < 64 * MIB ? t->size - off : 64 * MIB;
        if (qm_writer_write(w, t->bytes + off, len, &err) != QM_OK) goto fail_abort;
        off += len;
    }
    if (qm_writer_finish(w, &err) != QM_OK) goto fail;
    if (qm_open(path, &m->f, &err) != QM_OK) goto fail;
    const qm_tensor *qt = qm_find_tensor(m->f, "w");
    if (!qt) {
        set_error("%s: tensor 'w' missing after writing it", path);
        goto fail_close;
    }
    if (qr_matrix_from_tensor(m->f, qt, &m->view, &err) != QM_OK) goto fail;
    return 0;
fail_abort:
    qm_writer_abort(w);
fail:
    set_error("%s", err.message);
fail_close:
    qm_close(m->f);
    m->f = NULL;
    tmp_remove();
    return -1;
}

void mapped_free(mapped *m)
{
    qm_close(m->f);
    m->f = NULL;
    tmp_remove();
}


const char *act_name(const qr_matrix *w, qr_act act)
{
    return w->dtype != QM_DTYPE_Q8_ROW ? "-" : act == QR_ACT_INT8 ? "int8" : act == QR_ACT_INT8X2 ? "i8x2" : "f32";
}
