/* opts.c — the option table parser and help printer of opts.h, over getopt_long. */
#include "opts.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* " (default: …)" from the target's initial value into buf ("" when none is shown). */
static void format_default(const cli_opt *o, char *buf, size_t size)
{
    buf[0] = 0;
    if (o->no_default) return;
    switch (o->kind) {
    case CLI_INT: snprintf(buf, size, " (default: %ld)", *(const long *)o->target); break;
    case CLI_UINT64: snprintf(buf, size, " (default: %llu)", (unsigned long long)*(const uint64_t *)o->target); break;
    case CLI_FLOAT: snprintf(buf, size, " (default: %g)", (double)*(const float *)o->target); break;
    case CLI_STRING:
        if (*(const char *const *)o->target) snprintf(buf, size, " (default: %s)", *(const char *const *)o->target);
        break;
    case CLI_CHOICE: snprintf(buf, size, " (default: %s)", o->choices[*(const int *)o->target]); break;
    case CLI_FLAG:
    case CLI_STRINGS: break;
    }
}

/* An option's help column: its help, its choices and its default. */
static void format_help(const cli_opt *o, char *buf, size_t size)
{
    size_t n = (size_t)snprintf(buf, size, "%s", o->help);
    if (o->kind == CLI_CHOICE)
        for (size_t c = 0; o->choices[c] && n < size; c++)
            n += (size_t)snprintf(buf + n, size - n, "%s%s%s", c ? "|" : " (", o->choices[c], o->choices[c + 1] ? "" : ")");
    if (n < size) format_default(o, buf + n, size - n);
}

enum { HELP_INDENT = 29, HELP_WIDTH = 110 };

/* text from column HELP_INDENT on, wrapped at spaces so that no line passes HELP_WIDTH (a word longer than
 * the column stays whole), continuation lines indented to HELP_INDENT. */
static void print_wrapped(const char *text, FILE *fp)
{
    const size_t room = HELP_WIDTH - HELP_INDENT;
    while (strlen(text) > room) {
        size_t cut = room;
        while (cut > 0 && text[cut] != ' ') cut--;
        if (cut == 0) cut = strcspn(text, " ");
        fprintf(fp, "%.*s\n%*s", (int)cut, text, HELP_INDENT, "");
        text += cut;
        while (*text == ' ') text++;
    }
    fprintf(fp, "%s\n", text);
}

void cli_print_help(const cli_command *cmd, FILE *fp)
{
    fprintf(fp, "usage: %s\n", cmd->usage);
    if (cmd->description) fprintf(fp, "\n%s", cmd->description);
    fprintf(fp, "\noptions:\n");
    for (size_t i = 0; i < cmd->n_opts; i++) {
        const cli_opt *o = &cmd->opts[i];
        char left[64];
        int n = o->short_name ? snprintf(left, sizeof left, "-%c, --%s", o->short_name, o->long_name)
                              : snprintf(left, sizeof left, "    --%s", o->long_name);
        if (o->arg_name && n > 0 && (size_t)n < sizeof left) snprintf(left + n, sizeof left - (size_t)n, " %s", o->arg_name);
        char help[1024];
        format_help(o, help, sizeof help);
        fprintf(fp, "  %-26s ", left);
        print_wrapped(help, fp);
    }
    fprintf(fp, "  %-26s this text\n", "-h, --help");
    if (cmd->epilog) fprintf(fp, "\n%s", cmd->epilog);
}

/* What messages say before cmd->name: "qmap " for qmap's commands ("run", "bench kernels"), nothing for
 * another program's, whose name says it ("qmap-mpi bench"). */
static const char *program_of(const cli_command *cmd)
{
    return strncmp(cmd->name, "qmap-", 5) == 0 ? "" : "qmap ";
}

static int bad_value(const cli_command *cmd, const cli_opt *o, const char *arg, const char *need)
{
    fprintf(stderr, "%s%s: --%s '%s': %s\n", program_of(cmd), cmd->name, o->long_name, arg, need);
    fprintf(stderr, "usage: %s\n", cmd->usage);
    return 2;
}

/* Store the argument of option o; 0 or 2 (usage error, printed). */
static int store(const cli_command *cmd, const cli_opt *o, const char *arg)
{
    char need[128];
    switch (o->kind) {
    case CLI_FLAG: *(bool *)o->target = true; return 0;
    case CLI_STRING: *(const char **)o->target = arg; return 0;
    case CLI_STRINGS: {
        cli_strings *l = o->target;
        if (l->n >= l->cap) return bad_value(cmd, o, arg, "given too many times");
        l->items[l->n++] = arg;
        return 0;
    }
    case CLI_INT:
    case CLI_UINT64: {
        char *end;
        errno = 0;
        if (o->kind == CLI_INT) {
            long v = strtol(arg, &end, 10);
            if (errno || end == arg || *end || (double)v < o->min || (double)v > o->max) break;
            *(long *)o->target = v;
        } else {
            if (arg[0] == '-') break;
            unsigned long long v = strtoull(arg, &end, 10);
            if (errno || end == arg || *end || (double)v < o->min || (double)v > o->max) break;
            *(uint64_t *)o->target = v;
        }
        return 0;
    }
    case CLI_FLOAT: {
        char *end;
        errno = 0;
        float v = strtof(arg, &end);
        if (errno || end == arg || *end || !isfinite(v) || v < o->min || v > o->max) break;
        *(float *)o->target = v;
        return 0;
    }
    case CLI_CHOICE:
        for (int c = 0; o->choices[c]; c++)
            if (!strcmp(arg, o->choices[c])) {
                *(int *)o->target = c;
                return 0;
            }
        {
            size_t n = (size_t)snprintf(need, sizeof need, "must be one of ");
            for (int c = 0; o->choices[c] && n < sizeof need; c++)
                n += (size_t)snprintf(need + n, sizeof need - n, "%s%s", c ? ", " : "", o->choices[c]);
            return bad_value(cmd, o, arg, need);
        }
    }
    if (o->kind == CLI_FLOAT) snprintf(need, sizeof need, "needs a number in [%g, %g]", o->min, o->max);
    else snprintf(need, sizeof need, "needs an integer in [%.0f, %.0f]", o->min, o->max);
    return bad_value(cmd, o, arg, need);
}

int cli_parse(const cli_command *cmd, int argc, char **argv, int *first_arg)
{
    /* getopt tables: one struct option per entry + help + terminator; short options string */
    size_t n = cmd->n_opts;
    struct option *lo = calloc(n + 2, sizeof *lo);
    char *so = malloc(3 * n + 4);
    if (!lo || !so) {
        free(lo);
        free(so);
        fprintf(stderr, "%s%s: out of memory\n", program_of(cmd), cmd->name);
        return 2;
    }
    size_t k = 0;
    so[k++] = ':';  /* a missing argument comes back as ':', told apart from an unknown option */
    for (size_t i = 0; i < n; i++) {
        const cli_opt *o = &cmd->opts[i];
        lo[i].name = o->long_name;
        lo[i].has_arg = o->kind == CLI_FLAG ? no_argument : required_argument;
        lo[i].flag = NULL;
        lo[i].val = 256 + (int)i;
        if (o->short_name) {
            so[k++] = o->short_name;
            if (o->kind != CLI_FLAG) so[k++] = ':';
        }
    }
    lo[n].name = "help";
    lo[n].has_arg = no_argument;
    lo[n].val = 'h';
    so[k++] = 'h';
    so[k] = 0;

    int rc = 0;
    optind = 1;
    opterr = 0;
    for (;;) {
        int li = -1;
        int c = getopt_long(argc, argv, so, lo, &li);
        if (c == -1) break;
        if (c == 'h') {
            cli_print_help(cmd, stdout);
            rc = 1;
            break;
        }
        if (c == '?' || c == ':') {
            const char *what = argv[optind - 1] ? argv[optind - 1] : "?";
            if (c == ':') fprintf(stderr, "%s%s: %s needs an argument\n", program_of(cmd), cmd->name, what);
            else fprintf(stderr, "%s%s: unknown option '%s'\n", program_of(cmd), cmd->name, what);
            fprintf(stderr, "usage: %s\n(%s%s --help lists the options)\n", cmd->usage, program_of(cmd), cmd->name);
            rc = 2;
            break;
        }
        const cli_opt *o = NULL;
        if (c >= 256 && (size_t)(c - 256) < n) o = &cmd->opts[c - 256];
        else
            for (size_t i = 0; i < n; i++)
                if (cmd->opts[i].short_name == c) o = &cmd->opts[i];
        if (!o) { rc = 2; break; }
        if ((rc = store(cmd, o, optarg)) != 0) break;
    }
    free(lo);
    free(so);
    *first_arg = optind;
    return rc;
}
