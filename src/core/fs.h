/*
 * fs.h - file helpers: bounded reads, atomic writes by rename, recursive
 * create/remove, and path resolution confined beneath a root directory.
 *
 * Confinement: a struct fs_root holds an O_PATH fd of a directory. Every
 * fs_root_* call takes a path relative to it and refuses absolute paths,
 * ".." components, and symlinks that lead outside (openat2 with
 * RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS where the kernel has it; otherwise
 * a component-by-component walk with O_NOFOLLOW that refuses every symlink).
 * Errors are CA_EESCAPE with a message naming the path.
 *
 * All fds are O_CLOEXEC. Functions are thread-safe (no shared state).
 */
#ifndef CA_FS_H
#define CA_FS_H

#include <stdbool.h>
#include <sys/types.h>

#include "core/buf.h"
#include "core/err.h"

/* Append the file's contents to b; CA_ETOOBIG if larger than max bytes. */
int fs_read_file(const char *path, size_t max, struct buf *b,
                 struct ca_err *err) WARN_UNUSED_RESULT;
/* Same from an open fd (read to EOF). */
int fs_read_fd(int fd, size_t max, struct buf *b, const char *what,
               struct ca_err *err) WARN_UNUSED_RESULT;

/*
 * Write data to path atomically: a temporary file in the same directory
 * (O_EXCL, mode), fsync, rename over path, fsync the directory. On failure
 * the temporary is removed and path is untouched.
 */
int fs_write_atomic(const char *path, const void *data, size_t len, mode_t mode,
                    struct ca_err *err) WARN_UNUSED_RESULT;

/* write(2) all n bytes, retrying short writes and EINTR: 0 or -errno. */
int fs_write_all(int fd, const void *p, size_t n) WARN_UNUSED_RESULT;

/* mkdir -p; existing directories are fine. */
int fs_mkdirs(const char *path, mode_t mode, struct ca_err *err) WARN_UNUSED_RESULT;
/* rm -rf without following symlinks (a symlink is removed, not its target);
 * a missing path is fine. Makes read-only directories writable as needed. */
int fs_remove_tree(const char *path, struct ca_err *err) WARN_UNUSED_RESULT;
/* Create a fresh directory next to `path` named "<path>.tmp-XXXXXX"; the
 * caller fills it and renames it into place (fs_rename_noreplace). */
int fs_mkdtemp_beside(const char *path, struct buf *tmp_path,
                      struct ca_err *err) WARN_UNUSED_RESULT;
/* rename(2) that fails with -EEXIST instead of replacing an existing path. */
int fs_rename_noreplace(const char *from, const char *to, struct ca_err *err) WARN_UNUSED_RESULT;

bool fs_is_dir(const char *path);
bool fs_is_file(const char *path);
bool fs_exists(const char *path);

/*
 * The cuda-agent cache directory, appended to out: $CUDA_AGENT_CACHE_DIR, else
 * $XDG_CACHE_HOME/cuda-agent, else $HOME/.cache/cuda-agent; then "/sub" when sub is
 * not NULL. Not created. CA_EUSAGE when none of the variables is set.
 */
int fs_cache_dir(struct buf *out, const char *sub, struct ca_err *err) WARN_UNUSED_RESULT;

/* Join a and b with one '/', into b_out (appended). */
int fs_join(struct buf *out, const char *a, const char *b) WARN_UNUSED_RESULT;
/* Last path component (borrowed pointer into path). */
const char *fs_basename(const char *path);

/* ---- confinement beneath a root ---- */

struct fs_root {
    int fd;     /* O_PATH | O_DIRECTORY */
    char *path; /* as given, for messages */
};

int fs_root_open(struct fs_root *root, const char *path, struct ca_err *err) WARN_UNUSED_RESULT;
void fs_root_release(struct fs_root *root);

/*
 * Check a relative path lexically: not empty, not absolute, no "..", no NUL,
 * at most CA_LIMIT_PATH bytes and CA_LIMIT_PATH_DEPTH components. "." parts
 * and repeated slashes are allowed.
 */
int fs_check_relpath(const char *rel, struct ca_err *err) WARN_UNUSED_RESULT;

/*
 * Open rel beneath root with open(2) flags/mode (O_CLOEXEC added). Returns
 * the fd or a negative code. Symlinks inside the root that stay inside are
 * followed when openat2 is available; the final component is never followed
 * when flags has O_NOFOLLOW.
 */
int fs_root_open_at(const struct fs_root *root, const char *rel, int flags, mode_t mode,
                    struct ca_err *err) WARN_UNUSED_RESULT;
/* Read rel beneath root into b (bounded). */
int fs_root_read(const struct fs_root *root, const char *rel, size_t max, struct buf *b,
                 struct ca_err *err) WARN_UNUSED_RESULT;
/* Atomic write of rel beneath root (parent directory must exist). */
int fs_root_write_atomic(const struct fs_root *root, const char *rel, const void *data, size_t len,
                         mode_t mode, struct ca_err *err) WARN_UNUSED_RESULT;
/* mkdir -p of rel beneath root. */
int fs_root_mkdirs(const struct fs_root *root, const char *rel, mode_t mode,
                   struct ca_err *err) WARN_UNUSED_RESULT;

/* Whether the running kernel supports openat2 (cached after first call). */
bool fs_have_openat2(void);
/* Tests only: force the fallback walk even where openat2 exists. */
void fs__force_no_openat2(bool on);

#endif
