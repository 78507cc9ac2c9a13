/* fuzz_tok_encode.c — libFuzzer target: arbitrary bytes through the runtime tokenizer of a real container.
 *
 * The tokenizer comes from the container named by QMAP_FUZZ_TOKENIZER (make tokenizer-test points it at the
 * real GPT-2 and Llama-2 conversions). Properties checked on every input:
 *   - encoding never crashes, never reads out of bounds (ASan/UBSan) and returns QM_OK or QM_ERR_BAD_UTF8;
 *   - invalid UTF-8 is refused, valid UTF-8 accepted (the offset named is where the input stops being UTF-8);
 *   - every id is below the vocabulary size;
 *   - decoding the ids, one at a time through the streaming state, gives back the input byte for byte for
 *     a byte-level tokenizer, and for a SentencePiece one when the input holds no U+2581 and no added
 *     token's text (those are the documented lossy cases); with a normalizer (make tokenizer-fuzz also
 *     runs GPT-2's vocabulary with NFKC + lowercase), the normalized input, when it holds no added token's
 *     text (normalization runs between added tokens);
 *   - a text the normalizer lengthens past the caller's buffer reports the count it needs, and encodes in
 *     a buffer of that size;
 *   - decoding never writes past the buffer size it was promised.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qm_format.h"
#include "qm_reader.h"
#include "qr_tok_internal.h"

static qm_file *g_file;
static qr_tokenizer *g_tok;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *path = getenv("QMAP_FUZZ_TOKENIZER");
    qm_error err;
    if (!path || qm_open(path, &g_file, &err) != QM_OK || qr_tok_load(g_file, "tokenizer.", &g_tok, &err) != QM_OK) {
        fprintf(stderr, "fuzz_tok_encode: set QMAP_FUZZ_TOKENIZER to a container with a tokenizer (%s)\n",
                path ? err.message : "unset");
        abort();
    }
    return 0;
}

static int lossy(const uint8_t *d, size_t n)
{
    if (g_tok->kind != QR_TOK_SENTENCEPIECE && !g_tok->n_norm) return 0;
    if (g_tok->kind == QR_TOK_SENTENCEPIECE)
        for (size_t i = 0; i + 3 <= n; i++) if (!memcmp(d + i, "\xe2\x96\x81", 3)) return 1;
    for (uint32_t a = 0; a < g_tok->n_added; a++) {
        uint32_t id = g_tok->added[a];
        size_t l = g_tok->len[id];
        for (size_t i = 0; l && i + l <= n; i++) if (!memcmp(d + i, g_tok->str[id], l)) return 1;
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t cap = size + 8, n = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    qm_error err;
    qm_status st = qr_tok_encode(g_tok, (const char *)data, size, false, ids, cap, &n, &err);
    if (st == QM_ERR_INVALID_ARGUMENT && n > cap) {   /* lengthened by the normalizer: retry at the size given */
        if (!g_tok->n_norm) abort();
        cap = n;
        free(ids);
        ids = malloc(cap * sizeof *ids);
        st = qr_tok_encode(g_tok, (const char *)data, size, false, ids, cap, &n, &err);
    }
    int valid = qm_utf8_valid(data, size, true);
    if (st != (valid ? QM_OK : QM_ERR_BAD_UTF8)) {
        fprintf(stderr, "encode returned %s for %s input: %s\n", qm_status_name(st), valid ? "valid" : "invalid", err.message);
        abort();
    }
    if (st == QM_OK) {
        /* what decoding must give back: the input, or the input through the normalizer */
        const uint8_t *want = data;
        size_t want_len = size;
        uint8_t *normalized = NULL;
        if (g_tok->n_norm) {
            normalized = qr_norm_apply(g_tok->norm, g_tok->n_norm, data, size, &want_len);
            if (!normalized) abort();
            want = normalized;
        }
        uint8_t *back = malloc(3 * want_len + 64), buf[3 * 70000];
        size_t m = 0;
        qr_detok ds = { 0 };
        for (size_t i = 0; i < n; i++) {
            if (ids[i] < 0 || (uint32_t)ids[i] >= g_tok->n) abort();
            size_t k = 0;
            if (qr_tok_decode(g_tok, &ds, ids[i], (char *)buf, sizeof buf, &k, &err) != QM_OK) abort();
            if (k > sizeof buf || m + k > 3 * want_len + 64) abort();
            memcpy(back + m, buf, k);
            m += k;
        }
        m += qr_tok_decode_flush(&ds, (char *)back + m, 32);
        if (!lossy(data, size) && (m != want_len || memcmp(back, want, want_len) != 0)) {
            fprintf(stderr, "round trip differs: %zu bytes expected, %zu out\n", want_len, m);
            abort();
        }
        free(back);
        free(normalized);
    }
    free(ids);
    return 0;
}
