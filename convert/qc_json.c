/* qc_json.c — size cap and tree-size estimate for the JSON files convert reads (see qc_json.h). */
#include "qc_json.h"

#include <stdio.h>
#include <stdlib.h>

#include "qc_source.h"

/* Heap bytes per thing, jansson 2.14 on x86-64 glibc, measured with mallinfo2 around json_loadb over a
 * million of each, rounded up: an object 232 (its hashtable), an array 136 (8 slots), a value 48, a
 * string 48 on top of its value and its bytes, an object member 32 on top of its key and value. */
enum { COST_OBJECT = 232, COST_ARRAY = 136, COST_VALUE = 48, COST_STRING = 48, COST_MEMBER = 32 };

static const char *kind_name(qc_json_kind kind)
{
    switch (kind) {
    case QC_JSON_TOKENIZER: return "tokenizer files";
    case QC_JSON_CONFIG: return "config files";
    case QC_JSON_INDEX: return "shard index files";
    case QC_JSON_MANIFEST: return "raw-dump manifests";
    }
    return "JSON files";
}

uint64_t qc_json_cap(qc_json_kind kind, uint64_t limit)
{
    if (limit) return limit;
    switch (kind) {
    case QC_JSON_TOKENIZER: return QC_JSON_DEFAULT_CAP_TOKENIZER;
    case QC_JSON_CONFIG: return QC_JSON_DEFAULT_CAP_CONFIG;
    case QC_JSON_INDEX: return QC_JSON_DEFAULT_CAP_INDEX;
    case QC_JSON_MANIFEST: return QC_JSON_DEFAULT_CAP_MANIFEST;
    }
    return QC_JSON_DEFAULT_CAP_CONFIG;
}

uint64_t qc_json_tree_estimate(const char *text, size_t len)
{
    /* Outside strings every value but the last of a container is followed by ',', so values = commas
     * + containers (+1 for the top level), an overestimate by one per empty container. */
    uint64_t objects = 0, arrays = 0, commas = 0, colons = 0, strings = 0;
    const unsigned char *p = (const unsigned char *)text, *end = p + len;
    while (p < end) {
        unsigned char c = *p++;
        switch (c) {
        case '{': objects++; break;
        case '[': arrays++; break;
        case ',': commas++; break;
        case ':': colons++; break;
        case '"':
            strings++;
            while (p < end && *p != '"') p += (*p == '\\') ? 2 : 1;
            p++;
            break;
        default: break;
        }
    }
    uint64_t values = commas + objects + arrays + 1;
    return objects * COST_OBJECT + arrays * COST_ARRAY + values * COST_VALUE + strings * COST_STRING
           + colons * COST_MEMBER + len;
}

static double mib(uint64_t b) { return (double)b / (1024.0 * 1024.0); }

qm_status qc_json_check(const char *path, const char *text, size_t len, qc_json_kind kind, uint64_t limit,
                        qm_error *err)
{
    uint64_t cap = qc_json_cap(kind, limit);
    if (len > cap)
        return qm_fail(err, QM_ERR_UNSUPPORTED, path, NULL, QM_NO_OFFSET,
                       "file is %.1f MiB, above the %.0f MiB cap for %s (if it is genuine, --json-limit MIB "
                       "raises the cap)", mib(len), mib(cap), kind_name(kind));
    uint64_t tree = qc_json_tree_estimate(text, len), budget = cap * QC_JSON_TREE_FACTOR;
    if (tree > budget)
        return qm_fail(err, QM_ERR_UNSUPPORTED, path, NULL, QM_NO_OFFSET,
                       "parsing this %.1f MiB file would take about %.0f MiB of memory (it is mostly small "
                       "values), above the %.0f MiB allowed for %s (%u x the %.0f MiB file cap; if the file is "
                       "genuine, --json-limit MIB raises both)", mib(len), mib(tree), mib(budget), kind_name(kind),
                       QC_JSON_TREE_FACTOR, mib(cap));
    return QM_OK;
}

qm_status qc_json_read_file(const char *path, qc_json_kind kind, uint64_t limit, char **out, size_t *len,
                            qm_error *err)
{
    char what[128];
    snprintf(what, sizeof what, "%s (if it is genuine, --json-limit MIB raises the cap)", kind_name(kind));
    qm_status st = qc_read_small_file(path, qc_json_cap(kind, limit), what, out, len, err);
    if (st) return st;
    st = qc_json_check(path, *out, *len, kind, limit, err);
    if (st) {
        free(*out);
        *out = NULL;
        *len = 0;
    }
    return st;
}
