/* qr_tok_encode.c — text → ids and id → text for the stored tokenizer (spec/TOKENIZER.md §3). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "qr_tok_internal.h"

/* ---- UTF-8 ----------------------------------------------------------------------------------------- */

/* Length of the well-formed sequence at s (RFC 3629), or 0 if none starts there. */
static size_t utf8_seq(const uint8_t *s, size_t n)
{
    uint8_t c = s[0];
    if (c < 0x80) return 1;
    size_t k = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
    if (!k || k > n) return 0;
    for (size_t i = 1; i < k; i++) if ((s[i] & 0xc0) != 0x80) return 0;
    if (c == 0xe0 && s[1] < 0xa0) return 0;          /* overlong */
    if (c == 0xed && s[1] > 0x9f) return 0;          /* surrogates */
    if (c == 0xf0 && s[1] < 0x90) return 0;          /* overlong */
    if (c == 0xf4 && s[1] > 0x8f) return 0;          /* above U+10FFFF */
    return k;
}

/* ---- encoding ------------------------------------------------------------------------------------- */

/* A cache of recent words, per encode call (the tokenizer itself stays immutable and shared by threads):
 * running text repeats its words, and a word's ids depend on its bytes alone, so a hit skips the lookups
 * and the merging. Direct-mapped: a slot holds the last short word that hashed to it. Made only for texts
 * long enough to repay its 256 KB. */
#define WC_SLOTS     4096
#define WC_MAX_BYTES 22
#define WC_MAX_IDS   8
#ifndef QR_TOK_WC_MIN_TEXT   /* the fuzz build lowers it, so that its short inputs go through the cache */
#define QR_TOK_WC_MIN_TEXT 4096
#endif
typedef struct wc_slot {
    uint32_t hash;
    uint8_t len, n_ids;          /* len 0: empty */
    char s[WC_MAX_BYTES];
    int32_t ids[WC_MAX_IDS];
} wc_slot;

/* The work the pre-split pattern may do on one text, in PCRE2 match-limit units (backtracking steps): a
 * match limit bounds one pcre2_match call, not the text, and a pattern like (x+x+)+y|. can take up to the
 * limit at every byte. So each call starts with a small limit and retries with a four times larger one
 * while it hits it (never above PCRE2's default per call), every attempt charged in full to the text's
 * budget: RE_STEPS_BASE + RE_STEPS_PER_BYTE per byte. GPT-2's and Llama-3's patterns need a few dozen
 * steps per match; when the budget runs out, encoding fails naming the pattern, since the rest of the
 * text could not be split as the pattern says. */
#define RE_STEPS_FIRST    256u
#define RE_STEPS_CALL_MAX 10000000u
#define RE_STEPS_PER_BYTE 2048u
#define RE_STEPS_BASE     ((uint64_t)1 << 24)

typedef struct enc {
    const qr_tokenizer *t;
    int32_t *ids;
    size_t cap, n;
    qr_bpe_work w;
    char *buf;                   /* a rewritten segment (prefix space, ▁): 8 bytes per input byte + 16 */
    size_t buf_cap;
    pcre2_match_data *md;
    pcre2_match_context *mc;     /* the per-call match limit of the pre-split pattern */
    uint64_t re_budget;          /* match steps the pattern may still take on this text */
    wc_slot *wc;                 /* NULL: no cache (short text) */
    qm_error *err;
    bool oom;
    bool failed;                 /* an error other than memory, already in *err */
} enc;

static bool enc_ok(const enc *e) { return !e->oom && !e->failed; }

static void emit(enc *e, int32_t id)
{
    if (e->n < e->cap) e->ids[e->n] = id;
    e->n++;
}

static uint32_t wc_hash(const char *p, size_t n)
{
    uint32_t h = 2166136261u;   /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)p[i]) * 16777619u;
    return h;
}

/* Emit the cached ids of word p[0..n) and return true, or return false (a miss). */
static bool wc_emit(enc *e, const char *p, size_t n, uint32_t h)
{
    const wc_slot *s = &e->wc[h & (WC_SLOTS - 1)];
    if (s->len != n || s->hash != h || memcmp(s->s, p, n)) return false;
    for (uint32_t i = 0; i < s->n_ids; i++) emit(e, s->ids[i]);
    return true;
}

/* Remember the ids emitted for word p[0..n) since e->n was `from`, when they fit a slot. */
static void wc_put(enc *e, const char *p, size_t n, uint32_t h, size_t from)
{
    size_t k = e->n - from;
    if (k > WC_MAX_IDS || e->n > e->cap) return;
    wc_slot *s = &e->wc[h & (WC_SLOTS - 1)];
    s->hash = h;
    s->len = (uint8_t)n;
    s->n_ids = (uint8_t)k;
    memcpy(s->s, p, n);
    memcpy(s->ids, e->ids + from, k * sizeof *e->ids);
}

/* The symbols w.id[0..n) merged and emitted; a -1 symbol (no token for it) becomes unk. */
static void merge_emit(enc *e, size_t n)
{
    bool missing = false;
    for (size_t i = 0; i < n; i++) missing |= e->w.id[i] < 0;
    if (missing) {   /* merges are between tokens only: runs without a token stay apart as unk */
        for (size_t i = 0; i < n; i++) if (e->w.id[i] < 0) e->w.id[i] = e->t->unk;
    }
    size_t m = qr_bpe_merge(e->t, &e->w, n);
    for (size_t i = 0; i < m; i++) emit(e, e->w.id[i]);
}

typedef void word_fn(enc *e, const uint8_t *p, size_t n);

/* word(e, p, n) through the word cache: a hit emits the cached ids, a miss computes and remembers them. */
static void cached(enc *e, const uint8_t *p, size_t n, word_fn *word)
{
    if (!e->wc || !n || n > WC_MAX_BYTES) { word(e, p, n); return; }
    uint32_t h = wc_hash((const char *)p, n);
    if (wc_emit(e, (const char *)p, n, h)) return;
    size_t from = e->n;
    word(e, p, n);
    if (!e->oom) wc_put(e, (const char *)p, n, h, from);
}

static void bytelevel_word(enc *e, const uint8_t *p, size_t n);

/* §3.2: one pre-split piece of a byte-level BPE, through the word cache when there is one. */
static void bytelevel_piece(enc *e, const uint8_t *p, size_t n) { cached(e, p, n, bytelevel_word); }

/* The piece's bytes as GPT-2 characters, then merges. */
static void bytelevel_word(enc *e, const uint8_t *p, size_t n)
{
    const qr_tokenizer *t = e->t;
    if (!n) return;
    if (!qr_bpe_reserve(&e->w, n)) { e->oom = true; return; }
    if (t->ignore_merges) {
        char *m = e->buf + 4 * n + 8;   /* the mapped piece, after the segment's copy */
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
            int32_t id = t->byte_id[p[i]];
            if (id < 0) { k = 0; break; }
            memcpy(m + k, t->str[id], t->len[id]);
            k += t->len[id];
        }
        int32_t whole = k ? qr_tok_lookup(t, m, k) : -1;
        if (whole >= 0) { emit(e, whole); return; }
    }
    for (size_t i = 0; i < n; i++) e->w.id[i] = t->byte_id[p[i]];
    merge_emit(e, n);
}

/* §3.4: a word-level piece is looked up whole. */
static void word_piece(enc *e, const uint8_t *p, size_t n)
{
    if (!n) return;
    int32_t id = qr_tok_lookup(e->t, (const char *)p, n);
    emit(e, id >= 0 ? id : e->t->unk);
}

/* pcre2_match of the pre-split pattern at `at`, within the text's budget (RE_STEPS_*). A negative result
 * other than PCRE2_ERROR_NOMATCH (the budget, or another PCRE2 limit) fails the encoding: e->failed. */
static int match_bounded(enc *e, const uint8_t *s, size_t n, size_t at)
{
    const qr_tokenizer *t = e->t;
    uint32_t limit = RE_STEPS_FIRST;
    for (;;) {
        uint32_t take = e->re_budget < limit ? (uint32_t)e->re_budget : limit;
        pcre2_set_match_limit(e->mc, take ? take : 1);
        int rc = pcre2_match(t->re, (PCRE2_SPTR)s, n, at, at ? PCRE2_NO_UTF_CHECK : 0, e->md, e->mc);
        e->re_budget -= take;
        if (rc >= 0 || rc == PCRE2_ERROR_NOMATCH) return rc;
        if (rc == PCRE2_ERROR_MATCHLIMIT && take == limit && limit < RE_STEPS_CALL_MAX && e->re_budget) {
            limit = limit > RE_STEPS_CALL_MAX / 4 ? RE_STEPS_CALL_MAX : limit * 4;
            continue;
        }
        PCRE2_UCHAR msg[120];
        pcre2_get_error_message(rc, msg, sizeof msg);
        e->failed = true;
        qm_fail(e->err, QM_ERR_BAD_CONFIG, NULL, t->re_key, QM_NO_OFFSET,
                "pattern \"%.*s%s\" stopped at byte %zu of a %zu-byte segment: it needs more matching steps than "
                "allowed (%u per match, %u per byte of text; PCRE2: %s); the text is not tokenized rather than "
                "split otherwise than the pattern says",
                (int)(t->re_len > 48 ? 48 : t->re_len), t->re_src, t->re_len > 48 ? "..." : "", at, n,
                RE_STEPS_CALL_MAX, RE_STEPS_PER_BYTE, (const char *)msg);
        return rc;
    }
}

/* Split s[0..n) into the matches of the pre-split pattern and the text between them; each is a piece. */
static void split_pieces(enc *e, const uint8_t *s, size_t n, void (*piece)(enc *, const uint8_t *, size_t),
                         bool keep_gaps)
{
    const qr_tokenizer *t = e->t;
    if (!t->re) {
        if (keep_gaps) { piece(e, s, n); return; }
        for (size_t i = 0; i < n;) {   /* \S+ over ASCII whitespace */
            while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r' || s[i] == '\f' || s[i] == '\v')) i++;
            size_t j = i;
            while (j < n && !(s[j] == ' ' || s[j] == '\t' || s[j] == '\n' || s[j] == '\r' || s[j] == '\f' || s[j] == '\v')) j++;
            if (j > i) piece(e, s + i, j - i);
            i = j;
        }
        return;
    }
    size_t at = 0, done = 0;
    while (at <= n) {
        int rc = match_bounded(e, s, n, at);
        if (e->failed) return;
        if (rc < 0) break;   /* no more matches */
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(e->md);
        size_t a = ov[0], b = ov[1];
        if (b == a) {        /* an empty match: step over one character */
            at = a + (a < n ? (utf8_seq(s + a, n - a) ? utf8_seq(s + a, n - a) : 1) : 1);
            continue;
        }
        if (a > done && keep_gaps) piece(e, s + done, a - done);
        piece(e, s + a, b - a);
        done = at = b;
    }
    if (done < n && keep_gaps) piece(e, s + done, n - done);
}

/* One SentencePiece word (or a whole segment): its characters as tokens, or their <0xXX> bytes with byte
 * fallback, then merges. The symbol scratch is reserved by the caller. */
static void sp_word(enc *e, const uint8_t *w, size_t k)
{
    const qr_tokenizer *t = e->t;
    const char *b = (const char *)w;
    size_t m = 0;
    for (size_t i = 0; i < k;) {
        size_t c = utf8_seq((const uint8_t *)b + i, k - i);
        int32_t id = qr_tok_lookup(t, b + i, c);
        if (id >= 0) e->w.id[m++] = id;
        else if (t->byte_fallback)
            for (size_t j = 0; j < c; j++) {
                int32_t bid = t->byte_id[(uint8_t)b[i + j]];
                e->w.id[m++] = bid >= 0 ? bid : t->unk;
            }
        else e->w.id[m++] = t->unk;
        i += c;
    }
    merge_emit(e, m);
}

/* §3.3 on s[0..n): ' ' → ▁, a ▁ first if `prefix`, then BPE over the characters with byte fallback. */
static void sentencepiece_chunk(enc *e, const uint8_t *s, size_t n, bool prefix)
{
    const qr_tokenizer *t = e->t;
    char *b = e->buf;
    size_t k = 0;
    if (prefix) {
        memcpy(b, "\xe2\x96\x81", 3);
        k = 3;
    }
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ' ') { memcpy(b + k, "\xe2\x96\x81", 3); k += 3; }
        else b[k++] = (char)s[i];
    }
    if (!qr_bpe_reserve(&e->w, 4 * k + 4)) { e->oom = true; return; }
    if (!t->sp_word_split) { sp_word(e, (const uint8_t *)b, k); return; }
    /* No token holds a character followed by ▁ (checked at load): no merge can join across the start of a
     * ▁ run, so each word (a ▁ run and what follows it up to the next ▁ run) merges on its own — the same
     * ids as one merge over the segment, faster, and cacheable. */
    size_t start = 0;
    bool prev_space = false;
    for (size_t i = 0; i < k;) {
        size_t c = utf8_seq((const uint8_t *)b + i, k - i);
        bool space = c == 3 && !memcmp(b + i, "\xe2\x96\x81", 3);
        if (space && !prev_space && i > start) {
            cached(e, (const uint8_t *)b + start, i - start, sp_word);
            start = i;
        }
        prev_space = space;
        i += c;
    }
    if (k > start) cached(e, (const uint8_t *)b + start, k - start, sp_word);
}

/* Input bytes one SentencePiece pass rewrites and merges at most when words merge apart, so that its
 * scratch (3 bytes of rewritten text and 4 merge slots of 36 bytes per input byte, rounded up to a power
 * of two) stays bounded however long the text: for a whole 100 MB segment it would be 36 GiB. */
#ifndef QR_TOK_SP_CHUNK_BYTES   /* the fuzz build lowers it, so that its short inputs cross chunk boundaries */
#define QR_TOK_SP_CHUNK_BYTES (16u << 10)
#endif
#define SP_CHUNK_BYTES QR_TOK_SP_CHUNK_BYTES

/* True if a word starts at s[j]: a space (a ▁ once rewritten) after a character that is neither a space
 * nor a literal ▁, i.e. where sentencepiece_chunk would cut the rewritten text into words anyway. */
static bool sp_word_start(const uint8_t *s, size_t j)
{
    if (s[j] != ' ' || s[j - 1] == ' ') return false;
    return !(j >= 3 && !memcmp(s + j - 3, "\xe2\x96\x81", 3));
}

/* The end of the chunk that starts at `start`: the last word start within SP_CHUNK_BYTES, else the first
 * after it (one long word stays whole), else n. */
static size_t sp_chunk_end(const uint8_t *s, size_t n, size_t start)
{
    if (n - start <= SP_CHUNK_BYTES) return n;
    for (size_t j = start + SP_CHUNK_BYTES; j > start + 1; j--)
        if (sp_word_start(s, j)) return j;
    for (size_t j = start + SP_CHUNK_BYTES + 1; j < n; j++)
        if (sp_word_start(s, j)) return j;
    return n;
}

/* §3.3 on a segment (the text between added tokens). When words merge apart, in chunks cut at word starts:
 * the ids are those of the whole segment, since no merge crosses a word start. Otherwise in one pass. */
static void sentencepiece_segment(enc *e, const uint8_t *s, size_t n, bool at_input_start)
{
    const qr_tokenizer *t = e->t;
    bool prefix = t->prepend == QR_PREPEND_ALWAYS || (t->prepend == QR_PREPEND_FIRST && at_input_start);
    if (!t->sp_word_split) { sentencepiece_chunk(e, s, n, prefix); return; }
    for (size_t start = 0; start < n && enc_ok(e);) {
        size_t end = sp_chunk_end(s, n, start);
        sentencepiece_chunk(e, s + start, end - start, prefix && start == 0);
        start = end;
    }
}

static void segment(enc *e, const uint8_t *s, size_t n, bool at_input_start)
{
    const qr_tokenizer *t = e->t;
    if (!n) return;
    uint8_t *normalized = NULL;
    if (t->n_norm) {   /* §3.1 step 2: the normalizer first; it may lengthen the text (NFKD: several-fold) */
        size_t m = 0;
        normalized = qr_norm_apply(t->norm, t->n_norm, s, n, &m);
        if (!normalized) { e->oom = true; return; }
        if (m > (SIZE_MAX - 16) / 8) { free(normalized); e->oom = true; return; }
        if (8 * m + 16 > e->buf_cap) {
            char *b = realloc(e->buf, 8 * m + 16);
            if (!b) { free(normalized); e->oom = true; return; }
            e->buf = b;
            e->buf_cap = 8 * m + 16;
        }
        s = normalized;
        n = m;
    }
    if (n) switch (t->kind) {
    case QR_TOK_BYTELEVEL:
        if (t->add_prefix_space && s[0] != ' ') {
            e->buf[0] = ' ';
            memcpy(e->buf + 1, s, n);
            split_pieces(e, (const uint8_t *)e->buf, n + 1, bytelevel_piece, true);
        } else {
            split_pieces(e, s, n, bytelevel_piece, true);
        }
        break;
    case QR_TOK_SENTENCEPIECE: sentencepiece_segment(e, s, n, at_input_start); break;
    case QR_TOK_WORDLEVEL: split_pieces(e, s, n, word_piece, false); break;
    }
    free(normalized);
}

qm_status qr_tok_encode(const qr_tokenizer *t, const char *text, size_t len, bool add_special, int32_t *ids,
                        size_t cap, size_t *n_ids, qm_error *err)
{
    *n_ids = 0;
    const uint8_t *s = (const uint8_t *)text;
    for (size_t i = 0; i < len;) {   /* the whole input first: never read a broken sequence later */
        size_t k = utf8_seq(s + i, len - i);
        if (!k) return qm_fail(err, QM_ERR_BAD_UTF8, NULL, "text", i, "the text is not valid UTF-8 at byte %zu", i);
        i += k;
    }
    if (len > ((size_t)1 << 32)) return qm_fail(err, QM_ERR_INVALID_ARGUMENT, NULL, "text", QM_NO_OFFSET, "text above 4 GiB");
    enc e = { .t = t, .ids = ids, .cap = cap, .err = err };
    e.buf_cap = 8 * len + 16;
    e.buf = malloc(e.buf_cap);
    if (t->re) {
        e.md = pcre2_match_data_create_from_pattern(t->re, NULL);
        e.mc = pcre2_match_context_create(NULL);
        e.re_budget = RE_STEPS_BASE + (uint64_t)RE_STEPS_PER_BYTE * len;
    }
    if (!e.buf || (t->re && (!e.md || !e.mc))) e.oom = true;
    if (len >= QR_TOK_WC_MIN_TEXT && t->kind != QR_TOK_WORDLEVEL) e.wc = calloc(WC_SLOTS, sizeof *e.wc);   /* NULL: no cache */
    if (enc_ok(&e) && add_special && t->add_bos) emit(&e, t->bos);
    size_t seg = 0;
    for (size_t i = 0; i < len && enc_ok(&e);) {   /* §3.1: added tokens first, longest then lowest id */
        int32_t hit = -1;
        if (t->added_first[s[i]])
            for (uint32_t a = 0; a < t->n_added; a++) {
                uint32_t id = t->added[a];
                if (t->len[id] && t->len[id] <= len - i && !memcmp(s + i, t->str[id], t->len[id])) { hit = (int32_t)id; break; }
            }
        if (hit < 0) { i++; continue; }
        segment(&e, s + seg, i - seg, seg == 0);
        emit(&e, hit);
        i += t->len[hit];
        seg = i;
    }
    if (enc_ok(&e)) segment(&e, s + seg, len - seg, seg == 0);
    if (enc_ok(&e) && add_special && t->add_eos) emit(&e, t->eos);
    qr_bpe_free(&e.w);
    free(e.wc);
    free(e.buf);
    pcre2_match_data_free(e.md);
    pcre2_match_context_free(e.mc);
    if (e.failed) return QM_ERR_BAD_CONFIG;   /* match_bounded wrote the message */
    if (e.oom) return qm_fail(err, QM_ERR_NOMEM, NULL, NULL, QM_NO_OFFSET, "out of memory encoding %zu bytes", len);
    for (size_t i = 0; i < e.n && i < cap; i++)
        if (ids[i] < 0)
            return qm_fail(err, QM_ERR_BAD_CONFIG, NULL, "unk_id", QM_NO_OFFSET,
                           "the text has a piece with no token and the tokenizer states no unk_id");
    *n_ids = e.n;
    if (e.n > cap)
        return qm_fail(err, QM_ERR_INVALID_ARGUMENT, NULL, NULL, QM_NO_OFFSET,
                       "the text needs %zu ids, the buffer holds %zu", e.n, cap);
    return QM_OK;
}

/* ---- decoding ------------------------------------------------------------------------------------- */

#define DT_STARTED 1u   /* a token was decoded: sentencepiece's leading space is gone, wordlevel joins */

typedef struct sink { qr_detok *st; char *out; size_t n; } sink;

static void put_fffd(sink *k)
{
    memcpy(k->out + k->n, "\xef\xbf\xbd", 3);
    k->n += 3;
}

/* Feed one byte: complete characters are written, bytes that cannot be part of one become U+FFFD, the
 * start of a character waits in st->pending. */
static void sink_byte(sink *k, uint8_t b)
{
    qr_detok *st = k->st;
    for (;;) {
        if (st->n_pending) {
            if ((b & 0xc0) == 0x80) {
                st->pending[st->n_pending++] = b;
                size_t need = st->pending[0] >= 0xf0 ? 4 : st->pending[0] >= 0xe0 ? 3 : 2;
                if (st->n_pending < need) {
                    /* reject early what can never complete (overlong, surrogate, above U+10FFFF) */
                    uint8_t c = st->pending[0], c1 = st->pending[1];
                    if ((c == 0xe0 && c1 < 0xa0) || (c == 0xed && c1 > 0x9f) || (c == 0xf0 && c1 < 0x90) ||
                        (c == 0xf4 && c1 > 0x8f)) {
                        put_fffd(k);
                        st->n_pending = 0;
                    }
                    return;
                }
                if (utf8_seq(st->pending, need) == need) {
                    memcpy(k->out + k->n, st->pending, need);
                    k->n += need;
                } else {
                    put_fffd(k);
                }
                st->n_pending = 0;
                return;
            }
            put_fffd(k);        /* an interrupted character; b starts afresh */
            st->n_pending = 0;
            continue;
        }
        if (b < 0x80) { k->out[k->n++] = (char)b; return; }
        if (b >= 0xc2 && b <= 0xf4) { st->pending[0] = b; st->n_pending = 1; return; }
        put_fffd(k);
        return;
    }
}

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

qm_status qr_tok_decode(const qr_tokenizer *t, qr_detok *st, int32_t id, char *out, size_t cap, size_t *n_out,
                        qm_error *err)
{
    *n_out = 0;
    if (id < 0 || (uint32_t)id >= t->n)
        return qm_fail(err, QM_ERR_INVALID_ARGUMENT, NULL, NULL, QM_NO_OFFSET, "token id %d is outside the vocabulary of %u", id, t->n);
    const char *s = t->str[id];
    size_t n = t->len[id];
    if (cap < 3 * ((size_t)st->n_pending + n + 1) + 3)   /* every byte may become U+FFFD */
        return qm_fail(err, QM_ERR_INVALID_ARGUMENT, NULL, NULL, QM_NO_OFFSET,
                       "decode buffer of %zu bytes is too small for token %d (needs %zu)", cap, id,
                       3 * ((size_t)st->n_pending + n + 1) + 3);
    sink k = { st, out, 0 };
    bool first = !(st->flags & DT_STARTED);
    st->flags |= DT_STARTED;
    if (t->is_added[id]) {                                   /* added tokens are their own text */
        for (size_t i = 0; i < n; i++) sink_byte(&k, (uint8_t)s[i]);
    } else if (t->kind == QR_TOK_BYTELEVEL) {                /* characters back to the bytes they stand for */
        for (size_t i = 0; i < n;) {
            size_t c = utf8_seq((const uint8_t *)s + i, n - i);
            if (!c) c = 1;
            uint32_t cp = c == 1 ? (uint8_t)s[i] : c == 2 ? ((uint32_t)(s[i] & 0x1f) << 6 | (s[i + 1] & 0x3f)) : 0xffff;
            if (cp < 0x144 && t->char_byte[cp] != 0xffff) sink_byte(&k, (uint8_t)t->char_byte[cp]);
            else for (size_t j = 0; j < c; j++) sink_byte(&k, (uint8_t)s[i + j]);
            i += c;
        }
    } else if (t->kind == QR_TOK_SENTENCEPIECE) {
        if (n == 6 && s[0] == '<' && s[1] == '0' && s[2] == 'x' && s[5] == '>' && hexval(s[3]) >= 0 && hexval(s[4]) >= 0) {
            sink_byte(&k, (uint8_t)(hexval(s[3]) << 4 | hexval(s[4])));   /* byte fallback */
        } else {
            for (size_t i = 0; i < n;) {
                bool space = n - i >= 3 && !memcmp(s + i, "\xe2\x96\x81", 3);
                /* the prefix space the encoder added is not part of the text */
                if (!(space && first && i == 0 && t->add_prefix_space)) {
                    if (space) sink_byte(&k, ' ');
                    else sink_byte(&k, (uint8_t)s[i]);
                }
                i += space ? 3 : 1;
            }
        }
    } else {                                                 /* wordlevel: tokens joined by single spaces */
        if (!first) sink_byte(&k, ' ');
        for (size_t i = 0; i < n; i++) sink_byte(&k, (uint8_t)s[i]);
    }
    *n_out = k.n;
    return QM_OK;
}

size_t qr_tok_decode_flush(qr_detok *st, char *out, size_t cap)
{
    size_t n = 0;
    if (st->n_pending && cap >= 3) {
        memcpy(out, "\xef\xbf\xbd", 3);
        n = 3;
    }
    st->n_pending = 0;
    st->flags = 0;
    return n;
}
