/* logits_tool.h — what the suite's API windows lm_logits.c and batch_logits.c share: a counter of
 * malloc-family calls (for their --alloc-check) and the parsing of --act and --kv.
 *
 * Include it from one .c file per program only: it defines this program's malloc, calloc, realloc, free,
 * posix_memalign and aligned_alloc, which forward to glibc's and count while g_armed is set. With
 * LM_LOGITS_NO_ALLOC_HOOK (the sanitizer builds, whose runtime owns malloc) nothing is hooked and the
 * count stays 0.
 */
#ifndef QM_TESTS_LOGITS_TOOL_H
#define QM_TESTS_LOGITS_TOOL_H

#include <stddef.h>
#include <string.h>

#include "qmap.h"

static volatile int g_armed;
static volatile long g_allocs;

#ifndef LM_LOGITS_NO_ALLOC_HOOK
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);

void *malloc(size_t n) { if (g_armed) g_allocs++; return __libc_malloc(n); }
void *calloc(size_t a, size_t b) { if (g_armed) g_allocs++; return __libc_calloc(a, b); }
void *realloc(void *p, size_t n) { if (g_armed) g_allocs++; return __libc_realloc(p, n); }
void free(void *p) { __libc_free(p); }
int posix_memalign(void **out, size_t align, size_t n)
{
    if (g_armed) g_allocs++;
    void *p = __libc_memalign(align, n);
    if (!p) return 12; /* ENOMEM */
    *out = p;
    return 0;
}
void *aligned_alloc(size_t align, size_t n) { if (g_armed) g_allocs++; return __libc_memalign(align, n); }
#endif

/* --act auto|int8|f32|int8x2|precise (anything else: auto) */
static inline qmap_act_mode parse_act(const char *a)
{
    return !strcmp(a, "int8")      ? QMAP_ACT_INT8
           : !strcmp(a, "f32")     ? QMAP_ACT_F32
           : !strcmp(a, "int8x2")  ? QMAP_ACT_INT8X2
           : !strcmp(a, "precise") ? QMAP_ACT_PRECISE
                                   : QMAP_ACT_AUTO;
}

/* --kv f16|f32 (anything else: f16) */
static inline qmap_kv_type parse_kv(const char *a)
{
    return !strcmp(a, "f32") ? QMAP_KV_F32 : QMAP_KV_F16;
}

#endif
