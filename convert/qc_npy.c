/* qc_npy.c — importer for NumPy .npy files and .npz archives of them.
 *
 * .npy: "\x93NUMPY", major, minor, a header length (u16 LE for 1.0, u32 LE for 2.0 and 3.0), then the
 * header: a Python dict literal {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), } (3.0 allows
 * UTF-8 in it, 1.0/2.0 are Latin-1), then the array bytes, exactly product(shape) × itemsize of them.
 * The header is read by a small strict parser of exactly that grammar — never evaluated — with the three
 * keys in any order, each once, blanks anywhere between tokens, and tuples with or without a trailing
 * comma ((3,) is a 1-d shape, () a scalar, (3) is an int and refused).
 *
 * .npz: a zip archive (stored or deflated) of NAME.npy entries. Each entry's .npy header is read from the
 * entry's first bytes (bounded by NPY_MAX_HEADER), and the entry becomes one QC_STORAGE_ZIP storage whose
 * zip_skip is the header's length, so qc_source_load() hands out only the array bytes.
 */
#include <stdlib.h>
#include <string.h>
#include <zip.h>

#include "qc_source.h"
#include "qm_bytes.h"

/* NumPy itself refuses headers above 10,000 bytes by default; the dicts we accept are far shorter. */
#define NPY_MAX_HEADER 65536u
#define NPY_MAGIC "\x93NUMPY"
#define NPY_MAGIC_LEN 6u
/* Deflate cannot expand by more than 1032:1 (a 258-byte match per two bits); an entry claiming more than
 * that is lying, and believing it would make qc_source_load allocate the claimed size. */
#define DEFLATE_MAX_RATIO 1032u

typedef struct npy_info {
    qc_dtype dtype;
    bool fortran;
    uint32_t rank;
    uint64_t shape[QC_MAX_RANK];
    uint64_t header_len;             /* magic through the end of the dict: where the data starts */
    uint64_t data_len;               /* product(shape) × itemsize */
} npy_info;

/* ---- the header dict ---- */

typedef struct lexer {
    const char *p, *end;
    const char *file;                /* for messages */
    uint64_t base;                   /* file offset of the dict's first byte */
    const char *start;
} lexer;

static uint64_t lex_at(const lexer *lx) { return lx->base + (uint64_t)(lx->p - lx->start); }

static qm_status lex_fail(const lexer *lx, qm_error *err, const char *what)
{
    return qm_fail(err, QM_ERR_BAD_SOURCE, lx->file, "npy.header", lex_at(lx), "malformed header dict: %s", what);
}

static void skip_blanks(lexer *lx)
{
    while (lx->p < lx->end && (*lx->p == ' ' || *lx->p == '\t' || *lx->p == '\n' || *lx->p == '\r' ||
                               *lx->p == '\f'))
        lx->p++;
}

/* Consume `c` (after blanks). */
static bool eat(lexer *lx, char c)
{
    skip_blanks(lx);
    if (lx->p < lx->end && *lx->p == c) {
        lx->p++;
        return true;
    }
    return false;
}

/* A quoted string without escapes ('…' or "…"); [*s, *s + *n) receives its contents. NumPy never writes
 * escapes in these strings, so a backslash means something we do not understand. */
static bool lex_string(lexer *lx, const char **s, size_t *n)
{
    skip_blanks(lx);
    if (lx->p >= lx->end || (*lx->p != '\'' && *lx->p != '"')) return false;
    char q = *lx->p++;
    const char *b = lx->p;
    while (lx->p < lx->end && *lx->p != q) {
        if (*lx->p == '\\' || *lx->p == '\n' || *lx->p == '\0') return false;
        lx->p++;
    }
    if (lx->p >= lx->end) return false;
    *s = b;
    *n = (size_t)(lx->p - b);
    lx->p++;
    return true;
}

static bool lex_word(lexer *lx, const char *w)
{
    skip_blanks(lx);
    size_t n = strlen(w);
    if ((size_t)(lx->end - lx->p) < n || memcmp(lx->p, w, n)) return false;
    const char *after = lx->p + n;
    if (after < lx->end && ((*after >= 'a' && *after <= 'z') || (*after >= 'A' && *after <= 'Z') ||
                            (*after >= '0' && *after <= '9') || *after == '_'))
        return false;
    lx->p = after;
    return true;
}

/* A Python decimal integer literal ≥ 0 without underscores: "0" or a digit string not starting with 0. */
static qm_status lex_uint(lexer *lx, uint64_t *v, qm_error *err)
{
    skip_blanks(lx);
    if (lx->p >= lx->end || *lx->p < '0' || *lx->p > '9') return lex_fail(lx, err, "shape entry is not an integer");
    if (*lx->p == '0' && lx->p + 1 < lx->end && lx->p[1] >= '0' && lx->p[1] <= '9')
        return lex_fail(lx, err, "shape entry has a leading zero");
    uint64_t x = 0;
    while (lx->p < lx->end && *lx->p >= '0' && *lx->p <= '9') {
        if (!qm_mul_u64(x, 10, &x) || !qm_add_u64(x, (uint64_t)(*lx->p - '0'), &x))
            return lex_fail(lx, err, "shape entry does not fit in 64 bits");
        lx->p++;
    }
    *v = x;
    return QM_OK;
}

/* '(' [int (',' int)* [',']] ')', with "(int)" refused because Python reads it as an int. */
static qm_status lex_shape(lexer *lx, npy_info *info, qm_error *err)
{
    if (!eat(lx, '(')) return lex_fail(lx, err, "'shape' is not a tuple");
    info->rank = 0;
    if (eat(lx, ')')) return QM_OK;
    for (;;) {
        if (info->rank == QC_MAX_RANK)
            return qm_fail(err, QM_ERR_UNSUPPORTED, lx->file, "npy.shape", lex_at(lx),
                           "array has more than %d dimensions", QC_MAX_RANK);
        qm_status st = lex_uint(lx, &info->shape[info->rank], err);
        if (st != QM_OK) return st;
        info->rank++;
        if (eat(lx, ')')) {
            if (info->rank == 1) return lex_fail(lx, err, "'shape' (n) is an int, not a tuple; expected (n,)");
            return QM_OK;
        }
        if (!eat(lx, ',')) return lex_fail(lx, err, "expected ',' or ')' in 'shape'");
        if (eat(lx, ')')) return QM_OK;
    }
}

/* descr → dtype: byte order '<' (or '=' on a little-endian host; '|' and any order for one-byte types,
 * where it means nothing), then a kind and itemsize NumPy writes for the types qc_dtype has. */
static qm_status parse_descr(lexer *lx, const char *s, size_t n, npy_info *info, qm_error *err)
{
    static const struct { const char *code; qc_dtype t; } codes[] = {
        { "f4", QC_F32 }, { "f2", QC_F16 }, { "f8", QC_F64 }, { "b1", QC_BOOL }, { "i8", QC_I64 },
        { "i4", QC_I32 }, { "i2", QC_I16 }, { "i1", QC_I8 },  { "u1", QC_U8 },
    };
    char shown[24];
    snprintf(shown, sizeof shown, "%.*s", n < 16 ? (int)n : 16, s);
    if ((n >= 1 && s[0] == 'O') || (n >= 2 && s[1] == 'O'))
        return qm_fail(err, QM_ERR_UNSUPPORTED, lx->file, "npy.descr", lx->base,
                       "descr '%s' is a pickled object array; refusing to unpickle", shown);
    if (n == 3) {
        for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
            if (memcmp(s + 1, codes[i].code, 2)) continue;
            bool one_byte = qc_dtype_size(codes[i].t) == 1;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
            bool native_le = true;
#else
            bool native_le = false;
#endif
            if (one_byte ? (s[0] == '<' || s[0] == '>' || s[0] == '|' || s[0] == '=')
                         : (s[0] == '<' || (s[0] == '=' && native_le))) {
                info->dtype = codes[i].t;
                return QM_OK;
            }
            if (s[0] == '>' || s[0] == '=')
                return qm_fail(err, QM_ERR_UNSUPPORTED, lx->file, "npy.descr", lx->base,
                               "descr '%s' is big-endian; save the array little-endian", shown);
            break;
        }
    }
    return qm_fail(err, QM_ERR_UNSUPPORTED, lx->file, "npy.descr", lx->base,
                   "descr '%s' is not one of <f4 <f2 <f8 |b1 <i8 <i4 <i2 |i1 |u1", shown);
}

static qm_status parse_dict(lexer *lx, npy_info *info, qm_error *err)
{
    bool have_descr = false, have_fortran = false, have_shape = false;
    if (!eat(lx, '{')) return lex_fail(lx, err, "does not start with '{'");
    while (!eat(lx, '}')) {
        const char *k;
        size_t kn;
        if (!lex_string(lx, &k, &kn)) return lex_fail(lx, err, "expected a quoted key");
        if (!eat(lx, ':')) return lex_fail(lx, err, "expected ':' after a key");
        bool *seen = kn == 5 && !memcmp(k, "descr", 5)          ? &have_descr
                   : kn == 13 && !memcmp(k, "fortran_order", 13) ? &have_fortran
                   : kn == 5 && !memcmp(k, "shape", 5)           ? &have_shape
                                                                 : NULL;
        if (!seen) return lex_fail(lx, err, "unknown key (only 'descr', 'fortran_order', 'shape')");
        if (*seen) return lex_fail(lx, err, "duplicate key");
        qm_status st = QM_OK;
        if (seen == &have_descr) {
            const char *v;
            size_t vn;
            skip_blanks(lx);
            if (lx->p < lx->end && *lx->p == '[')
                return qm_fail(err, QM_ERR_UNSUPPORTED, lx->file, "npy.descr", lex_at(lx),
                               "structured (record) arrays are not supported");
            if (!lex_string(lx, &v, &vn)) return lex_fail(lx, err, "'descr' is not a string");
            st = parse_descr(lx, v, vn, info, err);
        } else if (seen == &have_fortran) {
            if (lex_word(lx, "True")) info->fortran = true;
            else if (lex_word(lx, "False")) info->fortran = false;
            else return lex_fail(lx, err, "'fortran_order' is not True or False");
        } else {
            st = lex_shape(lx, info, err);
        }
        if (st != QM_OK) return st;
        *seen = true;
        if (eat(lx, ',')) continue;
        if (!eat(lx, '}')) return lex_fail(lx, err, "expected ',' or '}'");
        break;
    }
    skip_blanks(lx);
    if (lx->p != lx->end) return lex_fail(lx, err, "bytes after the closing '}'");
    const char *missing = !have_descr ? "descr" : !have_fortran ? "fortran_order" : !have_shape ? "shape" : NULL;
    if (missing)
        return qm_fail(err, QM_ERR_BAD_SOURCE, lx->file, "npy.header", lx->base, "header dict has no '%s'", missing);
    return QM_OK;
}

/* The fixed preamble: how long the whole header is. `avail` bytes are at `d`. */
static qm_status parse_preamble(const uint8_t *d, uint64_t avail, const char *file, uint64_t *header_len,
                                unsigned *major, qm_error *err)
{
    if (avail < NPY_MAGIC_LEN + 2 || memcmp(d, NPY_MAGIC, NPY_MAGIC_LEN))
        return qm_fail(err, QM_ERR_BAD_SOURCE, file, "npy.magic", 0, "not a .npy file (bad magic)");
    *major = d[6];
    if (d[6] < 1 || d[6] > 3 || d[7] != 0)
        return qm_fail(err, QM_ERR_UNSUPPORTED, file, "npy.version", 6, "unknown .npy version %u.%u", d[6], d[7]);
    unsigned lenlen = d[6] == 1 ? 2 : 4;
    if (avail < 8 + lenlen)
        return qm_fail(err, QM_ERR_BAD_SOURCE, file, "npy.header_len", 8, "file ends inside the header length");
    uint64_t hl = lenlen == 2 ? qm_load_u16(d + 8) : qm_load_u32(d + 8);
    if (hl > NPY_MAX_HEADER)
        return qm_fail(err, QM_ERR_BAD_SOURCE, file, "npy.header_len", 8, "header length %llu is above the limit of %u",
                       (unsigned long long)hl, NPY_MAX_HEADER);
    *header_len = 8 + lenlen + hl;
    return QM_OK;
}

/* Bytes [0, avail) hold at least the whole header (checked by the caller against header_len). */
static qm_status parse_header(const uint8_t *d, uint64_t avail, const char *file, npy_info *info, qm_error *err)
{
    unsigned major = 0;
    qm_status st = parse_preamble(d, avail, file, &info->header_len, &major, err);
    if (st != QM_OK) return st;
    if (avail < info->header_len)
        return qm_fail(err, QM_ERR_BAD_SOURCE, file, "npy.header", avail, "file ends inside the %llu-byte header",
                       (unsigned long long)info->header_len);
    uint64_t dict_at = major == 1 ? 10 : 12;
    /* 1.0/2.0 are Latin-1 and 3.0 UTF-8, but every byte the grammar accepts is ASCII, so both are read alike */
    lexer lx = { .p = (const char *)d + dict_at, .end = (const char *)d + info->header_len, .file = file,
                 .base = dict_at, .start = (const char *)d + dict_at };
    if ((st = parse_dict(&lx, info, err)) != QM_OK) return st;
    uint64_t n = qc_dtype_size(info->dtype);
    for (uint32_t i = 0; i < info->rank; i++)
        if (!qm_mul_u64(n, info->shape[i], &n))
            return qm_fail(err, QM_ERR_BAD_SOURCE, file, "npy.shape", dict_at, "array byte size overflows 64 bits");
    info->data_len = n;
    return QM_OK;
}

/* Fortran-order arrays keep their bytes as written and get column-major strides; the converter copies
 * through strides, so no transpose is needed here. Only called once the data size is known to fit the
 * input, so the prefix products fit too; an empty array has no element to reach, so strides stay 0. */
static void fortran_strides(const npy_info *info, int64_t *stride)
{
    uint64_t run = 1, total = 1;
    for (uint32_t i = 0; i < info->rank; i++) total *= info->shape[i];
    for (uint32_t i = 0; i < info->rank; i++) {
        stride[i] = total ? (int64_t)run : 0;
        if (total) run *= info->shape[i];
    }
}

static qm_status add_array(qc_source *s, const char *name, const npy_info *info, qc_storage_kind kind,
                           uint32_t fi, uint64_t zip_index, qm_error *err)
{
    uint32_t si;
    int64_t stride[QC_MAX_RANK];
    if (info->fortran) fortran_strides(info, stride);
    qm_status st = qc_source_add_storage(s, name, kind, fi, kind == QC_STORAGE_MAPPED ? info->header_len : 0,
                                         zip_index, info->data_len, &si, err);
    if (st != QM_OK) return st;
    if (kind == QC_STORAGE_ZIP) s->storages[si].zip_skip = info->header_len;
    if ((st = qc_source_add_tensor(s, name, info->dtype, info->rank, info->shape, info->fortran ? stride : NULL, 0,
                                   si, err)) != QM_OK)
        return st;
    return qc_tensor_check(s, &s->tensors[s->n_tensors - 1], err);
}

/* ---- .npy ---- */

/* "dir/w1.npy" → "w1": the tensor of a lone .npy is named after its file. */
static char *base_name(const char *path)
{
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    size_t n = strlen(b);
    if (n > 4 && !strcmp(b + n - 4, ".npy")) n -= 4;
    char *r = malloc(n + 1);
    if (r) {
        memcpy(r, b, n);
        r[n] = 0;
    }
    return r;
}

qm_status qc_parse_npy(qc_source *s, uint32_t fi, qm_error *err)
{
    const qc_file *f = &s->files[fi];
    npy_info info = { 0 };
    qm_status st = parse_header(f->data, f->size, s->path, &info, err);
    if (st != QM_OK) return st;
    uint64_t have = f->size - info.header_len;
    if (have != info.data_len)
        return qm_fail(err, QM_ERR_BAD_SOURCE, s->path, "npy.data", info.header_len,
                       "array needs %llu data bytes but the file has %llu %s", (unsigned long long)info.data_len,
                       (unsigned long long)have, have < info.data_len ? "(truncated)" : "(trailing bytes)");
    char *name = base_name(s->path);
    if (!name) return qm_fail(err, QM_ERR_NOMEM, s->path, NULL, QM_NO_OFFSET, "out of memory");
    if (!name[0]) st = qm_fail(err, QM_ERR_BAD_SOURCE, s->path, "name", QM_NO_OFFSET, "file name gives an empty tensor name");
    else st = add_array(s, name, &info, QC_STORAGE_MAPPED, fi, 0, err);
    free(name);
    return st;
}

/* ---- .npz ---- */

/* Read the .npy header at the start of entry `i` and check the entry's size against it. */
static qm_status read_entry_header(qc_source *s, zip_t *z, zip_uint64_t i, const char *entry, npy_info *info,
                                   qm_error *err)
{
    zip_stat_t zs;
    zip_stat_init(&zs);
    if (zip_stat_index(z, i, 0, &zs) != 0 || !(zs.valid & ZIP_STAT_SIZE) || !(zs.valid & ZIP_STAT_COMP_SIZE) ||
        !(zs.valid & ZIP_STAT_COMP_METHOD))
        return qm_fail(err, QM_ERR_BAD_SOURCE, s->path, entry, QM_NO_OFFSET, "cannot stat archive entry: %s",
                       zip_strerror(z));
    if ((zs.valid & ZIP_STAT_ENCRYPTION_METHOD) && zs.encryption_method != ZIP_EM_NONE)
        return qm_fail(err, QM_ERR_UNSUPPORTED, s->path, entry, QM_NO_OFFSET, "archive entry is encrypted");
    if (zs.comp_method != ZIP_CM_STORE && zs.comp_method != ZIP_CM_DEFLATE)
        return qm_fail(err, QM_ERR_UNSUPPORTED, s->path, entry, QM_NO_OFFSET,
                       "archive entry uses compression method %d; only stored and deflated are supported",
                       (int)zs.comp_method);
    uint64_t max_size;
    if (zs.comp_method == ZIP_CM_STORE ? zs.size != zs.comp_size
                                       : (!qm_mul_u64(zs.comp_size, DEFLATE_MAX_RATIO, &max_size) || zs.size > max_size))
        return qm_fail(err, QM_ERR_BAD_SOURCE, s->path, entry, QM_NO_OFFSET,
                       "archive entry claims %llu bytes from %llu compressed ones, which its method cannot produce",
                       (unsigned long long)zs.size, (unsigned long long)zs.comp_size);

    /* The longest possible header is read (or the whole entry if shorter); its length field says how
     * much of it is header. */
    uint64_t want = 12 + (uint64_t)NPY_MAX_HEADER;
    if (zs.size < want) want = zs.size;
    uint8_t *hb = malloc((size_t)want + 1);
    if (!hb) return qm_fail(err, QM_ERR_NOMEM, s->path, entry, QM_NO_OFFSET, "out of memory");
    zip_file_t *zf = zip_fopen_index(z, i, 0);
    if (!zf) {
        free(hb);
        return qm_fail(err, QM_ERR_BAD_SOURCE, s->path, entry, QM_NO_OFFSET, "cannot open archive entry: %s",
                       zip_strerror(z));
    }
    uint64_t got = 0;
    qm_status st = QM_OK;
    while (got < want) {
        zip_int64_t r = zip_fread(zf, hb + got, want - got);
        if (r < 0) {
            st = qm_fail(err, QM_ERR_BAD_SOURCE, s->path, entry, got, "archive entry unreadable: %s",
                         zip_file_strerror(zf));
            break;
        }
        if (r == 0) break;
        got += (uint64_t)r;
    }
    zip_fclose(zf);
    if (st == QM_OK) {
        /* messages name the entry, not the archive, so offsets are within the entry */
        char where[512];
        snprintf(where, sizeof where, "%s!%s", s->path, entry);
        st = parse_header(hb, got, where, info, err);
        if (st == QM_OK && zs.size - info->header_len != info->data_len)
            st = qm_fail(err, QM_ERR_BAD_SOURCE, where, "npy.data", info->header_len,
                         "array needs %llu data bytes but the entry has %llu %s", (unsigned long long)info->data_len,
                         (unsigned long long)(zs.size - info->header_len),
                         zs.size - info->header_len < info->data_len ? "(truncated)" : "(trailing bytes)");
    }
    free(hb);
    return st;
}

static int name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Two entries of one name (possible in a zip) would give two tensors of one name. */
static qm_status check_unique_names(qc_source *s, qm_error *err)
{
    if (s->n_tensors < 2) return QM_OK;
    char **names = malloc((size_t)s->n_tensors * sizeof *names);
    if (!names) return qm_fail(err, QM_ERR_NOMEM, s->path, NULL, QM_NO_OFFSET, "out of memory");
    for (uint64_t i = 0; i < s->n_tensors; i++) names[i] = s->tensors[i].name;
    qsort(names, (size_t)s->n_tensors, sizeof *names, name_cmp);
    qm_status st = QM_OK;
    for (uint64_t i = 1; i < s->n_tensors && st == QM_OK; i++)
        if (!strcmp(names[i - 1], names[i]))
            st = qm_fail(err, QM_ERR_BAD_SOURCE, s->path, names[i], QM_NO_OFFSET,
                         "two archive entries are named '%s.npy'", names[i]);
    free(names);
    return st;
}

qm_status qc_parse_npz(qc_source *s, uint32_t fi, qm_error *err)
{
    const qc_file *f = &s->files[fi];
    if (f->size == 0) return qm_fail(err, QM_ERR_BAD_SOURCE, s->path, NULL, 0, "empty file is not a zip archive");
    zip_error_t ze;
    zip_error_init(&ze);
    zip_source_t *zsrc = zip_source_buffer_create(f->data, f->size, 0, &ze);
    if (!zsrc) {
        qm_status st = qm_fail(err, QM_ERR_NOMEM, s->path, NULL, QM_NO_OFFSET, "cannot create zip source: %s",
                               zip_error_strerror(&ze));
        zip_error_fini(&ze);
        return st;
    }
    zip_t *z = zip_open_from_source(zsrc, ZIP_RDONLY | ZIP_CHECKCONS, &ze);
    if (!z) {
        qm_status st = qm_fail(err, QM_ERR_BAD_SOURCE, s->path, NULL, QM_NO_OFFSET, "not a readable zip archive: %s",
                               zip_error_strerror(&ze));
        zip_error_fini(&ze);
        zip_source_free(zsrc);
        return st;
    }
    zip_error_fini(&ze);
    s->zip = z;                      /* the archive now owns zsrc; qc_source_free discards both */
    s->zip_source = zsrc;

    zip_int64_t n = zip_get_num_entries(z, 0);
    if (n < 0) return qm_fail(err, QM_ERR_BAD_SOURCE, s->path, NULL, QM_NO_OFFSET, "cannot count archive entries");
    for (zip_uint64_t i = 0; i < (zip_uint64_t)n; i++) {
        const char *entry = zip_get_name(z, i, 0);
        if (!entry)
            return qm_fail(err, QM_ERR_BAD_SOURCE, s->path, NULL, QM_NO_OFFSET, "archive entry %llu has no name",
                           (unsigned long long)i);
        size_t len = strlen(entry);
        if (len <= 4 || strcmp(entry + len - 4, ".npy"))
            return qm_fail(err, QM_ERR_BAD_SOURCE, s->path, entry, QM_NO_OFFSET,
                           "archive entry '%s' is not NAME.npy", entry);
        npy_info info = { 0 };
        qm_status st = read_entry_header(s, z, i, entry, &info, err);
        if (st != QM_OK) return st;
        char *name = strndup(entry, len - 4);
        if (!name) return qm_fail(err, QM_ERR_NOMEM, s->path, entry, QM_NO_OFFSET, "out of memory");
        st = add_array(s, name, &info, QC_STORAGE_ZIP, fi, i, err);
        free(name);
        if (st != QM_OK) return st;
    }
    return check_unique_names(s, err);
}
