/*
 * sandbox.c - the host side of a sandbox: start, the requests to init (exec,
 * kill a tree), exit events and tear-down (the plan: sandbox_plan.c; one
 * command with its output captured: sandbox_run.c).
 *
 * Design and invariants:
 * - Plan, then apply: sandbox_start validates the options and builds the
 *   complete list of mount operations (host paths resolved with realpath,
 *   every string allocated) before clone. The child (sandbox_init.c) applies
 *   it without allocating; when a step fails it reports the step's index
 *   and errno, and the message is made here from the plan.
 * - clone is a raw syscall with fork semantics (no CLONE_VM, no stack): the
 *   child is pid 1 of the new namespaces and waits on the control socket
 *   until we have written its uid/gid maps ("0 <our uid> 1", setgroups deny)
 *   and put it into a cgroup. All signals are blocked around clone so that
 *   none of our handlers runs in the child.
 * - One SOCK_SEQPACKET socket pair carries everything: requests and their
 *   replies (matched by sequence number) and EXIT events. Events that
 *   arrive while we wait for a reply are queued; an eventfd is non-zero
 *   while the queue is not empty, and sandbox_event_fd is an epoll fd over
 *   the socket and that eventfd, so it is readable exactly when
 *   sandbox_read_event has something to return.
 * - Tear-down is SIGKILL to init: the kernel then kills everything in the
 *   pid namespace, and waitpid on init returns once all of it is gone. In
 *   insecure mode (no pid namespace) we close the socket instead; init kills
 *   its descendants and exits, and SIGKILL follows if it does not.
 */
#include "sandbox/sandbox.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/fs.h"
#include "core/proc.h"
#include "core/log.h"
#include "sandbox/sandbox_internal.h"
#include "core/banned.h"

#ifndef CLONE_NEWCGROUP
#define CLONE_NEWCGROUP 0x02000000
#endif

#define NS_FLAGS                                                                                   \
    (CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS |     \
     CLONE_NEWCGROUP)
/* How long a request to init may take before we call init wedged. */
#define REQUEST_TIMEOUT_MS 30000
/* Insecure mode: how long init gets to kill its tree after the socket closes. */
#define INSECURE_EXIT_GRACE_MS 2000

#define UNAVAIL_HINT                                                                               \
    "/proc/sys/user/max_user_namespaces is 0 or unprivileged clone is disabled); run with "        \
    "--insecure-no-sandbox to run without isolation (unsafe)"

/* ---- small helpers ---- */

static void describe_status(int status, char *out, size_t n)
{
    if (WIFEXITED(status)) {
        snprintf(out, n, "exited with status %d", WEXITSTATUS(status));
    } else if (WIFSIGNALED(status)) {
        const char *abbrev = sigabbrev_np(WTERMSIG(status));
        if (abbrev)
            snprintf(out, n, "was killed by SIG%s", abbrev);
        else
            snprintf(out, n, "was killed by signal %d", WTERMSIG(status));
    } else {
        snprintf(out, n, "ended with status 0x%x", (unsigned)status);
    }
}

static int write_file(pid_t pid, const char *name, const char *s, struct ca_err *err)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, name);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return err_setf(err, -errno, "sandbox: open %s: %s", path, strerror(errno));
    size_t len = strlen(s);
    ssize_t w = write(fd, s, len);
    int e = errno;
    close(fd);
    if (w != (ssize_t)len)
        return err_setf(err, w < 0 ? -e : -EIO, "sandbox: write %s: %s", path,
                        w < 0 ? strerror(e) : "short write");
    return 0;
}

/* Foreign ids (a root caller mapping another user) leave setgroups allowed:
 * init drops the supplementary groups it inherited before taking the ids. */
static int write_maps(pid_t pid, uid_t uid, gid_t gid, bool foreign, struct ca_err *err)
{
    char map[64];
    int rc = foreign ? 0 : write_file(pid, "setgroups", "deny", err);
    if (rc == -ENOENT)
        rc = 0; /* before Linux 3.19 there is no such file (nor the need) */
    if (!rc) {
        snprintf(map, sizeof(map), "0 %u 1\n", (unsigned)uid);
        rc = write_file(pid, "uid_map", map, err);
    }
    if (!rc) {
        snprintf(map, sizeof(map), "0 %u 1\n", (unsigned)gid);
        rc = write_file(pid, "gid_map", map, err);
    }
    return rc;
}

/* ---- the event queue ---- */

static void q_push(struct sandbox *sb, const struct sandbox__msg *m)
{
    ALLOC_GROW(sb->q, sb->qlen + 1, sb->qalloc);
    sb->q[sb->qlen++] = (struct sandbox_event){.pid = m->pid, .status = m->status};
    if (sb->qlen == 1) {
        uint64_t one = 1;
        if (write(sb->evfd, &one, sizeof(one)) < 0)
            LOG_DEBUG("sandbox: eventfd write: %s", strerror(errno));
    }
}

/* Take the first queued event (of pid, or any when pid < 0). */
static bool q_take(struct sandbox *sb, int pid, struct sandbox_event *ev)
{
    for (size_t i = 0; i < sb->qlen; i++) {
        if (pid >= 0 && sb->q[i].pid != pid)
            continue;
        *ev = sb->q[i];
        memmove(&sb->q[i], &sb->q[i + 1], (sb->qlen - i - 1) * sizeof(sb->q[0]));
        if (--sb->qlen == 0) {
            uint64_t v;
            if (read(sb->evfd, &v, sizeof(v)) < 0 && errno != EAGAIN)
                LOG_DEBUG("sandbox: eventfd read: %s", strerror(errno));
        }
        return true;
    }
    return false;
}

/* ---- talking to init ---- */

static void try_reap_init(struct sandbox *sb, bool block)
{
    if (sb->reaped || sb->init_pid <= 0)
        return;
    int status;
    pid_t got;
    do
        got = waitpid(sb->init_pid, &status, block ? 0 : WNOHANG);
    while (got < 0 && errno == EINTR);
    if (got == sb->init_pid) {
        sb->reaped = true;
        sb->init_status = status;
    }
}

static int gone_error(struct sandbox *sb, struct ca_err *err)
{
    sb->gone = true;
    try_reap_init(sb, false);
    if (!sb->reaped)
        return err_setf(err, CA_ECHILD, "the sandbox is gone: its init closed the control socket");
    char how[64];
    describe_status(sb->init_status, how, sizeof(how));
    return err_setf(err, CA_ECHILD, "the sandbox is gone: its init %s", how);
}

/*
 * One message from init, waiting up to timeout_ms (< 0: forever, 0: only
 * what is there). 0, CA_ETIMEOUT (no message, *err untouched), or
 * CA_ECHILD when init is gone.
 */
static int recv_msg(struct sandbox *sb, struct sandbox__msg *m, int64_t timeout_ms,
                    struct ca_err *err)
{
    if (sb->gone)
        return gone_error(sb, err);
    int64_t deadline = timeout_ms > 0 ? ca_now_us() + timeout_ms * 1000 : 0;
    for (;;) {
        ssize_t n = recv(sb->ctl, m, sizeof(*m), MSG_DONTWAIT);
        if (n == (ssize_t)sizeof(*m))
            return 0;
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN) {
            int wait_ms = -1;
            if (timeout_ms == 0)
                return CA_ETIMEOUT;
            if (timeout_ms > 0) {
                int64_t left = deadline - ca_now_us();
                if (left <= 0)
                    return CA_ETIMEOUT;
                wait_ms = left / 1000 > INT_MAX ? INT_MAX : (int)((left + 999) / 1000);
            }
            struct pollfd pfd = {.fd = sb->ctl, .events = POLLIN};
            if (poll(&pfd, 1, wait_ms) < 0 && errno != EINTR)
                return err_setf(err, -errno, "sandbox: poll: %s", strerror(errno));
            continue;
        }
        if (n > 0)
            LOG_WARN("sandbox: dropping a malformed %zd-byte message from init", n);
        return gone_error(sb, err);
    }
}

/* Send a request and wait for its reply; EXIT events on the way are queued. */
static int request(struct sandbox *sb, struct sandbox__msg *m, const void *payload, size_t len,
                   const int *fds, int nfds, uint32_t reply_type, struct ca_err *err)
{
    if (sb->gone)
        return gone_error(sb, err);
    m->seq = ++sb->seq;
    m->len = (uint32_t)len;
    struct iovec iov[2] = {{m, sizeof(*m)}, {(void *)payload, len}};
    char cbuf[CMSG_SPACE(SANDBOX__EXEC_NFDS * sizeof(int))];
    memset(cbuf, 0, sizeof(cbuf));
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = len ? 2 : 1};
    if (nfds) {
        mh.msg_control = cbuf;
        mh.msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int));
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
        memcpy(CMSG_DATA(c), fds, (size_t)nfds * sizeof(int));
    }
    ssize_t n;
    do
        n = sendmsg(sb->ctl, &mh, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    if (n < 0) {
        if (errno == EPIPE || errno == ECONNRESET)
            return gone_error(sb, err);
        return err_setf(err, -errno, "sandbox: sending a request to init: %s", strerror(errno));
    }
    uint32_t seq = m->seq;
    for (;;) {
        int rc = recv_msg(sb, m, REQUEST_TIMEOUT_MS, err);
        if (rc == CA_ETIMEOUT)
            return err_setf(err, CA_ETIMEOUT, "sandbox: init did not answer within %d ms",
                            REQUEST_TIMEOUT_MS);
        if (rc)
            return rc;
        if (m->type == SANDBOX__MSG_EXIT)
            q_push(sb, m);
        else if (m->type == reply_type && m->seq == seq)
            return 0;
        else
            LOG_WARN("sandbox: unexpected message type %u from init", m->type);
    }
}

/* ---- start ---- */

static int setup_error(const struct sandbox__plan *p, const struct sandbox__msg *m,
                       struct ca_err *err)
{
    int e = m->err, code = e > 0 ? -e : CA_ECHILD;
    const char *why = e > 0 ? strerror(e) : "unknown error";
    switch (m->stage) {
    case SANDBOX__STEP_OP: {
        if (m->index < 0 || (size_t)m->index >= p->nops)
            break;
        const struct sandbox__op *op = &p->ops[m->index];
        if (m->index == 0 && (e == EPERM || e == EACCES))
            /* The first mount in a fresh user namespace: the namespace has
             * no capabilities (AppArmor's apparmor_restrict_unprivileged_userns
             * or a similar policy). */
            return err_setf(err, CA_EUNAVAIL,
                            "user namespaces are restricted (%s in a new user namespace: %s; a "
                            "security policy such as AppArmor's "
                            "kernel.apparmor_restrict_unprivileged_userns denies it); run with "
                            "--insecure-no-sandbox to run without isolation (unsafe)",
                            op->what, why);
        if (op->kind == SANDBOX__OP_BIND_SELF && e == ELOOP)
            return err_setf(err, CA_EESCAPE,
                            "sandbox set-up: %s: %s is a symlink; read-only paths must be plain "
                            "files or directories",
                            op->what, op->dst);
        if (op->kind == SANDBOX__OP_BIND_SELF && e == ENOENT)
            return err_setf(err, code, "sandbox set-up: %s: %s does not exist", op->what, op->dst);
        return err_setf(err, code, "sandbox set-up: %s: %s", op->what, why);
    }
    case SANDBOX__STEP_FDS:
        return err_setf(err, code, "sandbox set-up: init's fds: %s", why);
    case SANDBOX__STEP_HOSTNAME:
        return err_setf(err, code, "sandbox set-up: set hostname '%s': %s", p->hostname, why);
    case SANDBOX__STEP_NNP:
        return err_setf(err, CA_EUNAVAIL, "sandbox set-up: PR_SET_NO_NEW_PRIVS: %s", why);
    case SANDBOX__STEP_CAPS:
        return err_setf(err, code, "sandbox set-up: drop capabilities: %s", why);
    case SANDBOX__STEP_IDS:
        return err_setf(err, code, "sandbox set-up: take the ids %u:%u: %s", (unsigned)p->uid,
                        (unsigned)p->gid, why);
    case SANDBOX__STEP_SECCOMP:
        return err_setf(err, CA_EUNAVAIL,
                        "sandbox set-up: load the seccomp filter: %s (seccomp filters are not "
                        "available?); run with --insecure-no-sandbox to run without isolation "
                        "(unsafe)",
                        why);
    case SANDBOX__STEP_SIGNALS:
        return err_setf(err, code, "sandbox set-up: init's signalfd: %s", why);
    case SANDBOX__STEP_SUBREAPER:
        return err_setf(err, code, "sandbox set-up: PR_SET_CHILD_SUBREAPER: %s", why);
    default:
        break;
    }
    return err_setf(err, code, "sandbox set-up failed at step %d: %s", m->stage, why);
}

static int unavail_error(int e, struct ca_err *err)
{
    return err_setf(err, CA_EUNAVAIL, "user namespaces are not available (clone: %s; " UNAVAIL_HINT,
                    strerror(e));
}

static pid_t clone_child(unsigned long flags, const struct sandbox__plan *plan, int ctl)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    long pid = syscall(SYS_clone, flags | SIGCHLD, 0, 0, 0, 0);
    if (pid == 0)
        sandbox__child_main(plan, ctl);
    int e = errno;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    errno = e;
    return (pid_t)pid;
}

static int make_event_fd(struct sandbox *sb, struct ca_err *err)
{
    sb->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    sb->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (sb->evfd < 0 || sb->epfd < 0)
        return err_setf(err, -errno, "sandbox: eventfd/epoll: %s", strerror(errno));
    struct epoll_event e1 = {.events = EPOLLIN, .data.fd = sb->ctl};
    struct epoll_event e2 = {.events = EPOLLIN, .data.fd = sb->evfd};
    if (epoll_ctl(sb->epfd, EPOLL_CTL_ADD, sb->ctl, &e1) != 0 ||
        epoll_ctl(sb->epfd, EPOLL_CTL_ADD, sb->evfd, &e2) != 0)
        return err_setf(err, -errno, "sandbox: epoll_ctl: %s", strerror(errno));
    return 0;
}

int sandbox_start(const struct sandbox_opts *opts, struct sandbox **out, struct ca_err *err)
{
    *out = NULL;
    struct sandbox__plan plan;
    struct sandbox *sb = xcalloc(1, sizeof(*sb));
    sb->ctl = sb->evfd = sb->epfd = -1;
    sb->init_pid = -1;
    int sv[2] = {-1, -1};
    int rc = sandbox__plan_build(opts, &plan, &sb->ws, err);
    if (rc)
        goto fail;
    sb->insecure = plan.insecure;

    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
        rc = err_setf(err, -errno, "sandbox: socketpair: %s", strerror(errno));
        goto fail;
    }
    sv[0] = proc_fd_above_stdio(sv[0]);
    sv[1] = proc_fd_above_stdio(sv[1]);
    if (sv[0] < 0 || sv[1] < 0) {
        rc = err_setf(err, -errno, "sandbox: socketpair: %s", strerror(errno));
        goto fail;
    }

    unsigned long flags = plan.insecure ? 0 : NS_FLAGS;
    pid_t pid = clone_child(flags, &plan, sv[1]);
    if (pid < 0 && errno == EINVAL && (flags & CLONE_NEWCGROUP)) /* before Linux 4.6 */
        pid = clone_child(flags & ~(unsigned long)CLONE_NEWCGROUP, &plan, sv[1]);
    if (pid < 0) {
        int e = errno;
        if (!plan.insecure && (e == EPERM || e == ENOSPC || e == EUSERS || e == EINVAL))
            rc = unavail_error(e, err);
        else
            rc = err_setf(err, -e, "sandbox: clone: %s", strerror(e));
        goto fail;
    }
    sb->init_pid = pid;
    sb->ctl = sv[0];
    sv[0] = -1;
    proc_fd_close(&sv[1]);

    if (!plan.insecure) {
        rc = write_maps(pid, plan.uid, plan.gid, plan.foreign_ids, err);
        if (rc)
            goto fail;
        sandbox__cgroup_setup(&sb->cg, pid,
                              opts->limits.memory_bytes ? opts->limits.memory_bytes
                                                        : SANDBOX__DEF_MEMORY,
                              plan.nproc);
    } else {
        snprintf(sb->cg.desc, sizeof(sb->cg.desc), "none: insecure mode");
    }
    struct sandbox__msg go = {.type = SANDBOX__MSG_GO};
    if (send(sb->ctl, &go, sizeof(go), MSG_NOSIGNAL) != (ssize_t)sizeof(go)) {
        rc = gone_error(sb, err);
        goto fail;
    }
    struct sandbox__msg m;
    rc = recv_msg(sb, &m, SANDBOX__SETUP_TIMEOUT_MS, err);
    if (rc == CA_ETIMEOUT)
        rc = err_setf(err, CA_ETIMEOUT, "sandbox set-up did not finish within %d ms",
                      SANDBOX__SETUP_TIMEOUT_MS);
    else if (!rc && m.type == SANDBOX__MSG_SETUP_FAIL)
        rc = setup_error(&plan, &m, err);
    else if (!rc && m.type != SANDBOX__MSG_READY)
        rc = err_setf(err, CA_ECHILD, "sandbox set-up: unexpected message %u from init", m.type);
    else if (rc)
        err_prefix(err, "sandbox set-up");
    if (rc)
        goto fail;
    rc = make_event_fd(sb, err);
    if (rc)
        goto fail;
    sandbox__plan_release(&plan);
    if (sb->insecure)
        LOG_WARN("running WITHOUT a sandbox (--insecure-no-sandbox): programs run as plain "
                 "children of this process with only rlimits; they can read and change "
                 "everything this user can");
    *out = sb;
    return 0;

fail:
    proc_fd_close(&sv[0]);
    proc_fd_close(&sv[1]);
    sandbox__plan_release(&plan);
    sandbox_free(sb);
    return rc;
}

/* ---- exec, kill, events ---- */

static const char *const default_env[] = {
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/tmp",
    "LANG=C.UTF-8", "TERM=dumb", NULL};

static int add_string(struct buf *b, const char *s)
{
    return buf_add(b, s, strlen(s) + 1);
}

/* Insecure mode has no /workspace: map it onto the host directory. */
static char *host_cwd(const struct sandbox *sb, const char *cwd)
{
    size_t n = strlen(SANDBOX_WORKSPACE);
    if (!cwd)
        return xstrdup(sb->insecure ? sb->ws : SANDBOX_WORKSPACE);
    if (sb->insecure && strncmp(cwd, SANDBOX_WORKSPACE, n) == 0 &&
        (cwd[n] == '\0' || cwd[n] == '/'))
        return xstrfmt("%s%s", sb->ws, cwd + n);
    return xstrdup(cwd);
}

static int exec_error(const struct sandbox_cmd *cmd, const char *cwd, const struct sandbox__msg *m,
                      struct ca_err *err)
{
    const char *a0 = cmd->argv[0];
    int e = m->err > 0 ? m->err : EIO;
    switch (m->stage) {
    case SANDBOX__EXEC_EXEC:
        if (e == ENOENT && !strchr(a0, '/'))
            return err_setf(err, -e,
                            "cannot run '%s' in the sandbox: No such file or directory (not "
                            "found in its PATH)",
                            a0);
        return err_setf(err, -e, "cannot run '%s' in the sandbox: %s", a0, strerror(e));
    case SANDBOX__EXEC_CHDIR:
        return err_setf(err, -e,
                        "cannot run '%s' in the sandbox: cannot change to directory "
                        "'%s': %s",
                        a0, cwd, strerror(e));
    case SANDBOX__EXEC_FORK:
        return err_setf(err, -e, "cannot run '%s' in the sandbox: fork: %s%s", a0, strerror(e),
                        e == EAGAIN ? " (the sandbox is at its process limit)" : "");
    case SANDBOX__EXEC_FDS:
        return err_setf(err, -e, "cannot run '%s' in the sandbox: cannot set up its fds: %s", a0,
                        strerror(e));
    case SANDBOX__EXEC_RLIMIT:
        return err_setf(err, -e, "cannot run '%s' in the sandbox: cannot set its limits: %s", a0,
                        strerror(e));
    case SANDBOX__EXEC_TOO_MANY:
        return err_setf(err, -EAGAIN,
                        "cannot run '%s' in the sandbox: %d programs are already running", a0,
                        SANDBOX__MAX_TRACKED);
    default:
        return err_setf(err, -e, "cannot run '%s' in the sandbox: init refused the request: %s", a0,
                        strerror(e));
    }
}

int sandbox_exec(struct sandbox *sb, const struct sandbox_cmd *cmd, int *pid, struct ca_err *err)
{
    *pid = -1;
    if (!cmd->argv || !cmd->argv[0] || !cmd->argv[0][0])
        return err_setf(err, CA_EUSAGE, "sandbox_exec: empty argv");
    if (cmd->n_extra_fds > SANDBOX_MAX_EXTRA_FDS || (cmd->n_extra_fds && !cmd->extra_fds))
        return err_setf(err, CA_EUSAGE,
                        "cannot run '%s' in the sandbox: %zu extra fds (at most %d)", cmd->argv[0],
                        cmd->n_extra_fds, SANDBOX_MAX_EXTRA_FDS);
    int given[SANDBOX__EXEC_NFDS] = {cmd->stdin_fd, cmd->stdout_fd, cmd->stderr_fd};
    for (int i = 3; i < SANDBOX__EXEC_NFDS; i++)
        given[i] = (size_t)(i - 3) < cmd->n_extra_fds ? cmd->extra_fds[i - 3] : -1;
    int fds[SANDBOX__EXEC_NFDS], nfds = 0;
    uint32_t mask = 0;
    for (int i = 0; i < SANDBOX__EXEC_NFDS; i++) {
        if (given[i] < 0)
            continue;
        if (fcntl(given[i], F_GETFD) < 0)
            return err_setf(err, -EBADF, "cannot run '%s' in the sandbox: fd %d is not open",
                            cmd->argv[0], given[i]);
        fds[nfds++] = given[i];
        mask |= 1u << i;
    }
    char *cwd = host_cwd(sb, cmd->cwd);
    const char *const *env = cmd->env ? cmd->env : default_env;
    struct buf payload;
    buf_init(&payload, SANDBOX__REQ_MAX);
    struct sandbox__msg m = {.type = SANDBOX__MSG_EXEC,
                             .fd_mask = mask,
                             .flags = cmd->new_pgroup ? SANDBOX__EXEC_NEW_PGROUP : 0};
    int rc = add_string(&payload, cwd);
    for (size_t i = 0; !rc && cmd->argv[i]; i++, m.argc++)
        rc = add_string(&payload, cmd->argv[i]);
    for (size_t i = 0; !rc && env[i]; i++, m.envc++)
        rc = add_string(&payload, env[i]);
    if (!rc && 1 + m.argc + m.envc > SANDBOX__REQ_MAX_STRINGS)
        rc = CA_ETOOBIG;
    if (rc) {
        rc = err_setf(err, CA_ETOOBIG,
                      "cannot run '%s' in the sandbox: its arguments and environment are over "
                      "the limit of %zu bytes or %d strings",
                      cmd->argv[0], SANDBOX__REQ_MAX, SANDBOX__REQ_MAX_STRINGS);
        goto out;
    }
    rc = request(sb, &m, payload.data, payload.len, fds, nfds, SANDBOX__MSG_EXEC_REPLY, err);
    if (rc)
        goto out;
    if (m.pid <= 0) {
        rc = exec_error(cmd, cwd, &m, err);
        goto out;
    }
    *pid = m.pid;
out:
    buf_release(&payload);
    free(cwd);
    return rc;
}

int sandbox_kill_tree(struct sandbox *sb, int pid, int sig, bool include_root, struct ca_err *err)
{
    struct sandbox__msg m = {.type = SANDBOX__MSG_KILL,
                             .pid = pid,
                             .sig = sig,
                             .flags = include_root ? SANDBOX__KILL_INCLUDE_ROOT : 0};
    int rc = request(sb, &m, NULL, 0, NULL, 0, SANDBOX__MSG_KILL_REPLY, err);
    if (rc)
        return rc;
    if (m.err)
        return err_setf(err, -m.err, "sandbox: kill tree of pid %d: %s", pid, strerror(m.err));
    return 0;
}

bool sandbox_is_insecure(const struct sandbox *sb)
{
    return sb->insecure;
}

int sandbox_event_fd(const struct sandbox *sb)
{
    return sb->epfd;
}

int sandbox_read_event(struct sandbox *sb, struct sandbox_event *ev, struct ca_err *err)
{
    if (q_take(sb, -1, ev))
        return 0;
    for (;;) {
        struct sandbox__msg m;
        int rc = recv_msg(sb, &m, 0, err);
        if (rc == CA_ETIMEOUT)
            return CA_ENOTFOUND;
        if (rc)
            return rc;
        if (m.type == SANDBOX__MSG_EXIT) {
            *ev = (struct sandbox_event){.pid = m.pid, .status = m.status};
            return 0;
        }
        LOG_WARN("sandbox: unexpected message type %u from init", m.type);
    }
}

int sandbox_wait(struct sandbox *sb, int pid, int64_t timeout_ms, int *status, struct ca_err *err)
{
    struct sandbox_event ev;
    if (q_take(sb, pid, &ev)) {
        *status = ev.status;
        return 0;
    }
    int64_t deadline = timeout_ms >= 0 ? ca_now_us() + timeout_ms * 1000 : 0;
    for (;;) {
        int64_t left = -1;
        if (timeout_ms >= 0) {
            left = (deadline - ca_now_us()) / 1000;
            if (left < 0)
                left = 0;
        }
        struct sandbox__msg m;
        int rc = recv_msg(sb, &m, left, err);
        if (rc == CA_ETIMEOUT)
            return err_setf(err, CA_ETIMEOUT, "sandbox: pid %d still running after %lld ms", pid,
                            (long long)timeout_ms);
        if (rc)
            return rc;
        if (m.type != SANDBOX__MSG_EXIT) {
            LOG_WARN("sandbox: unexpected message type %u from init", m.type);
            continue;
        }
        if (m.pid == pid) {
            *status = m.status;
            return 0;
        }
        q_push(sb, &m);
    }
}

pid_t sandbox_init_pid(const struct sandbox *sb)
{
    return sb->init_pid;
}

const char *sandbox_limits_desc(const struct sandbox *sb)
{
    return sb->cg.desc;
}

const char *sandbox__cgroup_desc(const struct sandbox *sb)
{
    return sb->cg.desc;
}

/* ---- tear-down ---- */

void sandbox__teardown(struct sandbox *sb)
{
    if (sb->init_pid <= 0 || sb->reaped)
        return;
    if (sb->insecure && !sb->gone && sb->ctl >= 0) {
        /* init sees EOF, kills its descendants and exits. */
        shutdown(sb->ctl, SHUT_RDWR);
        for (int waited = 0; waited < INSECURE_EXIT_GRACE_MS && !sb->reaped; waited++) {
            try_reap_init(sb, false);
            if (!sb->reaped) {
                struct timespec ts = {0, 1000 * 1000};
                nanosleep(&ts, NULL);
            }
        }
    }
    if (!sb->reaped)
        kill(sb->init_pid, SIGKILL);
    try_reap_init(sb, true);
    sb->gone = true;
}

void sandbox_free(struct sandbox *sb)
{
    if (!sb)
        return;
    sandbox__teardown(sb);
    proc_fd_close(&sb->ctl);
    proc_fd_close(&sb->evfd);
    proc_fd_close(&sb->epfd);
    sandbox__cgroup_release(&sb->cg);
    free(sb->q);
    free(sb->ws);
    free(sb);
}

/* ---- support probe ---- */

static pthread_once_t support_once = PTHREAD_ONCE_INIT;
static bool support_ok;
static struct ca_err support_why;

static void probe_support(void)
{
    struct buf b;
    buf_init(&b, 64);
    if (fs_read_file("/proc/sys/user/max_user_namespaces", 64, &b, NULL) == 0) {
        buf_rtrim(&b);
        if (strcmp(b.data, "0") == 0) {
            err_setf(&support_why, CA_EUNAVAIL, "user namespaces are not available (" UNAVAIL_HINT);
            buf_release(&b);
            return;
        }
    }
    buf_release(&b);
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    long pid = syscall(SYS_clone, NS_FLAGS | SIGCHLD, 0, 0, 0, 0);
    if (pid < 0 && errno == EINVAL)
        pid = syscall(SYS_clone, (NS_FLAGS & ~CLONE_NEWCGROUP) | SIGCHLD, 0, 0, 0, 0);
    if (pid == 0)
        _exit(0);
    int e = errno;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (pid < 0) {
        unavail_error(e, &support_why);
        return;
    }
    while (waitpid((pid_t)pid, NULL, 0) < 0 && errno == EINTR)
        ;
    if (!sandbox__seccomp_available()) {
        err_setf(&support_why, CA_EUNAVAIL,
                 "seccomp filters are not available (a kernel without CONFIG_SECCOMP_FILTER); "
                 "run with --insecure-no-sandbox to run without isolation (unsafe)");
        return;
    }
    if (!sandbox__seccomp_prog(&support_why))
        return;
    support_ok = true;
}

bool sandbox_supported(struct ca_err *why)
{
    pthread_once(&support_once, probe_support);
    if (!support_ok && why)
        *why = support_why;
    return support_ok;
}
