/* main.c — the qmap command-line entry point: dispatches to the subcommands. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "qmap.h"
#include "qr_matmul.h"
#include "qm_reader.h"

static const struct {
    const char *name;
    int (*run)(int, char **);
    const char *summary;
} commands[] = {
    { "bench", cmd_bench, "measure the matmul kernels against memory bandwidth and instruction peak" },
    { "convert", cmd_convert, "PyTorch checkpoint (torch.save, safetensors, npz, raw dump) -> .qmap" },
    { "inspect", cmd_inspect, "print a container's header, metadata and tensor table (--json for scripts)" },
    { "perplexity", cmd_perplexity, "perplexity of an LM over a text, and KL divergence from a base model" },
    { "quantize", cmd_quantize, "weight matrices to Q8_ROW (int8, per-row scales) or F16" },
    { "run", cmd_run, "run a model read in place: generate text (LMs), classify rows (mlp), translate (seq2seq)" },
    { "serve", cmd_serve, "an OpenAI-compatible HTTP server over an LM: completions, chat, streaming, batching" },
    { "tokenize", cmd_tokenize, "text -> token ids with the container's tokenizer (--json for scripts)" },
    { "verify", cmd_verify, "check every tensor checksum; exit 1 if any tensor is damaged" },
};
#define N_COMMANDS (sizeof commands / sizeof commands[0])

static void usage(FILE *fp)
{
    fprintf(fp,
            "usage: qmap <command> [options] ARGS\n"
            "\n"
            "qmap stores PyTorch models in a versioned, aligned, checksummed container (.qmap) and\n"
            "reads it zero-copy through one memory mapping.\n"
            "\n"
            "commands:\n");
    for (size_t i = 0; i < N_COMMANDS; i++) fprintf(fp, "  %-11s %s\n", commands[i].name, commands[i].summary);
    fprintf(fp,
            "\n"
            "Run 'qmap <command> --help' for a command's options.\n"
            "\n"
            "options:\n"
            "  -h, --help     this text\n"
            "  --version      print the tool and format versions\n");
}

const char *const cli_kv_choices[] = { "f16", "f32", NULL };
const char *const cli_act_choices[] = { "auto", "int8", "f32", "int8x2", "precise", NULL };
_Static_assert(QMAP_KV_F16 == 0 && QMAP_KV_F32 == 1, "cli_kv_choices lists qmap_kv_type in order");
_Static_assert(QMAP_ACT_AUTO == 0 && QMAP_ACT_INT8 == 1 && QMAP_ACT_F32 == 2 && QMAP_ACT_INT8X2 == 3 &&
                   QMAP_ACT_PRECISE == 4,
               "cli_act_choices lists qmap_act_mode in order");

const char *cli_human_bytes(uint64_t n, char *buf, size_t size)
{
    static const char *units[] = { "B", "kB", "MB", "GB", "TB" };
    double v = (double)n;
    int u = 0;
    while (v >= 1000 && u < 4) { v /= 1000; u++; }
    if (u == 0) snprintf(buf, size, "%llu B", (unsigned long long)n);
    else snprintf(buf, size, "%.2f %s", v, units[u]);
    return buf;
}

char *cli_read_file(const char *path, size_t *len)
{
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n, fp);
        if (n < cap) break;
        char *nb = cap > ((size_t)1 << 31) ? NULL : realloc(buf, cap *= 2);
        if (!nb) { free(buf); buf = NULL; errno = EFBIG; }
        else buf = nb;
    }
    if (buf && ferror(fp)) { free(buf); buf = NULL; errno = EIO; }
    fclose(fp);
    *len = n;
    return buf;
}

long cli_parse_count(const char *s)
{
    if (!s || !*s) return -1;
    char *end;
    long v = strtol(s, &end, 10);
    return (*end || v < 0) ? -1 : v;
}

int main(int argc, char **argv)
{
    if (argc < 2) { usage(stderr); return 2; }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) { usage(stdout); return 0; }
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "version")) {
        printf("qmap %s (container format %d.%d, checksum kernel %s, matmul kernels %s)\n", QMAP_VERSION,
               QM_MAJOR_VERSION, QM_MINOR_VERSION, qm_checksum_impl(), qr_kernels_name(qr_kernels_get()));
        return 0;
    }
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (!strcmp(cmd, commands[i].name)) return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "qmap: unknown command '%s'\n\n", cmd);
    usage(stderr);
    return 2;
}
