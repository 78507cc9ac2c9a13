/* qm_reader.c — qm_open(): map a .qmap file and validate everything outside tensor data.
 *
 * Checks run in the order of spec/FORMAT.md §7 so that no check reads a byte the previous checks have
 * not proved to be inside the file. Every rejection quotes its rule number. No tensor byte is read here.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "qm_bytes.h"
#include "qm_file_internal.h"
#include "qm_fileio.h"

/* Header field offsets (spec §3). */
enum {
    H_MAGIC = 0, H_MAJOR = 8, H_MINOR = 10, H_RESERVED0 = 12, H_ALIGNMENT = 16, H_FILE_SIZE = 24,
    H_META_OFFSET = 32, H_META_SIZE = 40, H_META_COUNT = 48, H_TABLE_OFFSET = 56, H_TABLE_SIZE = 64,
    H_TENSOR_COUNT = 72, H_DATA_OFFSET = 80, H_RESERVED1 = 88, H_CHECKSUM = 120,
};
#define TENSOR_ENTRY_FIXED 76u /* bytes of a table entry besides its name (spec §5) */
/* Smallest entries that can be *read* (an empty key or name is read, then rejected by its own rule):
 * key_len + type + a 1-byte value; and a table entry with an empty name. */
#define META_ENTRY_MIN 9u
#define TENSOR_ENTRY_MIN TENSOR_ENTRY_FIXED

typedef struct parser {
    qm_file *f;
    const char *name;          /* for messages */
    qm_error *err;
    char *pool_next;           /* next free byte in f->strings */
    uint64_t *index_next;      /* next free slot in f->str_index_pool */
} parser;

#define FAIL(code, field, off, ...) qm_fail(P->err, code, P->name, field, off, __VA_ARGS__)

static char *pool_copy(parser *P, const uint8_t *s, uint32_t len)
{
    char *d = P->pool_next;
    memcpy(d, s, len);
    d[len] = '\0';
    P->pool_next += len + 1;
    return d;
}

/* ---- header ---------------------------------------------------------------------------------- */

static qm_status parse_header(parser *P)
{
    const uint8_t *b = P->f->base;
    uint64_t len = P->f->size;
    qm_header_info *h = &P->f->hdr;

    /* R-HDR-1 */
    if (len < 8 || memcmp(b, QM_MAGIC, 8) != 0)
        return FAIL(QM_ERR_BAD_MAGIC, "header.magic", 0, "not a qmap file: the first 8 bytes are not \"QMAP\\r\\n\\x1a\\n\"");
    if (len < QM_HEADER_SIZE)
        return FAIL(QM_ERR_TRUNCATED, "header", 0, "file is %llu bytes, shorter than the %d-byte header",
                    (unsigned long long)len, QM_HEADER_SIZE);

    h->major_version = qm_load_u16(b + H_MAJOR);
    h->minor_version = qm_load_u16(b + H_MINOR);
    h->alignment = qm_load_u64(b + H_ALIGNMENT);
    h->file_size = qm_load_u64(b + H_FILE_SIZE);
    h->metadata_offset = qm_load_u64(b + H_META_OFFSET);
    h->metadata_size = qm_load_u64(b + H_META_SIZE);
    h->metadata_count = qm_load_u64(b + H_META_COUNT);
    h->table_offset = qm_load_u64(b + H_TABLE_OFFSET);
    h->table_size = qm_load_u64(b + H_TABLE_SIZE);
    h->tensor_count = qm_load_u64(b + H_TENSOR_COUNT);
    h->data_offset = qm_load_u64(b + H_DATA_OFFSET);
    h->header_checksum = qm_load_u64(b + H_CHECKSUM);

    /* R-HDR-2: a newer minor is fine, an unknown major is not */
    if (h->major_version != QM_MAJOR_VERSION)
        return FAIL(QM_ERR_UNSUPPORTED_VERSION, "header.major_version", H_MAJOR,
                    "major version %u is not supported (this reader reads version %d.x)", h->major_version,
                    QM_MAJOR_VERSION);
    /* R-HDR-3, R-HDR-4 */
    if (len < h->file_size)
        return FAIL(QM_ERR_TRUNCATED, "header.file_size", H_FILE_SIZE,
                    "header says %llu bytes but the file has %llu (truncated)",
                    (unsigned long long)h->file_size, (unsigned long long)len);
    if (len > h->file_size)
        return FAIL(QM_ERR_TRAILING_BYTES, "header.file_size", H_FILE_SIZE,
                    "header says %llu bytes but the file has %llu (trailing bytes)",
                    (unsigned long long)h->file_size, (unsigned long long)len);
    /* R-HDR-5 */
    if (!qm_alignment_valid(h->alignment))
        return FAIL(QM_ERR_BAD_ALIGNMENT, "header.alignment", H_ALIGNMENT,
                    "alignment %llu is not a power of two in [64, 2^30]", (unsigned long long)h->alignment);
    /* R-HDR-6 */
    if (qm_load_u32(b + H_RESERVED0) != 0)
        return FAIL(QM_ERR_RESERVED_NONZERO, "header.reserved0", H_RESERVED0, "reserved field is not zero");
    for (int i = 0; i < 4; i++)
        if (qm_load_u64(b + H_RESERVED1 + 8 * i) != 0)
            return FAIL(QM_ERR_RESERVED_NONZERO, "header.reserved1", H_RESERVED1 + 8 * (uint64_t)i,
                        "reserved field is not zero");
    /* R-HDR-7 */
    if (h->metadata_count > QM_MAX_COUNT)
        return FAIL(QM_ERR_TOO_MANY, "header.metadata_count", H_META_COUNT, "%llu entries, above the cap of %llu",
                    (unsigned long long)h->metadata_count, (unsigned long long)QM_MAX_COUNT);
    if (h->tensor_count > QM_MAX_COUNT)
        return FAIL(QM_ERR_TOO_MANY, "header.tensor_count", H_TENSOR_COUNT, "%llu tensors, above the cap of %llu",
                    (unsigned long long)h->tensor_count, (unsigned long long)QM_MAX_COUNT);
    /* R-HDR-8, with R-GEN-1 on each sum */
    if (h->metadata_offset != QM_HEADER_SIZE)
        return FAIL(QM_ERR_BAD_LAYOUT, "header.metadata_offset", H_META_OFFSET, "is %llu, must be %d",
                    (unsigned long long)h->metadata_offset, QM_HEADER_SIZE);
    uint64_t table_off, table_end, data_off;
    if (!qm_add_u64(h->metadata_offset, h->metadata_size, &table_off))
        return FAIL(QM_ERR_OVERFLOW, "header.metadata_size", H_META_SIZE, "metadata_offset + metadata_size overflows");
    if (h->table_offset != table_off)
        return FAIL(QM_ERR_BAD_LAYOUT, "header.table_offset", H_TABLE_OFFSET,
                    "is %llu, must be metadata_offset + metadata_size = %llu", (unsigned long long)h->table_offset,
                    (unsigned long long)table_off);
    if (!qm_add_u64(h->table_offset, h->table_size, &table_end) ||
        !qm_align_up_u64(table_end, h->alignment, &data_off))
        return FAIL(QM_ERR_OVERFLOW, "header.table_size", H_TABLE_SIZE, "table_offset + table_size overflows");
    if (h->data_offset != data_off)
        return FAIL(QM_ERR_BAD_LAYOUT, "header.data_offset", H_DATA_OFFSET,
                    "is %llu, must be align_up(table end %llu, %llu) = %llu", (unsigned long long)h->data_offset,
                    (unsigned long long)table_end, (unsigned long long)h->alignment, (unsigned long long)data_off);
    if (h->data_offset > h->file_size)
        return FAIL(QM_ERR_BAD_LAYOUT, "header.data_offset", H_DATA_OFFSET, "%llu is past the end of the file (%llu)",
                    (unsigned long long)h->data_offset, (unsigned long long)h->file_size);

    /* R-HDR-9: bytes [0,120) then [128, data_offset), one stream */
    XXH3_state_t *st = XXH3_createState();
    if (!st) return FAIL(QM_ERR_NOMEM, NULL, QM_NO_OFFSET, "out of memory");
    XXH3_64bits_reset(st);
    XXH3_64bits_update(st, b, H_CHECKSUM);
    XXH3_64bits_update(st, b + QM_HEADER_SIZE, (size_t)(h->data_offset - QM_HEADER_SIZE));
    uint64_t sum = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    if (sum != h->header_checksum)
        return FAIL(QM_ERR_HEADER_CHECKSUM, "header.header_checksum", H_CHECKSUM,
                    "stored %016llx, computed %016llx: the header, metadata or tensor table is damaged",
                    (unsigned long long)h->header_checksum, (unsigned long long)sum);

    /* R-HDR-10 */
    for (uint64_t o = table_end; o < h->data_offset; o++)
        if (b[o] != 0) return FAIL(QM_ERR_PADDING_NONZERO, "header.padding", o, "padding before tensor data is not zero");
    return QM_OK;
}

/* ---- metadata -------------------------------------------------------------------------------- */

/* Walk one value of `type` at b[*pos], which must stay < end. Validates (R-META-1,5,6,7) and advances. */
static qm_status walk_value(parser *P, uint32_t type, uint64_t *pos, uint64_t end, const char *field,
                            uint64_t *str_off_out)
{
    const uint8_t *b = P->f->base;
    uint64_t p = *pos;
    uint32_t sz = qm_meta_scalar_size(type);
    if (sz) {
        if (end - p < sz) return FAIL(QM_ERR_META_OVERRUN, field, p, "value extends past the metadata section"); /* R-META-1 */
        if (type == QM_META_BOOL && b[p] > 1)
            return FAIL(QM_ERR_BAD_BOOL, field, p, "boolean byte is %u, must be 0 or 1", b[p]); /* R-META-5 */
        *pos = p + sz;
        return QM_OK;
    }
    /* STRING */
    if (end - p < 8) return FAIL(QM_ERR_META_OVERRUN, field, p, "string length extends past the metadata section"); /* R-META-1 */
    uint64_t n = qm_load_u64(b + p);
    if (n > QM_MAX_STRING_LEN)
        return FAIL(QM_ERR_META_TOO_LONG, field, p, "string of %llu bytes, above the cap of 2^30", (unsigned long long)n); /* R-META-6 */
    if (end - p - 8 < n)
        return FAIL(QM_ERR_META_OVERRUN, field, p, "string of %llu bytes extends past the metadata section", (unsigned long long)n); /* R-META-1 */
    if (!qm_utf8_valid(b + p + 8, n, true))
        return FAIL(QM_ERR_BAD_UTF8, field, p + 8, "string is not valid UTF-8"); /* R-META-7 */
    if (str_off_out) *str_off_out = p;
    *pos = p + 8 + n;
    return QM_OK;
}

static int cmp_meta_key(const void *a, const void *b)
{
    return strcmp((*(const qm_meta *const *)a)->key, (*(const qm_meta *const *)b)->key);
}
static int cmp_tensor_name(const void *a, const void *b)
{
    return strcmp((*(const qm_tensor *const *)a)->name, (*(const qm_tensor *const *)b)->name);
}

static qm_status parse_metadata(parser *P)
{
    qm_file *f = P->f;
    const uint8_t *b = f->base;
    const qm_header_info *h = &f->hdr;
    uint64_t p = h->metadata_offset, end = h->metadata_offset + h->metadata_size;
    char field[64];

    for (uint64_t i = 0; i < h->metadata_count; i++) {
        qm_meta *m = &f->meta[i];
        m->entry_offset = p;
        snprintf(field, sizeof field, "metadata[%llu]", (unsigned long long)i);
        if (end - p < 4) return FAIL(QM_ERR_META_OVERRUN, field, p, "entry extends past the metadata section"); /* R-META-1 */
        uint32_t key_len = qm_load_u32(b + p);
        if (key_len == 0 || key_len > QM_MAX_KEY_LEN)
            return FAIL(QM_ERR_BAD_KEY, field, p, "key length %u is not in 1..256", key_len); /* R-META-2 */
        if (end - p - 4 < (uint64_t)key_len + 4)
            return FAIL(QM_ERR_META_OVERRUN, field, p, "key extends past the metadata section"); /* R-META-1 */
        if (!qm_utf8_valid(b + p + 4, key_len, false))
            return FAIL(QM_ERR_BAD_UTF8, field, p + 4, "key is not valid UTF-8 or contains NUL"); /* R-META-3 */
        m->key = pool_copy(P, b + p + 4, key_len);
        snprintf(field, sizeof field, "metadata[%.40s]", m->key);
        p += 4 + key_len;
        uint32_t type = qm_load_u32(b + p);
        p += 4;
        if (type == 0 || type > QM_META_ARRAY)
            return FAIL(QM_ERR_UNKNOWN_META_TYPE, field, p - 4, "unknown value type %u", type); /* R-META-4 */
        m->type = type;
        m->value_offset = p;
        m->value = b + p;
        m->count = 1;
        if (type != QM_META_ARRAY) {
            uint64_t str_at = 0;
            qm_status s = walk_value(P, type, &p, end, field, &str_at);
            if (s != QM_OK) return s;
            switch (type) {
            case QM_META_U32: m->v.u32 = qm_load_u32(b + m->value_offset); break;
            case QM_META_I32: m->v.i32 = (int32_t)qm_load_u32(b + m->value_offset); break;
            case QM_META_U64: m->v.u64 = qm_load_u64(b + m->value_offset); break;
            case QM_META_I64: m->v.i64 = (int64_t)qm_load_u64(b + m->value_offset); break;
            case QM_META_F32: { uint32_t u = qm_load_u32(b + m->value_offset); memcpy(&m->v.f32, &u, 4); break; }
            case QM_META_F64: { uint64_t u = qm_load_u64(b + m->value_offset); memcpy(&m->v.f64, &u, 8); break; }
            case QM_META_BOOL: m->v.b = b[m->value_offset] != 0; break;
            case QM_META_STRING:
                m->str_len = qm_load_u64(b + str_at);
                m->str = (const char *)b + str_at + 8;
                break;
            }
        } else {
            if (end - p < 12) return FAIL(QM_ERR_META_OVERRUN, field, p, "array header extends past the metadata section"); /* R-META-1 */
            uint32_t et = qm_load_u32(b + p);
            uint64_t count = qm_load_u64(b + p + 4);
            if (et == 0 || et >= QM_META_ARRAY)
                return FAIL(QM_ERR_UNKNOWN_META_TYPE, field, p, "array element type %u is unknown or an array", et); /* R-META-4 */
            if (count > QM_MAX_ARRAY_COUNT)
                return FAIL(QM_ERR_META_TOO_LONG, field, p + 4, "array of %llu elements, above the cap of 2^32", (unsigned long long)count); /* R-META-6 */
            p += 12;
            uint32_t min_size = et == QM_META_STRING ? 8 : qm_meta_scalar_size(et);
            if (count > (end - p) / min_size) /* R-META-1, before walking: count × min size must fit */
                return FAIL(QM_ERR_META_OVERRUN, field, p - 8, "%llu elements cannot fit in the %llu bytes left",
                            (unsigned long long)count, (unsigned long long)(end - p));
            m->elem_type = et;
            m->count = count;
            if (et == QM_META_STRING) {
                uint64_t *idx = P->index_next;
                P->index_next += count;
                for (uint64_t k = 0; k < count; k++) {
                    uint64_t at = 0;
                    qm_status s = walk_value(P, et, &p, end, field, &at);
                    if (s != QM_OK) return s;
                    idx[k] = at - m->value_offset;
                }
                m->str_index = idx;
            } else if (et == QM_META_BOOL) {
                for (uint64_t k = 0; k < count; k++, p++)
                    if (b[p] > 1) return FAIL(QM_ERR_BAD_BOOL, field, p, "boolean byte is %u, must be 0 or 1", b[p]); /* R-META-5 */
            } else {
                p += count * min_size; /* fits: checked above */
            }
        }
        m->value_size = p - m->value_offset;
    }
    /* R-META-9 */
    if (p != end)
        return FAIL(QM_ERR_META_SIZE, "header.metadata_size", p, "%llu bytes left over after %llu entries",
                    (unsigned long long)(end - p), (unsigned long long)h->metadata_count);
    /* R-META-8 */
    for (uint64_t i = 0; i < h->metadata_count; i++) f->meta_by_key[i] = &f->meta[i];
    if (h->metadata_count > 1) qsort(f->meta_by_key, h->metadata_count, sizeof *f->meta_by_key, cmp_meta_key);
    for (uint64_t i = 1; i < h->metadata_count; i++)
        if (strcmp(f->meta_by_key[i - 1]->key, f->meta_by_key[i]->key) == 0) {
            const qm_meta *later = f->meta_by_key[i]->entry_offset > f->meta_by_key[i - 1]->entry_offset
                                       ? f->meta_by_key[i] : f->meta_by_key[i - 1];
            return FAIL(QM_ERR_DUPLICATE_KEY, "metadata.key", later->entry_offset, "key \"%.200s\" appears twice", later->key);
        }
    return QM_OK;
}

/* ---- tensor table ---------------------------------------------------------------------------- */

static qm_status parse_table(parser *P)
{
    qm_file *f = P->f;
    const uint8_t *b = f->base;
    const qm_header_info *h = &f->hdr;
    uint64_t p = h->table_offset, end = h->table_offset + h->table_size;
    uint64_t prev_end = h->data_offset;
    char field[96];

    for (uint64_t i = 0; i < h->tensor_count; i++) {
        qm_tensor *t = &f->tensors[i];
        t->entry_offset = p;
        snprintf(field, sizeof field, "tensor[%llu]", (unsigned long long)i);
        if (end - p < 4) return FAIL(QM_ERR_TABLE_OVERRUN, field, p, "entry extends past the tensor table"); /* R-TENSOR-1 */
        uint32_t name_len = qm_load_u32(b + p);
        if (name_len == 0 || name_len > QM_MAX_NAME_LEN)
            return FAIL(QM_ERR_BAD_NAME, field, p, "name length %u is not in 1..1024", name_len); /* R-TENSOR-2 */
        if (end - p < (uint64_t)TENSOR_ENTRY_FIXED + name_len)
            return FAIL(QM_ERR_TABLE_OVERRUN, field, p, "entry extends past the tensor table"); /* R-TENSOR-1 */
        if (!qm_utf8_valid(b + p + 4, name_len, false))
            return FAIL(QM_ERR_BAD_UTF8, field, p + 4, "name is not valid UTF-8 or contains NUL"); /* R-TENSOR-3 */
        t->name = pool_copy(P, b + p + 4, name_len);
        t->name_len = name_len;
        snprintf(field, sizeof field, "tensor[%.60s]", t->name);
        const uint8_t *e = b + p + 4 + name_len;
        uint64_t eo = p + 4 + name_len; /* file offset of e */
        t->dtype = qm_load_u32(e);
        t->rank = qm_load_u32(e + 4);
        for (int d = 0; d < QM_MAX_RANK; d++) t->dims[d] = qm_load_u64(e + 8 + 8 * d);
        t->offset = qm_load_u64(e + 40);
        t->size = qm_load_u64(e + 48);
        t->checksum = qm_load_u64(e + 56);
        uint64_t reserved = qm_load_u64(e + 64);
        p = eo + 72;

        if (!qm_dtype_info(t->dtype))
            return FAIL(QM_ERR_UNKNOWN_DTYPE, field, eo, "unknown dtype id %u", t->dtype); /* R-TENSOR-5 */
        if (t->rank < 1 || t->rank > QM_MAX_RANK)
            return FAIL(QM_ERR_BAD_RANK, field, eo + 4, "rank %u is not in 1..4", t->rank); /* R-TENSOR-6 */
        for (uint32_t d = 0; d < t->rank; d++)
            if (t->dims[d] == 0 || t->dims[d] > QM_MAX_DIM)
                return FAIL(QM_ERR_BAD_DIM, field, eo + 8 + 8 * d, "dims[%u] = %llu is not in 1..2^32", d,
                            (unsigned long long)t->dims[d]); /* R-TENSOR-7 */
        if (qm_shape_elements(t->rank, t->dims, &t->n_elements) != QM_OK)
            return FAIL(QM_ERR_TOO_MANY_ELEMENTS, field, eo + 8, "more than 2^40 elements"); /* R-TENSOR-8 */
        for (uint32_t d = t->rank; d < QM_MAX_RANK; d++)
            if (t->dims[d] != 0)
                return FAIL(QM_ERR_RESERVED_NONZERO, field, eo + 8 + 8 * d, "dims[%u] beyond rank %u is not zero", d, t->rank); /* R-TENSOR-9 */
        if (reserved != 0)
            return FAIL(QM_ERR_RESERVED_NONZERO, field, eo + 64, "reserved field is not zero"); /* R-TENSOR-9 */
        uint64_t want;
        qm_status s = qm_tensor_nbytes(t->dtype, t->rank, t->dims, h->alignment, &want);
        if (s == QM_ERR_OVERFLOW) return FAIL(QM_ERR_OVERFLOW, field, eo + 48, "size of the shape overflows"); /* R-GEN-1 */
        if (t->size != want)
            return FAIL(QM_ERR_SIZE_MISMATCH, field, eo + 48, "size is %llu bytes, %s with this shape needs %llu",
                        (unsigned long long)t->size, qm_dtype_info(t->dtype)->name, (unsigned long long)want); /* R-TENSOR-10 */
        uint64_t t_end;
        if (!qm_add_u64(t->offset, t->size, &t_end))
            return FAIL(QM_ERR_OVERFLOW, field, eo + 40, "offset + size overflows"); /* R-GEN-1 */
        if (t->offset % h->alignment != 0)
            return FAIL(QM_ERR_MISALIGNED, field, eo + 40, "offset %llu is not a multiple of the alignment %llu",
                        (unsigned long long)t->offset, (unsigned long long)h->alignment); /* R-TENSOR-11 */
        if (t->offset < h->data_offset || t_end > h->file_size)
            return FAIL(QM_ERR_OUT_OF_BOUNDS, field, eo + 40, "data [%llu, %llu) is outside the data region [%llu, %llu)",
                        (unsigned long long)t->offset, (unsigned long long)t_end, (unsigned long long)h->data_offset,
                        (unsigned long long)h->file_size); /* R-TENSOR-12 */
        if (t->offset < prev_end)
            return FAIL(QM_ERR_TENSOR_OVERLAP, field, eo + 40, "starts at %llu, before the previous tensor ends at %llu",
                        (unsigned long long)t->offset, (unsigned long long)prev_end); /* R-TENSOR-13 */
        prev_end = t_end;
        t->data = b + t->offset;
    }
    if (p != end) /* R-TENSOR-1 */
        return FAIL(QM_ERR_TABLE_OVERRUN, "header.table_size", p, "%llu bytes left over after %llu tensors",
                    (unsigned long long)(end - p), (unsigned long long)h->tensor_count);
    if (prev_end != h->file_size) /* R-TENSOR-14 */
        return FAIL(QM_ERR_DATA_END, "header.file_size", H_FILE_SIZE, "tensor data ends at %llu but the file ends at %llu",
                    (unsigned long long)prev_end, (unsigned long long)h->file_size);
    /* R-TENSOR-4 */
    for (uint64_t i = 0; i < h->tensor_count; i++) f->tensors_by_name[i] = &f->tensors[i];
    if (h->tensor_count > 1) qsort(f->tensors_by_name, h->tensor_count, sizeof *f->tensors_by_name, cmp_tensor_name);
    for (uint64_t i = 1; i < h->tensor_count; i++)
        if (strcmp(f->tensors_by_name[i - 1]->name, f->tensors_by_name[i]->name) == 0) {
            const qm_tensor *later = f->tensors_by_name[i]->entry_offset > f->tensors_by_name[i - 1]->entry_offset
                                         ? f->tensors_by_name[i] : f->tensors_by_name[i - 1];
            return FAIL(QM_ERR_DUPLICATE_NAME, "tensor.name", later->entry_offset, "name \"%.200s\" appears twice", later->name);
        }
    return QM_OK;
}

static qm_status parse(qm_file *f, qm_error *err)
{
    parser P0 = { .f = f, .name = f->path, .err = err }, *P = &P0;
    qm_status s = parse_header(P);
    if (s != QM_OK) return s;
    const qm_header_info *h = &f->hdr;

    /* R-META-1 / R-TENSOR-1 up front: every entry needs a minimum number of bytes, so a huge count in
     * a small section is rejected before anything is allocated for it. With these checks every
     * allocation below is bounded by the section sizes, which R-HDR-8 bounded by the file. */
    if (h->metadata_count > h->metadata_size / META_ENTRY_MIN)
        return FAIL(QM_ERR_META_OVERRUN, "header.metadata_count", H_META_COUNT,
                    "%llu entries cannot fit in a %llu-byte metadata section", (unsigned long long)h->metadata_count,
                    (unsigned long long)h->metadata_size);
    if (h->tensor_count > h->table_size / TENSOR_ENTRY_MIN)
        return FAIL(QM_ERR_TABLE_OVERRUN, "header.tensor_count", H_TENSOR_COUNT,
                    "%llu tensors cannot fit in a %llu-byte table", (unsigned long long)h->tensor_count,
                    (unsigned long long)h->table_size);
    size_t nm = (size_t)h->metadata_count, nt = (size_t)h->tensor_count;
    f->meta = calloc(nm ? nm : 1, sizeof *f->meta);
    f->meta_by_key = calloc(nm ? nm : 1, sizeof *f->meta_by_key);
    f->tensors = calloc(nt ? nt : 1, sizeof *f->tensors);
    f->tensors_by_name = calloc(nt ? nt : 1, sizeof *f->tensors_by_name);
    /* keys and names are copied with a NUL: at most section bytes + one per entry */
    f->strings = malloc((size_t)(h->metadata_size + h->table_size + nm + nt + 1));
    /* string-array index: one u64 per element; each element takes ≥ 8 bytes of the section */
    f->str_index_pool = malloc((size_t)(h->metadata_size / 8 + 1) * sizeof(uint64_t));
    if (!f->meta || !f->meta_by_key || !f->tensors || !f->tensors_by_name || !f->strings || !f->str_index_pool)
        return FAIL(QM_ERR_NOMEM, NULL, QM_NO_OFFSET, "out of memory reading the metadata and tensor table");
    P->pool_next = f->strings;
    P->index_next = f->str_index_pool;

    s = parse_metadata(P);
    if (s != QM_OK) return s;
    return parse_table(P);
}

/* ---- open / close ---------------------------------------------------------------------------- */

static qm_file *file_new(const char *name)
{
    qm_file *f = calloc(1, sizeof *f);
    if (!f) return NULL;
    f->path = strdup(name ? name : "<buffer>");
    if (!f->path) { free(f); return NULL; }
    return f;
}

void qm_close(qm_file *f)
{
    if (!f) return;
    if (f->mapped && f->base) munmap((void *)f->base, (size_t)f->size);
    free(f->meta);
    free(f->meta_by_key);
    free(f->tensors);
    free(f->tensors_by_name);
    free(f->strings);
    free(f->str_index_pool);
    free(f->path);
    free(f);
}

qm_status qm_open_buffer(const void *buf, size_t len, const char *name, qm_file **out, qm_error *err)
{
    if (!out || (!buf && len)) return qm_fail(err, QM_ERR_INVALID_ARGUMENT, name, NULL, QM_NO_OFFSET, "null argument");
    *out = NULL;
    qm_file *f = file_new(name);
    if (!f) return qm_fail(err, QM_ERR_NOMEM, name, NULL, QM_NO_OFFSET, "out of memory");
    static const uint8_t empty[1];
    f->base = buf ? buf : empty;
    f->size = len;
    qm_status s = parse(f, err);
    if (s != QM_OK) { qm_close(f); return s; }
    *out = f;
    return QM_OK;
}

/* How an opener gives f (size > 0) its bytes from the open descriptor fd: sets f->base (and f->mapped
 * when qm_close must munmap it), or fails naming the file. The caller closes fd and, on failure, f. */
typedef qm_status fill_fn(qm_file *f, int fd, qm_error *err);

/* The file itself, mapped read-only. */
static qm_status fill_mapped(qm_file *f, int fd, qm_error *err)
{
    void *m = mmap(NULL, (size_t)f->size, PROT_READ, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED)
        return qm_fail(err, QM_ERR_IO, f->path, NULL, QM_NO_OFFSET, "cannot map: %s", strerror(errno));
    f->base = m;
    f->mapped = true;
#ifdef MADV_HUGEPAGE
    /* Pages read in through this mapping (a file not in the page cache yet) come in 2 MiB folios, which
     * the kernel maps with one page-table entry each, as it maps the folios qm_writer's 4 MiB writes
     * leave (qm_writer.c, emit): fewer TLB misses when the runtime streams the weights. Advice only:
     * ignored where the kernel or file system has no large folios. */
    (void)madvise(m, (size_t)f->size, MADV_HUGEPAGE);
#endif
    return QM_OK;
}

/* A copy in anonymous pages, as large a page as the kernel gives (the copy is a bandwidth baseline). */
static qm_status fill_copied(qm_file *f, int fd, qm_error *err)
{
    void *m = mmap(NULL, (size_t)f->size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
        int e = errno;
        return qm_fail(err, e == ENOMEM ? QM_ERR_NOMEM : QM_ERR_IO, f->path, NULL, QM_NO_OFFSET,
                       "cannot allocate %llu bytes to read the file into: %s", (unsigned long long)f->size,
                       strerror(e));
    }
#ifdef MADV_HUGEPAGE
    (void)madvise(m, (size_t)f->size, MADV_HUGEPAGE);
#endif
    f->base = m;
    f->mapped = true;   /* munmap on close */
    size_t done = 0;
    while (done < (size_t)f->size) {
        size_t want = (size_t)f->size - done;
        if (want > ((size_t)1 << 30)) want = (size_t)1 << 30;
        ssize_t got = pread(fd, (uint8_t *)m + done, want, (off_t)done);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0)
            return qm_fail(err, QM_ERR_IO, f->path, NULL, (uint64_t)done, "%s after %zu of %llu bytes",
                           got < 0 ? strerror(errno) : "the file ended (it shrank while being read)", done,
                           (unsigned long long)f->size);
        done += (size_t)got;
    }
    return QM_OK;
}

/* Both openers: the regular file at `path`, its bytes given by `fill`, then parsed. */
static qm_status open_with(const char *path, qm_file **out, qm_error *err, fill_fn *fill)
{
    if (!out || !path) return qm_fail(err, QM_ERR_INVALID_ARGUMENT, path, NULL, QM_NO_OFFSET, "null argument");
    *out = NULL;
    struct stat st;
    int fd = qm_open_regular(path, &st, err);
    if (fd < 0) return err ? err->code : QM_ERR_IO;
    if ((uint64_t)st.st_size > SIZE_MAX) {
        close(fd);
        return qm_fail(err, QM_ERR_IO, path, NULL, QM_NO_OFFSET, "file too large for this address space");
    }
    qm_file *f = file_new(path);
    if (!f) { close(fd); return qm_fail(err, QM_ERR_NOMEM, path, NULL, QM_NO_OFFSET, "out of memory"); }
    static const uint8_t empty[1];
    f->size = (uint64_t)st.st_size;
    f->base = empty; /* mmap of 0 bytes is invalid; the parser rejects an empty file as bad magic */
    qm_status s = f->size > 0 ? fill(f, fd, err) : QM_OK;
    close(fd); /* a mapping keeps the file */
    if (s == QM_OK) s = parse(f, err);
    if (s != QM_OK) { qm_close(f); return s; }
    *out = f;
    return QM_OK;
}

qm_status qm_open(const char *path, qm_file **out, qm_error *err) { return open_with(path, out, err, fill_mapped); }

qm_status qm_open_copy(const char *path, qm_file **out, qm_error *err)
{
    return open_with(path, out, err, fill_copied);
}

/* ---- accessors ------------------------------------------------------------------------------- */

const qm_header_info *qm_file_header(const qm_file *f) { return &f->hdr; }
const char *qm_file_path(const qm_file *f) { return f->path; }
const uint8_t *qm_file_bytes(const qm_file *f) { return f->base; }
uint64_t qm_tensor_count(const qm_file *f) { return f->hdr.tensor_count; }
uint64_t qm_meta_count(const qm_file *f) { return f->hdr.metadata_count; }

const qm_tensor *qm_tensor_at(const qm_file *f, uint64_t i)
{
    return i < f->hdr.tensor_count ? &f->tensors[i] : NULL;
}
const qm_meta *qm_meta_at(const qm_file *f, uint64_t i)
{
    return i < f->hdr.metadata_count ? &f->meta[i] : NULL;
}

const qm_tensor *qm_find_tensor(const qm_file *f, const char *name)
{
    if (!name || f->hdr.tensor_count == 0) return NULL;
    qm_tensor key = { .name = name };
    const qm_tensor *kp = &key;
    const qm_tensor **hit = bsearch(&kp, f->tensors_by_name, (size_t)f->hdr.tensor_count,
                                    sizeof *f->tensors_by_name, cmp_tensor_name);
    return hit ? *hit : NULL;
}

const qm_meta *qm_find_meta(const qm_file *f, const char *key)
{
    if (!key || f->hdr.metadata_count == 0) return NULL;
    qm_meta k = { .key = key };
    const qm_meta *kp = &k;
    const qm_meta **hit = bsearch(&kp, f->meta_by_key, (size_t)f->hdr.metadata_count, sizeof *f->meta_by_key,
                                  cmp_meta_key);
    return hit ? *hit : NULL;
}

static qm_status find_typed(const qm_file *f, const char *key, const qm_meta **m)
{
    *m = qm_find_meta(f, key);
    return *m ? QM_OK : QM_ERR_NOT_FOUND;
}

qm_status qm_meta_get_u32(const qm_file *f, const char *key, uint32_t *out)
{
    const qm_meta *m;
    if (find_typed(f, key, &m)) return QM_ERR_NOT_FOUND;
    if (m->type != QM_META_U32) return QM_ERR_TYPE_MISMATCH;
    *out = m->v.u32;
    return QM_OK;
}
qm_status qm_meta_get_u64(const qm_file *f, const char *key, uint64_t *out)
{
    const qm_meta *m;
    if (find_typed(f, key, &m)) return QM_ERR_NOT_FOUND;
    if (m->type == QM_META_U64) *out = m->v.u64;
    else if (m->type == QM_META_U32) *out = m->v.u32;
    else return QM_ERR_TYPE_MISMATCH;
    return QM_OK;
}
qm_status qm_meta_get_i64(const qm_file *f, const char *key, int64_t *out)
{
    const qm_meta *m;
    if (find_typed(f, key, &m)) return QM_ERR_NOT_FOUND;
    if (m->type == QM_META_I64) *out = m->v.i64;
    else if (m->type == QM_META_I32) *out = m->v.i32;
    else return QM_ERR_TYPE_MISMATCH;
    return QM_OK;
}
qm_status qm_meta_get_f64(const qm_file *f, const char *key, double *out)
{
    const qm_meta *m;
    if (find_typed(f, key, &m)) return QM_ERR_NOT_FOUND;
    if (m->type == QM_META_F64) *out = m->v.f64;
    else if (m->type == QM_META_F32) *out = m->v.f32;
    else return QM_ERR_TYPE_MISMATCH;
    return QM_OK;
}
qm_status qm_meta_get_bool(const qm_file *f, const char *key, bool *out)
{
    const qm_meta *m;
    if (find_typed(f, key, &m)) return QM_ERR_NOT_FOUND;
    if (m->type != QM_META_BOOL) return QM_ERR_TYPE_MISMATCH;
    *out = m->v.b;
    return QM_OK;
}
qm_status qm_meta_get_string(const qm_file *f, const char *key, const char **out, uint64_t *len)
{
    const qm_meta *m;
    if (find_typed(f, key, &m)) return QM_ERR_NOT_FOUND;
    if (m->type != QM_META_STRING) return QM_ERR_TYPE_MISMATCH;
    *out = m->str;
    if (len) *len = m->str_len;
    return QM_OK;
}

qm_status qm_meta_array_get(const qm_meta *m, uint64_t i, void *out)
{
    if (!m || !out) return QM_ERR_INVALID_ARGUMENT;
    if (m->type != QM_META_ARRAY || m->elem_type == QM_META_STRING) return QM_ERR_TYPE_MISMATCH;
    if (i >= m->count) return QM_ERR_INVALID_ARGUMENT;
    uint32_t sz = qm_meta_scalar_size(m->elem_type);
    const uint8_t *p = m->value + 12 + i * sz;
    switch (m->elem_type) {
    case QM_META_U32: case QM_META_I32: case QM_META_F32: { uint32_t u = qm_load_u32(p); memcpy(out, &u, 4); break; }
    case QM_META_U64: case QM_META_I64: case QM_META_F64: { uint64_t u = qm_load_u64(p); memcpy(out, &u, 8); break; }
    case QM_META_BOOL: *(bool *)out = *p != 0; break;
    default: return QM_ERR_TYPE_MISMATCH;
    }
    return QM_OK;
}

qm_status qm_meta_array_string(const qm_meta *m, uint64_t i, const char **s, uint64_t *len)
{
    if (!m || !s) return QM_ERR_INVALID_ARGUMENT;
    if (m->type != QM_META_ARRAY || m->elem_type != QM_META_STRING) return QM_ERR_TYPE_MISMATCH;
    if (i >= m->count) return QM_ERR_INVALID_ARGUMENT;
    const uint8_t *p = m->value + m->str_index[i];
    if (len) *len = qm_load_u64(p);
    *s = (const char *)p + 8;
    return QM_OK;
}
