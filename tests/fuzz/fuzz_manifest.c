/* fuzz_manifest.c — libFuzzer target for the raw-dump importer of `qmap convert` (convert/qc_raw.c:
 * qc_open_raw_dump reading a directory's manifest.json), then the architecture planner on what it read,
 * as convert does for a dump with no config.json beside it (the manifest's "config", "arch", "layers").
 *
 * The input is written as manifest.json into a dump directory made once per process (mkdtemp under
 * $TMPDIR or /tmp, removed at exit) that also holds fixed tensor files the seeds name: e<N>.bin of N
 * float32 values for N in FIXED_ELEMENTS, link-in.bin (a symbolic link to e4.bin), link-out.bin (a link
 * to a 4-byte file outside the directory), dangling.bin (a link to nothing), subdir/ (a directory) and
 * fifo.bin (a FIFO, which must be refused, not waited on). What must hold, for ANY input bytes:
 *   - Neither the importer nor the loads nor the planner crash, read out of bounds or leak
 *     (ASan/UBSan/LSan), and none of them blocks.
 *   - A failed open is QM_ERR_BAD_SOURCE, QM_ERR_UNSUPPORTED, QM_ERR_IO or QM_ERR_NOMEM, equal to
 *     err.code, with a non-empty message, and *out NULL.
 *   - An accepted dump has one mapped storage per tensor; each tensor is F32, row-major at offset 0 over
 *     its whole storage, whose bytes (4 × the element count) are the whole of its file, it passes
 *     qc_tensor_check, and qc_source_load hands out its bytes (first and last readable); the manifest is
 *     kept as JSON, and so is "config" (an object) when present.
 *   - Planning it (arch NULL: the manifest's "arch", the config's "model_type", the tensor names) fails
 *     only with the errors qc_arch.h documents, with a message; a plan it makes maps every output to a
 *     real tensor of the dump with the same number of elements, at rank 1..4, under distinct non-empty
 *     names, and its metadata (keys "<arch>.…") can be written into a container.
 * A violated property calls abort() after printing why, so libFuzzer records the input as a crash.
 *
 * Build: make BUILD=… BUILD/fuzz/fuzz_manifest (libFuzzer), BUILD/fuzz/replay_manifest (replays
 * tests/fuzz/seeds/manifest/ under gcc ASan+UBSan without libFuzzer). The seeds export-*.json are written
 * by tests/fuzz/make_config_manifest_seeds.py, whose FIXED_ELEMENTS must equal the list below.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "qc_arch.h"
#include "qc_source.h"
#include "qm_writer.h"
#include "fuzz_scratch.h"

#define FUZZ_TARGET "fuzz_manifest"
#include "fuzz_check.h"
#include "fuzz_plan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const unsigned FIXED_ELEMENTS[] = { 0, 1, 2, 4, 8, 16, 32, 48, 64, 128, 256, 512, 768, 1024 };
#define N_FIXED (sizeof FIXED_ELEMENTS / sizeof FIXED_ELEMENTS[0])

/* The once-per-process fixture: <g_root>/outside.bin and the dump directory <g_root>/dump. */
static char g_root[512], g_dump[600], g_plan_path[700];

static void path_in(char *out, size_t cap, const char *dir, const char *name)
{
    if ((size_t)snprintf(out, cap, "%s/%s", dir, name) >= cap) die("fixture path too long", name);
}

static void put(const char *dir, const char *name, const void *d, size_t n)
{
    char path[700];
    path_in(path, sizeof path, dir, name);
    FILE *fp = fopen(path, "wb");
    if (!fp) die("cannot create fixture file", path);
    if (n && fwrite(d, 1, n, fp) != n) die("cannot write fixture file", path);
    if (fclose(fp) != 0) die("cannot close fixture file", path);
}

static void cleanup(void)
{
    static const char *const extra[] = { "manifest.json", "link-in.bin", "link-out.bin", "dangling.bin", "fifo.bin" };
    char path[700], name[32];
    for (size_t i = 0; i < N_FIXED; i++) {
        snprintf(name, sizeof name, "e%u.bin", FIXED_ELEMENTS[i]);
        path_in(path, sizeof path, g_dump, name);
        unlink(path);
    }
    for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++) {
        path_in(path, sizeof path, g_dump, extra[i]);
        unlink(path);
    }
    path_in(path, sizeof path, g_dump, "subdir");
    rmdir(path);
    rmdir(g_dump);
    path_in(path, sizeof path, g_root, "outside.bin");
    unlink(path);
    rmdir(g_root);
}

static void make_fixture(void)
{
    if (!fuzz_scratch_dir(g_root, sizeof g_root, "manifest", cleanup))
        die("cannot make a scratch directory under", "TMPDIR");
    path_in(g_dump, sizeof g_dump, g_root, "dump");
    path_in(g_plan_path, sizeof g_plan_path, g_root, "plan.qmap");
    if (mkdir(g_dump, 0700) != 0) die("mkdir failed", g_dump);
    float *vals = malloc(1024 * sizeof *vals);
    if (!vals) die("out of memory", NULL);
    for (unsigned i = 0; i < 1024; i++) vals[i] = (float)i * 0.25f - 3.0f;
    char name[32], path[700], target[700];
    for (size_t i = 0; i < N_FIXED; i++) {
        snprintf(name, sizeof name, "e%u.bin", FIXED_ELEMENTS[i]);
        put(g_dump, name, vals, FIXED_ELEMENTS[i] * sizeof *vals);
    }
    free(vals);
    static const float one = 1.0f;
    put(g_root, "outside.bin", &one, sizeof one);
    path_in(path, sizeof path, g_dump, "link-in.bin");
    if (symlink("e4.bin", path) != 0) die("symlink failed", path);
    path_in(path, sizeof path, g_dump, "link-out.bin");
    path_in(target, sizeof target, g_root, "outside.bin");
    if (symlink(target, path) != 0) die("symlink failed", path);
    path_in(path, sizeof path, g_dump, "dangling.bin");
    if (symlink("no-such-file.bin", path) != 0) die("symlink failed", path);
    path_in(path, sizeof path, g_dump, "subdir");
    if (mkdir(path, 0700) != 0) die("mkdir failed", path);
    path_in(path, sizeof path, g_dump, "fifo.bin");
    if (mkfifo(path, 0600) != 0) die("mkfifo failed", path);
}

static volatile uint8_t g_sink;

static void check_source(qc_source *s)
{
    qm_error err;
    CHECK(!strcmp(s->kind, "raw float32 dump"), "kind");
    CHECK(s->n_storages == s->n_tensors, "one storage per tensor");
    CHECK(s->manifest_json != NULL, "manifest kept");
    for (uint64_t i = 0; i < s->n_tensors; i++) {
        const qc_tensor *t = &s->tensors[i];
        CHECK(t->name && t->storage == i, "tensor i views storage i");
        CHECK(t->dtype == QC_F32 && t->rank <= QC_MAX_RANK, "float32, rank within limits");
        CHECK(qc_tensor_check(s, t, &err) == QM_OK, "qc_tensor_check");
        CHECK(t->offset == 0 && qc_tensor_is_contiguous(t), "row-major view from offset 0");
        const qc_storage *sg = &s->storages[i];
        CHECK(sg->kind == QC_STORAGE_MAPPED && sg->file < s->n_files && sg->file_offset == 0, "mapped storage");
        CHECK(sg->nbytes == s->files[sg->file].size, "storage is the whole file");
        CHECK(qc_tensor_elements(t) * 4 == sg->nbytes, "nbytes == 4 × elements");
        const uint8_t *p = NULL;
        CHECK(qc_source_load(s, (uint32_t)i, &p, &err) == QM_OK, "qc_source_load");
        if (sg->nbytes) {
            CHECK(p != NULL, "load gives the bytes");
            g_sink ^= p[0];
            g_sink ^= p[sg->nbytes - 1];
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!g_root[0]) make_fixture();
    put(g_dump, "manifest.json", data, size);

    static qc_source poison;
    qc_source *s = &poison;   /* must be overwritten with NULL on failure */
    qm_error err;
    qm_error_clear(&err);
    qm_status st = qc_open_raw_dump(g_dump, 0, &s, &err);
    if (st != QM_OK) {
        check_open_failure(st, &err, s);
        CHECK(st == QM_ERR_BAD_SOURCE || st == QM_ERR_UNSUPPORTED || st == QM_ERR_IO || st == QM_ERR_NOMEM,
              "documented status");
        return 0;
    }
    CHECK(s != NULL, "*out set on success");
    check_source(s);

    /* as convert plans it: a dump with no tensors too (only an empty set of sources is refused before) */
    qc_plan plan;
    qm_error_clear(&err);
    qm_status ps = qc_plan_build(NULL, &s, 1, s->config_json, s->config_json ? "manifest.json (config)" : NULL,
                                 s->manifest_json, &plan, &err);
    fuzz_plan_check(ps, &err, &plan, &s, 1, 512, g_plan_path, "manifest.json");
    qc_plan_free(&plan);
    qc_source_free(s);
    return 0;
}
