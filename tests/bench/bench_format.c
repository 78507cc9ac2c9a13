/* bench_format — measured claims of the container (make bench). Not a test: prints numbers.
 *
 *  1. open time: qm_open + qm_close of a 4 MB and a 4 GB container with the same number of tensors;
 *     zero-copy open should not grow with the file size (ratio ≈ 1).
 *  2. verify throughput: qm_verify on the big file with 1 and 2 threads, beside this machine's read
 *     bandwidth measured in the same run over the same mapping and over anonymous memory, and XXH3's
 *     in-cache speed (its compute ceiling).
 * Every figure is the median of --runs runs, with min and max.
 */
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "qm_reader.h"
#include "qm_writer.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }

typedef struct { double med, min, max; } stats;
static stats summarize(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return (stats){ v[n / 2], v[0], v[n - 1] };
}

static int write_container(const char *path, int tensors, uint64_t tensor_bytes)
{
    qm_writer *w;
    qm_error e;
    if (qm_writer_create(path, NULL, &w, &e) != QM_OK) { fprintf(stderr, "%s\n", e.message); return -1; }
    qm_writer_meta_string(w, "general.architecture", "bench", 5, &e);
    uint64_t cols = 4096, rows = tensor_bytes / 4 / cols;
    for (int i = 0; i < tensors; i++) {
        char name[64];
        snprintf(name, sizeof name, "blk.%d.weight", i);
        uint64_t dims[2] = { rows, cols };
        if (qm_writer_add_tensor(w, name, QM_DTYPE_F32, 2, dims, &e) != QM_OK) { fprintf(stderr, "%s\n", e.message); qm_writer_abort(w); return -1; }
    }
    size_t chunk = 8u << 20;
    uint8_t *buf = malloc(chunk);
    for (size_t i = 0; i < chunk; i++) buf[i] = (uint8_t)(i * 2654435761u >> 13);
    uint64_t total = (uint64_t)tensors * rows * cols * 4;
    for (uint64_t done = 0; done < total;) {
        size_t k = total - done < chunk ? (size_t)(total - done) : chunk;
        buf[0] = (uint8_t)done; /* vary the bytes a little */
        if (qm_writer_write(w, buf, k, &e) != QM_OK) { fprintf(stderr, "%s\n", e.message); free(buf); qm_writer_abort(w); return -1; }
        done += k;
    }
    free(buf);
    if (qm_writer_finish(w, &e) != QM_OK) { fprintf(stderr, "%s\n", e.message); return -1; }
    return 0;
}

static stats time_open(const char *path, int runs)
{
    double v[64];
    for (int r = 0; r < runs; r++) {
        qm_file *f;
        qm_error e;
        double t0 = now();
        if (qm_open(path, &f, &e) != QM_OK) { fprintf(stderr, "%s\n", e.message); exit(1); }
        qm_close(f);
        v[r] = (now() - t0) * 1e6;
    }
    return summarize(v, runs);
}

/* Streaming read with 512-bit loads (4 independent accumulators) over 256-byte blocks: the fastest
 * plain read this machine does, the baseline verify is compared with. Built with -march=native. */
static double read_gbs(const uint8_t *p, uint64_t n, int threads, uint64_t *sink)
{
    uint64_t blocks = n / 256, s = 0;
    double t0 = now();
    #pragma omp parallel num_threads(threads) reduction(^ : s)
    {
#if defined(__AVX512F__)
        __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
        #pragma omp for schedule(static)
        for (uint64_t b = 0; b < blocks; b++) {
            const uint8_t *q = p + b * 256;
            a0 = _mm512_xor_si512(a0, _mm512_loadu_si512(q));
            a1 = _mm512_xor_si512(a1, _mm512_loadu_si512(q + 64));
            a2 = _mm512_xor_si512(a2, _mm512_loadu_si512(q + 128));
            a3 = _mm512_xor_si512(a3, _mm512_loadu_si512(q + 192));
        }
        a0 = _mm512_xor_si512(_mm512_xor_si512(a0, a1), _mm512_xor_si512(a2, a3));
        s ^= (uint64_t)_mm512_reduce_add_epi64(a0);
#else
        #pragma omp for schedule(static)
        for (uint64_t b = 0; b < blocks; b++) {
            const uint64_t *w = (const uint64_t *)(p + b * 256);
            for (int k = 0; k < 32; k++) s ^= w[k];
        }
#endif
    }
    double dt = now() - t0;
    *sink ^= s;
    return (double)n / dt / 1e9;
}

static void print_stats(const char *what, stats s, const char *unit)
{
    printf("  %-44s median %9.2f %s   (min %.2f, max %.2f)\n", what, s.med, unit, s.min, s.max);
}

int main(int argc, char **argv)
{
    const char *dir = "build/bench";
    int runs = 7;
    double big_gb = 4.0;
    bool keep = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--dir") && i + 1 < argc) dir = argv[++i];
        else if (!strcmp(argv[i], "--runs") && i + 1 < argc) runs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--big-gb") && i + 1 < argc) big_gb = atof(argv[++i]);
        else if (!strcmp(argv[i], "--keep")) keep = true;
        else { fprintf(stderr, "usage: bench_format [--dir D] [--runs N] [--big-gb G] [--keep]\n"); return 2; }
    }
    if (runs < 3) runs = 3;
    if (runs > 64) runs = 64;
    mkdir(dir, 0777);
    char small[512], big[512];
    snprintf(small, sizeof small, "%s/open-small.qmap", dir);
    snprintf(big, sizeof big, "%s/open-big.qmap", dir);
    const int tensors = 64;
    uint64_t big_bytes = (uint64_t)(big_gb * 1e9) / tensors / 16384 * 16384;

    printf("qmap container benchmarks (%d runs each, %d cores)\n\n", runs, omp_get_num_procs());
    double t0 = now();
    if (write_container(small, tensors, 65536) || write_container(big, tensors, big_bytes)) return 1;
    double wt = now() - t0;
    struct stat sb, ss;
    stat(big, &sb);
    stat(small, &ss);
    printf("wrote %s (%.2f MB) and %s (%.2f GB) in %.2f s (%.2f GB/s through the atomic writer, incl. fsync)\n\n",
           small, (double)ss.st_size / 1e6, big, (double)sb.st_size / 1e9, wt, (double)(sb.st_size + ss.st_size) / wt / 1e9);

    printf("1. open + close (64 tensors each; validates header, metadata, table; maps; reads no data)\n");
    stats os = time_open(small, runs), ob = time_open(big, runs);
    print_stats("4 MB container", os, "us");
    print_stats("4 GB container", ob, "us");
    printf("  ratio big/small (median): %.2f\n\n", ob.med / os.med);

    printf("2. verify throughput on the %.2f GB container (in page cache)\n", (double)sb.st_size / 1e9);
    qm_file *f;
    qm_error e;
    if (qm_open(big, &f, &e) != QM_OK) { fprintf(stderr, "%s\n", e.message); return 1; }
    const uint8_t *base = qm_file_bytes(f);
    uint64_t size = qm_file_header(f)->file_size, sink = 0;
    uint64_t anon_n = 1ull << 30;
    uint8_t *anon = mmap(NULL, anon_n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    memcpy(anon, base, anon_n);
    read_gbs(base, size, 2, &sink); /* warm: fault the mapping in */
    double v[64];
    stats verify_s[3], map_s[3], anon_s[3];
    for (int th = 1; th <= 2; th++) {
        for (int r = 0; r < runs; r++) v[r] = read_gbs(base, size, th, &sink);
        map_s[th] = summarize(v, runs);
        for (int r = 0; r < runs; r++) v[r] = read_gbs(anon, anon_n, th, &sink);
        anon_s[th] = summarize(v, runs);
        for (int r = 0; r < runs; r++) {
            qm_verify_opts o = { .threads = th };
            qm_verify_report rep;
            if (qm_verify(f, &o, NULL, &rep, &e) != QM_OK) { fprintf(stderr, "%s\n", e.message); return 1; }
            v[r] = (double)rep.bytes_hashed / rep.seconds / 1e9;
        }
        verify_s[th] = summarize(v, runs);
    }
    /* XXH3's own ceiling: hashing a 256 KB buffer that stays in cache */
    size_t hot = 256 << 10;
    for (int r = 0; r < runs; r++) {
        double t = now();
        for (int k = 0; k < 4000; k++) sink ^= qm_checksum(anon + (k & 7) * 64, hot);
        v[r] = (double)hot * 4000 / (now() - t) / 1e9;
    }
    stats hot_s = summarize(v, runs);
    for (int th = 1; th <= 2; th++) {
        char label[96];
        snprintf(label, sizeof label, "read bandwidth, file mapping, %d thread%s", th, th > 1 ? "s" : "");
        print_stats(label, map_s[th], "GB/s");
        snprintf(label, sizeof label, "read bandwidth, anonymous 1 GiB, %d thread%s", th, th > 1 ? "s" : "");
        print_stats(label, anon_s[th], "GB/s");
        snprintf(label, sizeof label, "qmap verify, %d thread%s", th, th > 1 ? "s" : "");
        print_stats(label, verify_s[th], "GB/s");
        printf("  verify / mapping read bandwidth (%d thread%s): %.2f\n", th, th > 1 ? "s" : "", verify_s[th].med / map_s[th].med);
    }
    print_stats("XXH3-64 in cache (compute ceiling), 1 thread", hot_s, "GB/s");
    printf("  checksum kernel: %s\n", qm_checksum_impl());
    printf("(sink %llx)\n", (unsigned long long)(sink & 0xF));
    munmap(anon, anon_n);
    qm_close(f);
    if (!keep) { unlink(small); unlink(big); }
    return 0;
}
