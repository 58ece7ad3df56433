/*
 * db.h - the small SQLite helpers the stores share (bench's run database, synth's output
 * store): errors that name the file and say what was being done, statements run or prepared
 * with those errors, and the meta table's values.
 *
 * The caller owns the connection and its path; these borrow both. Errors are CA_EPARSE, as a
 * database that refuses a statement is not the store it was taken for. Thread safety is
 * SQLite's for one connection: one thread at a time.
 */
#ifndef CA_DB_H
#define CA_DB_H

#include <sqlite3.h>

#include "core/err.h"

/*
 * Open path with sqlite3_open_v2's flags and a busy timeout (a reader waits out a writer's
 * commit): 0, or CA_EPARSE "PATH: cannot open as SQLite: <why>". *db is set either way: the
 * caller sqlite3_close()s it.
 */
int db_open(const char *path, int flags, sqlite3 **db, struct ca_err *err);
/* CA_EPARSE "PATH: WHAT: <SQLite's message>". */
int db_fail(sqlite3 *db, const char *path, struct ca_err *err, const char *what);
/* Run sql (statements that return no rows): 0, or CA_EPARSE "PATH: <SQLite's message>". */
int db_exec(sqlite3 *db, const char *path, const char *sql, struct ca_err *err);
/* Prepare one statement: 0, or db_fail's error "preparing a query". */
int db_prepare(sqlite3 *db, const char *path, const char *sql, sqlite3_stmt **st,
               struct ca_err *err);
/* The value of key in the table meta(key, value) as a heap string, or NULL when there is none,
 * it is NULL, longer than CA_LIMIT_DB_META, or cannot be read. */
char *db_meta_get(sqlite3 *db, const char *key);

#endif
