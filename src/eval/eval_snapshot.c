/*
 * eval_snapshot.c - taking what the evaluator may use out of a workspace,
 * and laying the harness out on disk.
 *
 * Only agent-writable paths (workspace_path_writable) are taken, each opened
 * beneath the workspace root without following symlinks, size-bounded, and
 * copied into a fresh directory the agent cannot reach. model.py is taken
 * only when its content still matches the manifest's hash.
 */
#include "eval/eval.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/embed.h"
#include "core/fs.h"
#include "core/hash.h"
#include "core/json.h"
#include "core/limits.h"
#include "core/log.h"
#include "workspace/workspace.h"
#include "core/banned.h"

#define SNAPSHOT_FILE_MAX CA_LIMIT_TASK_BYTES
#define SNAPSHOT_FILES_MAX 64

static int copy_one(const struct fs_root *root, const char *rel, const char *dir, json_t *files,
                    struct ca_err *err)
{
    struct buf data, out;
    buf_init(&data, SNAPSHOT_FILE_MAX);
    buf_init(&out, CA_LIMIT_PATH);
    int rc = fs_root_read(root, rel, SNAPSHOT_FILE_MAX, &data, err);
    if (rc == CA_ETOOBIG)
        rc = err_setf(err, CA_ETOOBIG, "%s is larger than %zu bytes; keep sources smaller", rel,
                      (size_t)SNAPSHOT_FILE_MAX);
    if (rc == 0 && json_array_size(files) >= SNAPSHOT_FILES_MAX)
        rc = err_setf(err, CA_ETOOBIG, "more than %d evaluated files in the workspace",
                      SNAPSHOT_FILES_MAX);
    if (rc == 0 && (rc = fs_join(&out, dir, rel)) != 0)
        rc = err_setf(err, rc, "snapshot path too long");
    if (rc == 0)
        rc = fs_write_atomic(out.data, data.data, data.len, 0644, err);
    if (rc == 0)
        json_array_append_new(files, json_string(rel));
    buf_release(&data);
    buf_release(&out);
    return rc;
}

int eval_snapshot(const char *workspace, const char *dir, json_t **files_out, struct ca_err *err)
{
    struct fs_root root;
    int rc = fs_root_open(&root, workspace, err);
    if (rc)
        return rc;
    json_t *files = json_array();
    struct buf kdir;
    buf_init(&kdir, CA_LIMIT_PATH);
    DIR *d = NULL;
    rc = fs_join(&kdir, dir, "kernels");
    if (rc == 0)
        rc = fs_mkdirs(kdir.data, 0755, err);
    if (rc)
        goto out;
    struct stat mst;
    if (fstatat(root.fd, "model_new.py", &mst, AT_SYMLINK_NOFOLLOW) == 0) {
        rc = copy_one(&root, "model_new.py", dir, files, err);
        if (rc)
            goto out;
    }
    int kfd = fs_root_open_at(&root, "kernels", O_RDONLY | O_DIRECTORY | O_NOFOLLOW, 0, NULL);
    if (kfd >= 0 && !(d = fdopendir(kfd)))
        close(kfd);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        char rel[CA_LIMIT_PATH];
        if (snprintf(rel, sizeof(rel), "kernels/%s", e->d_name) >= (int)sizeof(rel))
            continue;
        if (!workspace_path_writable(rel))
            continue;
        struct stat st;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
            continue; /* symlinks and special files are never evaluated */
        rc = copy_one(&root, rel, dir, files, err);
        if (rc)
            goto out;
    }
out:
    if (d)
        closedir(d);
    buf_release(&kdir);
    fs_root_release(&root);
    if (rc) {
        json_decref(files);
        return rc;
    }
    *files_out = files;
    return 0;
}

/* The GPU side's harness: harness/NAME.py, one flat directory. The model_new.py policy under
 * harness/policy/ is not part of it: the evaluator runs it from memory (policy_py.c). */
static bool gpu_harness_file(const char *path)
{
    return strncmp(path, "harness/", 8) == 0 && !strchr(path + 8, '/');
}

int eval_harness_dir(const char *cache_dir, struct buf *path, struct ca_err *err)
{
    struct hash_stream *hs = hash_stream_new();
    size_t n = 0;
    for (size_t i = 0; i < embedded_files_count; i++) {
        const struct embedded_file *f = &embedded_files[i];
        if (!gpu_harness_file(f->path))
            continue;
        hash_stream_add_field(hs, f->path, strlen(f->path));
        hash_stream_add_field(hs, f->data, f->len);
        n++;
    }
    char hex[HASH128_HEX_LEN + 1];
    hash128_hex(hash_stream_digest(hs), hex);
    hash_stream_free(hs);
    if (n == 0)
        return err_setf(err, CA_EUNAVAIL, "this build carries no harness (rebuild cuda-agent)");
    int rc = buf_addf(path, "%s/harness-%.16s", cache_dir, hex);
    if (rc)
        return err_setf(err, rc, "cache path too long");
    if (fs_is_dir(path->data))
        return 0;
    rc = fs_mkdirs(cache_dir, 0700, err);
    struct buf tmp, file;
    buf_init(&tmp, CA_LIMIT_PATH);
    buf_init(&file, CA_LIMIT_PATH);
    if (rc == 0)
        rc = fs_mkdtemp_beside(path->data, &tmp, err);
    for (size_t i = 0; rc == 0 && i < embedded_files_count; i++) {
        const struct embedded_file *f = &embedded_files[i];
        if (!gpu_harness_file(f->path))
            continue;
        buf_reset(&file);
        rc = fs_join(&file, tmp.data, f->path + 8);
        if (rc == 0)
            rc = fs_write_atomic(file.data, f->data, f->len, 0644, err);
    }
    if (rc == 0) {
        rc = fs_rename_noreplace(tmp.data, path->data, err);
        if (rc == -EEXIST) /* another evaluator laid out the same content first */
            rc = 0;
    }
    if (tmp.len && fs_is_dir(tmp.data)) {
        struct ca_err ignored;
        if (fs_remove_tree(tmp.data, &ignored))
            LOG_WARN("could not remove %s: %s", tmp.data, ignored.msg);
    }
    buf_release(&tmp);
    buf_release(&file);
    return rc;
}
