/* qr_matmul.c — argument checks, the int8 copy of X, cache blocking and the split between threads.
 * The arithmetic itself is in the variant's block kernels (qr_kernels.h). */
#include "qr_matmul.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "qr_dtype.h"
#include "qr_kernels.h"
#include "qr_quantize_x.h"

/* ---- variant choice ------------------------------------------------------------------------- */

#if defined(__x86_64__) && defined(__GNUC__)
/* Which AVX-512 table suits this core: where QR_ACT_AUTO's decode widens W to float only if the core
 * widens faster than memory delivers (runtime/README.md). AMD family 19h with AVX-512 is Zen 4 (Zen 3 has
 * none): 512-bit operations in two halves. Other AMD cores with AVX-512 are Zen 5 or later, full width,
 * where widening is faster. Intel cores (a Xeon with AVX-512 FP16) widen slower than they read two int8
 * terms (docs/perf/2026-11-28-intel-xeon.md); a core of another vendor gets that table too, which holds
 * the float-X accuracy either way. */
static const qr_kernels *avx512_table(void)
{
    if (__builtin_cpu_is("amd")) return __builtin_cpu_is("amdfam19h") ? &qr_kernels_avx512_halves : &qr_kernels_avx512;
    return &qr_kernels_avx512_i8x2;
}
#endif

const qr_kernels *qr_kernels_for(qm_cpu_level level)
{
#if defined(__x86_64__) && defined(__GNUC__)
    if (level == QM_CPU_AVX512)
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                       __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni")
                   ? avx512_table()
                   : NULL;
    if (level == QM_CPU_AVX2)
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c")
                   ? &qr_kernels_avx2
                   : NULL;
#else
    if (level != QM_CPU_GENERIC) return NULL;
#endif
    return &qr_kernels_ref;
}

const qr_kernels *qr_kernels_get(void)
{
    /* An AVX-512 CPU without VNNI (Skylake-SP) runs the AVX2 kernels. */
    for (int level = (int)qm_cpu_level_get(); level > QM_CPU_GENERIC; level--) {
        const qr_kernels *k = qr_kernels_for((qm_cpu_level)level);
        if (k) return k;
    }
    return &qr_kernels_ref;
}

const char *qr_kernels_name(const qr_kernels *k)
{
    return k ? k->name : "none";
}

/* ---- views ---------------------------------------------------------------------------------- */

qm_status qr_matrix_from_tensor(const qm_file *f, const qm_tensor *t, qr_matrix *out, qm_error *err)
{
    if (!f || !t || !out) return qm_fail(err, QM_ERR_INVALID_ARGUMENT, NULL, NULL, QM_NO_OFFSET, "NULL argument");
    const char *path = qm_file_path(f);
    uint64_t cols = t->dims[t->rank - 1], rows = 1;
    for (uint32_t d = 0; d + 1 < t->rank; d++) rows *= t->dims[d]; /* the reader capped n_elements at 2^40 */
    memset(out, 0, sizeof *out);
    out->rows = (size_t)rows;
    out->cols = (size_t)cols;
    out->data = t->data;
    const qr_dtype_traits *tr = qr_dtype_get(t->dtype);
    if (!tr) {
        char list[64];
        return qm_fail(err, QM_ERR_TYPE_MISMATCH, path, "tensor dtype", t->entry_offset,
                       "tensor '%s' has dtype %u; matmul takes %s weights", t->name, (unsigned)t->dtype,
                       qr_dtype_list(list, sizeof list));
    }
    out->dtype = t->dtype;
    return tr->view(f, t, out, err);
}

/* ---- the product ---------------------------------------------------------------------------- */

/* The block kernel of (dtype, kind of X): the variant's, or for float X the portable one where the
 * variant has none, so a new dtype runs everywhere with its reference kernel alone. An int8 X kernel reads
 * its own variant's encoding of X (qr_kernels.quantize_x), so every variant has those it lists. */
static qr_block_fn *block_fn(const qr_kernels *k, qm_dtype dtype, qr_xkind xk)
{
    qr_block_fn *fn = k->block[dtype][xk];
    return fn || xk != QR_XK_FLOAT ? fn : qr_kernels_ref.block[dtype][xk];
}

static const qr_matmul_opts default_opts = { .pool = NULL, .act = QR_ACT_AUTO, .kernels = NULL, .row_invariant = false };

static size_t pad64(size_t cols)
{
    return (cols + 63) & ~(size_t)63;
}

/* QR_ACT_AUTO keeps float-X accuracy and picks the faster way to get it (runtime/README.md). With many
 * rows of X each weight is reused from cache and arithmetic sets the pace: VNNI does 4x the multiply-adds
 * of an FMA per instruction, so two int8 terms beat widening the weights to float by 1.3-2.2x. With one
 * row (decode) every weight is read once and memory should set the pace; whether widening keeps up with it
 * depends on the core, so the variant says (qr_kernels.auto_decode_terms). */
/* How many int8 terms X is split into: 0 (float X), 1 (QR_ACT_INT8) or 2 (QR_ACT_INT8X2). With k = NULL,
 * the most any variant uses (what a work buffer must hold). */
static int int8_terms(const qr_kernels *k, const qr_matrix *w, size_t n, const qr_matmul_opts *opts)
{
    const qr_dtype_traits *tr = qr_dtype_get(w->dtype);
    if (!tr || !(tr->x_kinds & QR_XK_BIT(QR_XK_INT8)) || w->cols > QR_INT8_MAX_COLS || opts->act == QR_ACT_F32)
        return 0;
    if (opts->act == QR_ACT_INT8) return 1;
    if (opts->act == QR_ACT_AUTO && n == 1 && k && !opts->row_invariant) return k->auto_decode_terms;
    return 2;
}

int qr_matmul_int8_terms(const qr_matrix *w, size_t n, const qr_matmul_opts *opts)
{
    return int8_terms(opts->kernels ? opts->kernels : qr_kernels_get(), w, n, opts);
}

static int thread_count(const qr_matmul_opts *opts)
{
    return qr_pool_threads(opts->pool);
}

/* A thread's share of W is walked in blocks of W rows that stay in L2 while every X row passes over
 * them: about QR_L2_BLOCK_BYTES, a multiple of QR_ROW_GRAIN rows. 512 KB (half of a Zen 5 core's L2)
 * suits float X on long rows, as a block then holds more rows per pass of X; two int8 terms also keep an
 * n × block_rows float scratch block in L2 and do better with 256 KB
 * (docs/perf/2026-11-28-source-comments.md). */
#define QR_L2_BLOCK_BYTES (512u * 1024u)
#define QR_L2_BLOCK_BYTES_TWO_TERMS (256u * 1024u)
#define QR_ROW_GRAIN 16 /* W rows per unit of work between threads (a multiple of every tile width) */

/* An int8 product in K slices (qr_kernels.k_slice_bytes; 0: none) keeps one slice of the block hot at a
 * time, so a block of long rows may hold as many rows as one of slice-long rows: fewer blocks, fewer
 * passes of X; long rows then run about as fast as square ones (docs/BENCHMARKS.md, Matmul kernels). */
static size_t block_rows_of(const qr_matrix *w, int terms, size_t k_slice)
{
    const size_t bytes = terms > 0 && k_slice && w->row_stride > k_slice ? k_slice : w->row_stride;
    size_t rows = (terms == 2 ? QR_L2_BLOCK_BYTES_TWO_TERMS : QR_L2_BLOCK_BYTES) / bytes;
    return rows < QR_ROW_GRAIN ? QR_ROW_GRAIN : rows / QR_ROW_GRAIN * QR_ROW_GRAIN;
}

/* The work buffer, from its first 64-byte boundary: `terms` int8 copies of X (n rows of pad64(cols)
 * bytes each), their scales (terms · n floats), for two terms a float block of n × block_rows per
 * thread that holds the second term's products before they are added to Y, and when X has at least
 * QR_XG_MIN_ROWS rows, each term once more in row groups (qr_kernels.h, QR_XG_OFFSET; n rounded up to
 * QR_XG_ROWS) for the variants that read them (sized whatever the variant: qr_matmul_work_size does not
 * know it). */
typedef struct work_layout {
    size_t q_bytes;       /* one int8 copy of X */
    size_t scales_bytes;  /* all scales, rounded up to 64 */
    size_t temp_floats;   /* per thread */
    size_t xg_bytes;      /* one copy of X in row groups; 0 below QR_XG_MIN_ROWS rows */
    size_t total;         /* including the 64 bytes of alignment slack; SIZE_MAX on overflow */
} work_layout;

/* X rows per chunk of a two-term product (run_share): the second term's partial products of a chunk
 * against one W block stay in L2. A multiple of the AVX-512 GEMM's tile of 3 row groups (48 rows) and
 * of the row tiles' 4, so that a chunk is whole tiles. */
#define QR_X2_CHUNK ((size_t)96)

/* Fewer X rows than one row group go through the small-row tiles (QR_SMALL_ROWS) instead of the groups:
 * a group's 16 lanes are computed whatever the rows, so 2..15 rows cost what 16 do, where the tiles' cost
 * grows with the rows. A batch's decode step has one row per sequence. qmap bench --parallel -p 8 -n 16 -r 3, 2 threads,
 * Zen 4, aggregate tg of TinyLlama 1.1B Q8_ROW at 4 / 8 sequences, two rounds alternated at load 4:
 * groups from 4 rows 19.0-19.4 / 35.8-37.3 tok/s, row tiles below 16 28.5-29.4 / 42.3-43.5; Llama 110M
 * at 2 / 4 / 8 (load 9-10, one run each way) 22.7 / 44.0 / 76.8 in groups from 2 rows, 54.8 / 90.2 /
 * 114.5 in row tiles. Int8 products are exact, so the path does not change a bit of Y. */
#define QR_XG_MIN_ROWS QR_XG_ROWS
static work_layout layout_of(const qr_matrix *w, size_t n, int terms, int threads)
{
    work_layout l = {0, 0, 0, 0, 0};
    if (terms == 0) return l;
    const size_t row = pad64(w->cols); /* cols <= QR_INT8_MAX_COLS: no overflow */
    /* the most rows a two-term block of any variant holds (the widest K slice) */
    const size_t br = terms == 2 ? block_rows_of(w, 2, QR_K_SLICE_BYTES) : 0;
    /* Every product below is bounded by (n + QR_XG_ROWS)·(4·row + 8 + threads·br·4); refuse n that could
     * overflow it. */
    const size_t per_x_row = 4 * row + 8 + (size_t)threads * br * 4 + 64;
    const size_t max_rows = (SIZE_MAX - 256) / per_x_row;
    if (max_rows < QR_XG_ROWS || n > max_rows - QR_XG_ROWS) {
        l.total = SIZE_MAX;
        return l;
    }
    l.q_bytes = n * row;
    l.scales_bytes = pad64((size_t)terms * n * sizeof(float));
    l.temp_floats = (n < QR_X2_CHUNK ? n : QR_X2_CHUNK) * br;
    l.xg_bytes = n >= QR_XG_MIN_ROWS ? (n + QR_XG_ROWS - 1) / QR_XG_ROWS * QR_XG_ROWS * row : 0;
    l.total = 64 + (size_t)terms * (l.q_bytes + l.xg_bytes) + l.scales_bytes +
              (size_t)threads * l.temp_floats * sizeof(float);
    return l;
}

qr_matrix qr_matrix_rows(const qr_matrix *w, size_t first, size_t count)
{
    qr_matrix v = *w;
    v.rows = count;
    v.data = (const uint8_t *)w->data + first * w->row_stride;
    if (w->scales) v.scales = w->scales + first;
    if (w->row_sums) v.row_sums = w->row_sums + first;
    return v;
}

size_t qr_matmul_work_size(const qr_matrix *w, size_t n, const qr_matmul_opts *opts)
{
    if (!opts) opts = &default_opts;
    if (!w || n == 0) return 0;
    /* QR_ACT_AUTO with one row is sized for two terms, whichever variant the call will use */
    int terms = int8_terms(NULL, w, n, opts);
    return layout_of(w, n, terms, terms == 2 ? thread_count(opts) : 1).total;
}

/* The dtype's own checks (qr_dtype_traits.valid) after the ones every view shares. */
static bool valid_matrix(const qr_matrix *w)
{
    if (!w || !w->data || w->rows == 0 || w->cols == 0) return false;
    const qr_dtype_traits *tr = qr_dtype_get(w->dtype);
    return tr && tr->valid(w);
}

/* Rows [begin, end) of `total` for part `p` of `parts`, boundaries on multiples of `grain`. */
static void split(size_t total, size_t parts, size_t p, size_t grain, size_t *begin, size_t *end)
{
    size_t units = (total + grain - 1) / grain;
    size_t b = units * p / parts * grain, e = units * (p + 1) / parts * grain;
    *begin = b < total ? b : total;
    *end = e < total ? e : total;
}

/* One matrix of a product: its rows are units [unit0, unit0 + units) of the job's row space. */
typedef struct job_part {
    const qr_matrix *w;
    float *y;
    size_t unit0, units;
} job_part;

typedef struct job {
    qr_block_fn *fn;
    job_part parts[QR_MATMUL_MAX_PARTS];
    size_t n_parts;
    size_t units;             /* QR_ROW_GRAIN-row units of all parts together */
    size_t rows;              /* W rows of all parts together */
    const uint8_t *x;         /* float X, or the (first) int8 copy */
    size_t x_stride;          /* bytes */
    const float *x_scales;
    const uint8_t *x2;        /* QR_ACT_INT8X2: the second int8 term of X, same stride */
    const float *x2_scales;
    const uint8_t *xg, *xg2;  /* the int8 terms in row groups (qr_kernels.x_groups), or NULL */
    float *temp;              /* QR_ACT_INT8X2: temp_floats floats per thread */
    size_t temp_floats;
    size_t k;
    size_t ldy;
    int decode;               /* n == 1, unless a row-invariant float product */
    int terms;                /* int8 terms of X: 0 (float X), 1 or 2 */
    size_t k_slice;           /* the variant's k_slice_bytes */
    size_t n;                 /* rows of X */
    bool split_rows;          /* chunks are W rows (else X rows) */
    size_t chunks;
    bool one_stream;          /* a decode in regions (qr_kernels.decode_regions): blocks marked one_stream */
    bool small_x2;            /* two terms, n <= QR_SMALL_ROWS, a variant with gemm_x2: blocks take both */
} job;

/* A thread's share: X rows [i0, i1) against rows [r0, r1) of one part's W, block by block. With two int8
 * terms each block is multiplied by both while it is in L2, and Y = (first term) + (second term), one
 * rounding. */
static void run_share(const job *jb, const job_part *pt, size_t thread, size_t i0, size_t i1, size_t r0, size_t r1)
{
    if (i0 >= i1 || r0 >= r1) return;
    const qr_matrix *w = pt->w;
    /* decode reads each weight once: no block to keep in L2, the share is one block (longer streams) */
    const size_t block_rows = jb->decode ? r1 - r0 : block_rows_of(w, jb->terms, jb->k_slice), m = i1 - i0;
    for (size_t rb = r0; rb < r1; rb += block_rows) {
        size_t nr = r1 - rb < block_rows ? r1 - rb : block_rows;
        qr_block b = {
            .x = jb->x + i0 * jb->x_stride,
            .x_stride = jb->x_stride,
            .x_scales = jb->x_scales ? jb->x_scales + i0 : NULL,
            .w = (const uint8_t *)w->data + rb * w->row_stride,
            .w_stride = w->row_stride,
            .w_scales = w->scales ? w->scales + rb : NULL,
            .w_sums = w->row_sums ? w->row_sums + rb : NULL,
            .m = m,
            .nr = nr,
            .k = jb->k,
            .y = pt->y + i0 * jb->ldy + rb,
            .y_stride = jb->ldy,
            .decode = jb->decode,
            .one_stream = jb->one_stream,
            .xg = jb->xg,
            .x_row0 = i0,
        };
        if (!jb->x2 || jb->decode || jb->small_x2) { /* both terms at once (qr_block.x2) */
            b.x2 = jb->x2 ? jb->x2 + i0 * jb->x_stride : NULL;
            b.x2_scales = jb->x2_scales ? jb->x2_scales + i0 : NULL;
            jb->fn(&b);
            continue;
        }
        /* two terms: X rows in chunks, so that the second term's partial products (chunk × nr floats)
         * stay in cache until they are added, instead of a pass over an m × nr array in memory */
        float *t = jb->temp + thread * jb->temp_floats;   /* chunk × nr, stride nr */
        for (size_t c0 = 0; c0 < m; c0 += QR_X2_CHUNK) {
            size_t cm = m - c0 < QR_X2_CHUNK ? m - c0 : QR_X2_CHUNK, ic = i0 + c0;
            qr_block bc = b;
            bc.m = cm;
            bc.x = jb->x + ic * jb->x_stride;
            bc.x_scales = jb->x_scales + ic;
            bc.x_row0 = ic;
            bc.y = pt->y + ic * jb->ldy + rb;
            jb->fn(&bc);
            bc.x = jb->x2 + ic * jb->x_stride;
            bc.xg = jb->xg2;
            bc.x_scales = jb->x2_scales + ic;
            bc.y = t;
            bc.y_stride = nr;
            jb->fn(&bc);
            for (size_t i = 0; i < cm; i++) {
                float *yr = pt->y + (ic + i) * jb->ldy + rb;
                for (size_t r = 0; r < nr; r++) yr[r] += t[i * nr + r];
            }
        }
    }
}

/* Below this many multiply-adds a parallel region costs more than it saves. */
#define QR_PARALLEL_MIN_MACS ((size_t)1 << 18)

/* Chunks per thread. A decode product is short (tens of microseconds) and bound by memory: eight chunks
 * a thread leave little to wait for when one thread starts late or is preempted. Alone, a thread has no
 * one to wait for, and one chunk keeps its four streams (qr_kernels.h, QR_DECODE_QUARTERS) as long as the
 * product, which speeds the small models' 1-thread decode (docs/perf/2026-11-26-zen4.md). A GEMM chunk
 * walks all of X over its W rows, so fewer, larger chunks keep X's passes few. A table with
 * decode_regions hands a decode on several threads out in regions instead. */
#define QR_CHUNKS_DECODE 8
#define QR_CHUNKS_DECODE_ALONE 1
#define QR_CHUNKS_GEMM 4

/* The chunks of a decode shrink from first to last, their sizes falling linearly from 1.8 to 0.2 times the
 * mean: chunk c ends at f(c/C) of the units, f(t) = t + 0.8·t·(1 − t). The threads claim chunks in order,
 * so the chunk the last thread finishes alone is short (about 1/64 of the product for 16 chunks instead of
 * 1/16) while the first are long (long streams). A decode product is a read of memory, and while one
 * thread finishes alone it reads at one thread's speed. One process alternating equal and shrinking
 * chunks per 32-token decode, 2 threads, Zen 4 (median of the paired ratios, rounds faster): TinyLlama
 * 1.1B Q8_ROW 1.021 (21 of 30) and 1.039 (31 of 40), F16 1.025 (16 of 24), GPT-2 124M Q8_ROW 1.027 (19 of
 * 30, 128 tokens), Llama 110M 0.997 (17 of 40); falling to 0 (f(t) = 2t − t²) did about the same. The
 * rows a chunk covers do not change any result (every W row is summed the same way wherever it falls). */
static size_t decode_chunk_end(size_t units, size_t chunks, size_t c)
{
    const size_t C = chunks;
    return units * c * (5 * C + 4 * (C - c)) / (5 * C * C);
}

/* Row units [a, b) across the parts (a range may end in one part and go on in the next), every X row. */
static void run_units(const job *jb, int worker, size_t a, size_t b)
{
    for (size_t p = 0; p < jb->n_parts; p++) {
        const job_part *pt = &jb->parts[p];
        const size_t u0 = a > pt->unit0 ? a : pt->unit0, u1 = b < pt->unit0 + pt->units ? b : pt->unit0 + pt->units;
        if (u0 >= u1) continue;
        const size_t r0 = (u0 - pt->unit0) * QR_ROW_GRAIN, r1 = (u1 - pt->unit0) * QR_ROW_GRAIN;
        run_share(jb, pt, (size_t)worker, 0, jb->n, r0, r1 < pt->w->rows ? r1 : pt->w->rows);
    }
}

/* Chunk c: a range of row units across the parts, or a range of X rows against every part. */
static void product_chunk(void *ctx, size_t c, int worker)
{
    const job *jb = ctx;
    size_t a, b;
    if (jb->split_rows) {
        if (jb->decode) {
            a = decode_chunk_end(jb->units, jb->chunks, c);
            b = decode_chunk_end(jb->units, jb->chunks, c + 1);
        } else {
            split(jb->units, jb->chunks, c, 1, &a, &b);
        }
        run_units(jb, worker, a, b);
    } else {
        split(jb->n, jb->chunks, c, 1, &a, &b);
        for (size_t p = 0; p < jb->n_parts; p++) run_share(jb, &jb->parts[p], (size_t)worker, a, b, 0, jb->parts[p].w->rows);
    }
}

/* A decode range of row units (qr_pool_run_regions): one thread's next piece of its run of W's rows. */
static void product_range(void *ctx, size_t first, size_t count, int worker)
{
    run_units(ctx, worker, first, first + count);
}

/* The int8 copy (or two) of X, row by row, and for a variant that reads them the same rows in groups. */
typedef struct quantize_job {
    const qr_kernels *k;
    const float *x;
    size_t ldx, cols, stride, n, chunks;
    uint8_t *q, *q2;
    float *s, *s2;
    uint8_t *xg, *xg2;        /* NULL: no row groups */
} quantize_job;

/* Row i (stride bytes, NULL: zeros) into its place in the row groups (QR_XG_OFFSET). */
static void group_row(const uint8_t *row, size_t stride, size_t i, uint8_t *xg)
{
    uint8_t *dst = xg + QR_XG_OFFSET(stride, i, 0);
    for (size_t c = 0; c < stride; c += 4, dst += 64) {
        if (row) memcpy(dst, row + c, 4);
        else memset(dst, 0, 4);
    }
}

/* Rows a..b of X, already int8, into the row groups; after the last row, the last group's rows past X:
 * defined bytes for the kernels to read (their products are dropped). */
static void group_rows(const quantize_job *j, size_t a, size_t b)
{
    for (size_t i = a; i < b; i++) {
        group_row(j->q + i * j->stride, j->stride, i, j->xg);
        if (j->q2) group_row(j->q2 + i * j->stride, j->stride, i, j->xg2);
    }
    if (b == j->n)
        for (size_t i = j->n; i % QR_XG_ROWS; i++) {
            group_row(NULL, j->stride, i, j->xg);
            if (j->q2) group_row(NULL, j->stride, i, j->xg2);
        }
}

static void quantize_chunk(void *ctx, size_t c, int worker)
{
    (void)worker;
    const quantize_job *j = ctx;
    size_t a, b;
    split(j->n, j->chunks, c, 1, &a, &b);
    for (size_t i = a; i < b; i++) {
        const float *xi = j->x + i * j->ldx;
        uint8_t *qi = j->q + i * j->stride, *q2i = j->q2 ? j->q2 + i * j->stride : NULL;
        j->s[i] = j->k->quantize_x(xi, j->cols, j->stride, qi);
        if (q2i) j->s2[i] = j->k->quantize_x_residual(xi, qi, j->s[i], j->cols, j->stride, q2i);
    }
    if (j->xg && a < b) group_rows(j, a, b); /* the last chunk is never empty */
}

/* One int8 term of a tensor-parallel part of X (qr_matmul_opts.x_amax_reduce): each row's max|value|
 * (x, or with q1 the residual of its first term) joined with the other parts' before any value is rounded,
 * so the part's bytes are those of one process's whole row. s[] holds the maxima, then the scales. */
static int quantize_part_term(const quantize_job *j, const qr_matmul_opts *o, const uint8_t *q1, const float *s1,
                              uint8_t *q, float *s)
{
    const uint8_t flip = j->k->x_flip;
    for (size_t i = 0; i < j->n; i++)
        s[i] = qr_qx_amax(j->x + i * j->ldx, q1 ? q1 + i * j->stride : NULL, q1 ? s1[i] : 0.0f, j->cols, flip);
    if (o->x_amax_reduce(o->x_amax_ctx, s, j->n) != 0) return -1;
    for (size_t i = 0; i < j->n; i++)
        s[i] = qr_qx_write(j->x + i * j->ldx, q1 ? q1 + i * j->stride : NULL, q1 ? s1[i] : 0.0f, j->cols,
                           j->stride, q + i * j->stride, flip, s[i]);
    return 0;
}

/* X quantized on the calling thread for a tensor-parallel part (a decode's single row, or a prompt's rows
 * once per product: small beside the product). */
static qm_status quantize_part(const quantize_job *j, const qr_matmul_opts *o)
{
    if (quantize_part_term(j, o, NULL, NULL, j->q, j->s) != 0) return QM_ERR_IO;
    if (j->q2 && quantize_part_term(j, o, j->q, j->s, j->q2, j->s2) != 0) return QM_ERR_IO;
    if (j->xg) group_rows(j, 0, j->n);
    return QM_OK;
}

/* Can these matrices run as one job: the same dtype and row length (so one X, quantized once, and one
 * work layout serve them all)? */
static bool same_kind(const qr_matrix *const *w, size_t count)
{
    for (size_t p = 1; p < count; p++)
        if (w[p]->dtype != w[0]->dtype || w[p]->cols != w[0]->cols || w[p]->row_stride != w[0]->row_stride) return false;
    return true;
}

qm_status qr_matmul_many(const qr_kernels *k, const qr_matrix *const *w, size_t count, size_t n, const float *x,
                         size_t ldx, float *const *y, size_t ldy, void *work, size_t work_size,
                         const qr_matmul_opts *opts)
{
    if (!opts) opts = &default_opts;
    if (!k) k = opts->kernels ? opts->kernels : qr_kernels_get();
    if (!w || count == 0 || count > QR_MATMUL_MAX_PARTS || (opts->act != QR_ACT_AUTO && opts->act != QR_ACT_INT8 &&
                                                            opts->act != QR_ACT_F32 && opts->act != QR_ACT_INT8X2))
        return QM_ERR_INVALID_ARGUMENT;
    for (size_t p = 0; p < count; p++)
        if (!valid_matrix(w[p])) return QM_ERR_INVALID_ARGUMENT;
    if (n == 0) return QM_OK;
    if (!x || !y) return QM_ERR_INVALID_ARGUMENT;
    for (size_t p = 0; p < count; p++)
        if (!y[p] || ldx < w[p]->cols || ldy < w[p]->rows) return QM_ERR_INVALID_ARGUMENT;
    if (!same_kind(w, count)) { /* one job each: each is a valid product of its own */
        for (size_t p = 0; p < count; p++) { /* every work size first, so that an error writes no Y */
            const size_t need = qr_matmul_work_size(w[p], n, opts);
            if (need && (!work || need == SIZE_MAX || work_size < need)) return QM_ERR_INVALID_ARGUMENT;
        }
        for (size_t p = 0; p < count; p++) {
            qm_status st = qr_matmul_many(k, &w[p], 1, n, x, ldx, &y[p], ldy, work, work_size, opts);
            if (st != QM_OK) return st;
        }
        return QM_OK;
    }

    const qr_matrix *w0 = w[0];
    const int terms = int8_terms(k, w0, n, opts);
    int threads = thread_count(opts);
    /* a float decode sums in its own order (qr_kernels.h); a row-invariant product keeps the GEMM's */
    const bool decode = n == 1 && !(opts->row_invariant && terms == 0);
    job jb = {.n_parts = count, .ldy = ldy, .k = w0->cols, .decode = decode, .terms = terms,
              .k_slice = k->k_slice_bytes};
    for (size_t p = 0; p < count; p++) {
        jb.parts[p] = (job_part){ .w = w[p], .y = y[p], .unit0 = jb.units,
                                  .units = (w[p]->rows + QR_ROW_GRAIN - 1) / QR_ROW_GRAIN };
        jb.units += jb.parts[p].units;
        jb.rows += w[p]->rows;
    }
    uint8_t *xq = NULL, *xq2 = NULL, *xg = NULL, *xg2 = NULL;
    float *xs = NULL, *xs2 = NULL;
    if (terms > 0) {
        /* laid out for `threads` (the count qr_matmul_work_size assumed); fewer may run. The parts share
         * dtype and row length, so the layout of one is the layout of all. */
        const work_layout l = layout_of(w0, n, terms, terms == 2 ? threads : 1);
        if (!work || l.total == SIZE_MAX || work_size < l.total) return QM_ERR_INVALID_ARGUMENT;
        uint8_t *base = (uint8_t *)(((uintptr_t)work + 63) & ~(uintptr_t)63);
        xq = base;
        xq2 = terms == 2 ? base + l.q_bytes : NULL;
        xs = (float *)(void *)(base + (size_t)terms * l.q_bytes);
        xs2 = terms == 2 ? xs + n : NULL;
        jb.fn = block_fn(k, w0->dtype, QR_XK_INT8);
        jb.x = xq;
        jb.x2 = xq2;
        jb.x_stride = pad64(w0->cols);
        jb.x_scales = xs;
        jb.x2_scales = xs2;
        jb.temp = terms == 2 ? (float *)(void *)(base + (size_t)terms * l.q_bytes + l.scales_bytes) : NULL;
        jb.temp_floats = l.temp_floats;
        jb.small_x2 = terms == 2 && n <= QR_SMALL_ROWS && k->gemm_x2;
        if (k->x_groups && l.xg_bytes) {
            xg = base + (size_t)terms * l.q_bytes + l.scales_bytes +
                 (size_t)(terms == 2 ? threads : 1) * l.temp_floats * sizeof(float);
            xg2 = terms == 2 ? xg + l.xg_bytes : NULL;
            jb.xg = xg;
            jb.xg2 = xg2;
        }
        jb.k = pad64(w0->cols);
    } else {
        jb.fn = block_fn(k, w0->dtype, QR_XK_FLOAT);
        jb.x = (const uint8_t *)x;
        jb.x_stride = ldx * sizeof(float);
    }
    if (!jb.fn) return QM_ERR_INVALID_ARGUMENT; /* a table without the dtype's kernel: nothing written */

    qr_pool *pool = opts->pool;
    if ((double)n * (double)jb.rows * (double)w0->cols < (double)QR_PARALLEL_MIN_MACS) pool = NULL;
    if (terms > 0) {
        quantize_job qj = { .k = k, .x = x, .ldx = ldx, .cols = w0->cols, .stride = pad64(w0->cols), .n = n,
                            .chunks = qr_pool_chunks(pool, n, 1), .q = xq, .q2 = xq2, .s = xs, .s2 = xs2,
                            .xg = xg, .xg2 = xg2 };
        if (opts->x_amax_reduce) {
            qm_status st = quantize_part(&qj, opts);
            if (st != QM_OK) return st;
        } else {
            qr_pool_run(pool, qj.chunks, quantize_chunk, &qj);
        }
    }
    jb.n = n;
    /* A decode on a table that asks for it: every thread its own run of W's rows (qr_pool_run_regions;
     * runtime/README.md, Threads, has the measurements). */
    if (decode && k->decode_regions && qr_pool_threads(pool) > 1) {
        jb.one_stream = true;
        qr_pool_run_regions(pool, jb.units, product_range, &jb);
        return QM_OK;
    }
    /* Split W's rows (each chunk streams its own part of W, the weights are the big operand); with too
     * few rows for that, split X's rows instead. */
    jb.split_rows = jb.rows >= (size_t)threads * QR_ROW_GRAIN || n == 1;
    const size_t per_thread = n > 1                       ? QR_CHUNKS_GEMM
                              : qr_pool_threads(pool) > 1 ? QR_CHUNKS_DECODE
                                                          : QR_CHUNKS_DECODE_ALONE;
    jb.chunks = qr_pool_chunks(pool, jb.split_rows ? jb.units : n, per_thread);
    qr_pool_run(pool, jb.chunks, product_chunk, &jb);
    return QM_OK;
}

qm_status qr_matmul(const qr_kernels *k, const qr_matrix *w, size_t n, const float *x, size_t ldx, float *y,
                    size_t ldy, void *work, size_t work_size, const qr_matmul_opts *opts)
{
    return qr_matmul_many(k, &w, 1, n, x, ldx, &y, ldy, work, work_size, opts);
}

qm_status qr_matvec(const qr_kernels *k, const qr_matrix *w, const float *x, float *y, void *work, size_t work_size,
                    const qr_matmul_opts *opts)
{
    return qr_matmul(k, w, 1, x, w ? w->cols : 0, y, w ? w->rows : 0, work, work_size, opts);
}
