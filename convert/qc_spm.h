/* qc_spm.h — SentencePiece's tokenizer.model (a ModelProto in protobuf wire format) read into plain C.
 *
 * Only the parser lives here: qc_spm_parse walks the bytes once, checks every varint, length, field number
 * and wire type against the bytes left, skips unknown fields (groups are refused), and fills a qc_spm with
 * what encoding depends on. It judges nothing about whether qmap can run the model; qc_tokenizer.c does
 * that and maps the result onto spec/TOKENIZER.md (section 2.6). Field numbers are those of sentencepiece's
 * sentencepiece_model.proto (proto2): ModelProto { pieces = 1 repeated SentencePiece { piece = 1,
 * score = 2, type = 3 }, trainer_spec = 2, normalizer_spec = 3, self_test_data = 4, denormalizer_spec = 5 }.
 *
 * Piece strings point into the caller's buffer, which must outlive the qc_spm. Errors: QM_ERR_BAD_SOURCE
 * (malformed: the message names `file`, the field and the byte offset), QM_ERR_UNSUPPORTED (more than
 * QC_SPM_MAX_PIECES pieces), QM_ERR_NOMEM.
 */
#ifndef QC_SPM_H
#define QC_SPM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qm_error.h"

#define QC_SPM_MAX_PIECES (1ull << 24)

/* ModelProto.SentencePiece.Type and TrainerSpec.ModelType, as numbered in the .proto */
enum { QC_SPM_NORMAL = 1, QC_SPM_UNKNOWN = 2, QC_SPM_CONTROL = 3, QC_SPM_USER_DEFINED = 4, QC_SPM_UNUSED = 5,
       QC_SPM_BYTE = 6 };
enum { QC_SPM_UNIGRAM = 1, QC_SPM_BPE = 2, QC_SPM_WORD = 3, QC_SPM_CHAR = 4 };

typedef struct qc_spm_piece {
    const char *str;             /* into the buffer; not NUL-terminated */
    uint32_t len;
    uint8_t type;                /* QC_SPM_NORMAL.. (1..6) */
    float score;
    uint64_t offset;             /* byte offset of the piece's key in the file, for messages */
} qc_spm_piece;

typedef struct qc_spm {
    qc_spm_piece *pieces;
    uint64_t n_pieces;
    /* trainer_spec (proto2 defaults when absent) */
    int32_t model_type;          /* UNIGRAM */
    bool byte_fallback;          /* false */
    bool treat_whitespace_as_suffix;   /* false */
    int32_t unk_id, bos_id, eos_id, pad_id;   /* 0, 1, 2, -1 */
    uint64_t trainer_offset;     /* where trainer_spec starts (QM_NO_OFFSET: absent) */
    /* normalizer_spec */
    const char *norm_name; size_t norm_name_len;   /* NULL when absent */
    uint64_t charsmap_len;       /* precompiled_charsmap bytes */
    bool add_dummy_prefix, remove_extra_whitespaces, escape_whitespaces;   /* true, true, true */
    uint64_t normalizer_offset;
    /* denormalizer_spec: only whether it would change decoded text */
    uint64_t denorm_charsmap_len;
} qc_spm;

/* Parse buf[0..len) (the whole tokenizer.model) into *out. On failure *out is zeroed (nothing to free). */
qm_status qc_spm_parse(const char *file, const uint8_t *buf, size_t len, qc_spm *out, qm_error *err);
void qc_spm_free(qc_spm *m);

#endif /* QC_SPM_H */
