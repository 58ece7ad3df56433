/*
 * db.c - SQLite helpers shared by the bench and synth stores: what each of them did the same
 * way (an error that names the file and the step, sqlite3_exec's message freed, a meta table of
 * key and value), in one place.
 *
 * Invariant: every message names the database file, so a user with several runs knows which
 * one refused.
 */
#include "core/db.h"

#include "core/limits.h"
#include "core/util.h"
#include "core/banned.h"

/* How long a statement waits for another connection's lock before SQLITE_BUSY. */
#define DB_BUSY_TIMEOUT_MS 10000

int db_open(const char *path, int flags, sqlite3 **db, struct ca_err *err)
{
    if (sqlite3_open_v2(path, db, flags, NULL) != SQLITE_OK)
        return err_setf(err, CA_EPARSE, "%s: cannot open as SQLite: %s", path,
                        *db ? sqlite3_errmsg(*db) : "out of memory");
    sqlite3_busy_timeout(*db, DB_BUSY_TIMEOUT_MS);
    return 0;
}

int db_fail(sqlite3 *db, const char *path, struct ca_err *err, const char *what)
{
    return err_setf(err, CA_EPARSE, "%s: %s: %s", path, what, sqlite3_errmsg(db));
}

int db_exec(sqlite3 *db, const char *path, const char *sql, struct ca_err *err)
{
    char *msg = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK) {
        int rc = err_setf(err, CA_EPARSE, "%s: %s", path, msg ? msg : "SQLite error");
        sqlite3_free(msg);
        return rc;
    }
    return 0;
}

int db_prepare(sqlite3 *db, const char *path, const char *sql, sqlite3_stmt **st,
               struct ca_err *err)
{
    if (sqlite3_prepare_v2(db, sql, -1, st, NULL) != SQLITE_OK)
        return db_fail(db, path, err, "preparing a query");
    return 0;
}

char *db_meta_get(sqlite3 *db, const char *key)
{
    sqlite3_stmt *st;
    char *v = NULL;
    if (sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key = ?", -1, &st, NULL))
        return NULL;
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    if (sqlite3_step(st) == SQLITE_ROW) {
        const char *t = (const char *)sqlite3_column_text(st, 0);
        /* A NULL value, or one past the limit (the file is not one this program wrote),
         * reads as none. */
        if (t && sqlite3_column_bytes(st, 0) <= (int)CA_LIMIT_DB_META)
            v = xstrdup(t);
    }
    sqlite3_finalize(st);
    return v;
}
