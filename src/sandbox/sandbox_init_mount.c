/*
 * sandbox_init_mount.c - the plan's mount operations, applied in the clone
 * child (sandbox_init.c): mounts, pivot_root, directories, files, symlinks,
 * binds and attribute changes. Binds use the new mount API (open_tree,
 * mount_setattr on the detached copy, move_mount), so nothing is ever
 * visible half-set-up; a read-only path is opened without following any
 * symlink and bound from that fd onto itself. On kernels without it (or
 * with sandbox__force_legacy_mounts) binds are mount(MS_BIND|MS_REC) plus a
 * remount of every mount at or beneath the target, keeping the flags a user
 * namespace may not clear. Async-signal-safe only (sandbox_init.c says why).
 */
#include "sandbox/sandbox_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/banned.h"

/* Unified syscall numbers (the same on every architecture since 5.1). */
#ifndef SYS_open_tree
#define SYS_open_tree 428
#endif
#ifndef SYS_move_mount
#define SYS_move_mount 429
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

/* Bytes of /proc/self/mountinfo the legacy remount walk reads. */
#define MOUNTINFO_MAX (256 * 1024)

static bool legacy; /* the kernel lacks the new mount API */
static char mountinfo[MOUNTINFO_MAX];

static bool legacy_forced;

void sandbox__force_legacy_mounts(bool on)
{
    legacy_forced = on;
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

static bool use_legacy(void)
{
    return legacy_forced || legacy;
}

/* A kernel without open_tree/move_mount (5.2) or mount_setattr (5.12):
 * this and every later mount uses classic mount(2). */
static bool fall_back(int e)
{
    if (e != ENOSYS)
        return false;
    legacy = true;
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
    size_t n = sandbox__init_str_len(path);
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
        ssize_t n = read(fd, mountinfo + len, sizeof(mountinfo) - 1 - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        len += (size_t)n;
        if (len == sizeof(mountinfo) - 1) {
            close(fd);
            return EOVERFLOW;
        }
    }
    close(fd);
    mountinfo[len] = '\0';
    char mp[4096];
    for (char *line = mountinfo; *line;) {
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

void sandbox__init_preopen_binds(const struct sandbox__plan *p)
{
    if (p->nops > MAX_PRE_OPS)
        sandbox__init_setup_fail(SANDBOX__STEP_IDS, 0, E2BIG);
    if (use_legacy())
        sandbox__init_setup_fail(SANDBOX__STEP_IDS, 0, EOPNOTSUPP); /* needs open_tree (5.12+) */
    size_t pre = sandbox__init_str_len(SANDBOX__OLDROOT);
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
            sandbox__init_setup_fail(SANDBOX__STEP_OP, (int)i, errno);
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
    if (sandbox__init_st.plan->foreign_ids && index < MAX_PRE_OPS && pre_tree[index] >= 0)
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
        sandbox__init_put_str(self, sizeof(self), &pos, "/proc/self/fd/");
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

int sandbox__init_apply_op(const struct sandbox__op *op, size_t index)
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
