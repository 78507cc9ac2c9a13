/* qa_model.h — the inside of a qmap_model, shared by api/qmap_model.c (open, close, info) and
 * api/qmap_session.c (sessions over it). Hidden from users of the library. */
#ifndef QA_MODEL_H
#define QA_MODEL_H

#include "qa_internal.h"
#include "qm_names.h"
#include "qm_reader.h"
#include "qr_arch_mlp.h"
#include "qr_arch_seq2seq.h"
#include "qr_model.h"

struct qmap_model {
    qm_file *file;                   /* the mapping; everything below points into it or is owned here */
    bool mapped;                     /* file maps the container (false: an anonymous copy, params->no_mmap) */
    qm_arch arch;
    const qr_lm_family *lm;          /* NULL unless the container is a decoder LM */
    void *weights;                   /* the family's weight views */
    qr_lm_hparams hp;                /* sharded: the rank's head and FFN counts */
    qr_shard shard;                  /* the part this process runs (n_ranks 0 or 1: all of it) */
    qr_matrix *mats;                 /* every matrix the family loaded (work-buffer sizing) */
    size_t n_mats;
    qr_mlp *mlp;                     /* NULL unless the container is an mlp classifier */
    qr_s2s *s2s;                     /* NULL unless the container is a seq2seq model */
    qr_tokenizer *tok;               /* NULL when the container has no tokenizer or it failed to load;
                                      * seq2seq: the target vocabulary (tokenizer.tgt.) */
    char tok_error[640];             /* why it failed to load ("" if it did not) */
    qr_tokenizer *tok_src;           /* seq2seq: the source vocabulary (tokenizer.src.), or NULL */
    char tok_src_error[640];
    qmap_model_info info;
    char arch_name[32], variant[64], file_type[32];
};

/* The checks of a session's and a batch's parameters that are the same for both (`fn` names the call in
 * messages): n_ctx within the model's learned positions and the cap of 2^24, a known kv_type, threads
 * not negative. */
qmap_status qa_check_lm_params(const qmap_model *m, const char *fn, uint32_t n_ctx, qmap_kv_type kv_type,
                               int threads, qmap_error *err);

#endif /* QA_MODEL_H */
