/* lm_logits — the test suite's window into a decoder LM session, through the public API (qmap.h) only.
 *
 *   lm_logits MODEL OUT.f32 [-t THREADS] [-b BATCH] [--kv f16|f32] [--act auto|int8|f32|int8x2|precise] [--step]
 *             [--greedy N] [--alloc-check] ID...
 *
 * Default: the IDs are evaluated with one qmap_eval per batch of -b tokens and the logits of every position
 * are written to OUT as float32 [n_ids][vocab]. --step evaluates them one token per call instead (the
 * decode path). --greedy N then generates N more tokens by argmax and writes them to OUT as text ids
 * instead of logits. --alloc-check counts malloc/calloc/realloc/posix_memalign calls made during 100 decode
 * steps (qmap_eval of one token + qmap_sample) after the prompt and exits 1 if there is any: a session
 * must allocate nothing per token.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "logits_tool.h"
#include "qmap.h"

static int fail(const char *what, const qmap_error *e)
{
    fprintf(stderr, "lm_logits: %s: %s\n", what, e->message);
    return 1;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: lm_logits MODEL OUT [-t N] [-b N] [--kv f16|f32] [--act auto|int8|f32|int8x2|precise] [--step] "
                        "[--greedy N] [--alloc-check] ID...\n");
        return 2;
    }
    qmap_session_params sp;
    qmap_session_params_default(&sp);
    bool step = false, alloc_check = false;
    long greedy = -1;
    int i = 3;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (!strcmp(argv[i], "-t") && i + 1 < argc) sp.threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-b") && i + 1 < argc) sp.n_batch = (uint32_t)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--kv") && i + 1 < argc) sp.kv_type = parse_kv(argv[++i]);
        else if (!strcmp(argv[i], "--act") && i + 1 < argc) sp.act = parse_act(argv[++i]);
        else if (!strcmp(argv[i], "--step")) step = true;
        else if (!strcmp(argv[i], "--greedy") && i + 1 < argc) greedy = atol(argv[++i]);
        else if (!strcmp(argv[i], "--alloc-check")) alloc_check = true;
        else { fprintf(stderr, "lm_logits: unknown option %s\n", argv[i]); return 2; }
    }
    size_t n = (size_t)(argc - i);
    int32_t *ids = malloc((n + 1) * sizeof *ids);
    for (size_t k = 0; k < n; k++) ids[k] = atoi(argv[i + (int)k]);

    qmap_error e;
    qmap_model *m;
    if (qmap_model_open(argv[1], NULL, &m, &e) != QMAP_OK) return fail("open", &e);
    qmap_model_info in;
    qmap_model_get_info(m, &in);
    sp.logits_all = true;
    if (sp.n_ctx == 0 && greedy > 0 && n + (size_t)greedy > in.context_length) sp.n_ctx = (uint32_t)(n + (size_t)greedy);
    if (alloc_check) sp.n_ctx = (uint32_t)(n + 101);
    qmap_session *s;
    if (qmap_session_new(m, &sp, &s, &e) != QMAP_OK) return fail("session", &e);
    FILE *out = fopen(argv[2], "wb");
    if (!out) { perror(argv[2]); return 1; }

    size_t nb = step ? 1 : (sp.n_batch ? sp.n_batch : 512);
    for (size_t off = 0; off < n; off += nb) {
        size_t c = n - off < nb ? n - off : nb;
        if (qmap_eval(s, ids + off, c, &e) != QMAP_OK) return fail("eval", &e);
        if (greedy < 0 && !alloc_check)
            for (size_t k = 0; k < c; k++) fwrite(qmap_logits(s, k), sizeof(float), in.vocab_size, out);
    }
    if (greedy >= 0 || alloc_check) {
        qmap_sampler_params pp;
        qmap_sampler_params_default(&pp);
        pp.temp = 0;   /* argmax */
        qmap_sampler *smp;
        if (qmap_sampler_new(&pp, in.vocab_size, &smp, &e) != QMAP_OK) return fail("sampler", &e);
        long steps = alloc_check ? 100 : greedy;
        const float *logits = qmap_logits(s, (size_t)(n - 1) % nb);
        /* one step outside the count: OpenMP builds its thread team on the first parallel region */
        int32_t id = qmap_sample(smp, logits);
        if (qmap_eval(s, &id, 1, &e) != QMAP_OK) return fail("eval", &e);
        if (greedy >= 0) fprintf(out, "%d\n", id);
        logits = qmap_logits(s, 0);
        g_armed = alloc_check;
        /* LM_LOGITS_SELFTEST=1 allocates once inside the counted loop: the suite checks the counter sees it */
        const bool selftest = getenv("LM_LOGITS_SELFTEST") != NULL;
        for (long k = 1; k < steps; k++) {
            if (selftest && k == 1) free(malloc(16));
            id = qmap_sample(smp, logits);
            if (qmap_eval(s, &id, 1, &e) != QMAP_OK) { g_armed = 0; return fail("eval", &e); }
            logits = qmap_logits(s, 0);
            if (greedy >= 0) fprintf(out, "%d\n", id);
        }
        g_armed = 0;
        qmap_sampler_free(smp);
        if (alloc_check) {
            printf("allocations in %ld decode steps: %ld\n", steps - 1, g_allocs);
            if (g_allocs != 0) return 1;
        }
    }
    fclose(out);
    qmap_session_free(s);
    qmap_model_close(m);
    free(ids);
    return 0;
}
