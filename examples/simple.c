/* simple.c — the smallest complete user of libqmap: open a model, encode a prompt, generate greedily.
 *
 *   cc simple.c $(pkg-config --cflags --libs qmap) -o simple
 *   ./simple MODEL.qmap "Once upon a time" [N]     text in, text out (the container's tokenizer)
 *   ./simple MODEL.qmap --ids "1 2 3" [N]           token ids in, ids out (containers without one)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <qmap.h>

static int die(const char *what, const qmap_error *e)
{
    fprintf(stderr, "simple: %s: %s\n", what, e->message);
    return 1;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: simple MODEL.qmap PROMPT [N] | simple MODEL.qmap --ids \"1 2 3\" [N]\n");
        return 2;
    }
    int use_ids = !strcmp(argv[2], "--ids");
    const char *prompt = argv[use_ids ? 3 : 2];
    int n_gen = argc > 3 + use_ids ? atoi(argv[3 + use_ids]) : 32;
    qmap_error err;
    qmap_model *model;
    if (qmap_model_open(argv[1], NULL, &model, &err) != QMAP_OK) return die("open", &err);
    qmap_model_info info;
    qmap_model_get_info(model, &info);

    /* the prompt as ids: encoded by the model's own tokenizer, or given as numbers */
    int32_t ids[512];
    size_t n = 0;
    if (use_ids) {
        for (char *s = (char *)prompt, *end; n < 512; s = end) {
            long v = strtol(s, &end, 10);
            if (end == s) break;
            ids[n++] = (int32_t)v;
        }
    } else if (qmap_tokenize(model, prompt, strlen(prompt), true, ids, 512, &n, &err) != QMAP_OK) {
        return die("tokenize", &err);
    }

    /* one session: its KV cache and buffers are allocated here, never while generating */
    qmap_session_params sp;
    qmap_session_params_default(&sp);
    sp.n_ctx = (uint32_t)n + (uint32_t)n_gen;
    qmap_session *session;
    if (qmap_session_new(model, &sp, &session, &err) != QMAP_OK) return die("session", &err);
    qmap_sampler_params pp;
    qmap_sampler_params_default(&pp);
    pp.temp = 0;   /* greedy */
    qmap_sampler *sampler;
    if (qmap_sampler_new(&pp, info.vocab_size, &sampler, &err) != QMAP_OK) return die("sampler", &err);

    if (qmap_eval(session, ids, n, &err) != QMAP_OK) return die("eval", &err);
    const float *logits = qmap_logits(session, n - 1);
    qmap_detok detok;
    qmap_detok_init(&detok);
    char text[4096];
    size_t len = 0;
    for (size_t i = 0; i < n && !use_ids; i++)   /* the prompt's text, then its continuation, one stream */
        if (ids[i] != qmap_token_bos(model) && qmap_detokenize(model, &detok, ids[i], text, sizeof text, &len, &err) == QMAP_OK)
            fwrite(text, 1, len, stdout);
    for (int i = 0; i < n_gen; i++) {
        int32_t id = qmap_sample(sampler, logits);
        if (id == qmap_token_eos(model)) break;
        len = 0;
        if (use_ids) printf("%s%d", i ? " " : "", id);
        else if (qmap_detokenize(model, &detok, id, text, sizeof text, &len, &err) == QMAP_OK) fwrite(text, 1, len, stdout);
        if (qmap_eval(session, &id, 1, &err) != QMAP_OK) return die("eval", &err);
        logits = qmap_logits(session, 0);
    }
    if (!use_ids) fwrite(text, 1, qmap_detok_flush(&detok, text, sizeof text), stdout);
    printf("\n");

    qmap_sampler_free(sampler);
    qmap_session_free(session);
    qmap_model_close(model);
    return 0;
}
