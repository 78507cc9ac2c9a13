/* fuzz_spm.c — libFuzzer target for SentencePiece tokenizer.model files in `qmap convert`: the protobuf
 * reader (convert/qc_spm.c, from memory) and the tokenizer importer on top of it (convert/qc_tokenizer.c,
 * the bytes written as DIR/tokenizer.model).
 *
 * What must hold, for ANY input bytes:
 *   - Neither crashes, reads outside the input or leaks (ASan/UBSan/LSan; the input is copied into a
 *     malloc'd block of exactly `size` bytes).
 *   - qc_spm_parse fails only with QM_ERR_BAD_SOURCE, QM_ERR_UNSUPPORTED or QM_ERR_NOMEM, equal to
 *     err.code, with a non-empty message, and leaves *out zeroed. When it accepts, every piece's string
 *     lies inside the input, every type is 1..6 and model_type 1..4.
 *   - qc_tokenizer_load fails only with those three statuses and hands nothing out; a tokenizer it accepts
 *     is bpe_sentencepiece, has as many tokens as the parser found pieces, and its metadata can be written
 *     (spec/TOKENIZER.md), failing at most for the writer's own caps.
 * A violated property calls abort() after printing why, so libFuzzer records the input as a crash.
 *
 * Seeds: tests/fuzz/seeds/spm/, small real models trained by python3-sentencepiece
 * (tests/fuzz/make_spm_seeds.py); dictionary: tests/fuzz/spm.dict.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "qc_spm.h"
#include "qc_tokenizer.h"
#include "qm_writer.h"
#include "fuzz_scratch.h"

#define FUZZ_TARGET "fuzz_spm"
#include "fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_spm_failure(qm_status st, const qm_error *err)
{
    check_failure(st, err);
    CHECK(st == QM_ERR_BAD_SOURCE || st == QM_ERR_UNSUPPORTED || st == QM_ERR_NOMEM, "documented status");
}

static uint64_t parse_in_memory(const uint8_t *buf, size_t size)
{
    qc_spm m;
    memset(&m, 0xa5, sizeof m);   /* must be overwritten either way */
    qm_error err;
    qm_error_clear(&err);
    qm_status st = qc_spm_parse("fuzz.model", buf, size, &m, &err);
    if (st != QM_OK) {
        check_spm_failure(st, &err);
        CHECK(m.pieces == NULL && m.n_pieces == 0, "*out zeroed on failure");
        return UINT64_MAX;
    }
    CHECK(m.model_type >= 1 && m.model_type <= 4, "model type in range");
    for (uint64_t i = 0; i < m.n_pieces; i++) {
        const qc_spm_piece *p = &m.pieces[i];
        CHECK(p->type >= 1 && p->type <= 6, "piece type in range");
        CHECK(p->len == 0 || ((const uint8_t *)p->str >= buf && (const uint8_t *)p->str + p->len <= buf + size),
              "piece string inside the input");
        CHECK(p->offset < size, "piece offset inside the input");
    }
    if (m.norm_name)
        CHECK((const uint8_t *)m.norm_name >= buf && (const uint8_t *)m.norm_name + m.norm_name_len <= buf + size,
              "normalizer name inside the input");
    uint64_t n = m.n_pieces;
    qc_spm_free(&m);
    return n;
}

static char g_dir[512];

/* The directory is made once per process; this removes it and the two files each input leaves at exit. */
static void remove_dir(void)
{
    char path[600];
    snprintf(path, sizeof path, "%s/tokenizer.model", g_dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/out.qmap", g_dir);
    unlink(path);
    rmdir(g_dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf) return 0;
    if (size) memcpy(buf, data, size);
    uint64_t n_pieces = parse_in_memory(buf, size);
    free(buf);

    if (!g_dir[0]) {
        if (!fuzz_scratch_dir(g_dir, sizeof g_dir, "spm", remove_dir)) abort();
    }
    char path[600], out[600];
    snprintf(path, sizeof path, "%s/tokenizer.model", g_dir);
    snprintf(out, sizeof out, "%s/out.qmap", g_dir);
    FILE *fp = fopen(path, "wb");
    if (!fp) abort();
    if (size && fwrite(data, 1, size, fp) != size) abort();
    if (fclose(fp) != 0) abort();

    qc_tokenizer *t = (qc_tokenizer *)&g_dir;   /* must be overwritten with NULL on failure */
    qm_error err;
    qm_error_clear(&err);
    qm_status st = qc_tokenizer_load(path, 0, &t, &err);
    if (st != QM_OK) {
        check_spm_failure(st, &err);
        CHECK(t == NULL, "a failed load hands nothing out");
        return 0;
    }
    CHECK(t != NULL, "*out set on success");
    CHECK(n_pieces != UINT64_MAX, "the importer accepts only what the parser accepts");
    CHECK(!strcmp(qc_tokenizer_kind(t), "bpe_sentencepiece"), "kind bpe_sentencepiece");
    CHECK(qc_tokenizer_vocab_size(t) == n_pieces && n_pieces >= 1, "one token per piece");
    qm_writer *w = NULL;
    if (qm_writer_create(out, NULL, &w, &err) == QM_OK) {
        qm_status ws = qc_tokenizer_write_meta(t, w, "tokenizer.", &err);
        if (ws != QM_OK && ws != QM_ERR_META_TOO_LONG && ws != QM_ERR_NOMEM) {
            fprintf(stderr, "write_meta: %s\n", err.message);
            die("an accepted model's metadata can be written", NULL);
        }
        qm_writer_abort(w);
    }
    qc_tokenizer_free(t);
    return 0;
}
