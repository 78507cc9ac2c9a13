/* test_opts.c — the CLI option table (cli/opts.c): values stored by kind, ranges and choices enforced,
 * missing arguments and unknown flags refused with exit code 2, --help answered with 1, positionals
 * left in order, and the help text generated from the same table. */
#include <stdarg.h>
#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "opts.c"   /* the CLI is not a library: its parser is compiled into the test */

static long n_val;
static float f_val;
static uint64_t u_val;
static const char *s_val;
static int c_val;
static bool flag_val;
static const char *keep_items[4];
static cli_strings keep_val = { keep_items, 0, 4 };
static const char *const choices[] = { "f16", "f32", NULL };
static const cli_opt k_opts[] = {
    { "count", 'n', CLI_INT, &n_val, "N", 0, 100, NULL, "a count", false },
    { "temp", 0, CLI_FLOAT, &f_val, "T", 0, 2, NULL, "a float", false },
    { "seed", 's', CLI_UINT64, &u_val, "S", 0, 1e12, NULL, "a seed", false },
    { "prompt", 'p', CLI_STRING, &s_val, "TEXT", 0, 0, NULL, "a string", true },
    { "kv", 0, CLI_CHOICE, &c_val, "TYPE", 0, 0, choices, "a choice", false },
    { "json", 0, CLI_FLAG, &flag_val, NULL, 0, 0, NULL, "a flag", true },
    { "keep", 0, CLI_STRINGS, &keep_val, "PATTERN", 0, 0, NULL, "a repeatable string (repeatable); its help is long "
      "enough to be wrapped at the help text's width, with every continuation line indented to the help column", false },
};
static const cli_command k_cmd = { "t", "qmap t [options] FILE", "desc\n", k_opts, sizeof k_opts / sizeof k_opts[0], NULL };

static void reset(void)
{
    n_val = 7; f_val = 0.5f; u_val = 3; s_val = NULL; c_val = 0; flag_val = false; keep_val.n = 0;
}

static int parse(int *first, ...)
{
    char *argv[32];
    int argc = 0;
    va_list ap;
    va_start(ap, first);
    for (const char *s; (s = va_arg(ap, const char *));) argv[argc++] = (char *)s;
    va_end(ap);
    argv[argc] = NULL;
    return cli_parse(&k_cmd, argc, argv, first);
}

static void test_values(void **state)
{
    (void)state;
    int first;
    reset();
    assert_int_equal(parse(&first, "t", "-n", "42", "--temp", "1.25", "--seed=99", "-p", "hi there", "--kv", "f32",
                           "--json", "a.qmap", NULL), 0);
    assert_int_equal(n_val, 42);
    assert_true(f_val == 1.25f);
    assert_true(u_val == 99);
    assert_string_equal(s_val, "hi there");
    assert_int_equal(c_val, 1);
    assert_true(flag_val);
    assert_int_equal(first, 11);
    reset();   /* positionals may come first; getopt moves them after the options */
    assert_int_equal(parse(&first, "t", "a.qmap", "-n", "5", NULL), 0);
    assert_int_equal(n_val, 5);
    assert_int_equal(first, 3);
    reset();   /* a repeatable option keeps every use, in order, up to its room */
    assert_int_equal(parse(&first, "t", "--keep", "a*", "x.qmap", "--keep", "b", NULL), 0);
    assert_int_equal(keep_val.n, 2);
    assert_string_equal(keep_items[0], "a*");
    assert_string_equal(keep_items[1], "b");
    reset();
    assert_int_equal(parse(&first, "t", "--keep", "1", "--keep", "2", "--keep", "3", "--keep", "4", "--keep", "5", NULL), 2);
}

static void test_errors(void **state)
{
    (void)state;
    int first;
    static const char *const bad[][4] = {
        { "-n", "101" }, { "-n", "-1" }, { "-n", "4x" }, { "--temp", "nan" }, { "--temp", "3" },
        { "--seed", "-5" }, { "--kv", "q8" }, { "--bogus" }, { "-n" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        reset();
        int rc = bad[i][1] ? parse(&first, "t", bad[i][0], bad[i][1], NULL) : parse(&first, "t", bad[i][0], NULL);
        assert_int_equal(rc, 2);
        assert_int_equal(n_val, 7);       /* a refused value is not stored */
        assert_true(f_val == 0.5f);
        assert_int_equal(c_val, 0);
    }
    reset();
    assert_int_equal(parse(&first, "t", "--help", NULL), 1);
}

static void test_help_text(void **state)
{
    (void)state;
    reset();
    char buf[4096] = { 0 };
    FILE *fp = fmemopen(buf, sizeof buf - 1, "w");
    cli_print_help(&k_cmd, fp);
    fclose(fp);
    assert_non_null(strstr(buf, "usage: qmap t [options] FILE"));
    assert_non_null(strstr(buf, "-n, --count N"));
    assert_non_null(strstr(buf, "(default: 7)"));
    assert_non_null(strstr(buf, "(f16|f32) (default: f16)"));
    assert_non_null(strstr(buf, "--json"));
    assert_null(strstr(buf, "(default: (null))"));
    assert_non_null(strstr(buf, "--keep PATTERN"));
    /* every line within the width; the long help continues on an indented line */
    for (char *line = buf, *end; *line; line = end + 1) {
        end = strchr(line, '\n');
        if (!end) end = line + strlen(line);
        assert_true(end - line <= 110);
        if (!*end) break;
    }
    assert_non_null(strstr(buf, "\n                             "));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_values),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_help_text),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
