/* opts.h — one option table per command: each flag declared once (names, kind, target, range, help),
 * feeding both getopt_long and the generated --help text, so a command's flags and its help cannot drift.
 *
 * A command fills its targets with their defaults, then calls cli_parse(). Values are checked against
 * the stated kind and range before anything is stored; an error prints one line naming the flag and what
 * it needs, then the usage line. Memory: cli_parse allocates the getopt tables and frees them before it
 * returns. Help lines longer than the terminal's usual width are wrapped.
 */
#ifndef QM_CLI_OPTS_H
#define QM_CLI_OPTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum cli_opt_kind {
    CLI_FLAG,      /* bool *target set to true */
    CLI_INT,       /* long *target, in [min, max] */
    CLI_UINT64,    /* uint64_t *target, in [min, max] (as doubles: exact up to 2^53) */
    CLI_FLOAT,     /* float *target, in [min, max], finite */
    CLI_STRING,    /* const char **target (points into argv) */
    CLI_CHOICE,    /* int *target = index of the argument in `choices` (NULL-terminated) */
    CLI_STRINGS,   /* cli_strings *target: repeatable, each use appends its argument (pointing into argv) */
} cli_opt_kind;

/* The arguments of a repeatable option, in order. The caller provides `items` with room for `cap` (argc
 * always suffices); a use past cap is a usage error. */
typedef struct cli_strings {
    const char **items;
    size_t n, cap;
} cli_strings;

typedef struct cli_opt {
    const char *long_name;        /* "top-k" for --top-k */
    char short_name;              /* 'n' for -n, or 0 */
    cli_opt_kind kind;
    void *target;
    const char *arg_name;         /* "N", "TEXT" (shown in help); NULL for flags */
    double min, max;              /* CLI_INT / CLI_UINT64 / CLI_FLOAT */
    const char *const *choices;   /* CLI_CHOICE */
    const char *help;             /* one line; the default is appended from the target's initial value */
    bool no_default;              /* do not print "(default: …)" */
} cli_opt;

typedef struct cli_command {
    const char *name;             /* "run" → messages say "qmap run: …"; another program's command names
                                   * it and is said as it is ("qmap-mpi bench") */
    const char *usage;            /* "qmap run MODEL.qmap (-p TEXT | -f FILE | --tokens IDS) [options]" */
    const char *description;      /* paragraphs printed after the usage line */
    const cli_opt *opts;
    size_t n_opts;
    const char *epilog;           /* printed after the options (exit status, notes) */
} cli_command;

/* Parse argv (argv[0] is the command name). On success returns 0 and sets *first_arg to the index of the
 * first positional argument (positionals are argv[*first_arg .. argc)). --help / -h prints the help to
 * stdout and returns 1 (the command exits 0). A usage error prints one line to stderr and returns 2. */
int cli_parse(const cli_command *cmd, int argc, char **argv, int *first_arg);

/* The help text: usage, description, every option with its argument, help and default, epilog. */
void cli_print_help(const cli_command *cmd, FILE *fp);

#endif /* QM_CLI_OPTS_H */
