/* s2s_logits.c — teacher-forced decoder logits of a seq2seq container through the public API, for
 * tests/run/test_seq2seq.py to hold against torch's nn.Transformer forward.
 *
 *   s2s_logits MODEL.qmap "SRC IDS" "TGT IDS" [f16|f32 [THREADS [auto|int8|f32]]]
 *
 * Writes n_tgt x tgt_vocab float32 (native order) to stdout; errors on stderr, exit 1.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qmap.h"

static size_t parse(const char *s, int32_t *ids, size_t cap)
{
    size_t n = 0;
    char *end;
    while (n < cap) {
        long v = strtol(s, &end, 10);
        if (end == s) break;
        ids[n++] = (int32_t)v;
        s = end;
    }
    return n;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: s2s_logits MODEL \"SRC IDS\" \"TGT IDS\" [f16|f32 [THREADS [auto|int8|f32]]]\n");
        return 2;
    }
    static int32_t src[1 << 16], tgt[1 << 16];
    size_t n_src = parse(argv[2], src, 1 << 16), n_tgt = parse(argv[3], tgt, 1 << 16);
    qmap_error err;
    qmap_model *m = NULL;
    qmap_translator *t = NULL;
    float *logits = NULL;
    int rc = 1;
    if (qmap_model_open(argv[1], NULL, &m, &err) != QMAP_OK) goto fail;
    qmap_model_info in;
    qmap_model_get_info(m, &in);
    qmap_translate_params p;
    qmap_translate_params_default(&p);
    p.kv_type = argc > 4 && !strcmp(argv[4], "f32") ? QMAP_KV_F32 : QMAP_KV_F16;
    p.threads = argc > 5 ? atoi(argv[5]) : 0;
    p.act = argc > 6 ? (!strcmp(argv[6], "int8") ? QMAP_ACT_INT8 : !strcmp(argv[6], "f32") ? QMAP_ACT_F32 : QMAP_ACT_AUTO)
                     : QMAP_ACT_AUTO;
    if (qmap_translator_new(m, &p, &t, &err) != QMAP_OK) goto fail;
    if (!(logits = malloc(n_tgt * in.vocab_size * sizeof *logits))) {
        fprintf(stderr, "s2s_logits: out of memory\n");
        goto done;
    }
    if (qmap_translator_logits(t, src, n_src, tgt, n_tgt, logits, &err) != QMAP_OK) goto fail;
    fwrite(logits, sizeof *logits, n_tgt * in.vocab_size, stdout);
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "s2s_logits: %s\n", err.message);
done:
    free(logits);
    qmap_translator_free(t);
    qmap_model_close(m);
    return rc;
}
