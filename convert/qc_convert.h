/* qc_convert.h — `qmap convert` as a library call: open the inputs, build and check the plan, write the
 * container (atomically, streaming: memory O(largest tensor)).
 *
 * Nothing is printed: progress and warnings go to the caller's callbacks. On any failure no output file
 * is left (the writer's temporary file is removed) and *err says what and where.
 */
#ifndef QC_CONVERT_H
#define QC_CONVERT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qm_error.h"

typedef struct qc_progress {
    uint64_t tensor, n_tensors;          /* tensor being written (0-based) and how many there are */
    uint64_t bytes_done, bytes_total;    /* container data bytes written so far / in all */
    double seconds;                      /* since the start of the write phase */
} qc_progress;

typedef struct qc_convert_opts {
    const char *const *inputs;           /* files or directories (raw dump, shards, index JSON) */
    size_t n_inputs;
    const char *output;                  /* the .qmap to write */
    const char *config_path;             /* NULL: config.json beside the first input, else the manifest's */
    const char *arch;                    /* NULL: from the manifest, the config or the tensor names */
    const char *tokenizer_path;          /* NULL: look beside the first input */
    const char *src_tokenizer_path;      /* seq2seq: source-language tokenizer (tokenizer.src.*), or NULL */
    const char *tgt_tokenizer_path;      /* seq2seq: target-language tokenizer (tokenizer.tgt.*), or NULL */
    bool no_tokenizer;                   /* do not look for one */
    uint32_t dtype;                      /* QM_DTYPE_F32 (default if 0) or QM_DTYPE_F16 (rank >= 2 only) */
    bool strict;                         /* NaN/Inf in a weight is an error, not a warning */
    bool allow_large;                    /* accept compressed entries that inflate beyond QC_MAX_INFLATION */
    uint64_t json_limit;                 /* size cap in bytes for every JSON file read (qc_json.h); 0: defaults */
    void (*on_progress)(void *user, const qc_progress *p);   /* may be NULL */
    void (*on_warning)(void *user, const char *message);     /* may be NULL */
    void *user;
} qc_convert_opts;

/* Compressed zip entries may inflate in total to QC_INFLATE_FREE_BYTES, or to QC_MAX_INFLATION times
 * their compressed size; more is refused (QM_ERR_UNSUPPORTED) unless allow_large. */
#define QC_INFLATE_FREE_BYTES (64ull << 20)
#define QC_MAX_INFLATION 32u

typedef struct qc_convert_summary {
    const char *arch;                    /* static */
    char kinds[160];                     /* input kinds, e.g. "safetensors (2 shards)" */
    char config[512];                    /* where the config came from ("" if none) */
    char tokenizer[160];                 /* "bpe_bytelevel, 50257 tokens (vocab.json, merges.txt)" or "" */
    uint64_t n_inputs_files, in_bytes;   /* files read and their total size */
    uint64_t n_tensors, n_params, n_skipped, out_bytes;
    uint64_t inflated_from, inflated_to; /* compressed zip entries: their bytes, and what they inflate to */
    uint64_t n_nonfinite;                /* NaN/Inf values found (warnings) */
    bool tied_output;
    double seconds_total, seconds_write;
} qc_convert_summary;

qm_status qc_convert(const qc_convert_opts *opts, qc_convert_summary *summary, qm_error *err);

#endif /* QC_CONVERT_H */
