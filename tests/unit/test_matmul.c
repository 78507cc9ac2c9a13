/* test_matmul.c — qr_matmul / qr_matvec (runtime/qr_matmul.h) in every kernel variant this CPU has,
 * against references computed here from the stored weights and from nothing of the library's.
 *
 * What must hold (each check can fail; every failure names the variant, dtype, shape, strides, threads,
 * element and values):
 *   - F32, F16 and Q8_ROW with QR_ACT_F32 are within the float-dot bound of the exact f64 product of
 *     the stored weights (bound_float below says why the bound holds for any summation order or FMA).
 *   - Q8_ROW with QR_ACT_INT8 equals, bit for bit, the integer product of the activation rule of
 *     qr_quantize_x.h re-implemented here from its header comment (so all variants agree bit for bit),
 *     and is within (s_x/2)·Σ|W| of the exact product with the original X (bound_int8 says why).
 *   - Q8_ROW with QR_ACT_INT8X2 equals, bit for bit, the sum of the two int8 products (the residual
 *     x − s_x·q re-quantized by the same rule), and is within bound_int8x2 of the exact product.
 *   - Shapes around every vector width and tile (cols 1…4095, rows 1…33, n 1…70), strided and
 *     misaligned X, W and Y; Y's padding and guard elements stay untouched; buffers are sized exactly,
 *     so an over-read shows under ASan (make unit-asan).
 *   - Zero rows, extremes (1e15 next to 1e-30 and subnormals), rounding ties and the 2^-100 threshold of
 *     the activation rule; NaN/Inf in X poison exactly their own row of Y.
 *   - Views of tensors in a real mapped container (qr_matrix_from_tensor), refusal of I32/BF16.
 *   - Determinism: threads 1/2/3/default and n split in pieces give the same bits; so does matvec vs a
 *     row of matmul for int8 (float decode may sum in another order: held to the bound instead); a
 *     decode output has the same bits whether its row was read as one of four streams or alone.
 *   - QR_ACT_AUTO is QR_ACT_F32 for n = 1 and QR_ACT_INT8X2 for n > 1, bit for bit.
 *   - Argument errors leave Y untouched; work sizes; variant names; qr_kernels_get() honours QMAP_CPU.
 *   - The portable kernel table has a block kernel for exactly the (dtype, kind of X) pairs the runtime's
 *     dtype rows list (qr_dtype.h), every other table one for each int8-X pair and none for unlisted
 *     pairs, so dispatch through the table (float X falls back to the portable kernel) never meets a NULL.
 * Variants the CPU lacks are skipped and say so. PRNG: splitmix64 (tu_rng) with fixed seeds. */
#include "test_util.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qm_half.h"
#include "qq_kernels.h"
#include "qr_dtype.h"
#include "qr_kernels.h"
#include "qr_matmul.h"
#include "test_pools.h"

_Static_assert(FLT_EVAL_METHOD == 0, "the float references below must evaluate in binary32");

/* ------------------------------------------------------------------------------------------------ */
/* Small helpers */

static uint32_t fbits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static double unif(uint64_t *s) { return (double)(tu_rng(s) >> 11) * 0x1p-53; } /* [0, 1) */
static double sym(uint64_t *s) { return 2.0 * unif(s) - 1.0; }                   /* (-1, 1) */

static void *xalloc(size_t bytes) /* 64-byte aligned, exactly `bytes` long (ASan sees any over-read) */
{
    void *p = NULL;
    assert_int_equal(posix_memalign(&p, 64, bytes ? bytes : 1), 0);
    return p;
}

static const char *dtype_name(qm_dtype d) { return qm_dtype_info(d) ? qm_dtype_info(d)->name : "?"; }

/* The variants under test: each table this CPU has (with AVX-512 VNNI both AVX-512 tables, which share
 * their kernels but the decode choices: qr_kernels_for picks one by core), then k = NULL (qr_matmul uses
 * qr_kernels_get(), which honours QMAP_CPU). */
typedef struct variant {
    const qr_kernels *k;
    char label[48];
} variant;

#define MAX_VARIANTS 6

static size_t get_variants(variant out[MAX_VARIANTS])
{
    static const qm_cpu_level levels[3] = {QM_CPU_GENERIC, QM_CPU_AVX2, QM_CPU_AVX512};
    size_t n = 0;
    for (int i = 0; i < 3; i++) {
        const qr_kernels *k = qr_kernels_for(levels[i]);
        if (k == NULL) continue;
        out[n].k = k;
        snprintf(out[n].label, sizeof out[n].label, "%s", qr_kernels_name(k));
        n++;
        if (levels[i] == QM_CPU_AVX512) { /* the other AVX-512 tables too: every one on every AVX-512 CPU */
            static const qr_kernels *const all512[3] = {&qr_kernels_avx512, &qr_kernels_avx512_i8x2,
                                                        &qr_kernels_avx512_halves};
            for (int j = 0; j < 3; j++) {
                if (all512[j] == k) continue;
                out[n].k = all512[j];
                snprintf(out[n].label, sizeof out[n].label, "%s", qr_kernels_name(out[n].k));
                n++;
            }
        }
    }
    out[n].k = NULL;
    snprintf(out[n].label, sizeof out[n].label, "NULL=get()=%s", qr_kernels_name(qr_kernels_get()));
    return n + 1;
}

/* ------------------------------------------------------------------------------------------------ */
/* Row generators. Magnitudes are chosen so that no product or sum overflows: |w|, |x| <= 1e15, so
 * |Σ w·x| <= 4095·1e30, far below FLT_MAX. */

enum { WK_NORMAL, WK_ZERO, WK_LARGE, WK_TINY, WK_SUBN, WK_MIXED, WK_CONST, WK_SCALE0, WK_COUNT };
static const char *const k_wkind[WK_COUNT] = {"normal", "zero", "large", "tiny", "subnormal", "mixed",
                                              "const", "scale0"};

/* A float row for F32 weights, or the source of a Q8_ROW row (then: SUBN gives a subnormal scale,
 * SCALE0 a scale that underflows to 0 so q = 0, spec 6.1 step 2; MIXED mostly q = 0 beside a 1e15). */
static void gen_w_row(float *w, size_t cols, int kind, uint64_t *s)
{
    static const double mag[5] = {1e15, 1, 1e-30, 1e-41, 0};
    for (size_t c = 0; c < cols; c++) {
        double v = 0;
        switch (kind) {
        case WK_NORMAL: v = sym(s); break;
        case WK_ZERO: v = 0; break;
        case WK_LARGE: v = sym(s) * 1e15; break;
        case WK_TINY: v = sym(s) * 1e-30; break;
        case WK_SUBN: v = sym(s) * 1e-39; break;
        case WK_MIXED: v = sym(s) * mag[tu_rng(s) % 5]; break;
        case WK_CONST: v = c % 3 == 2 ? -1.0 : 1.0; break;
        case WK_SCALE0: v = sym(s) * 1e-44; break;
        default: fail_msg("gen_w_row: kind %d", kind);
        }
        w[c] = (float)v;
    }
}

/* The same kinds within the F16 range (subnormal halves below 2^-14). */
static void gen_h_row(uint16_t *h, size_t cols, int kind, uint64_t *s)
{
    static const double mag[5] = {60000, 1, 0x1p-20, 0x1p-24, 0};
    for (size_t c = 0; c < cols; c++) {
        double v = 0;
        switch (kind) {
        case WK_NORMAL: v = sym(s); break;
        case WK_ZERO: v = 0; break;
        case WK_LARGE: v = sym(s) * 65000; break;
        case WK_TINY: v = sym(s) * 0x1p-20; break;
        case WK_SUBN: v = sym(s) * 0x1p-22; break;
        case WK_MIXED: v = sym(s) * mag[tu_rng(s) % 5]; break;
        case WK_CONST: v = c % 3 == 2 ? -1.0 : 1.0; break;
        case WK_SCALE0: v = (tu_rng(s) & 1) ? 0x1p-24 : -0x1p-24; break;
        default: fail_msg("gen_h_row: kind %d", kind);
        }
        h[c] = qm_f32_to_f16((float)v);
    }
}

enum { XK_NORMAL, XK_ZERO, XK_LARGE, XK_TINY, XK_SUBN, XK_MIXED, XK_TIES, XK_BELOW, XK_AT, XK_CONST, XK_NAN,
       XK_INF, XK_COUNT };
static const char *const k_xkind[XK_COUNT] = {"normal", "zero", "large", "tiny", "subnormal", "mixed", "ties",
                                              "below-2^-100", "at-2^-100", "const", "nan", "inf"};
#define XK_FINITE_COUNT XK_NAN /* kinds before this one are finite */

/* One row of X. TIES: max|x| = 127 so s = 1 exactly and the other values k + 0.5 are rounding ties.
 * BELOW / AT: max|x| just below / exactly 2^-100, the threshold of the activation rule.
 * NAN / INF: one NaN / ±Inf at *bad_col, the rest normal. */
static void gen_x_row(float *x, size_t cols, int kind, uint64_t *s, size_t *bad_col)
{
    static const double mag[5] = {1e15, 1, 1e-30, 1e-41, 0};
    *bad_col = SIZE_MAX;
    for (size_t c = 0; c < cols; c++) {
        double v = 0;
        switch (kind) {
        case XK_NORMAL: case XK_NAN: case XK_INF: v = sym(s); break;
        case XK_ZERO: v = 0; break;
        case XK_LARGE: v = sym(s) * 1e15; break;
        case XK_TINY: v = sym(s) * 1e-30; break;
        case XK_SUBN: v = sym(s) * 1e-40; break;
        case XK_MIXED: v = sym(s) * mag[tu_rng(s) % 5]; break;
        case XK_TIES: v = (double)((int)(tu_rng(s) % 250) - 125) + 0.5; break;
        case XK_BELOW: case XK_AT: v = sym(s) * 0x1p-102; break;
        case XK_CONST: v = c % 4 == 3 ? -3.0 : 3.0; break;
        default: fail_msg("gen_x_row: kind %d", kind);
        }
        x[c] = (float)v;
    }
    size_t j = (size_t)(tu_rng(s) % cols);
    switch (kind) {
    case XK_TIES: x[j] = (tu_rng(s) & 1) ? 127.0f : -127.0f; break;
    case XK_BELOW: x[j] = 0x1.fffffep-101f; break;
    case XK_AT: x[j] = -0x1p-100f; break;
    case XK_NAN: x[j] = NAN; *bad_col = j; break;
    case XK_INF: x[j] = (tu_rng(s) & 1) ? INFINITY : -INFINITY; *bad_col = j; break;
    default: break;
    }
}

/* ------------------------------------------------------------------------------------------------ */
/* Test matrices: the view under test plus the stored weights as the test reads them. */

typedef struct tmat {
    qr_matrix m;             /* the view handed to qr_matmul */
    size_t rows, cols;
    void *own[3];            /* storage allocated for this matrix (freed by tmat_free) */
    const uint8_t *src;      /* the stored rows as the test reads them (F32/F16 elements, Q8 int8) */
    size_t src_stride;       /* bytes */
    const float *src_scales; /* Q8_ROW */
    double *wd;              /* rows × cols: each stored weight exactly (F16 widened, Q8 q·scale in f64) */
    double *wabs;            /* rows: Σ_c |wd[r][c]| */
    int *kind;               /* rows: generator kind, or -1 */
    char desc[128];
} tmat;

static void tmat_derive(tmat *t)
{
    size_t rows = t->rows, cols = t->cols;
    t->wd = malloc(rows * cols * sizeof *t->wd);
    t->wabs = calloc(rows, sizeof *t->wabs);
    assert_true(t->wd != NULL && t->wabs != NULL);
    for (size_t r = 0; r < rows; r++) {
        const uint8_t *row = t->src + r * t->src_stride;
        for (size_t c = 0; c < cols; c++) {
            double v;
            if (t->m.dtype == QM_DTYPE_F32) {
                float f;
                memcpy(&f, row + 4 * c, 4);
                v = f;
            } else if (t->m.dtype == QM_DTYPE_F16) {
                uint16_t h;
                memcpy(&h, row + 2 * c, 2);
                v = qm_f16_to_f32(h); /* exact */
            } else {
                v = (double)(int8_t)row[c] * (double)t->src_scales[r]; /* 8 × 24 bits: exact in f64 */
            }
            t->wd[r * cols + c] = v;
            t->wabs[r] += fabs(v);
        }
    }
}

static void tmat_free(tmat *t)
{
    for (int i = 0; i < 3; i++) free(t->own[i]);
    free(t->wd);
    free(t->wabs);
    free(t->kind);
    memset(t, 0, sizeof *t);
}

/* Quantize float rows into Q8_ROW storage (q rows of align_up(cols, 64) bytes, scales, sums) with the
 * quantize kernels (spec 6.1; held to the spec by test_quantize_kernels). */
static void q8_from_floats(const float *wf, size_t rows, size_t cols, uint8_t *q, size_t qstride, float *scales,
                           int32_t *sums)
{
    const qq_kernels *qk = qq_kernels_get();
    for (size_t r = 0; r < rows; r++) {
        memset(q + r * qstride, 0, qstride);
        if (!qk->q8row(wf + r * cols, cols, (int8_t *)(q + r * qstride), &scales[r], &sums[r]))
            fail_msg("q8row refused row %zu", r);
    }
}

/* A rows × cols matrix of `dtype`, row r of kind (kind0 + r) % WK_COUNT. F32/F16: rows `pad` elements
 * longer than cols (padding holds NaN, which must never be read) and the data `off` elements past a
 * 64-byte boundary (F32 +4 bytes, F16 +2 bytes). The buffer ends right after the last row's last value. */
static tmat tmat_new(qm_dtype dtype, size_t rows, size_t cols, size_t pad, size_t off, int kind0, uint64_t seed)
{
    tmat t;
    memset(&t, 0, sizeof t);
    t.rows = rows;
    t.cols = cols;
    t.kind = malloc(rows * sizeof *t.kind);
    assert_non_null(t.kind);
    uint64_t s = seed;
    float *wf = malloc(cols * rows * sizeof *wf);
    assert_non_null(wf);
    for (size_t r = 0; r < rows; r++) {
        t.kind[r] = (int)(((size_t)kind0 + r) % WK_COUNT);
        if (dtype != QM_DTYPE_F16) gen_w_row(wf + r * cols, cols, t.kind[r], &s);
    }
    t.m.dtype = dtype;
    t.m.rows = rows;
    t.m.cols = cols;
    if (dtype == QM_DTYPE_F32 || dtype == QM_DTYPE_F16) {
        size_t es = dtype == QM_DTYPE_F32 ? 4 : 2;
        size_t stride = es * (cols + pad), bytes = es * off + (rows - 1) * stride + es * cols;
        uint8_t *buf = xalloc(bytes);
        t.own[0] = buf;
        uint8_t *data = buf + es * off;
        for (size_t i = 0; i < bytes; i += es) { /* NaN everywhere, then the values */
            if (es == 4) memcpy(buf + i, &(float){NAN}, 4);
            else memcpy(buf + i, &(uint16_t){0x7E00}, 2);
        }
        uint16_t *hrow = malloc(cols * sizeof *hrow);
        assert_non_null(hrow);
        for (size_t r = 0; r < rows; r++) {
            if (es == 4) {
                memcpy(data + r * stride, wf + r * cols, 4 * cols);
            } else {
                gen_h_row(hrow, cols, t.kind[r], &s);
                memcpy(data + r * stride, hrow, 2 * cols);
            }
        }
        free(hrow);
        t.m.data = data;
        t.m.row_stride = stride;
        t.src = data;
        t.src_stride = stride;
        snprintf(t.desc, sizeof t.desc, "%s %zux%zu stride=%zu data%%64=%zu", dtype_name(dtype), rows, cols, stride,
                 (size_t)((uintptr_t)data % 64));
    } else {
        size_t qstride = (size_t)tu_align_up(cols, 64);
        uint8_t *q = xalloc(rows * qstride);
        float *scales = malloc(rows * sizeof *scales);
        int32_t *sums = malloc(rows * sizeof *sums);
        assert_true(scales != NULL && sums != NULL);
        q8_from_floats(wf, rows, cols, q, qstride, scales, sums);
        t.own[0] = q;
        t.own[1] = scales;
        t.own[2] = sums;
        t.m.data = q;
        t.m.row_stride = qstride;
        t.m.scales = scales;
        t.m.row_sums = sums;
        t.src = q;
        t.src_stride = qstride;
        t.src_scales = scales;
        snprintf(t.desc, sizeof t.desc, "Q8_ROW %zux%zu", rows, cols);
    }
    free(wf);
    tmat_derive(&t);
    return t;
}

/* ------------------------------------------------------------------------------------------------ */
/* X: n rows of `cols` floats, row i at x + i·ldx, the first row `off` floats past a 64-byte boundary.
 * The gaps between rows hold NaN (never to be read); the buffer ends right after the last value. */

typedef struct xmat {
    size_t n, cols, ldx, off;
    float *alloc, *x;
    int *kind;
    size_t *bad_col;
} xmat;

static xmat xmat_new(size_t n, size_t cols, size_t ldx, size_t off, int kind0, int nkinds, uint64_t seed)
{
    xmat x;
    memset(&x, 0, sizeof x);
    x.n = n;
    x.cols = cols;
    x.ldx = ldx;
    x.off = off;
    size_t count = off + (n - 1) * ldx + cols;
    x.alloc = xalloc(count * sizeof(float));
    for (size_t i = 0; i < count; i++) x.alloc[i] = NAN;
    x.x = x.alloc + off;
    x.kind = malloc(n * sizeof *x.kind);
    x.bad_col = malloc(n * sizeof *x.bad_col);
    assert_true(x.kind != NULL && x.bad_col != NULL);
    uint64_t s = seed;
    for (size_t i = 0; i < n; i++) {
        x.kind[i] = (int)(((size_t)kind0 + 5 * i) % (size_t)nkinds);
        gen_x_row(x.x + i * ldx, cols, x.kind[i], &s, &x.bad_col[i]);
    }
    return x;
}

static void xmat_free(xmat *x)
{
    free(x->alloc);
    free(x->kind);
    free(x->bad_col);
    memset(x, 0, sizeof *x);
}

/* ------------------------------------------------------------------------------------------------ */
/* References */

/* The activation rule of runtime/qr_quantize_x.h, written from its header comment alone (not from its
 * code): s = max|x| / 127 in binary32; q = round_half_even(x / s), the division in binary32, clamped to
 * [-127, 127]; s = 0 and q = 0 when max|x| < 2^-100; s = NaN when the row holds NaN or Inf. */
static float spec_quantize_x(const float *x, size_t cols, int8_t *q, float *amax_out)
{
    float amax = 0.0f;
    bool bad = false;
    for (size_t c = 0; c < cols; c++) {
        if (!isfinite(x[c])) bad = true;
        else if (fabsf(x[c]) > amax) amax = fabsf(x[c]);
    }
    *amax_out = amax;
    memset(q, 0, cols);
    if (bad) return NAN;
    if (amax < 0x1p-100f) return 0.0f;
    const float s = amax / 127.0f;
    for (size_t c = 0; c < cols; c++) {
        float r = rintf(x[c] / s); /* default rounding mode: nearest, ties to even */
        if (r > 127.0f) r = 127.0f;
        if (r < -127.0f) r = -127.0f;
        q[c] = (int8_t)r;
    }
    return s;
}

/* Everything a check needs for one (W, X) pair, computed once and used for every variant. */
typedef struct expect {
    size_t n, rows;
    double *ref;   /* [i·rows + r] Σ_c wd[r][c]·x[i][c] in f64 */
    double *sabs;  /* [i·rows + r] Σ_c |wd[r][c]·x[i][c]| */
    float *yq;     /* [i·rows + r] Q8_ROW + QR_ACT_INT8: ((float)d · s_x) · scale_w */
    float *yq2;    /* [i·rows + r] Q8_ROW + QR_ACT_INT8X2: yq + ((float)d₂ · s₂) · scale_w */
    float *sx;     /* [i] the activation scale of row i (Q8_ROW) */
    float *sx2;    /* [i] the scale of its residual x − s_x·q (QR_ACT_INT8X2) */
    float *amax2;  /* [i] max|residual| */
    float *amax;   /* [i] max|x[i]| over finite values */
    double *xabs;  /* [i] Σ_c |x[i][c]| */
    int *bad;      /* [i] 0 finite, 1 NaN in the row, 2 one ±Inf (at x->bad_col[i]) */
} expect;

static expect expect_new(const tmat *w, const xmat *x)
{
    expect e;
    size_t n = x->n, rows = w->rows, cols = w->cols;
    bool q8 = w->m.dtype == QM_DTYPE_Q8_ROW;
    e.n = n;
    e.rows = rows;
    e.ref = malloc(n * rows * sizeof *e.ref);
    e.sabs = malloc(n * rows * sizeof *e.sabs);
    e.yq = malloc(n * rows * sizeof *e.yq);
    e.yq2 = malloc(n * rows * sizeof *e.yq2);
    e.sx = malloc(n * sizeof *e.sx);
    e.sx2 = malloc(n * sizeof *e.sx2);
    e.amax2 = malloc(n * sizeof *e.amax2);
    e.amax = malloc(n * sizeof *e.amax);
    e.xabs = malloc(n * sizeof *e.xabs);
    e.bad = malloc(n * sizeof *e.bad);
    int8_t *qx = malloc(cols), *qx2 = malloc(cols);
    float *res = malloc(cols * sizeof *res);
    assert_true(e.ref && e.sabs && e.yq && e.yq2 && e.sx && e.sx2 && e.amax2 && e.amax && e.xabs && e.bad && qx && qx2 && res);
    for (size_t i = 0; i < n; i++) {
        const float *xi = x->x + i * x->ldx;
        e.bad[i] = 0;
        e.xabs[i] = 0;
        for (size_t c = 0; c < cols; c++) {
            if (isnan(xi[c])) e.bad[i] = 1;
            else if (isinf(xi[c]) && e.bad[i] == 0) e.bad[i] = 2;
            else if (isfinite(xi[c])) e.xabs[i] += fabs((double)xi[c]);
        }
        e.sx[i] = spec_quantize_x(xi, cols, qx, &e.amax[i]);
        /* QR_ACT_INT8X2 (qr_matmul.h): the residual in binary32, multiply then subtract, and the same rule */
        for (size_t c = 0; c < cols; c++) res[c] = xi[c] - e.sx[i] * (float)qx[c];
        e.sx2[i] = spec_quantize_x(res, cols, qx2, &e.amax2[i]);
        for (size_t r = 0; r < rows; r++) {
            const double *wr = w->wd + r * cols;
            double ref = 0, sabs = 0;
            if (!e.bad[i])
                for (size_t c = 0; c < cols; c++) {
                    double p = wr[c] * (double)xi[c];
                    ref += p;
                    sabs += fabs(p);
                }
            e.ref[i * rows + r] = ref;
            e.sabs[i * rows + r] = sabs;
            if (q8) {
                const int8_t *qw = (const int8_t *)(w->src + r * w->src_stride);
                int64_t d = 0;
                for (size_t c = 0; c < cols; c++) d += (int64_t)qx[c] * qw[c];
                float t = (float)d * e.sx[i];
                e.yq[i * rows + r] = t * w->src_scales[r];
                int64_t d2 = 0;
                for (size_t c = 0; c < cols; c++) d2 += (int64_t)qx2[c] * qw[c];
                float t2 = (float)d2 * e.sx2[i];
                e.yq2[i * rows + r] = e.yq[i * rows + r] + t2 * w->src_scales[r];
            } else {
                e.yq[i * rows + r] = NAN;
                e.yq2[i * rows + r] = NAN;
            }
        }
    }
    free(qx);
    free(qx2);
    free(res);
    return e;
}

static void expect_free(expect *e)
{
    free(e->ref); free(e->sabs); free(e->yq); free(e->yq2); free(e->sx); free(e->sx2); free(e->amax2); free(e->amax); free(e->xabs); free(e->bad);
    memset(e, 0, sizeof *e);
}

/* Float paths (F32, F16, Q8_ROW + QR_ACT_F32). A binary32 dot product of length cols, summed in any
 * order or tree, with or without FMA, takes every exact product w·x through at most cols roundings
 * (one multiplication, at most cols − 1 additions; an FMA merges two), so its error is at most
 * γ_cols·Σ|w·x| with γ_m = m·2⁻²⁴/(1 − m·2⁻²⁴) (Higham, Accuracy and Stability, 3.1). Q8_ROW adds one
 * rounding, the multiplication by the row scale (before or after the sum), and F16 widening is exact,
 * so every path is within γ_{cols+1}·Σ|w·x|. For cols <= 4095, γ_{cols+1} <= (cols+2)·2⁻²⁴ + 2⁻³⁵; the
 * f64 reference and Σ|w·x| carry below 2⁻⁴⁰·Σ|w·x| of their own; 2⁻³⁰·Σ covers both. Underflow adds at
 * most 2⁻¹⁵⁰ per rounding (at most ~cols·256·2⁻¹⁵⁰ < 1e-38 all told): the 1e-38. A subnormal Q8 scale
 * makes q·scale (the value spec 6.1 defines, in f32) itself inexact by up to 2⁻¹⁵⁰ per element, times
 * |x|: 2⁻¹⁵⁰·Σ|x| for those rows only. */
static double bound_float(const tmat *w, const expect *e, size_t i, size_t r)
{
    size_t cols = w->cols;
    double b = ((double)(cols + 2) * 0x1p-24 + 0x1p-30) * e->sabs[i * e->rows + r] + 1e-38;
    if (w->m.dtype == QM_DTYPE_Q8_ROW && w->src_scales[r] < FLT_MIN) b += 0x1p-150 * e->xabs[i];
    return b;
}

/* Q8_ROW + QR_ACT_INT8 against the exact product with the ORIGINAL X. The kernel's integer dot d is
 * exact, so y = fl(fl(fl(d)·s)·scale) = s·scale·d·(1 + θ), |θ| <= γ_3 < 2⁻²²·(1 − 2⁻²⁰), and
 * s·scale·d = Σ_c (s·q_c)·W[r][c] where |s·q_c − x_c| <= s·(1/2 + 127·2⁻²⁴) (rounding to an integer
 * after one binary32 division). Hence |y − ref| <= (s/2)·Σ|W|·(1 + 2⁻¹⁵) + 2⁻²²·|ref| (+ 1e-38 for
 * underflow). A row with max|x| < 2⁻¹⁰⁰ quantizes to 0 (s = 0): then y = 0 and |ref| <= max|x|·Σ|W|, so
 * the bound uses s = 2·max|x| for it. */
static double bound_int8(const tmat *w, const expect *e, size_t i, size_t r)
{
    double s = e->sx[i] > 0 ? (double)e->sx[i] : 2.0 * (double)e->amax[i];
    return s / 2 * w->wabs[r] * (1 + 0x1p-15) + 0x1p-22 * fabs(e->ref[i * e->rows + r]) + 1e-38;
}

/* Q8_ROW + QR_ACT_INT8X2 against the exact product with the original X. The residual is computed as
 * r = fl(x − fl(s₁q₁)) = x − s₁q₁ + δ, |δ| <= 2⁻²⁴·(|s₁q₁| + |r|) <= 2⁻²⁴·(2|x| + 2s₁) (|r| <= s₁/2 +
 * rounding); then r = s₂q₂ + ε with |ε| <= s₂·(1/2 + 127·2⁻²⁴). Summed against |W| that gives
 * (s₂/2)·Σ|W|·(1 + 2⁻¹⁶) + 2⁻²³·Σ|W·x| + 2⁻²³·s₁·Σ|W|. Each int8 product rounds as in bound_int8 (2⁻²²
 * relative, on magnitudes <= Σ|W·x| + s₁·Σ|W|) and their sum once more (2⁻²⁴·|y|). Hence the terms
 * below, each with slack. A row, or a residual, below 2⁻¹⁰⁰ quantizes to 0 (s = 2·max as in bound_int8). */
static double bound_int8x2(const tmat *w, const expect *e, size_t i, size_t r)
{
    const size_t k = i * e->rows + r;
    if (!(e->sx[i] > 0)) return 2.0 * (double)e->amax[i] / 2 * w->wabs[r] * (1 + 0x1p-15) + 1e-38;
    /* a residual below 2⁻¹⁰⁰ quantizes to 0 as well: then it is the whole error of the second term */
    const double s2 = e->sx2[i] > 0 ? (double)e->sx2[i] : 2.0 * (double)e->amax2[i];
    return s2 / 2 * w->wabs[r] * (1 + 0x1p-12) + (double)e->sx[i] * 0x1p-20 * w->wabs[r] +
           0x1p-20 * e->sabs[k] + 0x1p-23 * fabs(e->ref[k]) + 1e-38;
}

/* ------------------------------------------------------------------------------------------------ */
/* Running one case and checking Y */

#define YGUARD 19
#define SENTINEL 0xFFBADBADu /* a NaN no kernel produces */

typedef struct ybuf {
    float *alloc, *y;
    size_t n, rows, ldy, total;
} ybuf;

static ybuf ybuf_new(size_t n, size_t rows, size_t ldy)
{
    ybuf b;
    b.n = n;
    b.rows = rows;
    b.ldy = ldy;
    b.total = 2 * YGUARD + n * ldy;
    b.alloc = malloc(b.total * sizeof(float));
    assert_non_null(b.alloc);
    uint32_t v = SENTINEL;
    for (size_t i = 0; i < b.total; i++) memcpy(&b.alloc[i], &v, 4);
    b.y = b.alloc + YGUARD;
    return b;
}

/* Every element that is not Y[i][r] (i < n, r < rows) still holds the sentinel: guards, row padding. */
static void ybuf_check_untouched(const char *ctx, const ybuf *b, bool all)
{
    for (size_t k = 0; k < b->total; k++) {
        bool out = false;
        if (!all && k >= YGUARD && k < YGUARD + b->n * b->ldy) out = (k - YGUARD) % b->ldy < b->rows;
        if (!out && fbits(b->alloc[k]) != SENTINEL)
            fail_msg("%s: Y element %td (relative to y; ldy %zu, rows %zu, n %zu) was written: %a", ctx,
                     (ptrdiff_t)k - YGUARD, b->ldy, b->rows, b->n, (double)b->alloc[k]);
    }
}

static void ctx_fmt(char *out, size_t len, const variant *v, const tmat *w, const xmat *x, int q8_int8, int threads,
                    size_t ldy)
{
    snprintf(out, len, "[%s %s%s n=%zu ldx=%zu x%%64=%zu ldy=%zu threads=%d]", v->label, w->desc,
             w->m.dtype == QM_DTYPE_Q8_ROW ? (q8_int8 == 2 ? " act=INT8X2" : q8_int8 ? " act=INT8" : " act=F32") : "",
             x->n, x->ldx,
             (size_t)((uintptr_t)x->x % 64), ldy, threads);
}

static void check_y(const char *ctx, const tmat *w, const xmat *x, const expect *e, int int8, const float *y,
                    size_t ldy)
{
    size_t rows = w->rows, cols = w->cols;
    for (size_t i = 0; i < x->n; i++)
        for (size_t r = 0; r < rows; r++) {
            float got = y[i * ldy + r];
            size_t k = i * rows + r;
            const char *xk = k_xkind[x->kind[i]], *wk = w->kind ? k_wkind[w->kind[r]] : "-";
            if (e->bad[i]) {
                /* NaN in the row, or Inf on the int8 path (s = NaN): every output of the row is NaN. */
                if (int8 || e->bad[i] == 1) {
                    if (!isnan(got))
                        fail_msg("%s i=%zu r=%zu (x %s, w %s): got %a, expected NaN", ctx, i, r, xk, wk, (double)got);
                    continue;
                }
                /* One ±Inf at column j: Inf·w[j] (NaN when w[j] = 0) absorbs every finite term, in any order. */
                size_t j = x->bad_col[i];
                double wv = w->wd[r * cols + j], xv = x->x[i * x->ldx + j];
                bool ok = wv == 0 ? isnan(got) : (isinf(got) && (got > 0) == ((wv > 0) == (xv > 0)));
                if (!ok)
                    fail_msg("%s i=%zu r=%zu (x %s at col %zu, w %s = %g): got %a, expected %s", ctx, i, r, xk, j, wk,
                             wv, (double)got, wv == 0 ? "NaN" : ((wv > 0) == (xv > 0) ? "+Inf" : "-Inf"));
                continue;
            }
            double ref = e->ref[k], bound;
            if (int8) {
                float want = int8 == 2 ? e->yq2[k] : e->yq[k];
                if (fbits(got) != fbits(want))
                    fail_msg("%s i=%zu r=%zu (x %s, w %s): got %a, expected exactly %a (s_x %a, scale_w %a)", ctx, i,
                             r, xk, wk, (double)got, (double)want, (double)e->sx[i], (double)w->src_scales[r]);
                bound = int8 == 2 ? bound_int8x2(w, e, i, r) : bound_int8(w, e, i, r);
            } else {
                bound = bound_float(w, e, i, r);
            }
            double diff = fabs((double)got - ref);
            if (!(diff <= bound))
                fail_msg("%s i=%zu r=%zu (x %s, w %s): got %a (%.9g), expected %.17g, |diff| %.4g > bound %.4g", ctx,
                         i, r, xk, wk, (double)got, (double)got, ref, diff, bound);
        }
}

/* qr_matmul with a work buffer of exactly the size the API reports; asserts QM_OK and that nothing but
 * Y's elements was written. Returns Y (caller frees .alloc). */
static ybuf run_mm(const char *ctx, const variant *v, const tmat *w, const xmat *x, qr_act act, int threads,
                   size_t ldy)
{
    qr_matmul_opts o = { .pool = pools_get(threads), .act = act, .kernels = NULL, .row_invariant = false };
    size_t ws = qr_matmul_work_size(&w->m, x->n, &o);
    void *work = ws ? xalloc(ws) : NULL;
    ybuf b = ybuf_new(x->n, w->rows, ldy);
    qm_status st = qr_matmul(v->k, &w->m, x->n, x->x, x->ldx, b.y, ldy, work, ws, &o);
    if (st != QM_OK) fail_msg("%s: qr_matmul returned %s", ctx, qm_status_name(st));
    ybuf_check_untouched(ctx, &b, false);
    free(work);
    return b;
}

/* 0: float X; 1: one int8 term (QR_ACT_INT8); 2: two (QR_ACT_INT8X2). */
static int uses_int8(const tmat *w, qr_act act)
{
    if (w->m.dtype != QM_DTYPE_Q8_ROW || w->cols > QR_INT8_MAX_COLS) return 0;
    return act == QR_ACT_INT8 ? 1 : act == QR_ACT_INT8X2 ? 2 : 0;
}

/* The activation modes a test walks for dtype d, a < n_acts(d): all three for Q8_ROW, one (which F32 and
 * F16 ignore) otherwise. */
static int n_acts(qm_dtype d) { return d == QM_DTYPE_Q8_ROW ? 3 : 1; }
static qr_act act_at(int a)
{
    static const qr_act acts[3] = {QR_ACT_INT8, QR_ACT_F32, QR_ACT_INT8X2};
    return acts[a];
}

/* Every variant, every path of w's dtype (Q8_ROW: all three activation modes), one call each. */
static void run_all(const tmat *w, const xmat *x, const expect *e, int threads, size_t ldy)
{
    variant vs[MAX_VARIANTS];
    size_t nv = get_variants(vs);
    for (size_t vi = 0; vi < nv; vi++)
        for (int a = 0; a < n_acts(w->m.dtype); a++) {
            qr_act act = act_at(a);
            if (w->m.dtype != QM_DTYPE_Q8_ROW && vi % 2) act = QR_ACT_F32; /* ignored; pass both */
            char ctx[320];
            ctx_fmt(ctx, sizeof ctx, &vs[vi], w, x, uses_int8(w, act), threads, ldy);
            ybuf b = run_mm(ctx, &vs[vi], w, x, act, threads, ldy);
            check_y(ctx, w, x, e, uses_int8(w, act), b.y, ldy);
            free(b.alloc);
        }
}

/* ------------------------------------------------------------------------------------------------ */
/* 8. Names, and which variant qr_kernels_get() picks */

static void test_names(void **state)
{
    (void)state;
    static const qm_cpu_level levels[3] = {QM_CPU_GENERIC, QM_CPU_AVX2, QM_CPU_AVX512};
    static const char *const names[3] = {"generic", "avx2", "avx512-vnni"};
    assert_non_null(qr_kernels_for(QM_CPU_GENERIC));
    for (int i = 0; i < 3; i++) {
        const qr_kernels *k = qr_kernels_for(levels[i]);
        if (k == NULL) {
            print_message("no %s variant on this CPU: skipped everywhere\n", names[i]);
            continue;
        }
        /* the AVX-512 variant has three tables (avx512-vnni, -i8x2 for Intel, -2x256 for Zen 4), which
         * differ in how a decode reads W (the same bits) and in QR_ACT_AUTO's decode: float X or two int8
         * terms, each the bits of that act asked for by name (test_matmul_many, test_decode_paths) */
        if (strncmp(qr_kernels_name(k), names[i], strlen(names[i])) != 0)
            fail_msg("level %d: variant %s, expected %s", (int)levels[i], qr_kernels_name(k), names[i]);
    }
    /* qr_kernels_get(): the widest variant present at or below the QMAP_CPU cap, whatever QMAP_CPU is. */
    const char *saved = getenv("QMAP_CPU");
    char saved_copy[64] = "";
    if (saved) snprintf(saved_copy, sizeof saved_copy, "%s", saved);
    static const char *const caps[5] = {NULL, "generic", "avx2", "avx512", "nonsense"};
    for (int c = 0; c < 5; c++) {
        if (caps[c]) setenv("QMAP_CPU", caps[c], 1);
        else unsetenv("QMAP_CPU");
        qm_cpu_level cap = qm_cpu_level_get();
        const qr_kernels *want = NULL;
        for (int l = 0; l <= (int)cap; l++)
            if (qr_kernels_for(levels[l])) want = qr_kernels_for(levels[l]);
        const qr_kernels *got = qr_kernels_get();
        if (got != want)
            fail_msg("QMAP_CPU=%s: qr_kernels_get() is %s, expected %s", caps[c] ? caps[c] : "(unset)",
                     got ? qr_kernels_name(got) : "NULL", qr_kernels_name(want));
    }
    if (saved) setenv("QMAP_CPU", saved_copy, 1);
    else unsetenv("QMAP_CPU");
    print_message("QMAP_CPU=%s: qr_kernels_get() = %s\n", saved ? saved_copy : "(unset)",
                  qr_kernels_name(qr_kernels_get()));
}

/* 9. The kernel tables against the dtype rows: the portable table a kernel for each pair a row lists,
 * the others one for each int8-X pair (a float-X pair may fall back to the portable kernel), and all
 * NULL elsewhere (also the tables this CPU cannot run: their contents are only read) */

static void test_kernel_slots(void **state)
{
    (void)state;
    static const qr_kernels *const tables[] = {&qr_kernels_ref, &qr_kernels_avx2, &qr_kernels_avx512,
                                               &qr_kernels_avx512_i8x2, &qr_kernels_avx512_halves};
    size_t rows = 0;
    for (uint32_t d = 0; d < QM_DTYPE_ID_LIMIT; d++) {
        const qr_dtype_traits *tr = qr_dtype_get((qm_dtype)d);
        if (tr) {
            rows++;
            assert_int_equal(tr->dtype, d);
            assert_non_null(tr->view);
            assert_non_null(tr->valid);
            assert_non_null(tr->row_to_f32);
            assert_true(tr->x_kinds & QR_XK_BIT(QR_XK_FLOAT)); /* every dtype takes float X (QR_ACT_F32) */
        }
        for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++)
            for (int xk = 0; xk < QR_XK_COUNT; xk++) {
                const bool want = tr && (tr->x_kinds & QR_XK_BIT(xk)), have = tables[i]->block[d][xk] != NULL;
                const bool may_fall_back = tables[i] != &qr_kernels_ref && xk == QR_XK_FLOAT;
                if (want != have && !(want && may_fall_back))
                    fail_msg("table %s, dtype %s, kind of X %d: %s", qr_kernels_name(tables[i]), dtype_name(d),
                             xk, want ? "the row lists it, the table has no kernel" : "a kernel the row does not list");
            }
    }
    assert_true(rows >= 3); /* F32, F16 and Q8_ROW at least */
}

/* ------------------------------------------------------------------------------------------------ */
/* 1-4. Shapes: cols around every vector width, rows around every tile, sampled n; strides, offsets */

static const size_t k_cols[] = {1, 3, 16, 17, 63, 64, 65, 784, 4095};
static const size_t k_rows[] = {1, 2, 3, 5, 7, 13, 33};
static const size_t k_ns[] = {1, 2, 3, 4, 5, 8, 9, 16, 17, 33};

static void sweep(qm_dtype dtype, uint64_t seed)
{
    size_t cnt = 0;
    for (size_t ci = 0; ci < sizeof k_cols / sizeof *k_cols; ci++)
        for (size_t ri = 0; ri < sizeof k_rows / sizeof *k_rows; ri++) {
            size_t rows = k_rows[ri], cols = k_cols[ci];
            size_t wpad = (size_t[]){0, 1, 3}[cnt % 3], woff = (cnt / 3) % 2;
            tmat w = tmat_new(dtype, rows, cols, wpad, woff, (int)(ci * 3 + ri), seed + cnt * 7919);
            /* n: several per shape, fewer for the long rows (the suite runs 3× and under ASan) */
            size_t nn = rows * cols <= 1000 ? 5 : 3;
            for (size_t j = 0; j < nn; j++, cnt++) {
                size_t n = k_ns[(ci + 2 * ri + 3 * j) % (sizeof k_ns / sizeof *k_ns)];
                if (j == 0 && ri % 2 == 0) n = 1;
                size_t ldx = cols + (size_t[]){0, 1, 5, 16}[cnt % 4];
                size_t xoff = (cnt / 4) % 2;
                size_t ldy = rows + (size_t[]){0, 1, 7}[(cnt / 2) % 3];
                int threads = cnt % 5 == 4 ? 0 : 1;
                xmat x = xmat_new(n, cols, ldx, xoff, (int)(cnt % XK_COUNT), XK_COUNT, seed ^ (cnt * 104729));
                expect e = expect_new(&w, &x);
                run_all(&w, &x, &e, threads, ldy);
                expect_free(&e);
                xmat_free(&x);
            }
            tmat_free(&w);
        }
}

static void test_sweep_f32(void **state) { (void)state; sweep(QM_DTYPE_F32, 1000); }
static void test_sweep_f16(void **state) { (void)state; sweep(QM_DTYPE_F16, 2000); }
static void test_sweep_q8(void **state) { (void)state; sweep(QM_DTYPE_Q8_ROW, 3000); }

/* Every n from 1 to 70 for two shapes whose rows and cols are no multiple of a vector width or tile. */
static void test_every_n(void **state)
{
    (void)state;
    static const size_t shapes[2][2] = {{7, 65}, {33, 17}};
    static const qm_dtype dts[3] = {QM_DTYPE_F32, QM_DTYPE_F16, QM_DTYPE_Q8_ROW};
    for (int si = 0; si < 2; si++)
        for (int d = 0; d < 3; d++) {
            size_t rows = shapes[si][0], cols = shapes[si][1];
            tmat w = tmat_new(dts[d], rows, cols, (size_t)si, (size_t)d % 2, d, 77 + (uint64_t)(si * 3 + d));
            for (size_t n = 1; n <= 70; n++) {
                xmat x = xmat_new(n, cols, cols + n % 3, n % 2, (int)n, XK_COUNT, 5000 + n);
                expect e = expect_new(&w, &x);
                run_all(&w, &x, &e, 1, rows + n % 2);
                expect_free(&e);
                xmat_free(&x);
            }
            tmat_free(&w);
        }
}

/* 4. Every W row kind against every X row kind, in every path: zero rows, 1e15 beside 1e-30 and
 * subnormals, subnormal and underflowing Q8 scales, ties, the 2^-100 threshold, NaN and ±Inf. */
static void test_extremes(void **state)
{
    (void)state;
    static const size_t colss[3] = {17, 64, 784};
    static const qm_dtype dts[3] = {QM_DTYPE_F32, QM_DTYPE_F16, QM_DTYPE_Q8_ROW};
    for (int ci = 0; ci < 3; ci++)
        for (int d = 0; d < 3; d++) {
            size_t cols = colss[ci], rows = 2 * WK_COUNT, n = 2 * XK_COUNT;
            tmat w = tmat_new(dts[d], rows, cols, 0, 0, 0, 900 + (uint64_t)(ci * 3 + d));
            /* X row i has kind 5·i mod XK_COUNT: every kind twice, each against every W kind twice */
            xmat x = xmat_new(n, cols, cols, 0, 0, XK_COUNT, 950 + (uint64_t)(ci * 3 + d));
            expect e = expect_new(&w, &x);
            run_all(&w, &x, &e, 1, rows);
            expect_free(&e);
            xmat_free(&x);
            tmat_free(&w);
        }
}

/* Every one of the 2^16 halves through the F16 path. Finite halves fill a rows × 23 matrix (23: both
 * the full-vector loop and the tail of every variant) and X is the 23 one-hot rows, so Y[i][r] is
 * 1·W[r][i] plus exact zeros: exactly qm_f16_to_f32 of that half (itself held to F16C by test_half).
 * Inf and NaN halves go one per row of a one-column matrix, X = [1]: Y is ±Inf or NaN. */
static void test_f16_every_half(void **state)
{
    (void)state;
    enum { COLS = 23 };
    size_t nfin = 0;
    uint16_t *fin = malloc(65536 * sizeof *fin), *spec = malloc(2048 * sizeof *spec);
    assert_true(fin != NULL && spec != NULL);
    size_t nspec = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        if ((h & 0x7c00u) == 0x7c00u) spec[nspec++] = (uint16_t)h;
        else fin[nfin++] = (uint16_t)h;
    }
    assert_int_equal(nspec, 2048);
    size_t rows = (nfin + COLS - 1) / COLS;
    uint16_t *wbuf = xalloc(rows * COLS * sizeof *wbuf);
    memset(wbuf, 0, rows * COLS * sizeof *wbuf);
    memcpy(wbuf, fin, nfin * sizeof *fin);
    float *x = xalloc(COLS * COLS * sizeof *x), one = 1.0f;
    for (size_t i = 0; i < COLS; i++)
        for (size_t c = 0; c < COLS; c++) x[i * COLS + c] = i == c ? 1.0f : 0.0f;
    qr_matrix wf = {QM_DTYPE_F16, rows, COLS, wbuf, 2 * COLS, NULL, NULL};
    qr_matrix ws = {QM_DTYPE_F16, nspec, 1, spec, 2, NULL, NULL};
    float *y = malloc(COLS * rows * sizeof *y), *ys = malloc(nspec * sizeof *ys);
    assert_true(y != NULL && ys != NULL);
    qr_matmul_opts o = { .pool = NULL, .act = QR_ACT_F32, .kernels = NULL, .row_invariant = false };
    variant vs[MAX_VARIANTS];
    size_t nv = get_variants(vs);
    for (size_t vi = 0; vi < nv; vi++) {
        qm_status st = qr_matmul(vs[vi].k, &wf, COLS, x, COLS, y, rows, NULL, 0, &o);
        if (st != QM_OK) fail_msg("[%s] every finite half: %s", vs[vi].label, qm_status_name(st));
        for (size_t i = 0; i < COLS; i++)
            for (size_t r = 0; r < rows; r++) {
                uint16_t h = wbuf[r * COLS + i];
                float want = qm_f16_to_f32(h), got = y[i * rows + r];
                /* zero products are exact, so only the sign of a zero may differ (+0 + -0 = +0) */
                if (!(got == want && (want == 0 || fbits(got) == fbits(want))))
                    fail_msg("[%s] F16 half 0x%04x (W[%zu][%zu]): got %a, expected %a", vs[vi].label, h, r, i,
                             (double)got, (double)want);
            }
        st = qr_matmul(vs[vi].k, &ws, 1, &one, 1, ys, nspec, NULL, 0, &o);
        if (st != QM_OK) fail_msg("[%s] Inf/NaN halves: %s", vs[vi].label, qm_status_name(st));
        for (size_t r = 0; r < nspec; r++) {
            float want = qm_f16_to_f32(spec[r]), got = ys[r];
            bool ok = isnan(want) ? isnan(got) : (isinf(got) && (got > 0) == (want > 0));
            if (!ok) fail_msg("[%s] F16 half 0x%04x: got %a, expected %a", vs[vi].label, spec[r], (double)got, (double)want);
        }
    }
    free(fin); free(spec); free(wbuf); free(x); free(y); free(ys);
}

/* Q8_ROW at the QR_INT8_MAX_COLS limit with every int8 product at ±127·127: d = ±127²·2^17 still fits
 * an int32 but its unsigned-operand form Σ(q_x + 128)·q_w does not, and maddubs pairs sit at their int16
 * limit. One column more: QR_ACT_INT8 falls back to QR_ACT_F32, bit for bit. */
static void test_int8_limit(void **state)
{
    (void)state;
    variant vs[MAX_VARIANTS];
    size_t nv = get_variants(vs);
    for (int more = 0; more < 2; more++) {
        size_t cols = QR_INT8_MAX_COLS + (size_t)more, rows = 4, n = 3;
        float *wf = malloc(rows * cols * sizeof *wf);
        assert_non_null(wf);
        uint64_t s = 4242;
        for (size_t c = 0; c < cols; c++) {
            wf[c] = 1.0f;                  /* q = +127 */
            wf[cols + c] = -2.0f;          /* q = -127 */
            wf[2 * cols + c] = c % 2 ? 1.0f : -1.0f;
            wf[3 * cols + c] = (float)sym(&s);
        }
        tmat w;
        memset(&w, 0, sizeof w);
        w.rows = rows;
        w.cols = cols;
        size_t qstride = (size_t)tu_align_up(cols, 64);
        uint8_t *q = xalloc(rows * qstride);
        float *scales = malloc(rows * sizeof *scales);
        int32_t *sums = malloc(rows * sizeof *sums);
        q8_from_floats(wf, rows, cols, q, qstride, scales, sums);
        free(wf);
        w.own[0] = q; w.own[1] = scales; w.own[2] = sums;
        w.m = (qr_matrix){QM_DTYPE_Q8_ROW, rows, cols, q, qstride, scales, sums};
        w.src = q; w.src_stride = qstride; w.src_scales = scales;
        snprintf(w.desc, sizeof w.desc, "Q8_ROW %zux%zu (int8 limit%s)", rows, cols, more ? " + 1" : "");
        tmat_derive(&w);
        for (size_t c = 0; c < cols; c++) assert_int_equal((int8_t)q[c], 127);
        xmat x = xmat_new(n, cols, cols, 0, 0, 1, 17);
        for (size_t c = 0; c < cols; c++) {
            x.x[c] = 3.0f;                 /* q_x = +127 */
            x.x[cols + c] = -3.0f;         /* q_x = -127 */
            x.x[2 * cols + c] = (float)sym(&s);
        }
        for (size_t i = 0; i < n; i++) x.kind[i] = i < 2 ? XK_CONST : XK_NORMAL;
        expect e = expect_new(&w, &x);
        if (!more) { /* the reference itself: d = 127²·2^17 for X row 0 against W row 0 */
            float want = ((float)(127 * 127 * (int64_t)131072) * e.sx[0]) * scales[0];
            assert_memory_equal(&e.yq[0], &want, 4);
        }
        for (size_t vi = 0; vi < nv; vi++) {
            char ctx[320];
            ctx_fmt(ctx, sizeof ctx, &vs[vi], &w, &x, !more, 1, rows);
            ybuf yi = run_mm(ctx, &vs[vi], &w, &x, QR_ACT_INT8, 1, rows);
            check_y(ctx, &w, &x, &e, !more, yi.y, rows);
            ctx_fmt(ctx, sizeof ctx, &vs[vi], &w, &x, false, 1, rows);
            ybuf yf = run_mm(ctx, &vs[vi], &w, &x, QR_ACT_F32, 1, rows);
            check_y(ctx, &w, &x, &e, false, yf.y, rows);
            if (more && memcmp(yi.y, yf.y, n * rows * sizeof(float)) != 0)
                fail_msg("%s: cols > QR_INT8_MAX_COLS: QR_ACT_INT8 must give QR_ACT_F32's bits", ctx);
            if (!more) { /* one X row at a time too (a variant may have a separate decode path) */
                qr_matmul_opts o = { .pool = NULL, .act = QR_ACT_INT8, .kernels = NULL, .row_invariant = false };
                size_t ws = qr_matmul_work_size(&w.m, 1, &o);
                void *work = xalloc(ws);
                float yv[4];
                for (size_t i = 0; i < n; i++) {
                    assert_int_equal(qr_matvec(vs[vi].k, &w.m, x.x + i * cols, yv, work, ws, &o), QM_OK);
                    for (size_t r = 0; r < rows; r++)
                        if (fbits(yv[r]) != fbits(e.yq[i * rows + r]))
                            fail_msg("%s: qr_matvec of X row %zu, r=%zu: got %a, expected exactly %a", ctx, i, r,
                                     (double)yv[r], (double)e.yq[i * rows + r]);
                }
                free(work);
            }
            free(yi.alloc);
            free(yf.alloc);
        }
        expect_free(&e);
        xmat_free(&x);
        tmat_free(&w);
    }
}

/* ------------------------------------------------------------------------------------------------ */
/* 5. Views of tensors in a mapped container */

typedef struct container_spec {
    const char *name;
    uint32_t dtype, rank;
    uint64_t dims[3];
} container_spec;

enum { CONTAINER_NT = 7 };
/* F32, F16 and Q8_ROW tensors of several ranks, and two dtypes a matrix view must refuse. */
static const container_spec k_container_spec[CONTAINER_NT] = {
    {"w.f32", QM_DTYPE_F32, 2, {17, 63}},
    {"w.f16", QM_DTYPE_F16, 2, {5, 784}},
    {"w.q8", QM_DTYPE_Q8_ROW, 2, {33, 65}},
    {"w.q8.rank3", QM_DTYPE_Q8_ROW, 3, {3, 2, 17}},
    {"w.f32.rank1", QM_DTYPE_F32, 1, {40}},
    {"b.i32", QM_DTYPE_I32, 2, {4, 5}},
    {"b.bf16", QM_DTYPE_BF16, 2, {3, 8}},
};

/* Q8_ROW bytes of rows x cols floats in the container's layout: q rows, then scales, then row sums. */
static void q8_tensor_bytes(tu_tensor *tt, const float *wf, uint64_t rows, size_t cols, uint64_t align)
{
    tu_q8 l = tu_q8_layout(tt->rank, tt->dims, align);
    uint8_t *b = calloc(1, (size_t)l.size);
    assert_non_null(b);
    float *scales = malloc(rows * sizeof *scales);
    int32_t *sums = malloc(rows * sizeof *sums);
    q8_from_floats(wf, (size_t)rows, cols, b, (size_t)l.row_stride, scales, sums);
    memcpy(b + l.scales_offset, scales, rows * 4); /* little-endian host */
    memcpy(b + l.sums_offset, sums, rows * 4);
    free(scales);
    free(sums);
    tt->size = (size_t)l.size;
    tt->data = b;
}

/* Tensor number t of k_container_spec with generated weight rows (random bytes for the refused dtypes). */
static void make_container_tensor(tu_tensor *tt, int t, uint64_t align, uint64_t *s)
{
    const container_spec *sp = &k_container_spec[t];
    snprintf(tt->name, sizeof tt->name, "%s", sp->name);
    tt->dtype = sp->dtype;
    tt->rank = sp->rank;
    uint64_t rows = 1;
    for (uint32_t k = 0; k < sp->rank; k++) {
        tt->dims[k] = sp->dims[k];
        if (k + 1 < sp->rank) rows *= sp->dims[k];
    }
    size_t cols = (size_t)sp->dims[sp->rank - 1];
    float *wf = malloc(rows * cols * sizeof *wf);
    assert_non_null(wf);
    for (uint64_t r = 0; r < rows; r++) gen_w_row(wf + r * cols, cols, (int)(r % WK_COUNT), s);
    switch (sp->dtype) {
    case QM_DTYPE_F32:
        tt->size = rows * cols * 4;
        tt->data = (uint8_t *)wf;
        wf = NULL;
        break;
    case QM_DTYPE_F16: {
        uint16_t *h = malloc(rows * cols * 2);
        assert_non_null(h);
        for (uint64_t r = 0; r < rows; r++) gen_h_row(h + r * cols, cols, (int)(r % WK_COUNT), s);
        tt->size = rows * cols * 2;
        tt->data = (uint8_t *)h;
        break;
    }
    case QM_DTYPE_Q8_ROW:
        q8_tensor_bytes(tt, wf, rows, cols, align);
        break;
    default:
        tt->size = (size_t)tu_expected_nbytes(tt->dtype, tt->rank, tt->dims, align);
        tt->data = malloc(tt->size);
        assert_non_null(tt->data);
        tu_fill_random(tt->data, tt->size, 99 + (uint64_t)t);
        break;
    }
    free(wf);
}

/* The view's geometry matches the mapped tensor; w describes it with the test's own bytes as reference. */
static void view_as_tmat(tmat *w, const qr_matrix *m, const qm_tensor *qt, const tu_tensor *tt, uint64_t align)
{
    const char *name = tt->name;
    size_t cols = (size_t)tt->dims[tt->rank - 1], rows = (size_t)(qt->n_elements / cols);
    assert_int_equal(m->dtype, tt->dtype);
    assert_int_equal(m->rows, rows);
    assert_int_equal(m->cols, cols);
    assert_ptr_equal(m->data, qt->data);
    memset(w, 0, sizeof *w);
    w->rows = rows;
    w->cols = cols;
    w->m = *m;
    w->src = tt->data; /* the test's own bytes, not the mapping */
    if (tt->dtype == QM_DTYPE_Q8_ROW) {
        tu_q8 l = tu_q8_layout(tt->rank, tt->dims, align);
        assert_int_equal(m->row_stride, l.row_stride);
        assert_ptr_equal(m->scales, (const uint8_t *)qt->data + l.scales_offset);
        assert_ptr_equal(m->row_sums, (const uint8_t *)qt->data + l.sums_offset);
        w->src_stride = (size_t)l.row_stride;
        w->src_scales = (const float *)(tt->data + l.scales_offset);
    } else {
        size_t es = tt->dtype == QM_DTYPE_F32 ? 4 : 2;
        assert_int_equal(m->row_stride, es * cols);
        w->src_stride = es * cols;
    }
    w->kind = malloc(rows * sizeof *w->kind);
    assert_non_null(w->kind);
    for (size_t r = 0; r < rows; r++) w->kind[r] = (int)(r % WK_COUNT);
    snprintf(w->desc, sizeof w->desc, "tensor %.63s (%s %zux%zu)", name, dtype_name(m->dtype), rows, cols);
    tmat_derive(w);
}

/* Tensor number t viewed from the mapping: refused by name for I32/BF16, else multiplied by every variant. */
static void check_container_tensor(qm_file *f, const tu_tensor *tt, int t, uint64_t align)
{
    const char *name = k_container_spec[t].name;
    const qm_tensor *qt = qm_find_tensor(f, name);
    assert_non_null(qt);
    qr_matrix m;
    memset(&m, 0, sizeof m);
    qm_error err;
    qm_error_clear(&err);
    qm_status st = qr_matrix_from_tensor(f, qt, &m, &err);
    if (tt->dtype == QM_DTYPE_I32 || tt->dtype == QM_DTYPE_BF16) {
        if (st != QM_ERR_TYPE_MISMATCH)
            fail_msg("qr_matrix_from_tensor(%s): %s, expected QM_ERR_TYPE_MISMATCH", name, qm_status_name(st));
        if (!tu_contains(err.message, name))
            fail_msg("qr_matrix_from_tensor(%s): message does not name the tensor: %s", name, err.message);
        return;
    }
    if (st != QM_OK) fail_msg("qr_matrix_from_tensor(%s): %s: %s", name, qm_status_name(st), err.message);
    tmat w;
    view_as_tmat(&w, &m, qt, tt, align);
    static const size_t ns[2] = {1, 5};
    for (int k = 0; k < 2; k++) {
        /* X misaligned (x + 1) and strided; Y strided */
        xmat x = xmat_new(ns[k], w.cols, w.cols + 3, 1, t, XK_COUNT, 600 + (uint64_t)(t * 2 + k));
        expect e = expect_new(&w, &x);
        run_all(&w, &x, &e, 1, w.rows + 2);
        expect_free(&e);
        xmat_free(&x);
    }
    tmat_free(&w);
}

static void test_container(void **state)
{
    (void)state;
    char path[TU_PATH_MAX];
    tu_path(path, "matmul.qmap");
    const uint64_t align = QM_DEFAULT_ALIGNMENT; /* 4096: Q8_ROW scales sit well past the q rows */
    uint64_t s = 0xC0FFEE;
    tu_tensor ts[CONTAINER_NT];
    memset(ts, 0, sizeof ts);
    for (int t = 0; t < CONTAINER_NT; t++) make_container_tensor(&ts[t], t, align, &s);
    qm_writer *wr = NULL;
    qm_error err;
    qm_writer_opts wo = {align};
    assert_int_equal(qm_writer_create(path, &wo, &wr, &err), QM_OK);
    tu_write_tensors(wr, ts, CONTAINER_NT, 0);
    if (qm_writer_finish(wr, &err) != QM_OK) fail_msg("qm_writer_finish: %s", err.message);
    qm_file *f = NULL;
    if (qm_open(path, &f, &err) != QM_OK) fail_msg("qm_open: %s", err.message);
    for (int t = 0; t < CONTAINER_NT; t++) check_container_tensor(f, &ts[t], t, align);
    qm_close(f);
    for (int t = 0; t < CONTAINER_NT; t++) tu_tensor_free(&ts[t]);
}

/* ------------------------------------------------------------------------------------------------ */
/* 6. Determinism */

static void cmp_bits(const char *ctx, const char *what, const float *a, size_t lda, const float *b, size_t ldb,
                     size_t n, size_t rows)
{
    for (size_t i = 0; i < n; i++)
        for (size_t r = 0; r < rows; r++) {
            float p = a[i * lda + r], q = b[i * ldb + r];
            if (fbits(p) != fbits(q) && !(isnan(p) && isnan(q)))
                fail_msg("%s: %s differ at i=%zu r=%zu: %a vs %a", ctx, what, i, r, (double)p, (double)q);
        }
}

/* A decode product (n = 1) may read a block's W rows as several streams at once and the rows left over
 * one by one (qr_kernels.h, QR_DECODE_QUARTERS); an output's bits must not depend on which way its row went. Each row
 * of W alone (a one-row view: always the one-row way) against the whole matrix on 1, 2 and 3 threads
 * (blocks of other sizes, rows at other places in them; on the avx512-vnni-2x256 table each thread's own
 * run of rows, taken in pieces from the front and stolen from the back: qr_pool_run_regions), shapes whose
 * blocks are long enough for four streams and leave 1-3 rows over. Float products too: bit for bit, not
 * within a bound. */
static void test_decode_paths(void **state)
{
    (void)state;
    static const qm_dtype dts[3] = {QM_DTYPE_F32, QM_DTYPE_F16, QM_DTYPE_Q8_ROW};
    static const size_t shapes[3][2] = {{67, 4095}, {259, 4095}, {1027, 784}}; /* rows, cols */
    variant vs[MAX_VARIANTS];
    size_t nv = get_variants(vs);
    for (int si = 0; si < 3; si++)
        for (int d = 0; d < 3; d++) {
            size_t rows = shapes[si][0], cols = shapes[si][1];
            tmat w = tmat_new(dts[d], rows, cols, 0, 0, si, 8191 + (uint64_t)(si * 3 + d));
            xmat x = xmat_new(1, cols, cols, 0, si, XK_FINITE_COUNT, 8192 + (uint64_t)(si * 3 + d));
            float *yr = malloc(rows * sizeof *yr);
            assert_non_null(yr);
            for (size_t vi = 0; vi < nv; vi++)
                for (int a = 0; a < n_acts(dts[d]); a++) {
                    qr_act act = act_at(a);
                    qr_matmul_opts o1 = { .pool = NULL, .act = act, .kernels = NULL, .row_invariant = false };
                    char ctx[320];
                    ctx_fmt(ctx, sizeof ctx, &vs[vi], &w, &x, uses_int8(&w, act), 1, rows);
                    size_t ws = qr_matmul_work_size(&w.m, 1, &(qr_matmul_opts){pools_get(3), act, NULL, false});
                    void *work = ws ? xalloc(ws) : NULL;
                    for (size_t r = 0; r < rows; r++) {
                        qr_matrix one = qr_matrix_rows(&w.m, r, 1);
                        qm_status st = qr_matvec(vs[vi].k, &one, x.x, yr + r, work, ws, &o1);
                        if (st != QM_OK) fail_msg("%s: qr_matvec of row %zu alone: %s", ctx, r, qm_status_name(st));
                    }
                    static const int th[3] = {1, 2, 3};
                    for (int t = 0; t < 3; t++) {
                        ybuf yt = run_mm(ctx, &vs[vi], &w, &x, act, th[t], rows);
                        char what[96];
                        snprintf(what, sizeof what, "each row alone and the whole matrix on %d thread(s)", th[t]);
                        cmp_bits(ctx, what, yr, rows, yt.y, rows, 1, rows);
                        free(yt.alloc);
                    }
                    free(work);
                }
            free(yr);
            xmat_free(&x);
            tmat_free(&w);
        }
}

/* pools of 1, 2, 3 and the default number of threads give the same bits, on problems big enough to be split:
 * many W rows (split between threads), and few W rows with several X rows (X split instead, down to
 * one X row per thread with 33 x 4095, n = 3, threads = 3), and n = 150 so that a two-term product runs
 * in several X chunks (qr_matmul.c QR_X2_CHUNK = 96), the last one partial; rows of 11008 (an int8
 * GEMM in K slices, each output's partial sum kept in Y between them) against the reference too. For
 * the AVX-512 GEMM over X in row groups (qr_kernels_avx512.c): 24 x 8200 with n = 50 runs its full
 * 3-group tile in K slices and a last group of 2 rows, and 20 x 300 with n = 100 splits X between
 * threads at rows that are not group boundaries. */
static void test_threads(void **state)
{
    (void)state;
    static const qm_dtype dts[3] = {QM_DTYPE_F32, QM_DTYPE_F16, QM_DTYPE_Q8_ROW};
    static const size_t shapes[8][3] = {{515, 784, 12}, {13, 4095, 17}, {33, 784, 20}, {33, 4095, 3},
                                        {130, 784, 150}, {42, 11008, 9}, {24, 8200, 50}, {20, 300, 100}};
    /* rows, cols, n */
    variant vs[MAX_VARIANTS];
    size_t nv = get_variants(vs);
    for (int si = 0; si < 8; si++)
        for (int d = 0; d < 3; d++) {
            size_t rows = shapes[si][0], cols = shapes[si][1], n = shapes[si][2];
            tmat w = tmat_new(dts[d], rows, cols, 0, 0, si, 31337 + (uint64_t)(si * 3 + d));
            xmat x = xmat_new(n, cols, cols, 0, si, XK_FINITE_COUNT, 4711 + (uint64_t)(si * 3 + d));
            expect e = expect_new(&w, &x);
            for (size_t vi = 0; vi < nv; vi++)
                for (int a = 0; a < n_acts(dts[d]); a++) {
                    qr_act act = act_at(a);
                    char ctx[320];
                    ctx_fmt(ctx, sizeof ctx, &vs[vi], &w, &x, uses_int8(&w, act), 1, rows);
                    ybuf y1 = run_mm(ctx, &vs[vi], &w, &x, act, 1, rows);
                    check_y(ctx, &w, &x, &e, uses_int8(&w, act), y1.y, rows);
                    static const int th[3] = {2, 3, 0};
                    for (int t = 0; t < 3; t++) {
                        ybuf yt = run_mm(ctx, &vs[vi], &w, &x, act, th[t], rows);
                        char what[64];
                        snprintf(what, sizeof what, "threads=1 and threads=%d", th[t]);
                        cmp_bits(ctx, what, y1.y, rows, yt.y, rows, n, rows);
                        free(yt.alloc);
                    }
                    free(y1.alloc);
                }
            expect_free(&e);
            xmat_free(&x);
            tmat_free(&w);
        }
}

/* Row i of a qr_matmul equals qr_matvec of X row i; n split in pieces equals n at once; opts = NULL
 * equals {0, QR_ACT_AUTO} (INT8X2 for n > 1); k = NULL equals k = qr_kernels_get(). All bit for bit, except that a float
 * product with a single X row (decode) may sum in another order (qr_matmul.h): there matvec is held to
 * the reference bound instead, and the pieces are at least 2 rows. */
static void test_split(void **state)
{
    (void)state;
    static const qm_dtype dts[3] = {QM_DTYPE_F32, QM_DTYPE_F16, QM_DTYPE_Q8_ROW};
    static const size_t shapes[2][2] = {{33, 784}, {13, 65}};
    variant vs[MAX_VARIANTS];
    size_t nv = get_variants(vs);
    for (int si = 0; si < 2; si++)
        for (int d = 0; d < 3; d++) {
            size_t rows = shapes[si][0], cols = shapes[si][1], n = 23, ldy = rows + 3;
            tmat w = tmat_new(dts[d], rows, cols, (size_t)d % 2, (size_t)si, d, 555 + (uint64_t)(si * 3 + d));
            xmat x = xmat_new(n, cols, cols + 1, 1, si, XK_COUNT, 556 + (uint64_t)(si * 3 + d));
            expect e = expect_new(&w, &x);
            for (size_t vi = 0; vi < nv; vi++)
                for (int a = 0; a < n_acts(dts[d]); a++) {
                    qr_act act = act_at(a);
                    qr_matmul_opts o = { .pool = NULL, .act = act, .kernels = NULL, .row_invariant = false };
                    char ctx[320];
                    ctx_fmt(ctx, sizeof ctx, &vs[vi], &w, &x, uses_int8(&w, act), 1, ldy);
                    ybuf full = run_mm(ctx, &vs[vi], &w, &x, act, 1, ldy);
                    size_t ws1 = qr_matmul_work_size(&w.m, 1, &o), wsn = qr_matmul_work_size(&w.m, n, &o);
                    void *work1 = ws1 ? xalloc(ws1) : NULL, *workn = wsn ? xalloc(wsn) : NULL;
                    /* matvec, row by row */
                    const bool exact = uses_int8(&w, act);
                    float *yv = malloc(n * rows * sizeof *yv);
                    for (size_t i = 0; i < n; i++) {
                        qm_status st = qr_matvec(vs[vi].k, &w.m, x.x + i * x.ldx, yv + i * rows, work1, ws1, &o);
                        if (st != QM_OK) fail_msg("%s: qr_matvec: %s", ctx, qm_status_name(st));
                        char what[64];
                        snprintf(what, sizeof what, "matmul row %zu and matvec", i);
                        if (exact) cmp_bits(ctx, what, full.y + i * ldy, ldy, yv + i * rows, rows, 1, rows);
                    }
                    if (!exact) check_y(ctx, &w, &x, &e, false, yv, rows);
                    free(yv);
                    /* n in pieces: 1 + 7 + 1 + 14 (int8), 2 + 6 + 3 + 12 (float) */
                    static const size_t cuts_int8[5] = {0, 1, 8, 9, 23}, cuts_float[5] = {0, 2, 8, 11, 23};
                    const size_t *cuts = exact ? cuts_int8 : cuts_float;
                    ybuf parts = ybuf_new(n, rows, ldy);
                    for (int p = 0; p < 4; p++) {
                        size_t i0 = cuts[p], m = cuts[p + 1] - cuts[p];
                        size_t ws = qr_matmul_work_size(&w.m, m, &o);
                        void *wk = ws ? xalloc(ws) : NULL;
                        qm_status st = qr_matmul(vs[vi].k, &w.m, m, x.x + i0 * x.ldx, x.ldx, parts.y + i0 * ldy, ldy, wk,
                                                 ws, &o);
                        if (st != QM_OK) fail_msg("%s: qr_matmul (rows %zu..%zu of X): %s", ctx, i0, i0 + m, qm_status_name(st));
                        free(wk);
                    }
                    ybuf_check_untouched(ctx, &parts, false);
                    cmp_bits(ctx, "n at once and n in pieces", full.y, ldy, parts.y, ldy, n, rows);
                    free(parts.alloc);
                    /* QR_ACT_AUTO: the INT8X2 bits for n > 1; for n = 1 the F32 bits, or the INT8X2 bits in a
                     * variant that decodes in two terms (auto_decode_terms) */
                    if (dts[d] == QM_DTYPE_Q8_ROW && act == QR_ACT_INT8X2) {
                        qr_matmul_opts oa = { .pool = NULL, .act = QR_ACT_AUTO, .kernels = NULL, .row_invariant = false };
                        qr_matmul_opts of = { .pool = NULL, .act = QR_ACT_F32, .kernels = NULL, .row_invariant = false };
                        ybuf ya = ybuf_new(n, rows, ldy);
                        qm_status st = qr_matmul(vs[vi].k, &w.m, n, x.x, x.ldx, ya.y, ldy, workn, wsn, &oa);
                        if (st != QM_OK) fail_msg("%s: qr_matmul(QR_ACT_AUTO): %s", ctx, qm_status_name(st));
                        cmp_bits(ctx, "QR_ACT_INT8X2 and QR_ACT_AUTO, n > 1", full.y, ldy, ya.y, ldy, n, rows);
                        free(ya.alloc);
                        float *ya1 = malloc(rows * sizeof *ya1), *yf1 = malloc(rows * sizeof *yf1);
                        const bool two = (vs[vi].k ? vs[vi].k : qr_kernels_get())->auto_decode_terms == 2;
                        qr_matmul_opts ox = { .pool = NULL, .act = QR_ACT_INT8X2, .kernels = NULL, .row_invariant = false };
                        const size_t wsa = qr_matmul_work_size(&w.m, 1, &oa);
                        assert_int_equal(wsa, qr_matmul_work_size(&w.m, 1, &ox));
                        void *worka = wsa ? xalloc(wsa) : NULL;
                        assert_true(!wsa || worka);
                        assert_int_equal(qr_matvec(vs[vi].k, &w.m, x.x, ya1, worka, wsa, &oa), QM_OK);
                        assert_int_equal(qr_matvec(vs[vi].k, &w.m, x.x, yf1, worka, wsa, two ? &ox : &of), QM_OK);
                        cmp_bits(ctx, two ? "QR_ACT_INT8X2 and QR_ACT_AUTO, n = 1" : "QR_ACT_F32 and QR_ACT_AUTO, n = 1",
                                 yf1, rows, ya1, rows, 1, rows);
                        free(worka);
                        free(ya1);
                        free(yf1);
                    }
                    /* opts NULL = {no pool, QR_ACT_AUTO}, which is INT8X2 for n > 1 (ignored for F32/F16) */
                    if (act == (dts[d] == QM_DTYPE_Q8_ROW ? QR_ACT_INT8X2 : QR_ACT_INT8)) {
                        ybuf yn = ybuf_new(n, rows, ldy);
                        size_t wsnull = qr_matmul_work_size(&w.m, n, NULL); /* for one thread */
                        void *worknull = wsnull ? xalloc(wsnull) : NULL;
                        qm_status st = qr_matmul(vs[vi].k, &w.m, n, x.x, x.ldx, yn.y, ldy, worknull, wsnull, NULL);
                        if (st != QM_OK) fail_msg("%s: qr_matmul(opts NULL): %s", ctx, qm_status_name(st));
                        cmp_bits(ctx, "opts {1, act} and opts NULL", full.y, ldy, yn.y, ldy, n, rows);
                        free(worknull);
                        free(yn.alloc);
                    }
                    /* k NULL = qr_kernels_get() */
                    if (vs[vi].k == NULL) {
                        variant g = {qr_kernels_get(), "get()"};
                        ybuf yg = run_mm(ctx, &g, &w, &x, act, 1, ldy);
                        cmp_bits(ctx, "k NULL and k qr_kernels_get()", full.y, ldy, yg.y, ldy, n, rows);
                        free(yg.alloc);
                    }
                    free(work1);
                    free(workn);
                    free(full.alloc);
                }
            expect_free(&e);
            xmat_free(&x);
            tmat_free(&w);
        }
}

/* ------------------------------------------------------------------------------------------------ */
/* 7. Errors and work sizes */

typedef struct call {
    const qr_matrix *w;
    size_t n;
    const float *x;
    size_t ldx;
    float *y;
    size_t ldy;
    void *work;
    size_t work_size;
    const qr_matmul_opts *opts;
} call;

static void expect_invalid(const char *what, const variant *v, call c, ybuf *yb)
{
    qm_status st = qr_matmul(v->k, c.w, c.n, c.x, c.ldx, c.y, c.ldy, c.work, c.work_size, c.opts);
    char ctx[256];
    snprintf(ctx, sizeof ctx, "[%s] %s", v->label, what);
    if (st != QM_ERR_INVALID_ARGUMENT) fail_msg("%s: qr_matmul returned %s, expected QM_ERR_INVALID_ARGUMENT", ctx, qm_status_name(st));
    ybuf_check_untouched(ctx, yb, true);
}

static void test_errors(void **state)
{
    (void)state;
    variant vs[MAX_VARIANTS];
    size_t nv = get_variants(vs);
    static const qm_dtype dts[3] = {QM_DTYPE_F32, QM_DTYPE_F16, QM_DTYPE_Q8_ROW};
    for (int d = 0; d < 3; d++) {
        size_t rows = 5, cols = 17, n = 3;
        tmat w = tmat_new(dts[d], rows, cols, 0, 0, 0, 8080 + (uint64_t)d);
        xmat x = xmat_new(n, cols, cols, 0, 0, XK_FINITE_COUNT, 8181);
        qr_matmul_opts o = { .pool = NULL, .act = QR_ACT_INT8, .kernels = NULL, .row_invariant = false };
        size_t ws = qr_matmul_work_size(&w.m, n, &o);
        void *work = ws ? xalloc(ws) : NULL;
        for (size_t vi = 0; vi < nv; vi++) {
            const variant *v = &vs[vi];
            ybuf yb = ybuf_new(n, rows, rows);
            call ok = {&w.m, n, x.x, cols, yb.y, rows, work, ws, &o};
            call c;
            char what[320];
#define BAD(field_change, label)                                                                                 \
    do {                                                                                                         \
        c = ok;                                                                                                  \
        field_change;                                                                                            \
        snprintf(what, sizeof what, "%s: %s", w.desc, label);                                                    \
        expect_invalid(what, v, c, &yb);                                                                         \
    } while (0)
            BAD(c.w = NULL, "w NULL");
            BAD(c.x = NULL, "x NULL");
            BAD(c.ldx = cols - 1, "ldx < cols");
            BAD(c.ldy = rows - 1, "ldy < rows");
            qr_matrix bad;
            static const uint32_t bad_dtypes[4] = {QM_DTYPE_BF16, QM_DTYPE_I32, 0, 99};
            for (int k = 0; k < 4; k++) {
                bad = w.m;
                bad.dtype = (qm_dtype)bad_dtypes[k];
                char lab[48];
                snprintf(lab, sizeof lab, "dtype %u", bad_dtypes[k]);
                BAD(c.w = &bad, lab);
            }
            const qr_matmul_opts bad_act = { .pool = NULL, .act = (qr_act)99, .kernels = NULL, .row_invariant = false };
            BAD(c.opts = &bad_act, "act not a qr_act value");
            bad = w.m; bad.rows = 0; BAD(c.w = &bad, "rows 0");
            bad = w.m; bad.cols = 0; BAD(c.w = &bad, "cols 0");
            bad = w.m; bad.data = NULL; BAD(c.w = &bad, "data NULL");
            if (dts[d] == QM_DTYPE_Q8_ROW) {
                bad = w.m; bad.scales = NULL; BAD(c.w = &bad, "scales NULL");
                bad = w.m; bad.row_sums = NULL; BAD(c.w = &bad, "row_sums NULL");
                bad = w.m; bad.row_stride = cols; BAD(c.w = &bad, "row_stride cols < align_up(cols, 64)");
                bad = w.m; bad.row_stride = 0; BAD(c.w = &bad, "row_stride 0");
                bad = w.m; bad.scales = (const float *)(const void *)((const uint8_t *)w.m.scales + 1);
                BAD(c.w = &bad, "scales not 4-aligned");
                assert_true(ws > 0);
                BAD(c.work_size = ws - 1, "work_size one byte short");
                BAD((c.work = NULL, c.work_size = 0), "work NULL");
                ybuf_check_untouched("after the errors", &yb, true);
                /* QR_ACT_F32 needs no work */
                qr_matmul_opts of = { .pool = NULL, .act = QR_ACT_F32, .kernels = NULL, .row_invariant = false };
                assert_int_equal(qr_matmul(v->k, &w.m, n, x.x, cols, yb.y, rows, NULL, 0, &of), QM_OK);
            } else {
                bad = w.m;
                bad.row_stride = (dts[d] == QM_DTYPE_F32 ? 4 : 2) * cols - 1;
                BAD(c.w = &bad, "row_stride < element size · cols");
                const size_t es = dts[d] == QM_DTYPE_F32 ? 4 : 2;
                bad = w.m; bad.row_stride = es * cols + 1; BAD(c.w = &bad, "row_stride not a multiple of the element size");
                bad = w.m; bad.data = (const uint8_t *)w.m.data + 1; BAD(c.w = &bad, "data not element-aligned");
                assert_int_equal(ws, 0);
            }
            /* y NULL last: it cannot show "untouched" */
            c = ok;
            c.y = NULL;
            assert_int_equal(qr_matmul(v->k, c.w, c.n, c.x, c.ldx, c.y, c.ldy, c.work, c.work_size, c.opts),
                             QM_ERR_INVALID_ARGUMENT);
            /* n = 0: QM_OK, nothing written */
            ybuf y0 = ybuf_new(n, rows, rows);
            assert_int_equal(qr_matmul(v->k, &w.m, 0, x.x, cols, y0.y, rows, work, ws, &o), QM_OK);
            ybuf_check_untouched("n = 0", &y0, true);
            free(y0.alloc);
            /* matvec refusals */
            ybuf y1 = ybuf_new(1, rows, rows);
            size_t ws1 = qr_matmul_work_size(&w.m, 1, &o);
            assert_int_equal(qr_matvec(v->k, &w.m, NULL, y1.y, work, ws, &o), QM_ERR_INVALID_ARGUMENT);
            assert_int_equal(qr_matvec(v->k, NULL, x.x, y1.y, work, ws, &o), QM_ERR_INVALID_ARGUMENT);
            if (ws1 > 0) assert_int_equal(qr_matvec(v->k, &w.m, x.x, y1.y, work, ws1 - 1, &o), QM_ERR_INVALID_ARGUMENT);
            ybuf_check_untouched("qr_matvec refusals", &y1, true);
            assert_int_equal(qr_matvec(v->k, &w.m, x.x, y1.y, work, ws1, &o), QM_OK);
            free(y1.alloc);
#undef BAD
            free(yb.alloc);
        }
        free(work);
        xmat_free(&x);
        tmat_free(&w);
    }
}

static void test_work_size(void **state)
{
    (void)state;
    static const size_t ns[4] = {1, 2, 17, 1000};
    for (int d = 0; d < 3; d++) {
        qm_dtype dt = (qm_dtype[]){QM_DTYPE_F32, QM_DTYPE_F16, QM_DTYPE_Q8_ROW}[d];
        tmat w = tmat_new(dt, 3, 65, 0, 0, 0, 1);
        for (int k = 0; k < 4; k++) {
            qr_matmul_opts oi = { .pool = NULL, .act = QR_ACT_INT8, .kernels = NULL, .row_invariant = false };
            qr_matmul_opts of = { .pool = pools_get(3), .act = QR_ACT_F32, .kernels = NULL, .row_invariant = false };
            size_t si = qr_matmul_work_size(&w.m, ns[k], &oi), sf = qr_matmul_work_size(&w.m, ns[k], &of);
            size_t sn = qr_matmul_work_size(&w.m, ns[k], NULL);
            if (dt == QM_DTYPE_Q8_ROW) {
                /* opts NULL is QR_ACT_AUTO: two int8 terms for n > 1, and for n = 1 room for them too (a
                 * variant may decode with float X or with two terms: auto_decode_terms) */
                qr_matmul_opts ox = { .pool = NULL, .act = QR_ACT_INT8X2, .kernels = NULL, .row_invariant = false };
                if (si == 0 || sn != qr_matmul_work_size(&w.m, ns[k], &ox))
                    fail_msg("Q8_ROW n=%zu: work size %zu for QR_ACT_INT8, %zu for opts NULL (AUTO)", ns[k], si, sn);
                /* room at least for the int8 copy of X */
                if (si < ns[k] * 65) fail_msg("Q8_ROW QR_ACT_INT8 n=%zu: work size %zu < n·cols", ns[k], si);
                assert_int_equal(sf, 0);
                /* a size that overflows is SIZE_MAX, never a wrapped small number */
                assert_true(qr_matmul_work_size(&w.m, SIZE_MAX / 8, &oi) == SIZE_MAX);
            } else {
                if (si || sf || sn) fail_msg("%s n=%zu: work size %zu/%zu/%zu, expected 0", dtype_name(dt), ns[k], si, sf, sn);
            }
        }
        tmat_free(&w);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_kernel_slots),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_work_size),
        cmocka_unit_test(test_sweep_f32),
        cmocka_unit_test(test_sweep_f16),
        cmocka_unit_test(test_sweep_q8),
        cmocka_unit_test(test_every_n),
        cmocka_unit_test(test_extremes),
        cmocka_unit_test(test_f16_every_half),
        cmocka_unit_test(test_int8_limit),
        cmocka_unit_test(test_container),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_decode_paths),
        cmocka_unit_test(test_split),
    };
    return cmocka_run_group_tests(tests, tu_group_setup, tu_group_teardown);
}
