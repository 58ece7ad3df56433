/*
 * sandbox_plan.c - the plan of a sandbox: from the options, the complete list
 * of mount operations that sandbox_init_mount.c applies inside the new namespaces.
 *
 * Everything is decided here, before clone: host paths are resolved with
 * realpath, every string is allocated in the plan's pool, and each operation
 * carries the words that describe it, so that the child applies the list
 * without allocating and a failed step is reported from its index alone.
 */
#include "sandbox/sandbox.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/fs.h"
#include "core/limits.h"
#include "sandbox/sandbox_internal.h"
#include "core/banned.h"

static const char *const system_dirs[] = {"/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32"};
static const char *const etc_entries[] = {
    "passwd",       "group",        "hosts",       "nsswitch.conf", "ld.so.cache", "ld.so.conf",
    "ld.so.conf.d", "alternatives", "bash.bashrc", "profile",       "localtime"};
static const char *const devices[] = {"null", "zero", "full", "random", "urandom", "tty"};
static const char *const dev_links[][2] = {{"fd", "/proc/self/fd"},
                                           {"stdin", "/proc/self/fd/0"},
                                           {"stdout", "/proc/self/fd/1"},
                                           {"stderr", "/proc/self/fd/2"}};
/* Parts of /proc that reach beyond the namespaces; bound read-only over themselves. */
static const char *const proc_ro[] = {"/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus"};

static const char *pool(struct sandbox__plan *p, char *s)
{
    ALLOC_GROW(p->strings, p->nstrings + 1, p->strings_alloc);
    p->strings[p->nstrings++] = s;
    return s;
}

static struct sandbox__op *add_op(struct sandbox__plan *p, enum sandbox__op_kind kind,
                                  const char *dst, char *what)
{
    ALLOC_GROW(p->ops, p->nops + 1, p->ops_alloc);
    struct sandbox__op *op = &p->ops[p->nops++];
    memset(op, 0, sizeof(*op));
    op->kind = kind;
    op->dst = pool(p, xstrdup(dst));
    op->what = pool(p, what);
    return op;
}

static struct sandbox__op *add_mount(struct sandbox__plan *p, const char *fstype, const char *dst,
                                     unsigned long flags, const char *data)
{
    struct sandbox__op *op =
        add_op(p, SANDBOX__OP_MOUNT, dst, xstrfmt("mount %s on %s", fstype, dst));
    op->src = fstype;
    op->fstype = fstype;
    op->flags = flags;
    op->data = data ? pool(p, xstrdup(data)) : NULL;
    return op;
}

static void add_mkdir(struct sandbox__plan *p, const char *dst, unsigned mode)
{
    add_op(p, SANDBOX__OP_MKDIR, dst, xstrfmt("create directory %s", dst))->mode = mode;
}

static void add_symlink(struct sandbox__plan *p, const char *target, const char *dst)
{
    struct sandbox__op *op =
        add_op(p, SANDBOX__OP_SYMLINK, dst, xstrfmt("create symlink %s -> %s", dst, target));
    op->src = pool(p, xstrdup(target));
}

/* Bind the host path `real` (already resolved) at dst, a directory or a file. */
static void add_bind(struct sandbox__plan *p, const char *real, const char *dst, bool is_dir,
                     unsigned attr)
{
    if (is_dir)
        add_mkdir(p, dst, 0755);
    else
        add_op(p, SANDBOX__OP_FILE, dst, xstrfmt("create mount point %s", dst))->mode = 0644;
    struct sandbox__op *op = add_op(
        p, SANDBOX__OP_BIND, dst,
        xstrfmt("bind %s at %s%s", real, dst, attr & SANDBOX__ATTR_RDONLY ? " (read-only)" : ""));
    op->src = pool(p, xstrfmt(SANDBOX__OLDROOT "%s", real));
    op->attr = attr;
}

/* A host directory or file we bind: resolved; the caller chooses what a
 * missing one means. */
static char *resolve(const char *path, bool *is_dir)
{
    char *real = realpath(path, NULL);
    struct stat st;
    if (!real || stat(real, &st) != 0 || !(S_ISDIR(st.st_mode) || S_ISREG(st.st_mode))) {
        free(real);
        return NULL;
    }
    *is_dir = S_ISDIR(st.st_mode);
    return real;
}

static bool under(const char *path, const char *dir)
{
    size_t n = strlen(dir);
    return strncmp(path, dir, n) == 0 && (path[n] == '/' || path[n] == '\0');
}

/* An extra read-only bind at the host path's own location inside. Paths
 * under /tmp are bound in a second pass (tmp_pass), after the sandbox's own
 * /tmp is mounted, beneath it (a tree in /tmp, e.g. a checkout with its
 * Python environment); the first pass skips them. */
static int plan_extra_bind(struct sandbox__plan *p, const char *path, bool tmp_pass,
                           struct ca_err *err)
{
    static const char *const reserved[] = {SANDBOX_WORKSPACE, "/run", "/tmp",          "/dev",
                                           "/proc",           "/etc", SANDBOX__OLDROOT};
    bool is_dir = false;
    char *real = resolve(path, &is_dir);
    if (!real)
        return err_setf(err, -ENOENT, "sandbox: extra read-only path '%s' does not exist", path);
    for (size_t i = 0; i < ARRAY_SIZE(system_dirs); i++)
        if (under(real, system_dirs[i])) {
            free(real); /* already visible, read-only */
            return 0;
        }
    if (strcmp(real, "/") == 0) {
        free(real);
        return err_setf(err, CA_EUSAGE, "sandbox: '/' cannot be an extra read-only path");
    }
    bool in_tmp = under(real, "/tmp") && strcmp(real, "/tmp") != 0;
    if (in_tmp != tmp_pass) {
        free(real); /* the other pass binds it */
        return 0;
    }
    for (size_t i = 0; i < ARRAY_SIZE(reserved); i++)
        if (under(real, reserved[i]) && !(in_tmp && strcmp(reserved[i], "/tmp") == 0)) {
            int rc = err_setf(err, CA_EUSAGE,
                              "sandbox: extra read-only path '%s' would cover %s inside the "
                              "sandbox",
                              real, reserved[i]);
            free(real);
            return rc;
        }
    /* Parents inside the new root: directories of the root tmpfs. */
    for (char *slash = strchr(real + 1, '/'); slash; slash = strchr(slash + 1, '/')) {
        *slash = '\0';
        add_mkdir(p, real, 0755);
        *slash = '/';
    }
    add_bind(p, real, real, is_dir,
             SANDBOX__ATTR_RDONLY | SANDBOX__ATTR_NOSUID | SANDBOX__ATTR_NODEV);
    free(real);
    return 0;
}

/* /usr, /bin, ...: read-only binds, or the same symlinks where the host has
 * merged /usr (/bin -> usr/bin). */
static void plan_system(struct sandbox__plan *p)
{
    const unsigned ro = SANDBOX__ATTR_RDONLY | SANDBOX__ATTR_NOSUID | SANDBOX__ATTR_NODEV;
    for (size_t i = 0; i < ARRAY_SIZE(system_dirs); i++) {
        const char *d = system_dirs[i];
        struct stat st;
        if (lstat(d, &st) != 0)
            continue;
        if (S_ISLNK(st.st_mode)) {
            char target[CA_LIMIT_PATH];
            ssize_t n = readlink(d, target, sizeof(target) - 1);
            if (n <= 0)
                continue;
            target[n] = '\0';
            add_symlink(p, target, d);
            continue;
        }
        bool is_dir;
        char *real = resolve(d, &is_dir);
        if (real && is_dir)
            add_bind(p, real, d, true, ro);
        free(real);
    }
    add_mkdir(p, "/etc", 0755);
    for (size_t i = 0; i < ARRAY_SIZE(etc_entries); i++) {
        char path[64];
        snprintf(path, sizeof(path), "/etc/%s", etc_entries[i]);
        struct stat st;
        if (lstat(path, &st) != 0)
            continue;
        if (S_ISLNK(st.st_mode)) {
            char target[CA_LIMIT_PATH];
            ssize_t n = readlink(path, target, sizeof(target) - 1);
            if (n > 0) {
                target[n] = '\0';
                add_symlink(p, target, path);
            }
            continue;
        }
        bool is_dir;
        char *real = resolve(path, &is_dir);
        if (real)
            add_bind(p, real, path, is_dir, ro);
        free(real);
    }
}

static void add_device(struct sandbox__plan *p, const char *path)
{
    add_op(p, SANDBOX__OP_FILE, path, xstrfmt("create mount point %s", path))->mode = 0666;
    struct sandbox__op *op = add_op(p, SANDBOX__OP_BIND, path, xstrfmt("bind device %s", path));
    op->src = pool(p, xstrfmt(SANDBOX__OLDROOT "%s", path));
    op->attr = SANDBOX__ATTR_NOSUID | SANDBOX__ATTR_NOEXEC;
}

/* A device the caller asked for: a character device directly under /dev. */
static int check_device(const char *path, struct ca_err *err)
{
    const char *name = path && strncmp(path, "/dev/", 5) == 0 ? path + 5 : NULL;
    struct stat st;
    if (!name || !*name || strchr(name, '/') || strcmp(name, ".") == 0 || strcmp(name, "..") == 0 ||
        strcmp(name, "shm") == 0)
        return err_setf(err, CA_EUSAGE, "sandbox: device '%s' is not a node directly under /dev",
                        path ? path : "(null)");
    if (lstat(path, &st) != 0)
        return err_setf(err, -errno, "sandbox: device %s: %s", path, strerror(errno));
    if (!S_ISCHR(st.st_mode))
        return err_setf(err, CA_EUSAGE, "sandbox: %s is not a character device", path);
    for (size_t i = 0; i < ARRAY_SIZE(devices); i++)
        if (strcmp(name, devices[i]) == 0)
            return 1; /* already there */
    return 0;
}

static int plan_dev(struct sandbox__plan *p, const char *const *extra, struct ca_err *err)
{
    add_mkdir(p, "/dev", 0755);
    add_mount(p, "tmpfs", "/dev", MS_NOSUID | MS_NOEXEC, SANDBOX__DEV_TMPFS);
    for (size_t i = 0; i < ARRAY_SIZE(devices); i++) {
        char path[64];
        snprintf(path, sizeof(path), "/dev/%s", devices[i]);
        struct stat st;
        if (stat(path, &st) != 0 || !S_ISCHR(st.st_mode))
            continue;
        add_device(p, path);
    }
    for (size_t i = 0; extra && extra[i]; i++) {
        if (i == SANDBOX_MAX_DEVICES)
            return err_setf(err, CA_EUSAGE, "sandbox: more than %d devices", SANDBOX_MAX_DEVICES);
        bool dup = false;
        for (size_t j = 0; j < i && !dup; j++)
            dup = strcmp(extra[i], extra[j]) == 0;
        int rc = check_device(extra[i], err);
        if (rc < 0)
            return rc;
        if (rc == 0 && !dup)
            add_device(p, extra[i]);
    }
    for (size_t i = 0; i < ARRAY_SIZE(dev_links); i++) {
        char path[64];
        snprintf(path, sizeof(path), "/dev/%s", dev_links[i][0]);
        add_symlink(p, dev_links[i][1], path);
    }
    add_mkdir(p, "/dev/shm", 01777);
    add_mount(p, "tmpfs", "/dev/shm", MS_NOSUID | MS_NODEV | MS_NOEXEC, SANDBOX__SHM_TMPFS);
    add_op(p, SANDBOX__OP_SETATTR, "/dev", xstrdup("make /dev read-only"))->attr =
        SANDBOX__ATTR_RDONLY | SANDBOX__ATTR_NOSUID | SANDBOX__ATTR_NOEXEC;
    return 0;
}

static bool hostname_ok(const char *h)
{
    size_t n = strlen(h);
    if (n == 0 || n > 64)
        return false;
    for (const char *c = h; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
              *c == '-' || *c == '.' || *c == '_'))
            return false;
    return true;
}

void sandbox__plan_release(struct sandbox__plan *p)
{
    for (size_t i = 0; i < p->nstrings; i++)
        free(p->strings[i]);
    free(p->strings);
    free(p->ops);
    memset(p, 0, sizeof(*p));
}

int sandbox__plan_build(const struct sandbox_opts *o, struct sandbox__plan *p, char **ws_out,
                        struct ca_err *err)
{
    memset(p, 0, sizeof(*p));
    p->insecure = o->flags & SANDBOX_INSECURE;
    p->uid = o->set_outer_ids ? o->outer_uid : geteuid();
    p->gid = o->set_outer_ids ? o->outer_gid : getegid();
    p->foreign_ids = p->uid != geteuid() || p->gid != getegid();
    const struct sandbox_limits *l = &o->limits;
    p->cpu_seconds = l->cpu_seconds ? l->cpu_seconds : SANDBOX__DEF_CPU_SECONDS;
    p->address_space = l->address_space == SANDBOX_UNLIMITED ? 0
                       : l->address_space                    ? l->address_space
                                                             : SANDBOX__DEF_ADDRESS_SPACE;
    /* Without a pid namespace RLIMIT_NPROC would count all of this user's
     * processes on the host, not the sandbox's. */
    p->nproc = p->insecure ? 0 : l->nproc ? l->nproc : SANDBOX__DEF_NPROC;
    p->nofile = l->nofile ? l->nofile : SANDBOX__DEF_NOFILE;
    p->fsize = l->fsize ? l->fsize : SANDBOX__DEF_FSIZE;
    p->data = l->data_bytes;
    uint64_t tmp_bytes = l->tmp_bytes ? l->tmp_bytes : SANDBOX__DEF_TMP_BYTES;

    if (!o->workspace || !*o->workspace)
        return err_setf(err, CA_EUSAGE, "sandbox: no workspace directory given");
    bool is_dir = false;
    char *ws = resolve(o->workspace, &is_dir);
    if (!ws || !is_dir) {
        free(ws);
        return err_setf(err, -ENOENT, "sandbox: workspace '%s' is not a directory", o->workspace);
    }
    if (strcmp(ws, "/") == 0) {
        free(ws);
        return err_setf(err, CA_EUSAGE, "sandbox: the workspace cannot be '/'");
    }
    *ws_out = ws; /* the caller owns it from here */
    for (size_t i = 0; o->ro_paths && o->ro_paths[i]; i++) {
        int rc = fs_check_relpath(o->ro_paths[i], err);
        if (rc) {
            err_prefix(err, "sandbox: read-only path");
            return rc;
        }
    }
    char *control = NULL;
    if (o->control_dir) {
        control = resolve(o->control_dir, &is_dir);
        if (!control || !is_dir) {
            free(control);
            return err_setf(err, -ENOENT, "sandbox: control directory '%s' is not a directory",
                            o->control_dir);
        }
        pool(p, control);
    }
    const char *hostname = o->hostname ? o->hostname : SANDBOX__DEF_HOSTNAME;
    if (!hostname_ok(hostname))
        return err_setf(err, CA_EUSAGE,
                        "sandbox: hostname '%.80s' is not 1-64 characters of [A-Za-z0-9._-]",
                        hostname);
    p->hostname = pool(p, xstrdup(hostname));
    if (p->insecure)
        return 0;

    struct ca_err why = {0};
    p->seccomp = sandbox__seccomp_prog(&why);
    if (!p->seccomp)
        return err_setf(err, why.code, "%s", why.msg);

    /* The order below is the order of application; see sandbox_init_mount.c. */
    struct sandbox__op *op = add_mount(p, "none", "/", MS_REC | MS_PRIVATE, NULL);
    op->src = op->fstype = NULL;
    op->what = pool(p, xstrdup("make the mount tree private"));
    add_mount(p, "tmpfs", SANDBOX__STAGING, MS_NOSUID | MS_NODEV, SANDBOX__ROOT_TMPFS);
    add_mkdir(p, SANDBOX__STAGING SANDBOX__OLDROOT, 0700);
    op = add_op(p, SANDBOX__OP_PIVOT, SANDBOX__STAGING SANDBOX__OLDROOT,
                xstrdup("pivot_root into the new root"));
    op->src = SANDBOX__STAGING;

    add_mkdir(p, "/proc", 0555);
    add_mount(p, "proc", "/proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
    plan_system(p);

    add_bind(p, ws, SANDBOX_WORKSPACE, true, SANDBOX__ATTR_NOSUID | SANDBOX__ATTR_NODEV);
    for (size_t i = 0; o->ro_paths && o->ro_paths[i]; i++) {
        char *dst = xstrfmt(SANDBOX_WORKSPACE "/%s", o->ro_paths[i]);
        op = add_op(p, SANDBOX__OP_BIND_SELF, dst,
                    xstrfmt("make read-only path '%s' read-only", o->ro_paths[i]));
        op->attr = SANDBOX__ATTR_RDONLY | SANDBOX__ATTR_NOSUID | SANDBOX__ATTR_NODEV;
        free(dst);
    }
    if (control) {
        add_mkdir(p, "/run", 0755);
        add_bind(p, control, SANDBOX_CONTROL, true,
                 SANDBOX__ATTR_RDONLY | SANDBOX__ATTR_NOSUID | SANDBOX__ATTR_NODEV);
    }

    for (size_t i = 0; o->extra_ro_binds && o->extra_ro_binds[i]; i++) {
        int rc = plan_extra_bind(p, o->extra_ro_binds[i], false, err);
        if (rc)
            return rc;
    }

    add_mkdir(p, "/tmp", 01777);
    char *tmp_data = xstrfmt("size=%llu,nr_inodes=%d,mode=1777", (unsigned long long)tmp_bytes,
                             SANDBOX__TMP_INODES);
    add_mount(p, "tmpfs", "/tmp", MS_NOSUID | MS_NODEV, tmp_data);
    free(tmp_data);
    for (size_t i = 0; o->extra_ro_binds && o->extra_ro_binds[i]; i++) {
        int rc = plan_extra_bind(p, o->extra_ro_binds[i], true, err);
        if (rc)
            return rc;
    }
    int rc = plan_dev(p, o->devices, err);
    if (rc)
        return rc;

    for (size_t i = 0; i < ARRAY_SIZE(proc_ro); i++) {
        op = add_op(p, SANDBOX__OP_BIND_SELF, proc_ro[i], xstrfmt("make %s read-only", proc_ro[i]));
        op->attr = SANDBOX__ATTR_RDONLY | SANDBOX__ATTR_NOSUID | SANDBOX__ATTR_NODEV |
                   SANDBOX__ATTR_NOEXEC;
        op->optional = true;
    }
    add_op(p, SANDBOX__OP_UMOUNT, SANDBOX__OLDROOT, xstrdup("detach the old root"));
    add_op(p, SANDBOX__OP_SETATTR, "/", xstrdup("make the new root read-only"))->attr =
        SANDBOX__ATTR_RDONLY | SANDBOX__ATTR_NOSUID | SANDBOX__ATTR_NODEV;
    return 0;
}
