/* fuzz_model.c — libFuzzer target for the model loaders and the runtime behind qmap_model_open: valid
 * containers with lying metadata and tensor tables, checksums repaired, opened and run.
 *
 * The containers are the seeds in the directory QMAP_FUZZ_MODELS names (tests/fuzz/make_model_seeds.py:
 * gpt2, gpt_neo, llama / mistral / qwen2, mlp, seq2seq; F32, F16, Q8_ROW; byte-level BPE, SentencePiece
 * BPE, SentencePiece from a .model and word-level tokenizers). The fuzz input is not a file but a program:
 * its first byte picks a seed, the rest is a list of edits — set a metadata value (to an input-given or an
 * "interesting" number, NaN, inf, a name the loaders know), drop an entry, change its type, set or resize an
 * array, set a tensor's dims, dtype or rank, drop a tensor, poke a float or half into its data. The edited
 * container is written through format/'s writer, which computes every checksum afresh, so the reader
 * accepts it and only the loaders' own checks stand between the lie and the model.
 *
 * What must hold, for ANY input:
 *   - qmap_model_open, and whatever runs after it, never crashes, never reads or writes out of bounds, never
 *     leaks, never hits undefined behaviour (ASan, UBSan and LSan abort the run);
 *   - every failure is a known status with err.code equal to it and a non-empty message;
 *   - a model that opens runs: its tokenizer encodes and decodes a short text with every id inside the
 *     vocabulary; an LM session evaluates 3 tokens then 1 and gives logits the sampler turns into an id
 *     inside the vocabulary; a classifier classifies 2 rows; a translator translates one 3-token sentence
 *     with a beam of 2. Each either succeeds or fails as above.
 * A violated property calls abort() after printing why, so libFuzzer records the input as a crash.
 *
 * Build: make build/fuzz/fuzz_model (the library compiled with -fsanitize=fuzzer-no-link,address,undefined);
 * make model-fuzz makes the seeds and runs it for MODEL_FUZZ_SECONDS.
 */
#include <dirent.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "qm_format.h"
#include "qm_reader.h"
#include "qm_writer.h"
#include "qmap.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_SEEDS 64
#define MAX_POKES 4
/* An edit that would grow the container past this is ignored: the loaders are the target, not the disk. */
#define MAX_DATA_BYTES ((uint64_t)32 << 20)
#define MAX_ARRAY 65536u

static qm_file *g_seeds[MAX_SEEDS];
static size_t g_n_seeds;
static char g_dir[256], g_path[300];

static void die(const char *what, const char *detail)
{
    fprintf(stderr, "fuzz_model: property violated: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    abort();
}

static void cleanup(void)
{
    unlink(g_path);
    rmdir(g_dir);
}

static int by_name(const struct dirent **a, const struct dirent **b) { return strcmp((*a)->d_name, (*b)->d_name); }

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *dir = getenv("QMAP_FUZZ_MODELS");
    struct dirent **names = NULL;
    int n = dir ? scandir(dir, &names, NULL, by_name) : -1;
    for (int i = 0; i < n; i++) {
        size_t len = strlen(names[i]->d_name);
        char path[4096];
        qm_error err;
        if (len > 5 && !strcmp(names[i]->d_name + len - 5, ".qmap") && g_n_seeds < MAX_SEEDS) {
            snprintf(path, sizeof path, "%s/%s", dir, names[i]->d_name);
            if (qm_open_copy(path, &g_seeds[g_n_seeds], &err) != QM_OK) die("a seed does not open", err.message);
            g_n_seeds++;
        }
        free(names[i]);
    }
    free(names);
    if (!g_n_seeds) die("set QMAP_FUZZ_MODELS to a directory of .qmap seeds (make_model_seeds.py)", dir);
    const char *tmp = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(g_dir, sizeof g_dir, "%s/qmap-fuzz-model-XXXXXX", tmp);
    if (!mkdtemp(g_dir)) die("cannot make a temporary directory", g_dir);
    snprintf(g_path, sizeof g_path, "%s/m.qmap", g_dir);
    atexit(cleanup);
    return 0;
}

/* ---- the input as a stream of bytes ------------------------------------------------------------------- */

typedef struct input { const uint8_t *p; size_t n; } input;

static uint8_t next_u8(input *in)
{
    if (!in->n) return 0;
    in->n--;
    return *in->p++;
}

static uint64_t next_bytes(input *in, unsigned k)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < k; i++) v |= (uint64_t)next_u8(in) << (8 * i);
    return v;
}

static const uint64_t k_ints[] = { 0, 1, 2, 3, 4, 5, 7, 8, 12, 15, 16, 17, 31, 32, 33, 48, 63, 64, 65, 96, 97, 127,
                                   128, 255, 256, 4095, 4096, 65535, 65536, 1u << 24, 0x7fffffff, 0x80000000u,
                                   0xffffffffu, (uint64_t)1 << 32, (uint64_t)1 << 40, UINT64_MAX };
static const double k_floats[] = { 0.0, -0.0, 1.0, -1.0, 1e-5, 1e-45, 1.17549435e-38, 3.4028235e38, 1e30, -1e30,
                                   0.5, 10000.0, 65504.0, 1e6, NAN, INFINITY, -INFINITY };
static const char *const k_strings[] = { "gpt2", "gpt_neo", "llama", "mlp", "seq2seq", "none", "mistral", "qwen2",
                                         "silu", "gelu", "gelu_new", "relu", "tanh", "sigmoid", "identity", "half",
                                         "interleaved", "global", "local", "logits", "softmax", "log_softmax",
                                         "bpe_bytelevel", "bpe_sentencepiece", "wordlevel", "first", "always",
                                         "never", "nfkc", "nfd,lowercase", "lowercase", "(x+x+)+y|.", "\\s+", "(",
                                         "", "\xe2\x96\x81", "a b", "<s>", "</s>", "<unk>", "f16", "q8_row" };
#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

/* ---- edits -------------------------------------------------------------------------------------------- */

typedef struct value {
    uint32_t type;                 /* a scalar QM_META_* or QM_META_STRING */
    uint64_t u;                    /* integer and bool types */
    double f;                      /* F32 / F64 */
    const char *s;                 /* STRING (NUL-terminated, from k_strings) */
} value;

typedef struct meta_edit {
    bool dropped, replaced;
    value v;                       /* when replaced */
    bool resized;                  /* arrays: count changed (extra elements repeat the last) */
    uint64_t count;
    bool elem_set;                 /* arrays: one element replaced */
    uint64_t elem;
    value ev;
} meta_edit;

typedef struct tensor_edit {
    bool dropped;
    uint32_t dtype, rank;
    uint64_t dims[QM_MAX_RANK];
    uint32_t n_pokes;
    uint32_t poke_off[MAX_POKES];
    uint8_t poke[MAX_POKES][4];
} tensor_edit;

typedef struct plan {
    const qm_file *f;
    meta_edit *meta;
    tensor_edit *tensors;
    uint64_t n_meta, n_tensors;
} plan;

static bool is_int_type(uint32_t t) { return t == QM_META_U32 || t == QM_META_I32 || t == QM_META_U64 || t == QM_META_I64; }

/* An input-chosen value of type t: `interesting` picks from the tables, else raw input bits. */
static value pick_value(input *in, uint32_t t, bool interesting)
{
    value v = { .type = t };
    uint8_t k = next_u8(in);
    if (t == QM_META_STRING) {
        v.s = k_strings[k % N_OF(k_strings)];
    } else if (t == QM_META_F32 || t == QM_META_F64) {
        if (interesting) {
            v.f = k_floats[k % N_OF(k_floats)];
        } else {
            uint32_t bits = (uint32_t)next_bytes(in, 4);
            float x;
            memcpy(&x, &bits, 4);
            v.f = x;
        }
    } else if (t == QM_META_BOOL) {
        v.u = k & 1;
    } else {
        v.u = interesting ? k_ints[k % N_OF(k_ints)] : next_bytes(in, 4);
        if (k & 0x80 && interesting) v.u = (uint64_t)-(int64_t)v.u;   /* negatives for the signed types */
    }
    return v;
}

static const qm_meta *meta_of(const plan *p, uint64_t i) { return qm_meta_at(p->f, i); }

static void edit_meta(plan *p, input *in, uint8_t op)
{
    if (!p->n_meta) return;
    uint64_t i = next_u8(in) % p->n_meta;
    const qm_meta *m = meta_of(p, i);
    meta_edit *e = &p->meta[i];
    switch (op) {
    case 0:
    case 1:
        if (m->type == QM_META_ARRAY) return;
        e->replaced = true;
        e->v = pick_value(in, m->type, op == 1);
        break;
    case 2: e->dropped = true; break;
    case 3: {
        uint32_t t = 1 + next_u8(in) % QM_META_STRING;
        e->replaced = true;
        e->v = pick_value(in, t, true);
        break;
    }
    case 4:
        if (m->type != QM_META_ARRAY || !m->count || m->elem_type == QM_META_ARRAY) return;
        e->elem_set = true;
        e->elem = next_bytes(in, 2) % m->count;
        e->ev = pick_value(in, m->elem_type, true);
        break;
    case 5:
        if (m->type != QM_META_ARRAY || !m->count) return;
        e->resized = true;
        e->count = next_bytes(in, 2) % MAX_ARRAY;
        break;
    }
}

static void edit_tensor(plan *p, input *in, uint8_t op)
{
    if (!p->n_tensors) return;
    tensor_edit *t = &p->tensors[next_u8(in) % p->n_tensors];
    switch (op) {
    case 6: {
        uint8_t d = next_u8(in), k = next_u8(in);
        if (!t->rank) return;
        uint64_t *dim = &t->dims[d % t->rank];
        *dim = k >= 224 ? *dim * 2 : k >= 192 ? *dim / 2 : k_ints[k % N_OF(k_ints)];
        break;
    }
    case 7: t->dtype = next_u8(in) % 7; break;   /* 0 and 6 are not dtypes */
    case 8: t->dropped = true; break;
    case 9: {
        uint8_t how = next_u8(in) % 3;
        if (how == 0 && t->rank > 1) t->rank--;
        else if (how == 1 && t->rank < QM_MAX_RANK) t->dims[t->rank++] = 1;
        else if (how == 2 && t->rank < QM_MAX_RANK) {
            memmove(t->dims + 1, t->dims, t->rank * sizeof t->dims[0]);
            t->dims[0] = 1;
            t->rank++;
        }
        break;
    }
    case 10: {
        if (t->n_pokes == MAX_POKES) return;
        uint32_t off = (uint32_t)next_bytes(in, 2) * 4;
        uint8_t k = next_u8(in);
        float x = (float)k_floats[k % N_OF(k_floats)];
        uint16_t h = k & 1 ? 0x7c00 : 0x7e00;   /* F16 inf / NaN, for half tensors and Q8_ROW scales alike */
        t->poke_off[t->n_pokes] = off;
        if (k & 0x80) {
            memcpy(t->poke[t->n_pokes], &h, 2);
            memcpy(t->poke[t->n_pokes] + 2, &h, 2);
        } else {
            memcpy(t->poke[t->n_pokes], &x, 4);
        }
        t->n_pokes++;
        break;
    }
    }
}

/* Meta value v_src of another entry or a tensor dim copied where it may make a lie consistent. */
static void edit_cross(plan *p, input *in, uint8_t op)
{
    if (!p->n_meta || !p->n_tensors) return;
    uint64_t mi = next_u8(in) % p->n_meta;
    tensor_edit *t = &p->tensors[next_u8(in) % p->n_tensors];
    uint8_t d = next_u8(in);
    if (!t->rank) return;
    const qm_meta *m = meta_of(p, mi);
    meta_edit *e = &p->meta[mi];
    if (op == 11 && is_int_type(m->type)) {   /* a hyperparameter set to a tensor's dim */
        e->replaced = true;
        e->v = (value){ .type = m->type, .u = t->dims[d % t->rank] };
    } else if (op == 12 && is_int_type(m->type)) {   /* a tensor's dim set to a hyperparameter */
        uint64_t v = e->replaced ? e->v.u : m->type == QM_META_U32 ? m->v.u32 : m->type == QM_META_U64 ? m->v.u64
                                                                                  : (uint64_t)m->v.i64;
        t->dims[d % t->rank] = v;
    }
}

static void plan_init(plan *p, const qm_file *f)
{
    p->f = f;
    p->n_meta = qm_meta_count(f);
    p->n_tensors = qm_tensor_count(f);
    p->meta = calloc(p->n_meta ? p->n_meta : 1, sizeof *p->meta);
    p->tensors = calloc(p->n_tensors ? p->n_tensors : 1, sizeof *p->tensors);
    if (!p->meta || !p->tensors) die("out of memory", NULL);
    for (uint64_t i = 0; i < p->n_tensors; i++) {
        const qm_tensor *t = qm_tensor_at(f, i);
        p->tensors[i].dtype = t->dtype;
        p->tensors[i].rank = t->rank;
        memcpy(p->tensors[i].dims, t->dims, sizeof t->dims);
    }
}

static void plan_free(plan *p)
{
    free(p->meta);
    free(p->tensors);
}

/* ---- writing the edited container --------------------------------------------------------------------- */

static qm_status write_value(qm_writer *w, const char *key, const value *v, qm_error *err)
{
    switch (v->type) {
    case QM_META_U32: return qm_writer_meta_u32(w, key, (uint32_t)v->u, err);
    case QM_META_I32: return qm_writer_meta_i32(w, key, (int32_t)(uint32_t)v->u, err);
    case QM_META_U64: return qm_writer_meta_u64(w, key, v->u, err);
    case QM_META_I64: return qm_writer_meta_i64(w, key, (int64_t)v->u, err);
    case QM_META_F32: return qm_writer_meta_f32(w, key, (float)v->f, err);
    case QM_META_F64: return qm_writer_meta_f64(w, key, v->f, err);
    case QM_META_BOOL: return qm_writer_meta_bool(w, key, v->u != 0, err);
    default: return qm_writer_meta_string(w, key, v->s, strlen(v->s), err);
    }
}

static size_t elem_size(uint32_t t)
{
    return t == QM_META_U64 || t == QM_META_I64 || t == QM_META_F64 ? 8 : t == QM_META_BOOL ? sizeof(bool) : 4;
}

/* Store value v as element of type t at dst (the native C type qm_writer_meta_array takes). */
static void put_elem(void *dst, uint32_t t, const value *v)
{
    uint32_t u32 = (uint32_t)v->u;
    uint64_t u64 = v->u;
    float f32 = (float)v->f;
    double f64 = v->f;
    bool b = v->u != 0;
    if (t == QM_META_F32) memcpy(dst, &f32, 4);
    else if (t == QM_META_F64) memcpy(dst, &f64, 8);
    else if (t == QM_META_BOOL) memcpy(dst, &b, sizeof b);
    else if (elem_size(t) == 8) memcpy(dst, &u64, 8);
    else memcpy(dst, &u32, 4);
}

/* An array entry rewritten with its count and one element edited. */
static qm_status write_array(qm_writer *w, const qm_meta *m, const meta_edit *e, qm_error *err)
{
    uint64_t count = e->resized ? e->count : m->count;
    qm_status st;
    if (m->elem_type == QM_META_STRING) {
        const char **strs = calloc(count ? count : 1, sizeof *strs);
        size_t *lens = calloc(count ? count : 1, sizeof *lens);
        if (!strs || !lens) die("out of memory", NULL);
        for (uint64_t i = 0; i < count; i++) {
            uint64_t len;
            qm_meta_array_string(m, i < m->count ? i : m->count - 1, &strs[i], &len);
            lens[i] = (size_t)len;
        }
        if (e->elem_set && e->elem < count) {
            strs[e->elem] = e->ev.s;
            lens[e->elem] = strlen(e->ev.s);
        }
        st = qm_writer_meta_string_array(w, m->key, strs, lens, count, err);
        free(strs);
        free(lens);
        return st;
    }
    size_t es = elem_size(m->elem_type);
    uint8_t *vals = calloc(count ? count : 1, es);
    if (!vals) die("out of memory", NULL);
    for (uint64_t i = 0; i < count; i++) qm_meta_array_get(m, i < m->count ? i : m->count - 1, vals + i * es);
    if (e->elem_set && e->elem < count) put_elem(vals + e->elem * es, m->elem_type, &e->ev);
    st = qm_writer_meta_array(w, m->key, m->elem_type, vals, count, err);
    free(vals);
    return st;
}

static qm_status write_metadata(qm_writer *w, const plan *p, qm_error *err)
{
    qm_status st = QM_OK;
    for (uint64_t i = 0; i < p->n_meta && st == QM_OK; i++) {
        const qm_meta *m = meta_of(p, i);
        const meta_edit *e = &p->meta[i];
        if (e->dropped) continue;
        if (e->replaced) st = write_value(w, m->key, &e->v, err);
        else if (e->resized || e->elem_set) st = write_array(w, m, e, err);
        else st = qm_writer_meta_copy(w, m, err);
    }
    return st;
}

/* Tensor i's new bytes: the old ones as far as they go, zeros after, then the pokes. */
static qm_status write_tensor_data(qm_writer *w, const qm_tensor *t, const tensor_edit *e, uint64_t size, qm_error *err)
{
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf) die("out of memory", NULL);
    uint64_t keep = t->size < size ? t->size : size;
    memcpy(buf, t->data, keep);
    memset(buf + keep, 0, size - keep);
    for (uint32_t k = 0; k < e->n_pokes; k++)
        if (size >= 4 && e->poke_off[k] <= size - 4) memcpy(buf + e->poke_off[k], e->poke[k], 4);
    qm_status st = qm_writer_write(w, buf, size, err);
    free(buf);
    return st;
}

/* Write the edited container to g_path. False when an edit makes a file the writer refuses or one above
 * MAX_DATA_BYTES (the input is then uninteresting, not a failure). */
static bool write_plan(const plan *p)
{
    qm_error err;
    qm_writer_opts o = { .alignment = qm_file_header(p->f)->alignment };
    qm_writer *w;
    if (qm_writer_create(g_path, &o, &w, &err) != QM_OK) die("cannot create the container", err.message);
    uint64_t *sizes = calloc(p->n_tensors ? p->n_tensors : 1, sizeof *sizes), total = 0;
    if (!sizes) die("out of memory", NULL);
    qm_status st = write_metadata(w, p, &err);
    for (uint64_t i = 0; i < p->n_tensors && st == QM_OK; i++) {
        const tensor_edit *e = &p->tensors[i];
        if (e->dropped) continue;
        st = qm_tensor_nbytes(e->dtype, e->rank, e->dims, o.alignment, &sizes[i]);
        if (st == QM_OK && (total += sizes[i]) > MAX_DATA_BYTES) st = QM_ERR_TOO_MANY;
        if (st == QM_OK) st = qm_writer_add_tensor(w, qm_tensor_at(p->f, i)->name, e->dtype, e->rank, e->dims, &err);
    }
    for (uint64_t i = 0; i < p->n_tensors && st == QM_OK; i++)
        if (!p->tensors[i].dropped) st = write_tensor_data(w, qm_tensor_at(p->f, i), &p->tensors[i], sizes[i], &err);
    free(sizes);
    if (st != QM_OK) {
        qm_writer_abort(w);
        return false;
    }
    return qm_writer_finish(w, &err) == QM_OK;
}

/* ---- running the model -------------------------------------------------------------------------------- */

static void check_status(qmap_status st, const qmap_error *err, const char *call)
{
    if (st == QMAP_OK) return;
    if (!strcmp(qmap_status_name(st), "QMAP_ERR_UNKNOWN")) die("unknown status", call);
    if (err->code != st) die("err.code differs from the status returned", call);
    if (!memchr(err->message, 0, sizeof err->message) || !err->message[0]) die("empty or unterminated message", call);
}

static void run_tokenizer(qmap_model *m, const qmap_model_info *in)
{
    static const char text[] = "Hello world, x 12 tomato <s> caf\xc3\xa9 \xe2\x96\x81!";
    int32_t ids[256];
    size_t n = 0;
    qmap_error err;
    qmap_status st = qmap_tokenize(m, text, sizeof text - 1, true, ids, 256, &n, &err);
    check_status(st, &err, "qmap_tokenize");
    if (st != QMAP_OK) return;
    uint32_t vocab = in->kind == QMAP_KIND_SEQ2SEQ ? in->src_vocab_size : in->vocab_size;
    qmap_detok dt;
    qmap_detok_init(&dt);
    char out[4096];
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || (vocab && (uint32_t)ids[i] >= vocab)) die("tokenize gave an id outside the vocabulary", NULL);
        size_t k;
        if (in->kind == QMAP_KIND_SEQ2SEQ) continue;   /* source ids; detokenizing reads the target vocabulary */
        st = qmap_detokenize(m, &dt, ids[i], out, sizeof out, &k, &err);
        check_status(st, &err, "qmap_detokenize");
        (void)qmap_token_piece(m, ids[i], &k);
    }
    (void)qmap_detok_flush(&dt, out, sizeof out);
}

static void run_lm(qmap_model *m, const qmap_model_info *in, uint8_t salt)
{
    qmap_session_params sp;
    qmap_session_params_default(&sp);
    sp.n_ctx = 8;
    sp.n_batch = 4;
    sp.threads = 1;
    sp.kv_type = salt & 1 ? QMAP_KV_F32 : QMAP_KV_F16;
    sp.act = (qmap_act_mode)(salt >> 1) % 5;
    qmap_session *s;
    qmap_error err;
    qmap_status st = qmap_session_new(m, &sp, &s, &err);
    check_status(st, &err, "qmap_session_new");
    if (st != QMAP_OK) return;
    uint32_t v = in->vocab_size ? in->vocab_size : 1;
    int32_t ids[3] = { 1 % (int32_t)v, (int32_t)(salt % v), (int32_t)((v - 1) % v) };
    st = qmap_eval(s, ids, 3, &err);
    check_status(st, &err, "qmap_eval (3 tokens)");
    const float *logits = st == QMAP_OK ? qmap_logits(s, 2) : NULL;
    qmap_sampler *smp;
    if (logits && qmap_sampler_new(NULL, in->vocab_size, &smp, &err) == QMAP_OK) {
        int32_t id = qmap_sample(smp, logits);
        if (id < 0 || (uint32_t)id >= in->vocab_size) die("the sampler chose an id outside the vocabulary", NULL);
        st = qmap_eval(s, &id, 1, &err);
        check_status(st, &err, "qmap_eval (1 token)");
        qmap_sampler_free(smp);
    }
    qmap_session_free(s);
}

static void run_classifier(qmap_model *m, const qmap_model_info *in)
{
    if (in->input_dim > (1u << 20) || in->vocab_size > (1u << 20)) return;
    qmap_classifier *c;
    qmap_error err;
    qmap_status st = qmap_classifier_new(m, 2, 1, QMAP_ACT_AUTO, &c, &err);
    check_status(st, &err, "qmap_classifier_new");
    if (st != QMAP_OK) return;
    float *x = calloc(2 * (size_t)in->input_dim + 1, sizeof *x), *y = calloc(2 * (size_t)in->vocab_size + 1, sizeof *y);
    if (!x || !y) die("out of memory", NULL);
    for (size_t i = 0; i < 2 * (size_t)in->input_dim; i++) x[i] = (float)(i % 7) * 0.25f - 0.5f;
    st = qmap_classify(c, x, 2, y, &err);
    check_status(st, &err, "qmap_classify");
    free(x);
    free(y);
    qmap_classifier_free(c);
}

static void run_translator(qmap_model *m, const qmap_model_info *in, uint8_t salt)
{
    qmap_translate_params tp;
    qmap_translate_params_default(&tp);
    tp.beam_size = 1 + (salt & 1);
    tp.max_len = 4;
    tp.max_batch = 1;
    tp.threads = 1;
    qmap_translator *t;
    qmap_error err;
    qmap_status st = qmap_translator_new(m, &tp, &t, &err);
    check_status(st, &err, "qmap_translator_new");
    if (st != QMAP_OK) return;
    uint32_t v = in->src_vocab_size ? in->src_vocab_size : 1;
    int32_t src[3] = { (int32_t)(4 % v), (int32_t)(salt % v), (int32_t)((v - 1) % v) };
    uint32_t lens[1] = { 3 };
    qmap_hypothesis hyp[2];
    st = qmap_translate(t, src, lens, 1, hyp, &err);
    check_status(st, &err, "qmap_translate");
    for (uint32_t j = 0; st == QMAP_OK && j < tp.n_best; j++)
        for (size_t k = 0; k < hyp[j].n_ids; k++)
            if (hyp[j].ids[k] < 0 || (uint32_t)hyp[j].ids[k] >= in->vocab_size) die("a target id outside the vocabulary", NULL);
    qmap_translator_free(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    input in = { data, size };
    const qm_file *seed = g_seeds[next_u8(&in) % g_n_seeds];
    uint8_t salt = next_u8(&in);
    plan p;
    plan_init(&p, seed);
    while (in.n) {
        uint8_t op = next_u8(&in) % 13;
        if (op <= 5) edit_meta(&p, &in, op);
        else if (op <= 10) edit_tensor(&p, &in, op);
        else edit_cross(&p, &in, op);
    }
    bool written = write_plan(&p);
    plan_free(&p);
    if (!written) return 0;

    qmap_model_params mp;
    qmap_model_params_default(&mp);
    mp.large_pages = false;   /* the default: no prefetch of every page, nothing dropped from the cache */
    qmap_model *m;
    qmap_error err;
    qmap_status st = qmap_model_open(g_path, &mp, &m, &err);
    check_status(st, &err, "qmap_model_open");
    if (st != QMAP_OK) return 0;
    qmap_model_info info;
    qmap_model_get_info(m, &info);
    if (info.has_tokenizer || info.kind == QMAP_KIND_SEQ2SEQ) run_tokenizer(m, &info);
    if (info.kind == QMAP_KIND_LM) run_lm(m, &info, salt);
    else if (info.kind == QMAP_KIND_CLASSIFIER) run_classifier(m, &info);
    else if (info.kind == QMAP_KIND_SEQ2SEQ) run_translator(m, &info, salt);
    qmap_model_close(m);
    return 0;
}
