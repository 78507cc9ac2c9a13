/* qmap quantize — an F32 container to Q8_ROW (int8, one scale per row) or F16 weights. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "json_out.h"
#include "qm_fileio.h"
#include "qm_format.h"
#include "qq_quantize.h"

static void help(FILE *fp)
{
    fprintf(fp,
            "usage: qmap quantize (--q8 | --f16) IN.qmap -o OUT.qmap [options]\n"
            "\n"
            "Quantize the weight matrices of a container: every tensor of rank >= 2 whose name ends in\n"
            "\".weight\" (linear, attention and FFN weights, token embeddings, output head), except\n"
            "pos_embd.weight and --keep matches. 1-D tensors (norms, biases) and everything else are copied.\n"
            "\n"
            "  --q8                Q8_ROW: int8 with one f32 scale per row (scale = max|w|/127, round half\n"
            "                      to even; spec/FORMAT.md 6.1). Takes F32 or F16 weights.\n"
            "  --f16               IEEE half, round to nearest even; a value beyond ±65504 is an error.\n"
            "  -o, --output FILE   the container to write (replaced atomically, by rename; an existing\n"
            "                      FILE that is not a regular file, e.g. a device or a FIFO, is refused)\n"
            "  --keep PATTERN      leave tensors matching this glob as they are (repeatable),\n"
            "                      e.g. --keep 'output.weight' --keep 'blk.0.*'\n"
            "  --report FILE       write the per-tensor report as JSON (replaced as -o is)\n"
            "  --threads N         threads (default: all cores); the output is the same for any N\n"
            "  --panel-cols auto|N|0\n"
            "                      decoder LMs: write each FFN down projection ([dim, ffn]) with rows\n"
            "                      longer than N in column panels of N columns, as [ffn/N, dim, N] (N a\n"
            "                      multiple of 64 dividing ffn; spec/ARCHITECTURES.md §6): a decode reads\n"
            "                      all of X once per row, and long rows stream slower. Q8_ROW gets a\n"
            "                      scale per row of each panel. auto (the default) cuts Q8_ROW rows past\n"
            "                      4096 columns and F16 rows past 2048 (TinyLlama's 5632: 2 panels of\n"
            "                      2816 / 4 of 1408; GPT-2's 3072: F16 2 of 1536; Llama 2 7B's 11008:\n"
            "                      4 of 2752); 0: as stored\n"
            "  -q, --quiet         no progress and no table\n"
            "  --json              print the report as JSON instead of the table\n"
            "  -h, --help          this text\n"
            "\n"
            "The report gives, per tensor, bytes before and after, the relative RMS error ||w - w'|| / ||w||,\n"
            "the largest absolute error and, for Q8_ROW, the rows whose scale is set by one outlier\n"
            "(max|w| > 8 x the row's RMS). In the JSON, a tensor's shape is as written and \"panels\" counts\n"
            "its column panels (1 for none).\n"
            "\n"
            "exit status: 0 written, 1 the input is bad or cannot be quantized, 2 usage error\n");
}

typedef struct ui { bool tty, quiet; int last_len; } ui;

static void on_progress(void *user, const qq_progress *p)
{
    ui *u = user;
    if (!u->tty || u->quiet) return;
    char done[16], total[16];
    double rate = p->seconds > 0 ? p->bytes_done / p->seconds : 0;
    u->last_len = fprintf(stderr, "\rquantize: tensor %llu/%llu  %s of %s written  %.0f MB/s   ",
                          (unsigned long long)(p->tensor < p->n_tensors ? p->tensor + 1 : p->n_tensors),
                          (unsigned long long)p->n_tensors, cli_human_bytes(p->bytes_done, done, sizeof done),
                          cli_human_bytes(p->bytes_total, total, sizeof total), rate / 1e6);
}

static const char *action_name(qq_action a)
{
    return a == QQ_QUANTIZED ? "quantized" : a == QQ_KEPT ? "kept" : "copied";
}

static const char *dtype_name(uint32_t d)
{
    const qm_dtype_traits *t = qm_dtype_info(d);
    return t ? t->name : "?";
}

static void report_json(FILE *fp, const char *in, const char *out, qq_scheme scheme, const qq_report *r)
{
    json_out j = { .fp = fp };
    json_begin_object(&j, NULL);
    json_cstring(&j, "input", in);
    json_cstring(&j, "output", out);
    json_cstring(&j, "scheme", scheme == QQ_Q8_ROW ? "q8_row" : "f16");
    json_u64(&j, "threads", (uint64_t)r->threads);
    json_cstring(&j, "kernels", r->kernels ? r->kernels : "");
    json_f64(&j, "seconds", r->seconds);
    json_begin_array(&j, "tensors");
    for (uint64_t i = 0; i < r->n_tensors; i++) {
        const qq_tensor_report *t = &r->tensors[i];
        bool q = t->action == QQ_QUANTIZED;
        json_begin_object(&j, NULL);
        json_cstring(&j, "name", t->name);
        json_cstring(&j, "action", action_name(t->action));
        json_cstring(&j, "dtype_in", dtype_name(t->dtype_in));
        json_cstring(&j, "dtype_out", dtype_name(t->dtype_out));
        json_begin_array(&j, "shape");
        for (uint32_t d = 0; d < t->rank; d++) json_u64(&j, NULL, t->dims[d]);
        json_end_array(&j);
        json_u64(&j, "bytes_in", t->bytes_in);
        json_u64(&j, "bytes_out", t->bytes_out);
        if (q) {
            json_f64(&j, "rel_rms_error", t->rel_rms_error);
            json_f64(&j, "max_abs_error", t->max_abs_error);
            if (scheme == QQ_Q8_ROW) json_u64(&j, "outlier_rows", t->outlier_rows);
            else json_null(&j, "outlier_rows");
            json_u64(&j, "rows", t->rows);
            json_u64(&j, "panels", t->panels);
        } else {
            json_null(&j, "rel_rms_error");
            json_null(&j, "max_abs_error");
            json_null(&j, "outlier_rows");
            json_null(&j, "rows");
            json_null(&j, "panels");
        }
        json_end_object(&j);
    }
    json_end_array(&j);
    json_begin_object(&j, "total");
    json_u64(&j, "bytes_in", r->bytes_in);
    json_u64(&j, "bytes_out", r->bytes_out);
    json_f64(&j, "rel_rms_error", r->rel_rms_error);
    json_u64(&j, "tensors_quantized", r->n_quantized);
    json_u64(&j, "tensors_copied", r->n_copied);
    json_end_object(&j);
    json_end_object(&j);
    fputc('\n', fp);
}

static void report_table(const char *out, qq_scheme scheme, const qq_report *r)
{
    size_t w = 4;
    for (uint64_t i = 0; i < r->n_tensors; i++) if (strlen(r->tensors[i].name) > w) w = strlen(r->tensors[i].name);
    if (w > 48) w = 48;
    printf("%-*s  %-9s  %-6s  %-6s  %10s  %10s  %10s  %10s  %s\n", (int)w, "name", "action", "in", "out", "bytes in",
           "bytes out", "rel rms", "max abs", scheme == QQ_Q8_ROW ? "outlier rows" : "");
    for (uint64_t i = 0; i < r->n_tensors; i++) {
        const qq_tensor_report *t = &r->tensors[i];
        char bi[16], bo[16];
        printf("%-*.*s  %-9s  %-6s  %-6s  %10s  %10s", (int)w, (int)w, t->name, action_name(t->action),
               dtype_name(t->dtype_in), dtype_name(t->dtype_out), cli_human_bytes(t->bytes_in, bi, sizeof bi),
               cli_human_bytes(t->bytes_out, bo, sizeof bo));
        if (t->action == QQ_QUANTIZED) {
            printf("  %10.3e  %10.3e", t->rel_rms_error, t->max_abs_error);
            if (scheme == QQ_Q8_ROW) printf("  %llu/%llu", (unsigned long long)t->outlier_rows, (unsigned long long)t->rows);
        }
        printf("\n");
    }
    char bi[16], bo[16];
    printf("%s: %llu tensors quantized to %s, %llu copied; %s -> %s (%.2fx smaller); relative RMS error %.3e; "
           "%.2f s, %d threads, %s kernels\n", out, (unsigned long long)r->n_quantized, scheme == QQ_Q8_ROW ? "Q8_ROW" : "F16",
           (unsigned long long)r->n_copied, cli_human_bytes(r->bytes_in, bi, sizeof bi),
           cli_human_bytes(r->bytes_out, bo, sizeof bo), r->bytes_out ? (double)r->bytes_in / r->bytes_out : 0.0,
           r->rel_rms_error, r->seconds, r->threads, r->kernels ? r->kernels : "?");
    uint64_t n_panelled = 0;
    const qq_tensor_report *first = NULL;
    for (uint64_t i = 0; i < r->n_tensors; i++)
        if (r->tensors[i].panels > 1 && n_panelled++ == 0) first = &r->tensors[i];
    if (first)
        printf("%s: %llu FFN down projections written in column panels, e.g. %s as %llu x [%llu, %llu] "
               "(--panel-cols 0 keeps them [%llu, %llu])\n", out, (unsigned long long)n_panelled, first->name,
               (unsigned long long)first->dims[0], (unsigned long long)first->dims[1],
               (unsigned long long)first->dims[2], (unsigned long long)first->dims[1],
               (unsigned long long)(first->dims[0] * first->dims[2]));
}

int cmd_quantize(int argc, char **argv)
{
    qq_opts o = { .panel_cols = QQ_PANEL_AUTO };
    ui u = { .tty = isatty(2) != 0 };
    bool json = false;
    const char *report_path = NULL, *input = NULL;
    const char **keep = calloc((size_t)argc, sizeof *keep);
    if (!keep) return 1;
    int rc = 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has_val = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { help(stdout); free(keep); return 0; }
        else if (!strcmp(a, "--q8") || !strcmp(a, "--f16")) {
            qq_scheme s = !strcmp(a, "--q8") ? QQ_Q8_ROW : QQ_F16;
            if (o.scheme && o.scheme != s) { fprintf(stderr, "qmap quantize: give --q8 or --f16, not both\n"); goto usage; }
            o.scheme = s;
        } else if ((!strcmp(a, "-o") || !strcmp(a, "--output")) && has_val) o.output = argv[++i];
        else if (!strcmp(a, "--keep") && has_val) keep[o.n_keep++] = argv[++i];
        else if (!strcmp(a, "--report") && has_val) report_path = argv[++i];
        else if (!strcmp(a, "--panel-cols") && has_val) {
            const char *v = argv[++i];
            long n = cli_parse_count(v);
            if (!strcmp(v, "auto")) o.panel_cols = QQ_PANEL_AUTO;
            else if (n == 0 || (n >= 64 && n <= (1L << 30) && n % 64 == 0)) o.panel_cols = (uint64_t)n;
            else {
                fprintf(stderr, "qmap quantize: --panel-cols takes auto, 0 or a multiple of 64 (e.g. 2048)\n");
                goto usage;
            }
        } else if (!strcmp(a, "--threads") && has_val) {
            long n = cli_parse_count(argv[++i]);
            if (n < 1 || n > 1024) { fprintf(stderr, "qmap quantize: --threads needs a number in 1..1024\n"); goto usage; }
            o.threads = (int)n;
        } else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) u.quiet = true;
        else if (!strcmp(a, "--json")) json = true;
        else if (a[0] == '-' && a[1]) { fprintf(stderr, "qmap quantize: unknown option or missing value: '%s'\n", a); goto usage; }
        else if (!input) input = a;
        else { fprintf(stderr, "qmap quantize: one input only\n"); goto usage; }
    }
    if (!o.scheme || !input || !o.output) {
        fprintf(stderr, "qmap quantize: %s\n", !o.scheme ? "give --q8 or --f16" : !input ? "no input given" : "no output given (-o OUT.qmap)");
        goto usage;
    }
    o.input = input;
    o.keep = keep;
    o.on_progress = on_progress;
    o.user = &u;
    qq_report r;
    qm_error err;
    /* refuse a --report destination that is not a regular file before the work, not after it */
    if (report_path && qm_check_destination(report_path, &err) != QM_OK) {
        fprintf(stderr, "qmap quantize: --report: %s\n", err.message);
        free(keep);
        return 1;
    }
    qm_status st = qq_quantize(&o, &r, &err);
    if (u.tty && !u.quiet && u.last_len) fprintf(stderr, "\r%*s\r", u.last_len, "");
    if (st != QM_OK) {
        fprintf(stderr, "qmap quantize: %s\n", err.message);
        if (json) {
            json_out j = { .fp = stdout };
            json_begin_object(&j, NULL);
            json_bool(&j, "ok", false);
            json_cstring(&j, "error", qm_status_name(err.code));
            json_cstring(&j, "message", err.message);
            json_end_object(&j);
            fputc('\n', stdout);
        }
        qq_report_free(&r);
        free(keep);
        return 1;
    }
    rc = 0;
    if (report_path) {
        /* built in memory, then written as every qmap output is (qm_outfile: never into a device) */
        char *text = NULL;
        size_t len = 0;
        FILE *fp = open_memstream(&text, &len);
        qm_error e;
        snprintf(e.message, sizeof e.message, "out of memory");
        if (!fp || (report_json(fp, input, o.output, o.scheme, &r), fclose(fp) != 0) ||
            cli_write_file(report_path, text, len, &e) != QM_OK) {
            fprintf(stderr, "qmap quantize: %s written, but the report could not be: %s\n", o.output, e.message);
            rc = 1;
        }
        free(text);
    }
    if (json) report_json(stdout, input, o.output, o.scheme, &r);
    else if (!u.quiet) report_table(o.output, o.scheme, &r);
    qq_report_free(&r);
    free(keep);
    return rc;
usage:
    fprintf(stderr, "\n");
    help(stderr);
    free(keep);
    return rc;
}
