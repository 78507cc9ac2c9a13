/* ppl_logits.c — saved log-probabilities for `qmap perplexity` (format in ppl_logits.h). */
#include "ppl_logits.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "qm_fileio.h"

static const char magic[8] = { 'Q', 'M', 'A', 'P', 'L', 'O', 'G', 'P' };

uint64_t ppl_hash_ids(uint64_t h, const int32_t *ids, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t v = (uint32_t)ids[i];
        for (int b = 0; b < 4; b++) {
            h ^= (v >> (8 * b)) & 0xffu;
            h *= 0x100000001b3ull;
        }
    }
    return h;
}

static void put32(uint8_t *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static void put64(uint8_t *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static uint32_t get32(const uint8_t *p) { uint32_t v = 0; for (int i = 3; i >= 0; i--) v = v << 8 | p[i]; return v; }
static uint64_t get64(const uint8_t *p) { uint64_t v = 0; for (int i = 7; i >= 0; i--) v = v << 8 | p[i]; return v; }

static uint64_t per_chunk(const ppl_logits_meta *m) { return m->ctx > m->first + 1 ? m->ctx - 1 - m->first : 0; }

struct ppl_logits_writer {
    qm_outfile out;   /* the temporary file, renamed onto the destination by finish */
    float *row;
    uint32_t n_vocab;
    uint64_t left;   /* tokens still to write */
};

ppl_logits_writer *ppl_logits_create(const char *path, const ppl_logits_meta *meta, char *msg, size_t msg_cap)
{
    ppl_logits_writer *w = calloc(1, sizeof *w);
    if (w) w->out.fd = -1;
    if (!w || !(w->row = malloc((size_t)meta->n_vocab * sizeof *w->row))) {
        snprintf(msg, msg_cap, "out of memory");
        ppl_logits_abort(w);
        return NULL;
    }
    w->n_vocab = meta->n_vocab;
    w->left = meta->n_chunks * per_chunk(meta);
    uint8_t h[PPL_LOGITS_HEADER] = { 0 };
    memcpy(h, magic, 8);
    put32(h + 8, 1);
    put32(h + 12, meta->n_vocab);
    put32(h + 16, meta->ctx);
    put32(h + 20, meta->first);
    put64(h + 24, meta->n_chunks);
    put64(h + 32, meta->tokens_hash);
    qm_error e;
    if (qm_outfile_create(&w->out, path, &e) != QM_OK || qm_outfile_write(&w->out, h, sizeof h, &e) != QM_OK) {
        snprintf(msg, msg_cap, "%s", e.message);
        ppl_logits_abort(w);
        return NULL;
    }
    return w;
}

bool ppl_logits_put(ppl_logits_writer *w, const float *logits, char *msg, size_t msg_cap)
{
    if (!w->left) {
        snprintf(msg, msg_cap, "%s: more tokens than the header announces", w->out.path);
        return false;
    }
    float mx = logits[0];
    for (uint32_t i = 1; i < w->n_vocab; i++) mx = logits[i] > mx ? logits[i] : mx;
    double sum = 0;
    for (uint32_t i = 0; i < w->n_vocab; i++) sum += exp((double)logits[i] - mx);
    double lse = mx + log(sum);
    for (uint32_t i = 0; i < w->n_vocab; i++) w->row[i] = (float)(logits[i] - lse);
    qm_error e;
    if (qm_outfile_write(&w->out, w->row, (size_t)w->n_vocab * sizeof *w->row, &e) != QM_OK) {
        snprintf(msg, msg_cap, "%s", e.message);
        return false;
    }
    w->left--;
    return true;
}

bool ppl_logits_finish(ppl_logits_writer *w, char *msg, size_t msg_cap)
{
    bool ok = false;
    qm_error e;
    if (w->left) snprintf(msg, msg_cap, "%s: %llu tokens were never written", w->out.path, (unsigned long long)w->left);
    else if (qm_outfile_commit(&w->out, &e) != QM_OK) snprintf(msg, msg_cap, "%s", e.message);
    else ok = true;
    ppl_logits_abort(w);
    return ok;
}

void ppl_logits_abort(ppl_logits_writer *w)
{
    if (!w) return;
    qm_outfile_abort(&w->out);
    free(w->row);
    free(w);
}

struct ppl_logits_reader {
    FILE *fp;
    char *path;
    float *row;
    uint32_t n_vocab;
    uint64_t left;
};

bool ppl_logits_sniff(const char *path)
{
    char b[8];
    int fd = qm_open_regular(path, NULL, NULL);
    if (fd < 0) return false;
    bool yes = read(fd, b, 8) == 8 && !memcmp(b, magic, 8);
    close(fd);
    return yes;
}

ppl_logits_reader *ppl_logits_open(const char *path, const ppl_logits_meta *want, char *msg, size_t msg_cap)
{
    ppl_logits_reader *r = calloc(1, sizeof *r);
    if (!r || !(r->path = strdup(path)) || !(r->row = malloc((size_t)want->n_vocab * sizeof *r->row))) {
        snprintf(msg, msg_cap, "out of memory");
        ppl_logits_close(r);
        return NULL;
    }
    uint8_t h[PPL_LOGITS_HEADER];
    struct stat sb;
    qm_error e;
    int fd = qm_open_regular(path, &sb, &e);
    if (fd < 0 || !(r->fp = fdopen(fd, "rb"))) {
        snprintf(msg, msg_cap, "%s", fd < 0 ? e.message : strerror(errno));
        if (fd >= 0) close(fd);
        ppl_logits_close(r);
        return NULL;
    }
    const char *why = NULL;
    ppl_logits_meta got = { 0 };
    if (fread(h, 1, sizeof h, r->fp) != sizeof h || memcmp(h, magic, 8)) why = "not a logits file of qmap perplexity";
    else if (get32(h + 8) != 1) why = "a logits file of another version";
    else {
        got = (ppl_logits_meta){ get32(h + 12), get32(h + 16), get32(h + 20), get64(h + 24), get64(h + 32) };
        if (got.n_vocab != want->n_vocab) why = "computed for another vocabulary size";
        else if (got.ctx != want->ctx || got.first != want->first) why = "computed with another -c";
        else if (got.n_chunks != want->n_chunks) why = "computed over another number of windows (--chunks, or another text)";
        else if (got.tokens_hash != want->tokens_hash) why = "computed on another text or with another tokenizer";
    }
    uint64_t rows = want->n_chunks * per_chunk(want);
    if (!why && ((uint64_t)sb.st_size < PPL_LOGITS_HEADER ||
                 (uint64_t)sb.st_size - PPL_LOGITS_HEADER != rows * want->n_vocab * sizeof(float)))
        why = "truncated or padded: its size does not match its header";
    if (why) {
        snprintf(msg, msg_cap, "%s: %s (it has vocabulary %u, -c %u, %llu windows; this run %u, %u, %llu)", path, why,
                 got.n_vocab, got.ctx, (unsigned long long)got.n_chunks, want->n_vocab, want->ctx,
                 (unsigned long long)want->n_chunks);
        ppl_logits_close(r);
        return NULL;
    }
    r->n_vocab = want->n_vocab;
    r->left = rows;
    return r;
}

const float *ppl_logits_next(ppl_logits_reader *r, char *msg, size_t msg_cap)
{
    if (!r->left || fread(r->row, sizeof *r->row, r->n_vocab, r->fp) != r->n_vocab) {
        snprintf(msg, msg_cap, "%s: cannot read the next token's log-probabilities (the file changed?)", r->path);
        return NULL;
    }
    r->left--;
    return r->row;
}

void ppl_logits_close(ppl_logits_reader *r)
{
    if (!r) return;
    if (r->fp) fclose(r->fp);
    free(r->path);
    free(r->row);
    free(r);
}
