/*
 * compile_cache.c - cache keys and the content-addressed cache directory.
 *
 * Layout under the cache directory:
 *   objects/ab/<32 hex>.o   one object per unit key (ab = its first two digits)
 *   so/<32 hex>.so          one linked module per key over the objects and link flags
 *   pch/<32 hex>/pch.h(.gch) one precompiled header per compiler, torch and flags
 *   tmp/                    build directories and entries on their way in or out
 *
 * Invariants: an entry appears only by link(2) (a file) or renameat2(2)
 * without replacing (a directory) of a complete, fsync'ed, read-only file
 * from tmp/ on the same file system, so a reader never sees half of one;
 * two evaluators storing the same key store equal content, and the first
 * stays: an entry's inode never changes until pruning removes it. Keys are XXH3-128 over
 * length-prefixed fields (hash_stream_add_field), so no two field lists
 * collide by shifting bytes between fields. A hit touches the entry's mtime,
 * which is the clock pruning evicts by.
 */
#include "eval/compile_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/fs.h"
#include "core/limits.h"
#include "core/log.h"
#include "core/banned.h"

/* Build directories older than this are left from a crash. */
#define STALE_TMP_SECONDS 3600
#define COPY_CHUNK ((size_t)1 << 20)

/* ---- argument vectors ---- */

void compile__argv_init(struct compile__argv *a)
{
    a->v = xcalloc(1, sizeof(*a->v));
    a->n = 0;
    a->alloc = 1;
}

void compile__argv_release(struct compile__argv *a)
{
    for (size_t i = 0; a->v && i < a->n; i++)
        free(a->v[i]);
    FREE_AND_NULL(a->v);
    a->n = a->alloc = 0;
}

static void argv_take(struct compile__argv *a, char *s)
{
    ALLOC_GROW(a->v, a->n + 2, a->alloc);
    a->v[a->n++] = s;
    a->v[a->n] = NULL;
}

void compile__argv_push(struct compile__argv *a, const char *s)
{
    argv_take(a, xstrdup(s));
}

void compile__argv_pushf(struct compile__argv *a, const char *fmt, ...)
{
    struct buf b;
    buf_init(&b, BUF_MAX_INTERNAL);
    va_list ap;
    va_start(ap, fmt);
    if (buf_vaddf(&b, fmt, ap))
        BUG("internal buffer overflow");
    va_end(ap);
    argv_take(a, buf_detach(&b, NULL));
}

void compile__argv_pushv(struct compile__argv *a, const struct compile__argv *from)
{
    for (size_t i = 0; i < from->n; i++)
        compile__argv_push(a, from->v[i]);
}

/* ---- keys ---- */

static void add_str(struct hash_stream *s, const char *v)
{
    /* NULL and "" hash alike: every caller treats a missing value as empty. */
    hash_stream_add_field(s, v ? v : "", v ? strlen(v) : 0);
}

static void add_sv(struct hash_stream *s, struct sv v)
{
    hash_stream_add_field(s, v.p ? v.p : "", v.len);
}

static void add_list(struct hash_stream *s, const char *const *v, size_t n)
{
    char count[32];
    snprintf(count, sizeof(count), "%zu", n);
    add_str(s, count);
    for (size_t i = 0; i < n; i++)
        add_str(s, v[i]);
}

static size_t list_len(const char *const *v)
{
    size_t n = 0;
    while (v && v[n])
        n++;
    return n;
}

static void finish(struct hash_stream *s, char out[HASH128_HEX_LEN + 1])
{
    hash128_hex(hash_stream_digest(s), out);
    hash_stream_free(s);
}

void compile__unit_key(const struct compile__unit_key_in *in, char out[HASH128_HEX_LEN + 1])
{
    struct hash_stream *s = hash_stream_new();
    add_str(s, COMPILE__KEY_SCHEMA);
    add_str(s, "object");
    add_str(s, compile_role_name(in->role));
    add_str(s, in->name);
    add_sv(s, in->source);
    add_sv(s, in->deps);
    add_str(s, in->compiler);
    add_str(s, in->compiler_version);
    add_list(s, in->argv, list_len(in->argv));
    add_str(s, in->headers);
    add_sv(s, in->template_header);
    finish(s, out);
}

void compile__so_key(const char *linker, const char *linker_version, const char *const *flags,
                     const char *const *object_keys, size_t n, char out[HASH128_HEX_LEN + 1])
{
    struct hash_stream *s = hash_stream_new();
    add_str(s, COMPILE__KEY_SCHEMA);
    add_str(s, "module");
    add_str(s, linker);
    add_str(s, linker_version);
    add_list(s, flags, list_len(flags));
    add_list(s, object_keys, n);
    finish(s, out);
}

void compile__pch_key(const char *compiler, const char *compiler_version, const char *headers,
                      const char *const *flags, struct sv header, char out[HASH128_HEX_LEN + 1])
{
    struct hash_stream *s = hash_stream_new();
    add_str(s, COMPILE__KEY_SCHEMA);
    add_str(s, "pch");
    add_str(s, compiler);
    add_str(s, compiler_version);
    add_str(s, headers);
    add_list(s, flags, list_len(flags));
    add_sv(s, header);
    finish(s, out);
}

/* ---- the directory ---- */

int compile_cache_dir(const struct compile_opts *opts, struct buf *out, struct ca_err *err)
{
    if (opts && opts->cache_dir && *opts->cache_dir) {
        if (buf_addstr(out, opts->cache_dir))
            return err_setf(err, CA_ETOOBIG, "compile cache directory path is over %d bytes",
                            CA_LIMIT_PATH);
        return 0;
    }
    return fs_cache_dir(out, "compile", err);
}

int compile_object_path(const struct compile_opts *opts, const char *key, struct buf *out,
                        struct ca_err *err)
{
    struct buf dir;
    buf_init(&dir, CA_LIMIT_PATH);
    int rc = compile_cache_dir(opts, &dir, err);
    if (rc == 0 && compile__cache_path(dir.data, COMPILE__OBJ, key, out))
        rc = err_setf(err, CA_ETOOBIG, "compile cache path under '%s' is too long", dir.data);
    buf_release(&dir);
    return rc;
}

int compile__cache_prepare(const char *dir, struct ca_err *err)
{
    static const char *const subdirs[] = {"objects", "so", "pch", "tmp"};
    struct buf p;
    buf_init(&p, CA_LIMIT_PATH);
    int rc = 0;
    for (size_t i = 0; !rc && i < ARRAY_SIZE(subdirs); i++) {
        buf_reset(&p);
        rc = fs_join(&p, dir, subdirs[i]);
        if (rc) {
            rc = err_setf(err, CA_ETOOBIG, "compile cache path under '%s' is too long", dir);
            break;
        }
        rc = fs_mkdirs(p.data, 0755, err);
        if (rc)
            err_prefix(err, "compile cache");
    }
    buf_release(&p);
    return rc;
}

int compile__cache_path(const char *dir, enum compile__entry kind, const char *key, struct buf *out)
{
    buf_reset(out);
    switch (kind) {
    case COMPILE__OBJ:
        return buf_addf(out, "%s/objects/%.2s/%s.o", dir, key, key);
    case COMPILE__SO:
        return buf_addf(out, "%s/so/%s.so", dir, key);
    case COMPILE__PCH:
        return buf_addf(out, "%s/pch/%s", dir, key);
    }
    BUG("unknown cache entry kind %d", (int)kind);
}

bool compile__cache_hit(const char *path)
{
    if (utimensat(AT_FDCWD, path, NULL, 0) == 0)
        return true;
    /* Someone else's entry in a shared cache: usable, just not touched. */
    return errno != ENOENT && access(path, R_OK) == 0;
}

int compile__cache_store(const char *file, const char *path, struct ca_err *err)
{
    int fd = open(file, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return err_setf(err, -errno, "compile cache: open '%s': %s", file, strerror(errno));
    int rc = 0;
    if (fsync(fd) != 0 || fchmod(fd, 0444) != 0)
        rc = err_setf(err, -errno, "compile cache: fsync/chmod '%s': %s", file, strerror(errno));
    close(fd);
    if (rc)
        return rc;
    /* objects/ab/: made on demand; a concurrent mkdir is fine. */
    const char *slash = strrchr(path, '/');
    if (slash) {
        char *parent = xstrndup(path, (size_t)(slash - path));
        if (mkdir(parent, 0755) != 0 && errno != EEXIST)
            rc = err_setf(err, -errno, "compile cache: mkdir '%s': %s", parent, strerror(errno));
        free(parent);
        if (rc)
            return rc;
    }
    /*
     * link(2), not rename(2): an entry, once there, stays until pruned. Renaming over it
     * would unlink the inode another evaluator has just looked up to hard-link into its
     * build (compile__link), whose link(2) then fails with ENOENT. Equal keys hold equal
     * content, so when the entry exists, ours is simply dropped.
     */
    if (link(file, path) != 0 && errno != EEXIST)
        return err_setf(err, -errno, "compile cache: link '%s' to '%s': %s", file, path,
                        strerror(errno));
    unlink(file);
    return 0;
}

int compile__copy_atomic(const char *src, const char *dst, mode_t mode, struct ca_err *err)
{
    int in = open(src, O_RDONLY | O_CLOEXEC);
    if (in < 0)
        return err_setf(err, -errno, "copy: open '%s': %s", src, strerror(errno));
    char *tmp = xstrfmt("%s.tmp-XXXXXX", dst);
    int out = mkostemp(tmp, O_CLOEXEC);
    int rc = 0;
    if (out < 0) {
        rc =
            err_setf(err, -errno, "copy: create a temporary beside '%s': %s", dst, strerror(errno));
        goto out;
    }
    for (;;) {
        ssize_t n = copy_file_range(in, NULL, out, NULL, COPY_CHUNK, 0);
        if (n == 0)
            break;
        if (n > 0)
            continue;
        if (errno == EINTR)
            continue;
        if (errno != EXDEV && errno != ENOSYS && errno != EINVAL && errno != EOPNOTSUPP) {
            rc = err_setf(err, -errno, "copy '%s' to '%s': %s", src, dst, strerror(errno));
            break;
        }
        /* No copy_file_range between these files: plain reads and writes. */
        char *chunk = xmalloc(COPY_CHUNK);
        ssize_t r;
        while (!rc && (r = read(in, chunk, COPY_CHUNK)) != 0) {
            if (r < 0) {
                if (errno != EINTR)
                    rc = err_setf(err, -errno, "copy: read '%s': %s", src, strerror(errno));
                continue;
            }
            for (ssize_t off = 0; !rc && off < r;) {
                ssize_t w = write(out, chunk + off, (size_t)(r - off));
                if (w < 0 && errno != EINTR)
                    rc = err_setf(err, -errno, "copy: write '%s': %s", tmp, strerror(errno));
                else if (w > 0)
                    off += w;
            }
        }
        free(chunk);
        break;
    }
    if (!rc && fchmod(out, mode) != 0)
        rc = err_setf(err, -errno, "copy: chmod '%s': %s", tmp, strerror(errno));
    close(out);
    if (!rc && rename(tmp, dst) != 0)
        rc = err_setf(err, -errno, "copy: rename to '%s': %s", dst, strerror(errno));
    if (rc)
        unlink(tmp);
out:
    close(in);
    free(tmp);
    return rc;
}

/* ---- pruning ---- */

struct entry {
    char *path;
    uint64_t bytes;
    struct timespec mtime;
    bool is_dir;
};

struct entries {
    struct entry *v;
    size_t n, alloc;
    uint64_t total;
};

static void entries_add(struct entries *e, char *path, uint64_t bytes, struct timespec mtime,
                        bool is_dir)
{
    ALLOC_GROW(e->v, e->n + 1, e->alloc);
    e->v[e->n++] = (struct entry){path, bytes, mtime, is_dir};
    e->total += bytes;
}

static uint64_t dir_bytes(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    uint64_t total = 0;
    struct dirent *de;
    struct stat st;
    while ((de = readdir(d)))
        if (de->d_name[0] != '.' && fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
            S_ISREG(st.st_mode))
            total += (uint64_t)st.st_blocks * 512;
    closedir(d);
    return total;
}

/* Entries directly in dir whose names end in suffix ("" and want_dir for pch/). */
static void scan(struct entries *e, const char *dir, const char *suffix, bool want_dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *de;
    size_t slen = strlen(suffix);
    while ((de = readdir(d))) {
        size_t n = strlen(de->d_name);
        if (de->d_name[0] == '.' || n < slen || strcmp(de->d_name + n - slen, suffix) != 0 ||
            strstr(de->d_name, ".tmp-"))
            continue;
        struct stat st;
        if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
            continue;
        char *path = xstrfmt("%s/%s", dir, de->d_name);
        if (want_dir && S_ISDIR(st.st_mode))
            entries_add(e, path, dir_bytes(path), st.st_mtim, true);
        else if (!want_dir && S_ISREG(st.st_mode))
            entries_add(e, path, (uint64_t)st.st_blocks * 512, st.st_mtim, false);
        else
            free(path);
    }
    closedir(d);
}

static int by_mtime(const void *a, const void *b)
{
    const struct entry *x = a, *y = b;
    if (x->mtime.tv_sec != y->mtime.tv_sec)
        return x->mtime.tv_sec < y->mtime.tv_sec ? -1 : 1;
    if (x->mtime.tv_nsec != y->mtime.tv_nsec)
        return x->mtime.tv_nsec < y->mtime.tv_nsec ? -1 : 1;
    return strcmp(x->path, y->path);
}

/* Move a directory entry into tmp/ first, so it vanishes at once, then delete it. */
static void remove_entry(const char *cache_dir, const struct entry *en)
{
    if (!en->is_dir) {
        unlink(en->path);
        char *info = xstrfmt("%s.info", en->path); /* ptxas's lines, beside an object */
        unlink(info);
        free(info);
        return;
    }
    char *grave = xstrfmt("%s/tmp/evict-%s-%ld", cache_dir, fs_basename(en->path), (long)getpid());
    struct ca_err e = {0};
    if (rename(en->path, grave) == 0 && fs_remove_tree(grave, &e) != 0)
        LOG_WARN("compile cache: %s", e.msg);
    free(grave);
}

static void remove_stale_tmp(const char *cache_dir)
{
    char *tmp = xstrfmt("%s/tmp", cache_dir);
    DIR *d = opendir(tmp);
    if (!d) {
        free(tmp);
        return;
    }
    time_t now = time(NULL);
    struct dirent *de;
    while ((de = readdir(d))) {
        struct stat st;
        if (de->d_name[0] == '.' || fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
            now - st.st_mtime < STALE_TMP_SECONDS)
            continue;
        char *p = xstrfmt("%s/%s", tmp, de->d_name);
        struct ca_err e = {0};
        if (fs_remove_tree(p, &e) != 0)
            LOG_WARN("compile cache: %s", e.msg);
        free(p);
    }
    closedir(d);
    free(tmp);
}

int compile_cache_prune(const char *cache_dir, uint64_t max_bytes,
                        struct compile_prune_stats *stats, struct ca_err *err)
{
    struct compile_prune_stats st = {0};
    if (!fs_is_dir(cache_dir))
        return err_setf(err, -ENOENT, "compile cache '%s' is not a directory", cache_dir);
    remove_stale_tmp(cache_dir);
    struct entries e = {0};
    char *objects = xstrfmt("%s/objects", cache_dir);
    DIR *d = opendir(objects);
    if (d) {
        struct dirent *de;
        while ((de = readdir(d)))
            if (de->d_name[0] != '.' && strlen(de->d_name) == 2) {
                char *sub = xstrfmt("%s/%s", objects, de->d_name);
                scan(&e, sub, ".o", false);
                free(sub);
            }
        closedir(d);
    }
    free(objects);
    char *so = xstrfmt("%s/so", cache_dir);
    scan(&e, so, ".so", false);
    free(so);
    char *pch = xstrfmt("%s/pch", cache_dir);
    scan(&e, pch, "", true);
    free(pch);

    st.bytes_before = st.bytes_after = e.total;
    if (e.total > max_bytes) {
        qsort(e.v, e.n, sizeof(*e.v), by_mtime);
        for (size_t i = 0; i < e.n && st.bytes_after > max_bytes; i++) {
            remove_entry(cache_dir, &e.v[i]);
            st.bytes_after -= e.v[i].bytes;
            st.removed++;
        }
    }
    for (size_t i = 0; i < e.n; i++)
        free(e.v[i].path);
    free(e.v);
    if (stats)
        *stats = st;
    LOG_DEBUG("compile cache %s: %llu -> %llu bytes, %zu entries removed", cache_dir,
              (unsigned long long)st.bytes_before, (unsigned long long)st.bytes_after, st.removed);
    return 0;
}
