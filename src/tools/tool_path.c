/*
 * tool_path.c - from what the agent typed to a file in the workspace, and
 * the file helpers every file tool shares (load, freshness, store).
 *
 * Invariants (see tools.c's opening comment for the whole set):
 * - Every path is normalised lexically first (tools__path_arg: "/workspace/"
 *   stripped, "." and repeated slashes dropped, ".." and other absolute
 *   paths refused), then opened only through the confined root (fs_root_*),
 *   so no call reaches outside the workspace, whatever symlinks the agent
 *   planted with Bash.
 * - Messages for the model never carry host paths: a file is always named
 *   as the agent would type it ("/workspace/...").
 * - Writes go to the key (symlinks resolved) and change an existing file
 *   only when its content still has the read set's hash.
 */
#include "tools/tools_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/json.h"
#include "core/log.h"
#include "workspace/workspace.h"
#include "core/banned.h"

/* ---- paths ---- */

int tools__normalise(const char *s, size_t len, char *out)
{
    const char *q = s, *end = s + len;
    size_t o = 0;
    int depth = 0;
    while (q < end) {
        while (q < end && *q == '/')
            q++;
        if (q == end)
            break;
        const char *c = q;
        while (q < end && *q != '/')
            q++;
        size_t cl = (size_t)(q - c);
        if (cl == 1 && c[0] == '.')
            continue;
        if (cl == 2 && c[0] == '.' && c[1] == '.')
            return CA_EESCAPE;
        if (++depth > CA_LIMIT_PATH_DEPTH)
            return CA_ETOOBIG;
        if (o)
            out[o++] = '/';
        memcpy(out + o, c, cl);
        o += cl;
    }
    out[o] = '\0';
    return 0;
}

static const char path_rule[] = "paths live under " TOOLS__WORKSPACE ": give \"" TOOLS__WORKSPACE
                                "/NAME\" or a path relative to it, "
                                "such as \"kernels/my_kernel.cu\"";

int tools__path_arg(const char *tool, const json_t *args, const char *key, bool allow_root,
                    struct tools__path *p, struct tool_result *res)
{
    size_t len;
    const char *s = tools__str(args, key, &len);
    p->exists = false;
    if (!s) {
        s = "";
        len = 0;
    }
    if (memchr(s, '\0', len)) {
        tool_result_errorf(res, "%s: %s contains a NUL byte; %s", tool, key, path_rule);
        return CA_EPARSE;
    }
    if (len > CA_LIMIT_PATH) {
        tool_result_errorf(res, "%s: %s is %zu bytes long, over the limit of %d; %s", tool, key,
                           len, CA_LIMIT_PATH, path_rule);
        return CA_ETOOBIG;
    }
    const char *q = s;
    size_t qlen = len;
    size_t wl = strlen(TOOLS__WORKSPACE);
    if (len && s[0] == '/') {
        if (len < wl || memcmp(s, TOOLS__WORKSPACE, wl) != 0 || (len > wl && s[wl] != '/')) {
            tool_result_errorf(res, "%s: %s '%.*s%s' is outside the workspace; %s", tool, key,
                               TOOLS__SHOW(s, len), path_rule);
            return CA_EESCAPE;
        }
        q += wl;
        qlen -= wl;
    }
    int rc = tools__normalise(q, qlen, p->rel);
    if (rc == CA_EESCAPE) {
        tool_result_errorf(res,
                           "%s: %s '%.*s%s' has a '..' component, which would leave the "
                           "workspace; %s",
                           tool, key, TOOLS__SHOW(s, len), path_rule);
        return rc;
    }
    if (rc) {
        tool_result_errorf(res, "%s: %s '%.*s%s' has more than %d components", tool, key,
                           TOOLS__SHOW(s, len), CA_LIMIT_PATH_DEPTH);
        return rc;
    }
    if (!p->rel[0] && !allow_root) {
        if (!len)
            tool_result_errorf(res,
                               "%s: %s is empty; give a file path such as "
                               "\"" TOOLS__WORKSPACE "/model_new.py\"",
                               tool, key);
        else
            tool_result_errorf(res,
                               "%s: %s names the workspace directory itself; give a file "
                               "path such as \"" TOOLS__WORKSPACE "/model_new.py\"",
                               tool, key);
        return CA_EPARSE;
    }
    snprintf(p->shown, sizeof(p->shown), "%s%s%s", TOOLS__WORKSPACE, p->rel[0] ? "/" : "", p->rel);
    snprintf(p->key, sizeof(p->key), "%s", p->rel);
    return 0;
}

/* The path of fd (beneath the root) relative to the root, from /proc. */
static int fd_rel(const struct tool_ctx *ctx, int fd, char *out, size_t outsz)
{
    char link[64], real[CA_LIMIT_PATH + 1];
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, real, sizeof(real) - 1);
    if (n < 0)
        return -errno;
    if ((size_t)n >= sizeof(real) - 1)
        return -ENAMETOOLONG;
    real[n] = '\0';
    size_t rl = strlen(ctx->root_real);
    if (strcmp(ctx->root_real, "/") == 0)
        rl = 0;
    if (strncmp(real, ctx->root_real, rl) != 0 || (real[rl] != '/' && real[rl] != '\0'))
        return CA_EESCAPE;
    const char *rest = real + rl;
    while (*rest == '/')
        rest++;
    if ((size_t)snprintf(out, outsz, "%s", rest) >= outsz)
        return -ENAMETOOLONG;
    return 0;
}

int tools__resolve(struct tool_ctx *ctx, const char *tool, struct tools__path *p,
                   struct tool_result *res)
{
    char key[CA_LIMIT_PATH + 1];
    snprintf(p->key, sizeof(p->key), "%s", p->rel);
    p->exists = false;
    int fd = fs_root_open_at(&ctx->root, p->rel[0] ? p->rel : ".", O_PATH, 0, NULL);
    if (fd >= 0) {
        p->exists = true;
        int rc = fd_rel(ctx, fd, key, sizeof(key));
        close(fd);
        if (rc == CA_EESCAPE)
            return tools__fs_error(res, tool, rc, p, "open");
        if (!rc)
            snprintf(p->key, sizeof(p->key), "%s", key);
        return 0;
    }
    if (fd == CA_EESCAPE)
        return tools__fs_error(res, tool, fd, p, "open");
    if (fd != -ENOENT)
        return 0; /* the operation itself reports it */
    /* A new file: resolve its parent. */
    const char *slash = strrchr(p->rel, '/');
    char parent[CA_LIMIT_PATH + 1];
    snprintf(parent, sizeof(parent), "%.*s", slash ? (int)(slash - p->rel) : 1,
             slash ? p->rel : ".");
    fd = fs_root_open_at(&ctx->root, parent, O_PATH | O_DIRECTORY, 0, NULL);
    if (fd == CA_EESCAPE)
        return tools__fs_error(res, tool, fd, p, "open");
    if (fd < 0)
        return 0;
    int rc = fd_rel(ctx, fd, key, sizeof(key));
    close(fd);
    if (rc == CA_EESCAPE)
        return tools__fs_error(res, tool, rc, p, "open");
    if (!rc) {
        const char *base = slash ? slash + 1 : p->rel;
        if ((size_t)snprintf(p->key, sizeof(p->key), "%s%s%s", key, key[0] ? "/" : "", base) >=
            sizeof(p->key))
            snprintf(p->key, sizeof(p->key), "%s", p->rel);
    }
    return 0;
}

bool tools__read_only(const struct tool_ctx *ctx, const char *rel)
{
    for (size_t i = 0; i < ctx->nro; i++) {
        size_t n = strlen(ctx->ro[i]);
        if (strncmp(rel, ctx->ro[i], n) == 0 && (rel[n] == '\0' || rel[n] == '/'))
            return true;
    }
    return false;
}

struct tools__file_id tools__file_id(const struct tool_ctx *ctx, const char *rel)
{
    struct tools__file_id id = {0, 0, false};
    int fd = fs_root_open_at(&ctx->root, rel, O_PATH, 0, NULL);
    struct stat st;
    if (fd >= 0 && fstat(fd, &st) == 0)
        id = (struct tools__file_id){st.st_dev, st.st_ino, true};
    if (fd >= 0)
        close(fd);
    return id;
}

int tools__check_writable(const struct tool_ctx *ctx, const char *tool, const struct tools__path *p,
                          struct tool_result *res)
{
    static const char rule[] = "is read-only in this workspace (it is part of the task "
                               "infrastructure); write your code in model_new.py or kernels/";
    if (tools__read_only(ctx, p->rel)) {
        tool_result_errorf(res, "%s: %s %s", tool, p->shown, rule);
        return CA_EESCAPE;
    }
    if (tools__read_only(ctx, p->key)) {
        tool_result_errorf(res, "%s: %s resolves to " TOOLS__WORKSPACE "/%s, which %s", tool,
                           p->shown, p->key, rule);
        return CA_EESCAPE;
    }
    if (!p->exists)
        return 0;
    /* The same file by identity: covers symlinked folders even where keys
     * cannot be resolved (no /proc). */
    struct tools__file_id id = tools__file_id(ctx, p->key);
    for (size_t i = 0; id.valid && i < ctx->nro; i++) {
        if (ctx->ro_ids[i].valid && ctx->ro_ids[i].dev == id.dev && ctx->ro_ids[i].ino == id.ino) {
            tool_result_errorf(res, "%s: %s is the file " TOOLS__WORKSPACE "/%s, which %s", tool,
                               p->shown, ctx->ro[i], rule);
            return CA_EESCAPE;
        }
    }
    return 0;
}

int tools__fs_error(struct tool_result *res, const char *tool, int code,
                    const struct tools__path *p, const char *doing)
{
    switch (code) {
    case CA_EESCAPE:
        tool_result_errorf(res,
                           "%s: %s leads outside " TOOLS__WORKSPACE " through a symlink; tools "
                           "only reach files inside " TOOLS__WORKSPACE,
                           tool, p->shown);
        break;
    case -ENOENT:
        tool_result_errorf(res, "%s: %s does not exist (Glob lists files, e.g. pattern \"**/*\")",
                           tool, p->shown);
        break;
    case -ENOTDIR:
        tool_result_errorf(res, "%s: cannot %s %s: a part of the path is a file, not a folder",
                           tool, doing, p->shown);
        break;
    case -EISDIR:
        tool_result_errorf(res, "%s: %s is a directory; give a file path", tool, p->shown);
        break;
    case -ENOSPC:
    case -EDQUOT:
        tool_result_errorf(res,
                           "%s: cannot %s %s: the workspace is out of disk space; delete "
                           "files you no longer need",
                           tool, doing, p->shown);
        break;
    default:
        tool_result_errorf(res, "%s: cannot %s %s: %s", tool, doing, p->shown, ca_strerror(code));
        break;
    }
    return code;
}

int tools__load(struct tool_ctx *ctx, const char *tool, const struct tools__path *p,
                bool missing_ok, struct buf *b, struct stat *st, struct tool_result *res)
{
    int fd = fs_root_open_at(&ctx->root, p->rel[0] ? p->rel : ".", O_RDONLY | O_NOCTTY | O_NONBLOCK,
                             0, NULL);
    if (fd < 0) {
        if (fd == -ENOENT && missing_ok)
            return fd;
        return tools__fs_error(res, tool, fd, p, "open");
    }
    int rc = 0;
    if (fstat(fd, st) != 0) {
        rc = tools__fs_error(res, tool, -errno, p, "read");
    } else if (S_ISDIR(st->st_mode)) {
        if (strcmp(tool, "Read") == 0)
            tool_result_errorf(res,
                               "%s: %s is a directory; list it with Glob (pattern \"%s/*\") or "
                               "Bash (ls %s)",
                               tool, p->shown, p->shown, p->shown);
        else
            tool_result_errorf(res, "%s: %s is a directory; give a file path", tool, p->shown);
        rc = -EISDIR;
    } else if (!S_ISREG(st->st_mode)) {
        tool_result_errorf(res, "%s: %s is not a regular file (a device, FIFO or socket)", tool,
                           p->shown);
        rc = -EINVAL;
    } else if ((uint64_t)st->st_size > TOOLS__FILE_MAX) {
        tool_result_errorf(res,
                           "%s: %s is %lld bytes, over the %zu MiB this tool handles; look at "
                           "parts of it with Bash (head, sed -n, grep)",
                           tool, p->shown, (long long)st->st_size, TOOLS__FILE_MAX / CA_MIB);
        rc = CA_ETOOBIG;
    } else {
        rc = fs_read_fd(fd, TOOLS__FILE_MAX, b, p->rel, NULL);
        if (rc)
            tools__fs_error(res, tool, rc, p, "read");
    }
    close(fd);
    return rc;
}

int tools__check_fresh(const struct tool_ctx *ctx, const char *tool, const struct tools__path *p,
                       const struct buf *content, struct tool_result *res)
{
    const struct hash128 *h = tools__read_set_get(ctx, p->key);
    if (!h) {
        tool_result_errorf(res,
                           "%s: %s already exists and has not been Read in this episode; Read it "
                           "first (files are changed only after you have seen them)",
                           tool, p->shown);
        return CA_EPARSE;
    }
    struct hash128 now = hash128(content->data, content->len);
    if (now.hi != h->hi || now.lo != h->lo) {
        tool_result_errorf(res, "%s: %s was modified since you read it; Read it again", tool,
                           p->shown);
        return CA_EPARSE;
    }
    return 0;
}

/*
 * Replace rel beneath root atomically: a temporary ".<name>.tmp-<hex>" in
 * the same folder (O_EXCL, O_NOFOLLOW), then rename. Unlike
 * fs_root_write_atomic it does not fsync: an episode's workspace needs
 * readers to see the old or the new file, never half of one, but not
 * durability across a power cut, and the two fsyncs cost a millisecond or
 * more per Edit. The mode is set with fchmod, so the umask does not change
 * an existing file's mode.
 */
static int replace_file(const struct fs_root *root, const char *rel, const char *data, size_t len,
                        mode_t mode)
{
    const char *slash = strrchr(rel, '/');
    const char *base = slash ? slash + 1 : rel;
    char dir[CA_LIMIT_PATH + 1], tmp[NAME_MAX + 1];
    snprintf(dir, sizeof(dir), "%.*s", slash ? (int)(slash - rel) : 1, slash ? rel : ".");
    int dirfd = fs_root_open_at(root, dir, O_PATH | O_DIRECTORY, 0, NULL);
    if (dirfd < 0)
        return dirfd;
    static unsigned counter;
    int fd = -1, rc = 0;
    for (int tries = 0; fd < 0; tries++) {
        uint64_t seed[3] = {(uint64_t)ca_now_us(), (uint64_t)getpid(), counter++};
        char hex[HASH64_HEX_LEN + 1];
        hash64_hex(hash64(seed, sizeof(seed)), hex);
        if ((size_t)snprintf(tmp, sizeof(tmp), ".%.200s.tmp-%.12s", base, hex) >= sizeof(tmp)) {
            rc = -ENAMETOOLONG;
            goto out;
        }
        fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0 && (errno != EEXIST || tries == 100)) {
            rc = -errno;
            goto out;
        }
    }
    rc = fs_write_all(fd, data, len);
    if (!rc && fchmod(fd, mode) != 0)
        rc = -errno;
    if (close(fd) != 0 && !rc && errno != EINTR)
        rc = -errno;
    if (!rc && renameat(dirfd, tmp, dirfd, base) != 0)
        rc = -errno;
    if (rc)
        unlinkat(dirfd, tmp, 0);
out:
    close(dirfd);
    return rc;
}

int tools__store(struct tool_ctx *ctx, const char *tool, struct tools__path *p, const char *data,
                 size_t len, mode_t mode, struct tool_result *res)
{
    int rc;
    if (!p->exists) {
        const char *slash = strrchr(p->key, '/');
        if (slash) {
            char parent[CA_LIMIT_PATH + 1];
            snprintf(parent, sizeof(parent), "%.*s", (int)(slash - p->key), p->key);
            rc = fs_root_mkdirs(&ctx->root, parent, 0755, NULL);
            if (rc)
                return tools__fs_error(res, tool, rc, p, "create the folders for");
            /* Now that the folders exist, the key can be resolved fully. */
            rc = tools__resolve(ctx, tool, p, res);
            if (rc)
                return rc;
            rc = tools__check_writable(ctx, tool, p, res);
            if (rc)
                return rc;
        }
    }
    rc = replace_file(&ctx->root, p->key, data, len, mode);
    if (rc)
        return tools__fs_error(res, tool, rc, p, "write");
    tools__read_set_put(ctx, p->key, hash128(data, len));
    return 0;
}
