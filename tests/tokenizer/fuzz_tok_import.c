/* fuzz_tok_import.c — libFuzzer target: the tokenizer importer of `qmap convert` (convert/qc_tokenizer.c)
 * on arbitrary files.
 *
 * The input's first byte picks the layout written into a fresh directory, the rest is split at the first
 * "\n@@@\n": 0 → tokenizer.json [+ tokenizer_config.json], 1 → vocab.json + merges.txt, 2 → vocab.txt
 * [+ tokenizer_config.json]. Seeds are trimmed copies of the real GPT-2 and Llama-2 files (made by
 * make tokenizer-test). Properties: loading never crashes, never reads out of bounds, never leaks (ASan);
 * it fails only with QM_ERR_BAD_SOURCE, QM_ERR_UNSUPPORTED or QM_ERR_NOMEM; a tokenizer it accepts has at
 * least one token, a known kind, and its metadata can be written.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "qc_tokenizer.h"
#include "qm_writer.h"
#include "../fuzz/fuzz_scratch.h"

static char g_dir[512];

static void put(const char *name, const uint8_t *d, size_t n)
{
    char path[600];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    FILE *fp = fopen(path, "wb");
    if (!fp) abort();
    if (n) fwrite(d, 1, n, fp);
    fclose(fp);
}

static void clear(void)
{
    static const char *const names[] = { "tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt", "vocab.txt" };
    char path[600];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", g_dir, names[i]);
        unlink(path);
    }
}

/* The directory is made once per process; this removes it (and what the last input left) at exit. */
static void remove_dir(void)
{
    char path[600];
    clear();
    snprintf(path, sizeof path, "%s/out.qmap", g_dir);
    unlink(path);
    rmdir(g_dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!g_dir[0]) {
        if (!fuzz_scratch_dir(g_dir, sizeof g_dir, "tok", remove_dir)) abort();
    }
    if (size < 1) return 0;
    int layout = data[0] % 3;
    const uint8_t *a = data + 1, *b = NULL;
    size_t na = size - 1, nb = 0;
    for (size_t i = 0; i + 5 <= na; i++)
        if (!memcmp(a + i, "\n@@@\n", 5)) { b = a + i + 5; nb = na - i - 5; na = i; break; }
    clear();
    const char *main_name = layout == 0 ? "tokenizer.json" : layout == 1 ? "vocab.json" : "vocab.txt";
    put(main_name, a, na);
    if (layout == 1) put("merges.txt", b ? b : (const uint8_t *)"", nb);
    else if (b) put("tokenizer_config.json", b, nb);
    char path[600];
    snprintf(path, sizeof path, "%s/%s", g_dir, main_name);
    qc_tokenizer *t = NULL;
    qm_error err;
    qm_status st = qc_tokenizer_load(path, 0, &t, &err);
    if (st == QM_OK) {
        if (!t || qc_tokenizer_vocab_size(t) < 1 || !qc_tokenizer_kind(t)) abort();
        char out[600];
        snprintf(out, sizeof out, "%s/out.qmap", g_dir);
        qm_writer *w = NULL;
        if (qm_writer_create(out, NULL, &w, &err) == QM_OK) {
            qm_status ws = qc_tokenizer_write_meta(t, w, "tokenizer.", &err);
            if (ws != QM_OK && ws != QM_ERR_BAD_KEY && ws != QM_ERR_META_TOO_LONG && ws != QM_ERR_NOMEM) {
                fprintf(stderr, "write_meta: %s\n", err.message);
                abort();
            }
            qm_writer_abort(w);
        }
        qc_tokenizer_free(t);
    } else if (st != QM_ERR_BAD_SOURCE && st != QM_ERR_UNSUPPORTED && st != QM_ERR_NOMEM) {
        fprintf(stderr, "load returned %s: %s\n", qm_status_name(st), err.message);
        abort();
    } else if (t) {
        abort();   /* a failed load hands nothing out */
    }
    return 0;
}
