/* qc_torch.c — importer for torch.save archives (the zip format of torch >= 1.6).
 *
 * Layout (torch/serialization.py, _save): every entry lies in one top-level folder <prefix> (the file's
 * stem, or "archive"): <prefix>/data.pkl is the pickled object, <prefix>/data/<key> the bytes of each
 * storage the pickle names by persistent id, <prefix>/byteorder (torch >= 1.13, optional) the byte order
 * of those bytes, plus version/format entries we do not need. The pickle is read by the restricted reader
 * of qc_pickle.h, which runs nothing; storages stay in the archive and are read on demand by
 * qc_source_load, so opening costs the size of data.pkl, not of the model.
 *
 * torch writes storages stored (uncompressed) and 64-byte aligned. Such an entry is used in place, from
 * the mapping, like a safetensors tensor: its data offset comes from our own walk of the central directory
 * (zip64 included) and its local header, every field checked against the file and against libzip's view,
 * and its CRC-32 is checked by qc_source_load on first use (qc_crc32.h). Going through libzip instead
 * (zip_fread into a buffer, then the writer) costs a copy and a slow CRC pass per storage: half the speed.
 * Deflated entries, and anything whose records do not agree, still go through libzip.
 */
#include <stdio.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <zip.h>

#include "qc_pickle.h"
#include "qc_source.h"
#include "qm_bytes.h"

#define TZ_MAX_ENTRIES (1u << 20)          /* a checkpoint has one entry per storage, plus a few */
#define TZ_MAX_PICKLE  QC_PICKLE_MAX_INPUT
#define TZ_MAX_BYTEORDER 16u

/* What a pre-1.6 torch.save file starts with: PROTO 2, then LONG1 of the legacy magic number. */
static const uint8_t legacy_magic[] = { 0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46,
                                        0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19 };

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Stat entry `index` and refuse what libzip could only read with options we do not allow. */
static qm_status stat_entry(qc_source *s, uint64_t index, const char *name, zip_stat_t *sb, qm_error *err)
{
    zip_t *z = s->zip;
    zip_stat_init(sb);
    if (zip_stat_index(z, index, 0, sb) != 0 || !(sb->valid & ZIP_STAT_SIZE))
        return qm_fail(err, QM_ERR_BAD_SOURCE, s->path, name, QM_NO_OFFSET, "cannot stat archive entry: %s",
                       zip_strerror(z));
    if ((sb->valid & ZIP_STAT_ENCRYPTION_METHOD) && sb->encryption_method != ZIP_EM_NONE)
        return qm_fail(err, QM_ERR_UNSUPPORTED, s->path, name, QM_NO_OFFSET, "archive entry is encrypted");
    if ((sb->valid & ZIP_STAT_COMP_METHOD) && sb->comp_method != ZIP_CM_STORE && sb->comp_method != ZIP_CM_DEFLATE)
        return qm_fail(err, QM_ERR_UNSUPPORTED, s->path, name, QM_NO_OFFSET,
                       "archive entry uses compression method %d (only stored and deflated are supported)",
                       (int)sb->comp_method);
    return QM_OK;
}

/* Read a whole small entry into a malloc'd buffer. The buffer grows with the bytes actually inflated, so
 * an entry whose header claims a large size costs memory only if it really holds that much. */
static qm_status read_entry(qc_source *s, uint64_t index, const char *name, uint64_t max, uint8_t **out,
                            size_t *out_len, qm_error *err)
{
    zip_stat_t sb;
    qm_status st = stat_entry(s, index, name, &sb, err);
    if (st) return st;
    if (sb.size > max)
        return qm_fail(err, QM_ERR_BAD_SOURCE, s->path, name, QM_NO_OFFSET,
                       "archive entry of %llu bytes is larger than the %llu allowed", (unsigned long long)sb.size,
                       (unsigned long long)max);
    zip_file_t *zf = zip_fopen_index(s->zip, index, 0);
    if (!zf)
        return qm_fail(err, QM_ERR_BAD_SOURCE, s->path, name, QM_NO_OFFSET, "cannot open archive entry: %s",
                       zip_strerror(s->zip));
    size_t want = (size_t)sb.size, cap = want < 65536 ? want + 1 : 65536, got = 0;
    uint8_t *buf = malloc(cap);
    if (!buf) {
        zip_fclose(zf);
        return qm_fail(err, QM_ERR_NOMEM, s->path, name, QM_NO_OFFSET, "out of memory");
    }
    /* read up to want + 1 bytes: hitting EOF makes libzip check the CRC-32, and finds overlong data */
    for (;;) {
        if (got == cap) {
            if (cap > want) break;
            size_t ncap = cap * 2 > want + 1 ? want + 1 : cap * 2;
            uint8_t *nb = realloc(buf, ncap);
            if (!nb) {
                free(buf);
                zip_fclose(zf);
                return qm_fail(err, QM_ERR_NOMEM, s->path, name, QM_NO_OFFSET, "out of memory");
            }
            buf = nb;
            cap = ncap;
        }
        zip_int64_t r = zip_fread(zf, buf + got, cap - got);
        if (r < 0) {
            st = qm_fail(err, QM_ERR_BAD_SOURCE, s->path, name, got, "archive entry unreadable: %s",
                         zip_file_strerror(zf));
            free(buf);
            zip_fclose(zf);
            return st;
        }
        if (r == 0) break;
        got += (size_t)r;
    }
    zip_fclose(zf);
    if (got != want) {
        free(buf);
        return qm_fail(err, QM_ERR_BAD_SOURCE, s->path, name, QM_NO_OFFSET,
                       "archive entry holds %s bytes than the %llu its header says",
                       got < want ? "fewer" : "more", (unsigned long long)want);
    }
    *out = buf;
    *out_len = got;
    return QM_OK;
}

/* The entry names: all in one top-level folder, none twice. *prefix receives a malloc'd copy of the
 * folder name, *pkl the index of <prefix>/data.pkl. */
static qm_status scan_entries(qc_source *s, uint64_t n, char **prefix, uint64_t *pkl, qm_error *err)
{
    zip_t *z = s->zip;
    const char **names = malloc((size_t)n * sizeof *names);
    if (!names) return qm_fail(err, QM_ERR_NOMEM, s->path, NULL, QM_NO_OFFSET, "out of memory");
    qm_status st = QM_OK;
    size_t plen = 0;
    uint64_t n_pkl = 0;
    for (uint64_t i = 0; i < n && !st; i++) {
        const char *name = zip_get_name(z, i, ZIP_FL_ENC_RAW);
        names[i] = name;
        if (!name) {
            st = qm_fail(err, QM_ERR_BAD_SOURCE, s->path, NULL, QM_NO_OFFSET, "archive entry %llu has no name: %s",
                         (unsigned long long)i, zip_strerror(z));
            break;
        }
        const char *slash = strchr(name, '/');
        if (!slash || slash == name) {
            st = qm_fail(err, QM_ERR_BAD_SOURCE, s->path, name, QM_NO_OFFSET,
                         "archive entry is not inside a top-level folder: not a torch.save archive");
            break;
        }
        size_t l = (size_t)(slash - name);
        if (!*prefix) {
            *prefix = strndup(name, l);
            plen = l;
            if (!*prefix) { st = qm_fail(err, QM_ERR_NOMEM, s->path, NULL, QM_NO_OFFSET, "out of memory"); break; }
        } else if (l != plen || memcmp(name, *prefix, l) != 0) {
            st = qm_fail(err, QM_ERR_BAD_SOURCE, s->path, name, QM_NO_OFFSET,
                         "archive entry is outside the top-level folder '%s' of the others", *prefix);
            break;
        }
        if (!strcmp(slash + 1, "data.pkl")) {
            *pkl = i;
            n_pkl++;
        }
    }
    if (!st) {
        qsort(names, (size_t)n, sizeof *names, cmp_str);
        for (uint64_t i = 0; i + 1 < n && !st; i++)
            if (!strcmp(names[i], names[i + 1]))
                st = qm_fail(err, QM_ERR_BAD_SOURCE, s->path, names[i], QM_NO_OFFSET,
                             "two archive entries have this name");
    }
    free(names);
    if (!st && n_pkl != 1)
        st = qm_fail(err, QM_ERR_BAD_SOURCE, s->path, "data.pkl", QM_NO_OFFSET,
                     "archive has no '%s/data.pkl': not a torch.save archive", *prefix);
    return st;
}

static qm_status check_byteorder(qc_source *s, const char *prefix, qm_error *err)
{
    size_t n = strlen(prefix) + sizeof "/byteorder";
    char *name = malloc(n);
    if (!name) return qm_fail(err, QM_ERR_NOMEM, s->path, NULL, QM_NO_OFFSET, "out of memory");
    snprintf(name, n, "%s/byteorder", prefix);
    zip_int64_t i = zip_name_locate(s->zip, name, ZIP_FL_ENC_RAW);
    qm_status st = QM_OK;
    if (i >= 0) {
        uint8_t *b = NULL;
        size_t len = 0;
        st = read_entry(s, (uint64_t)i, name, TZ_MAX_BYTEORDER, &b, &len, err);
        if (!st && !(len == 6 && !memcmp(b, "little", 6)))
            st = qm_fail(err, QM_ERR_UNSUPPORTED, s->path, name, QM_NO_OFFSET,
                         "storages are stored '%.*s'-endian; only little-endian checkpoints are supported",
                         (int)len, (const char *)b);
        free(b);
    }
    free(name);
    return st;
}

static uint32_t rd16(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }
static uint32_t rd32(const uint8_t *p) { return rd16(p) | rd16(p + 2) << 16; }
static uint64_t rd64(const uint8_t *p) { return rd32(p) | (uint64_t)rd32(p + 4) << 32; }

/* ---- the archive's records, read from its bytes (APPNOTE 4.3) ----
 * libzip does not say where an entry's data starts, so the central directory is walked here too: for the
 * in-place storages, and to say what is wrong when libzip only says "not a zip" / "inconsistent". Every
 * offset and length is checked against the file before it is used; any field we cannot vouch for makes
 * the walk give up (why[] says why when that is worth telling the user). */
#define SIG_LOCAL       0x04034b50u
#define SIG_CENTRAL     0x02014b50u
#define SIG_EOCD        0x06054b50u
#define SIG_EOCD64      0x06064b50u
#define SIG_EOCD64_LOC  0x07064b50u
#define LOCAL_LEN       30u
#define CENTRAL_LEN     46u
#define EOCD_LEN        22u
#define EOCD64_LEN      56u
#define EOCD64_LOC_LEN  20u
#define EXTRA_ZIP64     0x0001u
#define FLAG_ENCRYPTED  0x0001u
#define FLAG_DESCRIPTOR 0x0008u            /* sizes and CRC follow the data; the local header's are 0 */
#define NAME_SHOWN      200                /* at most this much of a name goes into a message */

typedef struct zip_dir {
    const uint8_t *d;
    uint64_t len;                          /* the whole file */
    uint64_t n;                            /* entries, as the end record says */
    uint64_t off, size;                    /* the central directory; entries' bytes all lie before off */
} zip_dir;

typedef struct zip_rec {
    const uint8_t *name;                   /* into the file, not NUL-terminated */
    uint32_t name_len, flags, method, crc;
    uint64_t csize, usize, local;          /* zip64 values where the record has them */
} zip_rec;

/* The end-of-central-directory record (the last one in the file) and, when its fields overflow, the zip64
 * one its locator points to. Multi-disk archives are refused. */
static bool find_dir(const uint8_t *d, uint64_t len, zip_dir *dir, char *why, size_t cap)
{
    why[0] = '\0';
    if (len < EOCD_LEN) return false;
    uint64_t lo = len > EOCD_LEN + 65535 ? len - EOCD_LEN - 65535 : 0, eocd = UINT64_MAX;
    for (uint64_t i = len - EOCD_LEN + 1; i-- > lo;)
        if (rd32(d + i) == SIG_EOCD) { eocd = i; break; }
    if (eocd == UINT64_MAX) return false;
    const uint8_t *e = d + eocd;
    uint64_t n = rd16(e + 10), size = rd32(e + 12), off = rd32(e + 16), limit = eocd;
    if (rd16(e + 4) != 0 && rd16(e + 4) != 0xffffu) return false;             /* disk number */
    if (n == 0xffffu || size == 0xffffffffu || off == 0xffffffffu) {
        if (eocd < EOCD64_LOC_LEN || rd32(d + eocd - EOCD64_LOC_LEN) != SIG_EOCD64_LOC) {
            snprintf(why, cap, "the end record says zip64, but there is no zip64 end-record locator before it");
            return false;
        }
        const uint8_t *loc = d + eocd - EOCD64_LOC_LEN;
        uint64_t z = rd64(loc + 8);
        if (z > eocd - EOCD64_LOC_LEN || eocd - EOCD64_LOC_LEN - z < EOCD64_LEN || rd32(d + z) != SIG_EOCD64) {
            snprintf(why, cap, "the zip64 end record the locator points to (offset %llu) is not there",
                     (unsigned long long)z);
            return false;
        }
        n = rd64(d + z + 32);
        size = rd64(d + z + 40);
        off = rd64(d + z + 48);
        limit = z;
    }
    if (off > limit || size > limit - off) {
        snprintf(why, cap, "the central directory (%llu bytes at offset %llu) passes the end of the file (%llu bytes)",
                 (unsigned long long)size, (unsigned long long)off, (unsigned long long)len);
        return false;
    }
    if (n > size / CENTRAL_LEN) {
        snprintf(why, cap, "the central directory claims %llu entries, more than its %llu bytes can hold",
                 (unsigned long long)n, (unsigned long long)size);
        return false;
    }
    *dir = (zip_dir){ .d = d, .len = len, .n = n, .off = off, .size = size };
    return true;
}

/* The zip64 extra field (id 1) of a record: the 64-bit values of the fields that read 0xffffffff, in the
 * order usize, csize, local offset. want_both: a local header's, which holds both sizes whatever they read.
 * False (why set) if the field is missing or short, or an extra field passes the end of its area. */
static bool read_zip64(const uint8_t *x, uint32_t xlen, const char *whose, const zip_rec *r, bool want_both,
                       uint64_t *usize, uint64_t *csize, uint64_t *local, char *why, size_t cap)
{
    bool need_u = want_both || *usize == 0xffffffffu, need_c = want_both || *csize == 0xffffffffu;
    bool need_l = local && *local == 0xffffffffu;
    for (uint32_t p = 0; p + 4 <= xlen;) {
        uint32_t id = rd16(x + p), sz = rd16(x + p + 2);
        if (sz > xlen - p - 4) {
            snprintf(why, cap, "entry \"%.*s\": an extra field of its %s runs past the end of the record",
                     (int)(r->name_len > NAME_SHOWN ? NAME_SHOWN : r->name_len), (const char *)r->name, whose);
            return false;
        }
        if (id == EXTRA_ZIP64) {
            uint32_t have = 8u * ((uint32_t)need_u + need_c + need_l);
            if (sz < have) break;
            const uint8_t *q = x + p + 4;
            if (need_u) { *usize = rd64(q); q += 8; }
            if (need_c) { *csize = rd64(q); q += 8; }
            if (need_l) *local = rd64(q);
            return true;
        }
        p += 4 + sz;
    }
    if (!need_u && !need_c && !need_l) return true;
    snprintf(why, cap, "entry \"%.*s\": its %s has zip64 values but no zip64 extra field that holds them",
             (int)(r->name_len > NAME_SHOWN ? NAME_SHOWN : r->name_len), (const char *)r->name, whose);
    return false;
}

/* The central-directory record at *pos (inside the directory); *pos moves past it. */
static bool read_central(const zip_dir *dir, uint64_t *pos, zip_rec *r, char *why, size_t cap)
{
    why[0] = '\0';
    uint64_t end = dir->off + dir->size, p = *pos;
    if (p > end || end - p < CENTRAL_LEN || rd32(dir->d + p) != SIG_CENTRAL) {
        snprintf(why, cap, "the central directory holds no record at offset %llu where one should be",
                 (unsigned long long)p);
        return false;
    }
    const uint8_t *c = dir->d + p;
    uint32_t nl = rd16(c + 28), xl = rd16(c + 30), cl = rd16(c + 32);
    if ((uint64_t)nl + xl + cl > end - p - CENTRAL_LEN) {
        snprintf(why, cap, "the central-directory record at offset %llu runs past the end of the directory",
                 (unsigned long long)p);
        return false;
    }
    *r = (zip_rec){ .name = c + CENTRAL_LEN, .name_len = nl, .flags = rd16(c + 8), .method = rd16(c + 10),
                    .crc = rd32(c + 16), .csize = rd32(c + 20), .usize = rd32(c + 24), .local = rd32(c + 42) };
    if ((rd16(c + 34) != 0 && rd16(c + 34) != 0xffffu) ||
        !read_zip64(c + CENTRAL_LEN + nl, xl, "central-directory record", r, false, &r->usize, &r->csize,
                    &r->local, why, cap))
        return false;
    *pos = p + CENTRAL_LEN + nl + xl + cl;
    return true;
}

#define SHOWN(r) (int)((r)->name_len > NAME_SHOWN ? NAME_SHOWN : (r)->name_len), (const char *)(r)->name

/* Check entry r's local header against its central record and the file; *data_off receives where its
 * data starts. The data must end before the central directory (which lies inside the file). */
static bool check_local(const zip_dir *dir, const zip_rec *r, uint64_t *data_off, char *why, size_t cap)
{
    const uint8_t *d = dir->d;
    uint64_t at = r->local;
    if (at >= dir->len) {
        snprintf(why, cap, "entry \"%.*s\": its local header offset %llu is past the end of the file (%llu bytes)",
                 SHOWN(r), (unsigned long long)at, (unsigned long long)dir->len);
        return false;
    }
    if (at > dir->off || dir->off - at < LOCAL_LEN) {
        snprintf(why, cap, "entry \"%.*s\": its local header offset %llu is not before the central directory "
                 "(offset %llu)", SHOWN(r), (unsigned long long)at, (unsigned long long)dir->off);
        return false;
    }
    const uint8_t *l = d + at;
    if (rd32(l) != SIG_LOCAL) {
        snprintf(why, cap, "entry \"%.*s\": there is no local header at offset %llu (signature %08x, not %08x)",
                 SHOWN(r), (unsigned long long)at, rd32(l), SIG_LOCAL);
        return false;
    }
    uint32_t flags = rd16(l + 6), method = rd16(l + 8), nl = rd16(l + 26), xl = rd16(l + 28);
    uint64_t start = at + LOCAL_LEN + nl + xl;     /* at + 30 + 2 x 0xffff: no overflow */
    if (start > dir->off) {
        snprintf(why, cap, "entry \"%.*s\": the local header at offset %llu (name %u bytes, extra field %u) runs "
                 "into the central directory at offset %llu", SHOWN(r), (unsigned long long)at, nl, xl,
                 (unsigned long long)dir->off);
        return false;
    }
    if (nl != r->name_len || memcmp(l + LOCAL_LEN, r->name, nl) != 0) {
        snprintf(why, cap, "entry \"%.*s\": the local header at offset %llu names \"%.*s\", not what the central "
                 "directory says", SHOWN(r), (unsigned long long)at, (int)(nl > NAME_SHOWN ? NAME_SHOWN : nl),
                 (const char *)l + LOCAL_LEN);
        return false;
    }
    if (method != r->method || (flags & FLAG_ENCRYPTED) != (r->flags & FLAG_ENCRYPTED)) {
        snprintf(why, cap, "entry \"%.*s\": the local header at offset %llu says compression method %u%s, the "
                 "central directory %u%s", SHOWN(r), (unsigned long long)at, method,
                 flags & FLAG_ENCRYPTED ? " (encrypted)" : "", r->method, r->flags & FLAG_ENCRYPTED ? " (encrypted)" : "");
        return false;
    }
    if (!(flags & FLAG_DESCRIPTOR)) {
        /* the sizes and CRC are in the local header too: they must agree with the central record's */
        uint64_t csize = rd32(l + 18), usize = rd32(l + 22);
        if ((csize == 0xffffffffu || usize == 0xffffffffu) &&
            !read_zip64(l + LOCAL_LEN + nl, xl, "local header", r, true, &usize, &csize, NULL, why, cap))
            return false;
        if (rd32(l + 14) != r->crc || csize != r->csize || usize != r->usize) {
            snprintf(why, cap, "entry \"%.*s\": the local header at offset %llu says %llu bytes (%llu stored), CRC "
                     "%08x; the central directory %llu (%llu), %08x", SHOWN(r), (unsigned long long)at,
                     (unsigned long long)usize, (unsigned long long)csize, rd32(l + 14),
                     (unsigned long long)r->usize, (unsigned long long)r->csize, r->crc);
            return false;
        }
    }
    if (r->csize > dir->off - start) {
        snprintf(why, cap, "entry \"%.*s\": its %llu bytes of data at offset %llu pass the central directory at "
                 "offset %llu: the file is truncated or damaged", SHOWN(r), (unsigned long long)r->csize,
                 (unsigned long long)start, (unsigned long long)dir->off);
        return false;
    }
    *data_off = start;
    return true;
}

/* libzip says "not a zip" or "inconsistent" for any fault it finds in the records. When the end record is
 * there, walk the records and say what is wrong: an entry whose data would pass the end of the file (its
 * name and size), a local header that is missing, elsewhere, or disagrees with the central directory.
 * Writes into why; false when it finds nothing to add. */
static bool diagnose_zip(const uint8_t *d, uint64_t len, char *why, size_t cap)
{
    zip_dir dir;
    if (!find_dir(d, len, &dir, why, cap)) return why[0] != '\0';
    uint64_t pos = dir.off;
    for (uint64_t e = 0; e < dir.n; e++) {
        zip_rec r;
        if (!read_central(&dir, &pos, &r, why, cap)) return why[0] != '\0';
        /* an offset that is itself wrong is check_local's to name; a size that runs off the end, this */
        bool local_ok = r.local < dir.off && dir.off - r.local >= LOCAL_LEN;
        if (local_ok && r.csize > len - r.local) {
            snprintf(why, cap, "entry \"%.*s\" claims %llu bytes (%llu uncompressed) at offset %llu, past the end of "
                     "the file (%llu bytes): the file is truncated or damaged", SHOWN(&r), (unsigned long long)r.csize,
                     (unsigned long long)r.usize, (unsigned long long)r.local, (unsigned long long)len);
            return true;
        }
        uint64_t data_off;
        if (!check_local(&dir, &r, &data_off, why, cap)) return true;
    }
    return false;
}

/* The central directory as our walk reads it, kept while the storages are registered: entries[i] is
 * libzip's entry i (same count, checked per entry by name before use). NULL entries: the walk gave up,
 * every storage goes through libzip. */
typedef struct zip_map {
    zip_dir dir;
    zip_rec *entries;
    uint32_t file;                         /* index of the archive in qc_source.files */
} zip_map;

static void map_records(zip_map *m, const uint8_t *d, uint64_t len, uint64_t n)
{
    char why[400];
    m->entries = NULL;
    if (!find_dir(d, len, &m->dir, why, sizeof why) || m->dir.n != n) return;
    zip_rec *rec = malloc((size_t)n * sizeof *rec);
    if (!rec) return;                      /* only the fast path is lost */
    uint64_t pos = m->dir.off;
    for (uint64_t i = 0; i < n; i++)
        if (!read_central(&m->dir, &pos, &rec[i], why, sizeof why)) { free(rec); return; }
    m->entries = rec;
}

/* Register archive entry zi as the storage `key` of nbytes: in place from the mapping when it is stored,
 * unencrypted, and our records agree with libzip's and with the file; through libzip otherwise. A local
 * header that contradicts its central record or the file is refused. */
static qm_status add_storage(qc_source *s, const zip_map *m, uint64_t zi, const char *entry, const char *key,
                             uint64_t nbytes, const zip_stat_t *sb, uint32_t *idx, qm_error *err)
{
    const zip_rec *r = m->entries ? &m->entries[zi] : NULL;
    size_t elen = strlen(entry);
    bool stored = (sb->valid & ZIP_STAT_COMP_METHOD) && sb->comp_method == ZIP_CM_STORE &&
                  (!(sb->valid & ZIP_STAT_ENCRYPTION_METHOD) || sb->encryption_method == ZIP_EM_NONE);
    if (!stored || !r || r->method != ZIP_CM_STORE || (r->flags & FLAG_ENCRYPTED) || r->name_len != elen ||
        memcmp(r->name, entry, elen) != 0 || r->csize != nbytes || r->usize != nbytes ||
        ((sb->valid & ZIP_STAT_CRC) && sb->crc != r->crc) || ((sb->valid & ZIP_STAT_COMP_SIZE) && sb->comp_size != nbytes))
        return qc_source_add_storage(s, key, QC_STORAGE_ZIP, 0, 0, zi, nbytes, idx, err);
    uint64_t data_off;
    char why[400];
    if (!check_local(&m->dir, r, &data_off, why, sizeof why))
        return qm_fail(err, QM_ERR_BAD_SOURCE, s->path, NULL, QM_NO_OFFSET, "corrupt zip: %s", why);
    qm_status st = qc_source_add_storage(s, key, QC_STORAGE_MAPPED, m->file, data_off, 0, nbytes, idx, err);
    if (st == QM_OK) {
        s->storages[*idx].check_crc = true;
        s->storages[*idx].crc32 = r->crc;
    }
    return st;
}

/* Register the storage of tensor `t` (once per archive entry, however many tensors view it) and the
 * tensor itself. by_entry maps archive entry index -> storage index + 1 (0: not registered yet). */
static qm_status add_tensor(qc_source *s, const zip_map *m, const char *prefix, const qc_pickle_tensor *t,
                            uint32_t *by_entry, uint64_t n_entries, qm_error *err)
{
    size_t es = qc_dtype_size(t->dtype);
    size_t n = strlen(prefix) + sizeof "/data/" + strlen(t->storage_key);
    char *entry = malloc(n);
    if (!entry) return qm_fail(err, QM_ERR_NOMEM, s->path, NULL, QM_NO_OFFSET, "out of memory");
    snprintf(entry, n, "%s/data/%s", prefix, t->storage_key);
    const char *key = entry + strlen(prefix) + 1;   /* "data/<key>", as the storage is named in messages */
    qm_status st = QM_OK;
    zip_int64_t zi = zip_name_locate(s->zip, entry, ZIP_FL_ENC_RAW);
    uint64_t want;
    if (zi < 0 || (uint64_t)zi >= n_entries) {
        st = qm_fail(err, QM_ERR_BAD_SOURCE, s->path, t->name, QM_NO_OFFSET,
                     "the tensor's storage '%s' is not in the archive", entry);
    } else if (!qm_mul_u64(t->storage_numel, es, &want)) {
        st = qm_fail(err, QM_ERR_BAD_SOURCE, s->path, t->name, t->pickle_offset,
                     "storage of %llu elements overflows 64 bits", (unsigned long long)t->storage_numel);
    } else if (by_entry[zi] == 0) {
        zip_stat_t sb;
        st = stat_entry(s, (uint64_t)zi, entry, &sb, err);
        uint32_t idx = 0;
        if (!st && sb.size != want)
            st = qm_fail(err, QM_ERR_BAD_SOURCE, s->path, entry, QM_NO_OFFSET,
                         "storage entry holds %llu bytes, but the pickle says %llu elements of %s (%llu bytes)",
                         (unsigned long long)sb.size, (unsigned long long)t->storage_numel, qc_dtype_name(t->dtype),
                         (unsigned long long)want);
        if (!st) st = add_storage(s, m, (uint64_t)zi, entry, key, want, &sb, &idx, err);
        if (!st) by_entry[zi] = idx + 1;
    } else if (s->storages[by_entry[zi] - 1].nbytes != want) {
        /* tensors sharing a storage may view it as different types, but never as different sizes */
        st = qm_fail(err, QM_ERR_BAD_SOURCE, s->path, t->name, t->pickle_offset,
                     "storage '%s' is %llu bytes, but this tensor's reference says %llu elements of %s", key,
                     (unsigned long long)s->storages[by_entry[zi] - 1].nbytes,
                     (unsigned long long)t->storage_numel, qc_dtype_name(t->dtype));
    }
    if (!st)
        st = qc_source_add_tensor(s, t->name, t->dtype, t->rank, t->shape, t->stride, t->offset,
                                  by_entry[zi] - 1, err);
    free(entry);
    return st;
}

static qm_status open_archive(qc_source *s, uint32_t file, const uint8_t *data, uint64_t len, qm_error *err)
{
    if (len >= sizeof legacy_magic && !memcmp(data, legacy_magic, sizeof legacy_magic))
        return qm_fail(err, QM_ERR_UNSUPPORTED, s->path, NULL, 0,
                       "legacy torch.save format (torch < 1.6): re-save it with torch >= 1.6, e.g. "
                       "torch.save(torch.load(f), \"new.pt\")");
    zip_error_t ze;
    zip_error_init(&ze);
    zip_source_t *zs = zip_source_buffer_create(len ? data : NULL, len, 0, &ze);
    if (!zs) {
        qm_status st = qm_fail(err, QM_ERR_NOMEM, s->path, NULL, QM_NO_OFFSET, "cannot read the archive: %s",
                               zip_error_strerror(&ze));
        zip_error_fini(&ze);
        return st;
    }
    s->zip_source = zs;
    zip_t *z = zip_open_from_source(zs, ZIP_RDONLY | ZIP_CHECKCONS, &ze);
    char why[400];
    /* libzip's reason for any fault in the records is "not a zip" or "inconsistent": say which fault */
    if (!z && zip_error_code_zip(&ze) != ZIP_ER_MEMORY && diagnose_zip(data, len, why, sizeof why)) {
        zip_error_fini(&ze);
        return qm_fail(err, QM_ERR_BAD_SOURCE, s->path, NULL, QM_NO_OFFSET, "corrupt zip: %s", why);
    }
    if (!z) {
        qm_status st = qm_fail(err, QM_ERR_BAD_SOURCE, s->path, NULL, QM_NO_OFFSET,
                               "not a zip archive / corrupt zip: %s%s", zip_error_strerror(&ze),
                               zip_error_code_zip(&ze) == ZIP_ER_NOZIP
                                   ? " (no end-of-central-directory record: the file is truncated or not a zip)"
                                   : "");
        zip_error_fini(&ze);
        return st;
    }
    zip_error_fini(&ze);
    s->zip = z;

    zip_int64_t ne = zip_get_num_entries(z, 0);
    if (ne <= 0)
        return qm_fail(err, QM_ERR_BAD_SOURCE, s->path, NULL, QM_NO_OFFSET, "the archive is empty");
    if ((uint64_t)ne > TZ_MAX_ENTRIES)
        return qm_fail(err, QM_ERR_UNSUPPORTED, s->path, NULL, QM_NO_OFFSET,
                       "the archive has %lld entries; at most %u are supported", (long long)ne, TZ_MAX_ENTRIES);
    uint64_t n = (uint64_t)ne, pkl = 0;
    char *prefix = NULL, *pkl_file = NULL;
    uint8_t *pickle = NULL;
    size_t pickle_len = 0;
    uint32_t *by_entry = NULL;
    qc_pickle_result res = { 0 };
    zip_map map = { .file = file };
    map_records(&map, data, len, n);
    qm_status st = scan_entries(s, n, &prefix, &pkl, err);
    if (!st) st = check_byteorder(s, prefix, err);
    if (!st) {
        /* data.pkl is a small part of any real checkpoint; more than the archive holds is a lie */
        uint64_t max = len < TZ_MAX_PICKLE ? len : TZ_MAX_PICKLE;
        st = read_entry(s, pkl, zip_get_name(z, pkl, ZIP_FL_ENC_RAW), max, &pickle, &pickle_len, err);
    }
    if (!st) {
        size_t fl = strlen(s->path) + strlen(prefix) + sizeof " (/data.pkl)";
        pkl_file = malloc(fl);
        if (!pkl_file) st = qm_fail(err, QM_ERR_NOMEM, s->path, NULL, QM_NO_OFFSET, "out of memory");
        else snprintf(pkl_file, fl, "%s (%s/data.pkl)", s->path, prefix);
    }
    if (!st) st = qc_pickle_read_state_dict(pickle, pickle_len, pkl_file, &res, err);
    free(pickle);
    if (!st && !(by_entry = calloc((size_t)n, sizeof *by_entry)))
        st = qm_fail(err, QM_ERR_NOMEM, s->path, NULL, QM_NO_OFFSET, "out of memory");
    for (size_t i = 0; !st && i < res.n_tensors; i++)
        st = add_tensor(s, &map, prefix, &res.tensors[i], by_entry, n, err);
    for (uint64_t i = 0; !st && i < s->n_tensors; i++)
        st = qc_tensor_check(s, &s->tensors[i], err);
    qc_pickle_result_free(&res);
    free(by_entry);
    free(map.entries);
    free(pkl_file);
    free(prefix);
    return st;
}

qm_status qc_parse_torch_zip(qc_source *s, uint32_t file, qm_error *err)
{
    return open_archive(s, file, s->files[file].data, s->files[file].size, err);
}
