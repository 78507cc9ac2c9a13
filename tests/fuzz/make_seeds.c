/* make_seeds.c — write small valid .qmap seed files for the reader fuzzer.
 *
 *     make_seeds OUTDIR
 *
 * Uses only the public writer API, alignment 64 (and one file at 128) so every seed stays under 16 KB.
 * The seeds cover: an empty file (no metadata, no tensors); metadata of every value type, including
 * empty/NUL-containing/multi-byte strings, NaN, empty arrays of every element type and string arrays;
 * tensors of every dtype (F32, F16, BF16, I32, Q8_ROW) at ranks 1..4, with Q8_ROW data that passes full
 * verification; long keys and names. Contents are deterministic, so the seeds are byte-identical
 * from run to run. Exit status 0 if every seed was written.
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "qm_error.h"
#include "qm_format.h"
#include "qm_writer.h"

static const char *g_dir;
static int g_failed;
static uint64_t g_rng = 0x9E3779B97F4A7C15ull;

static uint64_t rnd(void)
{
    /* splitmix64 */
    uint64_t z = (g_rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

#define TRY(call)                                                                                   \
    do {                                                                                            \
        qm_status st_ = (call);                                                                     \
        if (st_ != QM_OK) {                                                                         \
            fprintf(stderr, "make_seeds: %s: %s (%s)\n", #call, err.message, qm_status_name(st_));  \
            qm_writer_abort(w);                                                                     \
            return -1;                                                                              \
        }                                                                                           \
    } while (0)

/* One tensor to write. */
typedef struct seed_tensor {
    const char *name;
    uint32_t dtype;
    uint32_t rank;
    uint64_t dims[4];
} seed_tensor;

/* Write the data of one tensor. Plain dtypes get pseudo-random bytes (any bit pattern is valid data);
 * Q8_ROW gets a layout that passes full verification. */
static qm_status write_tensor_data(qm_writer *w, const seed_tensor *t, uint64_t alignment, qm_error *err)
{
    if (t->dtype == QM_DTYPE_Q8_ROW) {
        qm_q8row_layout L;
        qm_status st = qm_q8row_layout_of(t->rank, t->dims, alignment, &L);
        if (st != QM_OK)
            return qm_fail(err, st, NULL, "q8row", QM_NO_OFFSET, "layout of %s", t->name);
        uint8_t *buf = calloc(1, (size_t)L.size);
        if (buf == NULL)
            return qm_fail(err, QM_ERR_NOMEM, NULL, NULL, QM_NO_OFFSET, "seed buffer");
        for (uint64_t r = 0; r < L.rows; r++) {
            int8_t *q = (int8_t *)(buf + r * L.row_stride);
            int32_t sum = 0;
            for (uint64_t j = 0; j < L.cols; j++) {
                int v = (int)(rnd() % 255) - 127; /* -127..127 */
                if (r == 0)
                    v = 0; /* an all-zero row: scale 0 */
                q[j] = (int8_t)v;
                sum += v;
            }
            float scale = r == 0 ? 0.0f : 0.001f * (float)(r + 1);
            memcpy(buf + L.scales_offset + 4 * r, &scale, 4);
            memcpy(buf + L.sums_offset + 4 * r, &sum, 4);
        }
        st = qm_writer_write(w, buf, (size_t)L.size, err);
        free(buf);
        return st;
    }
    uint64_t nbytes = 0;
    qm_status st = qm_tensor_nbytes(t->dtype, t->rank, t->dims, alignment, &nbytes);
    if (st != QM_OK)
        return qm_fail(err, st, NULL, "nbytes", QM_NO_OFFSET, "size of %s", t->name);
    uint8_t *buf = malloc((size_t)nbytes);
    if (buf == NULL)
        return qm_fail(err, QM_ERR_NOMEM, NULL, NULL, QM_NO_OFFSET, "seed buffer");
    for (uint64_t i = 0; i < nbytes; i++)
        buf[i] = (uint8_t)rnd();
    /* Write in two uneven pieces to exercise chunking. */
    size_t first = (size_t)(nbytes / 3);
    st = qm_writer_write(w, buf, first, err);
    if (st == QM_OK)
        st = qm_writer_write(w, buf + first, (size_t)nbytes - first, err);
    free(buf);
    return st;
}

typedef enum { META_NONE, META_ALL, META_ARRAYS_ONLY, META_LONG } meta_kind;

static int write_seed(const char *file, uint64_t alignment, meta_kind meta, const seed_tensor *ts, size_t nt)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", g_dir, file);
    qm_error err;
    qm_error_clear(&err);
    qm_writer *w = NULL;
    qm_writer_opts opts = { .alignment = alignment };
    qm_status cst = qm_writer_create(path, &opts, &w, &err);
    if (cst != QM_OK) {
        fprintf(stderr, "make_seeds: create %s: %s\n", path, err.message);
        return -1;
    }

    if (meta == META_ALL) {
        static const char nul_str[] = { 'a', '\0', 'b' };
        TRY(qm_writer_meta_string(w, "general.architecture", "llama", 5, &err));
        TRY(qm_writer_meta_string(w, "general.name", "seed model \xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80",
                                  strlen("seed model \xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"), &err));
        TRY(qm_writer_meta_string(w, "general.empty", "", 0, &err));
        TRY(qm_writer_meta_string(w, "general.nul", nul_str, sizeof nul_str, &err));
        TRY(qm_writer_meta_u32(w, "llama.block_count", 32, &err));
        TRY(qm_writer_meta_i32(w, "llama.i32", -7, &err));
        TRY(qm_writer_meta_u64(w, "llama.context_length", UINT64_C(1) << 40, &err));
        TRY(qm_writer_meta_i64(w, "llama.i64", INT64_MIN, &err));
        TRY(qm_writer_meta_f32(w, "llama.rope.freq_base", 10000.0f, &err));
        TRY(qm_writer_meta_f32(w, "llama.nan32", nanf(""), &err));
        TRY(qm_writer_meta_f64(w, "llama.norm_eps", 1e-5, &err));
        TRY(qm_writer_meta_f64(w, "llama.inf64", -INFINITY, &err));
        TRY(qm_writer_meta_bool(w, "llama.true", true, &err));
        TRY(qm_writer_meta_bool(w, "llama.false", false, &err));
        TRY(qm_writer_meta_string(w, "\xe9\x94\xae.unicode_key", "v", 1, &err));
    }
    if (meta == META_ALL || meta == META_ARRAYS_ONLY) {
        const uint32_t au32[] = { 0, 1, 0xFFFFFFFFu };
        const int32_t ai32[] = { -1, 2, INT32_MIN };
        const uint64_t au64[] = { 7, UINT64_MAX };
        const int64_t ai64[] = { -3, INT64_MAX, 0 };
        const float af32[] = { 1.5f, -0.0f };
        const double af64[] = { 3.25, 1e300, -2.0 };
        const bool abool[] = { true, false, true, true };
        const char *const toks[] = { "<s>", "</s>", "", "\xe2\x96\x81the", "x\xf0\x90\x8d\x88y" };
        const char *const withnul[] = { "a", "b\0c" };
        const size_t withnul_lens[] = { 1, 3 };
        TRY(qm_writer_meta_array(w, "arr.u32", QM_META_U32, au32, 3, &err));
        TRY(qm_writer_meta_array(w, "arr.i32", QM_META_I32, ai32, 3, &err));
        TRY(qm_writer_meta_array(w, "arr.u64", QM_META_U64, au64, 2, &err));
        TRY(qm_writer_meta_array(w, "arr.i64", QM_META_I64, ai64, 3, &err));
        TRY(qm_writer_meta_array(w, "arr.f32", QM_META_F32, af32, 2, &err));
        TRY(qm_writer_meta_array(w, "arr.f64", QM_META_F64, af64, 3, &err));
        TRY(qm_writer_meta_array(w, "arr.bool", QM_META_BOOL, abool, 4, &err));
        TRY(qm_writer_meta_string_array(w, "tokenizer.tokens", toks, NULL, 5, &err));
        TRY(qm_writer_meta_string_array(w, "tokenizer.nul", withnul, withnul_lens, 2, &err));
        /* Empty arrays of every element type. */
        static const uint32_t types[] = { QM_META_U32, QM_META_I32, QM_META_U64, QM_META_I64, QM_META_F32,
                                          QM_META_F64, QM_META_BOOL };
        for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
            char key[64];
            snprintf(key, sizeof key, "empty.%s", qm_meta_type_name(types[i]));
            TRY(qm_writer_meta_array(w, key, types[i], NULL, 0, &err));
        }
        TRY(qm_writer_meta_string_array(w, "empty.STRING", NULL, NULL, 0, &err));
    }
    if (meta == META_LONG) {
        char key[QM_MAX_KEY_LEN + 1];
        memset(key, 'k', QM_MAX_KEY_LEN);
        key[QM_MAX_KEY_LEN] = '\0';
        TRY(qm_writer_meta_u32(w, key, 1, &err)); /* longest allowed key */
        TRY(qm_writer_meta_u32(w, "k", 2, &err)); /* shortest */
        uint32_t many[300];
        for (uint32_t i = 0; i < 300; i++)
            many[i] = i * 2654435761u;
        TRY(qm_writer_meta_array(w, "arr.many", QM_META_U32, many, 300, &err));
    }

    for (size_t i = 0; i < nt; i++)
        TRY(qm_writer_add_tensor(w, ts[i].name, ts[i].dtype, ts[i].rank, ts[i].dims, &err));
    for (size_t i = 0; i < nt; i++)
        TRY(write_tensor_data(w, &ts[i], alignment, &err));
    qm_status st = qm_writer_finish(w, &err);
    if (st != QM_OK) {
        fprintf(stderr, "make_seeds: finish %s: %s\n", path, err.message);
        return -1;
    }
    struct stat sb;
    if (stat(path, &sb) == 0 && sb.st_size > 16384)
        fprintf(stderr, "make_seeds: warning: %s is %lld bytes (> 16 KB)\n", path, (long long)sb.st_size);
    return 0;
}

#define N(a) (sizeof(a) / sizeof((a)[0]))

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s OUTDIR\n", argv[0]);
        return 2;
    }
    g_dir = argv[1];
    mkdir(g_dir, 0777); /* may already exist */

    static const seed_tensor per_dtype[] = {
        { "f32.r1", QM_DTYPE_F32, 1, { 7 } },
        { "f16.r2", QM_DTYPE_F16, 2, { 3, 5 } },
        { "bf16.r3", QM_DTYPE_BF16, 3, { 2, 3, 4 } },
        { "i32.r4", QM_DTYPE_I32, 4, { 1, 2, 3, 2 } },
        { "q8.r2", QM_DTYPE_Q8_ROW, 2, { 3, 70 } },
    };
    static const seed_tensor ranks_f32[] = {
        { "a", QM_DTYPE_F32, 1, { 1 } },
        { "b", QM_DTYPE_F32, 2, { 2, 3 } },
        { "c", QM_DTYPE_F32, 3, { 1, 2, 3 } },
        { "d", QM_DTYPE_F32, 4, { 2, 1, 2, 2 } },
    };
    static const seed_tensor ranks_f16[] = {
        { "h1", QM_DTYPE_F16, 1, { 33 } },
        { "h4", QM_DTYPE_F16, 4, { 1, 1, 1, 5 } },
    };
    static const seed_tensor ranks_bf16[] = {
        { "bf1", QM_DTYPE_BF16, 1, { 16 } },
        { "bf2", QM_DTYPE_BF16, 2, { 4, 4 } },
    };
    static const seed_tensor ranks_i32[] = {
        { "i1", QM_DTYPE_I32, 1, { 5 } },
        { "i3", QM_DTYPE_I32, 3, { 2, 2, 2 } },
    };
    static const seed_tensor ranks_q8[] = {
        { "q1", QM_DTYPE_Q8_ROW, 1, { 10 } },
        { "q2", QM_DTYPE_Q8_ROW, 2, { 2, 64 } },
        { "q3", QM_DTYPE_Q8_ROW, 3, { 2, 1, 65 } },
        { "q4", QM_DTYPE_Q8_ROW, 4, { 1, 2, 2, 3 } },
    };
    static const seed_tensor one_small[] = {
        { "w", QM_DTYPE_F32, 2, { 2, 2 } },
    };
    static const seed_tensor unicode_names[] = {
        { "blk.0.attn_q.weight", QM_DTYPE_F16, 2, { 4, 8 } },
        { "\xc3\xa9t\xc3\xa9", QM_DTYPE_I32, 1, { 3 } },
        { "\xf0\x9f\xa6\x99", QM_DTYPE_Q8_ROW, 2, { 2, 3 } },
    };

    struct {
        const char *file;
        uint64_t alignment;
        meta_kind meta;
        const seed_tensor *ts;
        size_t nt;
    } seeds[] = {
        { "empty.qmap", 64, META_NONE, NULL, 0 },
        { "meta_only.qmap", 64, META_ALL, NULL, 0 },
        { "arrays_only.qmap", 64, META_ARRAYS_ONLY, NULL, 0 },
        { "per_dtype.qmap", 64, META_NONE, per_dtype, N(per_dtype) },
        { "mixed.qmap", 64, META_ALL, per_dtype, N(per_dtype) },
        { "f32_ranks.qmap", 64, META_NONE, ranks_f32, N(ranks_f32) },
        { "f16_ranks.qmap", 64, META_NONE, ranks_f16, N(ranks_f16) },
        { "bf16_ranks.qmap", 64, META_NONE, ranks_bf16, N(ranks_bf16) },
        { "i32_ranks.qmap", 64, META_NONE, ranks_i32, N(ranks_i32) },
        { "q8_ranks.qmap", 64, META_NONE, ranks_q8, N(ranks_q8) },
        { "q8_align128.qmap", 128, META_NONE, ranks_q8, 2 },
        { "one_tensor.qmap", 64, META_NONE, one_small, N(one_small) },
        { "long_meta.qmap", 64, META_LONG, one_small, N(one_small) },
        { "unicode.qmap", 64, META_ARRAYS_ONLY, unicode_names, N(unicode_names) },
    };

    int written = 0;
    for (size_t i = 0; i < N(seeds); i++) {
        if (write_seed(seeds[i].file, seeds[i].alignment, seeds[i].meta, seeds[i].ts, seeds[i].nt) == 0)
            written++;
        else
            g_failed++;
    }

    /* A tensor with the longest allowed name (1024 bytes). */
    {
        static char longname[QM_MAX_NAME_LEN + 1];
        memset(longname, 'n', QM_MAX_NAME_LEN);
        longname[QM_MAX_NAME_LEN] = '\0';
        seed_tensor t = { longname, QM_DTYPE_BF16, 1, { 3 } };
        if (write_seed("long_name.qmap", 64, META_NONE, &t, 1) == 0)
            written++;
        else
            g_failed++;
    }

    printf("make_seeds: wrote %d seed files to %s\n", written, g_dir);
    return g_failed ? 1 : 0;
}
