/* qmap verify — check every tensor's checksum (and with --full every R-DATA-2 rule), in parallel. */
#include <inttypes.h>
#include <omp.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "json_out.h"
#include "qm_reader.h"

static void help(FILE *fp)
{
    fprintf(fp,
            "usage: qmap verify [--full] [--threads N] [--json] [--quiet] FILE\n"
            "\n"
            "Open the container (which checks the header checksum and every structural rule), then hash\n"
            "every tensor's data and compare it with the checksum in the tensor table. Prints OK, or each\n"
            "damaged tensor by name, and the throughput.\n"
            "\n"
            "  --full          also check padding bytes, Q8_ROW internals (row sums, scales, -128) and that no\n"
            "                  F32/F16/BF16 element is NaN or infinite (naming the first)\n"
            "  --threads N     threads to hash with (default: all cores, or OMP_NUM_THREADS)\n"
            "  --json          print the result as JSON: {\"file\", \"ok\", \"tensors\", \"bad\": [...], ...}\n"
            "  -q, --quiet     print nothing; only the exit status tells\n"
            "  -h, --help      this text\n"
            "\n"
            "exit status: 0 every check passed, 1 the file is damaged or invalid, 2 usage error\n");
}

int cmd_verify(int argc, char **argv)
{
    bool json = false, quiet = false;
    qm_verify_opts opts = { 0 };
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) { help(stdout); return 0; }
        else if (!strcmp(argv[i], "--json")) json = true;
        else if (!strcmp(argv[i], "--full")) opts.full = true;
        else if (!strcmp(argv[i], "-q") || !strcmp(argv[i], "--quiet")) quiet = true;
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            long n = cli_parse_count(argv[++i]);
            if (n < 1 || n > 1024) { fprintf(stderr, "qmap verify: --threads needs a number in 1..1024\n"); return 2; }
            opts.threads = (int)n;
        } else if (argv[i][0] == '-' && argv[i][1]) { fprintf(stderr, "qmap verify: unknown option '%s'\n", argv[i]); help(stderr); return 2; }
        else if (!path) path = argv[i];
        else { fprintf(stderr, "qmap verify: one FILE only\n"); return 2; }
    }
    if (!path) { help(stderr); return 2; }

    qm_file *f;
    qm_error err;
    if (qm_open(path, &f, &err) != QM_OK) {
        if (json && !quiet) {
            json_out j = { .fp = stdout };
            json_begin_object(&j, NULL);
            json_cstring(&j, "file", path);
            json_bool(&j, "ok", false);
            json_cstring(&j, "error", qm_status_name(err.code));
            json_cstring(&j, "message", err.message);
            json_end_object(&j);
            putchar('\n');
        } else if (!quiet) fprintf(stderr, "qmap verify: %s\n", err.message);
        return 1;
    }
    uint64_t n = qm_tensor_count(f);
    qm_status *st = calloc(n ? n : 1, sizeof *st);
    if (!st) { fprintf(stderr, "qmap verify: out of memory\n"); qm_close(f); return 1; }
    qm_verify_report rep;
    qm_status s = qm_verify(f, &opts, st, &rep, &err);
    int threads = opts.threads ? opts.threads : omp_get_max_threads();
    double gbs = rep.seconds > 0 ? (double)rep.bytes_hashed / rep.seconds / 1e9 : 0;
    char hb[32];

    if (json && !quiet) {
        json_out j = { .fp = stdout };
        json_begin_object(&j, NULL);
        json_cstring(&j, "file", path);
        json_bool(&j, "ok", s == QM_OK);
        json_bool(&j, "full", opts.full);
        json_u64(&j, "tensors", rep.tensors_checked);
        json_u64(&j, "bytes", rep.bytes_hashed);
        json_f64(&j, "seconds", rep.seconds);
        json_f64(&j, "gb_per_s", gbs);
        json_u64(&j, "threads", (uint64_t)threads);
        json_begin_array(&j, "bad");
        for (uint64_t i = 0; i < n; i++) {
            if (st[i] == QM_OK) continue;
            json_begin_object(&j, NULL);
            json_cstring(&j, "name", qm_tensor_at(f, i)->name);
            json_cstring(&j, "error", qm_status_name(st[i]));
            json_end_object(&j);
        }
        json_end_array(&j);
        json_end_object(&j);
        putchar('\n');
    } else if (!quiet) {
        for (uint64_t i = 0; i < n; i++)
            if (st[i] != QM_OK)
                printf("BAD  %s: %s [%s]\n", qm_tensor_at(f, i)->name, qm_status_string(st[i]), qm_status_name(st[i]));
        if (s != QM_OK) printf("first problem: %s\n", err.message);
        printf("%s: %" PRIu64 " tensors, %s hashed in %.3f s (%.2f GB/s, %d thread%s)%s\n", path, rep.tensors_checked,
               cli_human_bytes(rep.bytes_hashed, hb, sizeof hb), rep.seconds, gbs, threads, threads == 1 ? "" : "s",
               opts.full ? ", full checks" : "");
        if (s == QM_OK) printf("OK\n");
        else if (s == QM_ERR_IO) printf("FAILED: the file could not be read to the end; verify it again once it is stable\n");
        else printf("FAILED: %" PRIu64 " of %" PRIu64 " tensors damaged\n", rep.tensors_bad, rep.tensors_checked);
    }
    free(st);
    qm_close(f);
    return s == QM_OK ? 0 : 1;
}
