/*
 * sandbox_init_exec.c - starting a program for an EXEC request (init's
 * loop, sandbox_init_loop.c): the request's strings checked and split, a
 * raw clone(SIGCHLD), and in the child the signals reset, the fds given
 * their numbers, the directory changed, the resource limits set (here,
 * never in init, so that init keeps working when a program used up what
 * they allow) and the program executed by the PATH of its own environment.
 * A failure before exec comes back over a close-on-exec pipe as
 * {stage, errno}. Async-signal-safe only (sandbox_init.c says why).
 */
#include "sandbox/sandbox_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/close_range.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/banned.h"

#define DEFAULT_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

static char *strs[SANDBOX__REQ_MAX_STRINGS + 3];

struct exec_report {
    int stage;
    int err;
};

CA_NORETURN static void exec_fail(int fd, int stage, int e)
{
    struct exec_report r = {stage, e};
    ssize_t n;
    do
        n = write(fd, &r, sizeof(r));
    while (n < 0 && errno == EINTR);
    _exit(127);
}

static void set_limit(int resource, uint64_t value, int report_fd)
{
    struct rlimit rl;
    if (getrlimit(resource, &rl) != 0)
        exec_fail(report_fd, SANDBOX__EXEC_RLIMIT, errno);
    rlim_t v = (rlim_t)value;
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < v)
        v = rl.rlim_max; /* we cannot raise what the host already lowered */
    rl.rlim_cur = rl.rlim_max = v;
    if (setrlimit(resource, &rl) != 0)
        exec_fail(report_fd, SANDBOX__EXEC_RLIMIT, errno);
}

/* execvpe with the PATH of envp (not init's own environment). */
static int exec_path(char *const argv[], char *const envp[])
{
    const char *name = argv[0];
    for (const char *p = name; *p; p++)
        if (*p == '/') {
            execve(name, argv, envp);
            return errno;
        }
    const char *path = DEFAULT_PATH;
    for (size_t i = 0; envp[i]; i++)
        if (envp[i][0] == 'P' && envp[i][1] == 'A' && envp[i][2] == 'T' && envp[i][3] == 'H' &&
            envp[i][4] == '=') {
            path = envp[i] + 5;
            break;
        }
    int saved = ENOENT;
    char cand[4096];
    for (const char *p = path;;) {
        const char *end = p;
        while (*end && *end != ':')
            end++;
        size_t pos = 0;
        cand[0] = '\0';
        if (end == p) {
            sandbox__init_put_str(cand, sizeof(cand), &pos, "./");
        } else {
            for (const char *q = p; q < end && pos + 1 < sizeof(cand); q++)
                cand[pos++] = *q;
            cand[pos] = '\0';
            sandbox__init_put_str(cand, sizeof(cand), &pos, "/");
        }
        sandbox__init_put_str(cand, sizeof(cand), &pos, name);
        execve(cand, argv, envp);
        if (errno == EACCES)
            saved = EACCES; /* like execvp: report EACCES if nothing else ran */
        else if (errno != ENOENT && errno != ENOTDIR && errno != ESTALE && errno != ELOOP &&
                 errno != ENAMETOOLONG)
            return errno;
        if (!*end)
            break;
        p = end + 1;
    }
    return saved;
}

CA_NORETURN static void exec_child(const int fds[SANDBOX__EXEC_NFDS], const char *cwd,
                                   char *const argv[], char *const envp[], uint32_t flags,
                                   int report_fd)
{
    struct sigaction dfl;
    memset(&dfl, 0, sizeof(dfl));
    dfl.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; sig++)
        sigaction(sig, &dfl, NULL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);

    if ((flags & SANDBOX__EXEC_NEW_PGROUP) && setpgid(0, 0) != 0)
        exec_fail(report_fd, SANDBOX__EXEC_FDS, errno);
    /* The sources (and the report pipe) may sit on the numbers they are to be
     * given (3, 4, ...): first move every one above them, then dup2. */
    if (report_fd < SANDBOX__EXEC_NFDS) {
        int moved = fcntl(report_fd, F_DUPFD_CLOEXEC, SANDBOX__EXEC_NFDS);
        if (moved < 0)
            _exit(127);
        report_fd = moved;
    }
    int src[SANDBOX__EXEC_NFDS];
    for (int i = 0; i < SANDBOX__EXEC_NFDS; i++) {
        src[i] = -1;
        if (fds[i] < 0 && i > 2)
            continue;
        int from = fds[i] >= 0 ? fds[i] : sandbox__init_st.devnull;
        src[i] = fcntl(from, F_DUPFD_CLOEXEC, SANDBOX__EXEC_NFDS);
        if (src[i] < 0)
            exec_fail(report_fd, SANDBOX__EXEC_FDS, errno);
    }
    for (int i = 0; i < SANDBOX__EXEC_NFDS; i++) {
        if (src[i] < 0) {
            close(i);
            continue;
        }
        if (dup2(src[i], i) < 0)
            exec_fail(report_fd, SANDBOX__EXEC_FDS, errno);
    }
    sandbox__init_close_from(SANDBOX__EXEC_NFDS, ~0U, CLOSE_RANGE_CLOEXEC);
    if (chdir(cwd) != 0)
        exec_fail(report_fd, SANDBOX__EXEC_CHDIR, errno);

    const struct sandbox__plan *p = sandbox__init_st.plan;
    if (p->cpu_seconds)
        set_limit(RLIMIT_CPU, p->cpu_seconds, report_fd);
    if (p->address_space)
        set_limit(RLIMIT_AS, p->address_space, report_fd);
    if (p->nproc)
        set_limit(RLIMIT_NPROC, p->nproc, report_fd);
    if (p->nofile)
        set_limit(RLIMIT_NOFILE, p->nofile, report_fd);
    if (p->fsize)
        set_limit(RLIMIT_FSIZE, p->fsize, report_fd);
    if (p->data)
        set_limit(RLIMIT_DATA, p->data, report_fd);
    set_limit(RLIMIT_CORE, 0, report_fd);

    exec_fail(report_fd, SANDBOX__EXEC_EXEC, exec_path(argv, envp));
}

void sandbox__init_reply_exec(uint32_t seq, int pid, int stage, int e)
{
    struct sandbox__msg m = {
        .type = SANDBOX__MSG_EXEC_REPLY, .seq = seq, .pid = pid, .stage = stage, .err = e};
    sandbox__init_send_msg(&m);
}

void sandbox__init_handle_exec(size_t got, int fds[SANDBOX__EXEC_NFDS])
{
    const struct sandbox__msg *m = &sandbox__init_st.req.msg;
    size_t len = got - sizeof(*m);
    size_t nstr = 1 + (size_t)m->argc + (size_t)m->envc;
    if (m->len != len || len == 0 || sandbox__init_st.req.bytes[got - 1] != '\0' || m->argc == 0 ||
        nstr > SANDBOX__REQ_MAX_STRINGS) {
        sandbox__init_reply_exec(m->seq, -1, SANDBOX__EXEC_REQUEST, EINVAL);
        return;
    }
    /* Split the payload into cwd, argv..., NULL, env..., NULL. */
    char *p = sandbox__init_st.req.bytes + sizeof(*m), *end = sandbox__init_st.req.bytes + got;
    size_t k = 0;
    for (size_t i = 0; i < nstr; i++) {
        if (p >= end) {
            sandbox__init_reply_exec(m->seq, -1, SANDBOX__EXEC_REQUEST, EINVAL);
            return;
        }
        if (i == 1 + (size_t)m->argc)
            strs[k++] = NULL; /* argv ends before the first env entry */
        strs[k++] = p;
        p += sandbox__init_str_len(p) + 1;
    }
    if (p != end) {
        sandbox__init_reply_exec(m->seq, -1, SANDBOX__EXEC_REQUEST, EINVAL);
        return;
    }
    if (m->envc == 0)
        strs[k++] = NULL;
    strs[k++] = NULL;
    const char *cwd = strs[0];
    char *const *argv = &strs[1];
    char *const *envp = &strs[2 + m->argc];

    if (sandbox__init_st.ntracked == SANDBOX__MAX_TRACKED) {
        sandbox__init_reply_exec(m->seq, -1, SANDBOX__EXEC_TOO_MANY, EAGAIN);
        return;
    }
    int rep[2];
    if (pipe2(rep, O_CLOEXEC) != 0) {
        sandbox__init_reply_exec(m->seq, -1, SANDBOX__EXEC_FORK, errno);
        return;
    }
    long pid = syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0);
    if (pid == 0) {
        close(rep[0]);
        exec_child(fds, cwd, argv, envp, m->flags, rep[1]);
    }
    int fork_errno = errno;
    close(rep[1]);
    if (pid < 0) {
        close(rep[0]);
        sandbox__init_reply_exec(m->seq, -1, SANDBOX__EXEC_FORK, fork_errno);
        return;
    }
    struct exec_report r;
    size_t have = 0;
    while (have < sizeof(r)) {
        ssize_t n = read(rep[0], (char *)&r + have, sizeof(r) - have);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        have += (size_t)n;
    }
    close(rep[0]);
    if (have == sizeof(r)) {
        while (waitpid((pid_t)pid, NULL, 0) < 0 && errno == EINTR)
            ;
        sandbox__init_reply_exec(m->seq, -1, r.stage, r.err);
        return;
    }
    sandbox__init_st.tracked[sandbox__init_st.ntracked++] = (int)pid;
    sandbox__init_reply_exec(m->seq, (int)pid, 0, 0);
}
