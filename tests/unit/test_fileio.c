/* test_fileio.c — format/qm_fileio.h (the one way files are opened for reading and replaced by writers)
 * and qm_guard_exit_on_unguarded (issue 43, faults 1, 2, 4, 5, 12), on real FIFOs, directories, symlinks
 * and a truncated mapping.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_util.h"
#include "qm_fileio.h"
#include "qm_guard.h"

static void write_bytes(const char *path, const char *s, size_t n)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, s, n), (ssize_t)n);
    close(fd);
}

static void test_destination_kinds(void **state)
{
    (void)state;
    char d[TU_PATH_MAX], p[TU_PATH_MAX];
    tu_mkdir(d, "dest");
    qm_error e;
    assert_int_equal(qm_check_destination(tu_path(p, "dest/none"), &e), QM_OK);
    write_bytes(tu_path(p, "dest/reg"), "x", 1);
    assert_int_equal(qm_check_destination(p, &e), QM_OK);
    assert_int_equal(symlink("/dev/null", tu_path(p, "dest/link")), 0);
    assert_int_equal(qm_check_destination(p, &e), QM_OK);   /* rename replaces the link, not /dev/null */
    assert_int_equal(mkfifo(tu_path(p, "dest/fifo"), 0644), 0);
    assert_int_equal(qm_check_destination(p, &e), QM_ERR_IO);
    assert_non_null(strstr(e.message, "refusing to replace it: it is a FIFO"));
    assert_int_equal(qm_check_destination(d, &e), QM_ERR_IO);
    assert_non_null(strstr(e.message, "it is a directory"));
}

/* A FIFO destination is refused at create; one that appears between create and commit at commit; either
 * way the FIFO stays and no temporary file is left. A regular destination is replaced. */
static void test_outfile_replaces_only_regular(void **state)
{
    (void)state;
    char d[TU_PATH_MAX], p[TU_PATH_MAX];
    tu_mkdir(d, "out");
    qm_error e;
    qm_outfile o;
    assert_int_equal(mkfifo(tu_path(p, "out/fifo"), 0644), 0);
    assert_int_equal(qm_outfile_create(&o, p, &e), QM_ERR_IO);
    qm_outfile_abort(&o);   /* allowed on a failed create */

    tu_path(p, "out/late");
    assert_int_equal(qm_outfile_create(&o, p, &e), QM_OK);
    assert_int_equal(qm_outfile_write(&o, "new", 3, &e), QM_OK);
    assert_int_equal(mkfifo(p, 0644), 0);
    assert_int_equal(qm_outfile_commit(&o, &e), QM_ERR_IO);
    struct stat st;
    assert_int_equal(lstat(p, &st), 0);
    assert_true(S_ISFIFO(st.st_mode));
    assert_int_equal(tu_dir_count(d), 2);   /* the two FIFOs, no temporary file */

    write_bytes(tu_path(p, "out/reg"), "old", 3);
    assert_int_equal(qm_outfile_create(&o, p, &e), QM_OK);
    assert_int_equal(qm_outfile_write(&o, "new!", 4, &e), QM_OK);
    assert_int_equal(qm_outfile_commit(&o, &e), QM_OK);
    char *got;
    size_t len;
    assert_int_equal(qm_read_file(p, 64, &got, &len, &e), QM_OK);
    assert_int_equal(len, 4);
    assert_memory_equal(got, "new!", 5);   /* NUL-terminated */
    free(got);
    assert_int_equal(tu_dir_count(d), 3);
}

/* The container writer goes through the same check. */
static void test_writer_refuses_fifo(void **state)
{
    (void)state;
    char p[TU_PATH_MAX];
    tu_mkdir(p, "w");
    assert_int_equal(mkfifo(tu_path(p, "w/fifo.qmap"), 0644), 0);
    qm_writer *w = NULL;
    qm_error e;
    assert_int_equal(qm_writer_create(p, NULL, &w, &e), QM_ERR_IO);
    assert_null(w);
    assert_non_null(strstr(e.message, "a FIFO"));
}

static void test_read_file_cap_and_kinds(void **state)
{
    (void)state;
    char p[TU_PATH_MAX];
    tu_mkdir(p, "r");
    qm_error e;
    char *got = (char *)1;
    size_t len;
    write_bytes(tu_path(p, "r/eight"), "12345678", 8);
    assert_int_equal(qm_read_file(p, 8, &got, &len, &e), QM_OK);
    assert_int_equal(len, 8);
    free(got);
    assert_int_equal(qm_read_file(p, 7, &got, &len, &e), QM_ERR_UNSUPPORTED);
    assert_null(got);
    assert_non_null(strstr(e.message, "8 bytes"));
    assert_non_null(strstr(e.message, "cap of 7 bytes"));
    assert_non_null(strstr(e.message, p));
    assert_int_equal(mkfifo(tu_path(p, "r/fifo"), 0644), 0);   /* would block open() without O_NONBLOCK */
    assert_int_equal(qm_read_file(p, 8, &got, &len, &e), QM_ERR_IO);
    assert_non_null(strstr(e.message, "it is a FIFO"));
    assert_int_equal(qm_read_file(tu_path(p, "r"), 8, &got, &len, &e), QM_ERR_IO);
    assert_non_null(strstr(e.message, "it is a directory"));
    assert_int_equal(qm_read_file("/dev/zero", 8, &got, &len, &e), QM_ERR_IO);
    assert_non_null(strstr(e.message, "it is a character device"));
}

/* A read of a truncated mapping outside every guard, once qm_guard_exit_on_unguarded is armed: the message
 * on stderr and the exit status, not SIGBUS. In a child, since it ends the process. */
static void test_exit_on_unguarded_fault(void **state)
{
    (void)state;
    char p[TU_PATH_MAX];
    tu_path(p, "mapped");
    static char page[1 << 16];
    write_bytes(p, page, sizeof page);
    int pipefd[2];
    assert_int_equal(pipe(pipefd), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(pipefd[1], STDERR_FILENO);
        int fd = open(p, O_RDWR);
        volatile const char *m = mmap(NULL, sizeof page, PROT_READ, MAP_SHARED, fd, 0);
        qm_guard_exit_on_unguarded("the model file changed while mapped", 7);
        if (m == MAP_FAILED || ftruncate(fd, 0) != 0) _exit(2);
        char c = m[sizeof page - 1];   /* faults: the page is gone */
        _exit(c == 0 ? 3 : 4);
    }
    close(pipefd[1]);
    char buf[256] = { 0 };
    ssize_t n = read(pipefd[0], buf, sizeof buf - 1);
    close(pipefd[0]);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 7);
    assert_true(n > 0);
    assert_string_equal(buf, "the model file changed while mapped\n");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_destination_kinds),
        cmocka_unit_test(test_outfile_replaces_only_regular),
        cmocka_unit_test(test_writer_refuses_fifo),
        cmocka_unit_test(test_read_file_cap_and_kinds),
        cmocka_unit_test(test_exit_on_unguarded_fault),
    };
    return cmocka_run_group_tests(tests, tu_group_setup, tu_group_teardown);
}
