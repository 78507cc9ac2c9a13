/* api_null — every exported function of include/qmap.h called with NULL in each pointer argument, once per
 * pointer, through the public API only.
 *
 *   api_null LM.qmap CLASSIFIER.qmap SEQ2SEQ.qmap
 *
 * The rule it checks is the one qmap.h states under "NULL pointers": no call crashes (the test runs under
 * ASan+UBSan, where a NULL dereference aborts), a function returning qmap_status returns
 * QMAP_ERR_INVALID_ARGUMENT unless its comment gives NULL a meaning, and the others return their neutral
 * value (NULL, 0, -1 for an id). Each call that breaks the rule prints a line; the exit status is 1 if any did.
 * The models are real containers (the KJV Llama, the digits classifier, the G2P translator) so that every
 * argument other than the NULL one is valid and the NULL is what the function must notice.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define QMAP_EXPERIMENTAL
#include "qmap.h"

static int g_failed;
static int g_calls;

static void expect(int ok, const char *call)
{
    g_calls++;
    if (!ok) {
        g_failed++;
        printf("FAIL %s\n", call);
    }
}

#define EXPECT_INVALID(call) expect((call) == QMAP_ERR_INVALID_ARGUMENT, #call)
#define EXPECT_TRUE(cond) expect((cond), #cond)

static qmap_model *open_model(const char *path)
{
    qmap_error e;
    qmap_model *m = NULL;
    if (qmap_model_open(path, NULL, &m, &e) != QMAP_OK) {
        fprintf(stderr, "api_null: %s\n", e.message);
        exit(2);
    }
    return m;
}

static void model_calls(const char *path, qmap_model *lm, qmap_model *mlp)
{
    qmap_error e;
    qmap_model *m = NULL;
    qmap_model_params mp;
    qmap_model_params_default(NULL);
    qmap_model_params_default(&mp);
    EXPECT_INVALID(qmap_model_open(NULL, &mp, &m, &e));
    EXPECT_INVALID(qmap_model_open(path, &mp, NULL, &e));
    EXPECT_TRUE(qmap_model_open(path, NULL, &m, NULL) == QMAP_OK && m);   /* NULL params: defaults; err: none */
    qmap_model_close(m);
    qmap_model_close(NULL);
    qmap_model_info info;
    qmap_model_get_info(NULL, &info);
    qmap_model_get_info(lm, NULL);
    size_t len = 0;
    EXPECT_TRUE(qmap_model_class_name(NULL, 0, &len) == NULL && len == 0);
    EXPECT_TRUE(qmap_model_class_name(mlp, 0, NULL) == qmap_model_class_name(mlp, 0, &len));   /* len: not wanted */
    EXPECT_TRUE(qmap_model_resident_bytes(NULL) == 0);
    EXPECT_TRUE(qmap_model_large_page_bytes(NULL) == UINT64_MAX);
    EXPECT_TRUE(qmap_status_name(QMAP_OK) != NULL && qmap_status_string(QMAP_OK) != NULL && qmap_version() != NULL);
}

static void tokenizer_calls(qmap_model *lm)
{
    qmap_error e;
    int32_t ids[64];
    size_t n = 0;
    EXPECT_INVALID(qmap_tokenize(NULL, "in the", 6, true, ids, 64, &n, &e));
    EXPECT_INVALID(qmap_tokenize(lm, NULL, 6, true, ids, 64, &n, &e));
    EXPECT_INVALID(qmap_tokenize(lm, "in the", 6, true, NULL, 64, &n, &e));
    EXPECT_TRUE(qmap_tokenize(lm, "in the", 6, true, ids, 64, NULL, NULL) == QMAP_OK);
    qmap_detok st;
    char out[64];
    qmap_detok_init(NULL);
    qmap_detok_init(&st);
    EXPECT_INVALID(qmap_detokenize(NULL, &st, ids[1], out, sizeof out, &n, &e));
    EXPECT_INVALID(qmap_detokenize(lm, NULL, ids[1], out, sizeof out, &n, &e));
    EXPECT_INVALID(qmap_detokenize(lm, &st, ids[1], NULL, sizeof out, &n, &e));
    EXPECT_TRUE(qmap_detokenize(lm, &st, ids[1], out, sizeof out, NULL, NULL) == QMAP_OK);
    EXPECT_TRUE(qmap_detok_flush(NULL, out, sizeof out) == 0);
    EXPECT_TRUE(qmap_detok_flush(&st, NULL, sizeof out) == 0);
    size_t len = 0;
    EXPECT_TRUE(qmap_token_piece(NULL, 0, &len) == NULL);
    EXPECT_TRUE(qmap_token_piece(lm, 0, NULL) != NULL);
    EXPECT_TRUE(qmap_token_source_piece(NULL, 0, &len) == NULL);
    EXPECT_TRUE(qmap_token_source_piece(lm, 0, NULL) != NULL);
    EXPECT_TRUE(qmap_token_bos(NULL) == -1 && qmap_token_eos(NULL) == -1 && qmap_token_unk(NULL) == -1);
}

static void session_calls(qmap_model *lm)
{
    qmap_error e;
    qmap_session *s = NULL;
    qmap_session_params sp;
    qmap_session_params_default(NULL);
    qmap_session_params_default(&sp);
    sp.n_ctx = 16;
    EXPECT_INVALID(qmap_session_new(NULL, &sp, &s, &e));
    EXPECT_INVALID(qmap_session_new(lm, &sp, NULL, &e));
    if (qmap_session_new(lm, &sp, &s, NULL) != QMAP_OK) {
        EXPECT_TRUE(!"qmap_session_new with valid arguments");
        return;
    }
    const int32_t ids[2] = { 1, 2 };
    EXPECT_INVALID(qmap_eval(NULL, ids, 2, &e));
    EXPECT_INVALID(qmap_eval(s, NULL, 2, &e));
    EXPECT_TRUE(qmap_eval(s, ids, 2, NULL) == QMAP_OK);
    EXPECT_TRUE(qmap_logits(NULL, 0) == NULL);
    EXPECT_TRUE(qmap_session_pos(NULL) == 0);
    qmap_session_reset(NULL);
    qmap_session_counters c;
    qmap_session_get_counters(NULL, &c);
    EXPECT_TRUE(c.int8_madds == 0 && c.float_madds == 0);
    qmap_session_get_counters(s, NULL);
    EXPECT_TRUE(qmap_session_kv_bytes_read(NULL) == 0);
    qmap_session_free(s);
    qmap_session_free(NULL);
}

static void classifier_calls(qmap_model *mlp)
{
    qmap_error e;
    qmap_classifier *c = NULL;
    EXPECT_INVALID(qmap_classifier_new(NULL, 4, 1, QMAP_ACT_AUTO, &c, &e));
    EXPECT_INVALID(qmap_classifier_new(mlp, 4, 1, QMAP_ACT_AUTO, NULL, &e));
    if (qmap_classifier_new(mlp, 4, 1, QMAP_ACT_AUTO, &c, NULL) != QMAP_OK) {
        EXPECT_TRUE(!"qmap_classifier_new with valid arguments");
        return;
    }
    qmap_model_info in;
    qmap_model_get_info(mlp, &in);
    float *x = calloc(in.input_dim, sizeof *x), *out = calloc(in.vocab_size, sizeof *out);
    EXPECT_INVALID(qmap_classify(NULL, x, 1, out, &e));
    EXPECT_INVALID(qmap_classify(c, NULL, 1, out, &e));
    EXPECT_INVALID(qmap_classify(c, x, 1, NULL, &e));
    EXPECT_TRUE(qmap_classify(c, x, 1, out, NULL) == QMAP_OK);
    free(x);
    free(out);
    qmap_classifier_free(c);
    qmap_classifier_free(NULL);
}

static void translator_calls(qmap_model *s2s)
{
    qmap_error e;
    qmap_translator *t = NULL;
    qmap_translate_params tp;
    qmap_translate_params_default(NULL);
    qmap_translate_params_default(&tp);
    EXPECT_INVALID(qmap_translator_new(NULL, &tp, &t, &e));
    EXPECT_INVALID(qmap_translator_new(s2s, &tp, NULL, &e));
    if (qmap_translator_new(s2s, NULL, &t, NULL) != QMAP_OK) {
        EXPECT_TRUE(!"qmap_translator_new with valid arguments");
        return;
    }
    qmap_model_info in;
    qmap_model_get_info(s2s, &in);
    const int32_t src[2] = { 4, 5 }, tgt[1] = { qmap_token_bos(s2s) };
    const uint32_t lens[1] = { 2 };
    qmap_hypothesis hyp[1];
    EXPECT_INVALID(qmap_translate(NULL, src, lens, 1, hyp, &e));
    EXPECT_INVALID(qmap_translate(t, NULL, lens, 1, hyp, &e));
    EXPECT_INVALID(qmap_translate(t, src, NULL, 1, hyp, &e));
    EXPECT_INVALID(qmap_translate(t, src, lens, 1, NULL, &e));
    EXPECT_TRUE(qmap_translate(t, src, lens, 1, hyp, NULL) == QMAP_OK);
    float *logits = calloc(in.vocab_size, sizeof *logits);
    EXPECT_INVALID(qmap_translator_logits(NULL, src, 2, tgt, 1, logits, &e));
    EXPECT_INVALID(qmap_translator_logits(t, NULL, 2, tgt, 1, logits, &e));
    EXPECT_INVALID(qmap_translator_logits(t, src, 2, NULL, 1, logits, &e));
    EXPECT_INVALID(qmap_translator_logits(t, src, 2, tgt, 1, NULL, &e));
    EXPECT_TRUE(qmap_translator_logits(t, src, 2, tgt, 1, logits, NULL) == QMAP_OK);
    free(logits);
    qmap_translator_free(t);
    qmap_translator_free(NULL);
}

static void sampler_calls(void)
{
    qmap_error e;
    qmap_sampler *smp = NULL;
    qmap_sampler_params p;
    qmap_sampler_params_default(NULL);
    qmap_sampler_params_default(&p);
    EXPECT_INVALID(qmap_sampler_new(&p, 8, NULL, &e));
    if (qmap_sampler_new(NULL, 8, &smp, NULL) != QMAP_OK) {
        EXPECT_TRUE(!"qmap_sampler_new with valid arguments");
        return;
    }
    const float logits[8] = { 0, 1, 2, 3, 4, 5, 6, 7 };
    EXPECT_TRUE(qmap_sample(NULL, logits) == -1);
    EXPECT_TRUE(qmap_sample(smp, NULL) == -1);
    qmap_sampler_accept(NULL, 3);
    EXPECT_TRUE(qmap_sample(smp, logits) >= 0);
    qmap_sampler_free(smp);
    qmap_sampler_free(NULL);
}

static void batch_calls(qmap_model *lm, qmap_model *mlp)
{
    qmap_error e;
    qmap_batch *b = NULL;
    qmap_batch_params bp;
    qmap_batch_params_default(NULL);
    qmap_batch_params_default(&bp);
    EXPECT_INVALID(qmap_batch_new(NULL, &bp, &b, &e));
    EXPECT_INVALID(qmap_batch_new(lm, &bp, NULL, &e));
    EXPECT_INVALID(qmap_batch_new(mlp, &bp, &b, &e));               /* not an LM */
    EXPECT_TRUE(qmap_batch_new(lm, NULL, &b, NULL) == QMAP_OK && b);  /* NULL params: defaults */
    int32_t id = 1;
    qmap_batch_item it = { 0, &id, 1 }, no_ids = { 0, NULL, 1 };
    EXPECT_INVALID(qmap_batch_eval(NULL, &it, 1, &e));
    EXPECT_INVALID(qmap_batch_eval(b, NULL, 1, &e));
    EXPECT_INVALID(qmap_batch_eval(b, &no_ids, 1, &e));
    EXPECT_TRUE(qmap_batch_logits(NULL, 0) == NULL);
    EXPECT_TRUE(qmap_batch_logits(b, 0) == NULL);                    /* nothing evaluated yet */
    EXPECT_TRUE(qmap_batch_pos(NULL, 0) == 0);
    EXPECT_TRUE(qmap_batch_n_seq(NULL) == 0);
    qmap_batch_reset(NULL, 0);
    qmap_batch_free(b);
    qmap_batch_free(NULL);
}

static void container_calls(const char *path)
{
    qmap_error e;
    qmap_container *c = NULL;
    EXPECT_INVALID(qmap_container_open(NULL, &c, &e));
    EXPECT_INVALID(qmap_container_open(path, NULL, &e));
    EXPECT_TRUE(qmap_container_open(path, &c, NULL) == QMAP_OK && c);
    qmap_container_info ci;
    qmap_container_get_info(NULL, &ci);
    qmap_container_get_info(c, NULL);
    qmap_meta_entry me;
    qmap_tensor_info ti;
    EXPECT_INVALID(qmap_container_meta(NULL, 0, &me, &e));
    EXPECT_INVALID(qmap_container_meta(c, 0, NULL, &e));
    EXPECT_INVALID(qmap_container_find_meta(NULL, "general.architecture", &me, &e));
    EXPECT_INVALID(qmap_container_find_meta(c, NULL, &me, &e));
    EXPECT_INVALID(qmap_container_find_meta(c, "general.architecture", NULL, &e));
    uint32_t u;
    EXPECT_INVALID(qmap_meta_array_get(NULL, 0, &u, &e));
    const char *str;
    size_t len;
    EXPECT_INVALID(qmap_meta_array_string(NULL, &me, 0, &str, &len, &e));
    EXPECT_INVALID(qmap_meta_array_string(c, NULL, 0, &str, &len, &e));
    EXPECT_INVALID(qmap_container_tensor(NULL, 0, &ti, &e));
    EXPECT_INVALID(qmap_container_tensor(c, 0, NULL, &e));
    EXPECT_INVALID(qmap_container_find_tensor(NULL, "output.weight", &ti, &e));
    EXPECT_INVALID(qmap_container_find_tensor(c, NULL, &ti, &e));
    EXPECT_INVALID(qmap_container_find_tensor(c, "output.weight", NULL, &e));
    EXPECT_INVALID(qmap_container_verify(NULL, 1, false, NULL, &e));
    qmap_container_close(c);
    qmap_container_close(NULL);
}

static void writer_calls(const char *path)
{
    qmap_error e;
    qmap_convert_params_default(NULL);
    qmap_quantize_params_default(NULL);
    EXPECT_TRUE(qmap_convert_arch_list() != NULL);   /* no pointer argument: never NULL */
    const char *src[1] = { path };
    EXPECT_INVALID(qmap_convert(NULL, 1, "/nonexistent/x.qmap", NULL, NULL, NULL, NULL, &e));
    EXPECT_INVALID(qmap_convert(src, 1, NULL, NULL, NULL, NULL, NULL, &e));
    EXPECT_INVALID(qmap_quantize(NULL, "/nonexistent/x.qmap", NULL, NULL, NULL, NULL, &e));
    EXPECT_INVALID(qmap_quantize(path, NULL, NULL, NULL, NULL, NULL, &e));
    size_t len = 1;
    EXPECT_TRUE(qmap_model_chat_template(NULL, &len) == NULL);
    /* NULL message: the default one (its comment); the handler only acts on a SIGBUS */
    EXPECT_TRUE(qmap_exit_on_mapped_file_change(NULL, 1) == QMAP_OK);
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: api_null LM.qmap CLASSIFIER.qmap SEQ2SEQ.qmap\n");
        return 2;
    }
    qmap_model *lm = open_model(argv[1]), *mlp = open_model(argv[2]), *s2s = open_model(argv[3]);
    model_calls(argv[1], lm, mlp);
    tokenizer_calls(lm);
    session_calls(lm);
    classifier_calls(mlp);
    translator_calls(s2s);
    sampler_calls();
    batch_calls(lm, mlp);
    container_calls(argv[1]);
    writer_calls(argv[1]);
    qmap_model_close(lm);
    qmap_model_close(mlp);
    qmap_model_close(s2s);
    printf("api_null: %d calls, %d broke the NULL rule\n", g_calls, g_failed);
    return g_failed ? 1 : 0;
}
