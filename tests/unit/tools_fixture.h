/*
 * tools_fixture.h - shared set-up of the tool tests (test_tools.c,
 * test_tools_search.c): a workspace built from an example task, path and
 * file helpers, one-call helpers that keep the last result in R and check
 * that it serialises, and result assertions. Included once per test file;
 * everything is static, and a file may leave some helpers unused.
 */
#ifndef CA_TOOLS_FIXTURE_H
#define CA_TOOLS_FIXTURE_H

#include "test.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/buf.h"
#include "core/fs.h"
#include "core/util.h"
#include "task/task.h"
#include "tools/tools.h"
#include "workspace/workspace.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"

static char ws[4096];
static struct tool_result R;

static struct tool_ctx *ws_ctx(void)
{
    struct ca_err err = {0};
    struct task_set set;
    task_set_init(&set);
    char *src = xstrfmt("%s/examples/tasks/softmax_last_dim.py", test_repo());
    if (task_load(src, &set, &err) != 0)
        fprintf(stderr, "%s\n", err.msg);
    REQUIRE(set.n == 1);
    snprintf(ws, sizeof(ws), "%s/ws", test_tmpdir());
    if (workspace_create(&set.tasks[0], ws, 0, &err) != 0)
        fprintf(stderr, "%s\n", err.msg);
    REQUIRE(fs_is_dir(ws));
    struct tool_ctx *ctx = NULL;
    if (tool_ctx_new(ws, &ctx, &err) != 0)
        fprintf(stderr, "%s\n", err.msg);
    REQUIRE(ctx);
    task_set_release(&set);
    free(src);
    tool_result_init(&R);
    return ctx;
}

static char *wpath(const char *rel)
{
    static char p[4][8192];
    static int next;
    char *s = p[next++ % 4];
    snprintf(s, sizeof(p[0]), "%s/%s", ws, rel);
    return s;
}

/* Write a workspace file, creating its parent folders. */
static void put(const char *rel, const char *text)
{
    char *path = wpath(rel);
    char *slash = strrchr(path, '/');
    *slash = '\0';
    struct ca_err err;
    REQUIRE(fs_mkdirs(path, 0755, &err) == 0);
    *slash = '/';
    FILE *f = fopen(path, "wb");
    REQUIRE(f);
    fputs(text, f);
    REQUIRE(fclose(f) == 0);
}

/* Set a file's modification time to `sec` seconds after the epoch. */
static void set_mtime(const char *rel, long sec)
{
    struct timespec ts[2] = {{sec, 0}, {sec, 0}};
    REQUIRE(utimensat(AT_FDCWD, wpath(rel), ts, AT_SYMLINK_NOFOLLOW) == 0);
}

/* A file's content (owned here: valid until four more calls). */
static const char *slurp(const char *rel)
{
    static char *ring[4];
    static int next;
    char **slot = &ring[next++ % 4];
    free(*slot);
    struct buf b;
    buf_init(&b, 64 << 20);
    struct ca_err err;
    if (fs_read_file(wpath(rel), 64 << 20, &b, &err) != 0) {
        buf_release(&b);
        *slot = xstrdup("(missing)");
    } else {
        *slot = buf_detach(&b, NULL);
    }
    return *slot;
}

/* Run one call with args given as JSON text; the result stays in R. */
static struct tool_result *callj(struct tool_ctx *ctx, const char *name, json_t *args)
{
    tool_result_release(&R);
    tool_result_init(&R);
    REQUIRE(tool_call(ctx, name, args, &R) == 0);
    json_decref(args);
    /* Every result must serialise as JSON. */
    json_t *j = tool_result_to_json(&R);
    REQUIRE(j && json_is_string(json_object_get(j, "text")));
    json_decref(j);
    return &R;
}

static struct tool_result *call(struct tool_ctx *ctx, const char *name, const char *args)
{
    json_error_t je;
    json_t *a = json_loads(args, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
    if (!a)
        fprintf(stderr, "bad test JSON %s: %s\n", args, je.text);
    REQUIRE(a);
    return callj(ctx, name, a);
}

#define OK(r)                                                                                      \
    do {                                                                                           \
        struct tool_result *ok__r = (r);                                                           \
        if (ok__r->is_error)                                                                       \
            fprintf(stderr, "  unexpected error: %s\n", ok__r->text.data);                         \
        CHECK(!ok__r->is_error);                                                                   \
    } while (0)
#define REFUSED(r, needle)                                                                         \
    do {                                                                                           \
        struct tool_result *ref__r = (r);                                                          \
        CHECK(ref__r->is_error);                                                                   \
        CHECK_CONTAINS(ref__r->text.data, needle);                                                 \
    } while (0)

static long long field_int(const char *key)
{
    return (long long)json_integer_value(json_object_get(R.fields, key));
}

static bool field_bool(const char *key)
{
    return json_is_true(json_object_get(R.fields, key));
}

static const char *field_str(const char *key)
{
    return json_string_value(json_object_get(R.fields, key));
}

#pragma GCC diagnostic pop

#endif
