/* qc_source.c — the importer-independent half of a qc_source: files, storages, tensors, view checks,
 * on-demand storage loads. Sniffing and the importer table are in qc_import.c. */
#include "qc_source.h"
#include "qc_crc32.h"
#include "qm_fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zip.h>

#include "qm_bytes.h"

static const struct { qc_dtype t; size_t size; const char *name; bool is_float; } dtypes[] = {
    { QC_F32, 4, "F32", true },  { QC_F16, 2, "F16", true },   { QC_BF16, 2, "BF16", true },
    { QC_F64, 8, "F64", true },  { QC_I8, 1, "I8", false },    { QC_U8, 1, "U8", false },
    { QC_I16, 2, "I16", false }, { QC_I32, 4, "I32", false },  { QC_I64, 8, "I64", false },
    { QC_BOOL, 1, "BOOL", false },
};
#define N_DTYPES (sizeof dtypes / sizeof dtypes[0])

size_t qc_dtype_size(qc_dtype t)
{
    for (size_t i = 0; i < N_DTYPES; i++) if (dtypes[i].t == t) return dtypes[i].size;
    return 0;
}
const char *qc_dtype_name(qc_dtype t)
{
    for (size_t i = 0; i < N_DTYPES; i++) if (dtypes[i].t == t) return dtypes[i].name;
    return "?";
}
bool qc_dtype_is_float(qc_dtype t)
{
    for (size_t i = 0; i < N_DTYPES; i++) if (dtypes[i].t == t) return dtypes[i].is_float;
    return false;
}

qc_source *qc_source_new(const char *kind, const char *path)
{
    qc_source *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->kind = kind;
    s->path = strdup(path ? path : "");
    if (!s->path) { free(s); return NULL; }
    return s;
}

void qc_source_free(qc_source *s)
{
    if (!s) return;
    if (s->zip) zip_discard((zip_t *)s->zip);
    else if (s->zip_source) zip_source_free((zip_source_t *)s->zip_source);
    for (uint32_t i = 0; i < s->n_files; i++) {
        if (s->files[i].owned && s->files[i].data) munmap((void *)s->files[i].data, s->files[i].size);
        free(s->files[i].path);
    }
    for (uint64_t i = 0; i < s->n_storages; i++) free(s->storages[i].key);
    for (uint64_t i = 0; i < s->n_tensors; i++) free(s->tensors[i].name);
    free(s->files);
    free(s->storages);
    free(s->tensors);
    free(s->config_json);
    free(s->manifest_json);
    free(s->buf);
    free(s->path);
    free(s);
}

qm_status qc_source_hand_over(qc_source *s, qm_status st, qc_source **out)
{
    if (st != QM_OK) {
        qc_source_free(s);
        return st;
    }
    *out = s;
    return QM_OK;
}

qm_status qc_read_small_file(const char *path, uint64_t max_bytes, const char *what, char **out, size_t *len,
                             qm_error *err)
{
    *out = NULL;
    *len = 0;
    struct stat st;
    int fd = qm_open_regular(path, &st, err);
    if (fd < 0) return err ? err->code : QM_ERR_IO;
    if ((uint64_t)st.st_size > max_bytes) {
        close(fd);
        return qm_fail(err, QM_ERR_UNSUPPORTED, path, NULL, QM_NO_OFFSET,
                       "file is %llu bytes, above the %llu-byte cap for %s",
                       (unsigned long long)st.st_size, (unsigned long long)max_bytes, what);
    }
    size_t size = (size_t)st.st_size;
    char *buf = malloc(size + 1);
    if (!buf) { close(fd); return qm_fail(err, QM_ERR_NOMEM, path, NULL, QM_NO_OFFSET, "out of memory"); }
    size_t got = 0;
    while (got < size) {
        ssize_t r = read(fd, buf + got, size - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            int e = r < 0 ? errno : 0;
            free(buf);
            close(fd);
            return qm_fail(err, QM_ERR_IO, path, NULL, got, "read failed: %s",
                           e ? strerror(e) : "file shrank while being read");
        }
        got += (size_t)r;
    }
    close(fd);
    buf[size] = '\0';
    *out = buf;
    *len = size;
    return QM_OK;
}

/* Grow an array of `elem` bytes so index `n` fits; capacity doubles when n is a power of two. */
static bool grow(void **arr, uint64_t n, size_t elem)
{
    if (n & (n - 1)) return true;                 /* capacity is the next power of two ≥ n */
    uint64_t cap = n ? n * 2 : 1;
    if (cap > SIZE_MAX / elem) return false;
    void *p = realloc(*arr, cap * elem);
    if (!p) return false;
    *arr = p;
    return true;
}

static qm_status add_file(qc_source *s, const char *path, const uint8_t *data, uint64_t size, bool owned,
                          uint32_t *index, qm_error *err)
{
    if (s->n_files == UINT32_MAX || !grow((void **)&s->files, s->n_files, sizeof *s->files))
        return qm_fail(err, QM_ERR_NOMEM, path, NULL, QM_NO_OFFSET, "cannot grow the file list");
    char *p = strdup(path);
    if (!p) return qm_fail(err, QM_ERR_NOMEM, path, NULL, QM_NO_OFFSET, "out of memory");
    s->files[s->n_files] = (qc_file){ .path = p, .data = data, .size = size, .owned = owned };
    if (index) *index = s->n_files;
    s->n_files++;
    return QM_OK;
}

qm_status qc_source_map_file(qc_source *s, const char *path, uint32_t *index, qm_error *err)
{
    struct stat st;
    int fd = qm_open_regular(path, &st, err);
    if (fd < 0) return err ? err->code : QM_ERR_IO;
    uint64_t size = (uint64_t)st.st_size;
    const uint8_t *data = NULL;
    if (size > 0) {
        void *m = mmap(NULL, (size_t)size, PROT_READ, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED) {
            int e = errno;
            close(fd);
            return qm_fail(err, QM_ERR_IO, path, NULL, QM_NO_OFFSET, "cannot map: %s", strerror(e));
        }
        madvise(m, (size_t)size, MADV_SEQUENTIAL);
        data = m;
    }
    close(fd);
    qm_status st2 = add_file(s, path, data, size, true, index, err);
    if (st2 != QM_OK && data) munmap((void *)data, (size_t)size);
    return st2;
}

qm_status qc_source_add_buffer(qc_source *s, const char *name, const void *data, uint64_t size,
                               uint32_t *index, qm_error *err)
{
    return add_file(s, name, size ? data : NULL, size, false, index, err);
}

qm_status qc_source_add_storage(qc_source *s, const char *key, qc_storage_kind kind, uint32_t file,
                                uint64_t file_offset, uint64_t zip_index, uint64_t nbytes,
                                uint32_t *index, qm_error *err)
{
    if (file >= s->n_files && kind == QC_STORAGE_MAPPED)
        return qm_fail(err, QM_ERR_INVALID_ARGUMENT, s->path, NULL, QM_NO_OFFSET, "storage in an unknown file");
    if (kind == QC_STORAGE_MAPPED) {
        uint64_t end;
        if (!qm_add_u64(file_offset, nbytes, &end) || end > s->files[file].size)
            return qm_fail(err, QM_ERR_BAD_SOURCE, s->files[file].path, key, file_offset,
                           "storage of %llu bytes runs past the end of the file (%llu bytes)",
                           (unsigned long long)nbytes, (unsigned long long)s->files[file].size);
    }
    if (s->n_storages >= UINT32_MAX || !grow((void **)&s->storages, s->n_storages, sizeof *s->storages))
        return qm_fail(err, QM_ERR_NOMEM, s->path, NULL, QM_NO_OFFSET, "cannot grow the storage list");
    char *k = strdup(key ? key : "");
    if (!k) return qm_fail(err, QM_ERR_NOMEM, s->path, NULL, QM_NO_OFFSET, "out of memory");
    s->storages[s->n_storages] = (qc_storage){ .key = k, .nbytes = nbytes, .kind = kind, .file = file,
                                               .file_offset = file_offset, .zip_index = zip_index };
    if (index) *index = (uint32_t)s->n_storages;
    s->n_storages++;
    return QM_OK;
}

qm_status qc_source_add_tensor(qc_source *s, const char *name, qc_dtype dtype, uint32_t rank,
                               const uint64_t *shape, const int64_t *stride, uint64_t offset,
                               uint32_t storage, qm_error *err)
{
    if (rank > QC_MAX_RANK)
        return qm_fail(err, QM_ERR_UNSUPPORTED, s->path, name, QM_NO_OFFSET,
                       "tensor has %u dimensions; at most %d are supported", rank, QC_MAX_RANK);
    if (!qc_dtype_size(dtype))
        return qm_fail(err, QM_ERR_INVALID_ARGUMENT, s->path, name, QM_NO_OFFSET, "unknown element type");
    if (!grow((void **)&s->tensors, s->n_tensors, sizeof *s->tensors))
        return qm_fail(err, QM_ERR_NOMEM, s->path, NULL, QM_NO_OFFSET, "cannot grow the tensor list");
    qc_tensor t = { .dtype = dtype, .rank = rank, .offset = offset, .storage = storage };
    t.name = strdup(name);
    if (!t.name) return qm_fail(err, QM_ERR_NOMEM, s->path, NULL, QM_NO_OFFSET, "out of memory");
    int64_t run = 1;
    for (int i = (int)rank - 1; i >= 0; i--) {
        t.shape[i] = shape[i];
        t.stride[i] = stride ? stride[i] : run;
        /* row-major strides may overflow for absurd shapes; qc_tensor_check rejects those shapes */
        if (!stride) run = (shape[i] && (uint64_t)run <= (uint64_t)INT64_MAX / shape[i]) ? run * (int64_t)shape[i] : run;
    }
    s->tensors[s->n_tensors++] = t;
    return QM_OK;
}

qm_status qc_tensor_check(const qc_source *s, const qc_tensor *t, qm_error *err)
{
    const char *file = s->path;
    if (t->storage >= s->n_storages)
        return qm_fail(err, QM_ERR_BAD_SOURCE, file, t->name, QM_NO_OFFSET, "refers to storage %u of %llu",
                       t->storage, (unsigned long long)s->n_storages);
    const qc_storage *st = &s->storages[t->storage];
    size_t es = qc_dtype_size(t->dtype);
    if (!es) return qm_fail(err, QM_ERR_BAD_SOURCE, file, t->name, QM_NO_OFFSET, "unknown element type");
    /* last element index = offset + sum (shape[i]-1)*stride[i]; an empty tensor touches nothing */
    uint64_t last = t->offset, n = 1;
    for (uint32_t i = 0; i < t->rank; i++) {
        if (t->stride[i] < 0)
            return qm_fail(err, QM_ERR_UNSUPPORTED, file, t->name, QM_NO_OFFSET, "negative stride %lld in dim %u",
                           (long long)t->stride[i], i);
        uint64_t span;
        if (!qm_mul_u64(n, t->shape[i], &n))
            return qm_fail(err, QM_ERR_BAD_SOURCE, file, t->name, QM_NO_OFFSET, "element count overflows");
        if (t->shape[i] == 0) continue;
        if (!qm_mul_u64(t->shape[i] - 1, (uint64_t)t->stride[i], &span) || !qm_add_u64(last, span, &last))
            return qm_fail(err, QM_ERR_BAD_SOURCE, file, t->name, QM_NO_OFFSET, "view overflows 64 bits");
    }
    if (n == 0) return QM_OK;
    uint64_t end_bytes;
    if (!qm_add_u64(last, 1, &end_bytes) || !qm_mul_u64(end_bytes, es, &end_bytes) || end_bytes > st->nbytes)
        return qm_fail(err, QM_ERR_BAD_SOURCE, file, t->name, QM_NO_OFFSET,
                       "view (offset %llu, %llu elements of %s) reaches past its storage '%s' of %llu bytes",
                       (unsigned long long)t->offset, (unsigned long long)n, qc_dtype_name(t->dtype), st->key,
                       (unsigned long long)st->nbytes);
    return QM_OK;
}

uint64_t qc_tensor_elements(const qc_tensor *t)
{
    uint64_t n = 1;
    for (uint32_t i = 0; i < t->rank; i++) n *= t->shape[i];
    return n;
}

bool qc_tensor_is_contiguous(const qc_tensor *t)
{
    /* no element, nothing to lay out: any strides will do (qc_source_add_tensor's row-major strides skip
     * zero dimensions, so they would not match the product below) */
    for (uint32_t i = 0; i < t->rank; i++)
        if (t->shape[i] == 0) return true;
    uint64_t run = 1;
    for (int i = (int)t->rank - 1; i >= 0; i--) {
        if (t->shape[i] == 1) continue;
        if ((uint64_t)t->stride[i] != run) return false;
        run *= t->shape[i];
    }
    return true;
}

/* What an empty storage loads as: a valid pointer, so callers never see NULL. Read-only, never written. */
static const uint8_t empty_storage[1];

qm_status qc_source_load(qc_source *s, uint32_t index, const uint8_t **bytes, qm_error *err)
{
    if (index >= s->n_storages)
        return qm_fail(err, QM_ERR_INVALID_ARGUMENT, s->path, NULL, QM_NO_OFFSET, "no storage %u", index);
    const qc_storage *st = &s->storages[index];
    if (st->kind == QC_STORAGE_MAPPED) {
        const uint8_t *p = st->nbytes ? s->files[st->file].data + st->file_offset : empty_storage;
        if (st->check_crc && !st->crc_checked) {
            /* a stored zip entry read in place: libzip never saw these bytes, so its CRC check did not run.
             * One pass over the mapping, before any byte reaches the output (the vector CRC runs far faster
             * than the writer, and the provenance hash has just faulted the pages in). */
            uint32_t crc = qc_crc32(0, p, (size_t)st->nbytes);
            if (crc != st->crc32)
                return qm_fail(err, QM_ERR_BAD_SOURCE, s->files[st->file].path, st->key, st->file_offset,
                               "archive entry %s fails its CRC-32 check: the file is damaged (its bytes give "
                               "%08x, the archive says %08x)", st->key, crc, st->crc32);
            s->storages[index].crc_checked = true;
        }
        *bytes = p;
        return QM_OK;
    }
    if (!s->zip) return qm_fail(err, QM_ERR_INVALID_ARGUMENT, s->path, st->key, QM_NO_OFFSET, "no archive open");
    if (st->nbytes > s->buf_cap) {
        if (st->nbytes > SIZE_MAX)
            return qm_fail(err, QM_ERR_NOMEM, s->path, st->key, QM_NO_OFFSET, "storage too large");
        uint8_t *p = realloc(s->buf, (size_t)st->nbytes);
        if (!p)
            return qm_fail(err, QM_ERR_NOMEM, s->path, st->key, QM_NO_OFFSET, "cannot allocate %llu bytes",
                           (unsigned long long)st->nbytes);
        s->buf = p;
        s->buf_cap = st->nbytes;
    }
    zip_file_t *zf = zip_fopen_index((zip_t *)s->zip, st->zip_index, 0);
    if (!zf)
        return qm_fail(err, QM_ERR_BAD_SOURCE, s->path, st->key, QM_NO_OFFSET, "cannot open archive entry: %s",
                       zip_strerror((zip_t *)s->zip));
    /* zip entries cannot seek when deflated, so the prefix is read and dropped */
    for (uint64_t skipped = 0; skipped < st->zip_skip;) {
        uint8_t drop[4096];
        uint64_t want = st->zip_skip - skipped < sizeof drop ? st->zip_skip - skipped : sizeof drop;
        zip_int64_t r = zip_fread(zf, drop, want);
        if (r <= 0) {
            qm_status rs = qm_fail(err, QM_ERR_BAD_SOURCE, s->path, st->key, skipped,
                                   "archive entry ends inside its %llu-byte header%s%s",
                                   (unsigned long long)st->zip_skip, r < 0 ? ": " : "",
                                   r < 0 ? zip_file_strerror(zf) : "");
            zip_fclose(zf);
            return rs;
        }
        skipped += (uint64_t)r;
    }
    uint64_t got = 0;
    while (got < st->nbytes) {
        zip_int64_t r = zip_fread(zf, s->buf + got, st->nbytes - got);
        if (r < 0) {
            qm_status rs = qm_fail(err, QM_ERR_BAD_SOURCE, s->path, st->key, got, "archive entry unreadable: %s",
                                   zip_file_strerror(zf));
            zip_fclose(zf);
            return rs;
        }
        if (r == 0) break;
        got += (uint64_t)r;
    }
    /* read one more byte: reaching EOF makes libzip check the entry's CRC-32, and finds overlong data */
    uint8_t extra;
    zip_int64_t r = (got == st->nbytes) ? zip_fread(zf, &extra, 1) : 0;
    int crc_err = (r < 0);
    zip_fclose(zf);
    if (got != st->nbytes || r > 0)
        return qm_fail(err, QM_ERR_BAD_SOURCE, s->path, st->key, QM_NO_OFFSET,
                       "archive entry holds %s bytes than the %llu its tensors need",
                       got < st->nbytes ? "fewer" : "more", (unsigned long long)st->nbytes);
    if (crc_err)
        return qm_fail(err, QM_ERR_BAD_SOURCE, s->path, st->key, QM_NO_OFFSET,
                       "archive entry fails its CRC-32 check");
    *bytes = st->nbytes ? s->buf : empty_storage;
    return QM_OK;
}
