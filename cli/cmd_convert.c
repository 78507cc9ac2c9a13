/* qmap convert — PyTorch exports to a .qmap container, read in C (no Python needed), through the public
 * qmap_convert (include/qmap.h). */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "json_out.h"
#include "opts.h"
#include "qmap.h"

typedef struct ui { bool tty; bool quiet; bool json; int last_len; } ui;

static void on_progress(void *user, const qmap_progress *p)
{
    ui *u = user;
    if (!u->tty || u->quiet) return;
    double rate = p->seconds > 0 ? p->bytes_done / p->seconds : 0;
    double eta = rate > 0 ? (p->bytes_total - p->bytes_done) / rate : 0;
    char done[16], total[16];
    int n = fprintf(stderr, "\rconvert: tensor %llu/%llu  %s of %s  %.0f MB/s  ETA %.0fs   ",
                    (unsigned long long)(p->tensor < p->n_tensors ? p->tensor + 1 : p->n_tensors),
                    (unsigned long long)p->n_tensors, cli_human_bytes(p->bytes_done, done, sizeof done),
                    cli_human_bytes(p->bytes_total, total, sizeof total), rate / 1e6, eta);
    u->last_len = n;
}

static void clear_progress(ui *u)
{
    if (u->tty && !u->quiet && u->last_len) fprintf(stderr, "\r%*s\r", u->last_len, "");
    u->last_len = 0;
}

static void on_warning(void *user, const char *msg)
{
    ui *u = user;
    clear_progress(u);
    fprintf(stderr, "qmap convert: warning: %s\n", msg);
}

/* The summary (or the error) as one JSON object on stdout; the error's name is format/'s spelling
 * (QM_ERR_...), as --json has always printed it. */
static void print_summary_json(const char *output, qmap_status st, const qmap_error *err, const qmap_convert_result *s)
{
    json_out j = { .fp = stdout };
    jo_begin_object(&j, NULL);
    jo_bool(&j, "ok", st == QMAP_OK);
    jo_cstring(&j, "output", output);
    if (st != QMAP_OK) {
        jo_cstring(&j, "error", qm_status_name((qm_status)err->code));
        jo_cstring(&j, "message", err->message);
    } else {
        jo_cstring(&j, "architecture", s->arch);
        jo_cstring(&j, "input_kind", s->input_kind);
        jo_cstring(&j, "config", s->config);
        jo_cstring(&j, "tokenizer", s->tokenizer);
        jo_u64(&j, "input_files", s->input_files);
        jo_u64(&j, "input_bytes", s->input_bytes);
        jo_u64(&j, "tensors", s->n_tensors);
        jo_u64(&j, "parameters", s->n_params);
        jo_u64(&j, "skipped", s->n_skipped);
        jo_bool(&j, "tied_output", s->tied_output);
        jo_u64(&j, "nonfinite_values", s->nonfinite_values);
        jo_u64(&j, "compressed_bytes", s->compressed_bytes);
        jo_u64(&j, "inflated_bytes", s->inflated_bytes);
        jo_u64(&j, "output_bytes", s->output_bytes);
        jo_f64(&j, "seconds", s->seconds);
        jo_f64(&j, "write_seconds", s->write_seconds);
    }
    jo_end_object(&j);
    fputc('\n', stdout);
}

static void print_summary_text(const char *output, bool no_tokenizer, const qmap_convert_result *s)
{
    char in_b[16], out_b[16];
    printf("%s: %s, %llu tensors, %.2fM parameters, %s%s\n", output, s->arch, (unsigned long long)s->n_tensors,
           s->n_params / 1e6, cli_human_bytes(s->output_bytes, out_b, sizeof out_b),
           s->tied_output ? " (output head tied to the embedding)" : "");
    printf("  from     %s, %llu file%s, %s\n", s->input_kind, (unsigned long long)s->input_files,
           s->input_files == 1 ? "" : "s", cli_human_bytes(s->input_bytes, in_b, sizeof in_b));
    printf("  config   %s\n", s->config[0] ? s->config : "(none: hyperparameters from the tensor shapes)");
    printf("  tokenizer %s\n", s->tokenizer[0] ? s->tokenizer : no_tokenizer ? "(not stored: --no-tokenizer)" : "(none found)");
    if (s->compressed_bytes) {
        char a[16], b[16];
        printf("  inflated %s of compressed entries to %s (%.1fx)\n", cli_human_bytes(s->compressed_bytes, a, sizeof a),
               cli_human_bytes(s->inflated_bytes, b, sizeof b), (double)s->inflated_bytes / (double)s->compressed_bytes);
    }
    if (s->n_skipped) printf("  skipped  %llu buffer(s) the model does not need\n", (unsigned long long)s->n_skipped);
    if (s->nonfinite_values) printf("  warning  %llu NaN/Inf values copied (see above)\n", (unsigned long long)s->nonfinite_values);
    printf("  time     %.2f s (write %.2f s, %.0f MB/s)\n", s->seconds, s->write_seconds,
           s->write_seconds > 0 ? s->output_bytes / s->write_seconds / 1e6 : 0.0);
}

int cmd_convert(int argc, char **argv)
{
    qmap_convert_params o;
    qmap_convert_params_default(&o);
    const char *output = NULL;
    ui u = { .tty = isatty(2) != 0 };
    int dtype = 0;
    uint64_t json_limit_mib = 0;
    static const char *const dtypes[] = { "f32", "f16", NULL };
    char arch_help[256];
    snprintf(arch_help, sizeof arch_help, "architecture: %s (default: from the config or the tensor names)",
             qmap_convert_arch_list());
    const cli_opt opts[] = {
        { "output", 'o', CLI_STRING, &output, "FILE",
          0, 0, NULL, "the container to write (replaced atomically, by rename; nothing is left on failure; an existing FILE that is not a regular file, e.g. a device or a FIFO, is refused)", true },
        { "config", 0, CLI_STRING, &o.config_path, "FILE",
          0, 0, NULL, "model config (HF config.json or qmap's keys; see spec/ARCHITECTURES.md)", true },
        { "arch", 0, CLI_STRING, &o.arch, "NAME", 0, 0, NULL, arch_help, true },
        { "dtype", 0, CLI_CHOICE, &dtype, "TYPE", 0, 0, dtypes,
          "element type of the matrices (1-D tensors stay f32; int8 comes from 'qmap quantize --q8')", false },
        { "tokenizer", 0, CLI_STRING, &o.tokenizer_path, "PATH",
          0, 0, NULL, "tokenizer file or directory (default: look beside the input)", true },
        { "no-tokenizer", 0, CLI_FLAG, &o.no_tokenizer, NULL, 0, 0, NULL, "do not store a tokenizer", true },
        { "src-tokenizer", 0, CLI_STRING, &o.src_tokenizer_path, "PATH",
          0, 0, NULL, "seq2seq: the source vocabulary (stored as tokenizer.src.*)", true },
        { "tgt-tokenizer", 0, CLI_STRING, &o.tgt_tokenizer_path, "PATH",
          0, 0, NULL, "seq2seq: the target vocabulary (stored as tokenizer.tgt.*)", true },
        { "strict", 0, CLI_FLAG, &o.strict, NULL, 0, 0, NULL, "NaN/Inf in a weight is an error (default: a warning)", true },
        { "json-limit", 0, CLI_UINT64, &json_limit_mib, "MIB", 1, (double)(QMAP_CONVERT_JSON_LIMIT_MAX >> 20), NULL,
          "size cap for every JSON file read (default 64 MiB for tokenizer files, 4 config, 16 shard index, "
          "16 manifest); parsing may use 8x the cap", true },
        { "allow-large", 0, CLI_FLAG, &o.allow_large, NULL, 0, 0, NULL,
          "convert even if compressed zip entries inflate beyond 64 MiB at more than 32x their size", true },
        { "quiet", 'q', CLI_FLAG, &u.quiet, NULL, 0, 0, NULL, "no progress line and no summary", true },
        { "json", 0, CLI_FLAG, &u.json, NULL, 0, 0, NULL, "print the summary (or the error) as JSON", true },
    };
    const cli_command cmd = {
        .name = "convert",
        .usage = "qmap convert SRC [SRC...] -o OUT.qmap [options]",
        .description =
            "Convert a PyTorch checkpoint into a .qmap container. The input kind is read from the bytes,\n"
            "not the file name:\n"
            "  - a torch.save file (.pt, .pth, pytorch_model.bin; zip format, torch >= 1.6)\n"
            "  - a safetensors file\n"
            "  - a NumPy .npy or .npz file\n"
            "  - a shard index (model.safetensors.index.json, pytorch_model.bin.index.json), or several\n"
            "    shard files given together\n"
            "  - a model directory as the hub ships it: the first of model.safetensors.index.json,\n"
            "    model.safetensors, pytorch_model.bin.index.json, pytorch_model.bin in it\n"
            "  - a raw float32 dump directory (manifest.json + one .bin per tensor; convert/export_torch.py)\n"
            "Pickles are read by a restricted unpickler that runs no code and accepts only tensors.\n"
            "config.json beside the input gives the hyperparameters; a tokenizer beside it (the first of\n"
            "tokenizer.json, SentencePiece's tokenizer.model (BPE), vocab.json + merges.txt, vocab.txt) is\n"
            "stored in the container; --tokenizer FILE.model reads any SentencePiece model file.\n",
        .opts = opts,
        .n_opts = sizeof opts / sizeof opts[0],
        .epilog = "exit status: 0 written, 1 the input is bad or the conversion failed, 2 usage error\n",
    };
    int first;
    int rc = cli_parse(&cmd, argc, argv, &first);
    if (rc) return rc == 1 ? 0 : 2;
    if (first >= argc || !output) {
        fprintf(stderr, "qmap convert: %s\nusage: %s\n", first >= argc ? "no input given" : "no output given (-o OUT.qmap)",
                cmd.usage);
        return 2;
    }
    o.dtype = dtype == 1 ? QMAP_DTYPE_F16 : QMAP_DTYPE_F32;
    o.json_limit = json_limit_mib << 20;
    o.warning = on_warning;
    o.warning_user = &u;
    qmap_convert_result s;
    qmap_error err;
    qmap_status st = qmap_convert((const char *const *)(argv + first), (size_t)(argc - first), output, &o, on_progress,
                                  &u, &s, &err);
    clear_progress(&u);
    if (u.json) print_summary_json(output, st, &err, &s);
    if (st != QMAP_OK) {
        fprintf(stderr, "qmap convert: %s\n", err.message);
        return 1;
    }
    if (!u.quiet && !u.json) print_summary_text(output, o.no_tokenizer, &s);
    return 0;
}
