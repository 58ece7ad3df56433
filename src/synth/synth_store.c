/*
 * synth_store.c - the SQLite store of a synth output folder.
 *
 * Invariants: meta names the schema and version and holds the filter settings; a database
 * without them is refused, never adopted. One row per (stream, seed), inserted once in one
 * statement (autocommit, WAL): a kill loses only what was not yet inserted, and inserting a seed
 * the store has is refused by the primary key, so nothing is recorded twice. A partial unique
 * index on key over accepted rows keeps the accepted set free of exact duplicates even if two
 * runs shared one store.
 */
#include "synth/synth_internal.h"

#include <math.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/db.h"
#include "core/fs.h"
#include "core/hash.h"
#include "core/json.h"
#include "core/limits.h"
#include "core/util.h"
#include "core/banned.h"

struct synth_store {
    sqlite3 *db;
    char *path;
};

static const char *SCHEMA =
    "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);"
    "CREATE TABLE candidates(stream TEXT NOT NULL, seed INTEGER NOT NULL, status TEXT NOT NULL,"
    " filter TEXT, reason TEXT, id TEXT, name TEXT, code TEXT, ops TEXT, depth INTEGER,"
    " eager_ms REAL, compile_ms REAL, filters TEXT, key TEXT, answer TEXT NOT NULL,"
    " created_us INTEGER NOT NULL, PRIMARY KEY(stream, seed));"
    "CREATE UNIQUE INDEX accepted_key ON candidates(key) WHERE status = 'accepted';";

static int meta_put(struct synth_store *s, const char *key, const char *value, struct ca_err *err)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(s->db, "INSERT OR REPLACE INTO meta(key, value) VALUES(?, ?)", -1, &st,
                           NULL) != SQLITE_OK)
        return db_fail(s->db, s->path, err, "writing meta");
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, value, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st) == SQLITE_DONE ? 0 : db_fail(s->db, s->path, err, "writing meta");
    sqlite3_finalize(st);
    return rc;
}

static int create_schema(struct synth_store *s, const json_t *settings, struct ca_err *err)
{
    char version[16];
    snprintf(version, sizeof(version), "%d", SYNTH_SCHEMA_VERSION);
    char *text = json_dumps(settings, JSON_SORT_KEYS | JSON_COMPACT);
    int rc = db_exec(s->db, s->path, "BEGIN IMMEDIATE", err);
    if (rc == 0)
        rc = db_exec(s->db, s->path, SCHEMA, err);
    if (rc == 0)
        rc = meta_put(s, "schema", SYNTH_SCHEMA, err);
    if (rc == 0)
        rc = meta_put(s, "version", version, err);
    if (rc == 0)
        rc = meta_put(s, "settings", text, err);
    if (rc == 0)
        rc = db_exec(s->db, s->path, "COMMIT", err);
    else
        (void)sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
    free(text);
    return rc;
}

static int check_existing(struct synth_store *s, const json_t *settings, struct ca_err *err)
{
    char *schema = db_meta_get(s->db, "schema"), *version = db_meta_get(s->db, "version");
    char *stored = db_meta_get(s->db, "settings");
    int rc = 0;
    if (!schema || strcmp(schema, SYNTH_SCHEMA) != 0 || !stored) {
        rc = err_setf(err, CA_EPARSE, "%s is not a synth store; give --out a new folder", s->path);
        goto out;
    }
    if (!version || strtol(version, NULL, 10) != SYNTH_SCHEMA_VERSION) {
        rc = err_setf(err, CA_EPARSE, "%s: store version %s, this build reads %d", s->path,
                      version ? version : "?", SYNTH_SCHEMA_VERSION);
        goto out;
    }
    if (!settings)
        goto out;
    json_t *old = json_loads(stored, 0, NULL);
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)settings, key, v)
    {
        json_t *was = old ? json_object_get(old, key) : NULL;
        if (!was || !json_equal(was, v)) {
            char *a = was ? json_dumps(was, JSON_ENCODE_ANY) : xstrdup("(unset)");
            char *b = json_dumps(v, JSON_ENCODE_ANY);
            rc = err_setf(err, CA_EUSAGE,
                          "%s was filtered with %s = %s, not %s: its tasks would not be "
                          "comparable; give the same value or a new --out",
                          s->path, key, a, b);
            free(a);
            free(b);
            break;
        }
    }
    json_decref(old);
out:
    free(schema);
    free(version);
    free(stored);
    return rc;
}

int synth__store_open(const char *dir, const json_t *settings, struct synth_store **out,
                      struct ca_err *err)
{
    *out = NULL;
    struct buf path;
    buf_init(&path, CA_LIMIT_PATH);
    if (fs_join(&path, dir, SYNTH_DB))
        return err_setf(err, CA_ETOOBIG, "%s: path too long", dir);
    if (!settings && !fs_is_file(path.data)) {
        int rc = err_setf(err, CA_ENOTFOUND,
                          "%s: no synth store here (run cuda-agent synth run "
                          "--out %s first)",
                          dir, dir);
        buf_release(&path);
        return rc;
    }
    struct synth_store *s = xcalloc(1, sizeof(*s));
    s->path = buf_detach(&path, NULL);
    int flags = SQLITE_OPEN_READWRITE | (settings ? SQLITE_OPEN_CREATE : 0);
    int rc = db_open(s->path, flags, &s->db, err);
    if (rc)
        goto fail;
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(s->db, "SELECT count(*) FROM sqlite_master", -1, &st, NULL) !=
        SQLITE_OK) {
        rc = err_setf(err, CA_EPARSE, "%s is not a synth store (SQLite: %s)", s->path,
                      sqlite3_errmsg(s->db));
        goto fail;
    }
    int64_t ntables = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int64(st, 0) : -1;
    sqlite3_finalize(st);
    if (ntables < 0) {
        rc = err_setf(err, CA_EPARSE, "%s is not a synth store (SQLite: %s)", s->path,
                      sqlite3_errmsg(s->db));
        goto fail;
    }
    if ((rc = db_exec(s->db, s->path, "PRAGMA journal_mode=WAL;", err)))
        goto fail;
    rc = ntables == 0 && settings ? create_schema(s, settings, err)
                                  : check_existing(s, settings, err);
    if (rc)
        goto fail;
    *out = s;
    return 0;
fail:
    synth__store_free(s);
    return rc;
}

void synth__store_free(struct synth_store *s)
{
    if (!s)
        return;
    sqlite3_close(s->db);
    free(s->path);
    free(s);
}

bool synth__store_has(struct synth_store *s, const char *stream, int64_t seed)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(s->db, "SELECT 1 FROM candidates WHERE stream = ? AND seed = ?", -1, &st,
                           NULL) != SQLITE_OK)
        return false;
    sqlite3_bind_text(st, 1, stream, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, seed);
    bool has = sqlite3_step(st) == SQLITE_ROW;
    sqlite3_finalize(st);
    return has;
}

int64_t synth__store_count(struct synth_store *s, bool accepted_only)
{
    sqlite3_stmt *st;
    const char *sql = accepted_only ? "SELECT count(*) FROM candidates WHERE status = 'accepted'"
                                    : "SELECT count(*) FROM candidates";
    if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK)
        return -1;
    int64_t n = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int64(st, 0) : -1;
    sqlite3_finalize(st);
    return n;
}

void synth__name_from_ops(const json_t *ops, char *out, size_t n)
{
    size_t len = 0;
    out[0] = '\0';
    size_t i;
    json_t *v;
    json_array_foreach(ops, i, v)
    {
        const char *op = json_string_value(v);
        if (!op)
            continue;
        const char *last = strrchr(op, '.');
        last = last ? last + 1 : op;
        size_t l = strlen(last), need = l + (len ? 1 : 0);
        if (len + need > 48 || len + need + 1 > n)
            break;
        if (len)
            out[len++] = '_';
        for (size_t k = 0; k < l; k++) {
            char c = last[k];
            if (c >= 'A' && c <= 'Z')
                c = (char)(c - 'A' + 'a');
            else if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'))
                c = '_';
            out[len++] = c;
        }
        out[len] = '\0';
    }
    if (!len)
        snprintf(out, n, "task");
}

/* The accepted id holding key, or NULL (heap). */
static char *accepted_with_key(struct synth_store *s, const char *key)
{
    sqlite3_stmt *st;
    char *id = NULL;
    if (sqlite3_prepare_v2(s->db, "SELECT id FROM candidates WHERE status = 'accepted' AND key = ?",
                           -1, &st, NULL) != SQLITE_OK)
        return NULL;
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    if (sqlite3_step(st) == SQLITE_ROW)
        id = xstrdup((const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    return id;
}

static void bind_text_or_null(sqlite3_stmt *st, int i, const char *v)
{
    if (v)
        sqlite3_bind_text(st, i, v, -1, SQLITE_TRANSIENT);
    else
        sqlite3_bind_null(st, i);
}

static void bind_real_or_null(sqlite3_stmt *st, int i, const json_t *v)
{
    if (json_is_number(v))
        sqlite3_bind_double(st, i, json_number_value(v));
    else
        sqlite3_bind_null(st, i);
}

int synth__store_record(struct synth_store *s, const char *stream, const json_t *answer, bool *dup,
                        struct ca_err *err)
{
    *dup = false;
    json_t *jseed = json_object_get(answer, "seed");
    if (!json_is_integer(jseed))
        return err_setf(err, CA_EPARSE, "%s: an answer without a seed", s->path);
    const char *code = json_string_value(json_object_get(answer, "code"));
    const char *key = json_string_value(json_object_get(answer, "key"));
    const char *reason = json_string_value(json_object_get(answer, "reason"));
    json_t *ops = json_object_get(answer, "ops");
    bool ok = json_is_true(json_object_get(answer, "ok")) && code && key;
    char filter[64] = "", name[64], id[128] = "";
    char *dup_of = ok ? accepted_with_key(s, key) : NULL;
    char *dup_reason = NULL;
    if (dup_of) {
        ok = false;
        *dup = true;
        dup_reason = xstrfmt("duplicate: the same code (normalised) as %s", dup_of);
        reason = dup_reason;
    }
    if (!ok && reason) {
        const char *colon = strchr(reason, ':');
        size_t l = colon ? (size_t)(colon - reason) : strlen(reason);
        snprintf(filter, sizeof(filter), "%.*s", (int)(l < 63 ? l : 63), reason);
    }
    synth__name_from_ops(json_is_array(ops) ? ops : NULL, name, sizeof(name));
    if (code) {
        char hex[HASH64_HEX_LEN + 1];
        hash64_hex(hash64(code, strlen(code)), hex);
        snprintf(id, sizeof(id), "%s-%.12s", name, hex);
    }
    char *ops_text = json_is_array(ops) ? json_dumps(ops, JSON_COMPACT) : NULL;
    json_t *filters = json_object_get(answer, "filters");
    char *filters_text = filters ? json_dumps(filters, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    char *answer_text = json_dumps(answer, JSON_COMPACT);
    sqlite3_stmt *st = NULL;
    int rc = 0;
    if (sqlite3_prepare_v2(s->db,
                           "INSERT INTO candidates(stream, seed, status, filter, reason, id, name,"
                           " code, ops, depth, eager_ms, compile_ms, filters, key, answer,"
                           " created_us) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                           -1, &st, NULL) != SQLITE_OK) {
        rc = db_fail(s->db, s->path, err, "recording a candidate");
        goto out;
    }
    sqlite3_bind_text(st, 1, stream, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, json_integer_value(jseed));
    sqlite3_bind_text(st, 3, ok ? "accepted" : "rejected", -1, SQLITE_STATIC);
    bind_text_or_null(st, 4, ok ? NULL : (filter[0] ? filter : "unknown"));
    bind_text_or_null(st, 5, ok ? NULL : (reason ? reason : "rejected without a reason"));
    bind_text_or_null(st, 6, id[0] ? id : NULL);
    bind_text_or_null(st, 7, name);
    bind_text_or_null(st, 8, code);
    bind_text_or_null(st, 9, ops_text);
    json_t *depth = json_object_get(answer, "depth");
    if (json_is_integer(depth))
        sqlite3_bind_int64(st, 10, json_integer_value(depth));
    else
        sqlite3_bind_null(st, 10);
    bind_real_or_null(st, 11, json_object_get(answer, "eager_ms"));
    bind_real_or_null(st, 12, json_object_get(answer, "compile_ms"));
    bind_text_or_null(st, 13, filters_text);
    bind_text_or_null(st, 14, key);
    sqlite3_bind_text(st, 15, answer_text, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 16, ca_now_us());
    if (sqlite3_step(st) != SQLITE_DONE)
        rc = db_fail(s->db, s->path, err, "recording a candidate");
out:
    sqlite3_finalize(st);
    free(ops_text);
    free(filters_text);
    free(answer_text);
    free(dup_of);
    free(dup_reason);
    return rc;
}

static const char *col_text(sqlite3_stmt *st, int i)
{
    return (const char *)sqlite3_column_text(st, i);
}

static double col_real(sqlite3_stmt *st, int i)
{
    return sqlite3_column_type(st, i) == SQLITE_NULL ? NAN : sqlite3_column_double(st, i);
}

int synth__store_each(struct synth_store *s, bool accepted_only,
                      int (*fn)(const struct synth_row *r, void *ctx), void *ctx,
                      struct ca_err *err)
{
    sqlite3_stmt *st;
    const char *sql =
        accepted_only
            ? "SELECT stream, seed, status, filter, reason, id, name, code, ops, depth, eager_ms,"
              " compile_ms, filters, key FROM candidates WHERE status = 'accepted'"
              " ORDER BY stream, seed"
            : "SELECT stream, seed, status, filter, reason, id, name, code, ops, depth, eager_ms,"
              " compile_ms, filters, key FROM candidates ORDER BY stream, seed";
    if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK)
        return db_fail(s->db, s->path, err, "reading candidates");
    int rc = 0, step;
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        struct synth_row r = {
            .stream = col_text(st, 0),
            .seed = sqlite3_column_int64(st, 1),
            .status = col_text(st, 2),
            .filter = col_text(st, 3),
            .reason = col_text(st, 4),
            .id = col_text(st, 5),
            .name = col_text(st, 6),
            .code = col_text(st, 7),
            .ops = col_text(st, 8),
            .depth = sqlite3_column_type(st, 9) == SQLITE_NULL ? 0 : sqlite3_column_int64(st, 9),
            .eager_ms = col_real(st, 10),
            .compile_ms = col_real(st, 11),
            .filters = col_text(st, 12),
            .key = col_text(st, 13),
        };
        if ((rc = fn(&r, ctx)))
            break;
    }
    if (rc == 0 && step != SQLITE_DONE)
        rc = db_fail(s->db, s->path, err, "reading candidates");
    sqlite3_finalize(st);
    return rc;
}
