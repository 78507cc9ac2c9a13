/* qm_names.c — the names table of qm_names.h: spec/ARCHITECTURES.md and TOKENIZER.md §1 in code. */
#include "qm_names.h"

#include <stdio.h>
#include <string.h>

static const char *const arch_names[] = {
#define QM_X(id, name, kind) name,
    QM_ARCH_LIST(QM_X)
#undef QM_X
};
static const qm_arch_kind arch_kinds[] = {
#define QM_X(id, name, kind) kind,
    QM_ARCH_LIST(QM_X)
#undef QM_X
};
const char *qm_arch_name(qm_arch a) { return (unsigned)a < QM_ARCH_COUNT ? arch_names[a] : NULL; }
const char *qm_arch_list(void)
{
#define QM_X(id, name, kind) ", " name
    static const char all[] = QM_ARCH_LIST(QM_X);
#undef QM_X
    return all + 2;   /* past the first separator */
}
qm_arch_kind qm_arch_kind_of(qm_arch a) { return (unsigned)a < QM_ARCH_COUNT ? arch_kinds[a] : QM_KIND_NONE; }
qm_arch qm_arch_from_name(const char *name, size_t len)
{
    for (int i = 0; i < QM_ARCH_COUNT; i++)
        if (strlen(arch_names[i]) == len && !memcmp(arch_names[i], name, len)) return (qm_arch)i;
    return QM_ARCH_COUNT;
}
static const char *const tensor_patterns[] = {
#define QM_X(id, p) p,
    QM_TENSOR_LIST(QM_X)
#undef QM_X
};
const char *qm_tensor_pattern(qm_tensor_id id) { return (unsigned)id < QM_TENSOR_COUNT ? tensor_patterns[id] : NULL; }
bool qm_tensor_per_layer(qm_tensor_id id) { const char *p = qm_tensor_pattern(id); return p && strstr(p, "%u"); }
int qm_tensor_name(char *buf, size_t cap, qm_tensor_id id, unsigned layer)
{
    const char *p = qm_tensor_pattern(id);
    if (!p) return -1;
    /* the pattern comes from the table, but it is substituted by hand so no format string is ever data */
    const char *hole = strstr(p, "%u");
    int n = hole ? snprintf(buf, cap, "%.*s%u%s", (int)(hole - p), p, layer, hole + 2) : snprintf(buf, cap, "%s", p);
    return (n < 0 || (size_t)n >= cap) ? -1 : n;
}
static const char *const hp_suffix[] = {
#define QM_X(id, s) s,
    QM_HPARAM_LIST(QM_X)
#undef QM_X
};
const char *qm_hparam_suffix(qm_hparam hp) { return (unsigned)hp < QM_HPARAM_COUNT ? hp_suffix[hp] : NULL; }
int qm_hparam_key(char *buf, size_t cap, qm_arch arch, qm_hparam hp)
{
    const char *a = qm_arch_name(arch), *s = qm_hparam_suffix(hp);
    if (!a || !s) return -1;
    int n = snprintf(buf, cap, "%s.%s", a, s);
    return (n < 0 || (size_t)n >= cap) ? -1 : n;
}
static const char *const tok_suffix[] = {
#define QM_X(id, s) s,
    QM_TOK_KEY_LIST(QM_X)
#undef QM_X
};
const char *qm_tok_key_suffix(qm_tok_key_id k) { return (unsigned)k < QM_TOK_KEY_COUNT ? tok_suffix[k] : NULL; }
int qm_tok_key(char *buf, size_t cap, const char *prefix, qm_tok_key_id k)
{
    const char *s = qm_tok_key_suffix(k);
    if (!s || !prefix) return -1;
    int n = snprintf(buf, cap, "%s%s", prefix, s);
    return (n < 0 || (size_t)n >= cap) ? -1 : n;
}
