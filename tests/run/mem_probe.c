/* mem_probe — what a decoding process holds in memory, for tests/run/test_memory.py (public API only).
 *
 *   mem_probe MODEL [--no-mmap] [--no-prefetch] [-n TOKENS] [-c N_CTX]
 *
 * Opens MODEL as qmap run does (large_pages on; --no-prefetch opens it with the library's defaults,
 * large_pages off, which leave the mapping as the page cache has it: the control), makes a session of N_CTX positions (F16 KV cache, 1 thread) and decodes TOKENS tokens one
 * at a time, which reads every weight. Then it prints one line of figures and waits for a line on stdin
 * (so the test can hold two of them alive at once), prints the figures again and exits:
 *
 *   ready|final file=B kv=B hwm=B rss_anon=B rss_file=B map_rss=B map_pss=B map_pmd=B api_pmd=B
 *
 * hwm is the peak RSS (VmHWM), rss_anon/rss_file split the current RSS (/proc/self/status), map_rss and
 * map_pss are the Rss and Pss of the model file's mapping (/proc/self/smaps, the VMAs named by its path;
 * 0 with --no-mmap, where the weights are anonymous memory), map_pmd the part of it mapped in 2 MiB
 * entries (FilePmdMapped), api_pmd the same as qmap_model_large_page_bytes gives it (-1: unknown), kv
 * the bytes of the KV cache the session holds. All in bytes.
 */
#define QMAP_EXPERIMENTAL /* qmap_model_large_page_bytes */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qmap.h"

/* The value of a "Key:   N kB" line of a /proc file, in bytes (the last such line; 0 if none). */
static unsigned long long status_field(const char *file, const char *key)
{
    FILE *fp = fopen(file, "r");
    if (!fp) return 0;
    char line[512];
    unsigned long long v = 0, kb;
    size_t kl = strlen(key);
    while (fgets(line, sizeof line, fp))
        if (!strncmp(line, key, kl) && line[kl] == ':' && sscanf(line + kl + 1, "%llu", &kb) == 1) v = kb * 1024;
    fclose(fp);
    return v;
}

/* Rss, Pss and FilePmdMapped summed over the VMAs of /proc/self/smaps that map `path`. */
static void mapping_figures(const char *path, unsigned long long *rss, unsigned long long *pss,
                            unsigned long long *pmd)
{
    *rss = *pss = *pmd = 0;
    char real[4096];
    if (!realpath(path, real)) return;
    FILE *fp = fopen("/proc/self/smaps", "r");
    if (!fp) return;
    char line[4600];
    int in_vma = 0;
    while (fgets(line, sizeof line, fp)) {
        unsigned long long kb;
        char name[4200];
        /* a VMA header, "start-end perms offset dev inode [name]", begins with a lower-case hex address;
         * the field lines that follow begin with a capitalised key */
        if ((line[0] >= '0' && line[0] <= '9') || (line[0] >= 'a' && line[0] <= 'f')) {
            if (sscanf(line, "%*s %*s %*s %*s %*s %4199s", name) != 1) name[0] = 0;
            in_vma = !strcmp(name, real);
            continue;
        }
        if (!in_vma) continue;
        if (sscanf(line, "Rss: %llu kB", &kb) == 1) *rss += kb * 1024;
        else if (sscanf(line, "Pss: %llu kB", &kb) == 1) *pss += kb * 1024;
        else if (sscanf(line, "FilePmdMapped: %llu kB", &kb) == 1) *pmd += kb * 1024;
    }
    fclose(fp);
}

static void report(const char *tag, const qmap_model *m, const char *path, unsigned long long file,
                   unsigned long long kv)
{
    unsigned long long mr, mp, mh;
    mapping_figures(path, &mr, &mp, &mh);
    const uint64_t api = qmap_model_large_page_bytes(m);
    printf("%s file=%llu kv=%llu hwm=%llu rss_anon=%llu rss_file=%llu map_rss=%llu map_pss=%llu map_pmd=%llu "
           "api_pmd=%lld\n", tag, file, kv, status_field("/proc/self/status", "VmHWM"),
           status_field("/proc/self/status", "RssAnon"), status_field("/proc/self/status", "RssFile"), mr, mp, mh,
           api == UINT64_MAX ? -1LL : (long long)api);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: mem_probe MODEL [--no-mmap] [--no-prefetch] [-n TOKENS] [-c N_CTX]\n");
        return 2;
    }
    const char *path = argv[1];
    qmap_model_params mp;
    qmap_model_params_default(&mp);
    mp.large_pages = true; /* as qmap run opens a model; --no-prefetch is the control */
    long n = 8, ctx = 256;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--no-mmap")) mp.no_mmap = true;
        else if (!strcmp(argv[i], "--no-prefetch")) mp.large_pages = false;
        else if (!strcmp(argv[i], "-n") && i + 1 < argc) n = atol(argv[++i]);
        else if (!strcmp(argv[i], "-c") && i + 1 < argc) ctx = atol(argv[++i]);
        else {
            fprintf(stderr, "mem_probe: unknown argument %s\n", argv[i]);
            return 2;
        }
    }
    if (n < 1 || ctx < n) {
        fprintf(stderr, "mem_probe: need 1 <= TOKENS <= N_CTX\n");
        return 2;
    }
    qmap_model *m = NULL;
    qmap_session *s = NULL;
    qmap_error e;
    if (qmap_model_open(path, &mp, &m, &e) != QMAP_OK) {
        fprintf(stderr, "mem_probe: %s\n", e.message);
        return 1;
    }
    qmap_model_info in;
    qmap_model_get_info(m, &in);
    qmap_session_params sp;
    qmap_session_params_default(&sp);
    sp.n_ctx = (uint32_t)ctx;
    sp.threads = 1;
    sp.kv_type = QMAP_KV_F16;
    if (qmap_session_new(m, &sp, &s, &e) != QMAP_OK) {
        fprintf(stderr, "mem_probe: %s\n", e.message);
        qmap_model_close(m);
        return 1;
    }
    for (long i = 0; i < n; i++) {
        int32_t id = (int32_t)((i * 7919 + 13) % in.vocab_size);
        if (qmap_eval(s, &id, 1, &e) != QMAP_OK) {
            fprintf(stderr, "mem_probe: %s\n", e.message);
            return 1;
        }
    }
    /* K and V, F16, every layer, every position of the context */
    unsigned long long kv = 2ull * in.n_layers * in.n_kv_heads * in.head_dim * (unsigned long long)ctx * 2;
    report("ready", m, path, in.file_size, kv);
    char line[16];
    if (!fgets(line, sizeof line, stdin)) line[0] = 0;
    report("final", m, path, in.file_size, kv);
    qmap_session_free(s);
    qmap_model_close(m);
    return 0;
}
