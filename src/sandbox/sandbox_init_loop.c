/*
 * sandbox_init_loop.c - the sandbox's init once the plan is applied (pid 1
 * of its pid namespace): one single-threaded poll loop over the control
 * socket and a signalfd for SIGCHLD. It reaps every child; exits of
 * programs it started become EXIT events, orphans are reaped silently.
 * Requests (EXEC with its fds, KILL) are read whole or refused. When the
 * control socket closes, init exits, and the kernel kills the rest of the
 * pid namespace; in insecure mode it kills its descendants itself first.
 * Async-signal-safe only (sandbox_init.c says why).
 */
#include "sandbox/sandbox_internal.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/banned.h"

CA_NORETURN static void init_exit(void)
{
    /* Without a pid namespace nothing else would end what we started. */
    if (sandbox__init_st.plan->insecure)
        sandbox__init_kill_tree((int)getpid(), SIGKILL, false);
    _exit(0);
}

static void reap(void)
{
    struct signalfd_siginfo si;
    while (read(sandbox__init_st.sigfd, &si, sizeof(si)) == (ssize_t)sizeof(si))
        ;
    for (;;) {
        int status;
        pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid <= 0)
            return;
        for (size_t i = 0; i < sandbox__init_st.ntracked; i++) {
            if (sandbox__init_st.tracked[i] != pid)
                continue;
            sandbox__init_st.tracked[i] = sandbox__init_st.tracked[--sandbox__init_st.ntracked];
            struct sandbox__msg m = {.type = SANDBOX__MSG_EXIT, .pid = pid, .status = status};
            if (sandbox__init_send_msg(&m) != 0)
                init_exit();
            break;
        }
    }
}

static void handle_request(void)
{
    char cbuf[CMSG_SPACE(SANDBOX__EXEC_NFDS * sizeof(int))];
    struct iovec iov = {sandbox__init_st.req.bytes, sizeof(sandbox__init_st.req.bytes) - 1};
    struct msghdr mh = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof(cbuf)};
    ssize_t got = recvmsg(sandbox__init_st.ctl, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    if (got < 0 && (errno == EINTR || errno == EAGAIN))
        return;
    if (got <= 0)
        init_exit(); /* the host side is gone */
    int fds[SANDBOX__EXEC_NFDS];
    int nfds = 0, recvd[SANDBOX__EXEC_NFDS];
    for (int i = 0; i < SANDBOX__EXEC_NFDS; i++)
        fds[i] = -1;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < k && nfds < SANDBOX__EXEC_NFDS; i++)
            memcpy(&recvd[nfds++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
    }
    const struct sandbox__msg *m = &sandbox__init_st.req.msg;
    bool whole = !(mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC));
    if ((size_t)got < sizeof(*m)) {
        /* Not even a header: nothing to answer. */
    } else if (m->type == SANDBOX__MSG_EXEC) {
        int k = 0;
        for (int i = 0; i < SANDBOX__EXEC_NFDS; i++)
            if (m->fd_mask & (1u << i))
                fds[i] = k < nfds ? recvd[k++] : -1;
        if (!whole)
            sandbox__init_reply_exec(m->seq, -1, SANDBOX__EXEC_REQUEST, EMSGSIZE);
        else if (k != nfds || __builtin_popcount(m->fd_mask) != nfds ||
                 (m->fd_mask >> SANDBOX__EXEC_NFDS) != 0)
            sandbox__init_reply_exec(m->seq, -1, SANDBOX__EXEC_REQUEST, EBADF);
        else
            sandbox__init_handle_exec((size_t)got, fds);
    } else if (m->type == SANDBOX__MSG_KILL) {
        sandbox__init_handle_kill();
    } else {
        sandbox__init_reply_exec(m->seq, -1, SANDBOX__EXEC_REQUEST, EINVAL);
    }
    for (int i = 0; i < nfds; i++)
        close(recvd[i]);
}

CA_NORETURN void sandbox__init_serve(void)
{
    for (;;) {
        struct pollfd pfd[2] = {{.fd = sandbox__init_st.ctl, .events = POLLIN},
                                {.fd = sandbox__init_st.sigfd, .events = POLLIN}};
        int n = poll(pfd, 2, -1);
        if (n < 0 && errno != EINTR)
            init_exit();
        reap();
        if (n > 0 && pfd[0].revents)
            handle_request();
    }
}
