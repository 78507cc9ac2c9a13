/* batch_logits — the test suite's window into qmap_batch (include/qmap.h, batches), through the public API.
 *
 *   batch_logits MODEL OUT.f32 [-t THREADS] [--kv f16|f32] [--act auto|int8|f32|int8x2|precise]
 *                [--max-others K] [--alloc-check] [--session-default] ID...
 *
 * 1. Alone: a batch of one sequence evaluates the IDs one token per call; the logits of every position
 *    go to OUT as float32 [n_ids][vocab] (the suite holds them to torch).
 * 2. Batch invariance: the same sequence alone with its prompt in chunks (the whole prompt in one call,
 *    then in chunks of 5), then in batches with k = 1 .. K (default 7) other sequences: its chunks cut
 *    another way for every k, in another slot, beside others at other positions that start late, take
 *    prompt chunks, decode one token a step, finish and are reset (their slot reused); some steps leave
 *    it out. After every call its logits (qmap_batch_logits, also when left out) must equal the alone
 *    run's at its position, byte for byte (memcmp). Exit 1 on the first difference, naming it.
 * 2b. Session: a qmap_session with batch_invariant over the IDs in chunks of 1 .. 7 gives the alone run's
 *    logits after every call (memcmp): `qmap run` (a session) and `qmap serve` (a batch) compute the same
 *    bits. --session-default: a session without batch_invariant too (what a Q8_ROW model promises).
 * 3. Errors: each malformed call (duplicate seq, seq out of range, n = 0, an id outside the vocabulary,
 *    too many tokens for n_batch, past n_ctx) is QMAP_ERR_INVALID_ARGUMENT and changes no position.
 * --alloc-check: counts malloc-family calls during the batched steps of k = 7 (exit 1 if any).
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "logits_tool.h"
#include "qmap.h"

#define MAX_OTHERS 7
#define N_BATCH 96

typedef struct run_ctx {
    qmap_model *m;
    qmap_batch_params bp;
    const int32_t *ids;
    size_t n;
    uint32_t vocab;
    const float *ref;        /* [n][vocab] the alone run's logits */
    long compared;
} run_ctx;

static int fail(const char *what, const qmap_error *e)
{
    fprintf(stderr, "batch_logits: %s: %s\n", what, e->message);
    return 1;
}

/* The target's logits after a call equal the alone run's at its last position? */
static bool same_as_alone(run_ctx *c, const qmap_batch *b, uint32_t slot, const char *when)
{
    const uint32_t pos = qmap_batch_pos(b, slot);
    const float *got = qmap_batch_logits(b, slot);
    c->compared++;
    if (!got || pos == 0 || memcmp(got, c->ref + (size_t)(pos - 1) * c->vocab, c->vocab * sizeof(float)) != 0) {
        float d = 0;
        for (uint32_t v = 0; got && v < c->vocab; v++) {
            float x = got[v] - c->ref[(size_t)(pos - 1) * c->vocab + v];
            if (x < 0) x = -x;
            if (x > d) d = x;
        }
        fprintf(stderr, "batch_logits: %s: logits at position %u differ from the sequence alone (max |diff| %g)\n",
                when, pos - 1, (double)d);
        return false;
    }
    return true;
}

/* A deterministic id for other sequence j's token t (its own text, unrelated to the target's). */
static int32_t other_id(uint32_t vocab, size_t j, uint32_t t)
{
    uint64_t x = (uint64_t)(j + 1) * 0x9E3779B97F4A7C15ull + (uint64_t)t * 0xBF58476D1CE4E5B9ull;
    x ^= x >> 31;
    return (int32_t)(x % vocab);
}

/* The alone run: one token per call, logits of every position into ref. */
static int run_alone(run_ctx *c, float *ref)
{
    qmap_error e;
    qmap_batch *b;
    qmap_batch_params p = c->bp;
    p.n_seq = 1;
    if (qmap_batch_new(c->m, &p, &b, &e) != QMAP_OK) return fail("batch_new (alone)", &e);
    for (size_t t = 0; t < c->n; t++) {
        qmap_batch_item it = { 0, c->ids + t, 1 };
        if (qmap_batch_eval(b, &it, 1, &e) != QMAP_OK) return fail("eval (alone)", &e);
        memcpy(ref + t * c->vocab, qmap_batch_logits(b, 0), c->vocab * sizeof(float));
    }
    /* the prompt in one call, then in chunks of 5: the same logits at each call's last position */
    qmap_batch_reset(b, 0);
    qmap_batch_item all = { 0, c->ids, (uint32_t)c->n };
    if (qmap_batch_eval(b, &all, 1, &e) != QMAP_OK) return fail("eval (alone, one call)", &e);
    if (!same_as_alone(c, b, 0, "alone, the prompt in one call")) return 1;
    qmap_batch_reset(b, 0);
    if (qmap_batch_logits(b, 0) != NULL) { fprintf(stderr, "batch_logits: logits after a reset\n"); return 1; }
    for (size_t t = 0; t < c->n; t += 5) {
        qmap_batch_item it = { 0, c->ids + t, (uint32_t)(c->n - t < 5 ? c->n - t : 5) };
        if (qmap_batch_eval(b, &it, 1, &e) != QMAP_OK) return fail("eval (alone, chunks of 5)", &e);
        if (!same_as_alone(c, b, 0, "alone, chunks of 5")) return 1;
    }
    qmap_batch_free(b);
    return 0;
}

/* A qmap_session (what `qmap run` decodes with) over the same tokens, in chunks of 1 .. 7 and one token
 * per call: after every call its last logits must be the alone batch's at that position, byte for byte,
 * so that `qmap run` and `qmap serve` (a batch) give the same tokens. */
static int run_session(run_ctx *c, bool batch_invariant)
{
    static const uint32_t chunks[] = { 1, 4, 1, 1, 7, 2, 1 };
    qmap_error e;
    qmap_session *s;
    qmap_session_params p;
    qmap_session_params_default(&p);
    p.threads = c->bp.threads;
    p.kv_type = c->bp.kv_type;
    p.act = c->bp.act;
    p.n_batch = N_BATCH;
    p.batch_invariant = batch_invariant;
    if (qmap_session_new(c->m, &p, &s, &e) != QMAP_OK) return fail("session_new", &e);
    size_t ci = 0;
    for (size_t t = 0; t < c->n;) {
        size_t len = chunks[ci++ % (sizeof chunks / sizeof chunks[0])];
        if (len > c->n - t) len = c->n - t;
        if (qmap_eval(s, c->ids + t, len, &e) != QMAP_OK) return fail("eval (session)", &e);
        t += len;
        c->compared++;
        if (memcmp(qmap_logits(s, len - 1), c->ref + (t - 1) * c->vocab, c->vocab * sizeof(float)) != 0) {
            fprintf(stderr, "batch_logits: a session's logits (batch_invariant %d) at position %zu (a call of %zu "
                            "tokens) differ from the batch's\n", (int)batch_invariant, t - 1, len);
            return 1;
        }
    }
    qmap_session_free(s);
    return 0;
}

/* The others' items of step `step` (j = 0 .. k-1 in the slots other than target's): other j starts at
 * step j, takes a prompt chunk of j + 2 tokens, then one token a step, and is reset when it reaches
 * 12 + 5j positions (its slot then starts again). */
static size_t others_items(qmap_batch *b, uint32_t k, uint32_t target, size_t step, qmap_batch_item *items,
                           int32_t (*buf)[16], uint32_t vocab)
{
    size_t n = 0;
    for (uint32_t j = 0; j < k; j++) {
        if (step < j) continue;
        const uint32_t slot = j < target ? j : j + 1;
        if (qmap_batch_pos(b, slot) >= 12 + 5 * j) qmap_batch_reset(b, slot);
        const uint32_t pos = qmap_batch_pos(b, slot), len = pos == 0 ? j + 2 : 1;
        for (uint32_t t = 0; t < len; t++) buf[j][t] = other_id(vocab, j, pos + t);
        items[n++] = (qmap_batch_item){ slot, buf[j], len };
    }
    return n;
}

/* The target in a batch of k others: its chunk sizes cycle through a list that starts at k, and every
 * fourth step (from step k) leaves it out. */
static int run_with_others(run_ctx *c, uint32_t k, bool alloc_check)
{
    static const uint32_t chunks[] = { 1, 3, 1, 2, 7, 1, 4, 1, 1, 5 };
    qmap_error e;
    qmap_batch *b;
    qmap_batch_params p = c->bp;
    p.n_seq = k + 1;
    p.n_batch = N_BATCH;
    if (qmap_batch_new(c->m, &p, &b, &e) != QMAP_OK) return fail("batch_new", &e);
    const uint32_t target = k / 2;
    qmap_batch_item items[MAX_OTHERS + 1];
    int32_t buf[MAX_OTHERS][16];
    char when[96];
    size_t done = 0, ci = k;
    g_armed = alloc_check;
    for (size_t step = 0; done < c->n; step++) {
        size_t n = others_items(b, k, target, step, items, buf, c->vocab);
        const bool left_out = step >= k && step % 4 == 0 && done > 0;
        if (!left_out) {
            uint32_t len = chunks[ci++ % (sizeof chunks / sizeof chunks[0])];
            if (len > c->n - done) len = (uint32_t)(c->n - done);
            /* the target's item among the others', not always first */
            items[n] = items[step % (n + 1)];
            items[step % (n + 1)] = (qmap_batch_item){ target, c->ids + done, len };
            n++;
            done += len;
        }
        if (qmap_batch_eval(b, items, n, &e) != QMAP_OK) { g_armed = 0; return fail("eval (batch)", &e); }
        snprintf(when, sizeof when, "%u others, step %zu%s", k, step, left_out ? " (left out)" : "");
        if (!same_as_alone(c, b, target, when)) { g_armed = 0; return 1; }
    }
    g_armed = 0;
    qmap_batch_free(b);
    return 0;
}

/* One malformed call: QMAP_ERR_INVALID_ARGUMENT and no position moved. */
static bool refused(qmap_batch *b, const qmap_batch_item *items, size_t n, const char *what)
{
    qmap_error e;
    uint32_t before[2] = { qmap_batch_pos(b, 0), qmap_batch_pos(b, 1) };
    qmap_status st = qmap_batch_eval(b, items, n, &e);
    if (st != QMAP_ERR_INVALID_ARGUMENT || qmap_batch_pos(b, 0) != before[0] || qmap_batch_pos(b, 1) != before[1]) {
        fprintf(stderr, "batch_logits: %s: status %s, positions %u %u -> %u %u\n", what, qmap_status_name(st),
                before[0], before[1], qmap_batch_pos(b, 0), qmap_batch_pos(b, 1));
        return false;
    }
    printf("refused as it should be: %s: %s\n", what, e.message);
    return true;
}

static int error_cases(run_ctx *c)
{
    qmap_error e;
    qmap_batch *b;
    qmap_batch_params p = c->bp;
    p.n_seq = 2;
    p.n_batch = 8;
    p.n_ctx = 16;
    if (qmap_batch_new(c->m, &p, &b, &e) != QMAP_OK) return fail("batch_new (errors)", &e);
    const int32_t ok[8] = { 1, 2, 3, 4, 5, 6, 7, 8 }, bad[1] = { (int32_t)c->vocab };
    qmap_batch_item first[2] = { { 0, ok, 3 }, { 1, ok, 2 } };
    if (qmap_batch_eval(b, first, 2, &e) != QMAP_OK) return fail("eval (errors)", &e);
    const qmap_batch_item dup[2] = { { 0, ok, 1 }, { 0, ok, 1 } }, range[1] = { { 2, ok, 1 } },
                          empty[2] = { { 0, ok, 1 }, { 1, ok, 0 } }, vocab[2] = { { 0, ok, 1 }, { 1, bad, 1 } },
                          over[2] = { { 0, ok, 8 }, { 1, ok, 1 } };
    bool all = refused(b, dup, 2, "the same seq twice") && refused(b, range, 1, "seq >= n_seq") &&
               refused(b, empty, 2, "an item of 0 tokens") && refused(b, vocab, 2, "an id outside the vocabulary") &&
               refused(b, over, 2, "9 tokens with n_batch 8") && refused(b, NULL, 0, "no items");
    qmap_batch_item fill = { 0, ok, 8 };
    if (qmap_batch_eval(b, &fill, 1, &e) != QMAP_OK) return fail("eval (errors)", &e);
    qmap_batch_item past = { 0, ok, 6 };
    all = all && refused(b, &past, 1, "past n_ctx 16");
    qmap_batch_free(b);
    return all ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: batch_logits MODEL OUT [-t N] [--kv f16|f32] [--act MODE] [--max-others K] "
                        "[--alloc-check] [--session-default] ID...\n");
        return 2;
    }
    run_ctx c = { 0 };
    qmap_batch_params_default(&c.bp);
    uint32_t max_others = MAX_OTHERS;
    bool alloc_check = false, session_default = false;
    int i = 3;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (!strcmp(argv[i], "-t") && i + 1 < argc) c.bp.threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--kv") && i + 1 < argc) c.bp.kv_type = parse_kv(argv[++i]);
        else if (!strcmp(argv[i], "--act") && i + 1 < argc) c.bp.act = parse_act(argv[++i]);
        else if (!strcmp(argv[i], "--max-others") && i + 1 < argc) max_others = (uint32_t)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--alloc-check")) alloc_check = true;
        else if (!strcmp(argv[i], "--session-default")) session_default = true;
        else { fprintf(stderr, "batch_logits: unknown option %s\n", argv[i]); return 2; }
    }
    if (max_others > MAX_OTHERS) max_others = MAX_OTHERS;
    c.n = (size_t)(argc - i);
    int32_t *ids = malloc(c.n * sizeof *ids);
    for (size_t k = 0; k < c.n; k++) ids[k] = atoi(argv[i + (int)k]);
    c.ids = ids;

    qmap_error e;
    if (qmap_model_open(argv[1], NULL, &c.m, &e) != QMAP_OK) return fail("open", &e);
    qmap_model_info in;
    qmap_model_get_info(c.m, &in);
    c.vocab = in.vocab_size;
    float *ref = malloc(c.n * c.vocab * sizeof *ref);
    c.ref = ref;
    if (run_alone(&c, ref)) return 1;
    if (run_session(&c, true)) return 1;
    if (session_default && run_session(&c, false)) return 1;
    FILE *out = fopen(argv[2], "wb");
    if (!out || fwrite(ref, sizeof *ref, c.n * c.vocab, out) != c.n * c.vocab || fclose(out)) {
        perror(argv[2]);
        return 1;
    }
    for (uint32_t k = 1; k <= max_others; k++)
        if (run_with_others(&c, k, alloc_check && k == max_others)) return 1;
    if (error_cases(&c)) return 1;
    printf("batch_logits: %ld comparisons with the sequence alone, all the same bytes (1..%u others)\n", c.compared,
           max_others);
    if (alloc_check) {
        printf("allocations in the batched steps with %u others: %ld\n", max_others, g_allocs);
        if (g_allocs) return 1;
    }
    qmap_model_close(c.m);
    free(ref);
    free(ids);
    return 0;
}
