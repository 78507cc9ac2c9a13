/* qm_format.h — the constants and storage rules of the .qmap format (spec/FORMAT.md), described once.
 *
 * This header is the only place outside the format/ sources that names a dtype's storage size or the Q8_ROW
 * layout; every other module asks these functions. Pure functions, no allocation, no global state.
 */
#ifndef QM_FORMAT_H
#define QM_FORMAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qm_error.h"

#define QM_MAJOR_VERSION 1
#define QM_MINOR_VERSION 0
#define QM_HEADER_SIZE 128
#define QM_MAGIC "QMAP\r\n\x1a\n" /* 8 bytes, spec section 3 */
#define QM_DEFAULT_ALIGNMENT 4096u
#define QM_MIN_ALIGNMENT 64u
#define QM_MAX_ALIGNMENT (1ull << 30)
#define QM_MAX_RANK 4
#define QM_MAX_COUNT (1ull << 20)         /* metadata_count, tensor_count (R-HDR-7) */
#define QM_MAX_KEY_LEN 256u               /* R-META-2 */
#define QM_MAX_NAME_LEN 1024u             /* R-TENSOR-2 */
#define QM_MAX_STRING_LEN (1ull << 30)    /* R-META-6 */
#define QM_MAX_ARRAY_COUNT (1ull << 32)   /* R-META-6 */
#define QM_MAX_DIM (1ull << 32)           /* R-TENSOR-7 */
#define QM_MAX_ELEMENTS (1ull << 40)      /* R-TENSOR-8 */
#define QM_Q8ROW_ROW_ALIGN 64u            /* Q8_ROW row stride and sums padding (spec 6.1) */

/* Dtype ids: frozen, never reused (spec section 6). */
typedef enum qm_dtype {
    QM_DTYPE_F32 = 1,
    QM_DTYPE_F16 = 2,
    QM_DTYPE_BF16 = 3,
    QM_DTYPE_I32 = 4,
    QM_DTYPE_Q8_ROW = 5,
} qm_dtype;
/* One more than the largest dtype id: arrays indexed by dtype use this size (raise it with a new id). */
#define QM_DTYPE_ID_LIMIT 6

/* Storage traits of a dtype. elem_size is 0 for dtypes whose size is not n × elem_size (Q8_ROW). */
typedef struct qm_dtype_traits {
    qm_dtype id;
    const char *name;      /* "F32", "Q8_ROW" — as in the spec */
    uint32_t elem_size;    /* bytes per element, or 0 if the layout is not plain */
    bool is_float;         /* holds real numbers (F32/F16/BF16/Q8_ROW) */
    bool is_quantized;     /* carries scales (Q8_ROW) */
    /* The byte size of a tensor of this shape for a layout that is not plain (elem_size 0), with the
     * errors of qm_tensor_nbytes; NULL for a plain one. */
    qm_status (*layout_size)(uint32_t rank, const uint64_t *dims, uint64_t alignment, uint64_t *nbytes);
} qm_dtype_traits;

/* Traits of dtype `id`, or NULL if the id is unknown (R-TENSOR-5). */
const qm_dtype_traits *qm_dtype_info(uint32_t id);
/* The dtype whose name is `name` (case-insensitive), or 0 if none. */
uint32_t qm_dtype_from_name(const char *name);

/* Metadata value types (spec section 4). Frozen ids. */
typedef enum qm_meta_type {
    QM_META_U32 = 1,
    QM_META_I32 = 2,
    QM_META_U64 = 3,
    QM_META_I64 = 4,
    QM_META_F32 = 5,
    QM_META_F64 = 6,
    QM_META_BOOL = 7,
    QM_META_STRING = 8,
    QM_META_ARRAY = 9,
} qm_meta_type;

/* "U32", "STRING", …; NULL if unknown. */
const char *qm_meta_type_name(uint32_t type);
/* Encoded size of one scalar of `type` (U32…BOOL), 0 for STRING/ARRAY/unknown. */
uint32_t qm_meta_scalar_size(uint32_t type);

/* Layout of a Q8_ROW tensor's data, relative to the tensor's offset (spec 6.1). */
typedef struct qm_q8row_layout {
    uint64_t rows;           /* product of all dims but the last */
    uint64_t cols;           /* last dim */
    uint64_t row_stride;     /* align_up(cols, 64) */
    uint64_t scales_offset;  /* f32[rows] */
    uint64_t sums_offset;    /* i32[rows] */
    uint64_t size;           /* total byte size of the tensor */
} qm_q8row_layout;

/* Element count of a shape, with the caps of R-TENSOR-6..8 checked. Returns QM_ERR_BAD_RANK,
 * QM_ERR_BAD_DIM or QM_ERR_TOO_MANY_ELEMENTS (no message is written; callers add their own context). */
qm_status qm_shape_elements(uint32_t rank, const uint64_t *dims, uint64_t *n_elements);

/* Q8_ROW layout for a shape and a file alignment. Checks the shape as qm_shape_elements does, and the
 * alignment (QM_ERR_BAD_ALIGNMENT); QM_ERR_OVERFLOW if the size overflows. */
qm_status qm_q8row_layout_of(uint32_t rank, const uint64_t *dims, uint64_t alignment, qm_q8row_layout *out);

/* Byte size of a tensor of this dtype and shape in a file of this alignment (R-TENSOR-10).
 * Errors: QM_ERR_UNKNOWN_DTYPE, the shape errors above, QM_ERR_OVERFLOW. */
qm_status qm_tensor_nbytes(uint32_t dtype, uint32_t rank, const uint64_t *dims, uint64_t alignment,
                           uint64_t *nbytes);

/* True if `alignment` is a power of two in [QM_MIN_ALIGNMENT, QM_MAX_ALIGNMENT] (R-HDR-5). */
bool qm_alignment_valid(uint64_t alignment);

/* True if bytes[0..len) is well-formed UTF-8 (RFC 3629). If allow_nul is false, a 0 byte fails too. */
bool qm_utf8_valid(const void *bytes, uint64_t len, bool allow_nul);

#endif /* QM_FORMAT_H */
