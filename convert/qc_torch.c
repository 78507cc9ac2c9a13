/* qc_torch.c — importer for torch.save archives (the zip format of torch >= 1.6).
 *
 * Layout (torch/serialization.py, _save): every entry lies in one top-level folder <prefix> (the file's
 * stem, or "archive"): <prefix>/data.pkl is the pickled object, <prefix>/data/<key> the bytes of each
 * storage the pickle names by persistent id, <prefix>/byteorder (torch >= 1.13, optional) the byte order
 * of those bytes, plus version/format entries we do not need. The pickle is read by the restricted reader
 * of qc_pickle.h, which runs nothing; storages stay in the archive and are read on demand by
 * qc_source_load, so opening costs the size of data.pkl, not of the model.
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

/* Register the storage of tensor `t` (once per archive entry, however many tensors view it) and the
 * tensor itself. by_entry maps archive entry index -> storage index + 1 (0: not registered yet). */
static qm_status add_tensor(qc_source *s, const char *prefix, const qc_pickle_tensor *t, uint32_t *by_entry,
                            uint64_t n_entries, qm_error *err)
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
        if (!st) st = qc_source_add_storage(s, key, QC_STORAGE_ZIP, 0, 0, (uint64_t)zi, want, &idx, err);
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

static uint32_t rd16(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }
static uint32_t rd32(const uint8_t *p) { return rd16(p) | rd16(p + 2) << 16; }

/* libzip says "not a zip" for any inconsistency it finds while reading the central directory. When the
 * end-of-central-directory record is there, find what is wrong and say it: an entry whose data would pass
 * the end of the file (names it and its size). Writes into why; false when it finds nothing to add. */
static bool diagnose_zip(const uint8_t *d, uint64_t len, char *why, size_t cap)
{
    if (len < 22) return false;
    uint64_t lo = len > 22 + 65535 ? len - 22 - 65535 : 0, eocd = UINT64_MAX;
    for (uint64_t i = len - 22 + 1; i-- > lo;)
        if (rd32(d + i) == 0x06054b50u) { eocd = i; break; }
    if (eocd == UINT64_MAX) return false;
    uint64_t n = rd16(d + eocd + 10), cd_size = rd32(d + eocd + 12), cd_off = rd32(d + eocd + 16);
    if (cd_off == 0xffffffffu || n == 0xffffu) return false;   /* zip64: libzip's own words stand */
    if (cd_off > len || cd_size > len - cd_off) {
        snprintf(why, cap, "the central directory (%llu bytes at offset %llu) passes the end of the file (%llu bytes)",
                 (unsigned long long)cd_size, (unsigned long long)cd_off, (unsigned long long)len);
        return true;
    }
    uint64_t p = cd_off;
    for (uint64_t e = 0; e < n; e++) {
        if (p + 46 > cd_off + cd_size || rd32(d + p) != 0x02014b50u) return false;
        uint64_t csize = rd32(d + p + 20), usize = rd32(d + p + 24), local = rd32(d + p + 42);
        uint32_t nl = rd16(d + p + 28), xl = rd16(d + p + 30), cl = rd16(d + p + 32);
        if (p + 46 + nl > cd_off + cd_size) return false;
        if (csize != 0xffffffffu && local != 0xffffffffu && (local > len || csize > len - local)) {
            snprintf(why, cap, "entry \"%.*s\" claims %llu bytes (%llu uncompressed) at offset %llu, past the end of "
                     "the file (%llu bytes): the file is truncated or damaged", (int)(nl > 200 ? 200 : nl),
                     (const char *)d + p + 46, (unsigned long long)csize, (unsigned long long)usize,
                     (unsigned long long)local, (unsigned long long)len);
            return true;
        }
        p += 46 + (uint64_t)nl + xl + cl;
    }
    return false;
}

static qm_status open_archive(qc_source *s, const uint8_t *data, uint64_t len, qm_error *err)
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
    if (!z && zip_error_code_zip(&ze) == ZIP_ER_NOZIP && diagnose_zip(data, len, why, sizeof why)) {
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
        st = add_tensor(s, prefix, &res.tensors[i], by_entry, n, err);
    for (uint64_t i = 0; !st && i < s->n_tensors; i++)
        st = qc_tensor_check(s, &s->tensors[i], err);
    qc_pickle_result_free(&res);
    free(by_entry);
    free(pkl_file);
    free(prefix);
    return st;
}

qm_status qc_open_torch_zip(const char *path, qc_source **out, qm_error *err)
{
    *out = NULL;
    qc_source *s = qc_source_new("torch.save zip", path);
    if (!s) return qm_fail(err, QM_ERR_NOMEM, path, NULL, QM_NO_OFFSET, "out of memory");
    uint32_t fi = 0;
    qm_status st = qc_source_map_file(s, path, &fi, err);
    if (!st) st = open_archive(s, s->files[fi].data, s->files[fi].size, err);
    return qc_source_hand_over(s, st, out);
}

qm_status qc_open_torch_zip_buffer(const void *data, size_t len, const char *name, qc_source **out,
                                   qm_error *err)
{
    *out = NULL;
    if (!name) name = "(buffer)";
    qc_source *s = qc_source_new("torch.save zip", name);
    if (!s) return qm_fail(err, QM_ERR_NOMEM, name, NULL, QM_NO_OFFSET, "out of memory");
    qm_status st = qc_source_add_buffer(s, name, data, len, NULL, err);
    if (!st) st = open_archive(s, data, len, err);
    return qc_source_hand_over(s, st, out);
}
