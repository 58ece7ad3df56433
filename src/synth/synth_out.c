/*
 * synth_out.c - the dataset files of a synth folder, written from its store.
 *
 * tasks.jsonl holds one accepted task per line in (stream, seed) order, keys in a fixed order:
 * the task source's (id, name, level, ops, data_source, code; docs/internals/task.md) then ours
 * (seed, stream, eager_ms, compile_ms, filters). The id is the one src/task gives a row without
 * one (<name>-<12 hex of hash64(code)>). Before it is renamed into place the file is loaded back
 * through task_load_jsonl, so what we write is always a task source every command can use.
 * tasks.parquet (the Ops-6K columns plus ours) is written from it by the embedded
 * src/synth/synth_parquet.py; without pyarrow it is skipped with a warning, never a failure.
 */
#include "synth/synth_internal.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/embed.h"
#include "core/fs.h"
#include "core/json.h"
#include "core/limits.h"
#include "core/log.h"
#include "core/proc.h"
#include "core/util.h"
#include "eval/eval.h"
#include "task/task.h"
#include "core/banned.h"

#define PARQUET_SCRIPT "src/synth/synth_parquet.py"
#define PARQUET_TIMEOUT_MS (600 * 1000)
#define PARQUET_EXIT_NO_PYARROW 3

struct jsonl_ctx {
    struct buf *out;
    int64_t n;
};

static json_t *number_or_null(double v)
{
    return isnan(v) ? json_null() : json_real(v);
}

static int add_row(const struct synth_row *r, void *vctx)
{
    struct jsonl_ctx *c = vctx;
    json_t *ops = r->ops ? json_loads(r->ops, 0, NULL) : NULL;
    json_t *filters = r->filters ? json_loads(r->filters, 0, NULL) : NULL;
    char source[16];
    snprintf(source, sizeof(source), "torch#%lld", (long long)r->depth);
    json_t *row = json_object();
    json_object_set_new(row, "id", json_string(r->id));
    json_object_set_new(row, "name", json_string(r->name));
    json_object_set_new(row, "level", json_integer(0));
    json_object_set_new(row, "ops", ops ? ops : json_array());
    json_object_set_new(row, "data_source", json_string(source));
    json_object_set_new(row, "code", json_string(r->code));
    json_object_set_new(row, "seed", json_integer(r->seed));
    json_object_set_new(row, "stream", json_string(r->stream));
    json_object_set_new(row, "eager_ms", number_or_null(r->eager_ms));
    json_object_set_new(row, "compile_ms", number_or_null(r->compile_ms));
    json_object_set_new(row, "filters", filters ? filters : json_object());
    int rc = jsonx_dump(row, 0, c->out);
    if (rc == 0)
        rc = buf_addch(c->out, '\n');
    json_decref(row);
    c->n++;
    return rc;
}

static int write_parquet(const char *jsonl, const char *parquet, struct ca_err *err)
{
    const struct embedded_file *script = embed_find(PARQUET_SCRIPT);
    if (!script)
        BUG("%s is not embedded in the binary", PARQUET_SCRIPT);
    const char *argv[] = {eval_python(), "-", jsonl, parquet, NULL};
    struct proc_opts po = {.argv = argv,
                           .stdin_data = script->data,
                           .stdin_len = script->len,
                           .timeout_ms = PARQUET_TIMEOUT_MS};
    struct proc_result res;
    proc_result_init(&res);
    int rc = proc_run(&po, &res, err);
    if (rc) {
        LOG_WARN("tasks.parquet not written: cannot run %s: %s", argv[0], err->msg);
        rc = 0;
    } else if (!proc_ok(&res)) {
        buf_rtrim(&res.err);
        const char *last = strrchr(res.err.data, '\n');
        last = last ? last + 1 : res.err.data;
        if (!res.signaled && res.exit_code == PARQUET_EXIT_NO_PYARROW)
            LOG_WARN("%s", last);
        else
            rc = err_setf(err, CA_ECHILD, "%s: writing parquet failed: %s", parquet, last);
    }
    proc_result_release(&res);
    return rc;
}

int synth_export(const char *dir, bool parquet, int64_t *naccepted, struct ca_err *err)
{
    *naccepted = 0;
    struct synth_store *s = NULL;
    struct buf out, path, tmp, ppath, md, html, rpath;
    buf_init(&out, CA_LIMIT_DATASET_BYTES);
    buf_init(&path, CA_LIMIT_PATH);
    buf_init(&tmp, CA_LIMIT_PATH);
    buf_init(&ppath, CA_LIMIT_PATH);
    buf_init(&rpath, CA_LIMIT_PATH);
    buf_init(&md, BUF_MAX_INTERNAL);
    buf_init(&html, BUF_MAX_INTERNAL);
    struct task_set set;
    task_set_init(&set);
    int rc = synth__store_open(dir, NULL, &s, err);
    if (rc)
        goto out;
    struct jsonl_ctx c = {.out = &out};
    rc = synth__store_each(s, true, add_row, &c, err);
    if (rc == CA_ETOOBIG)
        rc = err_setf(err, rc, "%s: the dataset is over CA_LIMIT_DATASET_BYTES", dir);
    if (rc)
        goto out;
    if (fs_join(&path, dir, "tasks.jsonl") ||
        buf_addf(&tmp, "%s/.tasks.%d.jsonl", dir, (int)getpid()) ||
        fs_join(&ppath, dir, "tasks.parquet")) {
        rc = err_setf(err, CA_ETOOBIG, "%s: path too long", dir);
        goto out;
    }
    if ((rc = fs_write_atomic(tmp.data, out.data, out.len, 0644, err)))
        goto out;
    /* What we hand out must load as a task source: check it the way every command reads it. */
    rc = task_load_jsonl(tmp.data, &set, err);
    if (rc == 0 && (int64_t)set.n != c.n)
        rc = err_setf(err, CA_EPARSE, "%s: %lld rows written, %zu loaded back", tmp.data,
                      (long long)c.n, set.n);
    if (rc == 0 && rename(tmp.data, path.data) != 0)
        rc = err_setf(err, -errno, "%s: %s", path.data, strerror(errno));
    if (rc) {
        (void)unlink(tmp.data);
        err_prefix(err, "writing %s", path.data);
        goto out;
    }
    *naccepted = c.n;
    if (parquet && (rc = write_parquet(path.data, ppath.data, err)))
        goto out;
    synth__store_free(s);
    s = NULL;
    if ((rc = synth_report(dir, false, &md, err)) || (rc = synth_report(dir, true, &html, err)))
        goto out;
    if ((rc = fs_join(&rpath, dir, "report.md")) == 0)
        rc = fs_write_atomic(rpath.data, md.data, md.len, 0644, err);
    buf_reset(&rpath);
    if (rc == 0 && (rc = fs_join(&rpath, dir, "report.html")) == 0)
        rc = fs_write_atomic(rpath.data, html.data, html.len, 0644, err);
out:
    task_set_release(&set);
    synth__store_free(s);
    buf_release(&out);
    buf_release(&path);
    buf_release(&tmp);
    buf_release(&ppath);
    buf_release(&rpath);
    buf_release(&md);
    buf_release(&html);
    return rc;
}
