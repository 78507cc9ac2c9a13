/* replay_main.c — run saved inputs through LLVMFuzzerTestOneInput without libFuzzer.
 *
 * Link with fuzz_reader.c in a build WITHOUT -fsanitize=fuzzer (plain gcc, or clang with
 * -fsanitize=address,undefined) to turn a corpus into a regression test:
 *     fuzz_replay FILE_OR_DIR...
 * Each argument is a file or a directory; a directory's regular files are run, and so are those of its
 * immediate subdirectories (one level). Entries are run in name order, hidden files are skipped.
 * Prints the number of inputs run; exits 1 if none ran (or an argument could not be read), 0 otherwise.
 * A property violation inside the target aborts the process, naming the input last printed with -v.
 */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int g_verbose;
static unsigned long g_ran;
static int g_errors;

static int run_file(const char *path)
{
    FILE *fp = fopen(path, "rb");
    if (fp == NULL) {
        fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
        return -1;
    }
    size_t cap = 4096, len = 0;
    uint8_t *buf = malloc(cap);
    if (buf == NULL) {
        fclose(fp);
        return -1;
    }
    for (;;) {
        if (len == cap) {
            uint8_t *nb = realloc(buf, cap * 2);
            if (nb == NULL) {
                free(buf);
                fclose(fp);
                fprintf(stderr, "replay: %s: out of memory\n", path);
                return -1;
            }
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + len, 1, cap - len, fp);
        len += got;
        if (got == 0)
            break;
    }
    int bad = ferror(fp);
    fclose(fp);
    if (bad) {
        fprintf(stderr, "replay: %s: read error\n", path);
        free(buf);
        return -1;
    }
    if (g_verbose) {
        fprintf(stderr, "replay: %s (%zu bytes)\n", path, len);
        fflush(stderr);
    }
    LLVMFuzzerTestOneInput(buf, len);
    free(buf);
    g_ran++;
    return 0;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* depth 0: a directory named on the command line; its subdirectories are visited at depth 1. */
static void run_dir(const char *dir, int depth)
{
    DIR *d = opendir(dir);
    if (d == NULL) {
        fprintf(stderr, "replay: %s: %s\n", dir, strerror(errno));
        g_errors++;
        return;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            char **nn = realloc(names, cap * sizeof *names);
            if (nn == NULL)
                break;
            names = nn;
        }
        names[n] = strdup(e->d_name);
        if (names[n] != NULL)
            n++;
    }
    closedir(d);
    if (n > 0)
        qsort(names, n, sizeof *names, cmp_names);
    for (size_t i = 0; i < n; i++) {
        size_t plen = strlen(dir) + 1 + strlen(names[i]) + 1;
        char *path = malloc(plen);
        if (path != NULL) {
            snprintf(path, plen, "%s/%s", dir, names[i]);
            struct stat st;
            if (stat(path, &st) == 0) {
                if (S_ISREG(st.st_mode)) {
                    if (run_file(path) != 0)
                        g_errors++;
                } else if (S_ISDIR(st.st_mode) && depth == 0) {
                    run_dir(path, depth + 1);
                }
            }
            free(path);
        }
        free(names[i]);
    }
    free(names);
}

int main(int argc, char **argv)
{
    int first = 1;
    if (argc > 1 && strcmp(argv[1], "-v") == 0) {
        g_verbose = 1;
        first = 2;
    }
    if (first >= argc) {
        fprintf(stderr, "usage: %s [-v] FILE_OR_DIR...\n", argv[0]);
        return 2;
    }
    for (int i = first; i < argc; i++) {
        /* libFuzzer-style flags (-runs=N, ...) are accepted and ignored, so scripts can share arguments. */
        if (argv[i][0] == '-')
            continue;
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
            g_errors++;
            continue;
        }
        if (S_ISDIR(st.st_mode))
            run_dir(argv[i], 0);
        else if (run_file(argv[i]) != 0)
            g_errors++;
    }
    printf("replay: %lu inputs ran\n", g_ran);
    if (g_ran == 0) {
        fprintf(stderr, "replay: no inputs ran\n");
        return 1;
    }
    return g_errors ? 1 : 0;
}
