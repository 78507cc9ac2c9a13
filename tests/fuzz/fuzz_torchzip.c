/* fuzz_torchzip.c — libFuzzer target for the torch.save zip importer (qc_open_buffer, QC_INPUT_TORCH_ZIP).
 *
 * What must hold, for ANY input bytes (taken as a .pt file):
 *   - It never crashes, never reads outside the input and never leaks (ASan/UBSan/LSan; the input is
 *     copied into a heap block of exactly `size` bytes), whatever libzip makes of the archive.
 *   - A failure is a known, non-OK status; err.code equals it; the message is non-empty and
 *     NUL-terminated; *out is NULL.
 *   - A success is a source of kind "torch.save zip" whose every tensor passes qc_tensor_check, refers
 *     to an existing storage and has a known dtype; every storage then loads (qc_source_load) or fails
 *     cleanly (a corrupt deflate stream or CRC is only found when the entry is read), and qc_source_free
 *     releases it all.
 * A violated property calls abort() after printing why, so libFuzzer records the input as a crash.
 * Besides the input itself, the same checks run on the input with the CRC-32 of its stored entries
 * repaired: otherwise almost every mutation of data.pkl or of a storage stops at libzip's CRC check, and
 * the pickle-to-archive checks (storage entries, sizes, views) would hardly be fuzzed.
 *
 * Build: make BUILD=build build/fuzz/fuzz_torchzip (libFuzzer), build/fuzz/replay_torchzip (replay).
 * Seeds: tests/fuzz/seeds/torchzip (make_torch_seeds.py: torch.save files, stored and deflated).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "qc_source.h"
#include "qm_error.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void die(const char *what)
{
    fprintf(stderr, "fuzz_torchzip: property violated: %s\n", what);
    abort();
}

#define CHECK(cond) do { if (!(cond)) die(#cond); } while (0)

static void check_failure(qm_status st, const qm_error *err)
{
    CHECK(st != QM_OK);
    CHECK(strcmp(qm_status_name(st), "QM_ERR_UNKNOWN") != 0);
    CHECK(err->code == st);
    CHECK(memchr(err->message, 0, sizeof err->message) != NULL);
    CHECK(err->message[0] != 0);
    CHECK(memchr(err->field, 0, sizeof err->field) != NULL);
}

static volatile uint8_t g_sink;

static uint32_t rd16(const uint8_t *p) { return (uint32_t)p[0] | ((uint32_t)p[1] << 8); }
static uint32_t rd32(const uint8_t *p) { return rd16(p) | (rd16(p + 2) << 16); }
static void wr32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* Rewrite the CRC-32 of every stored (method 0, non-ZIP64) entry in both its central directory record
 * and its local header (APPNOTE 4.3.7, 4.3.12, 4.3.16). Returns true if some CRC changed. */
static bool fix_crcs(uint8_t *b, size_t size)
{
    if (size < 22) return false;
    size_t eocd = size - 22, stop = size > 22 + 65535 ? size - 22 - 65535 : 0;
    while (rd32(b + eocd) != 0x06054b50u) {
        if (eocd == stop) return false;
        eocd--;
    }
    uint64_t n = rd16(b + eocd + 10), pos = rd32(b + eocd + 16);
    bool changed = false;
    for (uint64_t i = 0; i < n; i++) {
        if (pos + 46 > size || rd32(b + pos) != 0x02014b50u) break;
        uint8_t *c = b + pos;
        uint64_t method = rd16(c + 10), csize = rd32(c + 20), usize = rd32(c + 24), local = rd32(c + 42);
        pos += 46 + (uint64_t)rd16(c + 28) + rd16(c + 30) + rd16(c + 32);
        if (method != 0 || csize != usize || local + 30 > size || rd32(b + local) != 0x04034b50u) continue;
        uint8_t *l = b + local;
        uint64_t start = local + 30 + rd16(l + 26) + rd16(l + 28);
        if (start > size || csize > size - start) continue;
        uint32_t crc = (uint32_t)crc32(0L, b + start, (uInt)csize);
        if (rd32(c + 16) != crc || rd32(l + 14) != crc) changed = true;
        wr32(c + 16, crc);
        wr32(l + 14, crc);
    }
    return changed;
}

static void run_image(const uint8_t *data, size_t size)
{
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf) return;
    if (size) memcpy(buf, data, size);
    qc_source *s = (qc_source *)(uintptr_t)1;
    qm_error err;
    memset(&err, 0x5A, sizeof err);
    qm_status st = qc_open_buffer(QC_INPUT_TORCH_ZIP, buf, size, "fuzz.pt", &s, &err);
    if (st != QM_OK) {
        check_failure(st, &err);
        CHECK(s == NULL);
        free(buf);
        return;
    }
    CHECK(s != NULL);
    CHECK(strcmp(s->kind, "torch.save zip") == 0);
    for (uint64_t i = 0; i < s->n_tensors; i++) {
        const qc_tensor *t = &s->tensors[i];
        CHECK(t->storage < s->n_storages);
        CHECK(qc_dtype_size(t->dtype) != 0);
        CHECK(qc_tensor_check(s, t, NULL) == QM_OK);
    }
    for (uint32_t i = 0; i < s->n_storages; i++) {
        CHECK(s->storages[i].kind == QC_STORAGE_ZIP || (s->storages[i].kind == QC_STORAGE_MAPPED && s->storages[i].check_crc));
        const uint8_t *b = NULL;
        memset(&err, 0x5A, sizeof err);
        qm_status ls = qc_source_load(s, i, &b, &err);
        if (ls != QM_OK) {
            check_failure(ls, &err);
        } else if (s->storages[i].nbytes) {
            g_sink ^= b[0];
            g_sink ^= b[s->storages[i].nbytes - 1];
        }
    }
    qc_source_free(s);
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    run_image(data, size);
    uint8_t *w = malloc(size ? size : 1);
    if (!w) return 0;
    if (size) memcpy(w, data, size);
    if (fix_crcs(w, size)) run_image(w, size);
    free(w);
    return 0;
}
