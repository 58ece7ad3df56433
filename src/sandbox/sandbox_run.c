/*
 * sandbox_run.c - one command in a fresh sandbox, its output captured: start,
 * exec, wait with a deadline, tear down, drain the pipes (capped).
 */
#include "sandbox/sandbox.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/proc.h"
#include "core/limits.h"
#include "sandbox/sandbox_internal.h"
#include "core/banned.h"

/* How long pipes may stay open after the sandbox is torn down. */
#define DRAIN_GRACE_MS 500

void sandbox_run_result_init(struct sandbox_run_result *r)
{
    memset(r, 0, sizeof(*r));
    buf_init(&r->out, BUF_MAX_INTERNAL);
    buf_init(&r->err, BUF_MAX_INTERNAL);
}

void sandbox_run_result_release(struct sandbox_run_result *r)
{
    buf_release(&r->out);
    buf_release(&r->err);
}

static int pipe_nb(int p[2], struct ca_err *err)
{
    int rc = proc_pipe(p);
    if (rc)
        return err_setf(err, rc, "sandbox_run: pipe: %s", strerror(-rc));
    /* Only the read end is ours to poll; fcntl fails only on a bad fd, which p[0] is not. */
    (void)fcntl(p[0], F_SETFL, fcntl(p[0], F_GETFL) | O_NONBLOCK);
    return 0;
}

static int ms_until(int64_t when_us)
{
    int64_t ms = (when_us - ca_now_us() + 999) / 1000;
    return ms < 0 ? 0 : ms > 60000 ? 60000 : (int)ms;
}

int sandbox_run(const struct sandbox_opts *opts, const char *const *argv, int64_t timeout_ms,
                size_t out_max, struct sandbox_run_result *r, struct ca_err *err)
{
    buf_reset(&r->out);
    buf_reset(&r->err);
    r->status = 0;
    r->timed_out = r->out_truncated = r->err_truncated = false;
    r->elapsed_us = 0;
    size_t cap = out_max ? out_max : CA_LIMIT_CHILD_OUTPUT;
    int64_t t0 = ca_now_us();
    int outp[2] = {-1, -1}, errp[2] = {-1, -1};
    struct sandbox *sb = NULL;
    int rc = sandbox_start(opts, &sb, err);
    if (!rc)
        rc = pipe_nb(outp, err);
    if (!rc)
        rc = pipe_nb(errp, err);
    int pid = -1;
    if (!rc) {
        struct sandbox_cmd cmd = {.argv = argv,
                                  .stdin_fd = -1,
                                  .stdout_fd = outp[1],
                                  .stderr_fd = errp[1],
                                  .new_pgroup = true};
        rc = sandbox_exec(sb, &cmd, &pid, err);
    }
    proc_fd_close(&outp[1]);
    proc_fd_close(&errp[1]);
    if (rc)
        goto out;

    struct proc_capture co = {outp[0], &r->out, cap, &r->out_truncated};
    struct proc_capture ce = {errp[0], &r->err, cap, &r->err_truncated};
    outp[0] = errp[0] = -1;
    int64_t deadline = timeout_ms > 0 && timeout_ms < INT64_MAX / 4000 ? t0 + timeout_ms * 1000 : 0;
    int64_t grace_until = 0;
    bool done = false;
    char *scratch = xmalloc(PROC_IO_CHUNK);
    for (;;) {
        if (!done) {
            struct sandbox_event ev;
            struct ca_err e2;
            while (sandbox_read_event(sb, &ev, &e2) == 0)
                if (ev.pid == pid) {
                    r->status = ev.status;
                    done = true;
                    break;
                }
            if (!done && sb->gone) {
                r->status = W_EXITCODE(0, SIGKILL);
                done = true;
            }
            if (!done && deadline && ca_now_us() >= deadline) {
                r->timed_out = true;
                r->status = W_EXITCODE(0, SIGKILL);
                done = true;
            }
            if (done) {
                /* Whatever is still running inside goes with the sandbox. */
                sandbox__teardown(sb);
                grace_until = ca_now_us() + (int64_t)DRAIN_GRACE_MS * 1000;
            }
        }
        if (grace_until && ca_now_us() >= grace_until) {
            proc_fd_close(&co.fd);
            proc_fd_close(&ce.fd);
        }
        if (done && co.fd < 0 && ce.fd < 0)
            break;
        struct pollfd pfd[3];
        nfds_t n = 0;
        int i_out = -1, i_err = -1;
        if (co.fd >= 0) {
            i_out = (int)n;
            pfd[n++] = (struct pollfd){.fd = co.fd, .events = POLLIN};
        }
        if (ce.fd >= 0) {
            i_err = (int)n;
            pfd[n++] = (struct pollfd){.fd = ce.fd, .events = POLLIN};
        }
        if (!done)
            pfd[n++] = (struct pollfd){.fd = sb->epfd, .events = POLLIN};
        int timeout = -1;
        if (!done && deadline)
            timeout = ms_until(deadline);
        if (grace_until)
            timeout = ms_until(grace_until);
        if (poll(pfd, n, timeout) < 0 && errno != EINTR) {
            rc = err_setf(err, -errno, "sandbox_run: poll: %s", strerror(errno));
            break;
        }
        if (i_out >= 0 && pfd[i_out].revents)
            proc_capture_read(&co, scratch);
        if (i_err >= 0 && pfd[i_err].revents)
            proc_capture_read(&ce, scratch);
    }
    free(scratch);
    proc_fd_close(&co.fd);
    proc_fd_close(&ce.fd);
    r->elapsed_us = ca_now_us() - t0;
out:
    proc_fd_close(&outp[0]);
    proc_fd_close(&errp[0]);
    sandbox_free(sb);
    return rc;
}
