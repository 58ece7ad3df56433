/*
 * proc.c - run a child process with a timeout and capped capture.
 *
 * Design and invariants:
 * - Everything the child needs (resolved path, argv, envp, pipes, /dev/null,
 *   the highest fd to close) is ready before fork. Between fork and execve the
 *   child makes only async-signal-safe calls and touches no heap.
 * - All signals are blocked across fork, so no handler of the parent runs in
 *   the child; the child resets every disposition to default (SIG_IGN would
 *   survive exec) and unblocks everything before exec.
 * - The child reports a failed chdir or execve as {stage, errno} over a
 *   close-on-exec pipe; EOF on that pipe means exec succeeded. So an exec
 *   failure is an error from proc_run, never a fake exit status 127.
 * - The parent's loop polls the output pipes, the stdin pipe and a pidfd of
 *   the child (or ticks where pidfd_open is missing). Captured bytes never pass
 *   the caps; the rest is read and dropped, so the child never blocks on us.
 * - Once the direct child is reaped, or the timeout fires, the whole process
 *   group gets SIGKILL; pipes still open DRAIN_GRACE_MS later (held by a
 *   process that left the group) are closed on our side. proc_run therefore
 *   returns in bounded time after the child exits or times out.
 * - SIGPIPE from writing stdin to a child that stopped reading is blocked in
 *   this thread and consumed, so the caller's disposition never sees it.
 */
#include "core/proc.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/close_range.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/limits.h"
#include "core/sigpipe.h"
#include "core/banned.h"

/* Same numbers on every architecture since Linux 5.1's unified table. */
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_close_range
#define SYS_close_range 436
#endif

extern char **environ;

/* Bytes moved per read or write. */
/* After the group is killed, how long pipes may stay open before we drop them. */
#define DRAIN_GRACE_MS 500
/* Without a pidfd, how often to check whether the child has exited. */
#define POLL_TICK_MS 20
/* Highest fd the child marks close-on-exec where close_range is missing. */
#define FALLBACK_MAX_FD 65536
#define DEFAULT_PATH "/usr/local/bin:/usr/bin:/bin"

enum child_stage {
    STAGE_SETUP = 1, /* dup2 of the standard fds */
    STAGE_CHDIR,
    STAGE_EXEC,
};

struct child_failure {
    int stage;
    int err;
};

/* What the child needs, all of it prepared before fork. */
struct child_plan {
    const char *path;
    char *const *argv;
    char *const *envp;
    const char *cwd;
    int stdin_fd, stdout_fd, stderr_fd; /* stderr_fd < 0: inherit */
    int report_fd;
    const int *keep_fds;
    size_t nkeep_fds;
    int fallback_max_fd;
};

void proc_result_init(struct proc_result *r)
{
    memset(r, 0, sizeof(*r));
    buf_init(&r->out, BUF_MAX_INTERNAL);
    buf_init(&r->err, BUF_MAX_INTERNAL);
    r->pid = -1;
}

void proc_result_release(struct proc_result *r)
{
    buf_release(&r->out);
    buf_release(&r->err);
}

/* ---- PATH lookup ---- */

static bool is_executable_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) &&
           faccessat(AT_FDCWD, path, X_OK, AT_EACCESS) == 0;
}

static char *which_in(const char *name, const char *pathvar)
{
    if (!*name)
        return NULL;
    if (strchr(name, '/'))
        return is_executable_file(name) ? xstrdup(name) : NULL;
    struct buf cand;
    buf_init(&cand, CA_LIMIT_PATH);
    for (const char *p = pathvar;;) {
        const char *end = strchrnul(p, ':');
        buf_reset(&cand);
        /* An empty element means the current directory, as in execvp. */
        int rc = end == p ? buf_addf(&cand, "./%s", name)
                          : buf_addf(&cand, "%.*s/%s", (int)(end - p), p, name);
        if (rc == 0 && is_executable_file(cand.data))
            return buf_detach(&cand, NULL);
        if (!*end)
            break;
        p = end + 1;
    }
    buf_release(&cand);
    return NULL;
}

char *proc_which(const char *name)
{
    const char *path = getenv("PATH");
    return which_in(name, path ? path : DEFAULT_PATH);
}

/* The PATH the lookup uses: the child's if its environment sets one. */
static const char *lookup_path(const char *const *env)
{
    for (size_t i = 0; env && env[i]; i++)
        if (strncmp(env[i], "PATH=", 5) == 0)
            return env[i] + 5;
    const char *path = getenv("PATH");
    return path ? path : DEFAULT_PATH;
}

/* ---- the child side: async-signal-safe calls only ---- */

CA_NORETURN static void child_fail(int report_fd, int stage, int e)
{
    struct child_failure f = {stage, e};
    ssize_t n;
    do
        n = write(report_fd, &f, sizeof(f));
    while (n < 0 && errno == EINTR);
    _exit(127);
}

CA_NORETURN static void child_run(const struct child_plan *p)
{
    struct sigaction dfl;
    memset(&dfl, 0, sizeof(dfl));
    dfl.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; sig++)
        (void)sigaction(sig, &dfl, NULL); /* EINVAL for SIGKILL and libc's own: fine */
    sigset_t none;
    sigemptyset(&none);
    (void)sigprocmask(SIG_SETMASK, &none, NULL); /* fails only for a bad `how` */

    setpgid(0, 0);
    /* Every fd here is >= 3, so dup2 never clobbers a source it still needs. */
    if (dup2(p->stdin_fd, 0) < 0 || dup2(p->stdout_fd, 1) < 0)
        child_fail(p->report_fd, STAGE_SETUP, errno);
    if (p->stderr_fd >= 0 && dup2(p->stderr_fd, 2) < 0)
        child_fail(p->report_fd, STAGE_SETUP, errno);
    if (p->stderr_fd < 0 && fcntl(2, F_SETFD, 0) != 0) /* the parent's stderr, kept */
        child_fail(p->report_fd, STAGE_SETUP, errno);

    /* Mark everything from 3 up close-on-exec (the report pipe must live
     * until exec), then let the keep list through. */
    if (syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) != 0) {
        for (int fd = 3; fd < p->fallback_max_fd; fd++)
            (void)fcntl(fd, F_SETFD, FD_CLOEXEC); /* EBADF for the fds not open: fine */
    }
    /* A kept fd that would close at exec is a setup failure, not a silent loss. */
    for (size_t i = 0; i < p->nkeep_fds; i++)
        if (p->keep_fds[i] > 2 && fcntl(p->keep_fds[i], F_SETFD, 0) != 0)
            child_fail(p->report_fd, STAGE_SETUP, errno);

    if (p->cwd && chdir(p->cwd) != 0)
        child_fail(p->report_fd, STAGE_CHDIR, errno);
    execve(p->path, p->argv, p->envp);
    child_fail(p->report_fd, STAGE_EXEC, errno);
}

/* ---- the parent side ---- */

void proc_fd_close(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

int proc_fd_above_stdio(int fd)
{
    if (fd < 0 || fd > 2)
        return fd;
    int moved = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    int e = errno;
    close(fd);
    errno = e;
    return moved;
}

int proc_pipe(int p[2])
{
    if (pipe2(p, O_CLOEXEC) != 0)
        return -errno;
    p[0] = proc_fd_above_stdio(p[0]);
    p[1] = proc_fd_above_stdio(p[1]);
    if (p[0] < 0 || p[1] < 0) {
        int rc = -errno;
        proc_fd_close(&p[0]);
        proc_fd_close(&p[1]);
        return rc;
    }
    return 0;
}

static void set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0)
        fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

static int fallback_max_fd(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY ||
        rl.rlim_cur > FALLBACK_MAX_FD)
        return FALLBACK_MAX_FD;
    return (int)rl.rlim_cur;
}

void proc_capture_read(struct proc_capture *c, char *scratch)
{
    ssize_t n = read(c->fd, scratch, PROC_IO_CHUNK);
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
        return;
    if (n <= 0) {
        proc_fd_close(&c->fd);
        return;
    }
    size_t room = c->cap > c->b->len ? c->cap - c->b->len : 0;
    size_t keep = (size_t)n < room ? (size_t)n : room;
    if (keep && buf_add(c->b, scratch, keep) != 0)
        keep = 0;
    if (keep < (size_t)n)
        *c->truncated = true;
}

struct run {
    pid_t pid;
    int pidfd;
    struct proc_capture out, err;
    int in_fd;
    const char *in_p;
    size_t in_left;
    struct sigpipe_guard guard;
    bool reaped, killed;
    int status;
    int64_t deadline_us; /* 0: none */
    int64_t grace_until; /* 0: group not killed yet */
};

static void kill_group(struct run *st)
{
    kill(-st->pid, SIGKILL);
    if (!st->grace_until)
        st->grace_until = ca_now_us() + (int64_t)DRAIN_GRACE_MS * 1000;
}

static void try_reap(struct run *st, struct proc_result *r, int64_t t0)
{
    if (st->reaped)
        return;
    int status;
    pid_t got;
    do
        got = waitpid(st->pid, &status, WNOHANG);
    while (got < 0 && errno == EINTR);
    if (got != st->pid)
        return;
    st->reaped = true;
    st->status = status;
    r->elapsed_us = ca_now_us() - t0;
    proc_fd_close(&st->pidfd);
    /* Nobody reads stdin any more; leftovers in the group must go too. */
    proc_fd_close(&st->in_fd);
    kill_group(st);
}

static void feed_stdin(struct run *st)
{
    size_t n = st->in_left < PROC_IO_CHUNK ? st->in_left : PROC_IO_CHUNK;
    ssize_t w = write(st->in_fd, st->in_p, n);
    if (w < 0) {
        if (errno == EINTR || errno == EAGAIN)
            return;
        if (errno == EPIPE)
            st->guard.caused = true;
        proc_fd_close(&st->in_fd); /* the child stopped reading: not an error */
        return;
    }
    st->in_p += w;
    st->in_left -= (size_t)w;
    if (!st->in_left)
        proc_fd_close(&st->in_fd);
}

static int ms_until(int64_t when_us, int64_t now_us)
{
    int64_t ms = (when_us - now_us + 999) / 1000;
    if (ms < 0)
        return 0;
    return ms > 60000 ? 60000 : (int)ms;
}

static void run_loop(struct run *st, struct proc_result *r, int64_t t0)
{
    char scratch[PROC_IO_CHUNK];
    for (;;) {
        int64_t now = ca_now_us();
        if (!st->killed && st->deadline_us && now >= st->deadline_us) {
            try_reap(st, r, t0); /* it may have exited just in time */
            if (!st->reaped) {
                st->killed = true;
                r->timed_out = true;
                kill_group(st);
            }
        }
        if (st->grace_until && now >= st->grace_until) {
            /* Something outside the group holds the pipes: stop listening. */
            proc_fd_close(&st->out.fd);
            proc_fd_close(&st->err.fd);
            proc_fd_close(&st->in_fd);
        }
        bool pipes_open = st->out.fd >= 0 || st->err.fd >= 0 || st->in_fd >= 0;
        if (st->reaped && !pipes_open)
            return;

        int timeout = -1;
        if (!st->killed && !st->reaped && st->deadline_us)
            timeout = ms_until(st->deadline_us, now);
        if (st->grace_until && pipes_open) {
            int g = ms_until(st->grace_until, now);
            timeout = timeout < 0 || g < timeout ? g : timeout;
        }
        if (!st->reaped && st->pidfd < 0)
            timeout = timeout < 0 || POLL_TICK_MS < timeout ? POLL_TICK_MS : timeout;

        struct pollfd pfd[4];
        nfds_t n = 0;
        int i_out = -1, i_err = -1, i_in = -1, i_pid = -1;
        if (st->out.fd >= 0) {
            i_out = (int)n;
            pfd[n++] = (struct pollfd){.fd = st->out.fd, .events = POLLIN};
        }
        if (st->err.fd >= 0) {
            i_err = (int)n;
            pfd[n++] = (struct pollfd){.fd = st->err.fd, .events = POLLIN};
        }
        if (st->in_fd >= 0) {
            i_in = (int)n;
            pfd[n++] = (struct pollfd){.fd = st->in_fd, .events = POLLOUT};
        }
        if (st->pidfd >= 0) {
            i_pid = (int)n;
            pfd[n++] = (struct pollfd){.fd = st->pidfd, .events = POLLIN};
        }
        int ready = poll(pfd, n, timeout);
        if (ready < 0 && errno != EINTR)
            BUG("poll failed: %s", strerror(errno));
        if (ready <= 0) {
            if (!st->reaped && st->pidfd < 0)
                try_reap(st, r, t0);
            continue;
        }
        if (i_out >= 0 && pfd[i_out].revents)
            proc_capture_read(&st->out, scratch);
        if (i_err >= 0 && pfd[i_err].revents)
            proc_capture_read(&st->err, scratch);
        if (i_in >= 0 && pfd[i_in].revents)
            feed_stdin(st);
        if (i_pid >= 0 && pfd[i_pid].revents)
            try_reap(st, r, t0);
        else if (!st->reaped && st->pidfd < 0)
            try_reap(st, r, t0);
    }
}

static int report_failure(const struct proc_opts *o, const struct child_failure *f,
                          struct ca_err *err)
{
    const char *argv0 = o->argv[0];
    switch (f->stage) {
    case STAGE_CHDIR:
        return err_setf(err, -f->err, "cannot run '%s': cannot change to directory '%s': %s", argv0,
                        o->cwd, strerror(f->err));
    case STAGE_SETUP:
        return err_setf(err, -f->err, "cannot run '%s': cannot set up its standard fds: %s", argv0,
                        strerror(f->err));
    default:
        return err_setf(err, -f->err, "cannot run '%s': %s", argv0, strerror(f->err));
    }
}

/* Read the child's exec report: 1 and *f filled on failure, 0 on exec. */
static int read_report(int fd, struct child_failure *f)
{
    size_t got = 0;
    while (got < sizeof(*f)) {
        ssize_t n = read(fd, (char *)f + got, sizeof(*f) - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    return got == sizeof(*f);
}

/* argv[0] looked up in the PATH the child will have; a name with a '/' is
 * taken as is (execve then says what is wrong with it). */
static int find_program(const struct proc_opts *o, char **path, struct ca_err *err)
{
    *path = which_in(o->argv[0], lookup_path(o->env));
    if (*path)
        return 0;
    if (strchr(o->argv[0], '/')) {
        *path = xstrdup(o->argv[0]);
        return 0;
    }
    return err_setf(err, -ENOENT,
                    "cannot run '%s': No such file or directory (not found in PATH); "
                    "install it or give its full path",
                    o->argv[0]);
}

/* Fork and exec per plan (signals blocked around the fork, so the child
 * starts with none pending); waits for the exec report on rep_r after
 * closing our copy of its write end. 0 with *pid_out, or an error (the
 * child, if any, reaped). */
static int fork_exec(const struct proc_opts *o, const struct child_plan *plan, int *rep_w,
                     int rep_r, pid_t *pid_out, struct ca_err *err)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pid_t pid = fork();
    if (pid == 0)
        child_run(plan);
    int fork_errno = errno;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (pid < 0)
        return err_setf(err, -fork_errno, "cannot run '%s': fork failed: %s", o->argv[0],
                        strerror(fork_errno));
    proc_fd_close(rep_w);
    struct child_failure f;
    if (read_report(rep_r, &f)) {
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
            ;
        return report_failure(o, &f, err);
    }
    *pid_out = pid;
    return 0;
}

int proc_run(const struct proc_opts *o, struct proc_result *r, struct ca_err *err)
{
    if (!o->argv || !o->argv[0])
        BUG("proc_run without argv[0]");
    buf_reset(&r->out);
    buf_reset(&r->err);
    r->exit_code = r->term_signal = 0;
    r->signaled = r->timed_out = r->out_truncated = r->err_truncated = false;
    r->elapsed_us = 0;
    r->pid = -1;

    bool capture_err = !o->merge_stderr && !o->inherit_stderr;
    int in[2] = {-1, -1}, out[2] = {-1, -1}, errp[2] = {-1, -1}, rep[2] = {-1, -1};
    int devnull = -1, rc = 0;
    char *path = NULL;
    struct run st = {.pid = -1, .pidfd = -1, .in_fd = -1, .out = {.fd = -1}, .err = {.fd = -1}};

    for (size_t i = 0; i < o->nkeep_fds; i++)
        if (o->keep_fds[i] > 2 && fcntl(o->keep_fds[i], F_GETFD) < 0)
            return err_setf(err, -EBADF, "cannot run '%s': fd %d on its keep list is not open",
                            o->argv[0], o->keep_fds[i]);
    rc = find_program(o, &path, err);
    if (rc)
        return rc;

    if (o->stdin_data) {
        rc = proc_pipe(in);
    } else {
        devnull = proc_fd_above_stdio(open("/dev/null", O_RDONLY | O_CLOEXEC));
        rc = devnull < 0 ? -errno : 0;
    }
    if (!rc)
        rc = proc_pipe(out);
    if (!rc && capture_err)
        rc = proc_pipe(errp);
    if (!rc)
        rc = proc_pipe(rep);
    if (rc) {
        err_setf(err, rc, "cannot run '%s': cannot create pipes: %s", o->argv[0], strerror(-rc));
        goto out;
    }

    struct child_plan plan = {
        .path = path,
        /* execve does not modify these; the casts only drop const. */
        .argv = (char *const *)o->argv,
        .envp = o->env ? (char *const *)o->env : environ,
        .cwd = o->cwd,
        .stdin_fd = o->stdin_data ? in[0] : devnull,
        .stdout_fd = out[1],
        .stderr_fd = capture_err       ? errp[1]
                     : o->merge_stderr ? out[1]
                                       : -1,
        .report_fd = rep[1],
        .keep_fds = o->keep_fds,
        .nkeep_fds = o->nkeep_fds,
        .fallback_max_fd = fallback_max_fd(),
    };

    int64_t t0 = ca_now_us();
    pid_t pid;
    rc = fork_exec(o, &plan, &rep[1], rep[0], &pid, err);
    if (rc)
        goto out;
    proc_fd_close(&in[0]);
    proc_fd_close(&devnull);
    proc_fd_close(&out[1]);
    proc_fd_close(&errp[1]);

    /* Running: from here on the child is always reaped before we return. */
    r->pid = pid;
    st.pid = pid;
    st.pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    st.out = (struct proc_capture){out[0], &r->out, o->out_max ? o->out_max : CA_LIMIT_CHILD_OUTPUT,
                                   &r->out_truncated};
    out[0] = -1;
    if (capture_err) {
        st.err = (struct proc_capture){
            errp[0], &r->err, o->err_max ? o->err_max : CA_LIMIT_CHILD_OUTPUT, &r->err_truncated};
        errp[0] = -1;
    } else {
        st.err = (struct proc_capture){-1, &r->err, 0, &r->err_truncated};
    }
    set_nonblock(st.out.fd);
    if (st.err.fd >= 0)
        set_nonblock(st.err.fd);
    if (o->stdin_data) {
        st.in_fd = in[1];
        in[1] = -1;
        st.in_p = o->stdin_data;
        st.in_left = o->stdin_len;
        if (!st.in_left)
            proc_fd_close(&st.in_fd);
        else
            set_nonblock(st.in_fd);
        sigpipe_block(&st.guard);
    }
    if (o->timeout_ms > 0 && o->timeout_ms < INT64_MAX / 4000) /* longer: none */
        st.deadline_us = t0 + o->timeout_ms * 1000;

    run_loop(&st, r, t0);

    if (o->stdin_data)
        sigpipe_restore(&st.guard);
    kill(-pid, SIGKILL); /* nothing of the child may outlive the call */
    if (WIFSIGNALED(st.status)) {
        r->signaled = true;
        r->term_signal = WTERMSIG(st.status);
    } else {
        r->exit_code = WEXITSTATUS(st.status);
    }

out:
    proc_fd_close(&st.out.fd);
    proc_fd_close(&st.err.fd);
    proc_fd_close(&st.in_fd);
    proc_fd_close(&st.pidfd);
    proc_fd_close(&in[0]);
    proc_fd_close(&in[1]);
    proc_fd_close(&out[0]);
    proc_fd_close(&out[1]);
    proc_fd_close(&errp[0]);
    proc_fd_close(&errp[1]);
    proc_fd_close(&rep[0]);
    proc_fd_close(&rep[1]);
    proc_fd_close(&devnull);
    free(path);
    return rc;
}

int proc_spawn(const struct proc_opts *o, int stderr_fd, struct proc_child *c, struct ca_err *err)
{
    if (!o->argv || !o->argv[0])
        BUG("proc_spawn without argv[0]");
    *c = (struct proc_child){.pid = -1, .in_fd = -1, .out_fd = -1};
    int in[2] = {-1, -1}, out[2] = {-1, -1}, rep[2] = {-1, -1};
    char *path = NULL;
    int rc = find_program(o, &path, err);
    if (rc)
        return rc;
    rc = proc_pipe(in);
    if (!rc)
        rc = proc_pipe(out);
    if (!rc)
        rc = proc_pipe(rep);
    if (rc) {
        err_setf(err, rc, "cannot run '%s': cannot create pipes: %s", o->argv[0], strerror(-rc));
        goto out;
    }
    struct child_plan plan = {
        .path = path,
        .argv = (char *const *)o->argv,
        .envp = o->env ? (char *const *)o->env : environ,
        .cwd = o->cwd,
        .stdin_fd = in[0],
        .stdout_fd = out[1],
        .stderr_fd = stderr_fd,
        .report_fd = rep[1],
        .keep_fds = o->keep_fds,
        .nkeep_fds = o->nkeep_fds,
        .fallback_max_fd = fallback_max_fd(),
    };
    pid_t pid;
    rc = fork_exec(o, &plan, &rep[1], rep[0], &pid, err);
    if (rc)
        goto out;
    *c = (struct proc_child){.pid = pid, .in_fd = in[1], .out_fd = out[0]};
    in[1] = out[0] = -1;
out:
    proc_fd_close(&in[0]);
    proc_fd_close(&in[1]);
    proc_fd_close(&out[0]);
    proc_fd_close(&out[1]);
    proc_fd_close(&rep[0]);
    proc_fd_close(&rep[1]);
    free(path);
    return rc;
}

void proc_child_kill(struct proc_child *c)
{
    if (c->pid > 0) {
        kill(-c->pid, SIGKILL);
        kill(c->pid, SIGKILL);
        while (waitpid(c->pid, NULL, 0) < 0 && errno == EINTR)
            ;
    }
    proc_fd_close(&c->in_fd);
    proc_fd_close(&c->out_fd);
    c->pid = -1;
}

bool proc_ok(const struct proc_result *r)
{
    return !r->timed_out && !r->signaled && r->exit_code == 0;
}

int proc_describe(const struct proc_result *r, int64_t timeout_ms, struct buf *b)
{
    if (r->timed_out)
        return buf_addf(b, "timed out after %lld ms", (long long)timeout_ms);
    if (r->signaled) {
        const char *abbrev = sigabbrev_np(r->term_signal);
        if (abbrev)
            return buf_addf(b, "killed by SIG%s", abbrev);
        return buf_addf(b, "killed by signal %d", r->term_signal);
    }
    return buf_addf(b, "exit %d", r->exit_code);
}
