/*
 * sandbox_init_kill.c - a KILL request (init's loop, sandbox_init_loop.c):
 * a process, its descendants by parent links and its process group, frozen
 * with SIGSTOP round after round until a /proc scan finds nothing new, so
 * that nothing forks its way out, then signalled and continued. Also how
 * init ends everything it started when there is no pid namespace.
 * Async-signal-safe only (sandbox_init.c says why).
 */
#include "sandbox/sandbox_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/banned.h"

/* Processes one /proc scan records (insecure mode sees the whole host). */
#define MAX_PROCS 32768
/* Rounds of stop-the-tree before the signal is sent. */
#define KILL_ROUNDS 64

struct proc_entry {
    int pid, ppid, pgid;
    bool mark;
};

static struct proc_entry procs[MAX_PROCS];
static int stopped[MAX_PROCS];

static int parse_int(const char **p)
{
    int v = 0;
    bool neg = false;
    while (**p == ' ')
        (*p)++;
    if (**p == '-') {
        neg = true;
        (*p)++;
    }
    while (**p >= '0' && **p <= '9')
        v = v * 10 + (*(*p)++ - '0');
    return neg ? -v : v;
}

/* Read pid, ppid and pgid of every process (zombies left out). */
static size_t scan_procs(int self)
{
    int dfd = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return 0;
    size_t n = 0;
    char dbuf[8192];
    for (;;) {
        long got = syscall(SYS_getdents64, dfd, dbuf, sizeof(dbuf));
        if (got <= 0)
            break;
        for (long off = 0; off < got && n < MAX_PROCS;) {
            struct dirent64 *d = (struct dirent64 *)(dbuf + off);
            off += d->d_reclen;
            const char *q = d->d_name;
            if (*q < '0' || *q > '9')
                continue;
            int pid = parse_int(&q);
            if (*q || pid == self)
                continue;
            char path[64], stat[512];
            size_t pos = 0;
            sandbox__init_put_str(path, sizeof(path), &pos, d->d_name);
            sandbox__init_put_str(path, sizeof(path), &pos, "/stat");
            int fd = openat(dfd, path, O_RDONLY | O_CLOEXEC);
            if (fd < 0)
                continue;
            ssize_t r = read(fd, stat, sizeof(stat) - 1);
            close(fd);
            if (r <= 0)
                continue;
            stat[r] = '\0';
            /* "pid (comm) S ppid pgrp ...": comm may hold anything, so
             * start after the last ')'. */
            const char *s = NULL;
            for (const char *c = stat; *c; c++)
                if (*c == ')')
                    s = c;
            if (!s || !s[1] || !s[2])
                continue;
            char state = s[2];
            if (state == 'Z' || state == 'X')
                continue;
            s += 3;
            int ppid = parse_int(&s);
            int pgid = parse_int(&s);
            procs[n++] = (struct proc_entry){pid, ppid, pgid, false};
        }
    }
    close(dfd);
    return n;
}

static bool is_stopped(size_t nstopped, int pid)
{
    for (size_t i = 0; i < nstopped; i++)
        if (stopped[i] == pid)
            return true;
    return false;
}

/*
 * Signal root's descendants (by parent links) and the members of the
 * process group root leads or led, and root itself when include_root. The
 * tree is first frozen with SIGSTOP, round after round until a scan finds
 * nothing new, so that nothing forks its way out while we look; then every
 * frozen process gets sig and SIGCONT (which also resumes a process that
 * was stopped before; a stop signal is not followed by SIGCONT). Returns 0,
 * or ESRCH when nothing matched.
 */
int sandbox__init_kill_tree(int root, int sig, bool include_root)
{
    int self = (int)getpid();
    size_t nstopped = 0;
    /* Signal 0 only asks whether anything matches: then nothing is stopped.
     * A stop signal must not be undone by our SIGCONT. */
    bool stop_sig = sig == SIGSTOP || sig == SIGTSTP || sig == SIGTTIN || sig == SIGTTOU;
    bool freeze = sig != 0;
    for (int round = 0; round < KILL_ROUNDS; round++) {
        size_t n = scan_procs(self);
        for (size_t i = 0; i < n; i++) {
            struct proc_entry *e = &procs[i];
            e->mark = e->pid == root ? include_root : e->pgid == root;
        }
        /* Close over parent links: mark the children of marked processes
         * and of root (whether or not root itself is included). */
        for (bool changed = true; changed;) {
            changed = false;
            for (size_t i = 0; i < n; i++) {
                struct proc_entry *e = &procs[i];
                if (e->mark || e->pid == root)
                    continue;
                bool parent_in = e->ppid == root;
                for (size_t j = 0; j < n && !parent_in; j++)
                    parent_in = procs[j].mark && procs[j].pid == e->ppid;
                if (parent_in)
                    e->mark = changed = true;
            }
        }
        size_t fresh = 0;
        for (size_t i = 0; i < n && nstopped < MAX_PROCS; i++) {
            struct proc_entry *e = &procs[i];
            if (!e->mark || is_stopped(nstopped, e->pid))
                continue;
            if (freeze)
                kill(e->pid, SIGSTOP);
            stopped[nstopped++] = e->pid;
            fresh++;
        }
        if (!fresh)
            break;
    }
    for (size_t i = 0; i < nstopped; i++)
        kill(stopped[i], sig);
    if (freeze && !stop_sig)
        for (size_t i = 0; i < nstopped; i++)
            kill(stopped[i], SIGCONT);
    return nstopped ? 0 : ESRCH;
}

void sandbox__init_handle_kill(void)
{
    const struct sandbox__msg *m = &sandbox__init_st.req.msg;
    int e;
    if (m->pid <= 1 || m->pid == (int)getpid() || m->sig < 0 || m->sig >= NSIG)
        e = EINVAL;
    else
        e = sandbox__init_kill_tree(m->pid, m->sig, m->flags & SANDBOX__KILL_INCLUDE_ROOT);
    struct sandbox__msg r = {.type = SANDBOX__MSG_KILL_REPLY, .seq = m->seq, .err = e};
    sandbox__init_send_msg(&r);
}
