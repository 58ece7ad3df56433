/* Unit tests of the stores' SQLite helpers (core/db). */
#include "test.h"

#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

#include "core/db.h"
#include "core/err.h"
#include "core/limits.h"
#include "core/util.h"

static sqlite3 *meta_db(void)
{
    sqlite3 *db = NULL;
    struct ca_err err = {0};
    REQUIRE(db_open(":memory:", SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, &db, &err) == 0);
    REQUIRE(db_exec(db, ":memory:", "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT)", &err) ==
            0);
    return db;
}

TEST(db_meta_get_reads_a_value_and_none_for_a_missing_key)
{
    sqlite3 *db = meta_db();
    struct ca_err err = {0};
    REQUIRE(db_exec(db, ":memory:", "INSERT INTO meta VALUES('schema', '3')", &err) == 0);
    char *v = db_meta_get(db, "schema");
    REQUIRE(v != NULL);
    CHECK_STR(v, "3");
    free(v);
    CHECK(db_meta_get(db, "version") == NULL);
    sqlite3_close(db);
}

TEST(db_meta_get_reads_a_null_or_oversized_value_as_none)
{
    sqlite3 *db = meta_db();
    struct ca_err err = {0};
    REQUIRE(db_exec(db, ":memory:", "INSERT INTO meta VALUES('settings', NULL)", &err) == 0);
    CHECK(db_meta_get(db, "settings") == NULL);
    sqlite3_stmt *st = NULL;
    REQUIRE(db_prepare(db, ":memory:", "INSERT INTO meta VALUES('big', ?)", &st, &err) == 0);
    size_t n = CA_LIMIT_DB_META + 1;
    char *big = xmalloc(n + 1);
    memset(big, 'x', n);
    big[n] = '\0';
    REQUIRE(sqlite3_bind_text(st, 1, big, (int)n, SQLITE_TRANSIENT) == SQLITE_OK);
    REQUIRE(sqlite3_step(st) == SQLITE_DONE);
    sqlite3_finalize(st);
    free(big);
    CHECK(db_meta_get(db, "big") == NULL);
    sqlite3_close(db);
}

TEST(db_errors_name_the_file_and_what_was_done)
{
    sqlite3 *db = meta_db();
    struct ca_err err = {0};
    CHECK(db_exec(db, "/runs/r.db", "INSERT INTO nowhere VALUES(1)", &err) == CA_EPARSE);
    CHECK(strstr(err.msg, "/runs/r.db") != NULL);
    CHECK(strstr(err.msg, "nowhere") != NULL);
    sqlite3_stmt *st = NULL;
    struct ca_err e2 = {0};
    CHECK(db_prepare(db, "/runs/r.db", "SELEKT", &st, &e2) == CA_EPARSE);
    CHECK(strstr(e2.msg, "/runs/r.db: preparing a query") != NULL);
    sqlite3_close(db);
}
