/*
 * test_task_data.c - tasks as data: the JSONL loader and its error messages (fixtures under
 * tests/it/data/tasks/), the JSON output and JSONL round trip, and the parquet import.
 */
#include "task_fixture.h"

/* ---- JSONL ---- */

TEST(jsonl_fixture)
{
    char *path = fixture("ops_small.jsonl");
    struct task_set set;
    struct ca_err err = {0};
    task_set_init(&set);
    REQUIRE(task_load(path, &set, &err) == 0);
    REQUIRE(set.n == 6);
    CHECK_EQ(set.relabelled, 2);
    REQUIRE(set.ndups == 1);

    const struct task *t = &set.tasks[0];
    CHECK_STR(t->name, "conv2d_relu");
    CHECK(strncmp(t->id, "conv2d_relu-", 12) == 0);
    CHECK_STR(t->data_source, "torch#2");
    CHECK(!t->ops_relabelled && !t->ops_unlabelled);
    char *origin = xstrfmt("%s:1", path);
    CHECK_STR(t->origin, origin);
    free(origin);

    origin = xstrfmt("%s:3", path);
    CHECK_STR(set.dups[0].origin, origin);
    CHECK_STR(set.dups[0].kept_id, t->id);
    free(origin);

    t = &set.tasks[1]; /* label says tanh, code does sigmoid */
    CHECK_STR(t->name, "sigmoid_matmul");
    CHECK(t->ops_relabelled);
    REQUIRE(t->nops == 2);
    CHECK_STR(t->ops[0], "torch.sigmoid");
    CHECK_STR(t->ops[1], "torch.matmul");

    t = &set.tasks[2]; /* label given as a JSON string */
    CHECK_STR(t->name, "softmax");
    CHECK(!t->ops_relabelled && !t->ops_unlabelled);
    CHECK_STR(t->data_source, "torch#1");

    t = &set.tasks[3]; /* no label, explicit name, after a blank line */
    CHECK_STR(t->name, "my_gelu");
    CHECK(t->ops_unlabelled && !t->ops_relabelled);
    CHECK(t->data_source == NULL);
    CHECK_CONTAINS(t->origin, "ops_small.jsonl:6");

    t = &set.tasks[4]; /* explicit id; Tensor.sum agrees with torch.sum */
    CHECK_STR(t->id, "custom-rowsum");
    CHECK_STR(t->name, "sum");
    CHECK(!t->ops_relabelled);

    t = &set.tasks[5]; /* Python-list label missing amax */
    CHECK(t->ops_relabelled);
    CHECK(has_op(t, "Tensor.amax"));
    task_set_release(&set);
    free(path);
}

TEST(jsonl_bad_fixtures)
{
    CHECK(check_bad_fixtures("bad_jsonl", ".jsonl") >= 8);
}

TEST(jsonl_errors)
{
    struct task_set set;
    struct ca_err err = {0};
    task_set_init(&set);
    char *good = row(TASK_CODE("return torch.exp(x)"), "");
    char *text;

    text = xstrfmt("%s\n  \n%s", good, "{\"code\": 1 2}\n");
    CHECK_EQ(load_jsonl_text(text, &set, &err), CA_EPARSE);
    CHECK_CONTAINS(err.msg, "d.jsonl:4: invalid JSON at column");
    free(text);

    text = xstrfmt("%s{\"code\": \"imp", good);
    CHECK_EQ(load_jsonl_text(text, &set, &err), CA_EPARSE);
    CHECK_CONTAINS(err.msg, "d.jsonl:2: truncated JSON line (file ends mid-record)");
    free(text);

    /* a complete last line without a newline is fine */
    text = xstrdup(good);
    text[strlen(text) - 1] = '\0';
    CHECK_EQ(load_jsonl_text(text, &set, &err), 0);
    CHECK_EQ(set.n, 1);
    task_set_release(&set);
    free(text);

    CHECK_EQ(load_jsonl_text("{\"ops\": []}\n", &set, &err), CA_EPARSE);
    CHECK_CONTAINS(err.msg, "d.jsonl:1: missing required field \"code\"");
    CHECK_EQ(load_jsonl_text("{\"code\": null}\n", &set, &err), CA_EPARSE);
    CHECK_CONTAINS(err.msg, "missing required field \"code\"");

    text = row(TASK_CODE("return x"), ", \"ops\": {\"a\": 1}");
    CHECK_EQ(load_jsonl_text(text, &set, &err), CA_EPARSE);
    CHECK_CONTAINS(err.msg, "d.jsonl:1: field \"ops\" must be a list of operator names");
    free(text);
    text = row(TASK_CODE("return x"), ", \"ops\": \"relu\"");
    CHECK_EQ(load_jsonl_text(text, &set, &err), CA_EPARSE);
    CHECK_CONTAINS(err.msg, "field \"ops\" is a string but not a list");
    free(text);
    text = row(TASK_CODE("return x"), ", \"data_source\": 2");
    CHECK_EQ(load_jsonl_text(text, &set, &err), CA_EPARSE);
    CHECK_CONTAINS(err.msg, "d.jsonl:1: field \"data_source\" must be a string");
    free(text);
    text = row(TASK_CODE("return x"), ", \"level\": -1");
    CHECK_EQ(load_jsonl_text(text, &set, &err), CA_EPARSE);
    CHECK_CONTAINS(err.msg, "field \"level\" must be 0..");
    free(text);
    text = row(TASK_CODE("return x"), ", \"id\": \"a:b\"");
    CHECK_EQ(load_jsonl_text(text, &set, &err), CA_EPARSE);
    CHECK_CONTAINS(err.msg, "field \"id\" must be");
    free(text);

    /* a task_parse failure names the line and the position in the code */
    text = row("import torch\nclass Model(object):\n    pass\n", "");
    CHECK_EQ(load_jsonl_text(text, &set, &err), CA_EPARSE);
    CHECK_CONTAINS(err.msg, "d.jsonl:1 (code line 2): class Model does not derive");
    free(text);
    text = row("x = 1\n", "");
    CHECK_EQ(load_jsonl_text(text, &set, &err), CA_EPARSE);
    CHECK_CONTAINS(err.msg, "d.jsonl:1: no top-level `class Model(nn.Module)`");
    free(text);
    CHECK_EQ(load_jsonl_text("{\"code\": \"x\\u0000\"}\n", &set, &err), CA_EPARSE);
    CHECK_CONTAINS(err.msg, "d.jsonl:1: invalid JSON");
    CHECK_EQ(load_jsonl_text("{\"code\": \"\xff\"}\n", &set, &err), CA_EUTF8);
    CHECK_CONTAINS(err.msg, "d.jsonl:1: invalid UTF-8 at column 11");
    CHECK_EQ(load_jsonl_text("{\"code\": \"x\", \"code\": \"y\"}\n", &set, &err), CA_EPARSE);
    CHECK_CONTAINS(err.msg, "duplicate");

    CHECK_EQ(set.n, 0);
    free(good);
    task_set_release(&set);
}

TEST(jsonl_explicit_id_duplicated)
{
    struct task_set set;
    struct ca_err err = {0};
    task_set_init(&set);
    char *a = row(TASK_CODE("return torch.exp(x)"), ", \"id\": \"x1\"");
    char *b = row(TASK_CODE("return torch.log(x)"), ", \"id\": \"x1\"");
    char *text = xstrfmt("%s%s%s", a, a, b);
    /* the same code twice is a duplicate; other code under the same id is an error */
    CHECK_EQ(load_jsonl_text(text, &set, &err), CA_EDUP);
    CHECK_CONTAINS(err.msg, "d.jsonl:3: task id \"x1\" is already used by");
    CHECK_CONTAINS(err.msg, "d.jsonl:1 for different code");
    CHECK_EQ(set.n, 0);
    free(text);
    /* across sources: the same id for different code cannot join one set */
    char *p1 = tmp_path("one.jsonl"), *p2 = tmp_path("two.jsonl");
    write_str(p1, a);
    write_str(p2, b);
    REQUIRE(task_load(p1, &set, &err) == 0);
    CHECK_EQ(task_load(p2, &set, &err), CA_EDUP);
    CHECK_CONTAINS(err.msg, "two.jsonl:1: task id \"x1\" is already loaded from");
    CHECK_EQ(set.n, 1);
    /* loading the same source again adds nothing and is not an error */
    REQUIRE(task_load(p1, &set, &err) == 0);
    CHECK_EQ(set.n, 1);
    free(p1);
    free(p2);
    free(a);
    free(b);
    task_set_release(&set);
}

TEST(jsonl_blank_lines_and_crlf)
{
    struct task_set set;
    struct ca_err err = {0};
    task_set_init(&set);
    char *a = row(TASK_CODE("return torch.exp(x)"), "");
    char *b = row(TASK_CODE("return torch.log(x)"), "");
    a[strlen(a) - 1] = '\0';
    char *text = xstrfmt("\n\n%s\r\n \t\n\r\n%s\n\n", a, b);
    REQUIRE(load_jsonl_text(text, &set, &err) == 0);
    REQUIRE(set.n == 2);
    CHECK_CONTAINS(set.tasks[0].origin, "d.jsonl:3");
    CHECK_CONTAINS(set.tasks[1].origin, "d.jsonl:6");
    CHECK_STR(set.tasks[0].name, "exp");
    task_set_release(&set);
    free(text);
    free(a);
    free(b);
    /* an empty file holds no tasks */
    REQUIRE(load_jsonl_text("", &set, &err) == 0);
    CHECK_EQ(set.n, 0);
}

TEST(jsonl_line_limit)
{
    char *path = tmp_path("big.jsonl");
    char *first = row(TASK_CODE("return x"), "");
    size_t big = 5 * CA_MIB;
    FILE *f = fopen(path, "wb");
    REQUIRE(f);
    fputs(first, f);
    fputs("{\"code\": \"", f);
    for (size_t i = 0; i < big; i++)
        fputc('a', f);
    fputs("\"}\n", f);
    REQUIRE(fclose(f) == 0);
    struct task_set set;
    struct ca_err err = {0};
    task_set_init(&set);
    CHECK_EQ(task_load(path, &set, &err), CA_ETOOBIG);
    CHECK_CONTAINS(err.msg, "big.jsonl:2: line longer than 4194304 bytes (CA_LIMIT_JSONL_LINE)");
    CHECK_EQ(set.n, 0);
    /* a row under the line limit whose code is over the task limit */
    f = fopen(path, "wb");
    REQUIRE(f);
    fputs("{\"code\": \"", f);
    for (size_t i = 0; i < 2 * CA_MIB; i++)
        fputc('a', f);
    fputs("\"}\n", f);
    REQUIRE(fclose(f) == 0);
    CHECK_EQ(task_load(path, &set, &err), CA_ETOOBIG);
    CHECK_CONTAINS(err.msg, "big.jsonl:1: task source is 2097152 bytes, over the limit");
    free(first);
    free(path);
    task_set_release(&set);
}

TEST(jsonl_many_rows_across_read_chunks)
{
    /* ~300 KiB of rows: lines straddle the reader's 64 KiB chunks */
    char *path = tmp_path("many.jsonl");
    FILE *f = fopen(path, "wb");
    REQUIRE(f);
    for (int i = 0; i < 600; i++) {
        char *fwd = xstrfmt("return torch.exp(x) * %d  # %0400d", i, 0);
        char *code = xstrfmt(TASK_CODE("%s"), fwd);
        char *r = row(code, i % 7 == 0 ? ", \"ops\": [\"torch.exp\"]" : "");
        fputs(r, f);
        free(r);
        free(code);
        free(fwd);
    }
    REQUIRE(fclose(f) == 0);
    struct task_set set;
    struct ca_err err = {0};
    task_set_init(&set);
    REQUIRE(task_load(path, &set, &err) == 0);
    REQUIRE(set.n == 600);
    CHECK_EQ(set.ndups, 0);
    CHECK_EQ(set.relabelled, 0);
    CHECK_CONTAINS(set.tasks[599].origin, "many.jsonl:600");
    CHECK_CONTAINS(set.tasks[599].code, "torch.exp(x) * 599");
    task_set_release(&set);
    free(path);
}

/* ---- output ---- */

TEST(to_json_fields)
{
    struct task_set set;
    load_small(&set);
    const struct task *t = &set.tasks[1];
    json_t *j = task_to_json(t, false);
    CHECK_STR(json_string_value(json_object_get(j, "id")), t->id);
    CHECK_STR(json_string_value(json_object_get(j, "name")), "sigmoid_matmul");
    CHECK_EQ(json_integer_value(json_object_get(j, "level")), 0);
    CHECK_EQ(json_array_size(json_object_get(j, "ops")), 2);
    CHECK(json_is_true(json_object_get(j, "ops_relabelled")));
    CHECK_STR(json_string_value(json_object_get(j, "data_source")), "torch#2");
    CHECK_STR(json_string_value(json_object_get(j, "origin")), t->origin);
    CHECK_EQ(strlen(json_string_value(json_object_get(j, "hash"))), 16);
    CHECK_STR(json_string_value(json_object_get(j, "init_signature")), "self");
    CHECK(json_object_get(j, "code") == NULL);
    json_decref(j);
    j = task_to_json(&set.tasks[3], true);
    CHECK(json_is_null(json_object_get(j, "data_source")));
    CHECK_STR(json_string_value(json_object_get(j, "code")), set.tasks[3].code);
    json_decref(j);
    task_set_release(&set);
}

TEST(write_jsonl_round_trip)
{
    struct task_set set, again;
    struct ca_err err = {0};
    load_small(&set);
    char *tree = fixture("tree");
    REQUIRE(task_load(tree, &set, &err) == 0);
    char *out = tmp_path("out.jsonl");
    REQUIRE(task_set_write_jsonl(&set, out, &err) == 0);
    task_set_init(&again);
    REQUIRE(task_load(out, &again, &err) == 0);
    REQUIRE(again.n == set.n);
    CHECK_EQ(again.relabelled, 0); /* labels written are the derived ones */
    CHECK_EQ(again.ndups, 0);
    for (size_t i = 0; i < set.n; i++) {
        CHECK_STR(again.tasks[i].id, set.tasks[i].id);
        CHECK_STR(again.tasks[i].name, set.tasks[i].name);
        CHECK_EQ(again.tasks[i].level, set.tasks[i].level);
        CHECK(again.tasks[i].hash == set.tasks[i].hash);
        CHECK(!again.tasks[i].ops_unlabelled);
        CHECK_EQ(again.tasks[i].nops, set.tasks[i].nops);
    }
    CHECK(again.tasks[3].data_source == NULL);
    CHECK_STR(again.tasks[0].data_source, "torch#2");
    /* the rows are normalised: keys in a fixed order, one per line */
    char *text = read_str(out);
    CHECK(strncmp(text, "{\"id\":", 6) == 0);
    CHECK_CONTAINS(text, "\"level\":2");
    free(text);
    /* a failed write leaves nothing behind */
    char *bad = tmp_path("missing/out.jsonl");
    CHECK(task_set_write_jsonl(&set, bad, &err) < 0);
    CHECK(!fs_exists(bad));
    free(bad);
    free(out);
    free(tree);
    task_set_release(&again);
    task_set_release(&set);
}

/* ---- parquet ---- */

static bool have_pyarrow(void)
{
    const char *argv[] = {"python3", "-c", "import pyarrow.parquet", NULL};
    struct proc_opts o = {.argv = argv, .timeout_ms = 60000};
    struct proc_result r;
    struct ca_err err = {0};
    proc_result_init(&r);
    bool ok = proc_run(&o, &r, &err) == 0 && proc_ok(&r);
    proc_result_release(&r);
    return ok;
}

static const char make_parquet_py[] =
    "import sys, pyarrow as pa, pyarrow.parquet as pq\n"
    "def task(fwd):\n"
    "    return ('import torch\\nimport torch.nn as nn\\n\\nclass Model(nn.Module):\\n'\n"
    "            '    def forward(self, x):\\n        return ' + fwd + '\\n\\n'\n"
    "            'def get_inputs():\\n    return [torch.randn(4)]\\n\\n'\n"
    "            'def get_init_inputs():\\n    return []\\n')\n"
    "a, b, c = task('torch.relu(x)'), task('torch.tanh(x).sum()'), task('torch.exp(x)')\n"
    "mode = sys.argv[2]\n"
    "if mode == 'list':\n"
    "    t = pa.table({'code': [a, b, a, c],\n"
    "                  'ops': [['torch.relu'], ['torch.tanh'], ['torch.relu'], None],\n"
    "                  'data_source': ['torch#1', 'torch#2', 'torch#1', 'torch#1']})\n"
    "elif mode == 'string':\n"
    "    t = pa.table({'code': [a, b], 'ops': ['[\"torch.relu\"]', \"['torch.tanh', 'sum']\"],\n"
    "                  'data_source': ['torch#1', 'torch#2']})\n"
    "elif mode == 'nocode':\n"
    "    t = pa.table({'source': [a]})\n"
    "else:\n"
    "    t = pa.table({'code': [a, 'x = 1\\n']})\n"
    "pq.write_table(t, sys.argv[1], row_group_size=2)\n";

static char *make_parquet(const char *name, const char *mode)
{
    char *path = tmp_path(name);
    const char *argv[] = {"python3", "-", path, mode, NULL};
    struct proc_opts o = {.argv = argv,
                          .stdin_data = make_parquet_py,
                          .stdin_len = sizeof(make_parquet_py) - 1,
                          .timeout_ms = 60000};
    struct proc_result r;
    struct ca_err err = {0};
    proc_result_init(&r);
    REQUIRE(proc_run(&o, &r, &err) == 0);
    if (!proc_ok(&r))
        fprintf(stderr, "%s", r.err.data);
    REQUIRE(proc_ok(&r));
    proc_result_release(&r);
    return path;
}

TEST(parquet_import)
{
    if (!have_pyarrow())
        SKIP("pyarrow", "python3 cannot import pyarrow (pip install pyarrow)");
    char *pq = make_parquet("d.parquet", "list");
    char *out = tmp_path("d.jsonl");
    struct task_set set;
    struct ca_err err = {0};
    task_set_init(&set);
    REQUIRE(task_import_parquet(pq, out, &set, &err) == 0);
    REQUIRE(set.n == 3);
    CHECK_EQ(set.ndups, 1);
    CHECK_CONTAINS(set.dups[0].origin, "d.parquet:row 3");
    CHECK_STR(set.dups[0].kept_id, set.tasks[0].id);
    CHECK_EQ(set.relabelled, 1); /* row 2: label tanh, code tanh + sum */
    CHECK(set.tasks[1].ops_relabelled);
    CHECK(set.tasks[2].ops_unlabelled);
    CHECK_STR(set.tasks[0].name, "relu");
    CHECK_STR(set.tasks[1].data_source, "torch#2");
    /* the output is the normalised JSONL and loads to the same ids */
    struct task_set again;
    task_set_init(&again);
    REQUIRE(task_load(out, &again, &err) == 0);
    REQUIRE(again.n == 3);
    for (size_t i = 0; i < 3; i++)
        CHECK_STR(again.tasks[i].id, set.tasks[i].id);
    task_set_release(&again);
    task_set_release(&set);
    /* no temporary files are left beside the output */
    DIR *d = opendir(test_tmpdir());
    REQUIRE(d);
    struct dirent *de;
    while ((de = readdir(d)))
        CHECK(!strstr(de->d_name, ".tmp-"));
    closedir(d);
    free(pq);
    free(out);

    /* labels stored as strings (JSON or Python lists) */
    pq = make_parquet("s.parquet", "string");
    out = tmp_path("s.jsonl");
    task_set_init(&set);
    REQUIRE(task_import_parquet(pq, out, &set, &err) == 0);
    REQUIRE(set.n == 2);
    CHECK_EQ(set.relabelled, 0);
    task_set_release(&set);
    free(pq);
    free(out);
}

TEST(parquet_import_failures)
{
    if (!have_pyarrow())
        SKIP("pyarrow", "python3 cannot import pyarrow (pip install pyarrow)");
    struct task_set set;
    struct ca_err err = {0};
    task_set_init(&set);
    char *pq = make_parquet("n.parquet", "nocode");
    char *out = tmp_path("n.jsonl");
    CHECK_EQ(task_import_parquet(pq, out, &set, &err), CA_EPARSE);
    CHECK_CONTAINS(err.msg, "n.parquet: no column \"code\"");
    CHECK(!fs_exists(out));
    free(pq);
    free(out);

    pq = make_parquet("b.parquet", "badtask");
    out = tmp_path("b.jsonl");
    CHECK_EQ(task_import_parquet(pq, out, &set, &err), CA_EPARSE);
    CHECK_CONTAINS(err.msg, "b.parquet:row 2: no top-level `class Model(nn.Module)`");
    CHECK(!fs_exists(out));
    CHECK_EQ(set.n, 0);
    free(pq);
    free(out);

    pq = tmp_path("junk.parquet");
    write_str(pq, "not parquet at all");
    out = tmp_path("junk.jsonl");
    CHECK_EQ(task_import_parquet(pq, out, &set, &err), CA_EPARSE);
    CHECK_CONTAINS(err.msg, "junk.parquet: not a readable parquet file");
    CHECK(!fs_exists(out));
    free(pq);
    free(out);

    DIR *d = opendir(test_tmpdir());
    REQUIRE(d);
    struct dirent *de;
    while ((de = readdir(d)))
        CHECK(!strstr(de->d_name, ".tmp-"));
    closedir(d);
    task_set_release(&set);
}

TEST(parquet_without_python)
{
    /* an empty PATH: python3 cannot be found */
    REQUIRE(setenv("PATH", test_tmpdir(), 1) == 0);
    char *pq = tmp_path("d.parquet");
    write_str(pq, "PAR1");
    char *out = tmp_path("d.jsonl");
    struct task_set set;
    struct ca_err err = {0};
    task_set_init(&set);
    CHECK_EQ(task_import_parquet(pq, out, &set, &err), CA_EUNAVAIL);
    CHECK_CONTAINS(err.msg, "python3 is not in PATH");
    CHECK(!fs_exists(out));
    free(pq);
    free(out);
}
