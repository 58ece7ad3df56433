/*
 * bench_store.c - one SQLite database per bench run.
 *
 * Invariants: the meta table names the schema and its version and holds the run's settings;
 * a database without them is refused, never adopted. Tasks and attempts are planned with
 * INSERT OR IGNORE (planning twice is a no-op); an attempt's report, timing and agent result
 * are written together in one transaction, and an attempt that has a report is finished for
 * good (recording again keeps the first). WAL journal: a reader (bench report) never blocks the
 * run, and a kill loses at most the attempt being written.
 */
#include "bench/bench.h"

#include <errno.h>
#include <math.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/db.h"
#include "core/json.h"
#include "core/util.h"
#include "eval/eval_report.h"
#include "core/banned.h"

struct bench_store {
    sqlite3 *db;
    char *path;
    json_t *config;
};

static const char *SCHEMA =
    "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);"
    "CREATE TABLE environment(key TEXT PRIMARY KEY, value TEXT);"
    "CREATE TABLE tasks(id TEXT PRIMARY KEY, name TEXT NOT NULL, level INTEGER NOT NULL,"
    " origin TEXT, hash TEXT, code TEXT NOT NULL);"
    "CREATE TABLE attempts(id INTEGER PRIMARY KEY, task_id TEXT NOT NULL REFERENCES tasks(id),"
    " key TEXT NOT NULL, kind TEXT NOT NULL, source TEXT, label TEXT, extra TEXT,"
    " status TEXT NOT NULL DEFAULT 'pending', UNIQUE(task_id, key));"
    "CREATE TABLE reports(attempt_id INTEGER PRIMARY KEY REFERENCES attempts(id),"
    " verdict TEXT NOT NULL, ok INTEGER, stage TEXT, reward INTEGER, speedup_eager REAL,"
    " speedup_compile REAL, eager_ms REAL, compile_ms REAL, candidate_ms REAL,"
    " peak_fraction REAL, timing_noisy INTEGER, message TEXT, json TEXT NOT NULL);"
    "CREATE TABLE timings(attempt_id INTEGER PRIMARY KEY REFERENCES attempts(id),"
    " started_us INTEGER, finished_us INTEGER, wall_ms REAL, compile_ms REAL,"
    " harness_ms REAL, stage_ms TEXT);"
    "CREATE TABLE baselines(task_hash TEXT NOT NULL, device TEXT NOT NULL, torch TEXT NOT NULL,"
    " eager_ms REAL, compile_ms REAL, cached INTEGER, attempt_id INTEGER,"
    " PRIMARY KEY(task_hash, device, torch));"
    "CREATE TABLE agent_results(attempt_id INTEGER PRIMARY KEY REFERENCES attempts(id),"
    " out_dir TEXT, result TEXT NOT NULL);";

static const char *verdict_name(enum bench_verdict v)
{
    switch (v) {
    case BENCH_CORRECT:
        return "correct";
    case BENCH_FAILED:
        return "failed";
    case BENCH_INFRA:
        return "infrastructure";
    case BENCH_PENDING:
        break;
    }
    return "pending";
}

int bench_store_begin(struct bench_store *s, struct ca_err *err)
{
    return db_exec(s->db, s->path, "BEGIN IMMEDIATE", err);
}

int bench_store_commit(struct bench_store *s, struct ca_err *err)
{
    return db_exec(s->db, s->path, "COMMIT", err);
}

void bench_store_rollback(struct bench_store *s)
{
    (void)sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
}

/* The meta value in out (bounded by its maximum), or NULL. */
static const char *meta_get(struct bench_store *s, const char *key, struct buf *out)
{
    char *v = db_meta_get(s->db, key);
    const char *r = NULL;
    if (v) {
        buf_reset(out);
        if (buf_addstr(out, v) == 0)
            r = out->data;
    }
    free(v);
    return r;
}

static int meta_set(struct bench_store *s, const char *key, const char *value, struct ca_err *err)
{
    sqlite3_stmt *st;
    int rc = db_prepare(s->db, s->path, "INSERT OR REPLACE INTO meta(key, value) VALUES(?, ?)", &st,
                        err);
    if (rc)
        return rc;
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, value, -1, SQLITE_STATIC);
    rc = sqlite3_step(st) == SQLITE_DONE ? 0 : db_fail(s->db, s->path, err, "writing meta");
    sqlite3_finalize(st);
    return rc;
}

/* A stored setting as the user gave it. */
static const char *setting_name(const char *key, char *buf, size_t n)
{
    static const char *const names[][2] = {
        {"tasks_source", "TASKS"},
        {"source", "the solutions (--solutions, --map, --workspaces or --model)"},
        {"mode", "the kind of solutions"},
        {"no_compile_baseline", "--no-compile-baseline"},
        {"budget_ms", "--budget-ms"},
        {"timeout_s", "--timeout"},
        {"base_url", "--base-url"},
        {"max_turns", "--max-turns"},
    };
    for (size_t i = 0; i < ARRAY_SIZE(names); i++)
        if (strcmp(key, names[i][0]) == 0)
            return names[i][1];
    snprintf(buf, n, "--%s", key);
    return buf;
}

/* Name the first setting that differs between the stored run and this one. */
static void describe_difference(const json_t *stored, const json_t *now, char *out, size_t n)
{
    char name[64];
    const char *key;
    const json_t *v;
    snprintf(out, n, "settings differ");
    json_object_foreach((json_t *)now, key, v)
    {
        const json_t *o = json_object_get(stored, key);
        if (!json_equal(o, v)) {
            char *a = o ? json_dumps(o, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
            char *b = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
            snprintf(out, n, "%s was %.80s, now %.80s", setting_name(key, name, sizeof(name)),
                     a ? a : "unset", b ? b : "?");
            free(a);
            free(b);
            return;
        }
    }
    json_object_foreach((json_t *)stored, key, v)
    {
        if (!json_object_get(now, key)) {
            snprintf(out, n, "%s was set, now it is not", setting_name(key, name, sizeof(name)));
            return;
        }
    }
}

static int check_existing(struct bench_store *s, const json_t *config, struct ca_err *err)
{
    struct buf b;
    buf_init(&b, BENCH_LIMIT_MAP_BYTES);
    int rc = 0;
    const char *schema = meta_get(s, "schema", &b);
    if (!schema || strcmp(schema, BENCH_SCHEMA) != 0) {
        rc = err_setf(err, CA_EPARSE,
                      "%s is an SQLite database, but not a cuda-agent bench run (no \"%s\" "
                      "schema in a meta table); give --db a new file",
                      s->path, BENCH_SCHEMA);
        goto out;
    }
    const char *ver = meta_get(s, "schema_version", &b);
    if (!ver || strtol(ver, NULL, 10) != BENCH_SCHEMA_VERSION) {
        rc = err_setf(err, CA_EPARSE,
                      "%s: bench schema version %s, this cuda-agent reads version %d", s->path,
                      ver ? ver : "(none)", BENCH_SCHEMA_VERSION);
        goto out;
    }
    const char *cfg = meta_get(s, "config", &b);
    json_error_t je;
    s->config = cfg ? json_loads(cfg, 0, &je) : NULL;
    if (!json_is_object(s->config)) {
        rc = err_setf(err, CA_EPARSE, "%s: the run's settings are unreadable", s->path);
        goto out;
    }
    if (config && !json_equal(s->config, config)) {
        char diff[512];
        describe_difference(s->config, config, diff, sizeof(diff));
        rc = err_setf(err, CA_EPARSE,
                      "%s holds a run with other settings (%s): resume it with the same "
                      "options, or give --db a new file",
                      s->path, diff);
    }
out:
    buf_release(&b);
    return rc;
}

static int create_schema(struct bench_store *s, const json_t *config, struct ca_err *err)
{
    int rc = bench_store_begin(s, err);
    if (rc)
        return rc;
    char ver[16], now[32];
    snprintf(ver, sizeof(ver), "%d", BENCH_SCHEMA_VERSION);
    snprintf(now, sizeof(now), "%lld", (long long)time(NULL));
    char *cfg = json_dumps(config, JSON_COMPACT | JSON_SORT_KEYS);
    if ((rc = db_exec(s->db, s->path, SCHEMA, err)) ||
        (rc = meta_set(s, "schema", BENCH_SCHEMA, err)) ||
        (rc = meta_set(s, "schema_version", ver, err)) ||
        (rc = meta_set(s, "config", cfg ? cfg : "{}", err)) ||
        (rc = meta_set(s, "created_at", now, err)) || (rc = bench_store_commit(s, err))) {
        bench_store_rollback(s);
        free(cfg);
        return rc;
    }
    free(cfg);
    s->config = json_deep_copy(config);
    return 0;
}

int bench_store_open(const char *path, const json_t *config, struct bench_store **out,
                     struct ca_err *err)
{
    *out = NULL;
    if (!config && access(path, F_OK) != 0)
        return err_setf(err, CA_ENOTFOUND, "%s: no such bench run database", path);
    struct bench_store *s = xcalloc(1, sizeof(*s));
    s->path = xstrdup(path);
    int flags = SQLITE_OPEN_READWRITE | (config ? SQLITE_OPEN_CREATE : 0);
    int rc = db_open(path, flags, &s->db, err);
    if (rc)
        goto fail;
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(s->db, "SELECT count(*) FROM sqlite_master", -1, &st, NULL) !=
        SQLITE_OK) {
        rc = err_setf(err, CA_EPARSE,
                      "%s is not a bench run database (SQLite: %s); give --db a new file", path,
                      sqlite3_errmsg(s->db));
        goto fail;
    }
    int64_t ntables = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int64(st, 0) : -1;
    sqlite3_finalize(st);
    if (ntables < 0) {
        rc = err_setf(err, CA_EPARSE, "%s is not a bench run database (SQLite: %s)", path,
                      sqlite3_errmsg(s->db));
        goto fail;
    }
    if ((rc = db_exec(s->db, s->path, "PRAGMA journal_mode=WAL; PRAGMA foreign_keys=ON;", err)))
        goto fail;
    if (ntables == 0 && config)
        rc = create_schema(s, config, err);
    else
        rc = check_existing(s, config, err);
    if (rc)
        goto fail;
    *out = s;
    return 0;
fail:
    bench_store_free(s);
    return rc;
}

void bench_store_free(struct bench_store *s)
{
    if (!s)
        return;
    sqlite3_close(s->db);
    json_decref(s->config);
    free(s->path);
    free(s);
}

const json_t *bench_store_config(const struct bench_store *s)
{
    return s->config;
}

int bench_store_add_task(struct bench_store *s, const char *id, const char *name, int level,
                         const char *origin, uint64_t hash, const char *code, struct ca_err *err)
{
    sqlite3_stmt *st;
    int rc = db_prepare(s->db, s->path,
                        "INSERT OR IGNORE INTO tasks(id, name, level, origin, hash, code)"
                        " VALUES(?, ?, ?, ?, ?, ?)",
                        &st, err);
    if (rc)
        return rc;
    char hex[17];
    snprintf(hex, sizeof(hex), "%016llx", (unsigned long long)hash);
    sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, name, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 3, level);
    sqlite3_bind_text(st, 4, origin, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 5, hex, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 6, code, -1, SQLITE_STATIC);
    rc = sqlite3_step(st) == SQLITE_DONE ? 0 : db_fail(s->db, s->path, err, "writing a task");
    sqlite3_finalize(st);
    return rc;
}

static const char *kind_name(enum bench_kind k)
{
    switch (k) {
    case BENCH_KIND_FILE:
        return "file";
    case BENCH_KIND_WORKSPACE:
        return "workspace";
    case BENCH_KIND_AGENT:
        return "agent";
    case BENCH_KIND_MISSING:
        break;
    }
    return "missing";
}

int bench_store_plan(struct bench_store *s, struct bench_attempt *a, struct ca_err *err)
{
    sqlite3_stmt *st;
    int rc = db_prepare(s->db, s->path,
                        "INSERT OR IGNORE INTO attempts(task_id, key, kind, source, label, extra)"
                        " VALUES(?, ?, ?, ?, ?, ?)",
                        &st, err);
    if (rc)
        return rc;
    char *extra = a->extra ? json_dumps(a->extra, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    sqlite3_bind_text(st, 1, a->task_id, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, a->key, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, kind_name(a->kind), -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, a->source, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 5, a->label, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 6, extra, -1, SQLITE_TRANSIENT);
    rc = sqlite3_step(st) == SQLITE_DONE ? 0 : db_fail(s->db, s->path, err, "writing an attempt");
    sqlite3_finalize(st);
    free(extra);
    if (rc)
        return rc;
    if ((rc = db_prepare(s->db, s->path, "SELECT id FROM attempts WHERE task_id = ? AND key = ?",
                         &st, err)))
        return rc;
    sqlite3_bind_text(st, 1, a->task_id, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, a->key, -1, SQLITE_STATIC);
    if (sqlite3_step(st) == SQLITE_ROW)
        a->id = sqlite3_column_int64(st, 0);
    else
        rc = db_fail(s->db, s->path, err, "reading an attempt back");
    sqlite3_finalize(st);
    return rc;
}

int bench_store_finished(struct bench_store *s, int64_t attempt_id, bool *done, struct ca_err *err)
{
    sqlite3_stmt *st;
    int rc = db_prepare(s->db, s->path, "SELECT 1 FROM reports WHERE attempt_id = ?", &st, err);
    if (rc)
        return rc;
    sqlite3_bind_int64(st, 1, attempt_id);
    int step = sqlite3_step(st);
    *done = step == SQLITE_ROW;
    rc = step == SQLITE_ROW || step == SQLITE_DONE
             ? 0
             : db_fail(s->db, s->path, err, "reading a report");
    sqlite3_finalize(st);
    return rc;
}

static void bind_num(sqlite3_stmt *st, int i, double v)
{
    if (isfinite(v))
        sqlite3_bind_double(st, i, v);
    else
        sqlite3_bind_null(st, i);
}

static double jnum(const json_t *o, const char *path)
{
    /* "a.b.c" */
    char key[64];
    const char *p = path;
    while (o && *p) {
        size_t n = strcspn(p, ".");
        snprintf(key, sizeof(key), "%.*s", (int)n, p);
        o = json_object_get(o, key);
        p += n + (p[n] == '.');
    }
    return json_is_number(o) ? json_number_value(o) : NAN;
}

static int record_baseline(struct bench_store *s, int64_t attempt_id, const json_t *report,
                           struct ca_err *err)
{
    const json_t *h = json_object_get(report, "harness");
    const json_t *dev = json_object_get(h, "device");
    const char *name = json_string_value(json_object_get(dev, "name"));
    const char *torch = json_string_value(json_object_get(dev, "torch"));
    const char *hash = json_string_value(json_object_get(json_object_get(report, "task"), "hash"));
    double eager = jnum(h, "timing.eager.median_ms");
    if (!name || !torch || !isfinite(eager))
        return 0;
    char fallback[17];
    if (!hash) {
        const char *id = json_string_value(json_object_get(json_object_get(report, "task"), "id"));
        snprintf(fallback, sizeof(fallback), "%.16s", id ? id : "?");
        hash = fallback;
    }
    sqlite3_stmt *st;
    int rc = db_prepare(s->db, s->path,
                        "INSERT OR IGNORE INTO baselines(task_hash, device, torch, eager_ms,"
                        " compile_ms, cached, attempt_id) VALUES(?, ?, ?, ?, ?, ?, ?)",
                        &st, err);
    if (rc)
        return rc;
    sqlite3_bind_text(st, 1, hash, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, name, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, torch, -1, SQLITE_STATIC);
    bind_num(st, 4, eager);
    bind_num(st, 5, jnum(h, "timing.compile.median_ms"));
    sqlite3_bind_int(
        st, 6, json_is_true(json_object_get(json_object_get(h, "timing"), "baseline_cached")));
    sqlite3_bind_int64(st, 7, attempt_id);
    rc = sqlite3_step(st) == SQLITE_DONE ? 0 : db_fail(s->db, s->path, err, "writing a baseline");
    sqlite3_finalize(st);
    return rc;
}

static int insert_report(struct bench_store *s, int64_t attempt_id, const json_t *report,
                         struct ca_err *err)
{
    struct bench_outcome o;
    bench_outcome_from_report(report, &o);
    struct eval_report r;
    eval_report_read(report, &r);
    char *text = json_dumps(report, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (!text)
        return err_setf(err, CA_EPARSE, "%s: an evaluator report could not be serialised", s->path);
    sqlite3_stmt *st;
    int rc = db_prepare(s->db, s->path,
                        "INSERT INTO reports(attempt_id, verdict, ok, stage, reward, speedup_eager,"
                        " speedup_compile, eager_ms, compile_ms, candidate_ms, peak_fraction,"
                        " timing_noisy, message, json) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                        &st, err);
    if (rc) {
        free(text);
        return rc;
    }
    sqlite3_bind_int64(st, 1, attempt_id);
    sqlite3_bind_text(st, 2, verdict_name(o.verdict), -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 3, r.ok);
    sqlite3_bind_text(st, 4, r.stage, -1, SQLITE_STATIC);
    if (o.verdict == BENCH_CORRECT || o.verdict == BENCH_FAILED)
        sqlite3_bind_int(st, 5, o.reward);
    else
        sqlite3_bind_null(st, 5);
    bind_num(st, 6, o.speedup_eager);
    bind_num(st, 7, o.speedup_compile);
    bind_num(st, 8, r.eager.median_ms);
    bind_num(st, 9, r.compile.median_ms);
    bind_num(st, 10, r.candidate.median_ms);
    bind_num(st, 11, o.peak_fraction);
    sqlite3_bind_int(st, 12, r.timing_noisy);
    sqlite3_bind_text(st, 13, r.message, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 14, text, -1, SQLITE_STATIC);
    rc = sqlite3_step(st) == SQLITE_DONE ? 0 : db_fail(s->db, s->path, err, "writing a report");
    sqlite3_finalize(st);
    free(text);
    return rc;
}

static int insert_timing(struct bench_store *s, int64_t attempt_id, const json_t *report,
                         const struct bench_timing *t, struct ca_err *err)
{
    sqlite3_stmt *st;
    int rc = db_prepare(s->db, s->path,
                        "INSERT INTO timings(attempt_id, started_us, finished_us, wall_ms,"
                        " compile_ms, harness_ms, stage_ms) VALUES(?,?,?,?,?,?,?)",
                        &st, err);
    if (rc)
        return rc;
    const json_t *sm = json_object_get(report, "stage_ms");
    char *stage_ms = sm ? json_dumps(sm, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    sqlite3_bind_int64(st, 1, attempt_id);
    sqlite3_bind_int64(st, 2, t ? t->started_us : 0);
    sqlite3_bind_int64(st, 3, t ? t->finished_us : 0);
    bind_num(st, 4, t ? t->wall_ms : NAN);
    bind_num(st, 5, jnum(sm, "compile"));
    bind_num(st, 6, jnum(sm, "harness"));
    sqlite3_bind_text(st, 7, stage_ms, -1, SQLITE_TRANSIENT);
    rc = sqlite3_step(st) == SQLITE_DONE ? 0 : db_fail(s->db, s->path, err, "writing a timing");
    sqlite3_finalize(st);
    free(stage_ms);
    return rc;
}

static int insert_agent(struct bench_store *s, int64_t attempt_id, const json_t *agent,
                        struct ca_err *err)
{
    sqlite3_stmt *st;
    int rc = db_prepare(s->db, s->path,
                        "INSERT INTO agent_results(attempt_id, out_dir, result) VALUES(?,?,?)", &st,
                        err);
    if (rc)
        return rc;
    char *text = json_dumps(agent, JSON_COMPACT | JSON_PRESERVE_ORDER);
    sqlite3_bind_int64(st, 1, attempt_id);
    sqlite3_bind_text(st, 2, json_string_value(json_object_get(agent, "out_dir")), -1,
                      SQLITE_STATIC);
    sqlite3_bind_text(st, 3, text ? text : "{}", -1, SQLITE_TRANSIENT);
    rc = sqlite3_step(st) == SQLITE_DONE ? 0
                                         : db_fail(s->db, s->path, err, "writing an agent result");
    sqlite3_finalize(st);
    free(text);
    return rc;
}

int bench_store_record(struct bench_store *s, int64_t attempt_id, const json_t *report,
                       const struct bench_timing *t, const json_t *agent, struct ca_err *err)
{
    int rc = bench_store_begin(s, err);
    if (rc)
        return rc;
    bool done;
    if ((rc = bench_store_finished(s, attempt_id, &done, err)))
        goto fail;
    if (done) /* recorded before: the first result stands */
        return bench_store_commit(s, err);
    sqlite3_stmt *st;
    if ((rc = insert_report(s, attempt_id, report, err)) ||
        (rc = insert_timing(s, attempt_id, report, t, err)) ||
        (rc = record_baseline(s, attempt_id, report, err)) ||
        (agent && (rc = insert_agent(s, attempt_id, agent, err))) ||
        (rc = db_prepare(s->db, s->path, "UPDATE attempts SET status = 'done' WHERE id = ?", &st,
                         err)))
        goto fail;
    sqlite3_bind_int64(st, 1, attempt_id);
    rc = sqlite3_step(st) == SQLITE_DONE ? 0 : db_fail(s->db, s->path, err, "updating an attempt");
    sqlite3_finalize(st);
    if (rc || (rc = bench_store_commit(s, err)))
        goto fail;
    return 0;
fail:
    bench_store_rollback(s);
    return rc;
}

/* Forgets the results of the attempts whose report matches `where` (SQL over reports), so that
 * they run again; *n receives how many. One transaction. */
static int reset_where(struct bench_store *s, const char *where, size_t *n, struct ca_err *err)
{
    *n = 0;
    int rc = bench_store_begin(s, err);
    if (rc)
        return rc;
    char *select =
        xstrfmt("CREATE TEMP TABLE reset AS SELECT attempt_id FROM reports WHERE %s", where);
    const char *const sql[] = {
        select,
        "DELETE FROM timings WHERE attempt_id IN (SELECT attempt_id FROM reset)",
        "DELETE FROM agent_results WHERE attempt_id IN (SELECT attempt_id FROM reset)",
        "DELETE FROM baselines WHERE attempt_id IN (SELECT attempt_id FROM reset)",
        "DELETE FROM reports WHERE attempt_id IN (SELECT attempt_id FROM reset)",
        "UPDATE attempts SET status = 'pending' WHERE id IN (SELECT attempt_id FROM reset)",
    };
    for (size_t i = 0; i < ARRAY_SIZE(sql) && !rc; i++) {
        rc = db_exec(s->db, s->path, sql[i], err);
        if (!rc && i == ARRAY_SIZE(sql) - 1)
            *n = (size_t)sqlite3_changes(s->db);
    }
    free(select);
    if (!rc)
        rc = db_exec(s->db, s->path, "DROP TABLE reset", err);
    if (!rc)
        rc = bench_store_commit(s, err);
    if (rc)
        bench_store_rollback(s);
    return rc;
}

int bench_store_reset_infra(struct bench_store *s, size_t *n, struct ca_err *err)
{
    return reset_where(s, "verdict = 'infrastructure'", n, err);
}

int bench_store_reset_noisy(struct bench_store *s, size_t *n, struct ca_err *err)
{
    return reset_where(s, "verdict = 'correct' AND timing_noisy != 0", n, err);
}

int bench_store_set_env(struct bench_store *s, const char *key, const char *value,
                        struct ca_err *err)
{
    sqlite3_stmt *st;
    int rc = db_prepare(s->db, s->path,
                        "INSERT OR REPLACE INTO environment(key, value) VALUES(?, ?)", &st, err);
    if (rc)
        return rc;
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, value, -1, SQLITE_STATIC);
    rc = sqlite3_step(st) == SQLITE_DONE ? 0
                                         : db_fail(s->db, s->path, err, "writing the environment");
    sqlite3_finalize(st);
    return rc;
}

#define EXPORT_NO_REPORTS                                                                          \
    "SELECT a.task_id, a.key, a.kind, a.source, a.label, a.extra, a.status, r.verdict,"            \
    " r.stage, r.reward, r.speedup_eager, r.speedup_compile, r.eager_ms, r.compile_ms,"            \
    " r.candidate_ms, r.peak_fraction, r.timing_noisy, r.message, t.wall_ms, t.compile_ms,"        \
    " t.harness_ms, t.started_us, t.finished_us, g.out_dir, g.result, NULL, t.stage_ms"            \
    " FROM attempts a LEFT JOIN reports r ON r.attempt_id = a.id"                                  \
    " LEFT JOIN timings t ON t.attempt_id = a.id"                                                  \
    " LEFT JOIN agent_results g ON g.attempt_id = a.id ORDER BY a.id"

static json_t *col_json(sqlite3_stmt *st, int i)
{
    switch (sqlite3_column_type(st, i)) {
    case SQLITE_INTEGER:
        return json_integer(sqlite3_column_int64(st, i));
    case SQLITE_FLOAT:
        return json_real(sqlite3_column_double(st, i));
    case SQLITE_TEXT:
        return json_string((const char *)sqlite3_column_text(st, i));
    default:
        return json_null();
    }
}

static json_t *col_parsed(sqlite3_stmt *st, int i)
{
    const char *t = (const char *)sqlite3_column_text(st, i);
    json_t *j = t ? json_loads(t, JSON_DECODE_ANY, NULL) : NULL;
    return j ? j : json_null();
}

int bench_store_export(struct bench_store *s, bool with_reports, json_t **out, struct ca_err *err)
{
    *out = NULL;
    json_t *ex = json_object(), *env = json_object(), *tasks = json_array();
    json_object_set_new(ex, "config", json_deep_copy(s->config));
    json_object_set_new(ex, "environment", env);
    json_object_set_new(ex, "tasks", tasks);
    sqlite3_stmt *st = NULL;
    int rc =
        db_prepare(s->db, s->path, "SELECT key, value FROM environment ORDER BY key", &st, err);
    if (rc)
        goto fail;
    while (sqlite3_step(st) == SQLITE_ROW)
        json_object_set_new(env, (const char *)sqlite3_column_text(st, 0), col_json(st, 1));
    sqlite3_finalize(st);

    if ((rc = db_prepare(s->db, s->path,
                         "SELECT id, name, level, origin FROM tasks ORDER BY level, name", &st,
                         err)))
        goto fail;
    json_t *by_id = json_object(); /* borrowed task objects */
    while (sqlite3_step(st) == SQLITE_ROW) {
        json_t *t =
            json_pack("{s:o, s:o, s:o, s:o, s:[]}", "id", col_json(st, 0), "name", col_json(st, 1),
                      "level", col_json(st, 2), "origin", col_json(st, 3), "attempts");
        json_array_append_new(tasks, t);
        json_object_set(by_id, (const char *)sqlite3_column_text(st, 0), t);
    }
    sqlite3_finalize(st);

    /* The report column only when asked: reports are most of the database. */
    const char *q =
        with_reports
            ? "SELECT a.task_id, a.key, a.kind, a.source, a.label, a.extra, a.status, r.verdict,"
              " r.stage, r.reward, r.speedup_eager, r.speedup_compile, r.eager_ms, r.compile_ms,"
              " r.candidate_ms, r.peak_fraction, r.timing_noisy, r.message, t.wall_ms, "
              "t.compile_ms,"
              " t.harness_ms, t.started_us, t.finished_us, g.out_dir, g.result, r.json, t.stage_ms"
              " FROM attempts a LEFT JOIN reports r ON r.attempt_id = a.id"
              " LEFT JOIN timings t ON t.attempt_id = a.id"
              " LEFT JOIN agent_results g ON g.attempt_id = a.id ORDER BY a.id"
            : EXPORT_NO_REPORTS;
    if ((rc = db_prepare(s->db, s->path, q, &st, err))) {
        json_decref(by_id);
        goto fail;
    }
    static const char *const names[] = {"task_id",       "key",
                                        "kind",          "source",
                                        "label",         "extra",
                                        "status",        "verdict",
                                        "stage",         "reward",
                                        "speedup_eager", "speedup_compile",
                                        "eager_ms",      "compile_baseline_ms",
                                        "candidate_ms",  "peak_fraction",
                                        "timing_noisy",  "message",
                                        "wall_ms",       "compile_ms",
                                        "harness_ms",    "started_us",
                                        "finished_us",   "agent_out_dir",
                                        "agent",         "report",
                                        "stage_ms"};
    double first_us = NAN, last_us = NAN, sum_wall = 0, sum_compile = 0, sum_harness = 0;
    size_t finished = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        json_t *a = json_object();
        for (int i = 1; i < (int)ARRAY_SIZE(names); i++) {
            json_t *v = (i == 5 || i >= 24) ? col_parsed(st, i) : col_json(st, i);
            if (json_is_null(v) && i >= 23) {
                json_decref(v);
                continue;
            }
            json_object_set_new(a, names[i], v);
        }
        if (sqlite3_column_type(st, 7) == SQLITE_NULL)
            json_object_set_new(a, "verdict", json_string("pending"));
        else {
            finished++;
            double st_us = (double)sqlite3_column_int64(st, 21),
                   fi_us = (double)sqlite3_column_int64(st, 22);
            if (st_us > 0 && (isnan(first_us) || st_us < first_us))
                first_us = st_us;
            if (fi_us > 0 && (isnan(last_us) || fi_us > last_us))
                last_us = fi_us;
            sum_wall += sqlite3_column_double(st, 18);
            sum_compile += sqlite3_column_double(st, 19);
            sum_harness += sqlite3_column_double(st, 20);
        }
        json_t *t = json_object_get(by_id, (const char *)sqlite3_column_text(st, 0));
        if (t)
            json_array_append_new(json_object_get(t, "attempts"), a);
        else
            json_decref(a);
    }
    sqlite3_finalize(st);
    json_decref(by_id);
    json_object_set_new(
        ex, "timing",
        json_pack("{s:I, s:o, s:f, s:f, s:f}", "finished", (json_int_t)finished, "span_s",
                  isfinite(first_us) && isfinite(last_us) ? json_real((last_us - first_us) / 1e6)
                                                          : json_null(),
                  "sum_wall_s", sum_wall / 1000.0, "sum_compile_s", sum_compile / 1000.0,
                  "sum_harness_s", sum_harness / 1000.0));
    *out = ex;
    return 0;
fail:
    json_decref(ex);
    return rc;
}

void bench_attempt_release(struct bench_attempt *a)
{
    free(a->task_id);
    free(a->task_path);
    free(a->key);
    free(a->source);
    free(a->label);
    json_decref(a->extra);
    memset(a, 0, sizeof(*a));
}
