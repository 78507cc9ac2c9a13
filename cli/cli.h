/* cli.h — what the subcommands share: entry points and small formatting helpers. */
#ifndef QM_CLI_H
#define QM_CLI_H

#include <stdint.h>
#include <stdio.h>

#include "qm_version.h"

/* Each subcommand gets argv after the command name (argv[0] is the command) and returns the exit code:
 * 0 success, 1 the file is bad or the work failed, 2 usage error. */
int cmd_inspect(int argc, char **argv);
int cmd_verify(int argc, char **argv);
int cmd_convert(int argc, char **argv);
int cmd_quantize(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_run(int argc, char **argv);
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
/* The whole file at path in a malloc'd buffer (*len bytes; not NUL-terminated), or NULL with errno set. */
char *cli_read_file(const char *path, size_t *len);
/* Parse a non-negative integer argument; -1 if it is not one. */
long cli_parse_count(const char *s);

#endif
