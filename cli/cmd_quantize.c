/* qmap quantize — an F32 container to Q8_ROW (int8, one scale per row) or F16 weights, through the public
 * qmap_quantize (include/qmap.h). */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "json_out.h"
#include "opts.h"
#include "qm_fileio.h"
#include "qm_format.h"
#include "qmap.h"

typedef struct ui { bool tty, quiet; int last_len; } ui;

/* The per-tensor report, kept from qmap_quantize's on_tensor calls (their names live only during a call). */
typedef struct tensor_list {
    qmap_quantize_tensor *items;
    size_t n, cap;
    bool out_of_memory;
} tensor_list;

static void keep_tensor(void *user, const qmap_quantize_tensor *t)
{
    tensor_list *l = user;
    if (l->out_of_memory) return;
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 64;
        qmap_quantize_tensor *items = realloc(l->items, cap * sizeof *items);
        if (!items) { l->out_of_memory = true; return; }
        l->items = items;
        l->cap = cap;
    }
    char *name = strdup(t->name);
    if (!name) { l->out_of_memory = true; return; }
    l->items[l->n] = *t;
    l->items[l->n++].name = name;
}

static void tensor_list_free(tensor_list *l)
{
    for (size_t i = 0; i < l->n; i++) free((char *)l->items[i].name);
    free(l->items);
}

static void on_progress(void *user, const qmap_progress *p)
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

static const char *action_name(qmap_quant_action a)
{
    return a == QMAP_QUANT_QUANTIZED ? "quantized" : a == QMAP_QUANT_KEPT ? "kept" : "copied";
}

static const char *dtype_name(uint32_t d)
{
    const qm_dtype_traits *t = qm_dtype_info(d);
    return t ? t->name : "?";
}

static void report_json(FILE *fp, const char *in, const char *out, qmap_quant_scheme scheme, const qmap_quantize_result *r,
                        const tensor_list *l)
{
    json_out j = { .fp = fp };
    jo_begin_object(&j, NULL);
    jo_cstring(&j, "input", in);
    jo_cstring(&j, "output", out);
    jo_cstring(&j, "scheme", scheme == QMAP_QUANT_Q8_ROW ? "q8_row" : "f16");
    jo_u64(&j, "threads", (uint64_t)r->threads);
    jo_cstring(&j, "kernels", r->kernels ? r->kernels : "");
    jo_f64(&j, "seconds", r->seconds);
    jo_begin_array(&j, "tensors");
    for (size_t i = 0; i < l->n; i++) {
        const qmap_quantize_tensor *t = &l->items[i];
        bool q = t->action == QMAP_QUANT_QUANTIZED;
        jo_begin_object(&j, NULL);
        jo_cstring(&j, "name", t->name);
        jo_cstring(&j, "action", action_name(t->action));
        jo_cstring(&j, "dtype_in", dtype_name(t->dtype_in));
        jo_cstring(&j, "dtype_out", dtype_name(t->dtype_out));
        jo_begin_array(&j, "shape");
        for (uint32_t d = 0; d < t->rank; d++) jo_u64(&j, NULL, t->dims[d]);
        jo_end_array(&j);
        jo_u64(&j, "bytes_in", t->bytes_in);
        jo_u64(&j, "bytes_out", t->bytes_out);
        if (q) {
            jo_f64(&j, "rel_rms_error", t->rel_rms_error);
            jo_f64(&j, "max_abs_error", t->max_abs_error);
            if (scheme == QMAP_QUANT_Q8_ROW) jo_u64(&j, "outlier_rows", t->outlier_rows);
            else jo_null(&j, "outlier_rows");
            jo_u64(&j, "rows", t->rows);
            jo_u64(&j, "panels", t->panels);
        } else {
            jo_null(&j, "rel_rms_error");
            jo_null(&j, "max_abs_error");
            jo_null(&j, "outlier_rows");
            jo_null(&j, "rows");
            jo_null(&j, "panels");
        }
        jo_end_object(&j);
    }
    jo_end_array(&j);
    jo_begin_object(&j, "total");
    jo_u64(&j, "bytes_in", r->bytes_in);
    jo_u64(&j, "bytes_out", r->bytes_out);
    jo_f64(&j, "rel_rms_error", r->rel_rms_error);
    jo_u64(&j, "tensors_quantized", r->n_quantized);
    jo_u64(&j, "tensors_copied", r->n_copied);
    jo_end_object(&j);
    jo_end_object(&j);
    fputc('\n', fp);
}

/* One line on the tensors written in column panels: the FFN down projections, or the others (attention
 * outputs, --shards). */
static void print_panelled(const char *out, const tensor_list *l, bool down, const char *what, const char *note)
{
    uint64_t n_panelled = 0;
    const qmap_quantize_tensor *first = NULL;
    for (size_t i = 0; i < l->n; i++)
        if (l->items[i].panels > 1 && (strstr(l->items[i].name, ".ffn_down.") != NULL) == down && n_panelled++ == 0)
            first = &l->items[i];
    if (first)
        printf("%s: %llu %s written in column panels, e.g. %s as %llu x [%llu, %llu] (%s [%llu, %llu])\n", out,
               (unsigned long long)n_panelled, what, first->name, (unsigned long long)first->dims[0],
               (unsigned long long)first->dims[1], (unsigned long long)first->dims[2], note,
               (unsigned long long)first->dims[1], (unsigned long long)(first->dims[0] * first->dims[2]));
}

static void report_table(const char *out, qmap_quant_scheme scheme, const qmap_quantize_result *r, const tensor_list *l)
{
    size_t w = 4;
    for (size_t i = 0; i < l->n; i++) if (strlen(l->items[i].name) > w) w = strlen(l->items[i].name);
    if (w > 48) w = 48;
    printf("%-*s  %-9s  %-6s  %-6s  %10s  %10s  %10s  %10s  %s\n", (int)w, "name", "action", "in", "out", "bytes in",
           "bytes out", "rel rms", "max abs", scheme == QMAP_QUANT_Q8_ROW ? "outlier rows" : "");
    for (size_t i = 0; i < l->n; i++) {
        const qmap_quantize_tensor *t = &l->items[i];
        char bi[16], bo[16];
        printf("%-*.*s  %-9s  %-6s  %-6s  %10s  %10s", (int)w, (int)w, t->name, action_name(t->action),
               dtype_name(t->dtype_in), dtype_name(t->dtype_out), cli_human_bytes(t->bytes_in, bi, sizeof bi),
               cli_human_bytes(t->bytes_out, bo, sizeof bo));
        if (t->action == QMAP_QUANT_QUANTIZED) {
            printf("  %10.3e  %10.3e", t->rel_rms_error, t->max_abs_error);
            if (scheme == QMAP_QUANT_Q8_ROW) printf("  %llu/%llu", (unsigned long long)t->outlier_rows, (unsigned long long)t->rows);
        }
        printf("\n");
    }
    char bi[16], bo[16];
    printf("%s: %llu tensors quantized to %s, %llu copied; %s -> %s (%.2fx smaller); relative RMS error %.3e; "
           "%.2f s, %d threads, %s kernels\n", out, (unsigned long long)r->n_quantized, scheme == QMAP_QUANT_Q8_ROW ? "Q8_ROW" : "F16",
           (unsigned long long)r->n_copied, cli_human_bytes(r->bytes_in, bi, sizeof bi),
           cli_human_bytes(r->bytes_out, bo, sizeof bo), r->bytes_out ? (double)r->bytes_in / r->bytes_out : 0.0,
           r->rel_rms_error, r->seconds, r->threads, r->kernels ? r->kernels : "?");
    print_panelled(out, l, true, "FFN down projections", "--panel-cols 0 keeps them");
    print_panelled(out, l, false, "attention outputs", "for --shards; without it");
}

/* What the option table writes, before it is checked (quantize_settle). */
typedef struct quantize_args {
    bool q8, f16, json, quiet;
    long threads, shards;
    const char *output, *report, *panel_cols;
    cli_strings keep;
} quantize_args;

static const char QUANTIZE_DESCRIPTION[] =
    "Quantize the weight matrices of a container: every tensor of rank >= 2 whose name ends in\n"
    "\".weight\" (linear, attention and FFN weights, token embeddings, output head), except\n"
    "pos_embd.weight and --keep matches. 1-D tensors (norms, biases) and everything else are copied.\n"
    "Q8_ROW (--q8) is int8 with one f32 scale per row (scale = max|w|/127, round half to even;\n"
    "spec/FORMAT.md 6.1) and takes F32 or F16 weights; F16 (--f16) rounds to nearest even, and a value\n"
    "beyond +-65504 is an error. In decoder LMs, --panel-cols writes each FFN down projection ([dim, ffn])\n"
    "with rows longer than N as column panels of N columns, [ffn/N, dim, N] (N a multiple of 64 dividing\n"
    "ffn; spec/ARCHITECTURES.md 6): a decode reads all of X once per row, and long rows stream slower.\n"
    "Q8_ROW gets a scale per row of each panel. auto cuts Q8_ROW rows past 4096 columns and F16 rows\n"
    "past 2048 (TinyLlama's 5632: 2 panels of 2816 / 4 of 1408; GPT-2's 3072: F16 2 of 1536; Llama 2\n"
    "7B's 11008: 4 of 2752); 0 keeps them as stored.\n"
    "--shards N writes a decoder LM for N tensor-parallel ranks (mpirun -np N qmap-mpi): each attention\n"
    "output ([dim, heads x head_dim]) in N column panels and each FFN down projection in a panel count\n"
    "that is a multiple of N (the smallest at or above --panel-cols's whose width is a multiple of 64;\n"
    "an explicit --panel-cols must give a multiple of N), recorded as quantize.shards. A run on N ranks\n"
    "(or on any count dividing N) then maps only each rank's own panels of them, and scales its int8\n"
    "activations per panel as one process does, so it generates what one process does. An N that gives\n"
    "a panel width that is not a multiple of 64 is refused naming the tensor (dim 256 allows N = 1, 2,\n"
    "4). One process runs such a file too, at one more product per layer.\n";

static const char QUANTIZE_EPILOG[] =
    "The report gives, per tensor, bytes before and after, the relative RMS error ||w - w'|| / ||w||,\n"
    "the largest absolute error and, for Q8_ROW, the rows whose scale is set by one outlier\n"
    "(max|w| > 8 x the row's RMS). In the JSON, a tensor's shape is as written and \"panels\" counts\n"
    "its column panels (1 for none).\n"
    "\n"
    "exit status: 0 written, 1 the input is bad or cannot be quantized, 2 usage error\n";

/* Parse argv into *a, *o and *input (the one positional); 0, 1 (help printed) or 2 (usage). */
static int quantize_parse(int argc, char **argv, quantize_args *a, qmap_quantize_params *o, const char **input)
{
    const cli_opt opts[] = {
        { "q8", 0, CLI_FLAG, &a->q8, NULL, 0, 0, NULL, "Q8_ROW: int8 with one f32 scale per row", false },
        { "f16", 0, CLI_FLAG, &a->f16, NULL, 0, 0, NULL, "IEEE half", false },
        { "output", 'o', CLI_STRING, &a->output, "FILE", 0, 0, NULL, "the container to write (replaced atomically, by rename; an existing FILE that is not a regular file, e.g. a device or a FIFO, is refused)", true },
        { "keep", 0, CLI_STRINGS, &a->keep, "PATTERN", 0, 0, NULL,
          "leave tensors matching this glob as they are (repeatable), e.g. --keep 'output.weight' --keep 'blk.0.*'", false },
        { "report", 0, CLI_STRING, &a->report, "FILE", 0, 0, NULL, "write the per-tensor report as JSON (replaced as -o is)", true },
        { "threads", 0, CLI_INT, &a->threads, "N", 1, 1024, NULL,
          "threads (default: all cores); the output is the same for any N", true },
        { "panel-cols", 0, CLI_STRING, &a->panel_cols, "auto|N|0", 0, 0, NULL,
          "decoder LMs: FFN down projections in column panels of N columns (see above)", false },
        { "shards", 0, CLI_INT, &a->shards, "N", 1, QMAP_QUANTIZE_SHARDS_MAX, NULL,
          "decoder LMs: the layout for N tensor-parallel ranks (qmap-mpi; see above)", true },
        { "quiet", 'q', CLI_FLAG, &a->quiet, NULL, 0, 0, NULL, "no progress and no table", false },
        { "json", 0, CLI_FLAG, &a->json, NULL, 0, 0, NULL, "print the report as JSON instead of the table", false },
    };
    const cli_command cmd = { "quantize", "qmap quantize (--q8 | --f16) IN.qmap -o OUT.qmap [options]", QUANTIZE_DESCRIPTION,
                              opts, sizeof opts / sizeof opts[0], QUANTIZE_EPILOG };
    int first;
    int rc = cli_parse(&cmd, argc, argv, &first);
    if (rc != 0) return rc;
    long n = cli_parse_count(a->panel_cols);
    const char *bad = NULL;
    if (a->q8 == a->f16) bad = a->q8 ? "give --q8 or --f16, not both" : "give --q8 or --f16";
    else if (first >= argc) bad = "no input given";
    else if (first + 1 < argc) bad = "one input only";
    else if (!a->output) bad = "no output given (-o OUT.qmap)";
    else if (strcmp(a->panel_cols, "auto") && !(n == 0 || (n >= 64 && n <= (1L << 30) && n % 64 == 0)))
        bad = "--panel-cols takes auto, 0 or a multiple of 64 (e.g. 2048)";
    if (bad) {
        fprintf(stderr, "qmap quantize: %s\nusage: %s\n", bad, cmd.usage);
        return 2;
    }
    o->scheme = a->q8 ? QMAP_QUANT_Q8_ROW : QMAP_QUANT_F16;
    *input = argv[first];
    o->threads = (int)a->threads;
    o->panel_cols = strcmp(a->panel_cols, "auto") ? (uint64_t)n : QMAP_PANEL_COLS_AUTO;
    o->shards = (uint32_t)a->shards;
    o->keep = (const char *const *)a->keep.items;
    o->n_keep = a->keep.n;
    return 0;
}

/* The error's name is format/'s spelling (QM_ERR_...), as --json has always printed it. */
static void print_failure(bool json, const qmap_error *err)
{
    fprintf(stderr, "qmap quantize: %s\n", err->message);
    if (!json) return;
    json_out j = { .fp = stdout };
    jo_begin_object(&j, NULL);
    jo_bool(&j, "ok", false);
    jo_cstring(&j, "error", qm_status_name((qm_status)err->code));
    jo_cstring(&j, "message", err->message);
    jo_end_object(&j);
    fputc('\n', stdout);
}

/* --report FILE: the JSON report built in memory, then written as every qmap output is (never into a device). */
static int write_report(const char *path, const char *input, const char *output, qmap_quant_scheme scheme,
                        const qmap_quantize_result *r, const tensor_list *l)
{
    char *text = NULL;
    size_t len = 0;
    FILE *fp = open_memstream(&text, &len);
    qm_error e;
    snprintf(e.message, sizeof e.message, "out of memory");
    int rc = 0;
    if (!fp || (report_json(fp, input, output, scheme, r, l), fclose(fp) != 0) ||
        cli_write_file(path, text, len, &e) != QM_OK) {
        fprintf(stderr, "qmap quantize: %s written, but the report could not be: %s\n", output, e.message);
        rc = 1;
    }
    free(text);
    return rc;
}

/* Quantize, then report; the exit status. */
static int quantize_and_report(const quantize_args *a, qmap_quantize_params *o, const char *input)
{
    ui u = { .tty = isatty(2) != 0, .quiet = a->quiet };
    tensor_list l = { 0 };
    o->on_tensor = keep_tensor;
    o->tensor_user = &l;
    qmap_quantize_result r;
    qmap_error err;
    qmap_status st = qmap_quantize(input, a->output, o, on_progress, &u, &r, &err);
    if (u.tty && !u.quiet && u.last_len) fprintf(stderr, "\r%*s\r", u.last_len, "");
    if (st == QMAP_OK && l.out_of_memory) {
        st = err.code = QMAP_ERR_NOMEM;
        snprintf(err.message, sizeof err.message, "%s written, but out of memory for its report", a->output);
    }
    if (st != QMAP_OK) {
        print_failure(a->json, &err);
        tensor_list_free(&l);
        return 1;
    }
    int rc = a->report ? write_report(a->report, input, a->output, o->scheme, &r, &l) : 0;
    if (a->json) report_json(stdout, input, a->output, o->scheme, &r, &l);
    else if (!a->quiet) report_table(a->output, o->scheme, &r, &l);
    tensor_list_free(&l);
    return rc;
}

int cmd_quantize(int argc, char **argv)
{
    quantize_args a = { .panel_cols = "auto" };
    a.keep.items = calloc((size_t)argc, sizeof *a.keep.items);
    a.keep.cap = (size_t)argc;
    if (!a.keep.items) return 1;
    qmap_quantize_params o;
    qmap_quantize_params_default(&o);
    const char *input = NULL;
    int rc = quantize_parse(argc, argv, &a, &o, &input);
    if (rc != 0) {
        free(a.keep.items);
        return rc == 1 ? 0 : 2;
    }
    /* refuse a --report destination that is not a regular file before the work, not after it */
    qm_error err;
    if (a.report && qm_check_destination(a.report, &err) != QM_OK) {
        fprintf(stderr, "qmap quantize: --report: %s\n", err.message);
        free(a.keep.items);
        return 1;
    }
    rc = quantize_and_report(&a, &o, input);
    free(a.keep.items);
    return rc;
}
