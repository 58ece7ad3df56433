/*
 * workspace.c - lays out an episode workspace and checks one against its
 * manifest.
 *
 * Invariants: every file is written beneath a root fd opened on the
 * temporary directory (fs_root_*), so a template path can never escape it;
 * read-only files get their final modes only after all content is written;
 * the rename into place is the commit point. The manifest's hashes are of
 * file content as written.
 */
#include "workspace/workspace.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/buf.h"
#include "core/embed.h"
#include "core/fs.h"
#include "core/hash.h"
#include "core/json.h"
#include "core/limits.h"
#include "core/log.h"
#include "core/banned.h"

#define TEMPLATE_PREFIX "template/"
#define MODEL_NEW_TEMPLATE "template/model_new.py.in"

const char *const workspace_writable_patterns[] = {
    "model_new.py",
    "kernels/*.cu",
    "kernels/*_binding.cpp",
    NULL,
};

bool workspace_path_writable(const char *rel)
{
    for (size_t i = 0; workspace_writable_patterns[i]; i++)
        if (fnmatch(workspace_writable_patterns[i], rel, FNM_PATHNAME | FNM_PERIOD) == 0)
            return true;
    return false;
}

/* Replace every occurrence of `token` in `s` with `with`. */
static char *replace_all(const char *s, const char *token, const char *with)
{
    struct buf b;
    buf_init(&b, BUF_MAX_INTERNAL);
    size_t tlen = strlen(token);
    const char *p = s, *hit;
    while ((hit = strstr(p, token))) {
        if (buf_add(&b, p, (size_t)(hit - p)) || buf_addstr(&b, with))
            BUG("internal buffer overflow");
        p = hit + tlen;
    }
    if (buf_addstr(&b, p))
        BUG("internal buffer overflow");
    return buf_detach(&b, NULL);
}

char *workspace_render_model_new(const char *tmpl, const char *init_signature)
{
    const char *sig = init_signature && *init_signature ? init_signature : "self";
    /* The hint lists the arguments Model receives, to pass on unchanged. */
    const char *comma = strchr(sig, ',');
    char *hint = xstrfmt("# ModelNew receives the same arguments as Model: (%s)",
                         comma ? comma + 1 + (comma[1] == ' ') : "no arguments");
    char *a = replace_all(tmpl, "{{INIT_SIGNATURE}}", sig);
    char *out = replace_all(a, "{{INIT_ARGS}}", hint);
    free(a);
    free(hint);
    return out;
}

struct ro_file {
    const char *rel;
    char hex[HASH128_HEX_LEN + 1];
    mode_t mode;
};

static int write_file(const struct fs_root *root, const char *rel, const char *data, size_t len,
                      mode_t mode, struct ca_err *err)
{
    const char *slash = strrchr(rel, '/');
    if (slash) {
        char *parent = xstrndup(rel, (size_t)(slash - rel));
        int rc = fs_root_mkdirs(root, parent, 0755, err);
        free(parent);
        if (rc)
            return rc;
    }
    /* Written writable; final modes are applied once everything is in. */
    return fs_root_write_atomic(root, rel, data, len, mode | 0200, err);
}

static json_t *task_meta(const struct task *task)
{
    json_t *ops = json_array();
    for (size_t i = 0; i < task->nops; i++)
        json_array_append_new(ops, json_string(task->ops[i]));
    return json_pack("{s:s, s:s, s:i, s:o, s:s*}", "id", task->id, "name", task->name, "level",
                     task->level, "ops", ops, "data_source", task->data_source);
}

static int fill_workspace(const struct task *task, const char *tmp, struct ca_err *err)
{
    struct fs_root root;
    int rc = fs_root_open(&root, tmp, err);
    if (rc)
        return rc;
    struct ro_file ro[64];
    size_t nro = 0;
    char *model_new = NULL;
    json_t *manifest = NULL;
    struct buf mbuf;
    buf_init(&mbuf, CA_LIMIT_JSON_BYTES);

    for (size_t i = 0; i < embedded_files_count; i++) {
        const struct embedded_file *f = &embedded_files[i];
        if (strncmp(f->path, TEMPLATE_PREFIX, strlen(TEMPLATE_PREFIX)) != 0)
            continue;
        const char *rel = f->path + strlen(TEMPLATE_PREFIX);
        if (strcmp(f->path, MODEL_NEW_TEMPLATE) == 0)
            continue;
        if (nro == ARRAY_SIZE(ro) - 2)
            BUG("template has more than %zu files", ARRAY_SIZE(ro) - 2);
        mode_t mode = f->executable ? 0555 : 0444;
        rc = write_file(&root, rel, f->data, f->len, mode, err);
        if (rc)
            goto out;
        ro[nro].rel = rel;
        ro[nro].mode = mode;
        hash128_hex(hash128(f->data, f->len), ro[nro++].hex);
    }

    rc = write_file(&root, "model.py", task->code, task->code_len, 0444, err);
    if (rc)
        goto out;
    ro[nro].rel = "model.py";
    ro[nro].mode = 0444;
    hash128_hex(hash128(task->code, task->code_len), ro[nro++].hex);

    const struct embedded_file *tmpl = embed_find(MODEL_NEW_TEMPLATE);
    if (!tmpl) {
        rc = err_setf(err, CA_ENOTFOUND, "this build has no %s (rebuild cuda-agent)",
                      MODEL_NEW_TEMPLATE);
        goto out;
    }
    model_new = workspace_render_model_new(tmpl->data, task->init_signature);
    rc = write_file(&root, "model_new.py", model_new, strlen(model_new), 0644, err);
    if (rc)
        goto out;
    rc = fs_root_mkdirs(&root, "kernels", 0755, err);
    if (rc)
        goto out;

    json_t *writable = json_array(), *files = json_object();
    for (size_t i = 0; workspace_writable_patterns[i]; i++)
        json_array_append_new(writable, json_string(workspace_writable_patterns[i]));
    for (size_t i = 0; i < nro; i++)
        json_object_set_new(files, ro[i].rel, json_string(ro[i].hex));
    json_object_set_new(files, WORKSPACE_MANIFEST, json_null());
    manifest = json_pack("{s:i, s:s, s:o, s:o, s:o}", "format", WORKSPACE_FORMAT, "created_by",
                         "cuda-agent " CA_VERSION, "task", task_meta(task), "writable", writable,
                         "read_only", files);
    rc = jsonx_dump(manifest, 2, &mbuf);
    if (rc || (rc = buf_addch(&mbuf, '\n'))) {
        rc = err_setf(err, rc, "manifest too large");
        goto out;
    }
    rc = write_file(&root, WORKSPACE_MANIFEST, mbuf.data, mbuf.len, 0444, err);
    if (rc)
        goto out;
    ro[nro].rel = WORKSPACE_MANIFEST;
    ro[nro++].mode = 0444;

    for (size_t i = 0; i < nro; i++) {
        int fd = fs_root_open_at(&root, ro[i].rel, O_RDONLY | O_NOFOLLOW, 0, err);
        if (fd < 0) {
            rc = fd;
            goto out;
        }
        if (fchmod(fd, ro[i].mode) != 0) {
            rc = err_setf(err, -errno, "%s/%s: cannot make read-only: %s", tmp, ro[i].rel,
                          strerror(errno));
            close(fd);
            goto out;
        }
        close(fd);
    }
out:
    free(model_new);
    json_decref(manifest);
    buf_release(&mbuf);
    fs_root_release(&root);
    return rc;
}

static bool is_our_workspace(const char *dir)
{
    struct buf p;
    buf_init(&p, CA_LIMIT_PATH);
    bool ok = fs_join(&p, dir, WORKSPACE_MANIFEST) == 0 && fs_is_file(p.data);
    buf_release(&p);
    return ok;
}

int workspace_create(const struct task *task, const char *dir, unsigned flags, struct ca_err *err)
{
    int64_t t0 = ca_now_us();
    if (!dir || !*dir)
        return err_setf(err, CA_EUSAGE, "no workspace directory given");
    if (strlen(dir) > CA_LIMIT_PATH - 64)
        return err_setf(err, CA_ETOOBIG, "workspace path is longer than %zu bytes",
                        (size_t)CA_LIMIT_PATH - 64);
    bool replace = false;
    if (fs_exists(dir)) {
        if (!(flags & WORKSPACE_FORCE))
            return err_setf(err, -EEXIST,
                            "%s already exists; choose a new directory or pass --force to "
                            "replace a workspace",
                            dir);
        if (!is_our_workspace(dir))
            return err_setf(err, -EEXIST,
                            "%s exists and is not a cuda-agent workspace (no %s); refusing to "
                            "replace it",
                            dir, WORKSPACE_MANIFEST);
        replace = true;
    }
    struct buf tmp;
    buf_init(&tmp, CA_LIMIT_PATH);
    int rc = fs_mkdtemp_beside(dir, &tmp, err);
    if (rc)
        goto out;
    rc = fill_workspace(task, tmp.data, err);
    if (rc)
        goto fail;
    if (replace) {
        rc = fs_remove_tree(dir, err);
        if (rc)
            goto fail;
    }
    rc = fs_rename_noreplace(tmp.data, dir, err);
    if (rc)
        goto fail;
    if (log_events_on())
        log_event("workspace.create", ca_now_us() - t0,
                  json_pack("{s:s, s:s}", "task", task->id, "dir", dir));
    goto out;
fail : {
    struct ca_err ignored;
    if (fs_remove_tree(tmp.data, &ignored))
        LOG_WARN("could not remove %s: %s", tmp.data, ignored.msg);
}
out:
    buf_release(&tmp);
    return rc;
}

/* Add workspace-relative paths of regular files under rel (recursive). */
static int list_files(const struct fs_root *root, const char *rel, json_t *writable,
                      json_t *ignored, size_t *count, struct ca_err *err)
{
    int fd = rel ? fs_root_open_at(root, rel, O_RDONLY | O_DIRECTORY | O_NOFOLLOW, 0, err)
                 : openat(root->fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return fd == -1 ? err_setf(err, -errno, "%s: %s", root->path, strerror(errno)) : fd;
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return err_setf(err, -errno, "%s: %s", root->path, strerror(errno));
    }
    int rc = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (++*count > CA_LIMIT_WORKSPACE_FILES) {
            rc = err_setf(err, CA_ETOOBIG, "%s holds more than %d files", root->path,
                          CA_LIMIT_WORKSPACE_FILES);
            break;
        }
        char *path = rel ? xstrfmt("%s/%s", rel, e->d_name) : xstrdup(e->d_name);
        struct stat st;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
            free(path);
            continue;
        }
        if (S_ISDIR(st.st_mode))
            rc = list_files(root, path, writable, ignored, count, err);
        else if (S_ISREG(st.st_mode) && workspace_path_writable(path))
            json_array_append_new(writable, json_string(path));
        else
            json_array_append_new(ignored, json_string(path));
        free(path);
        if (rc)
            break;
    }
    closedir(d);
    return rc;
}

static void problem(json_t *problems, const char *fmt, ...) CA_PRINTF(2, 3);
static void problem(json_t *problems, const char *fmt, ...)
{
    char msg[CA_LIMIT_PATH + CA_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    json_array_append_new(problems, json_string(msg));
}

int workspace_check(const char *dir, json_t **report, struct ca_err *err)
{
    *report = NULL;
    struct fs_root root;
    int rc = fs_root_open(&root, dir, err);
    if (rc)
        return rc;
    struct buf text;
    buf_init(&text, CA_LIMIT_JSON_BYTES);
    json_t *manifest = NULL, *files = NULL, *problems = json_array();
    json_t *writable = json_array(), *ignored = json_array();
    rc = fs_root_read(&root, WORKSPACE_MANIFEST, CA_LIMIT_JSON_BYTES, &text, err);
    if (rc) {
        /* The directory exists (the root opened): it is just not a workspace. */
        char inner[CA_ERR_MSG_MAX];
        snprintf(inner, sizeof(inner), "%s", err ? err->msg : "");
        rc = err_setf(err, CA_EPARSE, "%s is not a cuda-agent workspace: %s", dir, inner);
        goto out;
    }
    char what[CA_LIMIT_PATH + 32];
    snprintf(what, sizeof(what), "%s/%s", dir, WORKSPACE_MANIFEST);
    rc = jsonx_parse(sv_from(text.data, text.len), CA_LIMIT_JSON_BYTES, what, &manifest, err);
    if (rc)
        goto out;
    int64_t format = 0;
    rc = jsonx_get_int(manifest, "format", true, &format, what, err);
    if (rc == 0 && format != WORKSPACE_FORMAT)
        rc = err_setf(err, CA_EPARSE, "%s: format %lld is not supported (expected %d)", what,
                      (long long)format, WORKSPACE_FORMAT);
    if (rc == 0)
        rc = jsonx_get_object(manifest, "read_only", true, &files, what, err);
    if (rc)
        goto out;
    const char *rel;
    json_t *want;
    json_object_foreach(files, rel, want)
    {
        struct buf content;
        struct ca_err ferr;
        buf_init(&content, CA_LIMIT_TASK_BYTES * 4);
        if (fs_root_read(&root, rel, content.max, &content, &ferr) != 0) {
            problem(problems, "read-only file %s is missing or unreadable: %s", rel, ferr.msg);
        } else if (json_is_string(want)) {
            char hex[HASH128_HEX_LEN + 1];
            hash128_hex(hash128(content.data, content.len), hex);
            if (strcmp(hex, json_string_value(want)) != 0)
                problem(problems,
                        "read-only file %s was modified (its content no longer matches the "
                        "manifest)",
                        rel);
        }
        buf_release(&content);
    }
    size_t count = 0;
    rc = list_files(&root, NULL, writable, ignored, &count, err);
    if (rc)
        goto out;
    /* Read-only files are expected; only report other non-writable files. */
    json_t *extra = json_array();
    size_t i;
    json_t *v;
    json_array_foreach(ignored, i, v)
    {
        if (!json_object_get(files, json_string_value(v)))
            json_array_append(extra, v);
    }
    json_t *task = json_object_get(manifest, "task");
    *report =
        json_pack("{s:b, s:O*, s:O, s:O, s:o}", "ok", json_array_size(problems) == 0, "task", task,
                  "problems", problems, "writable_files", writable, "ignored_files", extra);
out:
    json_decref(manifest);
    json_decref(problems);
    json_decref(writable);
    json_decref(ignored);
    buf_release(&text);
    fs_root_release(&root);
    return rc;
}
