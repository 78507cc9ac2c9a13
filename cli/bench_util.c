/* bench_util.c — the state and helpers the sections of `qmap bench kernels` share (bench_util.h): the
 * first failure's message, the temporary container and the signal handler that deletes it, and one
 * reading of each baseline. */
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

#include "bench_util.h"

/* Process-level state of this one command (never library code): the message of the first failure, so
 * that deep helpers can fail with one call, and the temporary file the signal handler must delete. */
static char g_error[768];

void set_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_error, sizeof g_error, fmt, ap);
    va_end(ap);
}

const char *bench_error(void) { return g_error; }

void bench_error_clear(void) { g_error[0] = 0; }

void print_reruns(int reruns)
{
    if (reruns > 0) printf(" (%d run%s above %.2f x taken again)", reruns, reruns > 1 ? "s" : "", BM_RATIO_LIMIT);
}

/* The temporary container, deleted by the signal handler if the run is interrupted. */
static char g_tmp_path[4096];
static volatile sig_atomic_t g_tmp_live;

static void on_signal(int sig)
{
    if (g_tmp_live) unlink(g_tmp_path);
    signal(sig, SIG_DFL);
    raise(sig);
}

const char *tmp_path(void) { return g_tmp_live ? g_tmp_path : ""; }

const char *tmp_register(const char *path)
{
    snprintf(g_tmp_path, sizeof g_tmp_path, "%s", path);
    g_tmp_live = 1;
    return g_tmp_path;
}

void tmp_remove(void)
{
    if (g_tmp_live) {
        g_tmp_live = 0;
        unlink(g_tmp_path);
    }
}

static const int g_signals[3] = { SIGINT, SIGTERM, SIGHUP };

void tmp_guard_signals(struct sigaction old[3])
{
    struct sigaction sa = { .sa_handler = on_signal };
    for (int i = 0; i < 3; i++) sigaction(g_signals[i], &sa, &old[i]);
}

void tmp_restore_signals(const struct sigaction old[3])
{
    for (int i = 0; i < 3; i++) sigaction(g_signals[i], &old[i], NULL);
}

/* The baselines of sections 3 and 4, kept for the whole run: each is timed again beside every run of a
 * kernel (a host's bandwidth and clock drift over minutes, so a ratio is only meaningful between
 * measurements taken moments apart). The bandwidth is bench_measure's best of several readers. */
double bandwidth_once(const baseline *b, int threads) { return bm_bandwidth(b->buf, b->len, threads, NULL); }

double peak_once(const baseline *b, bool int8, int threads)
{
    return bm_peak_once(int8 ? BM_PEAK_INT8 : BM_PEAK_FMA, b->peak_iters, threads);
}
