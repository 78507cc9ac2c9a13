/* fuzz_plan.h — what must hold of the architecture planner's answer (convert/qc_arch.h: qc_plan_build),
 * whatever it was given: fuzz_config (a config.json over fixed checkpoints) and fuzz_manifest (a raw
 * dump's manifest) both check it with fuzz_plan_check. Include fuzz_check.h first.
 *
 * A failure is one of the errors qc_arch.h documents, with a message, and leaves the plan empty. A plan
 * names its architecture and maps every output to a real tensor of the sources with the same number of
 * elements, at rank 1..4, under distinct non-empty names (compared pairwise only up to
 * `max_names_compared` outputs, to keep a run fast); its metadata keys are "<arch>.…", and the metadata
 * can be written into a container at `scratch_path` (an accepted config must never fail later, when
 * convert writes the file).
 */
#ifndef FUZZ_PLAN_H
#define FUZZ_PLAN_H

#include <stdbool.h>
#include <stdint.h>

#include "qc_arch.h"
#include "qc_source.h"
#include "qm_writer.h"

static inline bool plan_status_documented(qm_status st)
{
    return st == QM_ERR_UNKNOWN_ARCH || st == QM_ERR_BAD_CONFIG || st == QM_ERR_SHAPE ||
           st == QM_ERR_MISSING_TENSOR || st == QM_ERR_UNEXPECTED_TENSOR || st == QM_ERR_UNSUPPORTED ||
           st == QM_ERR_BAD_SOURCE || st == QM_ERR_NOMEM;
}

static inline void check_plan_outputs(const qc_plan *p, qc_source *const *srcs, uint32_t n_srcs,
                                      uint64_t max_names_compared)
{
    for (uint64_t i = 0; i < p->n_out; i++) {
        const qc_out *o = &p->out[i];
        CHECK(memchr(o->name, 0, sizeof o->name) && o->name[0], "output name non-empty and terminated");
        CHECK(o->src < n_srcs && o->tensor < srcs[o->src]->n_tensors, "output refers to a real tensor");
        CHECK(o->rank >= 1 && o->rank <= 4, "output rank 1..4");
        const qc_tensor *t = &srcs[o->src]->tensors[o->tensor];
        uint64_t n = 1;
        for (uint32_t d = 0; d < o->rank; d++) n *= o->dims[d];
        CHECK(n == qc_tensor_elements(t), "output has the tensor's element count");
        CHECK(!o->transpose || (o->rank == 2 && t->rank == 2), "only 2-D tensors are transposed");
        if (p->n_out <= max_names_compared)
            for (uint64_t j = 0; j < i; j++) CHECK(strcmp(p->out[j].name, o->name) != 0, "output names distinct");
    }
}

static inline void check_plan_meta(const qc_plan *p, const char *scratch_path)
{
    size_t al = strlen(p->arch);
    for (uint64_t i = 0; i < p->n_meta; i++) {
        const qc_meta_item *m = &p->meta[i];
        CHECK(!strncmp(m->key, p->arch, al) && m->key[al] == '.', "metadata key under the architecture");
        if (m->type == QM_META_STRING) CHECK(m->str != NULL, "string metadata set");
        for (uint64_t j = 0; j < m->n_strs; j++) CHECK(m->strs[j] != NULL, "string array entries set");
    }
    qm_writer *w = NULL;
    qm_error err;
    if (qm_writer_create(scratch_path, NULL, &w, &err) != QM_OK) return;   /* the disk, not the plan */
    qm_status st = qc_plan_write_meta(p, w, &err);
    if (st != QM_OK && st != QM_ERR_NOMEM) die("an accepted plan's metadata can be written", err.message);
    qm_writer_abort(w);
}

/* qc_plan_build returned st (err) with *p, over srcs; `what` names the input in a message. */
static inline void fuzz_plan_check(qm_status st, const qm_error *err, const qc_plan *p, qc_source *const *srcs,
                                   uint32_t n_srcs, uint64_t max_names_compared, const char *scratch_path,
                                   const char *what)
{
    if (st != QM_OK) {
        check_failure(st, err);
        if (!plan_status_documented(st)) {
            fprintf(stderr, FUZZ_TARGET ": %s: qc_plan_build gave %s: %s\n", what, qm_status_name(st), err->message);
            die("the planner fails only with its documented errors", NULL);
        }
        CHECK(p->n_out == 0 && p->n_meta == 0 && p->out == NULL && p->meta == NULL, "a failed plan is left empty");
        return;
    }
    CHECK(p->arch && p->arch[0], "plan names its architecture");
    check_plan_outputs(p, srcs, n_srcs, max_names_compared);
    check_plan_meta(p, scratch_path);
}

#endif /* FUZZ_PLAN_H */
