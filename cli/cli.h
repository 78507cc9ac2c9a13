/* cli.h — what the subcommands share: entry points and small formatting helpers. */
#ifndef QM_CLI_H
#define QM_CLI_H

#include <stdint.h>
#include <stdio.h>

#include "qm_error.h"
#include "qm_version.h"
#include "qmap.h"

/* Each subcommand gets argv after the command name (argv[0] is the command) and returns the exit code:
 * 0 success, 1 the file is bad or the work failed, 2 usage error. */
int cmd_inspect(int argc, char **argv);
int cmd_verify(int argc, char **argv);
int cmd_convert(int argc, char **argv);
int cmd_quantize(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_run(int argc, char **argv);
/* cmd_run / cmd_perplexity as one rank of a tensor-parallel run (mpi/qmap_mpi.c): the model opened with
 * this shard (and without large_pages, so that the rank maps only the pages of its part). */
int cmd_run_shard(int argc, char **argv, const qmap_shard *shard);
int cmd_perplexity_shard(int argc, char **argv, const qmap_shard *shard);
int cmd_tokenize(int argc, char **argv);
int cmd_perplexity(int argc, char **argv);
int cmd_serve(int argc, char **argv);

/* The --kv and --act choices of the commands that run a model (run, perplexity, bench MODEL), NULL-
 * terminated for CLI_CHOICE: the index of a choice is the qmap.h enum value (qmap_kv_type, qmap_act_mode;
 * main.c checks that they agree). */
extern const char *const cli_kv_choices[];
extern const char *const cli_act_choices[];

/* "1.50 GB" style, decimal units. buf of ≥ 16 bytes. */
const char *cli_human_bytes(uint64_t n, char *buf, size_t size);
/* The cap on a text read whole (-f of run, tokenize, perplexity; seq2seq's -f): 1 GiB, ten times the
 * largest corpus qmap is measured on, small enough that a mistaken -f /dev/zero-like input cannot take the
 * machine's memory. Said in each command's --help. */
#define CLI_TEXT_MAX (1ull << 30)
#define CLI_TEXT_MAX_HELP "regular files of at most 1 GiB"
/* The whole regular file at path (at most CLI_TEXT_MAX bytes) in a malloc'd buffer of *len bytes plus a
 * NUL, or NULL with err filled (naming the file: a FIFO, device or directory, its size over the cap, or the
 * system's reason). */
char *cli_read_text(const char *path, size_t *len, qm_error *err);
/* Replace the file at path with len bytes of buf as every qmap writer does (qm_outfile: a temporary file
 * created exclusively, fsynced, renamed; a destination that is not a regular file is refused). */
qm_status cli_write_file(const char *path, const void *buf, size_t len, qm_error *err);
/* Before a command reads a model: a model file truncated or overwritten in place while it is mapped ends
 * the process with "CMD: PATH: the model file changed while mapped; replace files with rename, as qmap's
 * writers do" and exit status 1 instead of death by SIGBUS (qmap_exit_on_mapped_file_change). */
void cli_exit_on_model_change(const char *cmd, const char *path);
/* Parse a non-negative integer argument; -1 if it is not one. */
long cli_parse_count(const char *s);

#endif
