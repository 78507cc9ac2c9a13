/* qr_tok_norm.c — the `normalizer` steps of spec/TOKENIZER.md §1 at run time: Unicode normalization forms
 * and lowercase, applied to each piece of text between added tokens before the kind's encoding (§3.1).
 *
 * The Unicode tables are utf8proc's (Debian libutf8proc): writing them by hand would mean carrying the
 * decomposition and composition data of the whole Unicode database. */
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "qr_tok_internal.h"

static const struct { const char *name; qr_norm_step step; } k_steps[] = {
    { "nfc", QR_NORM_NFC }, { "nfd", QR_NORM_NFD }, { "nfkc", QR_NORM_NFKC }, { "nfkd", QR_NORM_NFKD },
    { "lowercase", QR_NORM_LOWERCASE },
};

qm_status qr_norm_parse(const char *s, size_t n, qr_norm_step *steps, uint32_t *n_steps, const char *path,
                        const char *key, uint64_t offset, qm_error *err)
{
    *n_steps = 0;
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j < n && s[j] != ',') j++;
        size_t k = 0, nk = sizeof k_steps / sizeof k_steps[0];
        while (k < nk && !(strlen(k_steps[k].name) == j - i && !memcmp(k_steps[k].name, s + i, j - i))) k++;
        if (k == nk)
            return qm_fail(err, QM_ERR_UNSUPPORTED, path, key, offset,
                           "normalizer step \"%.*s\" is not one of nfc, nfd, nfkc, nfkd, lowercase",
                           (int)(j - i > 40 ? 40 : j - i), s + i);
        if (*n_steps == QR_NORM_MAX)
            return qm_fail(err, QM_ERR_UNSUPPORTED, path, key, offset, "more than %d normalizer steps", QR_NORM_MAX);
        steps[(*n_steps)++] = k_steps[k].step;
        i = j + (j < n);   /* past the comma; a trailing comma names an empty step next time round */
        if (j < n && i == n)
            return qm_fail(err, QM_ERR_UNSUPPORTED, path, key, offset, "normalizer list ends with a comma");
    }
    return QM_OK;
}

/* Lowercase, code point by code point, as HF's Lowercase normalizer (Rust's char::to_lowercase): the simple
 * mapping of UnicodeData, plus the one unconditional multi-character lowercase of SpecialCasing
 * (U+0130 → "i" U+0307). No context rules (a final sigma stays σ, as it does for char::to_lowercase). */
static uint8_t *lowercase(const uint8_t *s, size_t n, size_t *out_len)
{
    /* ASCII maps to ASCII, and no other character's lowercase takes more than twice its bytes (U+0130 and
     * U+023A: 2 → 3): 2n bytes always suffice */
    uint8_t *o = malloc(2 * n + 4);
    if (!o) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t c = utf8proc_iterate(s + i, (utf8proc_ssize_t)(n - i), &cp);
        if (c <= 0) { free(o); return NULL; }   /* the caller validated the text: cannot happen */
        i += (size_t)c;
        if (cp == 0x130) {
            memcpy(o + k, "i\xcc\x87", 3);
            k += 3;
            continue;
        }
        k += (size_t)utf8proc_encode_char(utf8proc_tolower(cp), o + k);
    }
    *out_len = k;
    return o;
}

uint8_t *qr_norm_apply(const qr_norm_step *steps, uint32_t n_steps, const uint8_t *s, size_t n, size_t *out_len)
{
    const uint8_t *cur = s;      /* the caller's text until the first step has made a copy */
    size_t len = n;
    for (uint32_t i = 0; i < n_steps; i++) {
        uint8_t *next = NULL;
        size_t next_len = 0;
        if (steps[i] == QR_NORM_LOWERCASE) {
            next = lowercase(cur, len, &next_len);
        } else {
            int opt = UTF8PROC_STABLE;
            switch (steps[i]) {
            case QR_NORM_NFC: opt |= UTF8PROC_COMPOSE; break;
            case QR_NORM_NFD: opt |= UTF8PROC_DECOMPOSE; break;
            case QR_NORM_NFKC: opt |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
            case QR_NORM_NFKD: opt |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
            case QR_NORM_LOWERCASE: break;
            }
            /* an explicit length, not NULLTERM: a NUL in the text is a character like any other */
            utf8proc_uint8_t *m = NULL;
            utf8proc_ssize_t r = utf8proc_map(cur, (utf8proc_ssize_t)len, &m, (utf8proc_option_t)opt);
            if (r < 0) { free(m); m = NULL; }
            else if (!m) m = calloc(1, 1);
            next = m;
            next_len = r < 0 ? 0 : (size_t)r;
        }
        if (cur != s) free((void *)cur);
        if (!next) return NULL;
        cur = next;
        len = next_len;
    }
    if (cur == s) {              /* no step: still a copy, as the contract says */
        uint8_t *copy = malloc(n + 1);
        if (!copy) return NULL;
        memcpy(copy, s, n);
        cur = copy;
    }
    *out_len = len;
    return (uint8_t *)cur;
}
