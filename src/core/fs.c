/*
 * fs.c - file helpers and confinement beneath a root directory.
 *
 * Design and invariants:
 * - Every fd we open is O_CLOEXEC and is closed on every path out of the
 *   function that opened it; nothing here keeps state between calls except
 *   the cached openat2 probe (an atomic int, so calls stay thread-safe).
 * - Reads are bounded: we never read more than max + 1 bytes of a file, and
 *   a file over the bound leaves the caller's buffer as it was.
 * - Atomic writes go to "<name>.tmp-XXXXXX" in the target's own directory
 *   (created O_EXCL) and reach the target only by rename, so a reader sees
 *   the old or the new contents, never a mix; the temporary is unlinked on
 *   every failure before the rename.
 * - fs_remove_tree works on directory fds (openat/unlinkat) and never follows
 *   a symlink; it relocates directories nested deeper than RM_MAX_DEPTH to
 *   the top of the tree so a hostile tree cannot exhaust fds or the stack.
 * - fs_root_* resolve with openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)
 *   when the kernel has it; otherwise by an O_NOFOLLOW walk that refuses every
 *   symlink. Both refuse absolute paths and ".." before any syscall.
 */
#include "core/fs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/limits.h"
#include "core/banned.h"

#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE (1 << 0)
#endif

/* Read chunk; also the most a bounded read holds beyond its limit. */
#define READ_CHUNK ((size_t)64 * 1024)
/* Attempts at a fresh temporary name before giving up. */
#define TMP_ATTEMPTS 100
/* Directory nesting fs_remove_tree descends before relocating a subtree. */
#define RM_MAX_DEPTH 64
/* Times openat2 is retried when it reports a concurrent rename (EAGAIN). */
#define OPENAT2_RETRIES 8

/* ---- bounded reads ---- */

static ssize_t read_retry(int fd, void *p, size_t n)
{
    ssize_t got;
    do
        got = read(fd, p, n);
    while (got < 0 && errno == EINTR);
    return got;
}

int fs_read_fd(int fd, size_t max, struct buf *b, const char *what, struct ca_err *err)
{
    size_t start = b->len, total = 0;
    struct stat st;
    int rc = 0;

    /* Reserve once up front. The size is only a hint (procfs and sysfs
     * report 0 or 4096), so a failure here is left to the loop to judge. */
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
        int hint = buf_reserve(b, (uint64_t)st.st_size < max ? (size_t)st.st_size : max);
        (void)hint;
    }
    for (;;) {
        /* Ask for one byte past the limit so that "exactly max" and "more" differ. */
        size_t want = max - total + 1;
        if (want == 0 || want > READ_CHUNK)
            want = READ_CHUNK;
        size_t room = b->max - b->len;
        if (room == 0) {
            /* The buffer is full: only EOF may follow. */
            char probe;
            ssize_t n = read_retry(fd, &probe, 1);
            if (n < 0)
                goto read_error;
            if (n > 0) {
                rc = err_setf(err, CA_ETOOBIG,
                              "'%s' does not fit in its buffer (%zu bytes at most); use a "
                              "smaller file",
                              what, b->max);
                goto fail;
            }
            return 0;
        }
        if (want > room)
            want = room;
        if (buf_reserve(b, want) != 0)
            BUG("buf_reserve of %zu within the maximum failed", want);
        ssize_t n = read_retry(fd, b->data + b->len, want);
        if (n < 0)
            goto read_error;
        if (n == 0)
            return 0;
        b->len += (size_t)n;
        b->data[b->len] = '\0';
        total += (size_t)n;
        if (total > max) {
            rc = err_setf(err, CA_ETOOBIG,
                          "'%s' is larger than the limit of %zu bytes; use a smaller file", what,
                          max);
            goto fail;
        }
    }
read_error:
    rc = err_setf(err, -errno, "cannot read '%s': %s", what, strerror(errno));
fail:
    buf_truncate(b, start);
    return rc;
}

int fs_read_file(const char *path, size_t max, struct buf *b, struct ca_err *err)
{
    int fd;
    do
        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    while (fd < 0 && errno == EINTR);
    if (fd < 0)
        return err_setf(err, -errno, "cannot open '%s': %s", path, strerror(errno));
    int rc = fs_read_fd(fd, max, b, path, err);
    close(fd);
    return rc;
}

/* ---- atomic writes ---- */

/* Fill name with "<base>.tmp-XXXXXX" using fresh random letters. */
static int tmp_name(struct buf *name, const char *base)
{
    static const char letters[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    unsigned char rnd[6];
    size_t got = 0;
    while (got < sizeof(rnd)) {
        ssize_t n = getrandom(rnd + got, sizeof(rnd) - got, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        got += (size_t)n;
    }
    char suffix[sizeof(rnd) + 1];
    for (size_t i = 0; i < sizeof(rnd); i++)
        suffix[i] = letters[rnd[i] % (sizeof(letters) - 1)];
    suffix[sizeof(rnd)] = '\0';
    buf_reset(name);
    return buf_addf(name, "%s.tmp-%s", base, suffix);
}

/*
 * The common part of both atomic writes: dirfd is the target's directory
 * (opened for reading, so that it can be fsync'ed), base the target's name in
 * it, shown the name to put in messages.
 */
static int write_atomic_at(int dirfd, const char *base, const char *shown, const void *data,
                           size_t len, mode_t mode, struct ca_err *err)
{
    struct buf tmp;
    buf_init(&tmp, CA_LIMIT_PATH);
    int fd = -1, rc = 0;

    for (int i = 0;; i++) {
        rc = tmp_name(&tmp, base);
        if (rc) {
            if (rc == CA_ETOOBIG)
                rc = -ENAMETOOLONG;
            err_setf(err, rc, "cannot make a temporary name next to '%s': %s", shown,
                     ca_strerror(rc));
            goto out;
        }
        fd = openat(dirfd, tmp.data, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
        if (fd >= 0)
            break;
        if ((errno != EEXIST && errno != EINTR) || i == TMP_ATTEMPTS) {
            rc = err_setf(err, -errno, "cannot create a temporary file next to '%s': %s", shown,
                          strerror(errno));
            goto out;
        }
    }
    rc = fs_write_all(fd, data, len);
    if (rc) {
        err_setf(err, rc, "cannot write '%s': %s", shown, strerror(-rc));
        goto fail;
    }
    if (fsync(fd) != 0) {
        rc = err_setf(err, -errno, "cannot flush '%s' to disk: %s", shown, strerror(errno));
        goto fail;
    }
    int cfd = fd;
    fd = -1;
    if (close(cfd) != 0 && errno != EINTR) {
        rc = err_setf(err, -errno, "cannot write '%s': %s", shown, strerror(errno));
        goto fail;
    }
    if (renameat(dirfd, tmp.data, dirfd, base) != 0) {
        rc = err_setf(err, -errno, "cannot rename a temporary file onto '%s': %s", shown,
                      strerror(errno));
        goto fail;
    }
    /* The new name is in place; make the directory entry durable too. */
    if (fsync(dirfd) != 0 && errno != EINVAL) {
        rc = err_setf(err, -errno, "wrote '%s' but cannot flush its directory to disk: %s", shown,
                      strerror(errno));
    }
    goto out;
fail:
    if (fd >= 0)
        close(fd);
    unlinkat(dirfd, tmp.data, 0);
out:
    buf_release(&tmp);
    return rc;
}

/* Split path into a directory (heap) and the base name (borrowed). */
static int split_parent(const char *path, char **dir, const char **base, struct ca_err *err)
{
    const char *slash = strrchr(path, '/');
    *base = slash ? slash + 1 : path;
    if (!**base || strcmp(*base, ".") == 0 || strcmp(*base, "..") == 0)
        return err_setf(err, -EISDIR, "'%s' names a directory, not a file; give a file name", path);
    if (!slash)
        *dir = xstrdup(".");
    else if (slash == path)
        *dir = xstrdup("/");
    else
        *dir = xstrndup(path, (size_t)(slash - path));
    return 0;
}

int fs_write_atomic(const char *path, const void *data, size_t len, mode_t mode, struct ca_err *err)
{
    char *dir;
    const char *base;
    int rc = split_parent(path, &dir, &base, err);
    if (rc)
        return rc;
    int dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dirfd < 0) {
        rc = err_setf(err, -errno, "cannot write '%s': cannot open its directory '%s': %s", path,
                      dir, strerror(errno));
        free(dir);
        return rc;
    }
    free(dir);
    rc = write_atomic_at(dirfd, base, path, data, len, mode, err);
    close(dirfd);
    return rc;
}

/* ---- create and remove ---- */

int fs_mkdirs(const char *path, mode_t mode, struct ca_err *err)
{
    if (!*path)
        return err_setf(err, -ENOENT, "cannot create a directory with an empty name");
    char *p = xstrdup(path);
    int rc = 0;
    struct stat st;

    for (char *s = p + 1;; s++) {
        bool last = *s == '\0';
        if (*s != '/' && !last)
            continue;
        if (s[-1] == '/') {
            if (last)
                break;
            continue; /* "a//b" or a trailing slash */
        }
        char saved = *s;
        *s = '\0';
        if (mkdir(p, mode) != 0) {
            int e = errno;
            /* EEXIST or EROFS/EACCES on a directory that is there already. */
            if (stat(p, &st) != 0 || !S_ISDIR(st.st_mode)) {
                if (e == EEXIST)
                    e = ENOTDIR;
                rc = err_setf(err, -e, "cannot create directory '%s' (for '%s'): %s", p, path,
                              strerror(e));
                break;
            }
        }
        *s = saved;
        if (last)
            break;
    }
    free(p);
    return rc;
}

struct rm_ctx {
    const char *top; /* as given, for messages */
    int topfd;       /* the top directory, where too-deep subtrees are moved */
    bool moved;      /* a subtree was moved up: the top needs another pass */
    unsigned long seq;
};

static int rm_entry(struct rm_ctx *c, int dirfd, const char *name, int depth, struct ca_err *err);

/* Remove everything inside the directory open as fd (consumed). */
static int rm_contents(struct rm_ctx *c, int fd, int depth, struct ca_err *err)
{
    DIR *d = fdopendir(fd);
    if (!d) {
        int rc = -errno;
        close(fd);
        return err_setf(err, rc, "cannot list a directory inside '%s': %s", c->top, strerror(-rc));
    }
    int rc = 0;
    for (;;) {
        errno = 0;
        struct dirent *e = readdir(d);
        if (!e) {
            if (errno)
                rc = err_setf(err, -errno, "cannot list a directory inside '%s': %s", c->top,
                              strerror(errno));
            break;
        }
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        rc = rm_entry(c, dirfd(d), e->d_name, depth + 1, err);
        if (rc)
            break;
    }
    closedir(d);
    return rc;
}

/* Give a directory u+rwx so that it can be listed and emptied. */
static int rm_make_writable(int dirfd, const char *name, const struct stat *st)
{
    mode_t mode = (st->st_mode & 07777) | S_IRWXU;
    /* AT_SYMLINK_NOFOLLOW: if a symlink replaced the directory since we
     * looked, this fails rather than changing the link's target. */
    if (fchmodat(dirfd, name, mode, AT_SYMLINK_NOFOLLOW) == 0)
        return 0;
    if (errno != ENOTSUP && errno != EOPNOTSUPP && errno != ENOSYS && errno != ENOENT)
        return -errno;
    /* Without /proc glibc cannot honour the flag; recheck right before. */
    struct stat now;
    if (fstatat(dirfd, name, &now, AT_SYMLINK_NOFOLLOW) != 0)
        return -errno;
    if (!S_ISDIR(now.st_mode) || now.st_ino != st->st_ino || now.st_dev != st->st_dev)
        return -EAGAIN;
    return fchmodat(dirfd, name, mode, 0) == 0 ? 0 : -errno;
}

static int rm_entry(struct rm_ctx *c, int dirfd, const char *name, int depth, struct ca_err *err)
{
    struct stat st;
    if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno == ENOENT)
            return 0;
        return err_setf(err, -errno, "cannot remove '%s' inside '%s': %s", name, c->top,
                        strerror(errno));
    }
    if (!S_ISDIR(st.st_mode)) {
        if (unlinkat(dirfd, name, 0) != 0 && errno != ENOENT)
            return err_setf(err, -errno, "cannot remove '%s' inside '%s': %s", name, c->top,
                            strerror(errno));
        return 0;
    }
    if (depth > RM_MAX_DEPTH) {
        /* Move it up to the top directory and deal with it on the next pass. */
        for (int tries = 0;; tries++) {
            char fresh[64];
            snprintf(fresh, sizeof(fresh), ".ca-rm-%lu-%ld", c->seq++, (long)getpid());
            if (syscall(SYS_renameat2, dirfd, name, c->topfd, fresh, RENAME_NOREPLACE) == 0)
                break;
            if (errno != EEXIST || tries == TMP_ATTEMPTS)
                return err_setf(err, -errno, "cannot move deep directory '%s' inside '%s': %s",
                                name, c->top, strerror(errno));
        }
        c->moved = true;
        return 0;
    }
    if ((st.st_mode & S_IRWXU) != S_IRWXU) {
        int rc = rm_make_writable(dirfd, name, &st);
        if (rc && rc != -ENOENT)
            return err_setf(err, rc, "cannot make '%s' inside '%s' writable to remove it: %s", name,
                            c->top, strerror(-rc));
    }
    int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT)
            return 0;
        if ((errno == ENOTDIR || errno == ELOOP) && unlinkat(dirfd, name, 0) == 0)
            return 0; /* replaced by a non-directory since we looked */
        return err_setf(err, -errno, "cannot open '%s' inside '%s': %s", name, c->top,
                        strerror(errno));
    }
    int rc = rm_contents(c, fd, depth, err);
    if (rc)
        return rc;
    if (unlinkat(dirfd, name, AT_REMOVEDIR) != 0 && errno != ENOENT)
        return err_setf(err, -errno, "cannot remove directory '%s' inside '%s': %s", name, c->top,
                        strerror(errno));
    return 0;
}

int fs_remove_tree(const char *path, struct ca_err *err)
{
    /* Drop trailing slashes: "link/" would otherwise resolve through the link. */
    char *p = xstrdup(path);
    size_t len = strlen(p);
    while (len > 1 && p[len - 1] == '/')
        p[--len] = '\0';
    struct rm_ctx c = {.top = path, .topfd = -1};
    char *dir = NULL;
    const char *base;
    int parent = -1, rc = 0;
    struct stat st;

    if (strcmp(p, "/") == 0 || split_parent(p, &dir, &base, NULL) != 0) {
        rc = err_setf(err, -EINVAL, "refusing to remove '%s'; name the directory itself", path);
        goto out;
    }
    if (lstat(p, &st) != 0) {
        if (errno != ENOENT)
            rc = err_setf(err, -errno, "cannot remove '%s': %s", path, strerror(errno));
        goto out;
    }
    if (!S_ISDIR(st.st_mode)) {
        if (unlink(p) != 0 && errno != ENOENT)
            rc = err_setf(err, -errno, "cannot remove '%s': %s", path, strerror(errno));
        goto out;
    }
    parent = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (parent < 0) {
        rc = err_setf(err, -errno, "cannot remove '%s': cannot open '%s': %s", path, dir,
                      strerror(errno));
        goto out;
    }
    if ((st.st_mode & S_IRWXU) != S_IRWXU) {
        rc = rm_make_writable(parent, base, &st);
        if (rc) {
            err_setf(err, rc, "cannot make '%s' writable to remove it: %s", path, strerror(-rc));
            goto out;
        }
    }
    c.topfd = openat(parent, base, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (c.topfd < 0) {
        rc = err_setf(err, -errno, "cannot open '%s' to remove it: %s", path, strerror(errno));
        goto out;
    }
    do {
        c.moved = false;
        int fd = openat(c.topfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0) {
            rc = err_setf(err, -errno, "cannot open '%s' to remove it: %s", path, strerror(errno));
            goto out;
        }
        rc = rm_contents(&c, fd, 0, err);
        if (rc)
            goto out;
    } while (c.moved);
    if (unlinkat(parent, base, AT_REMOVEDIR) != 0 && errno != ENOENT)
        rc = err_setf(err, -errno, "cannot remove directory '%s': %s", path, strerror(errno));
out:
    if (c.topfd >= 0)
        close(c.topfd);
    if (parent >= 0)
        close(parent);
    free(dir);
    free(p);
    return rc;
}

int fs_mkdtemp_beside(const char *path, struct buf *tmp_path, struct ca_err *err)
{
    size_t start = tmp_path->len;
    if (buf_addf(tmp_path, "%s.tmp-XXXXXX", path) != 0)
        return err_setf(err, CA_ETOOBIG, "path '%s' is too long for a temporary name beside it",
                        path);
    if (!mkdtemp(tmp_path->data + start)) {
        int rc = -errno;
        buf_truncate(tmp_path, start);
        return err_setf(err, rc, "cannot create a temporary directory next to '%s': %s", path,
                        strerror(-rc));
    }
    return 0;
}

int fs_rename_noreplace(const char *from, const char *to, struct ca_err *err)
{
    /* Through syscall(2): older C libraries lack the renameat2 wrapper. */
    if (syscall(SYS_renameat2, AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE) == 0)
        return 0;
    if (errno == EEXIST)
        return err_setf(err, -EEXIST, "cannot rename '%s' to '%s': '%s' already exists", from, to,
                        to);
    return err_setf(err, -errno, "cannot rename '%s' to '%s': %s", from, to, strerror(errno));
}

bool fs_is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

bool fs_is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

bool fs_exists(const char *path)
{
    /* lstat: a dangling symlink still takes the name. */
    struct stat st;
    return lstat(path, &st) == 0;
}

int fs_join(struct buf *out, const char *a, const char *b)
{
    size_t start = out->len, alen = strlen(a);
    while (alen > 1 && a[alen - 1] == '/')
        alen--;
    while (*b == '/')
        b++;
    int rc = buf_add(out, a, alen);
    if (!rc && alen && a[alen - 1] != '/')
        rc = buf_addch(out, '/');
    if (!rc)
        rc = buf_addstr(out, b);
    if (rc)
        buf_truncate(out, start);
    return rc;
}

const char *fs_basename(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* ---- confinement beneath a root ---- */

static atomic_int openat2_state;   /* 0 unknown, 1 present, -1 absent */
static atomic_bool openat2_forced; /* tests: pretend it is absent */

bool fs_have_openat2(void)
{
    int s = atomic_load(&openat2_state);
    if (s == 0) {
        /* "/" always resolves, whatever the working directory is. */
        struct open_how how = {.flags = O_PATH | O_CLOEXEC, .resolve = RESOLVE_NO_MAGICLINKS};
        long fd = syscall(SYS_openat2, AT_FDCWD, "/", &how, sizeof(how));
        /* Only success counts: ENOSYS, or EPERM from a seccomp filter, both
         * leave the stricter fallback walk. */
        s = fd >= 0 ? 1 : -1;
        if (fd >= 0)
            close((int)fd);
        atomic_store(&openat2_state, s);
    }
    return s > 0;
}

void fs__force_no_openat2(bool on)
{
    atomic_store(&openat2_forced, on);
}

int fs_root_open(struct fs_root *root, const char *path, struct ca_err *err)
{
    root->fd = -1;
    root->path = NULL;
    int fd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return err_setf(err, -errno, "cannot open directory '%s': %s", path, strerror(errno));
    root->fd = fd;
    root->path = xstrdup(path);
    return 0;
}

void fs_root_release(struct fs_root *root)
{
    if (root->fd >= 0)
        close(root->fd);
    root->fd = -1;
    FREE_AND_NULL(root->path);
}

int fs_check_relpath(const char *rel, struct ca_err *err)
{
    if (!*rel)
        return err_setf(err, CA_EPARSE,
                        "path is empty; give a path relative to the workspace root");
    size_t len = strlen(rel);
    if (len > CA_LIMIT_PATH)
        return err_setf(err, CA_ETOOBIG, "path '%.64s...' is %zu bytes, over the limit of %d", rel,
                        len, CA_LIMIT_PATH);
    if (rel[0] == '/')
        return err_setf(err, CA_EESCAPE,
                        "path '%s' is absolute; give a path relative to the workspace root", rel);
    int depth = 0;
    for (const char *p = rel; *p;) {
        while (*p == '/')
            p++;
        if (!*p)
            break;
        const char *end = strchrnul(p, '/');
        if (end - p == 2 && p[0] == '.' && p[1] == '.')
            return err_setf(err, CA_EESCAPE,
                            "path '%s' has a '..' component; give a path that stays inside the "
                            "workspace root",
                            rel);
        if (++depth > CA_LIMIT_PATH_DEPTH)
            return err_setf(err, CA_ETOOBIG, "path '%.64s...' has more than %d components", rel,
                            CA_LIMIT_PATH_DEPTH);
        p = end;
    }
    return 0;
}

static int escape_error(const struct fs_root *root, const char *rel, int flags, struct ca_err *err)
{
    if (flags & O_NOFOLLOW)
        return err_setf(err, CA_EESCAPE,
                        "path '%s' escapes the workspace root '%s' or is a symlink; use a path "
                        "inside the root without symlinks",
                        rel, root->path);
    return err_setf(err, CA_EESCAPE,
                    "path '%s' escapes the workspace root '%s' (through a symlink); use a path "
                    "inside the root",
                    rel, root->path);
}

static int open_beneath_openat2(const struct fs_root *root, const char *rel, int flags, mode_t mode,
                                struct ca_err *err)
{
    struct open_how how = {
        .flags = (uint64_t)(unsigned)(flags | O_CLOEXEC),
        /* openat2 rejects a mode unless the call may create a file. */
        .mode = ((flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE) ? mode : 0,
        .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS,
    };
    for (int tries = 0;; tries++) {
        long fd = syscall(SYS_openat2, root->fd, rel, &how, sizeof(how));
        if (fd >= 0)
            return (int)fd;
        if (errno == EINTR || (errno == EAGAIN && tries < OPENAT2_RETRIES))
            continue;
        if (errno == EXDEV || errno == ELOOP)
            return escape_error(root, rel, flags, err);
        return err_setf(err, -errno, "cannot open '%s' in '%s': %s", rel, root->path,
                        strerror(errno));
    }
}

/* Whether name in dirfd is a symlink (for telling ENOTDIR/ELOOP apart). */
static bool is_symlink_at(int dirfd, const char *name)
{
    struct stat st;
    return fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode);
}

static int open_beneath_walk(const struct fs_root *root, const char *rel, int flags, mode_t mode,
                             struct ca_err *err)
{
    char path[CA_LIMIT_PATH + 1];
    size_t len = strlen(rel);
    memcpy(path, rel, len + 1);
    bool trailing_slash = len && path[len - 1] == '/';

    /* Components, without empty and "." ones. */
    char *comp[CA_LIMIT_PATH_DEPTH];
    size_t n = 0;
    for (char *p = path; *p;) {
        while (*p == '/')
            *p++ = '\0';
        if (!*p)
            break;
        char *end = strchrnul(p, '/');
        if (!(end - p == 1 && p[0] == '.'))
            comp[n++] = p;
        p = end;
    }

    int cur = root->fd, fd = -1;
    for (size_t i = 0; i + 1 < n; i++) {
        int next;
        do
            next = openat(cur, comp[i], O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        while (next < 0 && errno == EINTR);
        if (next < 0) {
            int e = errno;
            int rc = (e == ELOOP || (e == ENOTDIR && is_symlink_at(cur, comp[i])))
                         ? escape_error(root, rel, O_NOFOLLOW, err)
                         : err_setf(err, -e, "cannot open '%s' in '%s': %s", rel, root->path,
                                    strerror(e));
            if (cur != root->fd)
                close(cur);
            return rc;
        }
        if (cur != root->fd)
            close(cur);
        cur = next;
    }

    const char *last = n ? comp[n - 1] : ".";
    int final_flags = flags | O_CLOEXEC | (n ? O_NOFOLLOW : 0);
    if (trailing_slash && !(flags & O_CREAT))
        final_flags |= O_DIRECTORY;
    do
        fd = openat(cur, last, final_flags, mode);
    while (fd < 0 && errno == EINTR);
    int e = errno;
    if (fd >= 0 && (flags & O_PATH)) {
        /* O_PATH | O_NOFOLLOW opens the link itself instead of failing. */
        struct stat st;
        if (fstat(fd, &st) == 0 && S_ISLNK(st.st_mode)) {
            close(fd);
            fd = -1;
            e = ELOOP;
        }
    }
    int rc = fd;
    if (fd < 0) {
        rc = (e == ELOOP || (e == ENOTDIR && is_symlink_at(cur, last)))
                 ? escape_error(root, rel, O_NOFOLLOW, err)
                 : err_setf(err, -e, "cannot open '%s' in '%s': %s", rel, root->path, strerror(e));
    }
    if (cur != root->fd)
        close(cur);
    return rc;
}

int fs_root_open_at(const struct fs_root *root, const char *rel, int flags, mode_t mode,
                    struct ca_err *err)
{
    int rc = fs_check_relpath(rel, err);
    if (rc)
        return rc;
    if (fs_have_openat2() && !atomic_load(&openat2_forced))
        return open_beneath_openat2(root, rel, flags, mode, err);
    return open_beneath_walk(root, rel, flags, mode, err);
}

int fs_root_read(const struct fs_root *root, const char *rel, size_t max, struct buf *b,
                 struct ca_err *err)
{
    /* O_NONBLOCK: a FIFO planted in the tree must not hang the reader. */
    int fd = fs_root_open_at(root, rel, O_RDONLY | O_NOCTTY | O_NONBLOCK, 0, err);
    if (fd < 0)
        return fd;
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st) != 0)
        rc =
            err_setf(err, -errno, "cannot read '%s' in '%s': %s", rel, root->path, strerror(errno));
    else if (!S_ISREG(st.st_mode))
        rc = err_setf(err, -EINVAL, "'%s' in '%s' is not a regular file; name a file to read", rel,
                      root->path);
    if (!rc)
        rc = fs_read_fd(fd, max, b, rel, err);
    close(fd);
    return rc;
}

int fs_root_write_atomic(const struct fs_root *root, const char *rel, const void *data, size_t len,
                         mode_t mode, struct ca_err *err)
{
    int rc = fs_check_relpath(rel, err);
    if (rc)
        return rc;
    char *dir;
    const char *base;
    rc = split_parent(rel, &dir, &base, err);
    if (rc)
        return rc;
    int dirfd = fs_root_open_at(root, dir, O_RDONLY | O_DIRECTORY, 0, err);
    free(dir);
    if (dirfd < 0)
        return dirfd;
    rc = write_atomic_at(dirfd, base, rel, data, len, mode, err);
    close(dirfd);
    return rc;
}

int fs_root_mkdirs(const struct fs_root *root, const char *rel, mode_t mode, struct ca_err *err)
{
    int rc = fs_check_relpath(rel, err);
    if (rc)
        return rc;
    char path[CA_LIMIT_PATH + 1];
    size_t len = strlen(rel);
    memcpy(path, rel, len + 1);

    /* Create each prefix in its parent, then open the prefix afresh beneath
     * the root, so every step is confined the same way fs_root_open_at is. */
    int parent = root->fd;
    for (size_t i = 0; i <= len; i++) {
        if (path[i] != '/' && path[i] != '\0')
            continue;
        if (i == 0 || path[i - 1] == '/')
            continue;
        size_t start = i;
        while (start > 0 && path[start - 1] != '/')
            start--;
        char saved = path[i];
        path[i] = '\0';
        const char *name = path + start;
        if (strcmp(name, ".") != 0 && mkdirat(parent, name, mode) != 0 && errno != EEXIST) {
            rc = err_setf(err, -errno, "cannot create directory '%s' in '%s': %s", path, root->path,
                          strerror(errno));
            break;
        }
        int fd = fs_root_open_at(root, path, O_PATH | O_DIRECTORY, 0, err);
        if (fd < 0) {
            rc = fd;
            break;
        }
        if (parent != root->fd)
            close(parent);
        parent = fd;
        path[i] = saved;
    }
    if (parent != root->fd)
        close(parent);
    return rc;
}

int fs_cache_dir(struct buf *out, const char *sub, struct ca_err *err)
{
    const char *v;
    int rc;
    if ((v = getenv("CUDA_AGENT_CACHE_DIR")) && *v)
        rc = buf_addstr(out, v);
    else if ((v = getenv("XDG_CACHE_HOME")) && *v)
        rc = buf_addf(out, "%s/cuda-agent", v);
    else if ((v = getenv("HOME")) && *v)
        rc = buf_addf(out, "%s/.cache/cuda-agent", v);
    else
        return err_setf(err, CA_EUSAGE, "no cache directory: set CUDA_AGENT_CACHE_DIR or HOME");
    if (rc == 0 && sub)
        rc = buf_addf(out, "/%s", sub);
    if (rc)
        return err_setf(err, CA_ETOOBIG, "cache directory path is over %d bytes", CA_LIMIT_PATH);
    return 0;
}

int fs_write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -errno;
        c += w;
        n -= (size_t)w;
    }
    return 0;
}
