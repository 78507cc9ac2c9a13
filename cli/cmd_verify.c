/* qmap verify — check every tensor's checksum (and with --full every R-DATA-2 rule), in parallel. */
#include <inttypes.h>
#include <omp.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "json_out.h"
#include "opts.h"
#include "qm_reader.h"

static const char VERIFY_DESCRIPTION[] =
    "Open the container (which checks the header checksum and every structural rule), then hash\n"
    "every tensor's data and compare it with the checksum in the tensor table. Prints OK, or each\n"
    "damaged tensor by name, and the throughput.\n";

/* Parse argv into the options and the one FILE; 0, 1 (help printed) or 2 (usage error, printed). */
static int verify_parse(int argc, char **argv, qm_verify_opts *vo, bool *json, bool *quiet, const char **path)
{
    long threads = 0;
    const cli_opt opts[] = {
        { "full", 0, CLI_FLAG, &vo->full, NULL, 0, 0, NULL, "also check padding bytes, Q8_ROW internals (row sums, "
          "scales, -128): spec R-DATA-2, and that no F32/F16/BF16 element is NaN or infinite (naming the first)", false },
        { "threads", 0, CLI_INT, &threads, "N", 1, 1024, NULL, "threads to hash with (default: all cores, or "
          "OMP_NUM_THREADS)", true },
        { "json", 0, CLI_FLAG, json, NULL, 0, 0, NULL, "print the result as JSON: {\"file\", \"ok\", \"tensors\", "
          "\"bad\": [...], ...}", false },
        { "quiet", 'q', CLI_FLAG, quiet, NULL, 0, 0, NULL, "print nothing; only the exit status tells", false },
    };
    const cli_command cmd = { "verify", "qmap verify [--full] [--threads N] [--json] [--quiet] FILE", VERIFY_DESCRIPTION,
                              opts, sizeof opts / sizeof opts[0],
                              "exit status: 0 every check passed, 1 the file is damaged or invalid, 2 usage error\n" };
    int first;
    int rc = cli_parse(&cmd, argc, argv, &first);
    if (rc != 0) return rc;
    if (first != argc - 1) {
        fprintf(stderr, "qmap verify: %s\nusage: %s\n", first >= argc ? "no FILE given" : "one FILE only", cmd.usage);
        return 2;
    }
    vo->threads = (int)threads;
    *path = argv[first];
    return 0;
}

static void print_open_failure(const char *path, const qm_error *err, bool json, bool quiet)
{
    if (quiet) return;
    if (!json) {
        fprintf(stderr, "qmap verify: %s\n", err->message);
        return;
    }
    json_out j = { .fp = stdout };
    jo_begin_object(&j, NULL);
    jo_cstring(&j, "file", path);
    jo_bool(&j, "ok", false);
    jo_cstring(&j, "error", qm_status_name(err->code));
    jo_cstring(&j, "message", err->message);
    jo_end_object(&j);
    putchar('\n');
}

int cmd_verify(int argc, char **argv)
{
    bool json = false, quiet = false;
    qm_verify_opts opts = { 0 };
    const char *path = NULL;
    int prc = verify_parse(argc, argv, &opts, &json, &quiet, &path);
    if (prc != 0) return prc == 1 ? 0 : 2;

    qm_file *f;
    qm_error err;
    if (qm_open(path, &f, &err) != QM_OK) {
        print_open_failure(path, &err, json, quiet);
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
        jo_begin_object(&j, NULL);
        jo_cstring(&j, "file", path);
        jo_bool(&j, "ok", s == QM_OK);
        jo_bool(&j, "full", opts.full);
        jo_u64(&j, "tensors", rep.tensors_checked);
        jo_u64(&j, "bytes", rep.bytes_hashed);
        jo_f64(&j, "seconds", rep.seconds);
        jo_f64(&j, "gb_per_s", gbs);
        jo_u64(&j, "threads", (uint64_t)threads);
        jo_begin_array(&j, "bad");
        for (uint64_t i = 0; i < n; i++) {
            if (st[i] == QM_OK) continue;
            jo_begin_object(&j, NULL);
            jo_cstring(&j, "name", qm_tensor_at(f, i)->name);
            jo_cstring(&j, "error", qm_status_name(st[i]));
            jo_end_object(&j);
        }
        jo_end_array(&j);
        jo_end_object(&j);
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
