/* qm_verify.c — on-demand checks of tensor data (spec/FORMAT.md §7 R-DATA-1/2, §8), in parallel.
 *
 * Work is split by tensor (each checksum is one XXH3 stream), biggest first with dynamic scheduling,
 * so two threads stay busy unless a single tensor dominates the file.
 */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "qm_bytes.h"
#include "qm_file_internal.h"
#include "qm_guard.h"
#include "qm_hash.h"

uint64_t qm_checksum(const void *data, size_t len) { return qm_hash_select(NULL)(data, len); }

const char *qm_checksum_impl(void)
{
    const char *name;
    qm_hash_select(&name);
    return name;
}

static bool all_zero(const uint8_t *p, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        if (p[i]) return false;
    return true;
}

qm_status qm_tensor_verify(const qm_file *f, const qm_tensor *t, qm_error *err)
{
    uint64_t sum = qm_checksum(t->data, (size_t)t->size);
    if (sum != t->checksum) /* R-DATA-1 */
        return qm_fail(err, QM_ERR_TENSOR_CHECKSUM, f->path, "tensor.checksum", t->entry_offset,
                       "tensor \"%.200s\": data hashes to %016llx, table says %016llx", t->name,
                       (unsigned long long)sum, (unsigned long long)t->checksum);
    return QM_OK;
}

/* R-DATA-2 for a float tensor: no element is NaN or infinite (all exponent bits set), which no converter
 * writes and which would turn every output it reaches into NaN. Names the first such element. */
static qm_status check_finite(const qm_file *f, const qm_tensor *t, qm_error *err)
{
    const uint8_t *d = t->data;
    uint64_t bad = UINT64_MAX;
    if (t->dtype == QM_DTYPE_F32) {
        for (uint64_t i = 0; i < t->n_elements && bad == UINT64_MAX; i++)
            if ((qm_load_u32(d + 4 * i) & 0x7f800000u) == 0x7f800000u) bad = i;
    } else {
        uint16_t exp = t->dtype == QM_DTYPE_F16 ? 0x7c00 : 0x7f80;   /* F16 or BF16 */
        for (uint64_t i = 0; i < t->n_elements && bad == UINT64_MAX; i++)
            if ((qm_load_u16(d + 2 * i) & exp) == exp) bad = i;
    }
    if (bad == UINT64_MAX) return QM_OK;
    uint64_t es = t->dtype == QM_DTYPE_F32 ? 4 : 2;
    return qm_fail(err, QM_ERR_NONFINITE, f->path, "tensor.data", t->offset + bad * es,
                   "tensor \"%.200s\" element %llu (the first) is NaN or infinite", t->name, (unsigned long long)bad);
}

/* R-DATA-2 for a Q8_ROW tensor (spec 6.1): q values, row padding, row sums, scales, padding between arrays. */
static qm_status check_q8row(const qm_file *f, const qm_tensor *t, qm_error *err)
{
    qm_q8row_layout l;
    qm_q8row_layout_of(t->rank, t->dims, f->hdr.alignment, &l); /* cannot fail: validated at open */
    const uint8_t *d = t->data;
    for (uint64_t r = 0; r < l.rows; r++) {
        const int8_t *q = (const int8_t *)(d + r * l.row_stride);
        int64_t sum = 0;
        for (uint64_t j = 0; j < l.cols; j++) {
            if (q[j] == -128)
                return qm_fail(err, QM_ERR_BAD_TENSOR_DATA, f->path, "tensor.q", t->offset + r * l.row_stride + j,
                               "tensor \"%.200s\" row %llu: q value -128", t->name, (unsigned long long)r);
            sum += q[j];
        }
        if (!all_zero(d + r * l.row_stride + l.cols, l.row_stride - l.cols))
            return qm_fail(err, QM_ERR_PADDING_NONZERO, f->path, "tensor.q", t->offset + r * l.row_stride + l.cols,
                           "tensor \"%.200s\" row %llu: row padding is not zero", t->name, (unsigned long long)r);
        uint32_t su = qm_load_u32(d + l.sums_offset + 4 * r), fu = qm_load_u32(d + l.scales_offset + 4 * r);
        float scale;
        memcpy(&scale, &fu, 4);
        if ((int32_t)su != sum)
            return qm_fail(err, QM_ERR_BAD_TENSOR_DATA, f->path, "tensor.row_sums", t->offset + l.sums_offset + 4 * r,
                           "tensor \"%.200s\" row %llu: row sum %d, the row adds up to %lld", t->name,
                           (unsigned long long)r, (int32_t)su, (long long)sum);
        if (!isfinite(scale) || scale < 0)
            return qm_fail(err, QM_ERR_BAD_TENSOR_DATA, f->path, "tensor.scales", t->offset + l.scales_offset + 4 * r,
                           "tensor \"%.200s\" row %llu: scale %g is negative or not finite", t->name,
                           (unsigned long long)r, (double)scale);
    }
    uint64_t q_end = l.rows * l.row_stride, scales_end = l.scales_offset + 4 * l.rows;
    if (!all_zero(d + q_end, l.scales_offset - q_end) || !all_zero(d + scales_end, l.sums_offset - scales_end))
        return qm_fail(err, QM_ERR_PADDING_NONZERO, f->path, "tensor.padding", t->offset,
                       "tensor \"%.200s\": padding between its arrays is not zero", t->name);
    return QM_OK;
}

/* R-DATA-2's rule for the elements of each dtype (NULL: none beyond R-DATA-1), beside its row in
 * qm_format.c. */
typedef qm_status data_rule_fn(const qm_file *f, const qm_tensor *t, qm_error *err);
static data_rule_fn *const data_rules[QM_DTYPE_ID_LIMIT] = {
    [QM_DTYPE_F32] = check_finite,
    [QM_DTYPE_F16] = check_finite,
    [QM_DTYPE_BF16] = check_finite,
    [QM_DTYPE_Q8_ROW] = check_q8row,
};

/* R-DATA-2 for one tensor: the gap before it, then its dtype's rule. */
static qm_status check_full(const qm_file *f, uint64_t i, qm_error *err)
{
    const qm_tensor *t = &f->tensors[i];
    uint64_t gap_start = i == 0 ? f->hdr.data_offset : f->tensors[i - 1].offset + f->tensors[i - 1].size;
    if (!all_zero(f->base + gap_start, t->offset - gap_start))
        return qm_fail(err, QM_ERR_PADDING_NONZERO, f->path, "tensor.padding", gap_start,
                       "non-zero byte in the padding before tensor \"%.200s\"", t->name);
    data_rule_fn *rule = t->dtype < QM_DTYPE_ID_LIMIT ? data_rules[t->dtype] : NULL; /* known: R-TENSOR-5 */
    return rule ? rule(f, t, err) : QM_OK;
}

/* R-DATA-1 (and R-DATA-2 if full) for tensor i, under a guard: a file that shrinks while it is hashed is
 * an error naming it, not a SIGBUS (format/qm_guard.h). Safe to call from several threads at once. */
static qm_status check_one(const qm_file *f, uint64_t i, bool full, qm_error *err)
{
    qm_guard g;
    qm_guard_push(&g, f->base, (size_t)f->size);
    if (sigsetjmp(g.jump, 0)) {
        qm_guard_pop(&g);
        return qm_guard_fail(&g, err, f->path, f->base);
    }
    qm_status s = qm_tensor_verify(f, &f->tensors[i], err);
    if (s == QM_OK && full) s = check_full(f, i, err);
    qm_guard_pop(&g);
    return s;
}

typedef struct { uint64_t size, index; } job;
static int cmp_job_desc(const void *a, const void *b)
{
    const job *x = a, *y = b;
    if (x->size != y->size) return x->size < y->size ? 1 : -1;
    return x->index < y->index ? -1 : (x->index > y->index);
}

qm_status qm_verify(const qm_file *f, const qm_verify_opts *opts, qm_status *status, qm_verify_report *report,
                    qm_error *err)
{
    uint64_t n = f->hdr.tensor_count;
    bool full = opts && opts->full;
    int threads = opts && opts->threads > 0 ? opts->threads : omp_get_max_threads();
    double t0 = omp_get_wtime();
    qm_status *st = status ? status : calloc(n ? n : 1, sizeof *st);
    job *jobs = malloc((n ? n : 1) * sizeof *jobs);
    if (!st || !jobs) {
        if (!status) free(st);
        free(jobs);
        return qm_fail(err, QM_ERR_NOMEM, f->path, NULL, QM_NO_OFFSET, "out of memory");
    }
    for (uint64_t i = 0; i < n; i++) jobs[i] = (job){ f->tensors[i].size, i };
    qsort(jobs, (size_t)n, sizeof *jobs, cmp_job_desc);

    uint64_t bytes = 0;
    #pragma omp parallel for schedule(dynamic, 1) num_threads(threads) reduction(+ : bytes)
    for (int64_t k = 0; k < (int64_t)n; k++) {
        uint64_t i = jobs[k].index;
        st[i] = check_one(f, i, full, NULL);
        bytes += f->tensors[i].size;
    }

    qm_status first = QM_OK;
    uint64_t bad = 0;
    for (uint64_t i = 0; i < n; i++)
        if (st[i] != QM_OK) {
            if (!bad) first = check_one(f, i, full, err);   /* redo the first failure to build its message */
            bad++;
        }
    if (report) {
        report->tensors_checked = n;
        report->tensors_bad = bad;
        report->bytes_hashed = bytes;
        report->seconds = omp_get_wtime() - t0;
    }
    if (!status) free(st);
    free(jobs);
    return first;
}
