/* fuzz_pickle.c — libFuzzer target for the restricted unpickler (qc_pickle_read_state_dict).
 *
 * What must hold, for ANY input bytes (taken as a data.pkl):
 *   - It never crashes, never reads outside the input and never leaks (ASan/UBSan/LSan; the input is
 *     copied into a heap block of exactly `size` bytes so a one-byte overread is reported), and it
 *     finishes in time linear in the input: nothing recurses and every count has a cap.
 *   - A failure is a known, non-OK status among QM_ERR_BAD_SOURCE, QM_ERR_UNSUPPORTED, QM_ERR_FORBIDDEN and
 *     QM_ERR_NOMEM; err.code equals it; the message is non-empty and NUL-terminated; the result is empty.
 *   - A success lists tensors with a non-empty NUL-free name (no two alike), a known dtype, rank at most
 *     QC_MAX_RANK, and a storage key of 1-64 characters of [A-Za-z0-9_.-] other than "." and "..".
 * A violated property calls abort() after printing why, so libFuzzer records the input as a crash.
 *
 * Build: make BUILD=build build/fuzz/fuzz_pickle (libFuzzer), build/fuzz/replay_pickle (replay, no
 * libFuzzer, with tests/fuzz/replay_main.c). Seeds: tests/fuzz/seeds/pickle (make_torch_seeds.py).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qc_pickle.h"
#include "qm_error.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void die(const char *what)
{
    fprintf(stderr, "fuzz_pickle: property violated: %s\n", what);
    abort();
}

#define CHECK(cond) do { if (!(cond)) die(#cond); } while (0)

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf) return 0;
    if (size) memcpy(buf, data, size);
    qc_pickle_result r;
    qm_error err;
    memset(&err, 0x5A, sizeof err);
    qm_status st = qc_pickle_read_state_dict(buf, size, "fuzz.pkl", &r, &err);
    if (st != QM_OK) {
        CHECK(st == QM_ERR_BAD_SOURCE || st == QM_ERR_UNSUPPORTED || st == QM_ERR_FORBIDDEN || st == QM_ERR_NOMEM);
        CHECK(err.code == st);
        CHECK(memchr(err.message, 0, sizeof err.message) != NULL);
        CHECK(err.message[0] != 0);
        CHECK(memchr(err.field, 0, sizeof err.field) != NULL);
        CHECK(r.tensors == NULL && r.n_tensors == 0);
    } else {
        char **names = malloc((r.n_tensors ? r.n_tensors : 1) * sizeof *names);
        if (!names) die("out of memory in the checker");
        for (size_t i = 0; i < r.n_tensors; i++) {
            const qc_pickle_tensor *t = &r.tensors[i];
            CHECK(t->name && t->name[0]);
            CHECK(qc_dtype_size(t->dtype) != 0);
            CHECK(t->rank <= QC_MAX_RANK);
            size_t kl = strlen(t->storage_key);
            CHECK(kl >= 1 && kl <= 64 && strcmp(t->storage_key, ".") && strcmp(t->storage_key, ".."));
            CHECK(strspn(t->storage_key, "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_.-") == kl);
            CHECK(t->pickle_offset < size);
            names[i] = t->name;
        }
        qsort(names, r.n_tensors, sizeof *names, cmp_names);
        for (size_t i = 0; i + 1 < r.n_tensors; i++) CHECK(strcmp(names[i], names[i + 1]) != 0);
        free(names);
        qc_pickle_result_free(&r);
        CHECK(r.tensors == NULL && r.n_tensors == 0);
    }
    free(buf);
    return 0;
}
