/* main.c — the qmap command-line entry point: dispatches to the subcommands. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "qmap.h"
#include "qr_matmul.h"
#include "qm_fileio.h"
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
