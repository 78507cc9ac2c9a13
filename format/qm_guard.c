/* qm_guard.c — SIGBUS from a shrunk file mapping turned into an error (see qm_guard.h). */
#include "qm_guard.h"

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The innermost guard of each thread. Thread-local because a fault is taken by the thread that read. */
static _Thread_local qm_guard *innermost;

/* The handler that was in place before qmap's, to chain to. Written only under `lock`, by a push that
 * finds qmap's handler missing (first use, or someone installed another since). */
static struct sigaction previous;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/* qm_guard_exit_on_unguarded's message and status, written under `lock` before the handler can read them
 * (the handler reads them only once exit_armed is set, after the write). */
static char exit_message[QM_GUARD_EXIT_MESSAGE_MAX + 2];
static size_t exit_message_len;
static int exit_status_code;
static volatile sig_atomic_t exit_armed;

static void exit_unguarded(void)
{
    ssize_t w = write(STDERR_FILENO, exit_message, exit_message_len);
    (void)w;   /* nothing to do if stderr is gone: the exit status still says it */
    _exit(exit_status_code);
}

static void on_sigbus(int sig, siginfo_t *info, void *context)
{
    const unsigned char *addr = info ? (const unsigned char *)info->si_addr : NULL;
    for (qm_guard *g = innermost; g; g = g->prev) {
        if (!g->lo || (addr >= g->lo && addr < g->hi)) {
            g->fault = addr;
            siglongjmp(g->jump, 1);
        }
    }
    if (exit_armed) exit_unguarded();
    /* Not a read we guard: behave as if qmap had installed nothing. */
    if ((previous.sa_flags & SA_SIGINFO) && previous.sa_sigaction) {
        previous.sa_sigaction(sig, info, context);
    } else if (!(previous.sa_flags & SA_SIGINFO) && previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) {
        previous.sa_handler(sig);
    } else {
        /* Returning re-executes the faulting access, which now meets the default action and ends the
         * process with SIGBUS, as without qmap. */
        signal(SIGBUS, SIG_DFL);
    }
}

static bool handler_is_ours(void)
{
    struct sigaction cur;
    return sigaction(SIGBUS, NULL, &cur) == 0 && (cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == on_sigbus;
}

/* (Re)install the handler if another one is in place; that one becomes the one chained to. */
static void ensure_installed(void)
{
    if (handler_is_ours()) return;
    pthread_mutex_lock(&lock);
    if (!handler_is_ours()) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_sigbus;
        sa.sa_flags = SA_SIGINFO | SA_NODEFER;   /* not blocked in the handler: sigsetjmp(…, 0) suffices */
        sigemptyset(&sa.sa_mask);
        sigaction(SIGBUS, &sa, &previous);
    }
    pthread_mutex_unlock(&lock);
}

void qm_guard_push(qm_guard *g, const void *base, size_t len)
{
    ensure_installed();
    g->lo = base;
    g->hi = base ? (const unsigned char *)base + len : NULL;
    g->fault = NULL;
    g->prev = innermost;
    innermost = g;
}

void qm_guard_pop(qm_guard *g)
{
    innermost = g->prev;   /* also drops guards nested in g that a jump went past */
}

void qm_guard_exit_on_unguarded(const char *message, int exit_status)
{
    pthread_mutex_lock(&lock);
    exit_armed = 0;
    size_t n = strnlen(message ? message : "", QM_GUARD_EXIT_MESSAGE_MAX);
    memcpy(exit_message, message ? message : "", n);
    exit_message[n] = '\n';
    exit_message_len = n + 1;
    exit_status_code = exit_status;
    exit_armed = 1;
    pthread_mutex_unlock(&lock);
    ensure_installed();
}

#define CHANGED_MESSAGE "the file changed while being read (it is now shorter than when it was opened: truncated, or " \
                        "overwritten in place?)"

qm_status qm_guard_check_shrunk(qm_status st, int fd, uint64_t was, const char *path, qm_error *err)
{
    struct stat sb;
    if (st == QM_OK || fd < 0 || fstat(fd, &sb) != 0 || (uint64_t)sb.st_size >= was) return st;
    return qm_fail(err, QM_ERR_IO, path, NULL, (uint64_t)sb.st_size, CHANGED_MESSAGE);
}

qm_status qm_guard_fail(const qm_guard *g, qm_error *err, const char *path, const void *base)
{
    const unsigned char *f = g->fault;
    uint64_t off = base && f && f >= (const unsigned char *)base ? (uint64_t)(f - (const unsigned char *)base)
                                                                 : QM_NO_OFFSET;
    return qm_fail(err, QM_ERR_IO, path, NULL, off, CHANGED_MESSAGE);
}
