/* batch_shim.h — the multi-sequence batch API of libqmap, as qmap.h will declare it, implemented here with one
 * qmap_session per sequence until the library's own lands. The declarations are exactly the library's; the
 * server includes this header only for them and must not rely on anything else it does. Delete this pair
 * (and its include in serve/sched.c) when qmap.h has qmap_batch.
 */
#ifndef QS_BATCH_SHIM_H
#define QS_BATCH_SHIM_H

#include "qmap.h"

typedef struct qmap_batch qmap_batch;
typedef struct qmap_batch_params {
    uint32_t n_seq;            /* sequences (slots) the batch holds; 0 = 1 */
    uint32_t n_ctx;            /* positions each sequence's KV cache holds; 0 = min(model's context, 4096) */
    uint32_t n_batch;          /* most tokens one qmap_batch_eval call takes over all its items; 0 = 512 */
    int threads;               /* 0 = one per CPU the process may use */
    qmap_kv_type kv_type;
    qmap_act_mode act;
} qmap_batch_params;
void qmap_batch_params_default(qmap_batch_params *p);
qmap_status qmap_batch_new(const qmap_model *m, const qmap_batch_params *p, qmap_batch **out, qmap_error *err);
void qmap_batch_free(qmap_batch *b);
typedef struct qmap_batch_item { uint32_t seq; const int32_t *ids; uint32_t n; } qmap_batch_item;
/* one forward pass for all items (sum of n <= n_batch); each item's sequence advances by n; on failure nothing changes */
qmap_status qmap_batch_eval(qmap_batch *b, const qmap_batch_item *items, size_t n_items, qmap_error *err);
/* logits of the last token of seq in the last eval that included it; valid until the next eval or reset(seq) */
const float *qmap_batch_logits(const qmap_batch *b, uint32_t seq);
uint32_t qmap_batch_pos(const qmap_batch *b, uint32_t seq);
void qmap_batch_reset(qmap_batch *b, uint32_t seq);

#endif /* QS_BATCH_SHIM_H */
