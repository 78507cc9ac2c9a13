/* qm_writer.c — streaming, atomic, deterministic .qmap writer (spec/FORMAT.md §2–§6, §9).
 *
 * The file is written front to back into a temporary file beside the target: a placeholder header,
 * the metadata, a table whose checksums are not known yet, then the tensor data as it streams in,
 * hashed on the way. finish() patches the table and header in place, fsyncs, renames over the target
 * and fsyncs the directory, so the target path only ever holds a complete file.
 */
#define _GNU_SOURCE /* O_TMPFILE */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "qm_bytes.h"
#include "qm_reader.h"
#include "qm_writer.h"

#define WBUF_SIZE (4u << 20)   /* a multiple of 2 MiB: see emit() */

typedef struct wtensor {
    char *name;
    uint32_t name_len, dtype, rank;
    uint64_t dims[QM_MAX_RANK];
    uint64_t offset, size, checksum;
} wtensor;

/* Open-addressing set of strings, to refuse duplicate keys and names in O(1). */
typedef struct strset { const char **slots; size_t cap, n; } strset;

enum phase { PHASE_DECLARE, PHASE_DATA, PHASE_FAILED };

struct qm_writer {
    char *path, *tmp_path;  /* tmp_path: the named temporary file, or NULL while the file has no name */
    bool anonymous;         /* an O_TMPFILE file: it gets a name only once complete (finish) */
    int fd;
    uint64_t alignment;
    enum phase phase;
    uint8_t *meta; size_t meta_len, meta_cap; uint64_t meta_count;
    strset keys, names;
    wtensor *tensors; uint64_t n_tensors, cap_tensors;
    uint64_t table_offset, table_size, data_offset, file_size;
    uint64_t cur, cur_written, pos;   /* tensor being written, its bytes so far, file position */
    XXH3_state_t *hash;
    uint8_t *buf; size_t buf_len;
};

/* The name to put in a message about the file being written. */
static const char *tmp_name(const qm_writer *w) { return w->tmp_path ? w->tmp_path : w->path; }

/* ---- small helpers --------------------------------------------------------------------------- */

static uint64_t fnv1a(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

/* Returns 1 if inserted, 0 if already present, -1 on out of memory. `s` must outlive the set. */
static int strset_add(strset *set, const char *s)
{
    if (set->n * 2 >= set->cap) {
        size_t ncap = set->cap ? set->cap * 2 : 64;
        const char **ns = calloc(ncap, sizeof *ns);
        if (!ns) return -1;
        for (size_t i = 0; i < set->cap; i++)
            if (set->slots[i]) {
                size_t j = fnv1a(set->slots[i]) & (ncap - 1);
                while (ns[j]) j = (j + 1) & (ncap - 1);
                ns[j] = set->slots[i];
            }
        free(set->slots);
        set->slots = ns;
        set->cap = ncap;
    }
    size_t j = fnv1a(s) & (set->cap - 1);
    while (set->slots[j]) {
        if (strcmp(set->slots[j], s) == 0) return 0;
        j = (j + 1) & (set->cap - 1);
    }
    set->slots[j] = s;
    set->n++;
    return 1;
}

/* Record a failure: the writer refuses further calls (QM_ERR_STATE) until finished or aborted. */
#define fail(w, err, code, field, ...) \
    ((w)->phase = PHASE_FAILED, qm_fail((err), (code), (w)->path, (field), QM_NO_OFFSET, __VA_ARGS__))

static qm_status check_usable(qm_writer *w, qm_error *err)
{
    if (!w) return qm_fail(err, QM_ERR_INVALID_ARGUMENT, NULL, NULL, QM_NO_OFFSET, "null writer");
    if (w->phase == PHASE_FAILED)
        return qm_fail(err, QM_ERR_STATE, w->path, NULL, QM_NO_OFFSET, "writer failed earlier; finish or abort it");
    return QM_OK;
}

static qm_status write_all(qm_writer *w, qm_error *err, const void *p, size_t n)
{
    const uint8_t *b = p;
    while (n) {
        ssize_t k = write(w->fd, b, n);
        if (k < 0) {
            if (errno == EINTR) continue;
            w->phase = PHASE_FAILED;
            return qm_fail(err, QM_ERR_IO, tmp_name(w), NULL, QM_NO_OFFSET, "write failed: %s", strerror(errno));
        }
        b += k;
        n -= (size_t)k;
    }
    return QM_OK;
}

static qm_status pwrite_all(qm_writer *w, qm_error *err, const void *p, size_t n, uint64_t off)
{
    const uint8_t *b = p;
    while (n) {
        ssize_t k = pwrite(w->fd, b, n, (off_t)off);
        if (k < 0) {
            if (errno == EINTR) continue;
            w->phase = PHASE_FAILED;
            return qm_fail(err, QM_ERR_IO, tmp_name(w), NULL, QM_NO_OFFSET, "write failed: %s", strerror(errno));
        }
        b += k;
        off += (uint64_t)k;
        n -= (size_t)k;
    }
    return QM_OK;
}

static qm_status flush(qm_writer *w, qm_error *err)
{
    qm_status s = write_all(w, err, w->buf, w->buf_len);
    w->buf_len = 0;
    return s;
}

/* Buffered append of raw bytes at the current position (p == NULL: zeros). Every write() but the last
 * starts and ends at a multiple of WBUF_SIZE in the file: the page cache then keeps the file in folios of
 * 2 MiB, which the kernel maps into a reader with one page-table entry each (FilePmdMapped in smaps)
 * instead of 512, where the file system caches large folios (ext4 on recent kernels; elsewhere this
 * changes nothing). Decode over a mapping of 4 KiB pages is slower (docs/perf/2026-11-25-zen5.md, the last
 * paragraph). Smaller writes, and copy_file_range, leave every page 4 KiB, so the writer does not use
 * copy_file_range (docs/BENCHMARKS.md, Container, convert and quantize). */
static qm_status emit(qm_writer *w, qm_error *err, const void *p, uint64_t n)
{
    const uint8_t *b = p;
    while (n) {
        if (w->buf_len == 0 && b && n >= WBUF_SIZE && w->pos % WBUF_SIZE == 0) { /* large chunk: skip the copy */
            size_t k = (size_t)(n - n % WBUF_SIZE);
            qm_status s = write_all(w, err, b, k);
            if (s != QM_OK) return s;
            b += k; n -= k; w->pos += k;
            continue;
        }
        size_t k = WBUF_SIZE - (size_t)(w->pos % WBUF_SIZE);   /* up to the next multiple */
        if (k > n) k = (size_t)n;
        if (b) { memcpy(w->buf + w->buf_len, b, k); b += k; }
        else memset(w->buf + w->buf_len, 0, k);
        w->buf_len += k; n -= k; w->pos += k;
        if (w->pos % WBUF_SIZE == 0) {
            qm_status s = flush(w, err);
            if (s != QM_OK) return s;
        }
    }
    return QM_OK;
}

/* ---- create / abort -------------------------------------------------------------------------- */

static void writer_free(qm_writer *w)
{
    if (!w) return;
    if (w->fd >= 0) close(w->fd);
    for (uint64_t i = 0; i < w->n_tensors; i++) free(w->tensors[i].name);
    free(w->tensors);
    for (size_t i = 0; i < w->keys.cap; i++) free((char *)w->keys.slots[i]); /* the set owns key copies */
    free(w->keys.slots);
    free(w->names.slots);
    free(w->meta);
    free(w->buf);
    if (w->hash) XXH3_freeState(w->hash);
    free(w->path);
    free(w->tmp_path);
    free(w);
}

void qm_writer_abort(qm_writer *w)
{
    if (!w) return;
    if (w->tmp_path) unlink(w->tmp_path);
    writer_free(w);
}

/* A file without a name in the target's directory (Linux O_TMPFILE): a writer killed at any moment leaves
 * nothing behind, since the file only gets a name once it is complete. -1 (errno) where the filesystem or
 * kernel refuses it; the caller then falls back to a named temporary file. */
static int open_anonymous(const char *path)
{
#ifdef O_TMPFILE
    const char *slash = strrchr(path, '/');
    char dir[4096];
    if (slash) {
        size_t n = (size_t)(slash - path);
        if (n >= sizeof dir) { errno = ENAMETOOLONG; return -1; }
        memcpy(dir, path, n ? n : 1);
        dir[n ? n : 1] = 0;
    } else {
        dir[0] = '.';
        dir[1] = 0;
    }
    return open(dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666);
#else
    (void)path;
    errno = EOPNOTSUPP;
    return -1;
#endif
}

/* Create "<dir>/.<base>.tmp.XXXXXX" exclusively; mode 0666 so the umask applies as for any new file. With
 * fd >= 0, the name is given to that open (anonymous) file with linkat instead of creating a new one. */
static int open_temp_as(const char *path, char **tmp_out, int fd_to_link)
{
    const char *slash = strrchr(path, '/');
    size_t dir_len = slash ? (size_t)(slash - path + 1) : 0;
    const char *base = slash ? slash + 1 : path;
    size_t n = strlen(path) + 16;
    char *tmp = malloc(n);
    if (!tmp) { errno = ENOMEM; return -1; }
    uint64_t seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20) ^ (uint64_t)(uintptr_t)tmp;
    static const char alphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789";
    for (int attempt = 0; attempt < 100; attempt++) {
        char suffix[7];
        for (int i = 0; i < 6; i++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            suffix[i] = alphabet[(seed >> 33) % 36];
        }
        suffix[6] = 0;
        snprintf(tmp, n, "%.*s.%s.tmp.%s", (int)dir_len, path, base, suffix);
        if (fd_to_link >= 0) {
            char proc[64];
            snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd_to_link);
            if (linkat(AT_FDCWD, proc, AT_FDCWD, tmp, AT_SYMLINK_FOLLOW) == 0) { *tmp_out = tmp; return fd_to_link; }
        } else {
            int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
            if (fd >= 0) { *tmp_out = tmp; return fd; }
        }
        if (errno != EEXIST) { int e = errno; free(tmp); errno = e; return -1; }
    }
    free(tmp);
    errno = EEXIST;
    return -1;
}

qm_status qm_writer_create(const char *path, const qm_writer_opts *opts, qm_writer **out, qm_error *err)
{
    if (!path || !*path || !out) return qm_fail(err, QM_ERR_INVALID_ARGUMENT, path, NULL, QM_NO_OFFSET, "null or empty argument");
    *out = NULL;
    uint64_t align = opts && opts->alignment ? opts->alignment : QM_DEFAULT_ALIGNMENT;
    if (!qm_alignment_valid(align))
        return qm_fail(err, QM_ERR_BAD_ALIGNMENT, path, "alignment", QM_NO_OFFSET,
                       "%llu is not a power of two in [64, 2^30]", (unsigned long long)align);
    qm_writer *w = calloc(1, sizeof *w);
    if (!w) return qm_fail(err, QM_ERR_NOMEM, path, NULL, QM_NO_OFFSET, "out of memory");
    w->fd = -1;
    w->alignment = align;
    w->path = strdup(path);
    w->buf = malloc(WBUF_SIZE);
    w->hash = XXH3_createState();
    if (!w->path || !w->buf || !w->hash) {
        writer_free(w);
        return qm_fail(err, QM_ERR_NOMEM, path, NULL, QM_NO_OFFSET, "out of memory");
    }
    w->fd = open_anonymous(path);
    if (w->fd >= 0) {
        w->anonymous = true;
        /* O_TMPFILE ignores the umask on some filesystems: give it the mode a new file would get */
        mode_t um = umask(0);
        umask(um);
        fchmod(w->fd, 0666 & ~um);
    } else {
        w->fd = open_temp_as(path, &w->tmp_path, -1);
    }
    if (w->fd < 0) {
        int e = errno;
        writer_free(w);
        return qm_fail(err, QM_ERR_IO, path, NULL, QM_NO_OFFSET, "cannot create a temporary file beside it: %s", strerror(e));
    }
    *out = w;
    return QM_OK;
}

/* ---- metadata -------------------------------------------------------------------------------- */

static qm_status meta_reserve(qm_writer *w, qm_error *err, size_t extra)
{
    if (w->meta_cap - w->meta_len >= extra) return QM_OK;
    size_t cap = w->meta_cap ? w->meta_cap : 4096;
    while (cap - w->meta_len < extra) {
        if (cap > SIZE_MAX / 2) return fail(w, err, QM_ERR_NOMEM, NULL, "metadata too large");
        cap *= 2;
    }
    uint8_t *m = realloc(w->meta, cap);
    if (!m) return fail(w, err, QM_ERR_NOMEM, NULL, "out of memory for metadata");
    w->meta = m;
    w->meta_cap = cap;
    return QM_OK;
}

static void put_u32(qm_writer *w, uint32_t v) { qm_store_u32(w->meta + w->meta_len, v); w->meta_len += 4; }
static void put_u64(qm_writer *w, uint64_t v) { qm_store_u64(w->meta + w->meta_len, v); w->meta_len += 8; }
static void put_bytes(qm_writer *w, const void *p, size_t n) { if (n) memcpy(w->meta + w->meta_len, p, n); w->meta_len += n; }

/* Validate the key and start an entry "key_len key type"; `reserve` more bytes for the value. */
static qm_status meta_begin(qm_writer *w, qm_error *err, const char *key, uint32_t type, size_t value_bytes)
{
    qm_status s = check_usable(w, err);
    if (s != QM_OK) return s;
    if (w->phase != PHASE_DECLARE || w->n_tensors)
        return fail(w, err, QM_ERR_STATE, NULL, "metadata must come before tensors");
    if (!key) return fail(w, err, QM_ERR_INVALID_ARGUMENT, "metadata", "null key");
    size_t kl = strlen(key);
    if (kl == 0 || kl > QM_MAX_KEY_LEN) /* R-META-2 */
        return fail(w, err, QM_ERR_BAD_KEY, "metadata.key", "key \"%.80s\" is empty or longer than 256 bytes", key);
    if (!qm_utf8_valid(key, kl, false)) /* R-META-3 */
        return fail(w, err, QM_ERR_BAD_UTF8, "metadata.key", "key is not valid UTF-8");
    if (w->meta_count >= QM_MAX_COUNT) /* R-HDR-7 */
        return fail(w, err, QM_ERR_TOO_MANY, "metadata", "more than 2^20 metadata entries");
    if (value_bytes > SIZE_MAX - kl - 8) return fail(w, err, QM_ERR_NOMEM, "metadata", "value too large");
    s = meta_reserve(w, err, 8 + kl + value_bytes);
    if (s != QM_OK) return s;
    /* The set cannot point into the metadata buffer (realloc moves it), so it owns a copy of each key. */
    char *kcopy = strdup(key);
    if (!kcopy) return fail(w, err, QM_ERR_NOMEM, NULL, "out of memory");
    int r = strset_add(&w->keys, kcopy);
    if (r < 0) { free(kcopy); return fail(w, err, QM_ERR_NOMEM, NULL, "out of memory"); }
    if (r == 0) { /* R-META-8 */
        free(kcopy);
        return fail(w, err, QM_ERR_DUPLICATE_KEY, "metadata.key", "key \"%.200s\" was already written", key);
    }
    put_u32(w, (uint32_t)kl);
    put_bytes(w, key, kl);
    put_u32(w, type);
    w->meta_count++;
    return QM_OK;
}

#define META_SCALAR(fn, ctype, TYPE, store)                                        \
    qm_status fn(qm_writer *w, const char *key, ctype v, qm_error *err)            \
    {                                                                              \
        qm_status s = meta_begin(w, err, key, TYPE, 8);                            \
        if (s != QM_OK) return s;                                                  \
        store;                                                                     \
        return QM_OK;                                                              \
    }
META_SCALAR(qm_writer_meta_u32, uint32_t, QM_META_U32, put_u32(w, v))
META_SCALAR(qm_writer_meta_i32, int32_t, QM_META_I32, put_u32(w, (uint32_t)v))
META_SCALAR(qm_writer_meta_u64, uint64_t, QM_META_U64, put_u64(w, v))
META_SCALAR(qm_writer_meta_i64, int64_t, QM_META_I64, put_u64(w, (uint64_t)v))
META_SCALAR(qm_writer_meta_f32, float, QM_META_F32, { uint32_t u; memcpy(&u, &v, 4); put_u32(w, u); })
META_SCALAR(qm_writer_meta_f64, double, QM_META_F64, { uint64_t u; memcpy(&u, &v, 8); put_u64(w, u); })
META_SCALAR(qm_writer_meta_bool, bool, QM_META_BOOL, { uint8_t b = v ? 1 : 0; put_bytes(w, &b, 1); })

static qm_status check_string(qm_writer *w, qm_error *err, const char *key, const char *s, size_t len)
{
    if (!s && len) return fail(w, err, QM_ERR_INVALID_ARGUMENT, "metadata", "null string for key \"%.200s\"", key);
    if (len > QM_MAX_STRING_LEN) /* R-META-6 */
        return fail(w, err, QM_ERR_META_TOO_LONG, "metadata", "string for key \"%.200s\" is longer than 2^30 bytes", key);
    if (!qm_utf8_valid(s, len, true)) /* R-META-7 */
        return fail(w, err, QM_ERR_BAD_UTF8, "metadata", "string for key \"%.200s\" is not valid UTF-8", key);
    return QM_OK;
}

qm_status qm_writer_meta_string(qm_writer *w, const char *key, const char *s, size_t len, qm_error *err)
{
    qm_status st = check_usable(w, err);
    if (st != QM_OK) return st;
    if ((st = check_string(w, err, key ? key : "", s, len)) != QM_OK) return st;
    if ((st = meta_begin(w, err, key, QM_META_STRING, 8 + len)) != QM_OK) return st;
    put_u64(w, len);
    put_bytes(w, s, len);
    return QM_OK;
}

qm_status qm_writer_meta_copy(qm_writer *w, const qm_meta *m, qm_error *err)
{
    if (w && (!m || !m->key || (m->value_size && !m->value)))
        return fail(w, err, QM_ERR_INVALID_ARGUMENT, "metadata", "null metadata entry");
    if (m && m->value_size > SIZE_MAX / 2) return fail(w, err, QM_ERR_NOMEM, "metadata", "value too large");
    /* the reader validated the entry (spec 7), so its encoded value is copied as it is */
    qm_status s = meta_begin(w, err, m ? m->key : NULL, m ? m->type : 0, m ? (size_t)m->value_size : 0);
    if (s != QM_OK) return s;
    put_bytes(w, m->value, (size_t)m->value_size);
    return QM_OK;
}

qm_status qm_writer_meta_array(qm_writer *w, const char *key, uint32_t elem_type, const void *values,
                               uint64_t count, qm_error *err)
{
    qm_status st = check_usable(w, err);
    if (st != QM_OK) return st;
    uint32_t sz = qm_meta_scalar_size(elem_type);
    if (!sz) return fail(w, err, QM_ERR_INVALID_ARGUMENT, "metadata", "array element type must be U32..BOOL (key \"%.200s\")", key ? key : "");
    if (count > QM_MAX_ARRAY_COUNT) return fail(w, err, QM_ERR_META_TOO_LONG, "metadata", "array for key \"%.200s\" has more than 2^32 elements", key ? key : "");
    if (!values && count) return fail(w, err, QM_ERR_INVALID_ARGUMENT, "metadata", "null values for key \"%.200s\"", key ? key : "");
    if (count > (SIZE_MAX - 64) / sz) return fail(w, err, QM_ERR_NOMEM, "metadata", "array too large (key \"%.200s\")", key ? key : "");
    if ((st = meta_begin(w, err, key, QM_META_ARRAY, 12 + (size_t)count * sz)) != QM_OK) return st;
    put_u32(w, elem_type);
    put_u64(w, count);
    const uint8_t *v = values;
    for (uint64_t i = 0; i < count; i++) {
        switch (elem_type) {
        case QM_META_BOOL: { uint8_t b = ((const bool *)values)[i] ? 1 : 0; put_bytes(w, &b, 1); break; }
        case QM_META_U64: case QM_META_I64: case QM_META_F64: { uint64_t u; memcpy(&u, v + 8 * i, 8); put_u64(w, u); break; }
        default: { uint32_t u; memcpy(&u, v + 4 * i, 4); put_u32(w, u); break; }
        }
    }
    return QM_OK;
}

qm_status qm_writer_meta_string_array(qm_writer *w, const char *key, const char *const *strs, const size_t *lens,
                                      uint64_t count, qm_error *err)
{
    qm_status st = check_usable(w, err);
    if (st != QM_OK) return st;
    const char *k = key ? key : "";
    if (count > QM_MAX_ARRAY_COUNT) return fail(w, err, QM_ERR_META_TOO_LONG, "metadata", "array for key \"%.200s\" has more than 2^32 elements", k);
    if (!strs && count) return fail(w, err, QM_ERR_INVALID_ARGUMENT, "metadata", "null strings for key \"%.200s\"", k);
    size_t total = 12;
    for (uint64_t i = 0; i < count; i++) {
        if (!strs[i] && !(lens && lens[i] == 0)) return fail(w, err, QM_ERR_INVALID_ARGUMENT, "metadata", "null string in array \"%.200s\"", k);
        size_t len = lens ? lens[i] : strlen(strs[i]);
        if ((st = check_string(w, err, k, strs[i], len)) != QM_OK) return st;
        if (len > SIZE_MAX - total - 8) return fail(w, err, QM_ERR_NOMEM, "metadata", "array too large (key \"%.200s\")", k);
        total += 8 + len;
    }
    if ((st = meta_begin(w, err, key, QM_META_ARRAY, total)) != QM_OK) return st;
    put_u32(w, QM_META_STRING);
    put_u64(w, count);
    for (uint64_t i = 0; i < count; i++) {
        size_t len = lens ? lens[i] : strlen(strs[i]);
        put_u64(w, len);
        put_bytes(w, strs[i], len);
    }
    return QM_OK;
}

/* ---- tensors --------------------------------------------------------------------------------- */

qm_status qm_writer_add_tensor(qm_writer *w, const char *name, uint32_t dtype, uint32_t rank, const uint64_t *dims,
                               qm_error *err)
{
    qm_status s = check_usable(w, err);
    if (s != QM_OK) return s;
    if (w->phase != PHASE_DECLARE)
        return fail(w, err, QM_ERR_STATE, NULL, "tensors must all be declared before data is written");
    if (!name || (!dims && rank)) return fail(w, err, QM_ERR_INVALID_ARGUMENT, "tensor", "null name or dims");
    size_t nl = strlen(name);
    if (nl == 0 || nl > QM_MAX_NAME_LEN) /* R-TENSOR-2 */
        return fail(w, err, QM_ERR_BAD_NAME, "tensor.name", "name \"%.80s\" is empty or longer than 1024 bytes", name);
    if (!qm_utf8_valid(name, nl, false)) /* R-TENSOR-3 */
        return fail(w, err, QM_ERR_BAD_UTF8, "tensor.name", "name is not valid UTF-8");
    if (w->n_tensors >= QM_MAX_COUNT) /* R-HDR-7 */
        return fail(w, err, QM_ERR_TOO_MANY, "tensor", "more than 2^20 tensors");
    uint64_t size;
    s = qm_tensor_nbytes(dtype, rank, dims, w->alignment, &size); /* R-TENSOR-5..8 */
    if (s != QM_OK) return fail(w, err, s, "tensor", "tensor \"%.200s\": bad dtype or shape", name);
    if (w->n_tensors == w->cap_tensors) {
        uint64_t cap = w->cap_tensors ? w->cap_tensors * 2 : 64;
        wtensor *t = realloc(w->tensors, (size_t)cap * sizeof *t);
        if (!t) return fail(w, err, QM_ERR_NOMEM, NULL, "out of memory");
        w->tensors = t;
        w->cap_tensors = cap;
    }
    wtensor *t = &w->tensors[w->n_tensors];
    memset(t, 0, sizeof *t);
    t->name = strdup(name);
    if (!t->name) return fail(w, err, QM_ERR_NOMEM, NULL, "out of memory");
    int r = strset_add(&w->names, t->name);
    if (r <= 0) {
        free(t->name);
        if (r < 0) return fail(w, err, QM_ERR_NOMEM, NULL, "out of memory");
        return fail(w, err, QM_ERR_DUPLICATE_NAME, "tensor.name", "tensor \"%.200s\" was already declared", name); /* R-TENSOR-4 */
    }
    t->name_len = (uint32_t)nl;
    t->dtype = dtype;
    t->rank = rank;
    memcpy(t->dims, dims, rank * sizeof *dims);
    t->size = size;
    w->n_tensors++;
    return QM_OK;
}

/* Serialize the tensor table (with whatever checksums are known) into `out` (table_size bytes). */
static void encode_table(const qm_writer *w, uint8_t *out)
{
    uint8_t *p = out;
    for (uint64_t i = 0; i < w->n_tensors; i++) {
        const wtensor *t = &w->tensors[i];
        qm_store_u32(p, t->name_len); p += 4;
        memcpy(p, t->name, t->name_len); p += t->name_len;
        qm_store_u32(p, t->dtype); p += 4;
        qm_store_u32(p, t->rank); p += 4;
        for (int d = 0; d < QM_MAX_RANK; d++) { qm_store_u64(p, t->dims[d]); p += 8; }
        qm_store_u64(p, t->offset); p += 8;
        qm_store_u64(p, t->size); p += 8;
        qm_store_u64(p, t->checksum); p += 8;
        qm_store_u64(p, 0); p += 8; /* reserved */
    }
}

/* Lay the file out (spec §2, §9) and write everything before the first tensor. */
static qm_status begin_data(qm_writer *w, qm_error *err)
{
    uint64_t table_size = 0, end;
    for (uint64_t i = 0; i < w->n_tensors; i++) table_size += 76 + w->tensors[i].name_len;
    w->table_offset = QM_HEADER_SIZE + w->meta_len;
    w->table_size = table_size;
    if (!qm_align_up_u64(w->table_offset + table_size, w->alignment, &w->data_offset))
        return fail(w, err, QM_ERR_OVERFLOW, NULL, "file layout overflows");
    end = w->data_offset;
    for (uint64_t i = 0; i < w->n_tensors; i++) {
        wtensor *t = &w->tensors[i];
        if (!qm_align_up_u64(end, w->alignment, &t->offset) || !qm_add_u64(t->offset, t->size, &end))
            return fail(w, err, QM_ERR_OVERFLOW, NULL, "file layout overflows"); /* R-GEN-1 */
    }
    w->file_size = end;
    w->phase = PHASE_DATA;

    /* placeholder header (patched by finish), metadata, table without checksums, padding */
    uint8_t zero_header[QM_HEADER_SIZE] = { 0 };
    qm_status s = emit(w, err, zero_header, sizeof zero_header);
    if (s == QM_OK) s = emit(w, err, w->meta, w->meta_len);
    if (s == QM_OK && table_size) {
        uint8_t *table = malloc((size_t)table_size);
        if (!table) return fail(w, err, QM_ERR_NOMEM, NULL, "out of memory");
        encode_table(w, table);
        s = emit(w, err, table, table_size);
        free(table);
    }
    if (s == QM_OK) s = emit(w, err, NULL, w->data_offset - w->pos);
    return s;
}

/* Append tensor bytes (bytes == NULL: zeros), padding before each tensor and hashing as they pass. */
static qm_status append_data(qm_writer *w, const void *bytes, uint64_t len, qm_error *err)
{
    qm_status s = check_usable(w, err);
    if (s != QM_OK) return s;
    if (w->phase == PHASE_DECLARE && (s = begin_data(w, err)) != QM_OK) return s;
    const uint8_t *b = bytes;
    uint64_t left = len;
    while (left) {
        if (w->cur >= w->n_tensors)
            return fail(w, err, QM_ERR_INVALID_ARGUMENT, NULL, "more tensor bytes written than declared");
        wtensor *t = &w->tensors[w->cur];
        if (w->cur_written == 0) { /* first bytes of this tensor: pad up to its offset */
            if ((s = emit(w, err, NULL, t->offset - w->pos)) != QM_OK) return s;
            XXH3_64bits_reset(w->hash);
        }
        uint64_t k = t->size - w->cur_written;
        if (k > left) k = left;
        if (b) XXH3_64bits_update(w->hash, b, (size_t)k);
        else {
            static const uint8_t zeros[4096];
            for (uint64_t z = 0; z < k; z += sizeof zeros)
                XXH3_64bits_update(w->hash, zeros, (size_t)(k - z < sizeof zeros ? k - z : sizeof zeros));
        }
        if ((s = emit(w, err, b, k)) != QM_OK) return s;
        if (b) b += k;
        left -= k;
        w->cur_written += k;
        if (w->cur_written == t->size) {
            t->checksum = XXH3_64bits_digest(w->hash);
            w->cur++;
            w->cur_written = 0;
        }
    }
    return QM_OK;
}

qm_status qm_writer_write(qm_writer *w, const void *bytes, size_t len, qm_error *err)
{
    if (w && !bytes && len)
        return fail(w, err, QM_ERR_INVALID_ARGUMENT, NULL, "null data pointer (use qm_writer_write_zeros for zeros)");
    return append_data(w, bytes, len, err);
}

qm_status qm_writer_write_zeros(qm_writer *w, uint64_t len, qm_error *err) { return append_data(w, NULL, len, err); }

static qm_status fsync_dir(const char *path)
{
    const char *slash = strrchr(path, '/');
    char *dir = slash ? strndup(path, (size_t)(slash - path + (slash == path))) : strdup(".");
    if (!dir) return QM_ERR_NOMEM;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    free(dir);
    if (fd < 0) return QM_ERR_IO;
    int r = fsync(fd);
    close(fd);
    return r == 0 ? QM_OK : QM_ERR_IO;
}

qm_status qm_writer_finish(qm_writer *w, qm_error *err)
{
    qm_status s = check_usable(w, err);
    if (s != QM_OK) { qm_writer_abort(w); return s; }
    if (w->phase == PHASE_DECLARE && (s = begin_data(w, err)) != QM_OK) goto out;
    if (w->cur != w->n_tensors) {
        s = qm_fail(err, QM_ERR_STATE, w->path, "tensor", QM_NO_OFFSET,
                    "only %llu of %llu tensors were written (tensor \"%.200s\" has %llu of %llu bytes)",
                    (unsigned long long)w->cur, (unsigned long long)w->n_tensors, w->tensors[w->cur].name,
                    (unsigned long long)w->cur_written, (unsigned long long)w->tensors[w->cur].size);
        goto out;
    }
    if ((s = flush(w, err)) != QM_OK) goto out;

    /* Patch the table with the checksums, then the header with its checksum (spec §3). */
    uint8_t *table = malloc((size_t)w->table_size + 1);
    uint8_t hdr[QM_HEADER_SIZE] = { 0 };
    if (!table) { s = fail(w, err, QM_ERR_NOMEM, NULL, "out of memory"); goto out; }
    encode_table(w, table);
    memcpy(hdr, QM_MAGIC, 8);
    qm_store_u16(hdr + 8, QM_MAJOR_VERSION);
    qm_store_u16(hdr + 10, QM_MINOR_VERSION);
    qm_store_u64(hdr + 16, w->alignment);
    qm_store_u64(hdr + 24, w->file_size);
    qm_store_u64(hdr + 32, QM_HEADER_SIZE);
    qm_store_u64(hdr + 40, w->meta_len);
    qm_store_u64(hdr + 48, w->meta_count);
    qm_store_u64(hdr + 56, w->table_offset);
    qm_store_u64(hdr + 64, w->table_size);
    qm_store_u64(hdr + 72, w->n_tensors);
    qm_store_u64(hdr + 80, w->data_offset);
    XXH3_64bits_reset(w->hash);
    XXH3_64bits_update(w->hash, hdr, 120);
    XXH3_64bits_update(w->hash, w->meta, w->meta_len);
    XXH3_64bits_update(w->hash, table, (size_t)w->table_size);
    static const uint8_t zeros[4096];
    for (uint64_t z = w->table_offset + w->table_size; z < w->data_offset; z += sizeof zeros) {
        uint64_t k = w->data_offset - z;
        XXH3_64bits_update(w->hash, zeros, (size_t)(k < sizeof zeros ? k : sizeof zeros));
    }
    qm_store_u64(hdr + 120, XXH3_64bits_digest(w->hash));
    s = pwrite_all(w, err, table, (size_t)w->table_size, w->table_offset);
    free(table);
    if (s == QM_OK) s = pwrite_all(w, err, hdr, sizeof hdr, 0);
    if (s != QM_OK) goto out;

    /* Durable before visible: data on disk, then the name, then the directory entry. */
    if (fsync(w->fd) != 0) { s = qm_fail(err, QM_ERR_IO, tmp_name(w), NULL, QM_NO_OFFSET, "fsync failed: %s", strerror(errno)); goto out; }
    if (w->anonymous) {   /* complete and durable: now it may have a name (rename cannot take an fd) */
        char *named = NULL;
        if (open_temp_as(w->path, &named, w->fd) < 0) {
            s = qm_fail(err, QM_ERR_IO, w->path, NULL, QM_NO_OFFSET, "cannot name the finished file: %s", strerror(errno));
            goto out;
        }
        w->tmp_path = named;
    }
    if (close(w->fd) != 0) { w->fd = -1; s = qm_fail(err, QM_ERR_IO, tmp_name(w), NULL, QM_NO_OFFSET, "close failed: %s", strerror(errno)); goto out; }
    w->fd = -1;
    if (rename(w->tmp_path, w->path) != 0) {
        s = qm_fail(err, QM_ERR_IO, w->path, NULL, QM_NO_OFFSET, "cannot rename the temporary file into place: %s", strerror(errno));
        goto out;
    }
    free(w->tmp_path);
    w->tmp_path = NULL; /* renamed: nothing to remove any more */
    if (fsync_dir(w->path) != QM_OK) {
        s = qm_fail(err, QM_ERR_IO, w->path, NULL, QM_NO_OFFSET, "the file is complete but its directory could not be synced");
        goto out;
    }
    s = QM_OK;
out:
    qm_writer_abort(w); /* removes the temporary file if it still exists, frees the writer */
    return s;
}
