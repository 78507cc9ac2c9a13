/* qc_arch.h — from source tensors and a model config to the canonical container layout of an
 * architecture (spec/ARCHITECTURES.md): which source tensor becomes which container tensor (renamed,
 * transposed, size-1 dims dropped), which buffers are skipped, the hyperparameters as typed metadata,
 * and every shape checked against them.
 *
 * The plan is built and fully validated before anything is written, so a bad input never gets as far as
 * creating an output file. Ownership: a qc_plan owns its arrays and strings; qc_plan_free() releases
 * them. The plan refers to the caller's sources by index, so they must outlive it.
 */
#ifndef QC_ARCH_H
#define QC_ARCH_H

#include <stdbool.h>
#include <stdint.h>

#include "qc_source.h"
#include "qm_error.h"
#include "qm_writer.h"

#define QC_NAME_MAX 128

/* One tensor of the container, and where its values come from. */
typedef struct qc_out {
    char name[QC_NAME_MAX];          /* canonical name, e.g. "blk.3.attn_qkv.weight" */
    uint32_t src;                    /* index into the sources array given to qc_plan_build */
    uint64_t tensor;                 /* index into that source's tensors */
    uint32_t rank;                   /* container shape: 1..4 */
    uint64_t dims[4];
    bool transpose;                  /* the container holds the transpose of the (2-D) source */
    uint64_t row0;                   /* the container holds source rows row0 .. row0 + dims[0] - 1: one part
                                      * of a fused tensor (Phi-3's qkv_proj); 0 and every row otherwise */
} qc_out;

/* One metadata entry the architecture adds. */
typedef struct qc_meta_item {
    char key[96];
    uint32_t type;                   /* QM_META_U32, F32, BOOL, STRING, or ARRAY of STRING */
    uint32_t u32;
    float f32;
    bool b;
    char *str;                       /* owned (STRING) */
    char **strs; uint64_t n_strs;    /* owned (ARRAY of STRING) */
} qc_meta_item;

typedef struct qc_plan {
    const char *arch;                /* static: a name of format/qm_names.h's QM_ARCH_LIST */
    qc_out *out; uint64_t n_out;
    qc_meta_item *meta; uint64_t n_meta;
    uint64_t n_skipped;              /* buffers recognised and skipped (masks, inv_freq, tied head) */
    bool tied_output;
} qc_plan;

/* Build the plan. arch: NULL to take it from the manifest ("arch"), the config ("model_type") or the
 * tensor names, in that order. config_json/manifest_json may be NULL; config_name names the config in
 * messages. Errors: QM_ERR_UNKNOWN_ARCH, QM_ERR_BAD_CONFIG, QM_ERR_SHAPE, QM_ERR_MISSING_TENSOR,
 * QM_ERR_UNEXPECTED_TENSOR, QM_ERR_UNSUPPORTED (a non-float weight, a config feature not handled),
 * QM_ERR_BAD_SOURCE (the same name in two shards). On failure the plan is left empty. */
qm_status qc_plan_build(const char *arch, qc_source *const *srcs, uint32_t n_srcs, const char *config_json,
                        const char *config_name, const char *manifest_json, qc_plan *plan, qm_error *err);
/* Write the plan's metadata entries into `w`. */
qm_status qc_plan_write_meta(const qc_plan *plan, qm_writer *w, qm_error *err);
void qc_plan_free(qc_plan *plan);

/* every container architecture, from the names table: "none, mlp, gpt2, gpt_neo, llama, gemma2, seq2seq" */
const char *qc_arch_list(void);

#endif /* QC_ARCH_H */
