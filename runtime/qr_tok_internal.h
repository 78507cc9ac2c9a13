/* qr_tok_internal.h — what the tokenizer's two files share: the loaded tokenizer, the string → id table,
 * the merge table and the BPE merge engine (qr_tok_bpe.c), used by the kinds' front ends (qr_tok.c). */
#ifndef QR_TOK_INTERNAL_H
#define QR_TOK_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "qr_tok.h"

typedef enum qr_tok_kind { QR_TOK_BYTELEVEL, QR_TOK_SENTENCEPIECE, QR_TOK_WORDLEVEL } qr_tok_kind;
typedef enum qr_prepend { QR_PREPEND_NEVER, QR_PREPEND_FIRST, QR_PREPEND_ALWAYS } qr_prepend;
/* The steps of the `normalizer` key (spec §1), applied in order. */
typedef enum qr_norm_step { QR_NORM_NFC, QR_NORM_NFD, QR_NORM_NFKC, QR_NORM_NFKD, QR_NORM_LOWERCASE } qr_norm_step;
#define QR_NORM_MAX 8

struct qr_tokenizer {
    qr_tok_kind kind;
    uint32_t n;                  /* tokens */
    const char **str;            /* [n] token strings, into the mapping (not NUL-terminated) */
    uint32_t *len;               /* [n] their lengths */
    uint32_t *table;             /* string → id: open addressing, UINT32_MAX = empty; mask + 1 slots */
    uint32_t table_mask;
    uint64_t *merge_key;         /* (left id << 32 | right id) → slot; UINT64_MAX = empty */
    uint32_t *merge_rank, *merge_result;
    uint32_t merge_mask;
    uint32_t *added;             /* added-token ids, longest string first */
    uint32_t n_added;
    uint8_t *is_added;           /* [n]: 1 for added tokens (decoded as their text) */
    uint8_t added_first[256];    /* 1 for a byte some added token starts with: the fast test of the split */
    uint16_t char_byte[0x144];   /* bytelevel: code point -> the byte it stands for; 0xffff: none */
    int32_t byte_id[256];        /* bytelevel: the token of each byte's character; sentencepiece: <0xXX>; -1 */
    int32_t bos, eos, unk;
    bool add_bos, add_eos, add_prefix_space, byte_fallback, ignore_merges;
    bool sp_word_split;          /* sentencepiece: no token has a character then ▁, so words merge apart */
    qr_prepend prepend;
    qr_norm_step norm[QR_NORM_MAX];  /* normalizer steps; none: n_norm = 0 */
    uint32_t n_norm;
    pcre2_code *re;              /* pre_split, JIT-compiled when the JIT is there; NULL: none */
    const char *re_src;          /* its pattern, in the mapping (re_len bytes), and its key: for messages */
    size_t re_len;
    char re_key[96];
};

/* Id of the token whose string is s (n bytes), or -1. */
int32_t qr_tok_lookup(const qr_tokenizer *t, const char *s, size_t n);

/* Build the string → id table (lowest id wins for duplicate strings, spec §1) and the merge table from the
 * `merges` strings ("left right"); every part and result must be a token (else QM_ERR_BAD_CONFIG naming the
 * merge). */
qm_status qr_tok_build_tables(qr_tokenizer *t, const qm_meta *merges, const char *path, qm_error *err);

/* Scratch of one encode call. */
typedef struct qr_bpe_work {
    int32_t *id;                 /* symbols of the current piece */
    int32_t *prev, *next;
    uint64_t *heap;              /* candidate pairs: rank << 32 | left position */
    size_t cap;
} qr_bpe_work;

bool qr_bpe_reserve(qr_bpe_work *w, size_t n);
void qr_bpe_free(qr_bpe_work *w);
/* Merge the n symbols w->id[0..n) by rank until no adjacent pair has a merge; returns the number of symbols
 * left, compacted into w->id[0..). */
size_t qr_bpe_merge(const qr_tokenizer *t, qr_bpe_work *w, size_t n);

/* Parse a `normalizer` value ("nfkc,lowercase") into steps. QM_ERR_UNSUPPORTED naming the step for one
 * the runtime does not know, an empty step, or more than QR_NORM_MAX; path/key/offset name the entry. */
qm_status qr_norm_parse(const char *s, size_t n, qr_norm_step *steps, uint32_t *n_steps, const char *path,
                        const char *key, uint64_t offset, qm_error *err);
/* The n bytes of valid UTF-8 at s through every step (qr_tok_norm.c). Returns a malloc'd result of
 * *out_len bytes (the caller frees it), NULL when out of memory. */
uint8_t *qr_norm_apply(const qr_norm_step *steps, uint32_t n_steps, const uint8_t *s, size_t n, size_t *out_len);

#endif /* QR_TOK_INTERNAL_H */
