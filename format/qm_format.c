/* qm_format.c — the dtype traits table and the storage rules of spec/FORMAT.md sections 4–6. */
#include "qm_format.h"

#include <strings.h>

#include "qm_bytes.h"

static qm_status q8row_size(uint32_t rank, const uint64_t *dims, uint64_t alignment, uint64_t *nbytes);

/* Indexed by dtype id; a zero row means "unknown". A new dtype (spec §6) is its id in qm_format.h, one
 * row here and, if its elements have rules beyond the checksum (R-DATA-2), one in qm_verify.c's
 * data_rules; the runtime adds its own row and kernels (runtime/qr_dtype.h). */
static const qm_dtype_traits dtype_table[] = {
    [QM_DTYPE_F32] = { QM_DTYPE_F32, "F32", 4, true, false, NULL },
    [QM_DTYPE_F16] = { QM_DTYPE_F16, "F16", 2, true, false, NULL },
    [QM_DTYPE_BF16] = { QM_DTYPE_BF16, "BF16", 2, true, false, NULL },
    [QM_DTYPE_I32] = { QM_DTYPE_I32, "I32", 4, false, false, NULL },
    [QM_DTYPE_Q8_ROW] = { QM_DTYPE_Q8_ROW, "Q8_ROW", 0, true, true, q8row_size },
};
#define N_DTYPE_SLOTS (sizeof dtype_table / sizeof dtype_table[0])
_Static_assert(N_DTYPE_SLOTS == QM_DTYPE_ID_LIMIT, "QM_DTYPE_ID_LIMIT must follow the dtype table");

const qm_dtype_traits *qm_dtype_info(uint32_t id)
{
    if (id >= N_DTYPE_SLOTS || dtype_table[id].name == NULL) return NULL;
    return &dtype_table[id];
}

uint32_t qm_dtype_from_name(const char *name)
{
    if (!name) return 0;
    for (uint32_t i = 0; i < N_DTYPE_SLOTS; i++)
        if (dtype_table[i].name && strcasecmp(dtype_table[i].name, name) == 0) return i;
    return 0;
}

static const struct { const char *name; uint32_t size; } meta_types[] = {
    [QM_META_U32] = { "U32", 4 },   [QM_META_I32] = { "I32", 4 },   [QM_META_U64] = { "U64", 8 },
    [QM_META_I64] = { "I64", 8 },   [QM_META_F32] = { "F32", 4 },   [QM_META_F64] = { "F64", 8 },
    [QM_META_BOOL] = { "BOOL", 1 }, [QM_META_STRING] = { "STRING", 0 }, [QM_META_ARRAY] = { "ARRAY", 0 },
};

const char *qm_meta_type_name(uint32_t type)
{
    if (type >= sizeof meta_types / sizeof meta_types[0]) return NULL;
    return meta_types[type].name;
}

uint32_t qm_meta_scalar_size(uint32_t type)
{
    if (type >= sizeof meta_types / sizeof meta_types[0]) return 0;
    return meta_types[type].size;
}

bool qm_alignment_valid(uint64_t a)
{
    return a >= QM_MIN_ALIGNMENT && a <= QM_MAX_ALIGNMENT && (a & (a - 1)) == 0;
}

qm_status qm_shape_elements(uint32_t rank, const uint64_t *dims, uint64_t *n_elements)
{
    if (rank < 1 || rank > QM_MAX_RANK) return QM_ERR_BAD_RANK;            /* R-TENSOR-6 */
    uint64_t n = 1;
    for (uint32_t i = 0; i < rank; i++)
        if (dims[i] == 0 || dims[i] > QM_MAX_DIM) return QM_ERR_BAD_DIM;   /* R-TENSOR-7 */
    for (uint32_t i = 0; i < rank; i++) {
        /* checked: four dims of up to 2^32 can wrap 64 bits (R-GEN-1) before the cap would catch them */
        if (!qm_mul_u64(n, dims[i], &n) || n > QM_MAX_ELEMENTS) return QM_ERR_TOO_MANY_ELEMENTS; /* R-TENSOR-8 */
    }
    *n_elements = n;
    return QM_OK;
}

qm_status qm_q8row_layout_of(uint32_t rank, const uint64_t *dims, uint64_t alignment, qm_q8row_layout *out)
{
    uint64_t n;
    qm_status s = qm_shape_elements(rank, dims, &n);
    if (s != QM_OK) return s;
    if (!qm_alignment_valid(alignment)) return QM_ERR_BAD_ALIGNMENT;
    qm_q8row_layout l;
    l.cols = dims[rank - 1];
    l.rows = n / l.cols;
    uint64_t q_size, scales_bytes, sums_pad;
    /* spec §6.1 */
    if (!qm_align_up_u64(l.cols, QM_Q8ROW_ROW_ALIGN, &l.row_stride) ||
        !qm_mul_u64(l.rows, l.row_stride, &q_size) ||
        !qm_align_up_u64(q_size, alignment, &l.scales_offset) ||
        !qm_mul_u64(l.rows, 4, &scales_bytes) ||
        !qm_align_up_u64(scales_bytes, QM_Q8ROW_ROW_ALIGN, &sums_pad) ||
        !qm_add_u64(l.scales_offset, sums_pad, &l.sums_offset) ||
        !qm_add_u64(l.sums_offset, scales_bytes, &l.size))
        return QM_ERR_OVERFLOW;
    *out = l;
    return QM_OK;
}

static qm_status q8row_size(uint32_t rank, const uint64_t *dims, uint64_t alignment, uint64_t *nbytes)
{
    qm_q8row_layout l;
    qm_status s = qm_q8row_layout_of(rank, dims, alignment, &l);
    if (s == QM_OK) *nbytes = l.size;
    return s;
}

qm_status qm_tensor_nbytes(uint32_t dtype, uint32_t rank, const uint64_t *dims, uint64_t alignment,
                           uint64_t *nbytes)
{
    const qm_dtype_traits *t = qm_dtype_info(dtype);
    if (!t) return QM_ERR_UNKNOWN_DTYPE;
    if (t->layout_size) return t->layout_size(rank, dims, alignment, nbytes);
    uint64_t n;
    qm_status s = qm_shape_elements(rank, dims, &n);
    if (s != QM_OK) return s;
    *nbytes = n * t->elem_size; /* n ≤ 2^40, elem_size ≤ 4: no overflow */
    return QM_OK;
}

bool qm_utf8_valid(const void *bytes, uint64_t len, bool allow_nul)
{
    const uint8_t *s = bytes;
    uint64_t i = 0;
    while (i < len) {
        uint8_t c = s[i];
        if (c < 0x80) {
            if (c == 0 && !allow_nul) return false;
            i++;
            continue;
        }
        uint32_t need, cp, min;
        if (c >= 0xC2 && c <= 0xDF) { need = 1; cp = c & 0x1F; min = 0x80; }
        else if (c >= 0xE0 && c <= 0xEF) { need = 2; cp = c & 0x0F; min = 0x800; }
        else if (c >= 0xF0 && c <= 0xF4) { need = 3; cp = c & 0x07; min = 0x10000; }
        else return false;                       /* continuation byte, C0/C1, F5..FF */
        if (len - i - 1 < need) return false;    /* truncated sequence */
        for (uint32_t k = 1; k <= need; k++) {
            uint8_t cc = s[i + k];
            if ((cc & 0xC0) != 0x80) return false;
            cp = (cp << 6) | (cc & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false; /* overlong, range, surrogate */
        i += need + 1;
    }
    return true;
}
