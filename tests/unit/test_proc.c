/*
 * test_proc.c - child processes: capture, exit status, signals, stdin,
 * environment, cwd, exec failures, caps, timeouts, process-group cleanup
 * and the fds a child inherits.
 */
#include "test.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/limits.h"
#include "core/proc.h"

#define ARGV(...) ((const char *const[]){__VA_ARGS__, NULL})

/* Run argv with default options plus the given ones; returns proc_run's code. */
static int run(struct proc_opts *o, struct proc_result *r, struct ca_err *err)
{
    proc_result_init(r);
    return proc_run(o, r, err);
}

TEST(echo_capture)
{
    struct proc_opts o = {.argv = ARGV("echo", "hello", "world")};
    struct proc_result r;
    struct ca_err err = {0};
    CHECK_EQ(run(&o, &r, &err), 0);
    CHECK_STR(r.out.data, "hello world\n");
    CHECK_EQ(r.err.len, 0);
    CHECK(proc_ok(&r));
    CHECK(!r.out_truncated && !r.timed_out && !r.signaled);
    CHECK(r.pid > 0);
    CHECK(r.elapsed_us > 0);
    struct buf d;
    buf_init(&d, 128);
    CHECK_EQ(proc_describe(&r, 0, &d), 0);
    CHECK_STR(d.data, "exit 0");
    buf_release(&d);
    proc_result_release(&r);
}

TEST(exit_code_and_stderr)
{
    struct proc_opts o = {.argv = ARGV("sh", "-c", "echo out; echo oops >&2; exit 3")};
    struct proc_result r;
    struct ca_err err = {0};
    CHECK_EQ(run(&o, &r, &err), 0);
    CHECK_EQ(r.exit_code, 3);
    CHECK(!r.signaled);
    CHECK(!proc_ok(&r));
    CHECK_STR(r.out.data, "out\n");
    CHECK_STR(r.err.data, "oops\n");
    struct buf d;
    buf_init(&d, 128);
    CHECK_EQ(proc_describe(&r, 0, &d), 0);
    CHECK_STR(d.data, "exit 3");
    buf_release(&d);

    /* The result is reusable: a second run resets it. */
    struct proc_opts o2 = {.argv = ARGV("true")};
    CHECK_EQ(proc_run(&o2, &r, &err), 0);
    CHECK_EQ(r.exit_code, 0);
    CHECK_EQ(r.out.len, 0);
    CHECK_EQ(r.err.len, 0);
    proc_result_release(&r);
}

TEST(merge_stderr)
{
    struct proc_opts o = {.argv = ARGV("sh", "-c", "echo a; echo b >&2"), .merge_stderr = true};
    struct proc_result r;
    struct ca_err err = {0};
    CHECK_EQ(run(&o, &r, &err), 0);
    CHECK_CONTAINS(r.out.data, "a\n");
    CHECK_CONTAINS(r.out.data, "b\n");
    CHECK_EQ(r.err.len, 0);
    proc_result_release(&r);
}

TEST(killed_by_signal)
{
    struct proc_opts o = {.argv = ARGV("sh", "-c", "kill -SEGV $$")};
    struct proc_result r;
    struct ca_err err = {0};
    CHECK_EQ(run(&o, &r, &err), 0);
    CHECK(r.signaled);
    CHECK_EQ(r.term_signal, SIGSEGV);
    CHECK(!proc_ok(&r));
    struct buf d;
    buf_init(&d, 128);
    CHECK_EQ(proc_describe(&r, 0, &d), 0);
    CHECK_STR(d.data, "killed by SIGSEGV");
    buf_release(&d);
    proc_result_release(&r);
}

TEST(stdin_round_trip)
{
    struct proc_opts o = {.argv = ARGV("cat"), .stdin_data = "ping\n", .stdin_len = 5};
    struct proc_result r;
    struct ca_err err = {0};
    CHECK_EQ(run(&o, &r, &err), 0);
    CHECK_STR(r.out.data, "ping\n");
    proc_result_release(&r);

    /* Empty stdin_data: a pipe that is closed at once. */
    struct proc_opts e = {.argv = ARGV("wc", "-c"), .stdin_data = "", .stdin_len = 0};
    CHECK_EQ(run(&e, &r, &err), 0);
    CHECK_STR(r.out.data, "0\n");
    proc_result_release(&r);

    /* No stdin_data: /dev/null. */
    struct proc_opts n = {.argv = ARGV("wc", "-c")};
    CHECK_EQ(run(&n, &r, &err), 0);
    CHECK_STR(r.out.data, "0\n");
    proc_result_release(&r);
}

TEST(stdin_one_mib_through_cat)
{
    size_t len = CA_MIB;
    char *data = malloc(len);
    REQUIRE(data);
    for (size_t i = 0; i < len; i++)
        data[i] = (char)(i * 131 + (i >> 12));
    struct proc_opts o = {
        .argv = ARGV("cat"), .stdin_data = data, .stdin_len = len, .out_max = 2 * CA_MIB};
    struct proc_result r;
    struct ca_err err = {0};
    CHECK_EQ(run(&o, &r, &err), 0);
    CHECK(proc_ok(&r));
    CHECK_EQ(r.out.len, len);
    CHECK(r.out.len == len && memcmp(r.out.data, data, len) == 0);
    CHECK(!r.out_truncated);
    proc_result_release(&r);
    free(data);
}

TEST(stdin_to_child_that_does_not_read)
{
    /* The write end meets EPIPE; we must neither die of SIGPIPE nor leave it pending. */
    signal(SIGPIPE, SIG_DFL);
    size_t len = 4 * CA_MIB;
    char *data = calloc(1, len);
    REQUIRE(data);
    struct proc_opts o = {.argv = ARGV("true"), .stdin_data = data, .stdin_len = len};
    struct proc_result r;
    struct ca_err err = {0};
    CHECK_EQ(run(&o, &r, &err), 0);
    CHECK(proc_ok(&r));
    sigset_t pending;
    REQUIRE(sigpending(&pending) == 0);
    CHECK(!sigismember(&pending, SIGPIPE));
    sigset_t mask;
    REQUIRE(pthread_sigmask(SIG_SETMASK, NULL, &mask) == 0);
    CHECK(!sigismember(&mask, SIGPIPE)); /* mask restored */
    proc_result_release(&r);
    free(data);
}

TEST(env_is_explicit)
{
    const char *const env[] = {"FOO=bar baz", "PATH=/usr/bin:/bin", NULL};
    struct proc_opts o = {.argv = ARGV("sh", "-c", "echo \"$FOO\"; echo ${HOME-unset}"),
                          .env = env};
    struct proc_result r;
    struct ca_err err = {0};
    CHECK_EQ(run(&o, &r, &err), 0);
    CHECK_STR(r.out.data, "bar baz\nunset\n");
    proc_result_release(&r);

    /* NULL env: inherited. */
    setenv("CA_TEST_VAR", "inherited", 1);
    struct proc_opts i = {.argv = ARGV("sh", "-c", "echo $CA_TEST_VAR")};
    CHECK_EQ(run(&i, &r, &err), 0);
    CHECK_STR(r.out.data, "inherited\n");
    proc_result_release(&r);
}

TEST(path_lookup_uses_child_path)
{
    /* A program only on the PATH given in env is found. */
    char dir[4096], prog[4200];
    snprintf(dir, sizeof(dir), "%s/bin", test_tmpdir());
    REQUIRE(mkdir(dir, 0755) == 0);
    snprintf(prog, sizeof(prog), "%s/ca-hello", dir);
    FILE *f = fopen(prog, "w");
    REQUIRE(f);
    fputs("#!/bin/sh\necho from-script\n", f);
    REQUIRE(fclose(f) == 0);
    REQUIRE(chmod(prog, 0755) == 0);
    char pathvar[4200];
    snprintf(pathvar, sizeof(pathvar), "PATH=%s:/usr/bin:/bin", dir);
    const char *const env[] = {pathvar, NULL};
    struct proc_opts o = {.argv = ARGV("ca-hello"), .env = env};
    struct proc_result r;
    struct ca_err err = {0};
    CHECK_EQ(run(&o, &r, &err), 0);
    CHECK_STR(r.out.data, "from-script\n");
    proc_result_release(&r);
}

TEST(cwd)
{
    char real[4096], want[4200];
    REQUIRE(realpath(test_tmpdir(), real));
    snprintf(want, sizeof(want), "%s\n", real);
    struct proc_opts o = {.argv = ARGV("pwd", "-P"), .cwd = test_tmpdir()};
    struct proc_result r;
    struct ca_err err = {0};
    CHECK_EQ(run(&o, &r, &err), 0);
    CHECK_STR(r.out.data, want);
    proc_result_release(&r);

    struct proc_opts bad = {.argv = ARGV("pwd"), .cwd = "/nonexistent/dir"};
    CHECK_EQ(run(&bad, &r, &err), -ENOENT);
    CHECK_CONTAINS(err.msg, "cannot run 'pwd'");
    CHECK_CONTAINS(err.msg, "/nonexistent/dir");
    proc_result_release(&r);
}

TEST(exec_failure_is_an_error)
{
    struct proc_result r;
    struct ca_err err = {0};
    struct proc_opts o = {.argv = ARGV("/nonexistent/prog", "x")};
    CHECK_EQ(run(&o, &r, &err), -ENOENT);
    CHECK_CONTAINS(err.msg, "cannot run '/nonexistent/prog': No such file or directory");
    CHECK_EQ(r.pid, -1);
    proc_result_release(&r);

    struct proc_opts p = {.argv = ARGV("ca-no-such-program-xyz")};
    CHECK_EQ(run(&p, &r, &err), -ENOENT);
    CHECK_CONTAINS(err.msg, "cannot run 'ca-no-such-program-xyz': No such file or directory");
    proc_result_release(&r);

    /* A file that is not executable fails in execve, reported over the pipe. */
    char path[4096];
    snprintf(path, sizeof(path), "%s/notexec", test_tmpdir());
    FILE *f = fopen(path, "w");
    REQUIRE(f);
    fputs("#!/bin/sh\n", f);
    REQUIRE(fclose(f) == 0);
    REQUIRE(chmod(path, 0644) == 0);
    struct proc_opts n = {.argv = ARGV(path)};
    CHECK_EQ(run(&n, &r, &err), -EACCES);
    CHECK_CONTAINS(err.msg, "cannot run '");
    CHECK_CONTAINS(err.msg, "Permission denied");
    proc_result_release(&r);

    /* No zombie is left behind by the failed starts. */
    CHECK(waitpid(-1, NULL, WNOHANG) < 0 && errno == ECHILD);
}

TEST(flood_is_capped)
{
    struct proc_opts o = {.argv = ARGV("head", "-c", "50M", "/dev/zero"),
                          .out_max = 64 * CA_KIB,
                          .timeout_ms = 15000};
    struct proc_result r;
    struct ca_err err = {0};
    int64_t t0 = ca_now_us();
    CHECK_EQ(run(&o, &r, &err), 0);
    CHECK(proc_ok(&r));
    CHECK(r.out_truncated);
    CHECK_EQ(r.out.len, 64 * CA_KIB);
    CHECK(r.out.cap <= 128 * CA_KIB); /* bounded memory */
    CHECK(ca_now_us() - t0 < 10 * 1000 * 1000);
    proc_result_release(&r);

    struct proc_opts e = {.argv = ARGV("sh", "-c", "head -c 1000000 /dev/zero >&2"),
                          .err_max = 1000};
    CHECK_EQ(run(&e, &r, &err), 0);
    CHECK(r.err_truncated);
    CHECK(!r.out_truncated);
    CHECK_EQ(r.err.len, 1000);
    proc_result_release(&r);
}

TEST(timeout_kills)
{
    struct proc_opts o = {.argv = ARGV("sleep", "1000"), .timeout_ms = 200};
    struct proc_result r;
    struct ca_err err = {0};
    int64_t t0 = ca_now_us();
    CHECK_EQ(run(&o, &r, &err), 0);
    int64_t took = ca_now_us() - t0;
    CHECK(r.timed_out);
    CHECK(r.signaled);
    CHECK_EQ(r.term_signal, SIGKILL);
    CHECK(!proc_ok(&r));
    CHECK_INT(took, >=, 190 * 1000);
    CHECK_INT(took, <, 1000 * 1000);
    struct buf d;
    buf_init(&d, 128);
    CHECK_EQ(proc_describe(&r, 200, &d), 0);
    CHECK_STR(d.data, "timed out after 200 ms");
    buf_release(&d);
    proc_result_release(&r);
}

TEST(timeout_with_output_and_grandchildren)
{
    /* A shell and its children that keep writing: the whole group goes. */
    struct proc_opts o = {.argv = ARGV("sh", "-c", "yes & yes >&2 & while :; do :; done"),
                          .out_max = 1000,
                          .timeout_ms = 300};
    struct proc_result r;
    struct ca_err err = {0};
    int64_t t0 = ca_now_us();
    CHECK_EQ(run(&o, &r, &err), 0);
    CHECK(r.timed_out);
    CHECK(r.out_truncated);
    CHECK(r.err_truncated);
    CHECK_INT(ca_now_us() - t0, <, 1500 * 1000);
    proc_result_release(&r);
}

/* Wait (up to 2 s) for an orphan reparented to us as subreaper. */
static bool reap_orphan(pid_t pid, int *status)
{
    for (int i = 0; i < 200; i++) {
        pid_t got = waitpid(pid, status, WNOHANG);
        if (got == pid)
            return true;
        usleep(10000);
    }
    return false;
}

TEST(grandchild_holding_stdout)
{
    /* Orphans come to us, so we can see how the grandchild ended. */
    REQUIRE(prctl(PR_SET_CHILD_SUBREAPER, 1) == 0);
    struct proc_opts o = {.argv = ARGV("sh", "-c", "sleep 1000 & echo $!"), .timeout_ms = 10000};
    struct proc_result r;
    struct ca_err err = {0};
    int64_t t0 = ca_now_us();
    CHECK_EQ(run(&o, &r, &err), 0);
    CHECK_INT(ca_now_us() - t0, <, 1000 * 1000);
    CHECK(proc_ok(&r));
    CHECK(!r.timed_out);
    long gc = strtol(r.out.data, NULL, 10);
    REQUIRE(gc > 1);
    int st = 0;
    CHECK(reap_orphan((pid_t)gc, &st));
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    CHECK(kill((pid_t)gc, 0) < 0 && errno == ESRCH);
    proc_result_release(&r);

    struct proc_opts h = {.argv = ARGV("sh", "-c", "sleep 1000 & echo hi")};
    t0 = ca_now_us();
    CHECK_EQ(run(&h, &r, &err), 0);
    CHECK_STR(r.out.data, "hi\n");
    CHECK_INT(ca_now_us() - t0, <, 1000 * 1000);
    proc_result_release(&r);
}

TEST(grandchild_outside_group_is_abandoned)
{
    /* setsid leaves the group: we cannot kill it, but must not wait for it. */
    char *setsid_path = proc_which("setsid");
    if (!setsid_path)
        SKIP("setsid", "no setsid in PATH");
    free(setsid_path);
    REQUIRE(prctl(PR_SET_CHILD_SUBREAPER, 1) == 0);
    /* Wait until the grandchild runs sleep, so it has left the group. */
    struct proc_opts o = {
        .argv = ARGV("sh", "-c",
                     "setsid sleep 1000 & p=$!; "
                     "until grep -q '(sleep)' /proc/$p/stat 2>/dev/null; do :; done; echo $p"),
        .timeout_ms = 10000};
    struct proc_result r;
    struct ca_err err = {0};
    int64_t t0 = ca_now_us();
    CHECK_EQ(run(&o, &r, &err), 0);
    CHECK_INT(ca_now_us() - t0, <, 2000 * 1000);
    CHECK(proc_ok(&r));
    CHECK(!r.timed_out);
    long gc = strtol(r.out.data, NULL, 10);
    REQUIRE(gc > 1);
    CHECK_EQ(kill((pid_t)gc, 0), 0); /* out of our reach, as expected */
    kill((pid_t)gc, SIGKILL);
    int st;
    CHECK(reap_orphan((pid_t)gc, &st));
    proc_result_release(&r);
}

TEST(keep_fds_pass_through)
{
    int p[2];
    REQUIRE(pipe2(p, O_CLOEXEC) == 0);
    REQUIRE(dup3(p[1], 7, O_CLOEXEC) == 7);
    close(p[1]);
    const int keep[] = {7};
    struct proc_opts o = {.argv = ARGV("sh", "-c", "echo x >&7"), .keep_fds = keep, .nkeep_fds = 1};
    struct proc_result r;
    struct ca_err err = {0};
    CHECK_EQ(run(&o, &r, &err), 0);
    CHECK(proc_ok(&r));
    close(7);
    char got[16] = "";
    ssize_t n = read(p[0], got, sizeof(got) - 1);
    CHECK_EQ(n, 2);
    CHECK_STR(got, "x\n");
    close(p[0]);
    /* Still close-on-exec in the parent. */
    proc_result_release(&r);

    const int bad[] = {900};
    struct proc_opts b = {.argv = ARGV("true"), .keep_fds = bad, .nkeep_fds = 1};
    CHECK_EQ(run(&b, &r, &err), -EBADF);
    CHECK_CONTAINS(err.msg, "900");
    proc_result_release(&r);
}

TEST(other_fds_are_closed)
{
    /* Leaked on purpose (no O_CLOEXEC) at fixed numbers the child would see. */
    int p[2];
    REQUIRE(pipe(p) == 0);
    REQUIRE(dup2(p[0], 40) == 40);
    REQUIRE(dup2(p[1], 41) == 41);
    close(p[0]);
    close(p[1]);
    const int keep[] = {41};
    struct proc_opts o = {.argv = ARGV("ls", "/proc/self/fd"), .keep_fds = keep, .nkeep_fds = 1};
    struct proc_result r;
    struct ca_err err = {0};
    CHECK_EQ(run(&o, &r, &err), 0);
    CHECK(proc_ok(&r));
    CHECK(strstr(r.out.data, "\n40\n") == NULL);
    CHECK_CONTAINS(r.out.data, "\n41\n");
    CHECK_CONTAINS(r.out.data, "0\n1\n2\n");
    /* The keep list does not change the parent's flags. */
    CHECK_EQ(fcntl(41, F_GETFD) & FD_CLOEXEC, 0);
    close(40);
    close(41);
    proc_result_release(&r);
}

TEST(no_fd_leaks_in_parent)
{
    int before = open("/dev/null", O_RDONLY);
    REQUIRE(before >= 0);
    close(before);
    struct proc_result r;
    struct ca_err err = {0};
    struct proc_opts a = {.argv = ARGV("echo", "x"), .stdin_data = "y", .stdin_len = 1};
    CHECK_EQ(run(&a, &r, &err), 0);
    proc_result_release(&r);
    struct proc_opts b = {.argv = ARGV("/nonexistent")};
    CHECK(run(&b, &r, &err) < 0);
    proc_result_release(&r);
    struct proc_opts c = {.argv = ARGV("sleep", "10"), .timeout_ms = 50};
    CHECK_EQ(run(&c, &r, &err), 0);
    proc_result_release(&r);
    int after = open("/dev/null", O_RDONLY);
    CHECK_EQ(after, before);
    close(after);
}

TEST(signal_dispositions_reset)
{
    /* An ignored SIGPIPE in the parent must not be inherited: `yes | head`
     * relies on yes dying of SIGPIPE. */
    signal(SIGPIPE, SIG_IGN);
    struct proc_opts o = {.argv = ARGV("sh", "-c", "yes | head -n 1; kill -PIPE $$"),
                          .timeout_ms = 5000};
    struct proc_result r;
    struct ca_err err = {0};
    CHECK_EQ(run(&o, &r, &err), 0);
    CHECK(!r.timed_out);
    CHECK(r.signaled);
    CHECK_EQ(r.term_signal, SIGPIPE);
    CHECK_STR(r.out.data, "y\n");
    signal(SIGPIPE, SIG_DFL);
    proc_result_release(&r);
}

TEST(which)
{
    char *sh = proc_which("sh");
    REQUIRE(sh);
    CHECK(sh[0] == '/');
    CHECK_CONTAINS(sh, "/sh");
    free(sh);
    CHECK(proc_which("ca-no-such-program-xyz") == NULL);
    CHECK(proc_which("") == NULL);
    char *abs = proc_which("/bin/sh");
    CHECK_STR(abs, "/bin/sh");
    free(abs);
    CHECK(proc_which("/etc/passwd") == NULL); /* not executable */
    CHECK(proc_which("/etc") == NULL);        /* not a regular file */
}
