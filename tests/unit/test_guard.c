/* test_guard.c — format/qm_guard.h: a read of a mapped file that shrank is caught by the guard covering
 * it, on the thread that read, and reported with its offset; a fault no guard covers still ends the
 * process with SIGBUS; qm_verify on a container truncated after it was opened returns an error instead
 * of dying. Each case makes its own file, maps it, truncates it and reads past the new end, so the fault
 * is certain rather than timed. */
#include <stdarg.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "qm_format.h"
#include "qm_guard.h"
#include "qm_reader.h"
#include "qm_writer.h"
#include "test_util.h"

#define PAGE 4096

typedef struct mapped { char path[TU_PATH_MAX + 16]; int fd; volatile const uint8_t *p; size_t len; } mapped;

/* A file of `pages` pages of 0x5a, mapped, then cut to `keep` pages: reading page `keep` faults. */
static void map_and_cut(mapped *m, const char *name, size_t pages, size_t keep)
{
    char dir[TU_PATH_MAX];
    tu_mkdir(dir, name);
    snprintf(m->path, sizeof m->path, "%s/data.bin", dir);
    m->fd = open(m->path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    assert_true(m->fd >= 0);
    m->len = pages * PAGE;
    uint8_t *buf = malloc(m->len);
    assert_non_null(buf);
    memset(buf, 0x5a, m->len);
    assert_int_equal(write(m->fd, buf, m->len), (ssize_t)m->len);
    free(buf);
    m->p = mmap(NULL, m->len, PROT_READ, MAP_SHARED, m->fd, 0);
    assert_true(m->p != MAP_FAILED);
    assert_int_equal(ftruncate(m->fd, (off_t)(keep * PAGE)), 0);
}

static void unmap(mapped *m)
{
    munmap((void *)m->p, m->len);
    close(m->fd);
    unlink(m->path);
}

static void test_fault_caught_with_offset(void **state)
{
    (void)state;
    mapped m;
    map_and_cut(&m, "guard1", 4, 2);
    qm_guard g;
    volatile int reached_after = 0;
    qm_guard_push(&g, (const void *)m.p, m.len);
    if (sigsetjmp(g.jump, 0)) {
        qm_guard_pop(&g);
        qm_error err;
        assert_int_equal(qm_guard_fail(&g, &err, m.path, (const void *)m.p), QM_ERR_IO);
        assert_non_null(strstr(err.message, "changed while being read"));
        assert_non_null(strstr(err.message, m.path));
        assert_int_equal(err.offset, 2 * PAGE + 100);
        assert_int_equal(reached_after, 0);
        /* the guard is gone and the handler still works: a second guarded read is caught too */
        qm_guard g2;
        qm_guard_push(&g2, (const void *)m.p, m.len);
        if (sigsetjmp(g2.jump, 0)) {
            qm_guard_pop(&g2);
            assert_true(g2.fault == (const void *)(m.p + 3 * PAGE));
            unmap(&m);
            return;
        }
        (void)m.p[3 * PAGE];
        fail_msg("the second read past the end did not fault");
    }
    assert_int_equal(m.p[PAGE], 0x5a);    /* below the new end: readable */
    (void)m.p[2 * PAGE + 100];            /* past it: SIGBUS, caught */
    reached_after = 1;
    fail_msg("the read past the end did not fault");
}

/* Guards nest: a fault outside the inner guard's range goes to the outer one. */
static void test_nested(void **state)
{
    (void)state;
    mapped m;
    map_and_cut(&m, "guard2", 3, 1);
    static const uint8_t other[64];
    qm_guard outer, inner;
    qm_guard_push(&outer, (const void *)m.p, m.len);
    if (sigsetjmp(outer.jump, 0)) {
        qm_guard_pop(&outer);
        assert_true(outer.fault == (const void *)(m.p + 2 * PAGE));
        assert_null(inner.fault);
        unmap(&m);
        return;
    }
    qm_guard_push(&inner, other, sizeof other);
    if (sigsetjmp(inner.jump, 0)) fail_msg("the inner guard took a fault outside its range");
    (void)m.p[2 * PAGE];
    fail_msg("no fault");
}

/* Each thread's fault goes to that thread's guard. */
typedef struct thread_case { mapped m; int caught; } thread_case;

static void *reader(void *arg)
{
    thread_case *tc = arg;
    qm_guard g;
    qm_guard_push(&g, (const void *)tc->m.p, tc->m.len);
    if (sigsetjmp(g.jump, 0)) {
        qm_guard_pop(&g);
        tc->caught = g.fault == (const void *)(tc->m.p + PAGE) ? 1 : -1;
        return NULL;
    }
    for (int i = 0; i < 1000; i++) (void)tc->m.p[i % PAGE];   /* some valid reads first */
    (void)tc->m.p[PAGE];
    qm_guard_pop(&g);
    return NULL;
}

static void test_threads(void **state)
{
    (void)state;
    thread_case tc[2] = { 0 };
    map_and_cut(&tc[0].m, "guard3a", 2, 1);
    map_and_cut(&tc[1].m, "guard3b", 2, 1);
    pthread_t th[2];
    for (int i = 0; i < 2; i++) assert_int_equal(pthread_create(&th[i], NULL, reader, &tc[i]), 0);
    for (int i = 0; i < 2; i++) assert_int_equal(pthread_join(th[i], NULL), 0);
    assert_int_equal(tc[0].caught, 1);
    assert_int_equal(tc[1].caught, 1);
    unmap(&tc[0].m);
    unmap(&tc[1].m);
}

/* A fault no guard covers is not swallowed: the process still dies of SIGBUS (in a child here). */
static void test_unguarded_still_kills(void **state)
{
    (void)state;
    mapped m;
    map_and_cut(&m, "guard4", 2, 1);
    qm_guard g;   /* installs the handler, covering another range */
    static const uint8_t other[64];
    qm_guard_push(&g, other, sizeof other);
    qm_guard_pop(&g);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        /* as in a program with no SIGBUS handler of its own (cmocka installs one for each test) */
        signal(SIGBUS, SIG_DFL);
        qm_guard in_child;
        qm_guard_push(&in_child, other, sizeof other);
        if (sigsetjmp(in_child.jump, 0)) _exit(3);   /* wrong: a guard for other bytes took it */
        (void)m.p[PAGE];
        _exit(4);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), SIGBUS);
    unmap(&m);
}

/* qm_verify over a container cut short after qm_open: an error naming the file, not a SIGBUS. */
static void test_verify_truncated_container(void **state)
{
    (void)state;
    char dir[TU_PATH_MAX], path[TU_PATH_MAX + 32];
    tu_mkdir(dir, "guard5");
    snprintf(path, sizeof path, "%s/m.qmap", dir);
    qm_error err;
    qm_writer *w = NULL;
    assert_int_equal(qm_writer_create(path, NULL, &w, &err), QM_OK);
    uint64_t dims[2] = { 256, 1024 };
    float *row = calloc(1024 * 256, sizeof *row);
    assert_non_null(row);
    for (int t = 0; t < 4; t++) {
        char name[32];
        snprintf(name, sizeof name, "t%d.weight", t);
        assert_int_equal(qm_writer_add_tensor(w, name, QM_DTYPE_F32, 2, dims, &err), QM_OK);
    }
    for (int t = 0; t < 4; t++) assert_int_equal(qm_writer_write(w, row, 1024 * 256 * sizeof *row, &err), QM_OK);
    free(row);
    assert_int_equal(qm_writer_finish(w, &err), QM_OK);
    qm_file *f = NULL;
    assert_int_equal(qm_open(path, &f, &err), QM_OK);
    assert_int_equal(truncate(path, 1 << 20), 0);   /* the last tensors now lie past the end */
    qm_verify_opts vo = { .full = true, .threads = 2 };
    qm_verify_report rep;
    qm_status st = qm_verify(f, &vo, NULL, &rep, &err);
    assert_int_equal(st, QM_ERR_IO);
    assert_non_null(strstr(err.message, "changed while being read"));
    assert_non_null(strstr(err.message, path));
    assert_true(rep.tensors_bad >= 2);
    qm_close(f);
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fault_caught_with_offset),
        cmocka_unit_test(test_nested),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_unguarded_still_kills),
        cmocka_unit_test(test_verify_truncated_container),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
