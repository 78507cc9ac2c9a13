/* qmap convert — PyTorch exports to a .qmap container, read in C (no Python needed). */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "json_out.h"
#include "qc_arch.h"
#include "qc_convert.h"
#include "qc_json.h"
#include "qm_format.h"

static void help(FILE *fp)
{
    fprintf(fp,
            "usage: qmap convert SRC [SRC...] -o OUT.qmap [options]\n"
            "\n"
            "Convert a PyTorch checkpoint into a .qmap container. The input kind is read from the bytes,\n"
            "not the file name:\n"
            "  - a model directory as the hub ships it: the first of model.safetensors.index.json,\n"
            "    model.safetensors, pytorch_model.bin.index.json, pytorch_model.bin in it\n"
            "  - a raw float32 dump directory (manifest.json + one .bin per tensor; convert/export_torch.py)\n"
            "  - a torch.save file (.pt, .pth, pytorch_model.bin; zip format, torch >= 1.6)\n"
            "  - a safetensors file\n"
            "  - a NumPy .npy or .npz file\n"
            "  - a shard index (model.safetensors.index.json, pytorch_model.bin.index.json), or several\n"
            "    shard files given together\n"
            "Pickles are read by a restricted unpickler that runs no code and accepts only tensors.\n"
            "config.json beside the input gives the hyperparameters; a tokenizer beside it (tokenizer.json,\n"
            "vocab.json + merges.txt, vocab.txt) is stored in the container.\n"
            "\n"
            "  -o, --output FILE   the container to write (replaced atomically; nothing is left on failure)\n"
            "  --config FILE       model config (HF config.json or qmap's keys; see spec/ARCHITECTURES.md)\n"
            "  --arch NAME         architecture: %s (default: from the config or the tensor names)\n"
            "  --dtype f32|f16     element type of the matrices (default f32; with f16, 1-D tensors stay f32)\n"
            "  --tokenizer PATH    tokenizer file or directory (default: look beside the input)\n"
            "  --no-tokenizer      do not store a tokenizer\n"
            "  --src-tokenizer PATH, --tgt-tokenizer PATH\n"
            "                      seq2seq: the source and target vocabularies (stored as tokenizer.src.*\n"
            "                      and tokenizer.tgt.*)\n"
            "  --strict            NaN/Inf in a weight is an error (default: a warning)\n"
            "  --json-limit MIB    size cap for every JSON file read (tokenizer, config, shard index, manifest;\n"
            "                      defaults 64, 4, 16 and 16 MiB); parsing may also use at most 8x the cap\n"
            "  --allow-large       convert even if compressed zip entries inflate more than 32x (beyond 64 MiB)\n"
            "  -q, --quiet         no progress line and no summary\n"
            "  --json              print the summary (or the error) as JSON\n"
            "  -h, --help          this text\n"
            "\n"
            "exit status: 0 written, 1 the input is bad or the conversion failed, 2 usage error\n",
            qc_arch_list());
}

typedef struct ui { bool tty; bool quiet; bool json; int last_len; } ui;

static void on_progress(void *user, const qc_progress *p)
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

int cmd_convert(int argc, char **argv)
{
    qc_convert_opts o = { 0 };
    ui u = { .tty = isatty(2) != 0 };
    const char **inputs = calloc((size_t)argc, sizeof *inputs);
    if (!inputs) return 1;
    size_t n_in = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has_val = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { help(stdout); free(inputs); return 0; }
        else if ((!strcmp(a, "-o") || !strcmp(a, "--output")) && has_val) o.output = argv[++i];
        else if (!strcmp(a, "--config") && has_val) o.config_path = argv[++i];
        else if (!strcmp(a, "--arch") && has_val) o.arch = argv[++i];
        else if (!strcmp(a, "--tokenizer") && has_val) o.tokenizer_path = argv[++i];
        else if (!strcmp(a, "--no-tokenizer")) o.no_tokenizer = true;
        else if (!strcmp(a, "--src-tokenizer") && has_val) o.src_tokenizer_path = argv[++i];
        else if (!strcmp(a, "--tgt-tokenizer") && has_val) o.tgt_tokenizer_path = argv[++i];
        else if (!strcmp(a, "--strict")) o.strict = true;
        else if (!strcmp(a, "--allow-large")) o.allow_large = true;
        else if (!strcmp(a, "--json-limit") && has_val) {
            char *end;
            const char *v = argv[++i];
            unsigned long long m = strtoull(v, &end, 10);
            if (!*v || *end || v[0] == '-' || m == 0 || m > (QC_JSON_MAX_LIMIT >> 20)) {
                fprintf(stderr, "qmap convert: --json-limit takes a size in MiB from 1 to %llu, not '%s'\n",
                        (unsigned long long)(QC_JSON_MAX_LIMIT >> 20), v);
                free(inputs);
                return 2;
            }
            o.json_limit = (uint64_t)m << 20;
        }
        else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) u.quiet = true;
        else if (!strcmp(a, "--json")) u.json = true;
        else if (!strcmp(a, "--dtype") && has_val) {
            const char *d = argv[++i];
            if (!strcmp(d, "f32") || !strcmp(d, "F32")) o.dtype = QM_DTYPE_F32;
            else if (!strcmp(d, "f16") || !strcmp(d, "F16")) o.dtype = QM_DTYPE_F16;
            else {
                fprintf(stderr, "qmap convert: --dtype must be f32 or f16 (int8 comes from 'qmap quantize --q8')\n");
                free(inputs);
                return 2;
            }
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "qmap convert: unknown option or missing value: '%s'\n\n", a);
            help(stderr);
            free(inputs);
            return 2;
        } else inputs[n_in++] = a;
    }
    if (!n_in || !o.output) {
        fprintf(stderr, "qmap convert: %s\n\n", !n_in ? "no input given" : "no output given (-o OUT.qmap)");
        help(stderr);
        free(inputs);
        return 2;
    }
    o.inputs = inputs;
    o.n_inputs = n_in;
    o.on_progress = on_progress;
    o.on_warning = on_warning;
    o.user = &u;
    qc_convert_summary s;
    qm_error err;
    qm_status st = qc_convert(&o, &s, &err);
    clear_progress(&u);
    free(inputs);
    if (u.json) {
        json_out j = { .fp = stdout };
        json_begin_object(&j, NULL);
        json_bool(&j, "ok", st == QM_OK);
        json_cstring(&j, "output", o.output);
        if (st != QM_OK) {
            json_cstring(&j, "error", qm_status_name(err.code));
            json_cstring(&j, "message", err.message);
        } else {
            json_cstring(&j, "architecture", s.arch);
            json_cstring(&j, "input_kind", s.kinds);
            json_cstring(&j, "config", s.config);
            json_cstring(&j, "tokenizer", s.tokenizer);
            json_u64(&j, "input_files", s.n_inputs_files);
            json_u64(&j, "input_bytes", s.in_bytes);
            json_u64(&j, "tensors", s.n_tensors);
            json_u64(&j, "parameters", s.n_params);
            json_u64(&j, "skipped", s.n_skipped);
            json_bool(&j, "tied_output", s.tied_output);
            json_u64(&j, "nonfinite_values", s.n_nonfinite);
            json_u64(&j, "compressed_bytes", s.inflated_from);
            json_u64(&j, "inflated_bytes", s.inflated_to);
            json_u64(&j, "output_bytes", s.out_bytes);
            json_f64(&j, "seconds", s.seconds_total);
            json_f64(&j, "write_seconds", s.seconds_write);
        }
        json_end_object(&j);
        fputc('\n', stdout);
    }
    if (st != QM_OK) {
        fprintf(stderr, "qmap convert: %s\n", err.message);
        return 1;
    }
    if (!u.quiet && !u.json) {
        char in_b[16], out_b[16];
        printf("%s: %s, %llu tensors, %.2fM parameters, %s%s\n", o.output, s.arch, (unsigned long long)s.n_tensors,
               s.n_params / 1e6, cli_human_bytes(s.out_bytes, out_b, sizeof out_b),
               s.tied_output ? " (output head tied to the embedding)" : "");
        printf("  from     %s, %llu file%s, %s\n", s.kinds, (unsigned long long)s.n_inputs_files,
               s.n_inputs_files == 1 ? "" : "s", cli_human_bytes(s.in_bytes, in_b, sizeof in_b));
        printf("  config   %s\n", s.config[0] ? s.config : "(none: hyperparameters from the tensor shapes)");
        printf("  tokenizer %s\n", s.tokenizer[0] ? s.tokenizer : o.no_tokenizer ? "(not stored: --no-tokenizer)" : "(none found)");
        if (s.inflated_from) {
            char a[16], b[16];
            printf("  inflated %s of compressed entries to %s (%.1fx)\n", cli_human_bytes(s.inflated_from, a, sizeof a),
                   cli_human_bytes(s.inflated_to, b, sizeof b), (double)s.inflated_to / (double)s.inflated_from);
        }
        if (s.n_skipped) printf("  skipped  %llu buffer(s) the model does not need\n", (unsigned long long)s.n_skipped);
        if (s.n_nonfinite) printf("  warning  %llu NaN/Inf values copied (see above)\n", (unsigned long long)s.n_nonfinite);
        printf("  time     %.2f s (write %.2f s, %.0f MB/s)\n", s.seconds_total, s.seconds_write,
               s.seconds_write > 0 ? s.out_bytes / s.seconds_write / 1e6 : 0.0);
    }
    return 0;
}
