/*
 * task_fixture.h - shared set-up of the task tests (test_task.c, test_task_data.c): the
 * fixture files under tests/it/data/tasks, a small valid task, scratch paths and file
 * helpers. Included once per test file; everything is static, and a file may leave some
 * helpers unused.
 */
#ifndef CA_TASK_FIXTURE_H
#define CA_TASK_FIXTURE_H

#include "test.h"

#include <dirent.h>
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/buf.h"
#include "core/fs.h"
#include "core/hash.h"
#include "core/limits.h"
#include "core/proc.h"
#include "core/util.h"
#include "task/task.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"

#define FIXTURES "tests/it/data/tasks"

/* A small valid task; %s is put into forward's body. */
#define TASK_CODE(fwd)                                                                             \
    "import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"                           \
    "    def forward(self, x):\n        " fwd "\n\n\n"                                             \
    "def get_inputs():\n    return [torch.randn(4)]\n\n\n"                                         \
    "def get_init_inputs():\n    return []\n"

static char *fixture(const char *rel)
{
    return xstrfmt("%s/" FIXTURES "/%s", test_repo(), rel);
}

static char *tmp_path(const char *rel)
{
    return xstrfmt("%s/%s", test_tmpdir(), rel);
}

static void write_file(const char *path, const char *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    REQUIRE(f);
    REQUIRE(fwrite(data, 1, len, f) == len);
    REQUIRE(fclose(f) == 0);
}

static void write_str(const char *path, const char *s)
{
    write_file(path, s, strlen(s));
}

static char *read_str(const char *path)
{
    struct buf b;
    buf_init(&b, 1 << 20);
    struct ca_err err = {0};
    REQUIRE(fs_read_file(path, 1 << 20, &b, &err) == 0);
    buf_rtrim(&b);
    return buf_detach(&b, NULL);
}

static int parse_str(const char *code, struct task *t, struct ca_err *err)
{
    return task_parse("t.py", code, strlen(code), t, err);
}

static bool has_op(const struct task *t, const char *op)
{
    for (size_t i = 0; i < t->nops; i++)
        if (strcmp(t->ops[i], op) == 0)
            return true;
    return false;
}

/* Loads text as a JSONL task file (written to the case's scratch directory). */
static int load_jsonl_text(const char *text, struct task_set *set, struct ca_err *err)
{
    char *path = tmp_path("d.jsonl");
    write_str(path, text);
    int rc = task_load_jsonl(path, set, err);
    free(path);
    return rc;
}

/* One JSONL row: {"code": CODE EXTRA}, EXTRA being more members (", \"ops\": [...]"). */
static char *row(const char *code, const char *extra)
{
    json_t *s = json_string(code);
    char *dumped = json_dumps(s, JSON_ENCODE_ANY);
    char *r = xstrfmt("{\"code\": %s%s}\n", dumped, extra);
    free(dumped);
    json_decref(s);
    return r;
}

/* Loads every fixture SUBDIR/NAME.EXT, each expected to fail with the message its .expect file
 * holds (as a substring); returns how many were checked. */
static int check_bad_fixtures(const char *subdir, const char *ext)
{
    char *dir = fixture(subdir);
    DIR *d = opendir(dir);
    REQUIRE(d);
    struct dirent *de;
    size_t elen = strlen(ext);
    int seen = 0;
    while ((de = readdir(d))) {
        size_t n = strlen(de->d_name);
        if (n <= elen || strcmp(de->d_name + n - elen, ext) != 0)
            continue;
        char *path = xstrfmt("%s/%s", dir, de->d_name);
        char *expect_path = xstrfmt("%s/%.*s.expect", dir, (int)(n - elen), de->d_name);
        char *expect = read_str(expect_path);
        struct task_set set;
        struct ca_err err = {0};
        task_set_init(&set);
        int rc = task_load(path, &set, &err);
        if (rc == 0 || !strstr(err.msg, expect))
            test__fail(__FILE__, __LINE__, "%s: rc %d, message \"%s\", expected \"%s\"", de->d_name,
                       rc, err.msg, expect);
        CHECK_EQ(set.n, 0);
        task_set_release(&set);
        free(expect);
        free(expect_path);
        free(path);
        seen++;
    }
    closedir(d);
    free(dir);
    return seen;
}

/* The JSONL fixture ops_small.jsonl, loaded into set. */
static void load_small(struct task_set *set)
{
    char *path = fixture("ops_small.jsonl");
    struct ca_err err = {0};
    task_set_init(set);
    REQUIRE(task_load(path, set, &err) == 0);
    free(path);
}

#pragma GCC diagnostic pop

#endif
