/* fuzz_config.c — libFuzzer target for config.json as the architecture planner of `qmap convert` reads
 * it (convert/qc_arch.c: qc_plan_build, qc_plan_write_meta, qc_plan_free).
 *
 * Once per process the target builds small fixed checkpoints in memory, as safetensors bytes opened with
 * qc_open_buffer(QC_INPUT_SAFETENSORS, …), with the tensor names Hugging Face / PyTorch give them and the sizes of the
 * default configs of tests/models (so the seeds config/models-*.json plan completely): gpt2 (tied head,
 * bool attention-mask buffers), gpt_neo (an lm_head equal to the embedding), llama (4 heads, 2 kv heads,
 * untied head, inv_freq buffers), qwen2 (q/k/v biases, 1 kv head, tied), an MNIST-shaped mlp and the
 * seq2seq translation model. Tensor data is zero but for the bool masks and llama's lm_head. The input,
 * NUL-terminated, is the config.json given with each of them, arch NULL (so its "model_type" chooses,
 * else the tensor names). What must hold, for ANY input bytes:
 *   - The planner never crashes, never reads out of bounds, never leaks (ASan/UBSan/LSan) and returns
 *     (libFuzzer's -timeout catches a loop the config could make endless).
 *   - A failure is one of the errors qc_arch.h documents (QM_ERR_UNKNOWN_ARCH, BAD_CONFIG, SHAPE,
 *     MISSING_TENSOR, UNEXPECTED_TENSOR, UNSUPPORTED, BAD_SOURCE; or NOMEM), equal to err.code, with a
 *     non-empty message, and the plan is left empty.
 *   - A plan it makes names its architecture and maps every output to a real tensor of the source with
 *     the same number of elements, at rank 1..4, under distinct non-empty names; its metadata keys are
 *     "<arch>.…", and the metadata can be written into a container (a config the planner accepts must
 *     never fail later, when convert writes the file).
 * A violated property calls abort() after printing why, so libFuzzer records the input as a crash.
 *
 * Build: make BUILD=… BUILD/fuzz/fuzz_config (libFuzzer), BUILD/fuzz/replay_config (replays
 * tests/fuzz/seeds/config/ under gcc ASan+UBSan without libFuzzer).
 */
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "qc_arch.h"
#include "qc_source.h"
#include "qm_writer.h"
#include "fuzz_scratch.h"

#define FUZZ_TARGET "fuzz_config"
#include "fuzz_check.h"
#include "fuzz_plan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* ---- safetensors bytes built in memory (fixture) ---- */

typedef struct stbuf {
    char *hdr; size_t hlen, hcap;        /* the JSON header, without its braces' closing */
    uint8_t *data; size_t dlen, dcap;    /* tensor bytes, back to back */
} stbuf;

static void *grow_to(void *p, size_t *cap, size_t need)
{
    if (need <= *cap) return p;
    size_t c = *cap ? *cap : 4096;
    while (c < need) c *= 2;
    void *q = realloc(p, c);
    if (!q) die("fixture: out of memory", NULL);
    *cap = c;
    return q;
}

static void hdr_printf(stbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void hdr_printf(stbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) die("fixture: format", fmt);
    b->hdr = grow_to(b->hdr, &b->hcap, b->hlen + (size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(b->hdr + b->hlen, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->hlen += (size_t)n;
}

/* One tensor: dtype "F32" or "BOOL", rank 0..4 dims, every byte `fill`. The name is printf-formatted. */
static void tensor(stbuf *b, const char *dtype, uint8_t fill, int rank, const uint64_t *dims, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
static void tensor(stbuf *b, const char *dtype, uint8_t fill, int rank, const uint64_t *dims, const char *fmt, ...)
{
    char name[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    uint64_t n = !strcmp(dtype, "BOOL") ? 1 : 4;
    for (int i = 0; i < rank; i++) n *= dims[i];
    hdr_printf(b, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[", b->hlen ? "," : "{", name, dtype);
    for (int i = 0; i < rank; i++) hdr_printf(b, "%s%llu", i ? "," : "", (unsigned long long)dims[i]);
    hdr_printf(b, "],\"data_offsets\":[%zu,%zu]}", b->dlen, b->dlen + (size_t)n);
    b->data = grow_to(b->data, &b->dcap, b->dlen + (size_t)n);
    memset(b->data + b->dlen, fill, (size_t)n);
    b->dlen += (size_t)n;
}

#define T1(b, a, ...) tensor((b), "F32", 0, 1, (const uint64_t[]){ a }, __VA_ARGS__)
#define T2(b, a, c, ...) tensor((b), "F32", 0, 2, (const uint64_t[]){ a, c }, __VA_ARGS__)

/* The file: u64 LE header length, the header padded with spaces to a multiple of 8, the data. */
static uint8_t *finish(stbuf *b, size_t *len)
{
    hdr_printf(b, "%s", b->hlen ? "}" : "{}");
    while (b->hlen % 8) hdr_printf(b, " ");
    *len = 8 + b->hlen + b->dlen;
    uint8_t *f = malloc(*len);
    if (!f) die("fixture: out of memory", NULL);
    for (int i = 0; i < 8; i++) f[i] = (uint8_t)((uint64_t)b->hlen >> (8 * i));
    memcpy(f + 8, b->hdr, b->hlen);
    if (b->dlen) memcpy(f + 8 + b->hlen, b->data, b->dlen);
    free(b->hdr);
    free(b->data);
    memset(b, 0, sizeof *b);
    return f;
}

/* Sizes of the default configs in tests/models. */
enum { V = 97, CTX = 32, D = 64, L = 2, GFF = 256, LFF = 128, HD = 16, TV = 89 };

static void build_gpt2(stbuf *b)
{
    T2(b, V, D, "transformer.wte.weight");
    T2(b, CTX, D, "transformer.wpe.weight");
    for (int i = 0; i < L; i++) {
        const char *p = "transformer.h.";
        T1(b, D, "%s%d.ln_1.weight", p, i);
        T1(b, D, "%s%d.ln_1.bias", p, i);
        tensor(b, "BOOL", 1, 4, (const uint64_t[]){ 1, 1, CTX, CTX }, "%s%d.attn.bias", p, i);
        tensor(b, "F32", 0, 0, NULL, "%s%d.attn.masked_bias", p, i);
        T2(b, D, 3 * D, "%s%d.attn.c_attn.weight", p, i);          /* Conv1D: [in, out] */
        T1(b, 3 * D, "%s%d.attn.c_attn.bias", p, i);
        T2(b, D, D, "%s%d.attn.c_proj.weight", p, i);
        T1(b, D, "%s%d.attn.c_proj.bias", p, i);
        T1(b, D, "%s%d.ln_2.weight", p, i);
        T1(b, D, "%s%d.ln_2.bias", p, i);
        T2(b, D, GFF, "%s%d.mlp.c_fc.weight", p, i);
        T1(b, GFF, "%s%d.mlp.c_fc.bias", p, i);
        T2(b, GFF, D, "%s%d.mlp.c_proj.weight", p, i);
        T1(b, D, "%s%d.mlp.c_proj.bias", p, i);
    }
    T1(b, D, "transformer.ln_f.weight");
    T1(b, D, "transformer.ln_f.bias");
}

static void build_gpt_neo(stbuf *b)
{
    T2(b, V, D, "transformer.wte.weight");
    T2(b, CTX, D, "transformer.wpe.weight");
    for (int i = 0; i < L; i++) {
        const char *p = "transformer.h.";
        T1(b, D, "%s%d.ln_1.weight", p, i);
        T1(b, D, "%s%d.ln_1.bias", p, i);
        tensor(b, "BOOL", 1, 4, (const uint64_t[]){ 1, 1, CTX, CTX }, "%s%d.attn.attention.bias", p, i);
        tensor(b, "F32", 0, 0, NULL, "%s%d.attn.attention.masked_bias", p, i);
        T2(b, D, D, "%s%d.attn.attention.q_proj.weight", p, i);
        T2(b, D, D, "%s%d.attn.attention.k_proj.weight", p, i);
        T2(b, D, D, "%s%d.attn.attention.v_proj.weight", p, i);
        T2(b, D, D, "%s%d.attn.attention.out_proj.weight", p, i);
        T1(b, D, "%s%d.attn.attention.out_proj.bias", p, i);
        T1(b, D, "%s%d.ln_2.weight", p, i);
        T1(b, D, "%s%d.ln_2.bias", p, i);
        T2(b, GFF, D, "%s%d.mlp.c_fc.weight", p, i);
        T1(b, GFF, "%s%d.mlp.c_fc.bias", p, i);
        T2(b, D, GFF, "%s%d.mlp.c_proj.weight", p, i);
        T1(b, D, "%s%d.mlp.c_proj.bias", p, i);
    }
    T1(b, D, "transformer.ln_f.weight");
    T1(b, D, "transformer.ln_f.bias");
    T2(b, V, D, "lm_head.weight");   /* the same (zero) values as wte: found tied by comparing them */
}

/* kv: key/value heads of HD each (4 query heads); bias: Qwen2's q/k/v biases; untied: an lm_head that
 * differs from the embedding; inv_freq: the rotary buffer older checkpoints keep. */
static void build_llama(stbuf *b, int kv, bool bias, bool untied, bool inv_freq)
{
    T2(b, V, D, "model.embed_tokens.weight");
    for (int i = 0; i < L; i++) {
        const char *p = "model.layers.";
        T1(b, D, "%s%d.input_layernorm.weight", p, i);
        T2(b, D, D, "%s%d.self_attn.q_proj.weight", p, i);
        T2(b, kv * HD, D, "%s%d.self_attn.k_proj.weight", p, i);
        T2(b, kv * HD, D, "%s%d.self_attn.v_proj.weight", p, i);
        if (bias) {
            T1(b, D, "%s%d.self_attn.q_proj.bias", p, i);
            T1(b, kv * HD, "%s%d.self_attn.k_proj.bias", p, i);
            T1(b, kv * HD, "%s%d.self_attn.v_proj.bias", p, i);
        }
        T2(b, D, D, "%s%d.self_attn.o_proj.weight", p, i);
        if (inv_freq) T1(b, HD / 2, "%s%d.self_attn.rotary_emb.inv_freq", p, i);
        T1(b, D, "%s%d.post_attention_layernorm.weight", p, i);
        T2(b, LFF, D, "%s%d.mlp.gate_proj.weight", p, i);
        T2(b, LFF, D, "%s%d.mlp.up_proj.weight", p, i);
        T2(b, D, LFF, "%s%d.mlp.down_proj.weight", p, i);
    }
    T1(b, D, "model.norm.weight");
    if (untied) tensor(b, "F32", 0x3c, 2, (const uint64_t[]){ V, D }, "lm_head.weight");
}

static void build_mlp(stbuf *b)
{
    T2(b, 128, 784, "1.weight");
    T1(b, 128, "1.bias");
    T2(b, 64, 128, "4.weight");
    T1(b, 64, "4.bias");
    T2(b, 10, 64, "6.weight");
    T1(b, 10, "6.bias");
}

static void build_seq2seq(stbuf *b)
{
    static const char *const sides[] = { "encoder", "decoder" };
    T2(b, V, D, "src_tok_emb.embedding.weight");
    T2(b, TV, D, "tgt_tok_emb.embedding.weight");
    tensor(b, "F32", 0, 3, (const uint64_t[]){ CTX, 1, D }, "positional_encoding.pos_embedding");
    for (int s = 0; s < 2; s++) {
        for (int i = 0; i < L; i++) {
            char p[64];
            snprintf(p, sizeof p, "transformer.%s.layers.%d.", sides[s], i);
            T2(b, 3 * D, D, "%sself_attn.in_proj_weight", p);
            T1(b, 3 * D, "%sself_attn.in_proj_bias", p);
            T2(b, D, D, "%sself_attn.out_proj.weight", p);
            T1(b, D, "%sself_attn.out_proj.bias", p);
            if (s == 1) {
                T2(b, 3 * D, D, "%smultihead_attn.in_proj_weight", p);
                T1(b, 3 * D, "%smultihead_attn.in_proj_bias", p);
                T2(b, D, D, "%smultihead_attn.out_proj.weight", p);
                T1(b, D, "%smultihead_attn.out_proj.bias", p);
            }
            T2(b, LFF, D, "%slinear1.weight", p);
            T1(b, LFF, "%slinear1.bias", p);
            T2(b, D, LFF, "%slinear2.weight", p);
            T1(b, D, "%slinear2.bias", p);
            for (int k = 1; k <= (s ? 3 : 2); k++) {
                T1(b, D, "%snorm%d.weight", p, k);
                T1(b, D, "%snorm%d.bias", p, k);
            }
        }
        T1(b, D, "transformer.%s.norm.weight", sides[s]);
        T1(b, D, "transformer.%s.norm.bias", sides[s]);
    }
    T2(b, TV, D, "generator.weight");
    T1(b, TV, "generator.bias");
}

enum { N_MODELS = 6 };
static const char *const g_model_names[N_MODELS] = { "gpt2", "gpt_neo", "llama", "qwen2", "mlp", "seq2seq" };
static qc_source *g_src[N_MODELS];
static uint8_t *g_bytes[N_MODELS];
static char g_dir[512], g_plan_path[600];   /* the scratch directory; plan.qmap in it */

static void cleanup(void)
{
    unlink(g_plan_path);
    rmdir(g_dir);
    for (int i = 0; i < N_MODELS; i++) {
        qc_source_free(g_src[i]);
        free(g_bytes[i]);
    }
}

static void make_fixture(void)
{
    if (!fuzz_scratch_dir(g_dir, sizeof g_dir, "config", cleanup))
        die("cannot make a scratch directory under", "TMPDIR");
    snprintf(g_plan_path, sizeof g_plan_path, "%s/plan.qmap", g_dir);
    for (int i = 0; i < N_MODELS; i++) {
        stbuf b = { 0 };
        switch (i) {
        case 0: build_gpt2(&b); break;
        case 1: build_gpt_neo(&b); break;
        case 2: build_llama(&b, 2, false, true, true); break;
        case 3: build_llama(&b, 1, true, false, false); break;
        case 4: build_mlp(&b); break;
        default: build_seq2seq(&b); break;
        }
        size_t len;
        g_bytes[i] = finish(&b, &len);
        char name[64];
        snprintf(name, sizeof name, "%s.safetensors", g_model_names[i]);
        qm_error err;
        if (qc_open_buffer(QC_INPUT_SAFETENSORS, g_bytes[i], len, name, &g_src[i], &err) != QM_OK)
            die("fixture checkpoint refused", err.message);
    }
}

/* ---- properties (fuzz_plan.h) ---- */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!g_dir[0]) make_fixture();
    char *cfg = malloc(size + 1);
    if (!cfg) return 0;
    if (size) memcpy(cfg, data, size);
    cfg[size] = 0;
    for (int i = 0; i < N_MODELS; i++) {
        qc_plan plan;
        qm_error err;
        qm_error_clear(&err);
        qm_status st = qc_plan_build(NULL, &g_src[i], 1, cfg, "config.json", NULL, &plan, &err);
        fuzz_plan_check(st, &err, &plan, &g_src[i], 1, UINT64_MAX, g_plan_path, g_model_names[i]);
        qc_plan_free(&plan);
    }
    free(cfg);
    return 0;
}
