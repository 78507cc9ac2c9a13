/* qm_guard.h — a mapped file that shrinks while it is read becomes an error, not a SIGBUS.
 *
 * Reading a page of a MAP_SHARED/MAP_PRIVATE file mapping that lies past the file's current end raises
 * SIGBUS, and a file can shrink under a reader at any time (`truncate`, `cp` over it in place, a download
 * restarted). Every pass over mapped bytes that could outlive such a change is wrapped in a guard:
 *
 *     qm_guard g;
 *     qm_guard_push(&g, base, len);           // the bytes this pass reads (NULL, 0: any address)
 *     if (sigsetjmp(g.jump, 0)) {             // reached again, from the handler, if a read faulted
 *         qm_guard_pop(&g);
 *         return qm_guard_fail(&g, err, path);    // "PATH changed while being read …"
 *     }
 *     … read base[0 .. len) …
 *     qm_guard_pop(&g);
 *
 * sigsetjmp must be called by the function that owns the pass (it cannot be wrapped in a helper that
 * returns), and in the plain `if (sigsetjmp(…))` form C allows. Locals changed between push and a fault
 * and read in the fault branch must be volatile. A guard lives on the stack of the thread that reads;
 * guards nest (an inner pass inside an outer one); each thread of a parallel loop pushes its own, and the
 * jump never leaves the thread's own iteration (never out of an OpenMP construct).
 *
 * The SIGBUS handler is installed by the first push, and again by any push that finds another handler in
 * its place (a test harness or an embedding program that set its own later), with SA_NODEFER so that
 * sigsetjmp need not save the signal mask. A push costs one sigaction query (well under a microsecond),
 * so guards go around passes over whole tensors, not around single reads. A SIGBUS that no guard of the
 * faulting thread covers goes to the handler that was in place before qmap's, or, if that was the default,
 * ends the process as it would have without qmap, unless qm_guard_exit_on_unguarded asked for a message and
 * an exit status instead. That saved handler and that message (written under a mutex) and each thread's
 * innermost guard (thread-local) are the only state here.
 */
#ifndef QM_GUARD_H
#define QM_GUARD_H

#include <setjmp.h>
#include <stddef.h>

#include "qm_error.h"

typedef struct qm_guard {
    sigjmp_buf jump;                 /* set by the caller's sigsetjmp(g.jump, 0) */
    const unsigned char *lo, *hi;    /* the guarded address range [lo, hi); lo NULL: any address */
    const void *volatile fault;      /* the address that faulted, once the handler has jumped */
    struct qm_guard *prev;           /* the guard this one is nested in, on the same thread */
} qm_guard;

/* Start guarding reads of [base, base + len) by this thread (base NULL and len 0: any address). Installs
 * the handler if it is not in place; if that fails (it cannot on Linux for SIGBUS), a fault kills the
 * process as before. */
void qm_guard_push(qm_guard *g, const void *base, size_t len);

/* Stop guarding: pops `g` and every guard nested inside it. Call it on both paths. */
void qm_guard_pop(qm_guard *g);

/* Fill err for a faulted guard: QM_ERR_IO, "changed while being read (it is now shorter than when it was
 * opened: truncated, or overwritten in place?)", naming `path` and the faulting offset from `base` (the
 * start of the file's mapping; NULL: no offset). Returns QM_ERR_IO. */
qm_status qm_guard_fail(const qm_guard *g, qm_error *err, const char *path, const void *base);

/* For a SIGBUS that no guard covers (a read of a mapping on any thread, outside every guard): instead of
 * ending by the signal (or chaining to the handler that was in place before qmap's), write `message` (up to
 * QM_GUARD_EXIT_MESSAGE_MAX bytes are kept; a newline is added) to standard error and _exit(exit_status).
 * For programs that map files for their whole run (the runtime's models), where a fault deep inside a
 * parallel kernel cannot be unwound into an error. Installs the handler; call it before the mappings are
 * read (calling again replaces the message and status). */
#define QM_GUARD_EXIT_MESSAGE_MAX 1024
void qm_guard_exit_on_unguarded(const char *message, int exit_status);

/* For reads through a descriptor (read, or write() from a mapping) rather than by loads from the mapping,
 * which see a shrunk file as a short read or EFAULT instead of a fault: if `st` is an error and the file behind `fd` is now smaller than
 * `was` bytes, replace err with the message of qm_guard_fail naming `path`; otherwise leave both as they
 * are. Returns the status to pass on. */
qm_status qm_guard_check_shrunk(qm_status st, int fd, uint64_t was, const char *path, qm_error *err);

#endif /* QM_GUARD_H */
