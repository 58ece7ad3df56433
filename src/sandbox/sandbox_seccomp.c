/*
 * sandbox_seccomp.c - the seccomp filter every sandboxed program runs under.
 *
 * Design and invariants:
 * - Default allow; a fixed list of syscalls that a sandboxed build or test
 *   has no business making fails with EPERM (clone3 with ENOSYS, so that
 *   glibc falls back to clone, whose flags a filter can inspect). The list
 *   and the reason for every entry are in docs/internals/sandbox.md.
 * - libseccomp builds the program once per process; we export it as raw BPF
 *   and keep it, so that the clone child loads it with one prctl (no malloc
 *   after clone) and sandbox_start pays nothing for it after the first time.
 * - Syscalls that this libseccomp does not know are skipped: a kernel that
 *   has a syscall our libseccomp cannot name is older than the library's
 *   table would suggest only in exotic set-ups; the docs say so.
 * - Foreign architectures (i386 via int 0x80, x32) kill the process: the
 *   rules are written for the native ABI only.
 */
#include "sandbox/sandbox_internal.h"

#include <errno.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <sched.h>
#include <seccomp.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/buf.h"
#include "core/util.h"
#include "core/banned.h"

#ifndef CLONE_NEWCGROUP
#define CLONE_NEWCGROUP 0x02000000
#endif

/* Denied outright with EPERM. */
static const char *const denied[] = {
    /* other processes' memory and state */
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd", "process_madvise",
    /* the mount table and namespaces */
    "mount", "umount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen",
    "fsmount", "fsconfig", "fspick", "mount_setattr", "unshare", "setns",
    /* kernel keyrings */
    "keyctl", "add_key", "request_key",
    /* large kernel attack surface */
    "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter",
    "io_uring_register", "fanotify_init", "lookup_dcookie",
    /* the machine itself */
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
    "create_module", "get_kernel_syms", "query_module", "uselib", "reboot", "swapon", "swapoff",
    "acct", "quotactl", "quotactl_fd", "syslog", "iopl", "ioperm", "vhangup", "nfsservctl",
    /* file handles bypass path-based confinement */
    "open_by_handle_at", "name_to_handle_at",
    /* clocks shared with the host */
    "settimeofday", "clock_settime", "clock_adjtime", "adjtimex"};

static pthread_once_t once = PTHREAD_ONCE_INIT;
static struct sock_fprog prog;
static bool prog_ok;
static char prog_err[CA_ERR_MSG_MAX];

static int rule(scmp_filter_ctx ctx, int err, const char *name, unsigned n,
                const struct scmp_arg_cmp *cmp)
{
    int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR)
        return 0; /* unknown to this libseccomp */
    int rc = seccomp_rule_add_array(ctx, SCMP_ACT_ERRNO((uint32_t)err), nr, n, cmp);
    if (rc == -EDOM || rc == -EFAULT)
        return 0; /* not a syscall of this architecture */
    if (rc)
        snprintf(prog_err, sizeof(prog_err), "seccomp rule for %s: %s", name, strerror(-rc));
    return rc;
}

static int add_rules(scmp_filter_ctx ctx)
{
    int rc = 0;
    for (size_t i = 0; i < ARRAY_SIZE(denied) && !rc; i++)
        rc = rule(ctx, EPERM, denied[i], 0, NULL);
    if (!rc)
        rc = rule(ctx, ENOSYS, "clone3", 0, NULL);

    /* clone: any namespace flag. Each flag is its own rule (rules OR). */
    static const uint64_t ns_flags[] = {CLONE_NEWNS,  CLONE_NEWUTS, CLONE_NEWIPC,   CLONE_NEWUSER,
                                        CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWCGROUP};
    for (size_t i = 0; i < ARRAY_SIZE(ns_flags) && !rc; i++) {
        struct scmp_arg_cmp c = SCMP_A0_64(SCMP_CMP_MASKED_EQ, ns_flags[i], ns_flags[i]);
        rc = rule(ctx, EPERM, "clone", 1, &c);
    }

    /* personality: only PER_LINUX (0) and the query 0xffffffff. A filter
     * rule compares an argument once, so "neither all zeros nor all ones"
     * is spelled as "some two neighbouring bits differ" (62 rules; the
     * kernel reads the argument as 32 bits). */
    for (unsigned b = 0; b < 31 && !rc; b++) {
        struct scmp_arg_cmp lo = SCMP_A0_32(SCMP_CMP_MASKED_EQ, 3u << b, 1u << b);
        struct scmp_arg_cmp hi = SCMP_A0_32(SCMP_CMP_MASKED_EQ, 3u << b, 2u << b);
        rc = rule(ctx, EPERM, "personality", 1, &lo);
        if (!rc)
            rc = rule(ctx, EPERM, "personality", 1, &hi);
    }

    /* mknod, mknodat: no device nodes (FIFOs and sockets are fine). */
    static const uint64_t dev_types[] = {S_IFCHR, S_IFBLK};
    for (size_t i = 0; i < ARRAY_SIZE(dev_types) && !rc; i++) {
        struct scmp_arg_cmp c1 = SCMP_A1_64(SCMP_CMP_MASKED_EQ, S_IFMT, dev_types[i]);
        struct scmp_arg_cmp c2 = SCMP_A2_64(SCMP_CMP_MASKED_EQ, S_IFMT, dev_types[i]);
        rc = rule(ctx, EPERM, "mknod", 1, &c1);
        if (!rc)
            rc = rule(ctx, EPERM, "mknodat", 1, &c2);
    }

    /* socket, socketpair: AF_UNIX only (the net namespace is empty anyway;
     * this also keeps netlink, packet and the rest of the stack away). */
    if (!rc) {
        struct scmp_arg_cmp c = SCMP_A0_64(SCMP_CMP_NE, AF_UNIX);
        rc = rule(ctx, EPERM, "socket", 1, &c);
        if (!rc)
            rc = rule(ctx, EPERM, "socketpair", 1, &c);
    }

    /* Terminal injection into a tty the caller may have passed as stdio. */
    static const uint64_t tty_ioctls[] = {TIOCSTI, TIOCLINUX};
    for (size_t i = 0; i < ARRAY_SIZE(tty_ioctls) && !rc; i++) {
        struct scmp_arg_cmp c = SCMP_A1_64(SCMP_CMP_MASKED_EQ, 0xffffffffULL, tty_ioctls[i]);
        rc = rule(ctx, EPERM, "ioctl", 1, &c);
    }
    return rc;
}

/* seccomp_export_bpf writes to an fd: export into a memfd and read it back. */
static int export_prog(scmp_filter_ctx ctx)
{
    int fd = memfd_create("ca-seccomp", MFD_CLOEXEC);
    if (fd < 0) {
        snprintf(prog_err, sizeof(prog_err), "memfd_create: %s", strerror(errno));
        return -errno;
    }
    int rc = seccomp_export_bpf(ctx, fd);
    if (rc) {
        snprintf(prog_err, sizeof(prog_err), "seccomp_export_bpf: %s", strerror(-rc));
        close(fd);
        return rc;
    }
    off_t len = lseek(fd, 0, SEEK_END);
    if (len <= 0 || len % (off_t)sizeof(struct sock_filter) != 0 ||
        len / (off_t)sizeof(struct sock_filter) > BPF_MAXINSNS) {
        snprintf(prog_err, sizeof(prog_err), "seccomp_export_bpf: bad program size %lld",
                 (long long)len);
        close(fd);
        return -EINVAL;
    }
    struct sock_filter *f = xmalloc((size_t)len);
    ssize_t got = pread(fd, f, (size_t)len, 0);
    close(fd);
    if (got != len) {
        snprintf(prog_err, sizeof(prog_err), "reading the seccomp program back failed");
        free(f);
        return -EIO;
    }
    prog.len = (unsigned short)(len / (off_t)sizeof(struct sock_filter));
    prog.filter = f; /* kept for the life of the process */
    return 0;
}

static void build(void)
{
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
    if (!ctx) {
        snprintf(prog_err, sizeof(prog_err), "seccomp_init failed");
        return;
    }
    int rc = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
    if (rc)
        snprintf(prog_err, sizeof(prog_err), "seccomp_attr_set: %s", strerror(-rc));
    if (!rc)
        rc = add_rules(ctx);
    if (!rc)
        rc = export_prog(ctx);
    seccomp_release(ctx);
    prog_ok = rc == 0;
}

/* ---- the lockdown filter (sandbox_lockdown_bpf) ---- */

/* Denied with EPERM once a program has started up. */
static const char *const locked[] = {
    /* running other programs */
    "execve", "execveat",
    /* new processes (threads stay: clone with CLONE_THREAD, below) */
    "fork", "vfork",
    /* sockets of any kind, and what turns an inherited one into a new channel */
    "socket", "socketpair", "connect", "bind", "listen", "accept", "accept4"};

static int add_locked_rules(scmp_filter_ctx ctx)
{
    int rc = 0;
    for (size_t i = 0; i < ARRAY_SIZE(locked) && !rc; i++)
        rc = rule(ctx, EPERM, locked[i], 0, NULL);
    /* clone without CLONE_THREAD makes a process (fork, posix_spawn, vfork) */
    if (!rc) {
        struct scmp_arg_cmp c = SCMP_A0_64(SCMP_CMP_MASKED_EQ, CLONE_THREAD, 0);
        rc = rule(ctx, EPERM, "clone", 1, &c);
    }
    if (!rc)
        rc = rule(ctx, ENOSYS, "clone3", 0, NULL);
    return rc;
}

int sandbox_lockdown_bpf(struct buf *out, struct ca_err *err)
{
    prog_err[0] = '\0';
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
    if (!ctx)
        return err_setf(err, CA_EUNAVAIL, "cannot build the lockdown filter: seccomp_init failed");
    int rc = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
    if (!rc)
        rc = add_locked_rules(ctx);
    int fd = -1;
    if (!rc) {
        fd = memfd_create("ca-lockdown", MFD_CLOEXEC);
        rc = fd < 0 ? -errno : seccomp_export_bpf(ctx, fd);
    }
    seccomp_release(ctx);
    off_t len = rc || fd < 0 ? 0 : lseek(fd, 0, SEEK_END);
    if (!rc && (len <= 0 || len % (off_t)sizeof(struct sock_filter) != 0 ||
                len / (off_t)sizeof(struct sock_filter) > BPF_MAXINSNS))
        rc = -EINVAL;
    if (!rc) {
        size_t at = out->len;
        if (buf_reserve(out, (size_t)len))
            rc = -ENOMEM;
        else if (pread(fd, out->data + at, (size_t)len, 0) != len)
            rc = -EIO;
        else
            out->len = at + (size_t)len;
    }
    if (fd >= 0)
        close(fd);
    if (rc)
        return err_setf(err, CA_EUNAVAIL, "cannot build the lockdown filter: %s",
                        prog_err[0] ? prog_err : strerror(-rc));
    return 0;
}

const struct sock_fprog *sandbox__seccomp_prog(struct ca_err *err)
{
    pthread_once(&once, build);
    if (!prog_ok) {
        err_setf(err, CA_EUNAVAIL, "cannot build the seccomp filter: %s", prog_err);
        return NULL;
    }
    return &prog;
}

bool sandbox__seccomp_available(void)
{
    /* SECCOMP_GET_ACTION_AVAIL exists since 4.14; the filter needs ERRNO. */
    uint32_t action = SECCOMP_RET_ERRNO;
    return syscall(SYS_seccomp, SECCOMP_GET_ACTION_AVAIL, 0, &action) == 0;
}
