/* qmap_classifier.c — the public classifier API (include/qmap.h) over runtime/qr_arch_mlp.h. */
#include <omp.h>
#include <stdlib.h>

#include "qa_model.h"

struct qmap_classifier {
    const qmap_model *m;
    qr_mlp_run *run;
};

qmap_status qmap_classifier_new(const qmap_model *m, size_t max_batch, int threads, qmap_act_mode act,
                                qmap_classifier **out, qmap_error *err)
{
    if (!out) return qa_fail(err, QMAP_ERR_INVALID_ARGUMENT, "qmap_classifier_new: out is NULL");
    *out = NULL;
    if (!m) return qa_fail(err, QMAP_ERR_INVALID_ARGUMENT, "qmap_classifier_new: model is NULL");
    if (!m->mlp)
        return qa_fail(err, QMAP_ERR_INVALID_ARGUMENT, "%s: a %s container is not a classifier (mlp)", m->info.path,
                       m->arch_name);
    if (threads < 0) return qa_fail(err, QMAP_ERR_INVALID_ARGUMENT, "qmap_classifier_new: threads %d is negative", threads);
    qr_act a;
    if (!qa_act_of(act, &a))
        return qa_fail(err, QMAP_ERR_INVALID_ARGUMENT, "qmap_classifier_new: unknown act mode %d", (int)act);
    qmap_classifier *c = calloc(1, sizeof *c);
    if (!c) return qa_fail(err, QMAP_ERR_NOMEM, "%s: out of memory", m->info.path);
    c->m = m;
    qm_error e;
    qm_error_clear(&e);
    /* threads == 1 keeps every product on the calling thread: no parallel region per call */
    if (qr_mlp_run_new(m->mlp, max_batch ? max_batch : 256, threads ? threads : omp_get_max_threads(), a, &c->run,
                       &e) != QM_OK) {
        free(c);
        return qa_error_export(err, &e);
    }
    *out = c;
    return QMAP_OK;
}

void qmap_classifier_free(qmap_classifier *c)
{
    if (!c) return;
    qr_mlp_run_free(c->run);
    free(c);
}

qmap_status qmap_classify(qmap_classifier *c, const float *x, size_t n, float *out, qmap_error *err)
{
    if (!c || (n && (!x || !out))) return qa_fail(err, QMAP_ERR_INVALID_ARGUMENT, "qmap_classify: NULL argument");
    const qr_mlp *m = c->m->mlp;
    for (size_t i = 0; i < n; i += c->run->max_batch) {
        size_t k = n - i < c->run->max_batch ? n - i : c->run->max_batch;
        qm_status st = qr_mlp_forward(m, c->run, x + i * m->input_dim, k, m->input_dim, out + i * m->output_dim);
        if (st != QM_OK)
            return qa_fail(err, (qmap_status)st, "%s: the classifier failed on rows %zu..%zu", c->m->info.path, i,
                           i + k - 1);
    }
    return QMAP_OK;
}
