/*
 * sandbox_init.c - the clone child: it applies the plan, then serves as the
 * sandbox's init (pid 1 of its pid namespace).
 *
 * Design and invariants:
 * - The child is a fork-style copy (clone without CLONE_VM) of one thread of
 *   a possibly multi-threaded host. Locks held by other host threads stay
 *   held here forever, so from the first instruction to _exit this file
 *   makes only async-signal-safe calls: raw syscalls, no malloc, no stdio,
 *   no glibc fork() (its atfork handlers take malloc's locks); programs are
 *   started with a raw clone(SIGCHLD) as well.
 * - Order (bubblewrap's): fds closed, no-new-privs, wait for the host's
 *   uid/gid maps, new session, the mount ops of the plan in order (tmpfs
 *   root, pivot_root, binds, /proc, /tmp, /dev, old root detached, root
 *   read-only), hostname, capabilities dropped, seccomp filter last.
 * - Every failure is reported as {step, op index, errno} on the control
 *   socket; the host, which holds the plan, turns it into a message.
 * - init is single-threaded: one poll loop over the control socket and a
 *   signalfd for SIGCHLD. It reaps every child; exits of programs it started
 *   become EXIT events, orphans are reaped silently. When the control socket
 *   closes, init exits, and the kernel kills the rest of the pid namespace.
 *   In insecure mode (no pid namespace) init is a child subreaper and kills
 *   its descendants itself before it exits.
 * - Resource limits are set in each program between fork and exec, never in
 *   init: init keeps working (it can still fork to start a program) when a
 *   runaway program has used up what the limits allow.
 * - The state below is static on purpose: it exists only in this child's
 *   private copy of memory, and it is too big for the stack of a host thread.
 */
#include "sandbox/sandbox_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/close_range.h>
#include <linux/openat2.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/banned.h"

/* Unified syscall numbers (the same on every architecture since 5.1). */
#ifndef SYS_open_tree
#define SYS_open_tree 428
#endif
#ifndef SYS_move_mount
#define SYS_move_mount 429
#endif
#ifndef SYS_close_range
#define SYS_close_range 436
#endif
#ifndef SYS_openat2
#define SYS_openat2 437
#endif
#ifndef SYS_mount_setattr
#define SYS_mount_setattr 442
#endif
#ifndef AT_RECURSIVE
#define AT_RECURSIVE 0x8000
#endif
#define OPEN_TREE_CLONE_ 1
#define MOVE_MOUNT_F_EMPTY_PATH_ 0x4
#define MOVE_MOUNT_T_EMPTY_PATH_ 0x40

/* struct mount_attr of mount_setattr(2); ours, as headers disagree on it. */
struct mount_attr_ {
    uint64_t attr_set, attr_clr, propagation, userns_fd;
};

#define DEFAULT_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
/* Processes one /proc scan records (insecure mode sees the whole host). */
#define MAX_PROCS 32768
/* Bytes of /proc/self/mountinfo the legacy remount walk reads. */
#define MOUNTINFO_MAX (256 * 1024)
/* Rounds of stop-the-tree before the signal is sent. */
#define KILL_ROUNDS 64

struct proc_entry {
    int pid, ppid, pgid;
    bool mark;
};

static struct {
    const struct sandbox__plan *plan;
    int ctl, sigfd, devnull;
    bool legacy; /* the kernel lacks the new mount API */
    int tracked[SANDBOX__MAX_TRACKED];
    size_t ntracked;
    /* One EXEC request: header + strings (+1 for a guard NUL). */
    union {
        struct sandbox__msg msg;
        char bytes[sizeof(struct sandbox__msg) + SANDBOX__REQ_MAX + 1];
    } req;
    char *strs[SANDBOX__REQ_MAX_STRINGS + 3];
    struct proc_entry procs[MAX_PROCS];
    int stopped[MAX_PROCS];
    char mountinfo[MOUNTINFO_MAX];
} st;

static bool legacy_forced;

void sandbox__force_legacy_mounts(bool on)
{
    legacy_forced = on;
}

/* ---- tiny async-signal-safe helpers ---- */

static size_t str_len(const char *s)
{
    size_t n = 0;
    while (s[n])
        n++;
    return n;
}

static bool str_eq(const char *a, const char *b)
{
    while (*a && *a == *b)
        a++, b++;
    return *a == *b;
}

/* Append the decimal form of v to buf at *pos (bounded by cap). */
static void put_uint(char *buf, size_t cap, size_t *pos, unsigned long v)
{
    char tmp[24];
    size_t n = 0;
    do
        tmp[n++] = (char)('0' + v % 10);
    while ((v /= 10) && n < sizeof(tmp));
    while (n && *pos + 1 < cap)
        buf[(*pos)++] = tmp[--n];
    buf[*pos] = '\0';
}

static void put_str(char *buf, size_t cap, size_t *pos, const char *s)
{
    while (*s && *pos + 1 < cap)
        buf[(*pos)++] = *s++;
    buf[*pos] = '\0';
}

static int send_msg(const struct sandbox__msg *m)
{
    ssize_t n;
    do
        n = send(st.ctl, m, sizeof(*m), MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    return n == (ssize_t)sizeof(*m) ? 0 : -1;
}

CA_NORETURN static void setup_fail(int step, int index, int e)
{
    struct sandbox__msg m = {
        .type = SANDBOX__MSG_SETUP_FAIL, .stage = step, .index = index, .err = e};
    send_msg(&m);
    _exit(1);
}

/* close_range, or a walk of /proc/self/fd where it is missing. */
static void close_from(unsigned lo, unsigned hi, int flags)
{
    if (lo > hi)
        return;
    if (syscall(SYS_close_range, lo, hi, flags) == 0)
        return;
    int dfd = open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return;
    char dbuf[4096];
    for (;;) {
        long n = syscall(SYS_getdents64, dfd, dbuf, sizeof(dbuf));
        if (n <= 0)
            break;
        for (long off = 0; off < n;) {
            struct dirent64 *d = (struct dirent64 *)(dbuf + off);
            off += d->d_reclen;
            unsigned fd = 0;
            const char *p = d->d_name;
            if (*p < '0' || *p > '9')
                continue;
            while (*p >= '0' && *p <= '9')
                fd = fd * 10 + (unsigned)(*p++ - '0');
            if (fd < lo || fd > hi || (int)fd == dfd)
                continue;
            if (flags & CLOSE_RANGE_CLOEXEC)
                fcntl((int)fd, F_SETFD, FD_CLOEXEC);
            else
                close((int)fd);
        }
    }
    close(dfd);
}

/* ---- mounts ---- */

static bool use_legacy(void)
{
    return legacy_forced || st.legacy;
}

/* A kernel without open_tree/move_mount (5.2) or mount_setattr (5.12):
 * this and every later mount uses classic mount(2). */
static bool fall_back(int e)
{
    if (e != ENOSYS)
        return false;
    st.legacy = true;
    return true;
}

static unsigned long attr_to_ms(unsigned attr)
{
    unsigned long f = 0;
    if (attr & SANDBOX__ATTR_RDONLY)
        f |= MS_RDONLY;
    if (attr & SANDBOX__ATTR_NOSUID)
        f |= MS_NOSUID;
    if (attr & SANDBOX__ATTR_NODEV)
        f |= MS_NODEV;
    if (attr & SANDBOX__ATTR_NOEXEC)
        f |= MS_NOEXEC;
    return f;
}

/* The per-mount flags a remount must keep (in a user namespace the kernel
 * refuses to clear flags locked by a more privileged namespace). */
static unsigned long statfs_to_ms(unsigned long f)
{
    unsigned long ms = 0;
    if (f & ST_RDONLY)
        ms |= MS_RDONLY;
    if (f & ST_NOSUID)
        ms |= MS_NOSUID;
    if (f & ST_NODEV)
        ms |= MS_NODEV;
    if (f & ST_NOEXEC)
        ms |= MS_NOEXEC;
    if (f & ST_NOATIME)
        ms |= MS_NOATIME;
    if (f & ST_NODIRATIME)
        ms |= MS_NODIRATIME;
    if (f & ST_RELATIME)
        ms |= MS_RELATIME;
    return ms;
}

static int remount_one(const char *path, unsigned attr)
{
    struct statfs sf;
    if (statfs(path, &sf) != 0)
        return errno;
    unsigned long flags = MS_REMOUNT | MS_BIND | statfs_to_ms(sf.f_flags) | attr_to_ms(attr);
    return mount(NULL, path, NULL, flags, NULL) == 0 ? 0 : errno;
}

/* Decode a mountinfo field (octal escapes such as \040) into out. */
static void mi_unescape(const char *f, const char *fe, char *out, size_t cap)
{
    size_t k = 0;
    while (f < fe && k + 1 < cap) {
        if (*f == '\\' && fe - f >= 4) {
            out[k++] = (char)(((f[1] - '0') << 6) | ((f[2] - '0') << 3) | (f[3] - '0'));
            f += 4;
        } else {
            out[k++] = *f++;
        }
    }
    out[k] = '\0';
}

/* mp is path or lies beneath it. */
static bool at_or_under(const char *mp, const char *path)
{
    size_t n = str_len(path);
    if (n == 1 && path[0] == '/')
        return true;
    for (size_t i = 0; i < n; i++)
        if (mp[i] != path[i])
            return false;
    return mp[n] == '\0' || mp[n] == '/';
}

/*
 * Make every mount at or beneath path match attr (classic mount(2) only):
 * MS_REMOUNT|MS_BIND of each mount point listed in /proc/self/mountinfo.
 */
static int remount_tree(const char *path, unsigned attr)
{
    int fd = open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno;
    size_t len = 0;
    for (;;) {
        ssize_t n = read(fd, st.mountinfo + len, sizeof(st.mountinfo) - 1 - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        len += (size_t)n;
        if (len == sizeof(st.mountinfo) - 1) {
            close(fd);
            return EOVERFLOW;
        }
    }
    close(fd);
    st.mountinfo[len] = '\0';
    char mp[4096];
    for (char *line = st.mountinfo; *line;) {
        char *end = line;
        while (*end && *end != '\n')
            end++;
        /* Field 5 (1-based) is the mount point. */
        char *f = line;
        for (int k = 0; k < 4 && f < end; k++) {
            while (f < end && *f != ' ')
                f++;
            if (f < end)
                f++;
        }
        char *fe = f;
        while (fe < end && *fe != ' ')
            fe++;
        mi_unescape(f, fe, mp, sizeof(mp));
        if (fe > f && at_or_under(mp, path)) {
            int e = remount_one(mp, attr);
            /* A mount beneath path that we cannot reach is hidden anyway. */
            if (e && (str_eq(mp, path) || (e != ENOENT && e != EACCES)))
                return e;
        }
        line = *end ? end + 1 : end;
    }
    return 0;
}

/* Clone the tree at src_fd/src (recursively), set attr on it, attach it at
 * dst_fd/dst. fds with "" paths use the *_EMPTY_PATH forms. */
static int bind_new(int src_fd, const char *src, int dst_fd, const char *dst, unsigned attr)
{
    unsigned otf = OPEN_TREE_CLONE_ | O_CLOEXEC | AT_RECURSIVE | (*src ? 0 : AT_EMPTY_PATH);
    int tree = (int)syscall(SYS_open_tree, src_fd, src, otf);
    if (tree < 0)
        return errno;
    int e = 0;
    if (attr) {
        struct mount_attr_ a = {.attr_set = attr};
        if (syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH | AT_RECURSIVE, &a, sizeof(a)) != 0)
            e = errno;
    }
    unsigned mmf = MOVE_MOUNT_F_EMPTY_PATH_ | (*dst ? 0 : MOVE_MOUNT_T_EMPTY_PATH_);
    if (!e && syscall(SYS_move_mount, tree, "", dst_fd, dst, mmf) != 0)
        e = errno;
    close(tree);
    return e;
}

/*
 * Binds for a sandbox mapped to another host user (plan->foreign_ids): the
 * source trees are cloned first, while init still has the caller's identity
 * (so a source under a directory only the caller may enter, like /root, can
 * be reached), and attached later, when init has the sandbox's ids. Indexed
 * by op; -1 where none.
 */
#define MAX_PRE_OPS 1024
static int pre_tree[MAX_PRE_OPS];

static void preopen_binds(const struct sandbox__plan *p)
{
    if (p->nops > MAX_PRE_OPS)
        setup_fail(SANDBOX__STEP_IDS, 0, E2BIG);
    if (use_legacy())
        setup_fail(SANDBOX__STEP_IDS, 0, EOPNOTSUPP); /* needs open_tree (5.12+) */
    size_t pre = str_len(SANDBOX__OLDROOT);
    for (size_t i = 0; i < p->nops; i++) {
        const struct sandbox__op *op = &p->ops[i];
        pre_tree[i] = -1;
        if (op->kind != SANDBOX__OP_BIND)
            continue;
        const char *src = op->src;
        bool prefixed = true;
        for (size_t k = 0; k < pre && prefixed; k++)
            prefixed = src[k] == SANDBOX__OLDROOT[k];
        if (prefixed)
            src += pre;
        int tree =
            (int)syscall(SYS_open_tree, AT_FDCWD, src, OPEN_TREE_CLONE_ | O_CLOEXEC | AT_RECURSIVE);
        if (tree < 0)
            setup_fail(SANDBOX__STEP_OP, (int)i, errno);
        pre_tree[i] = tree;
    }
}

static int attach_tree(int *tree, const char *dst, unsigned attr)
{
    int e = 0;
    if (attr) {
        struct mount_attr_ a = {.attr_set = attr};
        if (syscall(SYS_mount_setattr, *tree, "", AT_EMPTY_PATH | AT_RECURSIVE, &a, sizeof(a)) != 0)
            e = errno;
    }
    if (!e && syscall(SYS_move_mount, *tree, "", AT_FDCWD, dst, MOVE_MOUNT_F_EMPTY_PATH_) != 0)
        e = errno;
    close(*tree);
    *tree = -1;
    return e;
}

static int op_bind(const struct sandbox__op *op, size_t index)
{
    if (st.plan->foreign_ids && index < MAX_PRE_OPS && pre_tree[index] >= 0)
        return attach_tree(&pre_tree[index], op->dst, op->attr);
    if (!use_legacy()) {
        int e = bind_new(AT_FDCWD, op->src, AT_FDCWD, op->dst, op->attr);
        if (!fall_back(e))
            return e;
    }
    if (mount(op->src, op->dst, NULL, MS_BIND | MS_REC, NULL) != 0)
        return errno;
    return op->attr ? remount_tree(op->dst, op->attr) : 0;
}

/*
 * Open path as O_PATH without following any symlink: openat2 refuses them
 * in every component; the fallback (before 5.6) only in the last one. A
 * final symlink is opened as itself by O_NOFOLLOW, so refuse it by type.
 */
static int open_nofollow(const char *path)
{
    struct open_how how = {.flags = O_PATH | O_NOFOLLOW | O_CLOEXEC,
                           .resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS};
    int fd = (int)syscall(SYS_openat2, AT_FDCWD, path, &how, sizeof(how));
    if (fd < 0 && errno == ENOSYS)
        fd = open(path, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -1;
    struct stat sb;
    if (fstat(fd, &sb) != 0 || S_ISLNK(sb.st_mode)) {
        close(fd);
        errno = ELOOP;
        return -1;
    }
    return fd;
}

static int op_bind_self(const struct sandbox__op *op)
{
    int fd = open_nofollow(op->dst);
    if (fd < 0)
        return errno;
    int e = ENOSYS;
    if (!use_legacy())
        e = bind_new(fd, "", fd, "", op->attr);
    if (fall_back(e)) {
        char self[64];
        size_t pos = 0;
        put_str(self, sizeof(self), &pos, "/proc/self/fd/");
        put_uint(self, sizeof(self), &pos, (unsigned long)fd);
        e = mount(self, self, NULL, MS_BIND | MS_REC, NULL) == 0 ? 0 : errno;
        if (!e)
            e = remount_tree(op->dst, op->attr);
    }
    close(fd);
    return e;
}

static int op_setattr(const struct sandbox__op *op)
{
    if (!use_legacy()) {
        struct mount_attr_ a = {.attr_set = op->attr};
        int e = syscall(SYS_mount_setattr, AT_FDCWD, op->dst, 0, &a, sizeof(a)) == 0 ? 0 : errno;
        if (!fall_back(e))
            return e;
    }
    return remount_one(op->dst, op->attr);
}

static int apply_op(const struct sandbox__op *op, size_t index)
{
    switch (op->kind) {
    case SANDBOX__OP_MOUNT:
        return mount(op->src, op->dst, op->fstype, op->flags, op->data) == 0 ? 0 : errno;
    case SANDBOX__OP_PIVOT:
        if (syscall(SYS_pivot_root, op->src, op->dst) != 0)
            return errno;
        return chdir("/") == 0 ? 0 : errno;
    case SANDBOX__OP_MKDIR:
        if (mkdir(op->dst, op->mode) != 0 && errno != EEXIST)
            return errno;
        return 0;
    case SANDBOX__OP_FILE: {
        int fd = open(op->dst, O_CREAT | O_WRONLY | O_NOFOLLOW | O_CLOEXEC, op->mode);
        if (fd < 0)
            return errno;
        close(fd);
        return 0;
    }
    case SANDBOX__OP_SYMLINK:
        return symlink(op->src, op->dst) == 0 ? 0 : errno;
    case SANDBOX__OP_BIND:
        return op_bind(op, index);
    case SANDBOX__OP_BIND_SELF:
        return op_bind_self(op);
    case SANDBOX__OP_SETATTR:
        return op_setattr(op);
    case SANDBOX__OP_UMOUNT:
        if (umount2(op->dst, MNT_DETACH) != 0)
            return errno;
        return rmdir(op->dst) == 0 ? 0 : errno;
    }
    return EINVAL;
}

/* ---- capabilities and seccomp ---- */

static int drop_caps(void)
{
    for (unsigned long cap = 0; cap < 64; cap++)
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL)
            return errno;
    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); /* EINVAL before 4.3: none */
    struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
    struct __user_cap_data_struct d[2];
    memset(d, 0, sizeof(d));
    return syscall(SYS_capset, &h, d) == 0 ? 0 : errno;
}

/* ---- starting programs ---- */

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
            put_str(cand, sizeof(cand), &pos, "./");
        } else {
            for (const char *q = p; q < end && pos + 1 < sizeof(cand); q++)
                cand[pos++] = *q;
            cand[pos] = '\0';
            put_str(cand, sizeof(cand), &pos, "/");
        }
        put_str(cand, sizeof(cand), &pos, name);
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
        int from = fds[i] >= 0 ? fds[i] : st.devnull;
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
    close_from(SANDBOX__EXEC_NFDS, ~0U, CLOSE_RANGE_CLOEXEC);
    if (chdir(cwd) != 0)
        exec_fail(report_fd, SANDBOX__EXEC_CHDIR, errno);

    const struct sandbox__plan *p = st.plan;
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

static void reply_exec(uint32_t seq, int pid, int stage, int e)
{
    struct sandbox__msg m = {
        .type = SANDBOX__MSG_EXEC_REPLY, .seq = seq, .pid = pid, .stage = stage, .err = e};
    send_msg(&m);
}

static void handle_exec(size_t got, int fds[SANDBOX__EXEC_NFDS])
{
    const struct sandbox__msg *m = &st.req.msg;
    size_t len = got - sizeof(*m);
    size_t nstr = 1 + (size_t)m->argc + (size_t)m->envc;
    if (m->len != len || len == 0 || st.req.bytes[got - 1] != '\0' || m->argc == 0 ||
        nstr > SANDBOX__REQ_MAX_STRINGS) {
        reply_exec(m->seq, -1, SANDBOX__EXEC_REQUEST, EINVAL);
        return;
    }
    /* Split the payload into cwd, argv..., NULL, env..., NULL. */
    char *p = st.req.bytes + sizeof(*m), *end = st.req.bytes + got;
    size_t k = 0;
    for (size_t i = 0; i < nstr; i++) {
        if (p >= end) {
            reply_exec(m->seq, -1, SANDBOX__EXEC_REQUEST, EINVAL);
            return;
        }
        if (i == 1 + (size_t)m->argc)
            st.strs[k++] = NULL; /* argv ends before the first env entry */
        st.strs[k++] = p;
        p += str_len(p) + 1;
    }
    if (p != end) {
        reply_exec(m->seq, -1, SANDBOX__EXEC_REQUEST, EINVAL);
        return;
    }
    if (m->envc == 0)
        st.strs[k++] = NULL;
    st.strs[k++] = NULL;
    const char *cwd = st.strs[0];
    char *const *argv = &st.strs[1];
    char *const *envp = &st.strs[2 + m->argc];

    if (st.ntracked == SANDBOX__MAX_TRACKED) {
        reply_exec(m->seq, -1, SANDBOX__EXEC_TOO_MANY, EAGAIN);
        return;
    }
    int rep[2];
    if (pipe2(rep, O_CLOEXEC) != 0) {
        reply_exec(m->seq, -1, SANDBOX__EXEC_FORK, errno);
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
        reply_exec(m->seq, -1, SANDBOX__EXEC_FORK, fork_errno);
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
        reply_exec(m->seq, -1, r.stage, r.err);
        return;
    }
    st.tracked[st.ntracked++] = (int)pid;
    reply_exec(m->seq, (int)pid, 0, 0);
}

/* ---- killing process trees ---- */

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
            put_str(path, sizeof(path), &pos, d->d_name);
            put_str(path, sizeof(path), &pos, "/stat");
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
            st.procs[n++] = (struct proc_entry){pid, ppid, pgid, false};
        }
    }
    close(dfd);
    return n;
}

static bool is_stopped(size_t nstopped, int pid)
{
    for (size_t i = 0; i < nstopped; i++)
        if (st.stopped[i] == pid)
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
static int kill_tree(int root, int sig, bool include_root)
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
            struct proc_entry *e = &st.procs[i];
            e->mark = e->pid == root ? include_root : e->pgid == root;
        }
        /* Close over parent links: mark the children of marked processes
         * and of root (whether or not root itself is included). */
        for (bool changed = true; changed;) {
            changed = false;
            for (size_t i = 0; i < n; i++) {
                struct proc_entry *e = &st.procs[i];
                if (e->mark || e->pid == root)
                    continue;
                bool parent_in = e->ppid == root;
                for (size_t j = 0; j < n && !parent_in; j++)
                    parent_in = st.procs[j].mark && st.procs[j].pid == e->ppid;
                if (parent_in)
                    e->mark = changed = true;
            }
        }
        size_t fresh = 0;
        for (size_t i = 0; i < n && nstopped < MAX_PROCS; i++) {
            struct proc_entry *e = &st.procs[i];
            if (!e->mark || is_stopped(nstopped, e->pid))
                continue;
            if (freeze)
                kill(e->pid, SIGSTOP);
            st.stopped[nstopped++] = e->pid;
            fresh++;
        }
        if (!fresh)
            break;
    }
    for (size_t i = 0; i < nstopped; i++)
        kill(st.stopped[i], sig);
    if (freeze && !stop_sig)
        for (size_t i = 0; i < nstopped; i++)
            kill(st.stopped[i], SIGCONT);
    return nstopped ? 0 : ESRCH;
}

static void handle_kill(void)
{
    const struct sandbox__msg *m = &st.req.msg;
    int e;
    if (m->pid <= 1 || m->pid == (int)getpid() || m->sig < 0 || m->sig >= NSIG)
        e = EINVAL;
    else
        e = kill_tree(m->pid, m->sig, m->flags & SANDBOX__KILL_INCLUDE_ROOT);
    struct sandbox__msg r = {.type = SANDBOX__MSG_KILL_REPLY, .seq = m->seq, .err = e};
    send_msg(&r);
}

/* ---- the loop ---- */

CA_NORETURN static void init_exit(void)
{
    /* Without a pid namespace nothing else would end what we started. */
    if (st.plan->insecure)
        kill_tree((int)getpid(), SIGKILL, false);
    _exit(0);
}

static void reap(void)
{
    struct signalfd_siginfo si;
    while (read(st.sigfd, &si, sizeof(si)) == (ssize_t)sizeof(si))
        ;
    for (;;) {
        int status;
        pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid <= 0)
            return;
        for (size_t i = 0; i < st.ntracked; i++) {
            if (st.tracked[i] != pid)
                continue;
            st.tracked[i] = st.tracked[--st.ntracked];
            struct sandbox__msg m = {.type = SANDBOX__MSG_EXIT, .pid = pid, .status = status};
            if (send_msg(&m) != 0)
                init_exit();
            break;
        }
    }
}

static void handle_request(void)
{
    char cbuf[CMSG_SPACE(SANDBOX__EXEC_NFDS * sizeof(int))];
    struct iovec iov = {st.req.bytes, sizeof(st.req.bytes) - 1};
    struct msghdr mh = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof(cbuf)};
    ssize_t got = recvmsg(st.ctl, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
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
    const struct sandbox__msg *m = &st.req.msg;
    bool whole = !(mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC));
    if ((size_t)got < sizeof(*m)) {
        /* Not even a header: nothing to answer. */
    } else if (m->type == SANDBOX__MSG_EXEC) {
        int k = 0;
        for (int i = 0; i < SANDBOX__EXEC_NFDS; i++)
            if (m->fd_mask & (1u << i))
                fds[i] = k < nfds ? recvd[k++] : -1;
        if (!whole)
            reply_exec(m->seq, -1, SANDBOX__EXEC_REQUEST, EMSGSIZE);
        else if (k != nfds || __builtin_popcount(m->fd_mask) != nfds ||
                 (m->fd_mask >> SANDBOX__EXEC_NFDS) != 0)
            reply_exec(m->seq, -1, SANDBOX__EXEC_REQUEST, EBADF);
        else
            handle_exec((size_t)got, fds);
    } else if (m->type == SANDBOX__MSG_KILL) {
        handle_kill();
    } else {
        reply_exec(m->seq, -1, SANDBOX__EXEC_REQUEST, EINVAL);
    }
    for (int i = 0; i < nfds; i++)
        close(recvd[i]);
}

CA_NORETURN static void serve(void)
{
    for (;;) {
        struct pollfd pfd[2] = {{.fd = st.ctl, .events = POLLIN},
                                {.fd = st.sigfd, .events = POLLIN}};
        int n = poll(pfd, 2, -1);
        if (n < 0 && errno != EINTR)
            init_exit();
        reap();
        if (n > 0 && pfd[0].revents)
            handle_request();
    }
}

/* ---- set-up ---- */

/* Keep only ctl (moved above 2), and /dev/null on 0, 1, 2 and one more fd. */
static void setup_fds(void)
{
    if (st.ctl < 3) {
        int moved = fcntl(st.ctl, F_DUPFD_CLOEXEC, 3);
        if (moved < 0)
            _exit(1); /* cannot report: the socket is the report channel */
        st.ctl = moved;
    }
    close_from(0, (unsigned)st.ctl - 1, 0);
    close_from((unsigned)st.ctl + 1, ~0U, 0);
    int fd = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (fd < 0)
        setup_fail(SANDBOX__STEP_FDS, 0, errno);
    for (int i = 0; i < 3; i++)
        if (fd != i && dup2(fd, i) < 0)
            setup_fail(SANDBOX__STEP_FDS, 0, errno);
    st.devnull = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    if (st.devnull < 0)
        setup_fail(SANDBOX__STEP_FDS, 0, errno);
    if (fd > 2)
        close(fd);
}

static void wait_go(void)
{
    struct sandbox__msg m;
    ssize_t n;
    do
        n = recv(st.ctl, &m, sizeof(m), 0);
    while (n < 0 && errno == EINTR);
    if (n != (ssize_t)sizeof(m) || m.type != SANDBOX__MSG_GO)
        _exit(1); /* the host gave up on us */
}

void sandbox__child_main(const struct sandbox__plan *plan, int ctl)
{
    st.plan = plan;
    st.ctl = ctl;
    st.sigfd = st.devnull = -1;

    /* The host blocked every signal around clone; its handlers must never
     * run here. SIGCHLD stays blocked for the signalfd. */
    struct sigaction dfl;
    memset(&dfl, 0, sizeof(dfl));
    dfl.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; sig++)
        sigaction(sig, &dfl, NULL);

    setup_fds();
    prctl(PR_SET_NAME, "sandbox-init", 0, 0, 0); /* what ps shows, inside and out */
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        setup_fail(SANDBOX__STEP_NNP, 0, errno);
    wait_go();
    /* Mapped to another host user (a root caller): become it, without the
     * supplementary groups the caller had. Our own ids need nothing. Raw
     * system calls: glibc's wrappers would signal the caller's other threads,
     * which do not exist in this copy. */
    if (plan->foreign_ids && !plan->insecure) {
        preopen_binds(plan);
        if (syscall(SYS_setgroups, 0, NULL) != 0 || syscall(SYS_setresgid, 0, 0, 0) != 0 ||
            syscall(SYS_setresuid, 0, 0, 0) != 0)
            setup_fail(SANDBOX__STEP_IDS, 0, errno);
    }
    setsid(); /* no controlling terminal: TIOCSTI and job-control signals */

    if (!plan->insecure) {
        for (size_t i = 0; i < plan->nops; i++) {
            int e = apply_op(&plan->ops[i], i);
            if (e && !(e == ENOENT && plan->ops[i].optional))
                setup_fail(SANDBOX__STEP_OP, (int)i, e);
        }
        if (sethostname(plan->hostname, str_len(plan->hostname)) != 0)
            setup_fail(SANDBOX__STEP_HOSTNAME, 0, errno);
        if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) /* keeps /proc/1/fd and mem private */
            setup_fail(SANDBOX__STEP_CAPS, 0, errno);
        int e = drop_caps();
        if (e)
            setup_fail(SANDBOX__STEP_CAPS, 0, e);
    } else if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0) {
        setup_fail(SANDBOX__STEP_SUBREAPER, 0, errno);
    }

    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    if (sigprocmask(SIG_SETMASK, &chld, NULL) != 0)
        setup_fail(SANDBOX__STEP_SIGNALS, 0, errno);
    st.sigfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
    if (st.sigfd < 0)
        setup_fail(SANDBOX__STEP_SIGNALS, 0, errno);

    if (plan->seccomp && prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, plan->seccomp, 0, 0) != 0)
        setup_fail(SANDBOX__STEP_SECCOMP, 0, errno);

    struct sandbox__msg ready = {.type = SANDBOX__MSG_READY};
    if (send_msg(&ready) != 0)
        _exit(1);
    serve();
}
