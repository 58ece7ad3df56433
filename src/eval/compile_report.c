/*
 * compile_report.c - the build's report: per-unit logs trimmed to what matters,
 * the errors the agent reads first, the full log, and the report's JSON.
 *
 * Filled on the build's thread after the pool is done.
 */
#include "eval/compile_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fs.h"
#include "core/json.h"
#include "core/limits.h"
#include "core/log.h"
#include "sandbox/sandbox.h"
#include "core/banned.h"

void compile_report_init(struct compile_report *r)
{
    *r = (struct compile_report){0};
    buf_init(&r->errors, CA_LIMIT_COMPILE_LOG);
    buf_init(&r->full_log, CA_LIMIT_COMPILE_LOG);
}

static void units_release(struct compile_report *r)
{
    for (size_t i = 0; i < r->n; i++) {
        free(r->units[i].name);
        free(r->units[i].kernels);
        buf_release(&r->units[i].log);
    }
    FREE_AND_NULL(r->units);
    r->n = 0;
}

void compile_report_release(struct compile_report *r)
{
    units_release(r);
    FREE_AND_NULL(r->so_path);
    buf_release(&r->errors);
    buf_release(&r->full_log);
}

/* Append one compiler's output to the full log; once it is full, say so once. */
void compile__log_add(struct compile_report *rep, const char *title, const struct buf *raw,
                      const char *const *strip)
{
    static const char full[] = "[log truncated]\n";
    struct buf *l = &rep->full_log;
    if (sv_ends_with(sv_from(l->data, l->len), SV_LIT(full)))
        return;
    if (buf_addf(l, "== %s\n", title) ||
        compile__log_normalize(sv_from(raw->data, raw->len), strip, l)) {
        /* Keep what fitted, then the marker (room for it is made if needed). */
        size_t room = sizeof(full) - 1;
        if (l->max - l->len < room)
            buf_truncate(l, l->len > room ? l->len - room : 0);
        (void)!buf_addstr(l, full);
    }
}

static const char *unit_tool(const struct compile__unit *u)
{
    return u->role == COMPILE_ROLE_CU || u->role == COMPILE_ROLE_CU_TORCH ? "nvcc" : "c++";
}

/* Header line for a unit whose compiler failed without saying why, or was stopped. */
static int failure_line(struct buf *out, const struct compile__job *j)
{
    const char *tool = unit_tool(j->u);
    if (j->run.timed_out)
        return buf_addf(out,
                        "%s: %s %s: the compile was stopped (simplify the templates or "
                        "unrolling, or split the file)\n",
                        j->u->name, tool, j->run.how);
    if (strncmp(j->run.how, "killed", 6) == 0)
        return buf_addf(out, "%s: %s was %s (out of memory?)\n", j->u->name, tool, j->run.how);
    return 0;
}

void compile__unit_kernels(struct compile_unit_report *ur, struct sv ptxas)
{
    struct compile_kernel_info k[COMPILE_KERNELS_MAX];
    size_t n = compile__ptxas_parse(ptxas, k, ARRAY_SIZE(k));
    FREE_AND_NULL(ur->kernels);
    ur->nkernels = 0;
    if (!n)
        return;
    ur->kernels = xcalloc(n, sizeof(*ur->kernels));
    memcpy(ur->kernels, k, n * sizeof(*k));
    ur->nkernels = n;
}

void compile__unit_kernels_cached(struct compile_unit_report *ur, const char *cache_path)
{
    char *path = xstrfmt("%s" COMPILE__INFO_SUFFIX, cache_path);
    struct buf info;
    buf_init(&info, CA_LIMIT_COMPILE_LOG);
    if (fs_read_file(path, info.max, &info, NULL) == 0)
        compile__unit_kernels(ur, sv_from(info.data, info.len));
    buf_release(&info);
    free(path);
}

/* Trimmed diagnostics of one failed or warned unit into its own log, and errors into *errors. */
static void unit_logs(struct compile__build *b, struct compile__job *j, size_t *budget,
                      size_t *omitted, bool *errors_full)
{
    struct compile_unit_report *ur = j->rep;
    const char *strip[] = {b->dir_slash, SANDBOX_WORKSPACE "/", NULL};
    struct buf norm, trimmed;
    buf_init(&norm, 2 * COMPILE__RUN_OUTPUT_MAX + 4096);
    buf_init(&trimmed, 2 * COMPILE__RUN_OUTPUT_MAX + 4096);
    /* ptxas -v's lines become the unit's kernel table; the rest is the log. */
    struct buf out;
    buf_init(&out, j->run.out.len + 1);
    struct sv rest = sv_from(j->run.out.data, j->run.out.len), line;
    while (sv_next_line(&rest, &line, NULL))
        if (!compile__ptxas_line(line))
            (void)!(buf_add(&out, line.p, line.len) || buf_addch(&out, '\n'));
    compile__unit_kernels(ur, sv_from(j->run.out.data, j->run.out.len));
    (void)!compile__log_normalize(sv_from(out.data, out.len), strip, &norm);
    buf_release(&out);
    if (j->split_log.len) {
        char *t = xstrfmt("%s (cut in two, then built whole)", ur->name);
        compile__log_add(b->rep, t, &j->split_log, strip);
        free(t);
    }
    char *title = xstrfmt("%s (%s%s)", ur->name, j->run.how,
                          j->split_ok   ? ", cut in two: nvcc and c++ halves merged"
                          : !j->retried ? ""
                          : j->light    ? ", retried with the full torch headers"
                                        : ", retried without the precompiled header");
    compile__log_add(b->rep, title, &j->run.out, strip);
    free(title);

    struct compile__trim_result tr;
    if (!j->run.ok)
        (void)!failure_line(&trimmed, j);
    (void)!compile__log_trim(sv_from(norm.data, norm.len), &trimmed, &tr);
    if (!j->run.ok && trimmed.len == 0)
        (void)!buf_addf(&trimmed, "%s: %s failed (%s) without a message\n", ur->name,
                        unit_tool(j->u), j->run.how);
    size_t unit_budget = COMPILE_ERROR_LINES, unit_omitted = 0;
    (void)!compile__append_lines(&ur->log, sv_from(trimmed.data, trimmed.len), &unit_budget,
                                 &unit_omitted);
    if (unit_omitted)
        (void)!buf_addf(&ur->log, "[%zu more %s lines omitted]\n", unit_omitted,
                        tr.had_errors || !j->run.ok ? "error" : "warning");
    if (!j->run.ok && !*errors_full &&
        compile__append_lines(&b->rep->errors, sv_from(trimmed.data, trimmed.len), budget, omitted))
        *errors_full = true;
    buf_release(&norm);
    buf_release(&trimmed);
}

/* Collect results of finished jobs into the report; 0, or an infrastructure error. */
int compile__collect(struct compile__build *b, struct ca_err *err)
{
    size_t budget = COMPILE_ERROR_LINES, omitted = 0;
    bool full = false;
    int rc = 0;
    for (size_t i = 0; i < b->njobs; i++) {
        struct compile__job *j = &b->jobs[i];
        struct compile_unit_report *ur = j->rep;
        if (j->run.rc) {
            /* The compiler could not run at all: the evaluator's problem, not the agent's. */
            if (!rc)
                rc = err_setf(err, j->run.rc, "compile %s: %s", ur->name, j->run.err.msg);
            continue;
        }
        if (j->store_rc && !rc)
            rc = err_setf(err, j->store_rc, "%s", j->store_err.msg);
        ur->ok = j->run.ok && !j->store_rc;
        ur->timed_out = j->run.timed_out;
        ur->used_pch = j->used_pch;
        ur->split = j->split_ok;
        ur->elapsed_us = j->run.elapsed_us;
        b->rep->pch_used = b->rep->pch_used || j->used_pch;
        b->stored = b->stored || ur->ok;
        unit_logs(b, j, &budget, &omitted, &full);
        if (log_events_on())
            log_event("compile.unit", ur->elapsed_us,
                      json_pack("{s:s, s:s, s:b, s:b, s:b, s:b}", "unit", ur->name, "role",
                                compile_role_name(ur->role), "ok", ur->ok, "pch", ur->used_pch,
                                "split", ur->split, "timed_out", ur->timed_out));
    }
    if (omitted)
        (void)!buf_addf(&b->rep->errors, "[%zu more error lines omitted]\n", omitted);
    return rc;
}

/* ---- JSON ---- */

static json_t *text_json(const struct buf *b)
{
    struct buf clean;
    buf_init(&clean, BUF_MAX_INTERNAL);
    if (utf8_sanitize(b->data, b->len, &clean) < 0)
        BUG("internal buffer overflow");
    json_t *s = json_stringn(clean.data, clean.len);
    buf_release(&clean);
    return s ? s : json_string("");
}

json_t *compile_report_to_json(const struct compile_report *r)
{
    json_t *units = json_array();
    for (size_t i = 0; i < r->n; i++) {
        const struct compile_unit_report *u = &r->units[i];
        struct buf name;
        buf_init(&name, BUF_MAX_INTERNAL);
        (void)!buf_addstr(&name, u->name);
        json_t *kernels = json_array();
        for (size_t k = 0; k < u->nkernels; k++) {
            const struct compile_kernel_info *ki = &u->kernels[k];
            json_array_append_new(kernels,
                                  json_pack("{s:s, s:s, s:i, s:I, s:I, s:I, s:I}", "name", ki->name,
                                            "mangled", ki->mangled, "registers", ki->registers,
                                            "shared_bytes", (json_int_t)ki->shared_bytes,
                                            "stack_bytes", (json_int_t)ki->stack_bytes,
                                            "spill_store_bytes", (json_int_t)ki->spill_store_bytes,
                                            "spill_load_bytes", (json_int_t)ki->spill_load_bytes));
        }
        json_array_append_new(
            units, json_pack("{s:o, s:s, s:b, s:b, s:b, s:b, s:b, s:I, s:s, s:o, s:o}", "name",
                             text_json(&name), "role", compile_role_name(u->role), "ok", u->ok,
                             "cached", u->cached, "timed_out", u->timed_out, "pch", u->used_pch,
                             "split", u->split, "elapsed_us", (json_int_t)u->elapsed_us, "key",
                             u->key, "log", text_json(&u->log), "kernels", kernels));
        buf_release(&name);
    }
    return json_pack("{s:b, s:s, s:o, s:{s:b, s:b, s:I}, s:{s:b, s:b, s:I}, s:I, s:b, s:s, "
                     "s:s?, s:o, s:o}",
                     "ok", r->ok, "arch", r->arch, "units", units, "link", "ok", r->link_ok,
                     "cached", r->link_cached, "elapsed_us", (json_int_t)r->link_us, "pch", "used",
                     r->pch_used, "built", r->pch_built, "elapsed_us", (json_int_t)r->pch_us,
                     "total_us", (json_int_t)r->total_us, "rebuilt", r->rebuilt, "so_key",
                     r->so_key, "so_path", r->so_path, "errors", text_json(&r->errors), "log",
                     text_json(&r->full_log));
}
