/* qq_quantize.c — the quantize pipeline and the Q8_ROW / F16 row kernels.
 *
 * Plan first (every tensor's action and output dtype, refusals before anything is written), then stream:
 * quantized tensors are computed into one buffer (rows in parallel, per-row statistics reduced in row
 * order so the report does not depend on the thread count either), copied tensors go file to file. */
#include "qq_quantize.h"
#include "qm_guard.h"

#include <fcntl.h>
#include <fnmatch.h>
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "qm_format.h"
#include "qm_fileio.h"
#include "qm_names.h"
#include "qm_half.h"
#include "qm_reader.h"
#include "qm_writer.h"
#include "qq_kernels.h"

#define QQ_SCHEME_VERSION 1u

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- planning ---- */

typedef struct plan_item {
    const qm_tensor *t;
    qq_action action;
    uint32_t dtype_out;
    uint64_t bytes_out;
    uint32_t rank_out;        /* the input's, or 3 for a matrix written in column panels */
    uint64_t dims_out[4];
    uint64_t panels;          /* 1, or the panel count */
    /* the matrix the output's rows come from: in_rows x in_cols; in_panel_cols > 0 when the input is
     * itself in column panels [in_cols / in_panel_cols, in_rows, in_panel_cols] being cut anew (--shards) */
    uint64_t in_rows, in_cols, in_panel_cols;
} plan_item;

/* Whether `name` is layer tensor `id` of the names table for some layer: the layer read from where the
 * pattern holds it, and the name it gives equal to `name`. */
static bool is_layer_tensor(const char *name, qm_tensor_id id)
{
    const char *pat = qm_tensor_pattern(id), *at = strstr(pat, "%u");
    const size_t pre = (size_t)(at - pat);
    if (strncmp(name, pat, pre) || name[pre] < '0' || name[pre] > '9') return false;
    unsigned long layer = strtoul(name + pre, NULL, 10);
    char want[QM_TENSOR_NAME_MAX];
    return layer <= UINT_MAX && qm_tensor_name(want, sizeof want, id, (unsigned)layer) > 0 && !strcmp(want, name);
}

/* The row-parallel matrices of a decoder LM (ARCHITECTURES.md §1a, §6 "Column panels"): a layer's FFN down
 * projection (what --panel-cols applies to) and its attention output (llama's attn_o, gpt2's attn_out;
 * --shards cuts those too). */
typedef enum panel_kind { PANEL_NONE, PANEL_FFN_DOWN, PANEL_ATTN_OUT } panel_kind;

static panel_kind panel_kind_of(const char *name)
{
    if (is_layer_tensor(name, QM_TENSOR_BLK_FFN_DOWN)) return PANEL_FFN_DOWN;
    if (is_layer_tensor(name, QM_TENSOR_BLK_ATTN_O) || is_layer_tensor(name, QM_TENSOR_BLK_ATTN_OUT))
        return PANEL_ATTN_OUT;
    return PANEL_NONE;
}

uint64_t qq_panel_cols_auto(qq_scheme scheme, uint64_t ffn)
{
    const uint64_t bound = scheme == QQ_Q8_ROW ? 4096 : scheme == QQ_F16 ? 2048 : 0;
    if (!bound || ffn <= bound || ffn % 64 || ffn > ((uint64_t)1 << 24)) return 0;
    uint64_t below = 0, above = 0;   /* the widest width within the bound, the narrowest beyond it */
    for (uint64_t w = 64; w < ffn; w += 64) {
        if (ffn % w) continue;
        if (w <= bound) below = w;
        else if (!above) above = w;
    }
    return below >= bound / 2 ? below : above;
}

/* ARCHITECTURES.md §1a: the matrices a model multiplies with. In a plain tensor store (architecture
 * "none") names mean nothing to qmap: every float tensor of rank >= 2. */
static bool selected_by_rule(const qm_tensor *t, bool plain_store)
{
    size_t n = t->name_len;
    if (plain_store) return t->rank >= 2 && (t->dtype == QM_DTYPE_F32 || t->dtype == QM_DTYPE_F16 || t->dtype == QM_DTYPE_Q8_ROW);
    return t->rank >= 2 && n >= 7 && !strcmp(t->name + n - 7, ".weight") &&
           strcmp(t->name, qm_tensor_pattern(QM_TENSOR_POS_EMBD)) != 0;   /* a table added, not multiplied */
}

static bool kept(const qq_opts *o, const char *name)
{
    for (size_t i = 0; i < o->n_keep; i++)
        if (fnmatch(o->keep[i], name, 0) == 0) return true;
    return false;
}

/* --shards N (ARCHITECTURES.md §1a) on a row-parallel matrix of `cols` columns: the attention output in
 * N panels, an FFN down projection in the smallest multiple of N panels at or above the count --panel-cols
 * gives (auto: qq_panel_cols_auto's) whose width is a multiple of 64; N = 1 leaves --panel-cols's layout.
 * *panels holds that count on entry. */
static qm_status shard_panels(const qq_opts *o, const qm_tensor *t, panel_kind kind, uint64_t rows, uint64_t cols,
                              uint64_t *panels, qm_error *err)
{
    const uint64_t N = o->shards;
    if (N == 1) return QM_OK;   /* one rank: --panel-cols's layout (the attention output as one panel) */
    if (kind == PANEL_ATTN_OUT) {
        *panels = N;
        if (cols % (64 * N) == 0) return QM_OK;
        return qm_fail(err, QM_ERR_UNSUPPORTED, o->input, t->name, t->entry_offset,
                       "tensor '%s' ([%llu, %llu]): --shards %u would cut its %llu columns into %u panels of %.6g, "
                       "but a column panel must be a multiple of 64 columns wide; give a rank count N that divides "
                       "%llu (= %llu / 64), or quantize without --shards (each rank then copies its columns)",
                       t->name, (unsigned long long)rows, (unsigned long long)cols, o->shards, (unsigned long long)cols,
                       o->shards, (double)cols / (double)N, (unsigned long long)(cols / 64), (unsigned long long)cols);
    }
    if (o->panel_cols != QQ_PANEL_AUTO) {
        if (*panels % N == 0) return QM_OK;
        return qm_fail(err, QM_ERR_UNSUPPORTED, o->input, t->name, t->entry_offset,
                       "--panel-cols %llu cuts tensor '%s' (%llu columns) into %llu panel(s), not a multiple of "
                       "--shards %u: give --panel-cols auto, or a width W with %llu / W a multiple of %u",
                       (unsigned long long)o->panel_cols, t->name, (unsigned long long)cols,
                       (unsigned long long)*panels, o->shards, (unsigned long long)cols, o->shards);
    }
    for (uint64_t k = (*panels + N - 1) / N * N; k <= cols / 64; k += N)
        if (cols % k == 0 && (cols / k) % 64 == 0) {
            *panels = k;
            return QM_OK;
        }
    return qm_fail(err, QM_ERR_UNSUPPORTED, o->input, t->name, t->entry_offset,
                   "tensor '%s' ([%llu, %llu]): no multiple of --shards %u cuts its %llu columns into panels a "
                   "multiple of 64 wide; give a rank count N with %llu a multiple of 64 x N, or quantize without "
                   "--shards", t->name, (unsigned long long)rows, (unsigned long long)cols, o->shards,
                   (unsigned long long)cols, (unsigned long long)cols);
}

/* p's layout: --panel-cols on a [rows, cols] FFN down projection (an input already in panels keeps them),
 * and with --shards the rule of shard_panels over the matrix an input's own panels make up. */
static qm_status plan_panels(const qq_opts *o, const qm_tensor *t, panel_kind kind, plan_item *p, qm_error *err)
{
    const bool sharded = o->shards > 0 && kind != PANEL_NONE && (t->rank == 2 || t->rank == 3);
    /* p->in_rows, in_cols: the stored shape's (make_plan); an input in panels is read as the whole matrix */
    if (sharded && t->rank == 3) {
        p->in_panel_cols = t->dims[2];
        p->in_cols = t->dims[0] * t->dims[2];
        p->in_rows = t->dims[1];
    }
    const uint64_t cols = p->in_cols;
    const uint64_t pc = kind != PANEL_FFN_DOWN || !(t->rank == 2 || sharded) ? 0
                        : o->panel_cols == QQ_PANEL_AUTO ? qq_panel_cols_auto(o->scheme, cols)
                                                          : o->panel_cols;
    if (pc && cols > pc && (pc % 64 || cols % pc))
        return qm_fail(err, QM_ERR_UNSUPPORTED, o->input, t->name, t->entry_offset,
                       "tensor '%s' has rows of %llu columns: --panel-cols %llu must be a multiple of 64 "
                       "that divides it", t->name, (unsigned long long)cols, (unsigned long long)pc);
    uint64_t panels = pc && cols > pc ? cols / pc : 1;
    if (sharded) {
        qm_status st = shard_panels(o, t, kind, p->in_rows, cols, &panels, err);
        if (st != QM_OK) return st;
    }
    if (panels < 2 && !p->in_panel_cols) return QM_OK;   /* as stored */
    p->panels = panels;
    p->rank_out = panels >= 2 ? 3 : 2;
    const uint64_t dims[4] = { panels, p->in_rows, cols / panels, 0 }, flat[4] = { p->in_rows, cols, 0, 0 };
    memcpy(p->dims_out, panels >= 2 ? dims : flat, sizeof p->dims_out);
    return QM_OK;
}

static qm_status make_plan(const qq_opts *o, const qm_file *f, plan_item *items, qm_error *err)
{
    uint64_t alignment = qm_file_header(f)->alignment;
    const char *arch;
    uint64_t arch_len;
    bool have_arch = qm_meta_get_string(f, QM_KEY_ARCHITECTURE, &arch, &arch_len) == QM_OK;
    qm_arch a = have_arch ? qm_arch_from_name(arch, (size_t)arch_len) : QM_ARCH_COUNT;
    bool plain = have_arch && a == QM_ARCH_NONE;
    const bool auto_panels = o->panel_cols == QQ_PANEL_AUTO;
    /* the decoder LMs, whose FFN down projection ARCHITECTURES.md §4-§6 lets be stored in column panels */
    const bool lm = qm_arch_kind_of(a) == QM_KIND_LM;
    if (o->panel_cols && !auto_panels && !lm)
        return qm_fail(err, QM_ERR_UNSUPPORTED, o->input, QM_KEY_ARCHITECTURE, QM_NO_OFFSET,
                       "--panel-cols applies to decoder LM containers only");
    if (o->shards && !lm)
        return qm_fail(err, QM_ERR_UNSUPPORTED, o->input, QM_KEY_ARCHITECTURE, QM_NO_OFFSET,
                       "--shards applies to decoder LM containers only (the families qmap-mpi splits)");
    for (uint64_t i = 0; i < qm_tensor_count(f); i++) {
        const qm_tensor *t = qm_tensor_at(f, i);
        plan_item *p = &items[i];
        p->t = t;
        p->dtype_out = t->dtype;
        p->bytes_out = t->size;
        p->rank_out = t->rank;
        memcpy(p->dims_out, t->dims, sizeof p->dims_out);
        p->panels = 1;
        p->in_cols = t->rank ? t->dims[t->rank - 1] : 1;
        p->in_rows = t->n_elements / p->in_cols;
        p->in_panel_cols = 0;
        if (!selected_by_rule(t, plain)) { p->action = QQ_COPIED; continue; }
        if (kept(o, t->name)) { p->action = QQ_KEPT; continue; }
        const char *dn = qm_dtype_info(t->dtype) ? qm_dtype_info(t->dtype)->name : "?";
        if (t->dtype == QM_DTYPE_Q8_ROW)
            return qm_fail(err, QM_ERR_UNSUPPORTED, o->input, t->name, t->entry_offset,
                           "tensor '%s' is already quantized (Q8_ROW); quantize the F32 container instead", t->name);
        if (o->scheme == QQ_F16 && t->dtype == QM_DTYPE_F16)
            return qm_fail(err, QM_ERR_UNSUPPORTED, o->input, t->name, t->entry_offset,
                           "tensor '%s' is already F16; --f16 takes an F32 container", t->name);
        if (t->dtype != QM_DTYPE_F32 && !(o->scheme == QQ_Q8_ROW && t->dtype == QM_DTYPE_F16))
            return qm_fail(err, QM_ERR_UNSUPPORTED, o->input, t->name, t->entry_offset,
                           "tensor '%s' is %s; %s takes F32%s tensors (convert with --dtype f32)", t->name, dn,
                           o->scheme == QQ_Q8_ROW ? "--q8" : "--f16", o->scheme == QQ_Q8_ROW ? " or F16" : "");
        p->action = QQ_QUANTIZED;
        p->dtype_out = o->scheme == QQ_Q8_ROW ? QM_DTYPE_Q8_ROW : QM_DTYPE_F16;
        qm_status st = plan_panels(o, t, lm ? panel_kind_of(t->name) : PANEL_NONE, p, err);
        if (st != QM_OK) return st;
        st = qm_tensor_nbytes(p->dtype_out, p->rank_out, p->dims_out, alignment, &p->bytes_out);
        if (st != QM_OK)
            return qm_fail(err, st, o->input, t->name, t->entry_offset, "tensor '%s': output size overflows", t->name);
    }
    return QM_OK;
}

/* ---- per-tensor work ---- */

typedef struct work {
    const qq_opts *o;
    const qm_file *f;
    uint64_t alignment;
    int threads;
    uint8_t *out; uint64_t out_cap;          /* output buffer of the current tensor */
    float *scratch; uint64_t scratch_cap;    /* per thread: 2 rows of f32 (widened input, reconstruction) */
    qq_row_stats *rows; uint64_t rows_cap;
    const qq_kernels *kern;
} work;

static qm_status ensure(void **p, uint64_t *cap, uint64_t need, const char *what, qm_error *err)
{
    if (need <= *cap) return QM_OK;
    if (need > SIZE_MAX) return qm_fail(err, QM_ERR_NOMEM, NULL, what, QM_NO_OFFSET, "buffer too large");
    void *n = realloc(*p, (size_t)need);
    if (!n)
        return qm_fail(err, QM_ERR_NOMEM, NULL, what, QM_NO_OFFSET, "cannot allocate %llu bytes",
                       (unsigned long long)need);
    *p = n;
    *cap = need;
    return QM_OK;
}

/* Output row r's `cols` input values: a pointer into the mapping (F32 in one run), else converted or
 * gathered into wbuf. Output row r is columns (r / in_rows)·cols .. of input row r % in_rows; an input in
 * panels of in_panel_cols holds column c of a row in panel c / in_panel_cols. */
static const float *input_row(const plan_item *p, const uint8_t *in, bool from_f16, uint64_t r, uint64_t cols,
                              float *wbuf)
{
    const uint64_t row = r % p->in_rows, c0 = r / p->in_rows * cols, end = c0 + cols, w = p->in_panel_cols;
    /* the mapping is 4-byte aligned for F32 tensors (tensor offsets are multiples of 64) */
    if (!w && !from_f16) return (const float *)(const void *)(in + 4 * (row * p->in_cols + c0));
    for (uint64_t c = c0; c < end;) {
        uint64_t first = w ? c / w * p->in_rows * w + row * w + c % w : row * p->in_cols + c;
        uint64_t run = w ? w - c % w : end - c;
        if (run > end - c) run = end - c;
        float *dst = wbuf + (c - c0);
        if (!from_f16) memcpy(dst, in + 4 * first, 4 * run);
        for (uint64_t j = 0; from_f16 && j < run; j++) {
            uint16_t h;
            memcpy(&h, in + 2 * (first + j), 2);
            dst[j] = qm_f16_to_f32(h);
        }
        c += run;
    }
    return wbuf;
}

static qm_status quantize_tensor(work *k, const plan_item *p, qq_tensor_report *tr, qm_error *err)
{
    const qm_tensor *t = p->t;
    /* output rows of `cols` values; with column panels, output row R is panel R / in_rows of input row
     * R % in_rows: `cols` values from column (R / in_rows)·cols of an input row of in_cols */
    const uint64_t cols = p->in_cols / p->panels, rows = p->in_rows * p->panels;
    qm_status st;
    if ((st = ensure((void **)&k->out, &k->out_cap, p->bytes_out ? p->bytes_out : 1, "output", err)) ||
        (st = ensure((void **)&k->scratch, &k->scratch_cap, (uint64_t)k->threads * 2 * cols * sizeof(float), "scratch", err)) ||
        (st = ensure((void **)&k->rows, &k->rows_cap, rows * sizeof(qq_row_stats), "row statistics", err)))
        return st;
    qm_q8row_layout lay = { 0 };
    if (p->dtype_out == QM_DTYPE_Q8_ROW) {
        if ((st = qm_q8row_layout_of(p->rank_out, p->dims_out, k->alignment, &lay)) != QM_OK)
            return qm_fail(err, st, k->o->input, t->name, QM_NO_OFFSET, "Q8_ROW layout overflows");
        memset(k->out, 0, (size_t)p->bytes_out);   /* every padding byte is zero (R-DATA-2) */
    }
    const uint8_t *in = t->data;
    bool from_f16 = t->dtype == QM_DTYPE_F16;
    bool q8 = p->dtype_out == QM_DTYPE_Q8_ROW;
    uint8_t *out = k->out;
    qq_row_stats *rs = k->rows;
    const qq_kernels *kern = k->kern;
    float *scratch = k->scratch;
    /* Each thread takes a fixed share of the rows (as schedule(static) would) under its own guard: a
     * jump out of an OpenMP worksharing loop is not allowed, one out of the thread's own loop is. */
    volatile int faulted = 0;
    const void *volatile fault_at = NULL;
#pragma omp parallel num_threads(k->threads)
    {
        int nt = omp_get_num_threads(), id = omp_get_thread_num();
        uint64_t r_begin = rows * (uint64_t)id / (uint64_t)nt, r_end = rows * (uint64_t)(id + 1) / (uint64_t)nt;
        qm_guard g;
        qm_guard_push(&g, in, (size_t)t->size);
        if (sigsetjmp(g.jump, 0)) {
#pragma omp critical(qq_guard_fault)
            {
                faulted = 1;
                fault_at = g.fault;
            }
            r_end = r_begin;   /* skip the loop; fall through to the pop */
        }
        for (uint64_t r = r_begin; r < r_end; r++) {
            float *wbuf = scratch + (uint64_t)omp_get_thread_num() * 2 * cols, *back = wbuf + cols;
            const float *w = input_row(p, in, from_f16, r, cols, wbuf);
            rs[r].bad = 0;
            if (q8) {
                int8_t *q = (int8_t *)(out + r * lay.row_stride);
                float scale;
                int32_t sum;
                if (!kern->q8row(w, cols, q, &scale, &sum)) { rs[r].bad = 1; continue; }
                memcpy(out + lay.scales_offset + 4 * r, &scale, 4);
                memcpy(out + lay.sums_offset + 4 * r, &sum, 4);
                kern->stats(w, NULL, q, scale, cols, true, &rs[r]);
                rs[r].bad = 0;
            } else {
                int bad = kern->f16row(w, cols, (uint16_t *)(void *)(out + 2 * r * cols), back);
                if (bad) { rs[r].bad = (uint8_t)bad; continue; }
                kern->stats(w, back, NULL, 0.0f, cols, false, &rs[r]);
                rs[r].bad = 0;
            }
        }
        qm_guard_pop(&g);
    }
    if (faulted) {
        qm_guard fg = { .fault = fault_at };
        return qm_guard_fail(&fg, err, k->o->input, qm_file_bytes(k->f));
    }
    double se = 0, sw = 0, me = 0;
    uint64_t outliers = 0;
    for (uint64_t r = 0; r < rows; r++) {   /* in row order: the same sums for any thread count */
        if (rs[r].bad)
            return qm_fail(err, rs[r].bad == 1 ? QM_ERR_NONFINITE : QM_ERR_UNSUPPORTED, k->o->input, t->name,
                           t->offset, rs[r].bad == 1 ? "tensor '%s' holds NaN or Inf in row %llu; it cannot be quantized"
                                                     : "tensor '%s' row %llu holds a value beyond the F16 range (±65504)",
                           t->name, (unsigned long long)r);
        se += rs[r].sq_err;
        sw += rs[r].sq_w;
        if (rs[r].max_err > me) me = rs[r].max_err;
        outliers += rs[r].outlier;
    }
    tr->rows = rows;
    tr->sum_sq_err = se;
    tr->sum_sq_w = sw;
    tr->rel_rms_error = sw > 0 ? sqrt(se / sw) : 0;
    tr->max_abs_error = me;
    tr->outlier_rows = outliers;
    return QM_OK;
}

/* ---- reads of the input's mapping on this thread, guarded (format/qm_guard.h) ---- */

static qm_status checksum_input(const qq_opts *o, const qm_file *f, uint64_t *sum, qm_error *err)
{
    const uint8_t *base = qm_file_bytes(f);
    size_t size = (size_t)qm_file_header(f)->file_size;
    qm_guard g;
    qm_guard_push(&g, base, size);
    if (sigsetjmp(g.jump, 0)) {
        qm_guard_pop(&g);
        return qm_guard_fail(&g, err, o->input, base);
    }
    *sum = qm_checksum(base, size);
    qm_guard_pop(&g);
    return QM_OK;
}

/* A tensor copied unchanged: the writer hashes the mapped bytes and copies them from fd. */
static qm_status copy_tensor(const work *k, qm_writer *w, const qm_tensor *t, int fd, qm_error *err)
{
    const uint8_t *base = qm_file_bytes(k->f);
    qm_guard g;
    qm_guard_push(&g, base, (size_t)qm_file_header(k->f)->file_size);
    if (sigsetjmp(g.jump, 0)) {
        qm_guard_pop(&g);
        return qm_guard_fail(&g, err, k->o->input, base);
    }
    qm_status st = qm_writer_write(w, t->data, (size_t)t->size, err);
    qm_guard_pop(&g);
    /* write() from the mapping of a file that shrank fails with EFAULT, not a fault */
    return qm_guard_check_shrunk(st, fd, qm_file_header(k->f)->file_size, k->o->input, err);
}

/* ---- metadata ---- */

static qm_status write_metadata(const qq_opts *o, const qm_file *f, qm_writer *w, qm_error *err)
{
    const char *ft = o->scheme == QQ_Q8_ROW ? "q8_row" : "f16";
    bool had_ft = false;
    qm_status st = QM_OK;
    for (uint64_t i = 0; i < qm_meta_count(f) && st == QM_OK; i++) {
        const qm_meta *m = qm_meta_at(f, i);
        if (!strncmp(m->key, QM_KEY_QUANTIZE_PREFIX, strlen(QM_KEY_QUANTIZE_PREFIX))) continue;   /* an F16 input's own record: replaced below */
        if (!strcmp(m->key, QM_KEY_FILE_TYPE)) {
            st = qm_writer_meta_string(w, m->key, ft, strlen(ft), err);
            had_ft = true;
        } else {
            st = qm_writer_meta_copy(w, m, err);
        }
    }
    if (st == QM_OK && !had_ft) st = qm_writer_meta_string(w, QM_KEY_FILE_TYPE, ft, strlen(ft), err);
    if (st == QM_OK) st = qm_writer_meta_string(w, QM_KEY_QUANTIZE_SCHEME, ft, strlen(ft), err);
    if (st == QM_OK) st = qm_writer_meta_u32(w, QM_KEY_QUANTIZE_VERSION, QQ_SCHEME_VERSION, err);
    uint64_t source_sum = 0;
    if (st == QM_OK) st = checksum_input(o, f, &source_sum, err);
    if (st == QM_OK) st = qm_writer_meta_u64(w, QM_KEY_QUANTIZE_SOURCE, source_sum, err);
    if (st == QM_OK) st = qm_writer_meta_string_array(w, QM_KEY_QUANTIZE_KEEP, o->keep, NULL, o->n_keep, err);
    if (st == QM_OK && o->shards) st = qm_writer_meta_u32(w, QM_KEY_QUANTIZE_SHARDS, o->shards, err);
    return st;
}

/* ---- the pipeline ---- */

qm_status qq_quantize(const qq_opts *o, qq_report *report, qm_error *err)
{
    double t_start = now_s();
    qq_report local;
    qq_report *rep = report ? report : &local;
    memset(rep, 0, sizeof *rep);
    if (!o || !o->input || !o->output || (o->scheme != QQ_Q8_ROW && o->scheme != QQ_F16))
        return qm_fail(err, QM_ERR_INVALID_ARGUMENT, NULL, NULL, QM_NO_OFFSET, "input, output and scheme are required");
    qm_file *f = NULL;
    qm_writer *w = NULL;
    plan_item *items = NULL;
    work k = { .o = o };
    int fd = -1;
    qm_status st = qm_open(o->input, &f, err);
    if (st != QM_OK) goto out;
    uint64_t n = qm_tensor_count(f);
    items = calloc(n ? n : 1, sizeof *items);
    rep->tensors = calloc(n ? n : 1, sizeof *rep->tensors);
    if (!items || !rep->tensors) { st = qm_fail(err, QM_ERR_NOMEM, NULL, NULL, QM_NO_OFFSET, "out of memory"); goto out; }
    if ((st = make_plan(o, f, items, err)) != QM_OK) goto out;
    k.f = f;
    k.alignment = qm_file_header(f)->alignment;
    k.threads = o->threads > 0 ? o->threads : omp_get_max_threads();
    k.kern = qq_kernels_get();
    rep->kernels = k.kern->name;
    rep->threads = k.threads;
    if ((fd = qm_open_regular(o->input, NULL, err)) < 0) {
        st = err ? err->code : QM_ERR_IO;
        goto out;
    }
    qm_writer_opts wo = { .alignment = k.alignment };
    if ((st = qm_writer_create(o->output, &wo, &w, err)) != QM_OK) goto out;
    if ((st = write_metadata(o, f, w, err)) != QM_OK) goto out;
    uint64_t total = 0, done = 0;
    for (uint64_t i = 0; i < n && st == QM_OK; i++) {
        const qm_tensor *t = items[i].t;
        st = qm_writer_add_tensor(w, t->name, items[i].dtype_out, items[i].rank_out, items[i].dims_out, err);
        total += items[i].bytes_out;
    }
    double t0 = now_s();
    for (uint64_t i = 0; i < n && st == QM_OK; i++) {
        const plan_item *p = &items[i];
        const qm_tensor *t = p->t;
        qq_tensor_report *tr = &rep->tensors[i];
        if (o->on_progress) {
            qq_progress pr = { i, n, done, total, now_s() - t0 };
            o->on_progress(o->user, &pr);
        }
        if (!(tr->name = strdup(t->name))) { st = qm_fail(err, QM_ERR_NOMEM, NULL, NULL, QM_NO_OFFSET, "out of memory"); break; }
        rep->n_tensors = i + 1;
        tr->action = p->action;
        tr->dtype_in = t->dtype;
        tr->dtype_out = p->dtype_out;
        tr->rank = p->rank_out;
        memcpy(tr->dims, p->dims_out, sizeof tr->dims);
        tr->panels = p->panels;
        tr->bytes_in = t->size;
        tr->bytes_out = p->bytes_out;
        if (p->action == QQ_QUANTIZED) {
            if ((st = quantize_tensor(&k, p, tr, err)) != QM_OK) break;
            st = qm_writer_write(w, k.out, (size_t)p->bytes_out, err);
            rep->n_quantized++;
        } else {
            st = copy_tensor(&k, w, t, fd, err);
            rep->n_copied++;
        }
        done += p->bytes_out;
        rep->bytes_in += t->size;
        rep->bytes_out += p->bytes_out;
    }
    if (st == QM_OK && o->on_progress) {
        qq_progress pr = { n, n, done, total, now_s() - t0 };
        o->on_progress(o->user, &pr);
    }
    if (st == QM_OK) {
        st = qm_writer_finish(w, err);
        w = NULL;
    }
    double se = 0, sw = 0;
    for (uint64_t i = 0; i < rep->n_tensors; i++) { se += rep->tensors[i].sum_sq_err; sw += rep->tensors[i].sum_sq_w; }
    rep->rel_rms_error = sw > 0 ? sqrt(se / sw) : 0;
out:
    qm_writer_abort(w);
    if (fd >= 0) close(fd);
    free(items);
    free(k.out);
    free(k.scratch);
    free(k.rows);
    qm_close(f);
    rep->seconds = now_s() - t_start;
    if (rep == &local) qq_report_free(&local);
    return st;
}

void qq_report_free(qq_report *r)
{
    if (!r) return;
    for (uint64_t i = 0; i < r->n_tensors; i++) free(r->tensors[i].name);
    free(r->tensors);
    memset(r, 0, sizeof *r);
}
