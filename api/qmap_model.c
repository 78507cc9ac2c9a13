/* qmap_model.c — open a container as a model: map, validate, view the weights, load the tokenizer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "qa_model.h"
#include "qa_pages.h"
#include "qr_tok.h"

void qmap_model_params_default(qmap_model_params *p)
{
    if (!p) return;
    memset(p, 0, sizeof *p);
}

const qr_tokenizer *qa_model_tokenizer(const qmap_model *m) { return m ? m->tok : NULL; }

const char *qa_model_tokenizer_error(const qmap_model *m) { return m && m->tok_error[0] ? m->tok_error : NULL; }

static void copy_meta_string(const qm_file *f, const char *key, char *buf, size_t cap, const char *def)
{
    const char *s;
    uint64_t len;
    if (qm_meta_get_string(f, key, &s, &len) == QM_OK) snprintf(buf, cap, "%.*s", (int)(len < cap ? len : cap - 1), s);
    else snprintf(buf, cap, "%s", def);
}

/* The names table's kind column (format/qm_names.h), whose values are qmap_model_kind's. */
static qmap_model_kind kind_of(qm_arch a)
{
    _Static_assert((int)QM_KIND_LM == (int)QMAP_KIND_LM && (int)QM_KIND_CLASSIFIER == (int)QMAP_KIND_CLASSIFIER &&
                   (int)QM_KIND_SEQ2SEQ == (int)QMAP_KIND_SEQ2SEQ && (int)QM_KIND_NONE == (int)QMAP_KIND_NONE,
                   "qm_arch_kind and qmap_model_kind differ");
    return (qmap_model_kind)qm_arch_kind_of(a);
}

/* Bytes of one row of a tensor viewed as rows × last dim (Q8_ROW rows carry their scale and sum too). */
static uint64_t row_bytes(const qm_tensor *t)
{
    uint64_t rows = t->rank ? t->n_elements / t->dims[t->rank - 1] : 1;
    return rows ? t->size / rows : t->size;
}

/* What one decode step reads: every tensor once, except the embedding tables, of which it reads one row
 * (the token embedding is read whole when it is also the output head). */
static uint64_t bytes_per_token(const qmap_model *m)
{
    uint64_t total = 0;
    for (uint64_t i = 0; i < qm_tensor_count(m->file); i++) total += qm_tensor_at(m->file, i)->size;
    char name[QM_TENSOR_NAME_MAX];
    qm_tensor_name(name, sizeof name, QM_TENSOR_TOK_EMBD, 0);
    const qm_tensor *t = qm_find_tensor(m->file, name);
    if (t && !m->lm->tied_output(m->weights)) total -= t->size - row_bytes(t);
    qm_tensor_name(name, sizeof name, QM_TENSOR_POS_EMBD, 0);
    if ((t = qm_find_tensor(m->file, name))) total -= t->size - row_bytes(t);
    return total;
}

static void fill_info(qmap_model *m)
{
    qmap_model_info *in = &m->info;
    const qm_header_info *h = qm_file_header(m->file);
    in->path = qm_file_path(m->file);
    in->arch = m->arch_name;
    in->variant = m->variant;
    in->file_type = m->file_type;
    in->kind = kind_of(m->arch);
    in->file_size = h->file_size;
    for (uint64_t i = 0; i < qm_tensor_count(m->file); i++) {
        const qm_tensor *t = qm_tensor_at(m->file, i);
        in->n_params += t->n_elements;
        in->weight_bytes += t->size;
    }
    in->has_tokenizer = m->tok != NULL;
    in->input_scale = 1.0f;
    in->input_offset = 0.0f;
    if (m->lm) {
        in->vocab_size = m->hp.vocab;
        in->context_length = m->hp.ctx;
        in->dim = m->hp.dim;
        in->n_layers = m->hp.n_layers;
        /* the model's counts: a rank of a tensor-parallel run holds 1/N of them (m->hp) */
        const uint32_t N = m->shard.n_ranks > 1 ? m->shard.n_ranks : 1;
        in->n_heads = m->hp.n_heads * N;
        in->n_kv_heads = m->hp.n_kv_heads * N;
        in->head_dim = m->hp.head_dim;
        in->ffn_dim = m->hp.ffn_dim * N;
        in->bytes_per_token = bytes_per_token(m);
    }
    if (m->mlp) {
        in->vocab_size = m->mlp->output_dim;
        in->input_dim = m->mlp->input_dim;
        in->n_layers = m->mlp->n_layers;
        in->dim = m->mlp->max_width;
        in->has_class_names = m->mlp->class_names != NULL;
        in->input_scale = m->mlp->input_scale;
        in->input_offset = m->mlp->input_offset;
    }
    if (m->s2s) {
        in->vocab_size = m->s2s->tgt_vocab;
        in->src_vocab_size = m->s2s->src_vocab;
        in->context_length = m->s2s->max_len;
        in->dim = m->s2s->dim;
        in->n_layers = m->s2s->n_dec;
        in->n_enc_layers = m->s2s->n_enc;
        in->n_heads = in->n_kv_heads = m->s2s->n_heads;
        in->head_dim = m->s2s->head_dim;
        in->ffn_dim = m->s2s->ffn_dim;
        in->has_tokenizer = m->tok && m->tok_src;
    }
}

const char *qmap_model_class_name(const qmap_model *m, uint32_t i, size_t *len)
{
    const char *s;
    uint64_t n;
    if (len) *len = 0;
    if (!m || !m->mlp || !m->mlp->class_names || i >= m->mlp->output_dim) return NULL;
    if (qm_meta_array_string(m->mlp->class_names, i, &s, &n) != QM_OK) return NULL;
    if (len) *len = (size_t)n;
    return s;
}

/* The tokenizer stored under `prefix` ("tokenizer.", or a seq2seq model's "tokenizer.src." / "tokenizer.tgt.").
 * More tokens than `rows` (the embedding it feeds) is an error: their ids would index past it (spec/
 * ARCHITECTURES.md §9). Absent: *tok stays NULL and `why` gets `missing` (NULL: stays empty, "none stored").
 * One that fails to load does not stop the model from running on ids: `why` remembers the reason. */
static qm_status load_tokenizer(qmap_model *m, const char *prefix, uint32_t rows, const char *missing,
                                qr_tokenizer **tok, char *why, size_t why_cap, qm_error *e)
{
    char kind_key[QM_KEY_NAME_MAX], tokens_key[QM_KEY_NAME_MAX];
    qm_tok_key(kind_key, sizeof kind_key, prefix, QM_TOK_KIND);
    qm_tok_key(tokens_key, sizeof tokens_key, prefix, QM_TOK_TOKENS);
    if (!qm_find_meta(m->file, kind_key)) {
        if (missing) snprintf(why, why_cap, "%s", missing);
        return QM_OK;
    }
    const qm_meta *tokens = qm_find_meta(m->file, tokens_key);
    if (tokens && tokens->type == QM_META_ARRAY && tokens->count > rows)
        return qm_fail(e, QM_ERR_BAD_CONFIG, qm_file_path(m->file), tokens_key, tokens->entry_offset,
                       "the tokenizer has %llu tokens but the model's embedding only %u rows",
                       (unsigned long long)tokens->count, rows);
    qm_error te;
    qm_error_clear(&te);
    if (qr_tok_load(m->file, prefix, tok, &te) != QM_OK) snprintf(why, why_cap, "%s", te.message);
    return QM_OK;
}

/* Files smaller than this are left as they are cached: their page-table entries are few anyway. */
#define QA_LARGE_PAGES_MIN_BYTES ((uint64_t)64 << 20)
/* So many bytes in small pages are left as they are in any file (map_in_large_pages). */
#define QA_SMALL_PAGES_SLACK ((uint64_t)16 << 20)

/* Map every page of the file now, and if more than a sixteenth of it came in small entries, drop the
 * file's cached pages and map it again, reading it back through the MADV_HUGEPAGE mapping (qa_pages.h
 * says why). A part matters, not only most of the file: the page cache of a long-cached file ends up
 * mixed, and a file partly in small entries decodes measurably slower (docs/perf/2026-11-25-zen5.md).
 * The sixteenth, and at least QA_SMALL_PAGES_SLACK, leave room for the parts a 2 MiB entry does not cover
 * in a freshly read file (5.6-7.6 of the 110M Q8_ROW's 105.6 MiB), which would otherwise be re-read at
 * every open. Pages another process maps are not dropped, so a second process beside a running one costs
 * nothing. On failure *f is closed and NULL. */
static qm_status map_in_large_pages(const char *path, qm_file **f, qm_error *e)
{
    uint64_t size = qm_file_header(*f)->file_size;
    if (qa_pages_populate(qm_file_bytes(*f), (size_t)size) != 0 || size < QA_LARGE_PAGES_MIN_BYTES) return QM_OK;
    uint64_t pmd = qa_pages_pmd_bytes(qm_file_bytes(*f));
    if (pmd == UINT64_MAX || pmd >= size) return QM_OK;
    const uint64_t small = size - pmd;
    if (small <= size / 16 || small <= QA_SMALL_PAGES_SLACK) return QM_OK;
    qm_close(*f);
    *f = NULL;
    qa_pages_drop_cache(path);
    qm_status st = qm_open(path, f, e);
    if (st == QM_OK) (void)qa_pages_populate(qm_file_bytes(*f), (size_t)size);
    return st;
}

/* params->shard checked and copied into m (after m->lm is set): the families that can be split only. */
static qm_status take_shard(qmap_model *m, const qmap_shard *sh, const char *path, qm_error *e)
{
    if (!sh || sh->n_ranks <= 1) return QM_OK;
    if (sh->rank >= sh->n_ranks || !sh->allreduce_sum || !sh->allgather || !sh->allreduce_max)
        return qm_fail(e, QM_ERR_INVALID_ARGUMENT, path, NULL, QM_NO_OFFSET,
                       "qmap_model_params.shard: rank %u of %u ranks, or a function missing", sh->rank, sh->n_ranks);
    if (!m->lm || m->arch == QM_ARCH_GEMMA2)
        return qm_fail(e, QM_ERR_UNSUPPORTED, path, QM_KEY_ARCHITECTURE, QM_NO_OFFSET,
                       "a %s model cannot be run tensor-parallel (gpt2, gpt_neo and llama can)", m->arch_name);
    m->shard = (qr_shard){ .rank = sh->rank, .n_ranks = sh->n_ranks, .allreduce = sh->allreduce_sum,
                           .allgather = sh->allgather, .ctx = sh->ctx, .allreduce_max = sh->allreduce_max };
    return QM_OK;
}

qmap_status qmap_model_open(const char *path, const qmap_model_params *params, qmap_model **out, qmap_error *err)
{
    qmap_model_params defaults;
    if (!params) {
        qmap_model_params_default(&defaults);
        params = &defaults;
    }
    if (!out) return qa_fail(err, QMAP_ERR_INVALID_ARGUMENT, "qmap_model_open: out is NULL");
    *out = NULL;
    if (!path) return qa_fail(err, QMAP_ERR_INVALID_ARGUMENT, "qmap_model_open: path is NULL");

    qm_error e;
    qm_error_clear(&e);
    qmap_model *m = calloc(1, sizeof *m);
    if (!m) return qa_fail(err, QMAP_ERR_NOMEM, "%s: out of memory", path);
    m->mapped = !params->no_mmap;
    qm_status st = params->no_mmap ? qm_open_copy(path, &m->file, &e) : qm_open(path, &m->file, &e);
    if (st != QM_OK) goto fail;
    if (!params->no_mmap && params->large_pages && (st = map_in_large_pages(path, &m->file, &e)) != QM_OK)
        goto fail;
    if (params->verify) {
        qm_verify_opts vo = { .threads = params->threads, .full = false };
        if ((st = qm_verify(m->file, &vo, NULL, NULL, &e)) != QM_OK) goto fail;
    }

    /* general.architecture says which family reads the rest */
    const char *arch;
    uint64_t arch_len;
    st = qm_meta_get_string(m->file, QM_KEY_ARCHITECTURE, &arch, &arch_len);
    if (st != QM_OK) {
        st = qm_fail(&e, st == QM_ERR_NOT_FOUND ? QM_ERR_NOT_FOUND : QM_ERR_TYPE_MISMATCH, path, QM_KEY_ARCHITECTURE,
                     QM_NO_OFFSET, "metadata key missing or not a STRING: cannot tell which model this is");
        goto fail;
    }
    m->arch = qm_arch_from_name(arch, (size_t)arch_len);
    if (m->arch == QM_ARCH_COUNT) {
        st = qm_fail(&e, QM_ERR_UNKNOWN_ARCH, path, QM_KEY_ARCHITECTURE, QM_NO_OFFSET,
                     "architecture \"%.*s\" is not one this library runs (%s)",
                     (int)(arch_len > 64 ? 64 : arch_len), arch, qm_arch_list());
        goto fail;
    }
    snprintf(m->arch_name, sizeof m->arch_name, "%s", qm_arch_name(m->arch));
    char key[QM_KEY_NAME_MAX];
    qm_hparam_key(key, sizeof key, m->arch, QM_HP_VARIANT);
    copy_meta_string(m->file, key, m->variant, sizeof m->variant, m->arch_name);
    copy_meta_string(m->file, QM_KEY_FILE_TYPE, m->file_type, sizeof m->file_type, "");

    m->lm = qr_lm_family_for(m->arch);
    if ((st = take_shard(m, params->shard, path, &e)) != QM_OK) goto fail;
    if (m->lm) {
        qr_loader ld;
        qr_loader_init(&ld, m->file, m->arch, &e);
        ld.shard = &m->shard;
        st = m->lm->load(&ld, &m->weights, &m->hp);
        m->mats = ld.mats;  /* the model keeps the list; the loader is done */
        m->n_mats = ld.n_mats;
        if (st != QM_OK) goto fail;
    } else if (m->arch == QM_ARCH_MLP) {
        qr_loader ld;
        qr_loader_init(&ld, m->file, m->arch, &e);
        st = qr_mlp_load(&ld, &m->mlp);
        qr_loader_free(&ld);
        if (st != QM_OK) goto fail;
    } else if (m->arch == QM_ARCH_SEQ2SEQ) {
        qr_loader ld;
        qr_loader_init(&ld, m->file, m->arch, &e);
        st = qr_s2s_load(&ld, &m->s2s);
        m->mats = ld.mats;
        m->n_mats = ld.n_mats;
        if (st != QM_OK) goto fail;
        /* two vocabularies; either may be missing or unusable: the model still runs on ids, and whatever
         * needs text says which one is missing */
        if ((st = load_tokenizer(m, QM_TOK_PREFIX "src.", m->s2s->src_vocab,
                                 "the container has no tokenizer.src.* vocabulary (qmap convert --src-tokenizer "
                                 "PATH stores it)", &m->tok_src, m->tok_src_error, sizeof m->tok_src_error, &e)) ||
            (st = load_tokenizer(m, QM_TOK_PREFIX "tgt.", m->s2s->tgt_vocab,
                                 "the container has no tokenizer.tgt.* vocabulary (qmap convert --tgt-tokenizer "
                                 "PATH stores it)", &m->tok, m->tok_error, sizeof m->tok_error, &e)))
            goto fail;
    }

    /* a seq2seq model's two vocabularies were read above; every other model has at most one */
    if (!m->s2s && (st = load_tokenizer(m, QM_TOK_PREFIX, m->lm ? m->hp.vocab : UINT32_MAX, NULL, &m->tok,
                                        m->tok_error, sizeof m->tok_error, &e)))
        goto fail;
    fill_info(m);
    *out = m;
    return QMAP_OK;
fail:
    qmap_model_close(m);
    return qa_error_export(err, &e);
}

void qmap_model_close(qmap_model *m)
{
    if (!m) return;
    if (m->lm && m->weights) m->lm->free(m->weights);
    qr_mlp_free(m->mlp);
    qr_s2s_free(m->s2s);
    free(m->mats);
    qr_tok_free(m->tok);
    qr_tok_free(m->tok_src);
    qm_close(m->file);
    free(m);
}

void qmap_model_get_info(const qmap_model *m, qmap_model_info *out)
{
    if (m && out) *out = m->info;
}

uint64_t qmap_model_large_page_bytes(const qmap_model *m)
{
    if (!m || !m->mapped) return UINT64_MAX;
    const uint8_t *base = qm_file_bytes(m->file);
    return base ? qa_pages_pmd_bytes(base) : UINT64_MAX;
}

uint64_t qmap_model_resident_bytes(const qmap_model *m)
{
    if (!m) return 0;
    const uint8_t *base = qm_file_bytes(m->file);
    size_t size = (size_t)qm_file_header(m->file)->file_size;
    long page = sysconf(_SC_PAGESIZE);
    if (!base || page <= 0 || size == 0) return 0;
    size_t pages = (size + (size_t)page - 1) / (size_t)page;
    unsigned char *vec = malloc(pages);
    if (!vec) return 0;
    uint64_t resident = 0;
    if (mincore((void *)base, size, vec) == 0)
        for (size_t i = 0; i < pages; i++) resident += (vec[i] & 1) ? (uint64_t)page : 0;
    free(vec);
    return resident > size ? size : resident;
}
