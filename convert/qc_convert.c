/* qc_convert.c — the convert pipeline: inputs -> sources -> plan -> container.
 *
 * Phase 1 opens and validates every input and builds the plan (names, shapes, metadata) without
 * creating anything on disk; phase 2 streams each tensor from its source through the element conversion
 * into the writer. Only phase 2 creates the (temporary) output, and any failure aborts it. */
#include "qc_convert.h"
#include "qc_json.h"
#include "qm_guard.h"

#include <fcntl.h>
#include <libgen.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <zip.h>
#include <time.h>
#include <unistd.h>

#include "qc_arch.h"
#include "qc_index.h"
#include "qc_source.h"
#include "qc_tokenizer.h"
#include "qm_format.h"
#include "qm_fileio.h"
#include "qm_names.h"
#include "qm_half.h"
#include "qm_reader.h"
#include "qm_version.h"
#include "qm_writer.h"


#define CHUNK_BYTES (8u << 20)             /* conversion buffer: output written 8 MiB at a time */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct job {
    const qc_convert_opts *o;
    qc_convert_summary *sum;
    qm_error *err;
    const char **inputs;                 /* opts->inputs, a model directory replaced by its checkpoint */
    char **resolved;                     /* owned: the paths made for directories (n_inputs slots) */
    qc_source **srcs; uint32_t n_srcs;
    qm_writer *w;                        /* the output while write_container runs, else NULL */
    qc_index *index;
    char *config_json; char config_name[4400];
    qc_tokenizer *tok, *src_tok, *tgt_tok;
    qc_plan plan;
    uint8_t *chunk;
} job;

static void warn(const job *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void warn(const job *j, const char *fmt, ...)
{
    if (!j->o->on_warning) return;
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    j->o->on_warning(j->o->user, msg);
}

static qm_status push_source(job *j, qc_source *s)
{
    qc_source **p = realloc(j->srcs, (j->n_srcs + 1) * sizeof *p);
    if (!p) {
        qc_source_free(s);
        return qm_fail(j->err, QM_ERR_NOMEM, NULL, NULL, QM_NO_OFFSET, "out of memory");
    }
    j->srcs = p;
    j->srcs[j->n_srcs++] = s;
    return QM_OK;
}

/* Open one checkpoint file or raw-dump directory (not an index) as a source. */
static qm_status open_one(job *j, const char *path, const char **kind_out)
{
    qc_source *s = NULL;
    qc_index *ix = NULL;
    const qc_importer *imp = NULL;
    qm_status st = qc_open_input(path, j->o->json_limit, &s, &ix, &imp, j->err);
    *kind_out = imp ? imp->name : NULL;
    if (st != QM_OK) return st;
    if (ix) {
        qc_index_free(ix);
        return qm_fail(j->err, QM_ERR_BAD_SOURCE, path, NULL, QM_NO_OFFSET,
                       "a shard index cannot name another index as a shard");
    }
    return push_source(j, s);
}

/* A model directory as the hub ships it (config.json, tokenizer files and the weights side by side) names
 * its checkpoint by convention: the first of these that exists is the input, in the order transformers
 * prefers them. A raw dump (manifest.json) is read as a directory. */
static const char *const hub_checkpoints[] = {
    "model.safetensors.index.json", "model.safetensors", "pytorch_model.bin.index.json", "pytorch_model.bin",
};

static qm_status resolve_inputs(job *j)
{
    size_t n = j->o->n_inputs;
    j->inputs = calloc(n, sizeof *j->inputs);
    j->resolved = calloc(n, sizeof *j->resolved);
    if (!j->inputs || !j->resolved) return qm_fail(j->err, QM_ERR_NOMEM, NULL, NULL, QM_NO_OFFSET, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const char *in = j->o->inputs[i];
        j->inputs[i] = in;
        struct stat sb;
        if (stat(in, &sb) != 0 || !S_ISDIR(sb.st_mode)) continue;
        char probe[4400];
        snprintf(probe, sizeof probe, "%s/manifest.json", in);
        if (access(probe, F_OK) == 0) continue;   /* a raw dump */
        for (size_t k = 0; k < sizeof hub_checkpoints / sizeof *hub_checkpoints && !j->resolved[i]; k++) {
            snprintf(probe, sizeof probe, "%s/%s", in, hub_checkpoints[k]);
            if (access(probe, F_OK) == 0 && !(j->resolved[i] = strdup(probe)))
                return qm_fail(j->err, QM_ERR_NOMEM, NULL, NULL, QM_NO_OFFSET, "out of memory");
        }
        if (!j->resolved[i])
            return qm_fail(j->err, QM_ERR_BAD_SOURCE, in, NULL, QM_NO_OFFSET,
                           "the directory holds no checkpoint qmap knows: looked for manifest.json (a raw dump), "
                           "model.safetensors.index.json, model.safetensors, pytorch_model.bin.index.json and "
                           "pytorch_model.bin; give the checkpoint file itself");
        j->inputs[i] = j->resolved[i];
    }
    return QM_OK;
}

/* Open the shards of the index j->index, in its order, and check they hold what it lists. */
static qm_status open_shards(job *j)
{
    const char *first_kind = NULL, *kind = NULL;
    if (j->index->n_shards == 0)   /* would leave nothing to plan from (it crashed the planners) */
        return qm_fail(j->err, QM_ERR_BAD_SOURCE, j->index->path, "weight_map", QM_NO_OFFSET,
                       "the index names no shard: there are no tensors to convert");
    for (size_t k = 0; k < j->index->n_shards; k++) {
        qm_status st = open_one(j, j->index->shards[k], &kind);
        if (st != QM_OK) return st;
        if (!first_kind) first_kind = kind;
    }
    qm_status st = qc_index_check(j->index, j->srcs, j->n_srcs, j->err);
    if (st != QM_OK) return st;
    snprintf(j->sum->kinds, sizeof j->sum->kinds, "%s (%zu shards, index %s)", first_kind ? first_kind : "?",
             j->index->n_shards, j->index->path);
    return QM_OK;
}

static qm_status open_inputs(job *j)
{
    const char *first_kind = NULL;
    for (size_t i = 0; i < j->o->n_inputs; i++) {
        const char *path = j->inputs[i];
        qc_source *s = NULL;
        const qc_importer *imp = NULL;
        qm_status st = qc_open_input(path, j->o->json_limit, &s, &j->index, &imp, j->err);
        if (st != QM_OK) return st;
        if (j->index) {
            if (j->o->n_inputs != 1)
                return qm_fail(j->err, QM_ERR_INVALID_ARGUMENT, path, NULL, QM_NO_OFFSET,
                               "a shard index names its shards itself: give it alone");
            return open_shards(j);
        }
        if ((st = push_source(j, s)) != QM_OK) return st;
        if (!first_kind) first_kind = imp->name;
    }
    if (j->n_srcs > 1) snprintf(j->sum->kinds, sizeof j->sum->kinds, "%s (%u shards)", first_kind, j->n_srcs);
    else snprintf(j->sum->kinds, sizeof j->sum->kinds, "%s", first_kind ? first_kind : "?");
    return QM_OK;
}

/* The directory a model's companion files (config.json, tokenizer) sit in. */
static void companion_dir(const char *input, char *out, size_t size)
{
    struct stat sb;
    if (stat(input, &sb) == 0 && S_ISDIR(sb.st_mode)) { snprintf(out, size, "%s", input); return; }
    char *copy = strdup(input);
    snprintf(out, size, "%s", copy ? dirname(copy) : ".");
    free(copy);
}

static qm_status read_text(job *j, const char *path, char **out)
{
    size_t len;
    return qc_json_read_file(path, QC_JSON_CONFIG, j->o->json_limit, out, &len, j->err);
}

static qm_status find_config(job *j)
{
    if (j->o->config_path) {
        snprintf(j->config_name, sizeof j->config_name, "%s", j->o->config_path);
        return read_text(j, j->o->config_path, &j->config_json);
    }
    char dir[4096], path[4200];
    companion_dir(j->index ? j->index->path : j->o->inputs[0], dir, sizeof dir);
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (access(path, R_OK) == 0) {
        snprintf(j->config_name, sizeof j->config_name, "%s", path);
        return read_text(j, path, &j->config_json);
    }
    for (uint32_t i = 0; i < j->n_srcs; i++)
        if (j->srcs[i]->config_json && j->srcs[i]->input == QC_INPUT_RAW_DUMP) {
            snprintf(j->config_name, sizeof j->config_name, "%.4096s/manifest.json (config)", j->srcs[i]->path);
            if (!(j->config_json = strdup(j->srcs[i]->config_json)))
                return qm_fail(j->err, QM_ERR_NOMEM, NULL, NULL, QM_NO_OFFSET, "out of memory");
            return QM_OK;
        }
    return QM_OK;
}

/* A tokenizer named on the command line: a file, or a directory to search. */
/* The planned value of hyperparameter <arch>.<hp>, or 0 if the plan has none. */
static uint64_t planned_u32(const job *j, qm_hparam hp)
{
    char key[QM_KEY_NAME_MAX];
    qm_arch a = qm_arch_from_name(j->plan.arch, strlen(j->plan.arch));
    if (qm_hparam_key(key, sizeof key, a, hp) < 0) return 0;
    for (uint64_t i = 0; i < j->plan.n_meta; i++)
        if (j->plan.meta[i].type == QM_META_U32 && !strcmp(j->plan.meta[i].key, key)) return j->plan.meta[i].u32;
    return 0;
}

/* A tokenizer with more tokens than the embedding has rows would give ids past it at run time: refused,
 * naming both sizes. Fewer is normal (HF pads embeddings). */
static qm_status tokenizer_fits(job *j, const qc_tokenizer *tok, qm_hparam hp)
{
    uint64_t rows = planned_u32(j, hp), n = tok ? qc_tokenizer_vocab_size(tok) : 0;
    if (!tok || !rows || n <= rows) return QM_OK;
    return qm_fail(j->err, QM_ERR_SHAPE, qc_tokenizer_source(tok), NULL, QM_NO_OFFSET,
                   "the tokenizer has %llu tokens but the model's embedding has %llu rows (%s.%s): ids past it "
                   "could not be run; give the model's own tokenizer (--tokenizer) or --no-tokenizer",
                   (unsigned long long)n, (unsigned long long)rows, j->plan.arch, qm_hparam_suffix(hp));
}

static qm_status check_tokenizer_fits(job *j)
{
    qm_status st = tokenizer_fits(j, j->tok, QM_HP_VOCAB_SIZE);
    if (st == QM_OK) st = tokenizer_fits(j, j->src_tok, QM_HP_SRC_VOCAB_SIZE);
    if (st == QM_OK) st = tokenizer_fits(j, j->tgt_tok, QM_HP_TGT_VOCAB_SIZE);
    return st;
}

static qm_status load_tokenizer(job *j, const char *path, qc_tokenizer **tok)
{
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        qm_status st = qc_tokenizer_find(path, j->o->json_limit, tok, j->err);
        if (st == QM_OK && !*tok)
            st = qm_fail(j->err, QM_ERR_NOT_FOUND, path, NULL, QM_NO_OFFSET,
                         "no tokenizer.json, vocab.json + merges.txt or vocab.txt in this directory");
        return st;
    }
    return qc_tokenizer_load(path, j->o->json_limit, tok, j->err);
}

static qm_status find_tokenizer(job *j)
{
    qm_status st;
    if (j->o->src_tokenizer_path && (st = load_tokenizer(j, j->o->src_tokenizer_path, &j->src_tok))) return st;
    if (j->o->tgt_tokenizer_path && (st = load_tokenizer(j, j->o->tgt_tokenizer_path, &j->tgt_tok))) return st;
    if (j->o->no_tokenizer) return QM_OK;
    if (j->o->tokenizer_path) return load_tokenizer(j, j->o->tokenizer_path, &j->tok);
    if (j->src_tok || j->tgt_tok) return QM_OK;   /* a translation model's vocabularies were given */
    char dir[4096];
    companion_dir(j->index ? j->index->path : j->o->inputs[0], dir, sizeof dir);
    return qc_tokenizer_find(dir, j->o->json_limit, &j->tok, j->err);
}

/* XXH3 of a whole file, through a mapping (the provenance checksum). */
static qm_status hash_file(job *j, const char *path, uint64_t *size, uint64_t *hash)
{
    struct stat sb;
    int fd = qm_open_regular(path, &sb, j->err);
    if (fd < 0) return j->err ? j->err->code : QM_ERR_IO;
    *size = (uint64_t)sb.st_size;
    if (*size == 0) { close(fd); *hash = qm_checksum("", 0); return QM_OK; }
    void *m = mmap(NULL, (size_t)*size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) return qm_fail(j->err, QM_ERR_IO, path, NULL, QM_NO_OFFSET, "cannot map to checksum");
    *hash = qm_checksum(m, (size_t)*size);
    munmap(m, (size_t)*size);
    return QM_OK;
}

static qm_status write_provenance(job *j, qm_writer *w)
{
    uint64_t n = 0;
    for (uint32_t i = 0; i < j->n_srcs; i++) n += j->srcs[i]->n_files ? j->srcs[i]->n_files : 1;
    if (j->index) n++;
    const char **names = calloc(n, sizeof *names);
    uint64_t *sizes = calloc(n, sizeof *sizes), *hashes = calloc(n, sizeof *hashes);
    bool *mapped = calloc(n, sizeof *mapped);
    qm_status st = QM_OK;
    if (!names || !sizes || !hashes || !mapped) { st = qm_fail(j->err, QM_ERR_NOMEM, NULL, NULL, QM_NO_OFFSET, "out of memory"); goto out; }
    uint64_t k = 0;
    if (j->index) names[k++] = j->index->path;
    for (uint32_t i = 0; i < j->n_srcs; i++) {
        if (!j->srcs[i]->n_files) { names[k++] = j->srcs[i]->path; continue; }
        for (uint32_t f = 0; f < j->srcs[i]->n_files; f++) {
            /* already mapped by the importer: hash that mapping (which also faults in the pages the
             * conversion reads next) rather than mapping the file a second time */
            const qc_file *qf = &j->srcs[i]->files[f];
            sizes[k] = qf->size;
            hashes[k] = qm_checksum(qf->size ? (const void *)qf->data : "", (size_t)qf->size);
            mapped[k] = true;
            names[k++] = qf->path;
        }
    }
    for (uint64_t i = 0; i < n && st == QM_OK; i++)
        if (!mapped[i]) st = hash_file(j, names[i], &sizes[i], &hashes[i]);
    for (uint64_t i = 0; i < n; i++) j->sum->in_bytes += sizes[i];
    j->sum->n_inputs_files = n;
    char conv[64];
    snprintf(conv, sizeof conv, "qmap %s", QMAP_VERSION);
    if (st == QM_OK) st = qm_writer_meta_string(w, QM_KEY_CONVERTER, conv, strlen(conv), j->err);
    if (st == QM_OK) st = qm_writer_meta_string(w, QM_KEY_SOURCE_KIND, j->sum->kinds, strlen(j->sum->kinds), j->err);
    /* base names only: the container must not depend on where the inputs happened to sit */
    const char **bases = calloc(n, sizeof *bases);
    if (!bases && st == QM_OK) st = qm_fail(j->err, QM_ERR_NOMEM, NULL, NULL, QM_NO_OFFSET, "out of memory");
    for (uint64_t i = 0; bases && i < n; i++) {
        const char *slash = strrchr(names[i], '/');
        bases[i] = slash ? slash + 1 : names[i];
    }
    if (st == QM_OK) st = qm_writer_meta_string_array(w, QM_KEY_SOURCE_FILES, bases, NULL, n, j->err);
    free(bases);
    if (st == QM_OK) st = qm_writer_meta_array(w, QM_KEY_SOURCE_SIZES, QM_META_U64, sizes, n, j->err);
    if (st == QM_OK) st = qm_writer_meta_array(w, QM_KEY_SOURCE_XXH3, QM_META_U64, hashes, n, j->err);
out:
    free(names);
    free(sizes);
    free(hashes);
    free(mapped);
    return st;
}

/* ---- element conversion ---- */

static inline float load_f32(const uint8_t *p, qc_dtype t)
{
    switch (t) {
    case QC_F32: { float f; memcpy(&f, p, 4); return f; }
    case QC_F16: { uint16_t h; memcpy(&h, p, 2); return qm_f16_to_f32(h); }
    case QC_BF16: { uint16_t h; memcpy(&h, p, 2); return qm_bf16_to_f32(h); }
    default: { double d; memcpy(&d, p, 8); return (float)d; }   /* F64: rounds to nearest, as torch's .float() */
    }
}

static uint64_t count_nonfinite_f32(const uint8_t *p, uint64_t n)
{
    uint64_t bad = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, p + 4 * i, 4);
        bad += (u & 0x7f800000u) == 0x7f800000u;
    }
    return bad;
}

static uint64_t count_nonfinite_f16(const uint8_t *p, uint64_t n)
{
    uint64_t bad = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint16_t u;
        memcpy(&u, p + 2 * i, 2);
        bad += (u & 0x7c00u) == 0x7c00u;
    }
    return bad;
}

typedef struct view {
    uint32_t rank;
    uint64_t shape[QC_MAX_RANK];
    int64_t stride[QC_MAX_RANK];
    uint64_t offset;
} view;

/* The source tensor as seen in container element order: size-1 dims dropped, 2-D transposed if asked. */
static view make_view(const qc_tensor *t, bool transpose)
{
    view v = { .offset = t->offset };
    for (uint32_t i = 0; i < t->rank; i++) {
        if (t->shape[i] == 1) continue;
        v.shape[v.rank] = t->shape[i];
        v.stride[v.rank] = t->stride[i];
        v.rank++;
    }
    if (transpose && v.rank == 2) {
        uint64_t s = v.shape[0]; v.shape[0] = v.shape[1]; v.shape[1] = s;
        int64_t d = v.stride[0]; v.stride[0] = v.stride[1]; v.stride[1] = d;
    }
    return v;
}

static bool view_contiguous(const view *v)
{
    uint64_t run = 1;
    for (int i = (int)v->rank - 1; i >= 0; i--) {
        if ((uint64_t)v->stride[i] != run) return false;
        run *= v->shape[i];
    }
    return true;
}

typedef struct tensor_stats { uint64_t nonfinite; } tensor_stats;

static void report_progress(job *j, uint64_t ti, uint64_t done, uint64_t total, double t0)
{
    if (!j->o->on_progress) return;
    qc_progress p = { ti, j->plan.n_out, done, total, now_s() - t0 };
    j->o->on_progress(j->o->user, &p);
}

static qm_status write_tensor(job *j, qm_writer *w, uint64_t ti, uint32_t dst_dtype, uint64_t *done, uint64_t total,
                              double t0, tensor_stats *ts)
{
    const qc_out *o = &j->plan.out[ti];
    qc_source *s = j->srcs[o->src];
    const qc_tensor *t = &s->tensors[o->tensor];
    const uint8_t *base;
    qm_status st = qc_source_load(s, t->storage, &base, j->err);
    if (st != QM_OK) return st;
    size_t es = qc_dtype_size(t->dtype);
    view v = make_view(t, o->transpose);
    uint64_t n = qc_tensor_elements(t);
    if (v.rank >= 1 && o->dims[0] != v.shape[0]) {   /* one part of a fused tensor: rows row0 .. */
        v.offset += o->row0 * (uint64_t)v.stride[0];
        n = n / v.shape[0] * o->dims[0];
        v.shape[0] = o->dims[0];
    }
    bool same = (dst_dtype == QM_DTYPE_F32 && t->dtype == QC_F32) || (dst_dtype == QM_DTYPE_F16 && t->dtype == QC_F16);
    if (same && view_contiguous(&v)) {
        /* Straight from the mapping (or a loaded zip entry's buffer) into the writer, in slices for
         * progress, so that the NaN scan, the writer's checksum and its write read bytes still in cache. */
        const uint8_t *p = base + v.offset * es;
        uint64_t bytes = n * es, off = 0;
        const qc_storage *sg = &s->storages[t->storage];
        int fd = -1;
        if (sg->kind == QC_STORAGE_MAPPED && s->files[sg->file].owned) {
            fd = qm_open_regular(s->files[sg->file].path, NULL, NULL);
        }
        while (off < bytes) {
            uint64_t len = bytes - off < CHUNK_BYTES ? bytes - off : CHUNK_BYTES;
            ts->nonfinite += es == 4 ? count_nonfinite_f32(p + off, len / 4) : count_nonfinite_f16(p + off, len / 2);
            st = qm_writer_write(w, p + off, (size_t)len, j->err);
            /* write() from a mapping whose file shrank fails with EFAULT rather than a fault: say which
             * file it was */
            if (fd >= 0) st = qm_guard_check_shrunk(st, fd, s->files[sg->file].size, s->files[sg->file].path, j->err);
            if (st != QM_OK) break;
            off += len;
            *done += len;
            if ((*done & ((64u << 20) - 1)) == 0) report_progress(j, ti, *done, total, t0);
        }
        if (fd >= 0) close(fd);
        return st;
    }
    /* general path: walk rows of the last view dim (odometer over the others), convert into the chunk */
    uint32_t ds = dst_dtype == QM_DTYPE_F16 ? 2 : 4;
    uint64_t inner = v.rank ? v.shape[v.rank - 1] : 1;
    int64_t istride = v.rank ? v.stride[v.rank - 1] : 1;
    uint64_t idx[QC_MAX_RANK] = { 0 }, rows = inner ? n / inner : 0, fill = 0;
    for (uint64_t r = 0; r < rows; r++) {
        uint64_t at = v.offset;
        for (uint32_t d = 0; d + 1 < v.rank; d++) at += idx[d] * (uint64_t)v.stride[d];
        for (uint64_t k = 0; k < inner; k++) {
            float f = load_f32(base + (at + k * (uint64_t)istride) * es, t->dtype);
            if (!isfinite(f)) ts->nonfinite++;
            if (ds == 4) memcpy(j->chunk + fill, &f, 4);
            else {
                if (isfinite(f) && !qm_f32_fits_f16(f))
                    return qm_fail(j->err, QM_ERR_UNSUPPORTED, s->path, t->name, QM_NO_OFFSET,
                                   "tensor '%s' holds %g at element %llu, beyond the F16 range (±65504); "
                                   "convert with --dtype f32", t->name, (double)f,
                                   (unsigned long long)(r * inner + k));
                uint16_t h = qm_f32_to_f16(f);
                memcpy(j->chunk + fill, &h, 2);
            }
            fill += ds;
            if (fill == CHUNK_BYTES) {
                if ((st = qm_writer_write(w, j->chunk, fill, j->err)) != QM_OK) return st;
                *done += fill;
                fill = 0;
                if ((*done & ((64u << 20) - 1)) == 0) report_progress(j, ti, *done, total, t0);
            }
        }
        for (int d = (int)v.rank - 2; d >= 0; d--) {
            if (++idx[d] < v.shape[d]) break;
            idx[d] = 0;
        }
    }
    if (fill) {
        if ((st = qm_writer_write(w, j->chunk, fill, j->err)) != QM_OK) return st;
        *done += fill;
    }
    return QM_OK;
}

static uint32_t out_dtype(const job *j, const qc_out *o)
{
    return (j->o->dtype == QM_DTYPE_F16 && o->rank >= 2) ? QM_DTYPE_F16 : QM_DTYPE_F32;
}

static qm_status write_container(job *j)
{
    qm_writer *w = NULL;
    qm_status st = qm_writer_create(j->o->output, NULL, &w, j->err);
    if (st != QM_OK) return st;
    j->w = w;   /* for write_container_guarded, should a read fault */
    const char *ft = j->o->dtype == QM_DTYPE_F16 ? "f16" : "f32";
    if ((st = qc_plan_write_meta(&j->plan, w, j->err))) goto fail;
    if ((st = qm_writer_meta_string(w, QM_KEY_FILE_TYPE, ft, strlen(ft), j->err))) goto fail;
    if ((st = write_provenance(j, w))) goto fail;
    if (j->config_json &&
        (st = qm_writer_meta_string(w, QM_KEY_CONFIG_JSON, j->config_json, strlen(j->config_json), j->err)))
        goto fail;
    if (j->tok && (st = qc_tokenizer_write_meta(j->tok, w, QM_TOK_PREFIX, j->err))) goto fail;
    if (j->src_tok && (st = qc_tokenizer_write_meta(j->src_tok, w, QM_TOK_SRC_PREFIX, j->err))) goto fail;
    if (j->tgt_tok && (st = qc_tokenizer_write_meta(j->tgt_tok, w, QM_TOK_TGT_PREFIX, j->err))) goto fail;
    uint64_t total = 0;
    for (uint64_t i = 0; i < j->plan.n_out; i++) {
        const qc_out *o = &j->plan.out[i];
        uint64_t nb, ne;
        uint32_t dt = out_dtype(j, o);
        if ((st = qm_writer_add_tensor(w, o->name, dt, o->rank, o->dims, j->err))) goto fail;
        qm_shape_elements(o->rank, o->dims, &ne);
        qm_tensor_nbytes(dt, o->rank, o->dims, QM_DEFAULT_ALIGNMENT, &nb);
        total += nb;
        j->sum->n_params += ne;
    }
    double t0 = now_s();
    uint64_t done = 0;
    for (uint64_t i = 0; i < j->plan.n_out; i++) {
        tensor_stats ts = { 0 };
        report_progress(j, i, done, total, t0);
        if ((st = write_tensor(j, w, i, out_dtype(j, &j->plan.out[i]), &done, total, t0, &ts))) goto fail;
        if (ts.nonfinite) {
            const qc_out *o = &j->plan.out[i];
            const qc_source *s = j->srcs[o->src];
            if (j->o->strict) {
                st = qm_fail(j->err, QM_ERR_NONFINITE, s->path, s->tensors[o->tensor].name, QM_NO_OFFSET,
                             "tensor '%s' holds %llu NaN/Inf values (--strict)", s->tensors[o->tensor].name,
                             (unsigned long long)ts.nonfinite);
                goto fail;
            }
            warn(j, "%s: tensor '%s' holds %llu NaN/Inf values (copied as they are; --strict refuses them)",
                 s->path, s->tensors[o->tensor].name, (unsigned long long)ts.nonfinite);
            j->sum->n_nonfinite += ts.nonfinite;
        }
    }
    report_progress(j, j->plan.n_out, done, total, t0);
    j->w = NULL;
    st = qm_writer_finish(w, j->err);
    j->sum->seconds_write = now_s() - t0;
    j->sum->out_bytes = 0;
    if (st == QM_OK) {
        struct stat sb;
        if (stat(j->o->output, &sb) == 0) j->sum->out_bytes = (uint64_t)sb.st_size;
    }
    return st;
fail:
    j->w = NULL;
    qm_writer_abort(w);
    return st;
}

/* The write phase reads the inputs through their mappings; one that shrinks meanwhile (truncated, or
 * overwritten in place) would raise SIGBUS. Under this guard it is an error naming the file, and the
 * output is abandoned as on any other failure (format/qm_guard.h). */
static qm_status write_container_guarded(job *j)
{
    qm_guard g;
    qm_guard_push(&g, NULL, 0);
    if (sigsetjmp(g.jump, 0)) {
        qm_guard_pop(&g);
        qm_writer_abort(j->w);
        j->w = NULL;
        const unsigned char *at = g.fault;
        for (uint32_t i = 0; i < j->n_srcs; i++)
            for (uint32_t f = 0; f < j->srcs[i]->n_files; f++) {
                const qc_file *qf = &j->srcs[i]->files[f];
                if (qf->data && at >= qf->data && at < qf->data + qf->size)
                    return qm_guard_fail(&g, j->err, qf->path, qf->data);
            }
        return qm_guard_fail(&g, j->err, j->o->inputs[0], NULL);
    }
    qm_status st = write_container(j);
    qm_guard_pop(&g);
    return st;
}

/* Compressed zip entries (deflated .npz members, a torch.save written with compression) are legitimate,
 * but a tiny file that inflates to gigabytes is the classic zip bomb: sum what every compressed storage
 * inflates to, report it in the summary, and refuse a total above QC_INFLATE_FREE_BYTES that is more than
 * QC_MAX_INFLATION times its compressed size, unless --allow-large. Float weights barely compress
 * (about 1.1x), so the bound only ever trips on mostly-constant data. */
static qm_status check_inflation(job *j)
{
    const char *worst_file = NULL, *worst_key = NULL;
    double worst = 0;
    for (uint32_t i = 0; i < j->n_srcs; i++) {
        qc_source *s = j->srcs[i];
        for (uint64_t k = 0; s->zip && k < s->n_storages; k++) {
            const qc_storage *sg = &s->storages[k];
            zip_stat_t sb;
            zip_stat_init(&sb);
            if (sg->kind != QC_STORAGE_ZIP || zip_stat_index((zip_t *)s->zip, sg->zip_index, 0, &sb) != 0) continue;
            if (!(sb.valid & ZIP_STAT_COMP_METHOD) || sb.comp_method == ZIP_CM_STORE) continue;
            if (!(sb.valid & ZIP_STAT_COMP_SIZE) || !(sb.valid & ZIP_STAT_SIZE)) continue;
            j->sum->inflated_from += sb.comp_size;
            j->sum->inflated_to += sb.size;
            double r = (double)sb.size / (double)(sb.comp_size ? sb.comp_size : 1);
            if (r > worst) { worst = r; worst_file = s->path; worst_key = sg->key; }
        }
    }
    uint64_t from = j->sum->inflated_from, to = j->sum->inflated_to;
    if (j->o->allow_large || to <= QC_INFLATE_FREE_BYTES || to / QC_MAX_INFLATION <= from) return QM_OK;
    return qm_fail(j->err, QM_ERR_UNSUPPORTED, worst_file, worst_key, QM_NO_OFFSET,
                   "compressed entries of %llu bytes inflate to %llu bytes (%.0fx; this entry %.0fx): above the "
                   "%ux allowed beyond %llu MiB, as a zip bomb would. If the file is genuine, --allow-large "
                   "converts it", (unsigned long long)from, (unsigned long long)to, (double)to / (double)(from ? from : 1),
                   worst, QC_MAX_INFLATION, (unsigned long long)(QC_INFLATE_FREE_BYTES >> 20));
}

qm_status qc_convert(const qc_convert_opts *opts, qc_convert_summary *summary, qm_error *err)
{
    double t_start = now_s();
    job j = { .o = opts, .sum = summary, .err = err };
    memset(summary, 0, sizeof *summary);
    qm_status st;
    if (!opts->n_inputs || !opts->output)
        return qm_fail(err, QM_ERR_INVALID_ARGUMENT, NULL, NULL, QM_NO_OFFSET, "no input or no output given");
    if (opts->dtype && opts->dtype != QM_DTYPE_F32 && opts->dtype != QM_DTYPE_F16)
        return qm_fail(err, QM_ERR_INVALID_ARGUMENT, NULL, NULL, QM_NO_OFFSET, "output dtype must be F32 or F16");
    if ((st = resolve_inputs(&j))) goto out;
    if ((st = open_inputs(&j))) goto out;
    if (j.n_srcs == 0) {   /* every planner reads the first source: refuse an empty set before planning */
        st = qm_fail(err, QM_ERR_BAD_SOURCE, opts->inputs[0], NULL, QM_NO_OFFSET, "no tensors to convert");
        goto out;
    }
    if ((st = check_inflation(&j))) goto out;
    if ((st = find_config(&j))) goto out;
    const char *manifest = NULL;
    for (uint32_t i = 0; i < j.n_srcs && !manifest; i++) manifest = j.srcs[i]->manifest_json;
    if ((st = qc_plan_build(opts->arch, j.srcs, j.n_srcs, j.config_json, j.config_name[0] ? j.config_name : NULL,
                            manifest, &j.plan, err)))
        goto out;
    if ((st = find_tokenizer(&j))) goto out;
    if ((st = check_tokenizer_fits(&j))) goto out;
    if (!(j.chunk = malloc(CHUNK_BYTES))) { st = qm_fail(err, QM_ERR_NOMEM, NULL, NULL, QM_NO_OFFSET, "out of memory"); goto out; }
    summary->arch = j.plan.arch;
    snprintf(summary->config, sizeof summary->config, "%.500s", j.config_name);
    if (j.tok)
        snprintf(summary->tokenizer, sizeof summary->tokenizer, "%s, %llu tokens (%s)", qc_tokenizer_kind(j.tok),
                 (unsigned long long)qc_tokenizer_vocab_size(j.tok), qc_tokenizer_source(j.tok));
    else if (j.src_tok || j.tgt_tok)
        snprintf(summary->tokenizer, sizeof summary->tokenizer, "source %s, %llu tokens; target %s, %llu tokens",
                 j.src_tok ? qc_tokenizer_kind(j.src_tok) : "none",
                 (unsigned long long)(j.src_tok ? qc_tokenizer_vocab_size(j.src_tok) : 0),
                 j.tgt_tok ? qc_tokenizer_kind(j.tgt_tok) : "none",
                 (unsigned long long)(j.tgt_tok ? qc_tokenizer_vocab_size(j.tgt_tok) : 0));
    summary->n_tensors = j.plan.n_out;
    summary->n_skipped = j.plan.n_skipped;
    summary->tied_output = j.plan.tied_output;
    st = write_container_guarded(&j);
out:
    summary->seconds_total = now_s() - t_start;
    free(j.chunk);
    qc_plan_free(&j.plan);
    qc_tokenizer_free(j.tok);
    qc_tokenizer_free(j.src_tok);
    qc_tokenizer_free(j.tgt_tok);
    for (uint32_t i = 0; i < j.n_srcs; i++) qc_source_free(j.srcs[i]);
    free(j.srcs);
    qc_index_free(j.index);
    free(j.config_json);
    for (size_t i = 0; j.resolved && i < opts->n_inputs; i++) free(j.resolved[i]);
    free(j.resolved);
    free(j.inputs);
    return st;
}
