/* qmap_sampler.c — the public sampler of include/qmap.h on top of runtime/qr_sample.h.
 *
 * A qmap_sampler is a qr_sampler; the public parameters are copied field by field into the runtime's
 * (the two structs are kept apart so runtime/ does not depend on the public header). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qmap.h"
#include "qr_sample.h"

struct qmap_sampler {
    qr_sampler *impl;
};

/* qm_status and qmap_status are the same list (include/qmap_errors.h), so the code carries over as is. */
static qmap_status export_error(qmap_error *err, const qm_error *e)
{
    if (err) {
        err->code = (qmap_status)e->code;
        snprintf(err->message, sizeof err->message, "%s", e->message);
    }
    return (qmap_status)e->code;
}

QMAP_API void qmap_sampler_params_default(qmap_sampler_params *p)
{
    if (!p) return;
    qr_sampler_params q;
    qr_sampler_params_default(&q);
    p->temp = q.temp;
    p->top_k = q.top_k;
    p->top_p = q.top_p;
    p->min_p = q.min_p;
    p->repeat_penalty = q.repeat_penalty;
    p->repeat_last_n = q.repeat_last_n;
    p->seed = q.seed;
}

QMAP_API qmap_status qmap_sampler_new(const qmap_sampler_params *p, uint32_t n_vocab, qmap_sampler **out,
                                      qmap_error *err)
{
    qm_error e;
    qm_error_clear(&e);
    if (!out) {
        qm_fail(&e, QM_ERR_INVALID_ARGUMENT, NULL, "sampler", QM_NO_OFFSET, "out is NULL");
        return export_error(err, &e);
    }
    *out = NULL;
    qr_sampler_params q;
    if (p) {
        q.temp = p->temp;
        q.top_k = p->top_k;
        q.top_p = p->top_p;
        q.min_p = p->min_p;
        q.repeat_penalty = p->repeat_penalty;
        q.repeat_last_n = p->repeat_last_n;
        q.seed = p->seed;
    } else {
        qr_sampler_params_default(&q);
    }
    qmap_sampler *s = malloc(sizeof *s);
    if (!s) {
        qm_fail(&e, QM_ERR_NOMEM, NULL, "sampler", QM_NO_OFFSET, "out of memory");
        return export_error(err, &e);
    }
    if (qr_sampler_new(&q, n_vocab, &s->impl, &e) != QM_OK) {
        free(s);
        return export_error(err, &e);
    }
    *out = s;
    if (err) {
        err->code = QMAP_OK;
        err->message[0] = '\0';
    }
    return QMAP_OK;
}

QMAP_API void qmap_sampler_free(qmap_sampler *smp)
{
    if (!smp) return;
    qr_sampler_free(smp->impl);
    free(smp);
}

QMAP_API int32_t qmap_sample(qmap_sampler *smp, const float *logits)
{
    if (!smp || !logits) return -1;
    return qr_sampler_sample(smp->impl, logits);
}

QMAP_API void qmap_sampler_accept(qmap_sampler *smp, int32_t id)
{
    if (!smp) return;
    qr_sampler_accept(smp->impl, id);
}
