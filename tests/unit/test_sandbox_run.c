/*
 * test_sandbox_run.c - running programs in a sandbox: exit status, stdout and stderr captured
 * and capped, timeouts that kill the whole tree; exec errors; stdin, fds, environment and
 * working directory handed to a program; process trees and sandbox_kill_tree; exit events and
 * waits; many programs in one sandbox; tear-down by sandbox_free and the init's death; the same
 * process handling in insecure mode. The walls (mounts, namespaces, limits, privileges) are
 * test_sandbox.c.
 *
 * Every case but insecure_mode needs user namespaces; where the host has none, each such case
 * skips with the reason (TEST_REQUIRE=userns makes that a failure).
 */
#include "sandbox_fixture.h"

#include <errno.h>
#include <signal.h>

TEST(run_echo_exit_code_and_stdout)
{
    need_sandbox();
    struct sandbox_opts o = make_ws();
    struct sandbox_run_result r;
    CHECK_EQ(sh(&o, "echo hello; echo oops >&2; exit 3", &r), 0);
    CHECK_EQ(exit_code(&r), 3);
    CHECK_STR(r.out.data, "hello\n");
    CHECK_STR(r.err.data, "oops\n");
    CHECK(!r.timed_out && !r.out_truncated);
    CHECK(r.elapsed_us > 0);
    sandbox_run_result_release(&r);
}

TEST(output_is_capped)
{
    need_sandbox();
    struct sandbox_opts o = make_ws();
    struct sandbox_run_result r;
    sandbox_run_result_init(&r);
    struct ca_err err = {0};
    CHECK_EQ(sandbox_run(&o, ARGV("bash", "-c", "head -c 100000 /dev/zero | tr '\\0' x"), 10000,
                         1000, &r, &err),
             0);
    CHECK_EQ(r.out.len, 1000);
    CHECK(r.out_truncated);
    CHECK_EQ(exit_code(&r), 0);
    sandbox_run_result_release(&r);
}

TEST(timeout_kills_the_whole_tree)
{
    need_sandbox();
    struct sandbox_opts o = make_ws();
    struct sandbox_run_result r;
    sandbox_run_result_init(&r);
    struct ca_err err = {0};
    int64_t t0 = ca_now_us();
    CHECK_EQ(sandbox_run(&o, ARGV("bash", "-c", "sleep 100 & (sleep 100 &); echo started; wait"),
                         300, 0, &r, &err),
             0);
    int64_t took = ca_now_us() - t0;
    CHECK(r.timed_out);
    CHECK(WIFSIGNALED(r.status) && WTERMSIG(r.status) == SIGKILL);
    CHECK_STR(r.out.data, "started\n");
    CHECK(took < 3 * 1000 * 1000);
    CHECK(r.elapsed_us >= 300 * 1000);
    sandbox_run_result_release(&r);
}

TEST(exec_errors)
{
    need_sandbox();
    struct sandbox_opts o = make_ws();
    struct sandbox *sb = start(&o);
    struct ca_err err = {0};
    int pid = 0;
    struct sandbox_cmd c = {
        .argv = ARGV("no-such-program"), .stdin_fd = -1, .stdout_fd = -1, .stderr_fd = -1};
    CHECK_EQ(sandbox_exec(sb, &c, &pid, &err), -ENOENT);
    CHECK_CONTAINS(err.msg, "no-such-program");
    CHECK_CONTAINS(err.msg, "not found");
    CHECK_EQ(pid, -1);

    c.argv = ARGV("/workspace/MANIFEST");
    CHECK_EQ(sandbox_exec(sb, &c, &pid, &err), -EACCES);

    c.argv = ARGV("true");
    c.cwd = "/no/such/dir";
    CHECK_EQ(sandbox_exec(sb, &c, &pid, &err), -ENOENT);
    CHECK_CONTAINS(err.msg, "cannot change to directory '/no/such/dir'");

    c.cwd = NULL;
    c.argv = ARGV("");
    CHECK_EQ(sandbox_exec(sb, &c, &pid, &err), CA_EUSAGE);

    c.argv = ARGV("true");
    c.stdout_fd = 999;
    CHECK_EQ(sandbox_exec(sb, &c, &pid, &err), -EBADF);
    c.stdout_fd = -1;

    /* Too big for one request. */
    size_t big = 200 * 1024;
    char *arg = xmalloc(big + 1);
    memset(arg, 'a', big);
    arg[big] = '\0';
    const char *argv[] = {"echo", arg, NULL};
    c.argv = argv;
    CHECK_EQ(sandbox_exec(sb, &c, &pid, &err), CA_ETOOBIG);
    free(arg);

    /* And the sandbox still works. */
    c.argv = ARGV("sh", "-c", "exit 4");
    int status;
    CHECK_EQ(sandbox_exec(sb, &c, &pid, &err), 0);
    CHECK_EQ(sandbox_wait(sb, pid, 5000, &status, &err), 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 4);
    sandbox_free(sb);
}

/* Start bash with `script` on a pipe; returns its pid, *rd the read end. */
static int start_sh(struct sandbox *sb, const char *script, int *rd)
{
    int p[2];
    REQUIRE(pipe2(p, O_CLOEXEC) == 0);
    struct sandbox_cmd c = {.argv = ARGV("bash", "-c", script),
                            .stdin_fd = -1,
                            .stdout_fd = p[1],
                            .stderr_fd = -1,
                            .new_pgroup = true};
    struct ca_err err = {0};
    int pid = -1;
    int rc = sandbox_exec(sb, &c, &pid, &err);
    if (rc)
        fprintf(stderr, "  sandbox_exec: %s\n", err.msg);
    REQUIRE(rc == 0);
    close(p[1]);
    *rd = p[0];
    return pid;
}

TEST(kill_tree_spares_the_root_when_asked)
{
    need_sandbox();
    struct sandbox_opts o = make_ws();
    struct sandbox *sb = start(&o);
    char buf[256];
    int rd;
    int pid =
        start_sh(sb, "sleep 100 & sleep 100 & (sleep 100 &); echo ready; wait; echo survived", &rd);
    CHECK(read_until(rd, "ready", buf, sizeof(buf), 5000));
    struct ca_err err = {0};
    CHECK_EQ(sandbox_kill_tree(sb, pid, SIGKILL, false, &err), 0);
    int status = -1;
    CHECK_EQ(sandbox_wait(sb, pid, 5000, &status, &err), 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(read_until(rd, "survived", buf, sizeof(buf), 5000));
    /* The orphaned sleep (same process group) went too. */
    close(rd);
    int lpid = start_sh(sb, "cat /proc/[0-9]*/comm | grep -c sleep", &rd);
    CHECK(read_until(rd, "\n", buf, sizeof(buf), 5000));
    CHECK_STR(buf, "0\n");
    CHECK_EQ(sandbox_wait(sb, lpid, 5000, &status, &err), 0);
    close(rd);

    CHECK_EQ(sandbox_kill_tree(sb, 1, SIGKILL, true, &err), -EINVAL);
    CHECK_EQ(sandbox_kill_tree(sb, 4000, SIGKILL, true, &err), -ESRCH);
    sandbox_free(sb);
}

TEST(kill_tree_with_root)
{
    need_sandbox();
    struct sandbox_opts o = make_ws();
    struct sandbox *sb = start(&o);
    char buf[256];
    int rd;
    int pid = start_sh(sb, "trap 'echo term' TERM; sleep 100 & echo ready; wait; exit 9", &rd);
    CHECK(read_until(rd, "ready", buf, sizeof(buf), 5000));
    struct ca_err err = {0};
    /* Both get TERM: sleep dies of it, bash runs its trap and goes on. */
    CHECK_EQ(sandbox_kill_tree(sb, pid, SIGTERM, true, &err), 0);
    CHECK(read_until(rd, "term", buf, sizeof(buf), 5000));
    int status = -1;
    CHECK_EQ(sandbox_wait(sb, pid, 5000, &status, &err), 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 9);
    close(rd);

    pid = start_sh(sb, "sleep 100 & echo ready; wait", &rd);
    CHECK(read_until(rd, "ready", buf, sizeof(buf), 5000));
    CHECK_EQ(sandbox_kill_tree(sb, pid, SIGKILL, true, &err), 0);
    CHECK_EQ(sandbox_wait(sb, pid, 5000, &status, &err), 0);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    close(rd);
    sandbox_free(sb);
}

TEST(exit_events)
{
    need_sandbox();
    struct sandbox_opts o = make_ws();
    struct sandbox *sb = start(&o);
    struct ca_err err = {0};
    struct sandbox_event ev;
    CHECK_EQ(sandbox_read_event(sb, &ev, &err), CA_ENOTFOUND);

    struct sandbox_cmd c = {
        .argv = ARGV("sh", "-c", "exit 3"), .stdin_fd = -1, .stdout_fd = -1, .stderr_fd = -1};
    int a, b;
    REQUIRE(sandbox_exec(sb, &c, &a, &err) == 0);
    /* Let a's exit reach the socket before the next request, so that the
     * exec below has to queue it. */
    sleep_ms(200);
    c.argv = ARGV("sh", "-c", "sleep 0.2; exit 5");
    REQUIRE(sandbox_exec(sb, &c, &b, &err) == 0);
    CHECK(a != b);
    struct pollfd pfd = {.fd = sandbox_event_fd(sb), .events = POLLIN};
    CHECK_EQ(poll(&pfd, 1, 0), 1); /* the queued event shows on the fd */
    CHECK_EQ(sandbox_read_event(sb, &ev, &err), 0);
    CHECK_EQ(ev.pid, a);
    CHECK(WIFEXITED(ev.status) && WEXITSTATUS(ev.status) == 3);
    CHECK_EQ(poll(&pfd, 1, 0), 0);
    CHECK_EQ(sandbox_read_event(sb, &ev, &err), CA_ENOTFOUND);
    CHECK_EQ(poll(&pfd, 1, 3000), 1);
    CHECK_EQ(sandbox_read_event(sb, &ev, &err), 0);
    CHECK_EQ(ev.pid, b);
    CHECK(WIFEXITED(ev.status) && WEXITSTATUS(ev.status) == 5);

    /* wait on one pid queues the others' events. */
    c.argv = ARGV("sh", "-c", "exit 6");
    REQUIRE(sandbox_exec(sb, &c, &a, &err) == 0);
    c.argv = ARGV("sh", "-c", "sleep 0.3; exit 7");
    REQUIRE(sandbox_exec(sb, &c, &b, &err) == 0);
    int status;
    CHECK_EQ(sandbox_wait(sb, b, 5000, &status, &err), 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 7);
    CHECK_EQ(poll(&pfd, 1, 0), 1);
    CHECK_EQ(sandbox_wait(sb, a, 0, &status, &err), 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 6);

    c.argv = ARGV("sleep", "10");
    REQUIRE(sandbox_exec(sb, &c, &a, &err) == 0);
    CHECK_EQ(sandbox_wait(sb, a, 50, &status, &err), CA_ETIMEOUT);
    CHECK_EQ(sandbox_kill_tree(sb, a, SIGKILL, true, &err), 0);
    CHECK_EQ(sandbox_wait(sb, a, 5000, &status, &err), 0);
    CHECK(WIFSIGNALED(status));
    sandbox_free(sb);
}

TEST(background_grandchildren_die_with_free)
{
    need_sandbox();
    struct sandbox_opts o = make_ws();
    struct sandbox *sb = start(&o);
    pid_t init = sandbox_init_pid(sb);
    char buf[256];
    int rd;
    int pid = start_sh(sb, "setsid sleep 1000 & (sleep 1000 &); echo started", &rd);
    CHECK(read_until(rd, "started", buf, sizeof(buf), 5000));
    struct ca_err err = {0};
    int status;
    CHECK_EQ(sandbox_wait(sb, pid, 5000, &status, &err), 0);
    /* The sleeps still hold the pipe. */
    struct pollfd pfd = {.fd = rd, .events = POLLIN};
    CHECK_EQ(poll(&pfd, 1, 100), 0);
    int64_t t0 = ca_now_us();
    sandbox_free(sb);
    CHECK_EQ(poll(&pfd, 1, 2000), 1);
    CHECK_EQ(read(rd, buf, sizeof(buf)), 0); /* EOF: every writer is gone */
    CHECK(ca_now_us() - t0 < 2000 * 1000);
    CHECK(kill(init, 0) != 0);
    close(rd);
}

TEST(stdin_and_fds_are_passed)
{
    need_sandbox();
    struct sandbox_opts o = make_ws();
    struct sandbox *sb = start(&o);
    int in[2], out[2];
    REQUIRE(pipe2(in, O_CLOEXEC) == 0 && pipe2(out, O_CLOEXEC) == 0);
    struct sandbox_cmd c = {.argv = ARGV("bash", "-c", "tr a-z A-Z; ls /proc/self/fd | wc -l"),
                            .stdin_fd = in[0],
                            .stdout_fd = out[1],
                            .stderr_fd = out[1]};
    struct ca_err err = {0};
    int pid, status;
    REQUIRE(sandbox_exec(sb, &c, &pid, &err) == 0);
    close(in[0]);
    close(out[1]);
    REQUIRE(write(in[1], "hello\n", 6) == 6);
    close(in[1]);
    char buf[256];
    CHECK(read_until(out[0], "HELLO\n4\n", buf, sizeof(buf), 5000)); /* 0,1,2 + ls's dir */
    CHECK_EQ(sandbox_wait(sb, pid, 5000, &status, &err), 0);
    close(out[0]);
    sandbox_free(sb);
}

TEST(environment)
{
    need_sandbox();
    setenv("CA_TEST_SECRET", "hunter2", 1);
    struct sandbox_opts o = make_ws();
    struct sandbox_run_result r;
    CHECK_EQ(sh(&o, "env | grep -v '^_=' | grep -v '^SHLVL=' | grep -v '^PWD=' | sort", &r), 0);
    CHECK_STR(r.out.data,
              "HOME=/tmp\nLANG=C.UTF-8\n"
              "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\nTERM=dumb\n");
    sandbox_run_result_release(&r);

    struct sandbox *sb = start(&o);
    int p[2];
    REQUIRE(pipe2(p, O_CLOEXEC) == 0);
    struct sandbox_cmd c = {.argv = ARGV("sh", "-c", "echo $FOO; pwd"),
                            .env = ARGV("FOO=bar", "PATH=/usr/bin:/bin"),
                            .cwd = "/workspace/kernels",
                            .stdin_fd = -1,
                            .stdout_fd = p[1],
                            .stderr_fd = -1};
    struct ca_err err = {0};
    int pid;
    REQUIRE(sandbox_exec(sb, &c, &pid, &err) == 0);
    close(p[1]);
    char buf[256];
    CHECK(read_until(p[0], "kernels\n", buf, sizeof(buf), 5000));
    CHECK_STR(buf, "bar\n/workspace/kernels\n");
    close(p[0]);
    sandbox_free(sb);
}

TEST(many_programs_in_one_sandbox)
{
    need_sandbox();
    struct sandbox_opts o = make_ws();
    struct sandbox *sb = start(&o);
    struct ca_err err = {0};
    for (int i = 0; i < 50; i++) {
        struct sandbox_cmd c = {
            .argv = ARGV("true"), .stdin_fd = -1, .stdout_fd = -1, .stderr_fd = -1};
        int pid, status;
        REQUIRE(sandbox_exec(sb, &c, &pid, &err) == 0);
        REQUIRE(sandbox_wait(sb, pid, 5000, &status, &err) == 0);
        CHECK_EQ(status, 0);
    }
    sandbox_free(sb);
}

TEST(init_death_is_reported)
{
    need_sandbox();
    struct sandbox_opts o = make_ws();
    struct sandbox *sb = start(&o);
    REQUIRE(kill(sandbox_init_pid(sb), SIGKILL) == 0);
    struct ca_err err = {0};
    struct sandbox_cmd c = {.argv = ARGV("true"), .stdin_fd = -1, .stdout_fd = -1, .stderr_fd = -1};
    int pid;
    CHECK_EQ(sandbox_exec(sb, &c, &pid, &err), CA_ECHILD);
    CHECK_CONTAINS(err.msg, "the sandbox is gone");
    struct sandbox_event ev;
    CHECK_EQ(sandbox_read_event(sb, &ev, &err), CA_ECHILD);
    sandbox_free(sb);
    sandbox_free(NULL);
}

TEST(insecure_mode)
{
    struct sandbox_opts o = make_ws();
    o.flags = SANDBOX_INSECURE;
    struct sandbox_run_result r;
    CHECK_EQ(sh(&o, "pwd; echo x > kernels/b.cu; cat /proc/self/status | grep -c 'Seccomp:.0'", &r),
             0);
    char want[4200];
    snprintf(want, sizeof(want), "%s\n1\n", ws);
    CHECK_STR(r.out.data, want);
    sandbox_run_result_release(&r);

    struct sandbox *sb = start(&o);
    pid_t init = sandbox_init_pid(sb);
    char buf[256];
    int rd;
    int pid = start_sh(sb, "sleep 1000 & (sleep 1000 &); echo started; wait", &rd);
    CHECK(read_until(rd, "started", buf, sizeof(buf), 5000));
    CHECK(pid > 1 && pid != init);
    struct ca_err err = {0};
    CHECK_EQ(sandbox_kill_tree(sb, pid, SIGKILL, false, &err), 0);
    int status;
    CHECK_EQ(sandbox_wait(sb, pid, 5000, &status, &err), 0);
    close(rd);
    pid = start_sh(sb, "sleep 1000 & (sleep 1000 &); echo again", &rd);
    CHECK(read_until(rd, "again", buf, sizeof(buf), 5000));
    sandbox_free(sb);
    struct pollfd pfd = {.fd = rd, .events = POLLIN};
    CHECK_EQ(poll(&pfd, 1, 3000), 1);
    CHECK_EQ(read(rd, buf, sizeof(buf)), 0); /* the orphaned sleeps are gone too */
    CHECK(kill(init, 0) != 0);
    close(rd);
}

TEST(kill_tree_signal_zero_only_probes)
{
    need_sandbox();
    struct sandbox_opts o = make_ws();
    struct sandbox *sb = start(&o);
    char buf[256];
    int rd;
    int pid = start_sh(sb, "sleep 100 & echo ready; wait; echo after", &rd);
    CHECK(read_until(rd, "ready", buf, sizeof(buf), 5000));
    struct ca_err err = {0};
    CHECK_EQ(sandbox_kill_tree(sb, pid, 0, true, &err), 0);
    int status;
    CHECK_EQ(sandbox_wait(sb, pid, 200, &status, &err), CA_ETIMEOUT);
    /* Stopping stays stopped (no SIGCONT after it), and resumes on CONT. */
    CHECK_EQ(sandbox_kill_tree(sb, pid, SIGSTOP, false, &err), 0);
    CHECK_EQ(sandbox_kill_tree(sb, pid, SIGCONT, false, &err), 0);
    CHECK_EQ(sandbox_kill_tree(sb, pid, SIGKILL, false, &err), 0);
    CHECK_EQ(sandbox_wait(sb, pid, 5000, &status, &err), 0);
    CHECK(WIFEXITED(status));
    CHECK(read_until(rd, "after", buf, sizeof(buf), 5000));
    close(rd);
    sandbox_free(sb);
}
