/*
 * bus_job.c - jobs: built by a client from in-memory files (or a local evaluation's snapshot),
 * encoded as one canonical JSON document (sorted keys, files sorted by path) whose SHA-256 is
 * the job's id; parsed and checked by a worker, whose files it fetches by digest, verifies and
 * writes into a private job directory.
 *
 * Invariant: a worker writes nothing it has not verified: a blob whose SHA-256 or size differs
 * from the job's, a path the workspace rules would not snapshot, an option the evaluator service
 * would not accept from a client: each fails the job with a message naming it.
 */
#include "bus/bus_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/fs.h"
#include "core/json.h"
#include "core/limits.h"
#include "core/log.h"
#include "eval/evald.h"
#include "workspace/workspace.h"
#include "core/banned.h"

const char *const bus__opt_keys[] = {
    "mode",       "timing",    "precision",        "rules", "seeds", "atol", "rtol",
    "timeout_ms", "budget_ms", "compile_baseline", NULL,
};

struct blob {
    char *path; /* NULL for the task and KernelBench file */
    char *data;
    size_t len;
    char sha[SHA256_HEX_LEN + 1];
};

struct bus_job {
    struct blob *files;
    size_t n_files, alloc_files;
    struct blob task, kb;
    json_t *opts;
};

struct bus_job *bus_job_new(void)
{
    struct bus_job *j = xcalloc(1, sizeof(*j));
    j->opts = json_object();
    return j;
}

static void blob_release(struct blob *b)
{
    free(b->path);
    free(b->data);
    memset(b, 0, sizeof(*b));
}

void bus_job_free(struct bus_job *j)
{
    if (!j)
        return;
    for (size_t i = 0; i < j->n_files; i++)
        blob_release(&j->files[i]);
    free(j->files);
    blob_release(&j->task);
    blob_release(&j->kb);
    json_decref(j->opts);
    free(j);
}

static int blob_set(struct blob *b, const void *data, size_t n, const char *what,
                    struct ca_err *err)
{
    if (n > CA_LIMIT_TASK_BYTES)
        return err_setf(err, CA_ETOOBIG, "%s is larger than %zu bytes", what,
                        (size_t)CA_LIMIT_TASK_BYTES);
    free(b->data);
    b->data = xmalloc(n + 1);
    memcpy(b->data, data, n);
    b->data[n] = '\0';
    b->len = n;
    sha256_hex(data, n, b->sha);
    return 0;
}

static int check_path(const char *path, struct ca_err *err)
{
    int rc = fs_check_relpath(path, err);
    if (rc)
        return rc;
    if (!workspace_path_writable(path))
        return err_setf(err, CA_EPARSE,
                        "\"%s\" is not a writable workspace file (model_new.py, kernels/*.cu, "
                        "kernels/*_binding.cpp): the evaluator never takes it",
                        path);
    return 0;
}

int bus_job_add_file(struct bus_job *j, const char *path, const void *data, size_t n,
                     struct ca_err *err)
{
    int rc = check_path(path, err);
    if (rc)
        return rc;
    for (size_t i = 0; i < j->n_files; i++)
        if (strcmp(j->files[i].path, path) == 0)
            return err_setf(err, CA_EDUP, "\"%s\" is in the job twice", path);
    if (j->n_files >= BUS_MAX_FILES)
        return err_setf(err, CA_ETOOBIG, "more than %d files in one job", BUS_MAX_FILES);
    ALLOC_GROW(j->files, j->n_files + 1, j->alloc_files);
    struct blob *b = &j->files[j->n_files];
    memset(b, 0, sizeof(*b));
    if ((rc = blob_set(b, data, n, path, err)) != 0)
        return rc;
    b->path = xstrdup(path);
    j->n_files++;
    return 0;
}

int bus_job_set_task(struct bus_job *j, const void *data, size_t n, struct ca_err *err)
{
    return blob_set(&j->task, data, n, "the task file", err);
}

int bus_job_set_kernelbench(struct bus_job *j, const void *data, size_t n, struct ca_err *err)
{
    return blob_set(&j->kb, data, n, "the KernelBench file", err);
}

static int check_opts(const json_t *opts, struct ca_err *err)
{
    if (!json_is_object(opts))
        return err_setf(err, CA_EPARSE, "a job's \"opts\" must be an object");
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)opts, key, v)
    {
        bool known = false;
        for (size_t i = 0; bus__opt_keys[i]; i++)
            known |= strcmp(key, bus__opt_keys[i]) == 0;
        if (!known)
            return err_setf(err, CA_EPARSE,
                            "a job may not set \"%.60s\" (only the evaluation options; paths and "
                            "the device are the worker's)",
                            key);
        if (json_is_object(v) || json_is_array(v))
            return err_setf(err, CA_EPARSE, "job option \"%s\" must be a scalar", key);
    }
    return 0;
}

int bus_job_set_opts(struct bus_job *j, json_t *opts, struct ca_err *err)
{
    int rc = check_opts(opts, err);
    if (rc) {
        json_decref(opts);
        return rc;
    }
    json_decref(j->opts);
    j->opts = opts;
    return 0;
}

static int cmp_blob(const void *a, const void *b)
{
    return strcmp(((const struct blob *)a)->path, ((const struct blob *)b)->path);
}

static json_t *ref_json(const struct blob *b)
{
    return json_pack("{s:s, s:I}", "sha256", b->sha, "size", (json_int_t)b->len);
}

int bus_job_encode(const struct bus_job *j, struct buf *out, char id[SHA256_HEX_LEN + 1],
                   struct ca_err *err)
{
    if (!j->task.data)
        return err_setf(err, CA_EUSAGE, "a job needs its task file");
    bool kb = j->kb.data != NULL;
    if (kb && j->n_files)
        return err_setf(err, CA_EUSAGE, "a KernelBench job carries no workspace files");
    struct blob *sorted = xcalloc(j->n_files + 1, sizeof(*sorted));
    if (j->n_files) /* a KernelBench job has none (and files may be NULL) */
        memcpy(sorted, j->files, j->n_files * sizeof(*sorted));
    qsort(sorted, j->n_files, sizeof(*sorted), cmp_blob);
    json_t *files = json_array();
    for (size_t i = 0; i < j->n_files; i++) {
        json_t *f = ref_json(&sorted[i]);
        json_object_set_new(f, "path", json_string(sorted[i].path));
        json_array_append_new(files, f);
    }
    free(sorted);
    json_t *doc = json_pack("{s:i, s:s, s:o, s:o, s:O}", "v", BUS_JOB_VERSION, "kind",
                            kb ? "kernelbench" : "workspace", "files", files, "task",
                            ref_json(&j->task), "opts", j->opts);
    if (kb)
        json_object_set_new(doc, "kernelbench", ref_json(&j->kb));
    char *text = json_dumps(doc, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(doc);
    if (!text)
        BUG("json_dumps failed on a job");
    int rc = buf_addstr(out, text);
    if (rc == 0)
        sha256_hex(text, strlen(text), id);
    free(text);
    return rc ? err_setf(err, rc, "the job document is too large") : 0;
}

size_t bus__job_blobs(const struct bus_job *j, const char **data, size_t *lens, const char **shas)
{
    size_t n = 0;
    for (size_t i = 0; i < j->n_files; i++, n++) {
        data[n] = j->files[i].data;
        lens[n] = j->files[i].len;
        shas[n] = j->files[i].sha;
    }
    const struct blob *extra[2] = {&j->task, &j->kb};
    for (size_t i = 0; i < 2; i++) {
        if (!extra[i]->data)
            continue;
        data[n] = extra[i]->data;
        lens[n] = extra[i]->len;
        shas[n] = extra[i]->sha;
        n++;
    }
    return n;
}

/* Read every file eval_snapshot took into dir. */
static int add_snapshot(struct bus_job *j, const char *dir, const json_t *files, struct ca_err *err)
{
    struct buf path, data;
    buf_init(&path, CA_LIMIT_PATH);
    buf_init(&data, CA_LIMIT_TASK_BYTES);
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < json_array_size(files); i++) {
        const char *rel = json_string_value(json_array_get(files, i));
        buf_reset(&path);
        buf_reset(&data);
        if ((rc = fs_join(&path, dir, rel)) != 0)
            break;
        rc = fs_read_file(path.data, CA_LIMIT_TASK_BYTES, &data, err);
        if (rc == 0)
            rc = bus_job_add_file(j, rel, data.data, data.len, err);
    }
    buf_release(&path);
    buf_release(&data);
    return rc;
}

static int keep_snapshot(const char *snap, const json_t *files, const struct buf *task,
                         const char *keep, struct ca_err *err)
{
    char *model = xstrfmt("%s/model.py", snap);
    int rc = fs_write_atomic(model, task->data, task->len, 0600, err);
    free(model);
    return rc ? rc : eval_keep_files(snap, files, keep, err);
}

int bus_job_from_eval(const struct eval_opts *o, struct bus_job **out, struct ca_err *err)
{
    struct bus_job *j = bus_job_new();
    struct buf code, base, tmp;
    buf_init(&code, CA_LIMIT_TASK_BYTES);
    buf_init(&base, CA_LIMIT_PATH);
    buf_init(&tmp, CA_LIMIT_PATH);
    json_t *task = NULL, *files = NULL;
    int rc = eval_task_code(o, &code, &task, err);
    if (rc == 0 && o->kernelbench_file && o->keep_dir) /* a programmer's error: no caller does */
        rc = err_setf(err, CA_EUSAGE, "keep_dir is kept for workspaces only over the bus");
    if (rc == 0)
        rc = bus_job_set_task(j, code.data, code.len, err);
    if (rc == 0 && o->kernelbench_file) {
        buf_reset(&code);
        rc = fs_read_file(o->kernelbench_file, CA_LIMIT_TASK_BYTES, &code, err);
        if (rc == 0)
            rc = bus_job_set_kernelbench(j, code.data, code.len, err);
    } else if (rc == 0) {
        /* The evaluator's own snapshot rules, into a private temporary directory. */
        const char *t = getenv("TMPDIR");
        rc = buf_addf(&base, "%s/cuda-agent-job", t && *t ? t : "/tmp");
        if (rc == 0)
            rc = fs_mkdtemp_beside(base.data, &tmp, err);
        else
            rc = err_setf(err, CA_EUSAGE, "$TMPDIR is too long"); /* ours, not the files' */
        if (rc == 0)
            rc = eval_snapshot(o->workspace, tmp.data, &files, err);
        if (rc == 0)
            rc = add_snapshot(j, tmp.data, files, err);
        /* keep_dir is the caller's local folder, which no worker can write: the files kept are
         * the job's own, from this snapshot, with the task beside them as eval_run keeps it. */
        if (rc == 0 && o->keep_dir)
            rc = keep_snapshot(tmp.data, files, &code, o->keep_dir, err);
    }
    if (rc == 0) {
        json_t *req = evald_request_for(o);
        static const char *const drop[] = {"op", "workspace", "kernelbench_file", "task",
                                           "keep_dir"};
        for (size_t i = 0; i < ARRAY_SIZE(drop); i++)
            json_object_del(req, drop[i]);
        rc = bus_job_set_opts(j, req, err);
    }
    if (tmp.len && fs_is_dir(tmp.data)) {
        struct ca_err ignored;
        if (fs_remove_tree(tmp.data, &ignored))
            LOG_WARN("could not remove %s: %s", tmp.data, ignored.msg);
    }
    json_decref(task);
    json_decref(files);
    buf_release(&code);
    buf_release(&base);
    buf_release(&tmp);
    if (rc) {
        bus_job_free(j);
        return rc;
    }
    *out = j;
    return 0;
}

/* ---- the worker's side ---- */

static int parse_ref(const json_t *v, bool with_path, struct bus__ref *r, struct ca_err *err)
{
    const char *sha = NULL, *path = NULL;
    int64_t size = -1;
    if (!json_is_object(v))
        return err_setf(err, CA_EPARSE, "a job's file reference must be an object");
    int rc = jsonx_get_str(v, "sha256", true, &sha, "job file", err);
    if (rc == 0)
        rc = jsonx_get_int(v, "size", true, &size, "job file", err);
    if (rc == 0 && with_path)
        rc = jsonx_get_str(v, "path", true, &path, "job file", err);
    if (rc)
        return rc;
    if (!sha256_hex_valid(sha))
        return err_setf(err, CA_EPARSE, "a job's file digest is not 64 lowercase hex digits");
    if (size < 0 || (uint64_t)size > CA_LIMIT_TASK_BYTES)
        return err_setf(err, CA_ETOOBIG, "a job's file is larger than %zu bytes",
                        (size_t)CA_LIMIT_TASK_BYTES);
    if (with_path) {
        if ((rc = check_path(path, err)) != 0)
            return rc;
        snprintf(r->path, sizeof(r->path), "%s", path);
    }
    snprintf(r->sha, sizeof(r->sha), "%s", sha);
    r->size = (size_t)size;
    return 0;
}

int bus__spec_parse(const char *text, size_t len, struct bus__spec *spec, struct ca_err *err)
{
    memset(spec, 0, sizeof(*spec));
    json_t *doc = NULL, *files = NULL, *opts = NULL;
    const char *kind = NULL;
    int64_t v = 0;
    int rc = jsonx_parse(sv_from(text, len), CA_LIMIT_REQUEST_BYTES, "the job", &doc, err);
    if (rc == 0 && !json_is_object(doc))
        rc = err_setf(err, CA_EPARSE, "a job is a JSON object");
    if (rc == 0)
        rc = jsonx_get_int(doc, "v", true, &v, "job", err);
    if (rc == 0 && v != BUS_JOB_VERSION)
        rc = err_setf(err, CA_EPARSE, "job version %lld; this worker reads version %d",
                      (long long)v, BUS_JOB_VERSION);
    if (rc == 0)
        rc = jsonx_get_str(doc, "kind", true, &kind, "job", err);
    if (rc == 0 && strcmp(kind, "workspace") && strcmp(kind, "kernelbench"))
        rc = err_setf(err, CA_EPARSE, "job kind must be workspace or kernelbench");
    if (rc == 0)
        rc = jsonx_get_array(doc, "files", true, &files, "job", err);
    if (rc == 0)
        rc = jsonx_get_object(doc, "opts", true, &opts, "job", err);
    if (rc == 0)
        rc = check_opts(opts, err);
    if (rc == 0)
        rc = parse_ref(json_object_get(doc, "task"), false, &spec->task, err);
    if (rc == 0 && strcmp(kind, "kernelbench") == 0) {
        spec->kernelbench = true;
        rc = parse_ref(json_object_get(doc, "kernelbench"), false, &spec->kb, err);
        if (rc == 0 && json_array_size(files))
            rc = err_setf(err, CA_EPARSE, "a KernelBench job carries no workspace files");
    }
    if (rc == 0 && json_array_size(files) > BUS_MAX_FILES)
        rc = err_setf(err, CA_ETOOBIG, "more than %d files in one job", BUS_MAX_FILES);
    for (size_t i = 0; rc == 0 && i < json_array_size(files); i++) {
        rc = parse_ref(json_array_get(files, i), true, &spec->files[i], err);
        for (size_t k = 0; rc == 0 && k < i; k++)
            if (strcmp(spec->files[k].path, spec->files[i].path) == 0)
                rc = err_setf(err, CA_EPARSE, "\"%s\" is in the job twice", spec->files[i].path);
        spec->n_files = i + 1;
    }
    if (rc == 0)
        spec->opts = json_incref(opts);
    json_decref(doc);
    if (rc)
        bus__spec_release(spec);
    return rc;
}

void bus__spec_release(struct bus__spec *spec)
{
    json_decref(spec->opts);
    spec->opts = NULL;
}

/* GET one blob, bounded by its announced size, and check its digest. */
static int fetch_blob(struct bus_conn *c, const struct bus__ref *r, const char *what,
                      struct buf *data, struct ca_err *err)
{
    char key[sizeof(BUS_KEY_BLOB) + SHA256_HEX_LEN];
    snprintf(key, sizeof(key), "%s%s", BUS_KEY_BLOB, r->sha);
    redisReply *rep = NULL;
    /* STRLEN first: a blob far larger than announced is never read into memory. */
    int rc = bus__cmds(c, &rep, err, "STRLEN", key);
    if (rc)
        return rc;
    long long n = rep->type == REDIS_REPLY_INTEGER ? rep->integer : -1;
    freeReplyObject(rep);
    if (n == 0 && r->size != 0)
        return err_setf(err, CA_ENOTFOUND,
                        "artifact %s (%s) is missing from Redis (expired, or never uploaded): "
                        "submit the job again",
                        what, r->sha);
    if (n != (long long)r->size)
        return err_setf(err, CA_EPARSE,
                        "artifact %s (%s) holds %lld bytes, the job says %zu: refused", what,
                        r->sha, n, r->size);
    if ((rc = bus__cmds(c, &rep, err, "GET", key)) != 0)
        return rc;
    if (rep->type != REDIS_REPLY_STRING && !(rep->type == REDIS_REPLY_NIL && r->size == 0)) {
        freeReplyObject(rep);
        return err_setf(err, CA_ENOTFOUND, "artifact %s (%s) vanished from Redis", what, r->sha);
    }
    size_t len = rep->type == REDIS_REPLY_STRING ? rep->len : 0;
    char sha[SHA256_HEX_LEN + 1];
    sha256_hex(len ? rep->str : "", len, sha);
    if (strcmp(sha, r->sha) != 0 || len != r->size) {
        freeReplyObject(rep);
        return err_setf(err, CA_EPARSE,
                        "artifact %s: its content's SHA-256 is %s, not %s as the job says: "
                        "refused (tampered or corrupted in transit)",
                        what, sha, r->sha);
    }
    buf_reset(data);
    rc = buf_add(data, len ? rep->str : "", len);
    freeReplyObject(rep);
    return rc ? err_setf(err, rc, "artifact %s is too large", what) : 0;
}

static int write_blob(struct bus_conn *c, const struct bus__ref *r, const char *what,
                      const char *dir, const char *rel, struct buf *data, struct ca_err *err)
{
    struct buf path;
    buf_init(&path, CA_LIMIT_PATH);
    int rc = fetch_blob(c, r, what, data, err);
    if (rc == 0 && (rc = fs_join(&path, dir, rel)) != 0)
        rc = err_setf(err, rc, "job path too long");
    if (rc == 0) {
        char *slash = strrchr(path.data, '/');
        *slash = '\0';
        rc = fs_mkdirs(path.data, 0700, err);
        *slash = '/';
    }
    if (rc == 0)
        rc = fs_write_atomic(path.data, data->data, data->len, 0644, err);
    buf_release(&path);
    return rc;
}

int bus__materialise(struct bus_conn *c, const struct bus__spec *spec, const char *dir,
                     json_t **req_out, struct ca_err *err)
{
    struct buf data, ws, p;
    buf_init(&data, CA_LIMIT_TASK_BYTES);
    buf_init(&ws, CA_LIMIT_PATH);
    buf_init(&p, CA_LIMIT_PATH);
    int rc = fs_join(&ws, dir, "ws") ? CA_ETOOBIG : 0;
    if (rc == 0)
        rc = fs_mkdirs(ws.data, 0700, err);
    if (rc == 0)
        rc = write_blob(c, &spec->task, "task", dir, "task.py", &data, err);
    for (size_t i = 0; rc == 0 && i < spec->n_files; i++)
        rc = write_blob(c, &spec->files[i], spec->files[i].path, ws.data, spec->files[i].path,
                        &data, err);
    if (rc == 0 && spec->kernelbench)
        rc = write_blob(c, &spec->kb, "kernelbench file", dir, "kernelbench.py", &data, err);
    if (rc == 0) {
        json_t *req = json_deep_copy(spec->opts);
        json_object_set_new(req, "op", json_string("eval"));
        buf_reset(&p);
        rc = fs_join(&p, dir, "task.py");
        json_object_set_new(req, "task", json_string(p.data));
        if (spec->kernelbench) {
            buf_reset(&p);
            rc |= fs_join(&p, dir, "kernelbench.py");
            json_object_set_new(req, "kernelbench_file", json_string(p.data));
        } else {
            json_object_set_new(req, "workspace", json_string(ws.data));
        }
        if (rc) {
            json_decref(req);
            rc = err_setf(err, CA_ETOOBIG, "job path too long");
        } else {
            *req_out = req;
        }
    }
    buf_release(&data);
    buf_release(&ws);
    buf_release(&p);
    return rc;
}
