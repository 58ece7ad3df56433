/*
 * test_tools.c - the tool layer's front: argument validation and schemas for
 * all eleven tools, path rules (.., absolute, NUL, overlong, symlink
 * escapes), the shell tools' delegation, and the file tools Read, Write,
 * Edit and MultiEdit (read-before-write, external changes, read-only paths,
 * all-or-nothing edits), on a workspace built from an example task.
 * Glob, Grep, NotebookEdit, TodoWrite and timings: test_tools_search.c.
 */
#include "tools_fixture.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/buf.h"
#include "core/fs.h"
#include "core/limits.h"
#include "core/util.h"
#include "task/task.h"
#include "tools/tools.h"
#include "workspace/workspace.h"

/* ---- schemas and argument validation ---- */

static void check_object_schema(const json_t *o)
{
    CHECK_STR(json_string_value(json_object_get(o, "type")), "object");
    CHECK(json_is_false(json_object_get(o, "additionalProperties")));
    const json_t *props = json_object_get(o, "properties");
    REQUIRE(json_is_object(props));
    const json_t *req = json_object_get(o, "required");
    REQUIRE(json_is_array(req));
    size_t i;
    json_t *r;
    json_array_foreach(req, i, r) CHECK(json_object_get(props, json_string_value(r)));
    const char *k;
    json_t *p;
    json_object_foreach((json_t *)props, k, p)
    {
        CHECK(json_is_string(json_object_get(p, "type")));
        const char *d = json_string_value(json_object_get(p, "description"));
        CHECK(d && strlen(d) > 10);
        if (json_object_get(p, "items"))
            check_object_schema(json_object_get(p, "items"));
    }
}

TEST(schemas_all_tools_valid_json)
{
    json_t *s = tool_schemas();
    REQUIRE(json_is_array(s));
    CHECK_EQ(json_array_size(s), 11);
    char *text = json_dumps(s, 0);
    REQUIRE(text);
    json_error_t je;
    json_t *back = json_loads(text, 0, &je);
    CHECK(back && json_equal(back, s));
    json_decref(back);
    free(text);
    size_t i;
    json_t *t;
    json_array_foreach(s, i, t)
    {
        CHECK_STR(json_string_value(json_object_get(t, "type")), "function");
        const json_t *f = json_object_get(t, "function");
        CHECK_STR(json_string_value(json_object_get(f, "name")), tool_names[i]);
        const char *d = json_string_value(json_object_get(f, "description"));
        CHECK(d && strlen(d) > 60);
        check_object_schema(json_object_get(f, "parameters"));
    }
    CHECK(tool_names[11] == NULL);
    /* Spot checks of argument names agents know. */
    const json_t *grep =
        json_object_get(json_object_get(json_array_get(s, 8), "function"), "parameters");
    CHECK(json_object_get(json_object_get(grep, "properties"), "-i"));
    CHECK(json_object_get(json_object_get(grep, "properties"), "output_mode"));
    json_decref(s);
}

TEST(unknown_tool_lists_names)
{
    struct tool_ctx *ctx = ws_ctx();
    REFUSED(call(ctx, "Frobnicate", "{}"), "unknown tool 'Frobnicate'");
    CHECK_CONTAINS(R.text.data, "Bash");
    CHECK_CONTAINS(R.text.data, "TodoWrite");
    tool_result_release(&R);
    tool_result_init(&R);
    CHECK(tool_call(ctx, NULL, NULL, &R) == 0 && R.is_error);
    tool_ctx_free(ctx);
    tool_result_release(&R);
}

TEST(args_must_be_object)
{
    struct tool_ctx *ctx = ws_ctx();
    REFUSED(call(ctx, "Read", "[\"model.py\"]"), "must be a JSON object");
    REFUSED(call(ctx, "Read", "\"model.py\""), "must be a JSON object");
    tool_result_release(&R);
    tool_result_init(&R);
    CHECK(tool_call(ctx, "Read", NULL, &R) == 0 && R.is_error);
    tool_ctx_free(ctx);
    tool_result_release(&R);
}

TEST(args_missing_extra_and_typed)
{
    struct tool_ctx *ctx = ws_ctx();
    REFUSED(call(ctx, "Read", "{}"), "missing required argument 'file_path'");
    CHECK_CONTAINS(R.text.data, "Read");
    REFUSED(call(ctx, "Read", "{\"file_path\":\"model.py\",\"path\":\"x\"}"),
            "unknown argument 'path'");
    CHECK_CONTAINS(R.text.data, "did you mean 'file_path'");
    REFUSED(call(ctx, "Read", "{\"file_path\":\"model.py\",\"offset\":true}"),
            "'offset' must be an integer, not a boolean");
    REFUSED(call(ctx, "Read", "{\"file_path\":\"model.py\",\"offset\":\"5\"}"), "without quotes");
    REFUSED(call(ctx, "Read", "{\"file_path\":\"model.py\",\"limit\":2.5}"),
            "'limit' must be an integer");
    REFUSED(call(ctx, "Read", "{\"file_path\":7}"), "'file_path' must be a string, not an integer");
    REFUSED(call(ctx, "Grep", "{\"pattern\":\"x\",\"-i\":\"yes\"}"), "'-i' must be true or false");
    REFUSED(call(ctx, "Edit",
                 "{\"file_path\":\"a\",\"old_string\":\"a\",\"new_string\":\"b\","
                 "\"replace_all\":1}"),
            "'replace_all' must be true or false");
    REFUSED(call(ctx, "MultiEdit", "{\"file_path\":\"a\",\"edits\":{}}"),
            "'edits' must be an array");
    REFUSED(call(ctx, "MultiEdit", "{\"file_path\":\"a\",\"edits\":[]}"),
            "'edits' must have 1 to 100 items, not 0");
    REFUSED(call(ctx, "MultiEdit", "{\"file_path\":\"a\",\"edits\":[\"x\"]}"),
            "edits[0] must be an object");
    REFUSED(call(ctx, "MultiEdit", "{\"file_path\":\"a\",\"edits\":[{\"old_string\":\"a\"}]}"),
            "missing required argument 'edits[0].new_string'");
    REFUSED(call(ctx, "MultiEdit",
                 "{\"file_path\":\"a\",\"edits\":[{\"old_string\":\"a\","
                 "\"new_string\":\"b\",\"bogus\":1}]}"),
            "unknown argument 'edits[0].bogus'");
    REFUSED(call(ctx, "TodoWrite", "{\"todos\":[{\"content\":\"a\",\"status\":\"done\"}]}"),
            "'todos[0].status' must be one of \"pending\", \"in_progress\", \"completed\"");
    /* null means "not given" for optional arguments, "missing" for required ones. */
    OK(call(ctx, "Read", "{\"file_path\":\"model.py\",\"offset\":null,\"limit\":null}"));
    REFUSED(call(ctx, "Read", "{\"file_path\":null}"), "missing required argument 'file_path'");
    tool_ctx_free(ctx);
    tool_result_release(&R);
}

TEST(args_ranges_enums_and_sizes)
{
    struct tool_ctx *ctx = ws_ctx();
    REFUSED(call(ctx, "Read", "{\"file_path\":\"model.py\",\"limit\":0}"),
            "'limit' must be between 1 and");
    REFUSED(call(ctx, "Bash", "{\"command\":\"true\",\"timeout\":700000}"),
            "'timeout' must be between 1 and 600000, not 700000");
    REFUSED(call(ctx, "Grep", "{\"pattern\":\"x\",\"output_mode\":\"lines\"}"),
            "'output_mode' must be one of \"content\", \"files_with_matches\", \"count\", not "
            "\"lines\"");
    REFUSED(call(ctx, "Grep", "{\"pattern\":\"x\",\"type\":\"rust\"}"), "'type' must be one of");
    REFUSED(call(ctx, "Grep", "{\"pattern\":\"x\",\"-C\":-1}"), "'-C' must be between 0 and");

    /* Enormous strings: Write's content has 4 MiB, other strings 64 KiB. */
    size_t big = CA_LIMIT_WRITE_BYTES + 1;
    char *s = xmalloc(big + 1);
    memset(s, 'a', big);
    s[big] = '\0';
    callj(ctx, "Write", json_pack("{s:s, s:s}", "file_path", "kernels/big.cu", "content", s));
    REFUSED(&R, "'content' is 4194305 bytes, over its limit of 4194304 bytes");
    CHECK(!fs_exists(wpath("kernels/big.cu")));
    s[70000] = '\0';
    callj(ctx, "Read", json_pack("{s:s}", "file_path", s));
    REFUSED(&R, "'file_path' is 70000 bytes, over its limit");
    s[5000] = '\0';
    callj(ctx, "Read", json_pack("{s:s}", "file_path", s));
    REFUSED(&R, "over the limit of 4096");
    CHECK_CONTAINS(R.text.data, "paths live under /workspace");
    free(s);
    tool_ctx_free(ctx);
    tool_result_release(&R);
}

/* ---- shell delegation ---- */

static int fake_calls;

static int fake_bash(void *data, const json_t *args, struct tool_result *res)
{
    fake_calls++;
    CHECK(data == &fake_calls);
    CHECK_STR(json_string_value(json_object_get(args, "command")), "echo hi");
    json_object_set_new(res->fields, "exit_code", json_integer(0));
    return buf_addstr(&res->text, "hi\n");
}

static int fake_output(void *data, const json_t *args, struct tool_result *res)
{
    fake_calls += 10;
    CHECK_STR(json_string_value(json_object_get(args, "bash_id")), "bg1");
    return 0;
}

static int fake_kill(void *data, const json_t *args, struct tool_result *res)
{
    fake_calls += 100;
    CHECK_STR(json_string_value(json_object_get(args, "shell_id")), "bg1");
    return 0;
}

TEST(shell_tools_delegate_or_refuse)
{
    struct tool_ctx *ctx = ws_ctx();
    REFUSED(call(ctx, "Bash", "{\"command\":\"true\"}"), "no shell is attached to this episode");
    REFUSED(call(ctx, "BashOutput", "{\"bash_id\":\"x\"}"), "no shell is attached");
    REFUSED(call(ctx, "KillBash", "{\"shell_id\":\"x\"}"), "no shell is attached");
    REFUSED(call(ctx, "Bash", "{}"), "missing required argument 'command'");
    struct tool_shell_ops ops = {&fake_calls, fake_bash, fake_output, fake_kill};
    tool_ctx_set_shell(ctx, &ops);
    OK(call(ctx, "Bash",
            "{\"command\":\"echo hi\",\"timeout\":1000,\"description\":\"say hi\","
            "\"run_in_background\":false}"));
    CHECK_STR(R.text.data, "hi\n");
    json_t *j = tool_result_to_json(&R);
    CHECK_EQ(json_integer_value(json_object_get(j, "exit_code")), 0);
    CHECK(json_is_false(json_object_get(j, "is_error")));
    json_decref(j);
    OK(call(ctx, "BashOutput", "{\"bash_id\":\"bg1\",\"filter\":\"err\"}"));
    OK(call(ctx, "KillBash", "{\"shell_id\":\"bg1\"}"));
    CHECK_EQ(fake_calls, 111);
    REFUSED(call(ctx, "KillBash", "{\"bash_id\":\"bg1\"}"), "unknown argument 'bash_id'");
    tool_ctx_set_shell(ctx, NULL);
    REFUSED(call(ctx, "Bash", "{\"command\":\"echo hi\"}"), "no shell is attached");
    tool_ctx_free(ctx);
    tool_result_release(&R);
}

/* ---- paths ---- */

TEST(paths_outside_workspace_refused)
{
    struct tool_ctx *ctx = ws_ctx();
    /* JSON-escaped path strings. */
    static const char *const bad[] = {
        "../etc/passwd",   "/etc/passwd",     "/workspace/../etc/passwd",
        "kernels/../../x", "/workspacefoo/x", "a\\u0000b",
    };
    for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
        char *args = xstrfmt("{\"file_path\":\"%s\"}", bad[i]);
        REFUSED(call(ctx, "Read", args), "paths live under /workspace");
        free(args);
        args = xstrfmt("{\"file_path\":\"%s\",\"content\":\"x\"}", bad[i]);
        REFUSED(call(ctx, "Write", args), "paths live under /workspace");
        free(args);
        args = xstrfmt("{\"path\":\"%s\",\"pattern\":\"x\"}", bad[i]);
        REFUSED(call(ctx, "Grep", args), "paths live under /workspace");
        REFUSED(call(ctx, "Glob", args), "paths live under /workspace");
        free(args);
    }
    REFUSED(call(ctx, "Read", "{\"file_path\":\"\"}"), "is empty");
    REFUSED(call(ctx, "Read", "{\"file_path\":\"/workspace\"}"), "names the workspace directory");
    REFUSED(call(ctx, "Read", "{\"file_path\":\"/workspace/\"}"), "names the workspace directory");
    /* Every spelling of a path inside works. */
    OK(call(ctx, "Read", "{\"file_path\":\"/workspace/model.py\"}"));
    CHECK_STR(field_str("path"), "/workspace/model.py");
    OK(call(ctx, "Read", "{\"file_path\":\"./model.py\"}"));
    CHECK_STR(field_str("path"), "/workspace/model.py");
    OK(call(ctx, "Read", "{\"file_path\":\"/workspace//./model.py\"}"));
    CHECK_STR(field_str("path"), "/workspace/model.py");
    tool_ctx_free(ctx);
    tool_result_release(&R);
}

TEST(symlinks_out_of_workspace_refused)
{
    struct tool_ctx *ctx = ws_ctx();
    REQUIRE(symlink("/etc/passwd", wpath("kernels/evil.cu")) == 0);
    REQUIRE(symlink("/etc", wpath("etcdir")) == 0);
    REQUIRE(symlink("../../../../../../../../etc/hostname", wpath("rel_evil")) == 0);
    REFUSED(call(ctx, "Read", "{\"file_path\":\"kernels/evil.cu\"}"),
            "leads outside /workspace through a symlink");
    REFUSED(call(ctx, "Read", "{\"file_path\":\"etcdir/passwd\"}"), "leads outside /workspace");
    REFUSED(call(ctx, "Read", "{\"file_path\":\"rel_evil\"}"), "leads outside /workspace");
    REFUSED(call(ctx, "Write", "{\"file_path\":\"kernels/evil.cu\",\"content\":\"x\"}"),
            "leads outside /workspace");
    REFUSED(call(ctx, "Write", "{\"file_path\":\"etcdir/cuda-agent-test\",\"content\":\"x\"}"),
            "leads outside /workspace");
    CHECK(!fs_exists("/etc/cuda-agent-test"));
    REFUSED(call(ctx, "Edit",
                 "{\"file_path\":\"etcdir/hostname\",\"old_string\":\"a\","
                 "\"new_string\":\"b\"}"),
            "leads outside /workspace");
    /* The messages never show host paths. */
    CHECK(!strstr(R.text.data, test_tmpdir()));
    /* Glob and Grep do not follow them. */
    OK(call(ctx, "Glob", "{\"pattern\":\"**/passwd\"}"));
    CHECK_CONTAINS(R.text.data, "No files match");
    OK(call(ctx, "Grep", "{\"pattern\":\"root:\"}"));
    CHECK_CONTAINS(R.text.data, "No matches");
    tool_ctx_free(ctx);
    tool_result_release(&R);
}

/* ---- Read ---- */

TEST(read_numbers_lines_and_records_fields)
{
    struct tool_ctx *ctx = ws_ctx();
    put("kernels/a.cu", "first\nsecond\r\nthird");
    OK(call(ctx, "Read", "{\"file_path\":\"/workspace/kernels/a.cu\"}"));
    CHECK_STR(R.text.data, "     1\tfirst\n     2\tsecond\n     3\tthird\n");
    CHECK_STR(field_str("path"), "/workspace/kernels/a.cu");
    CHECK_EQ(field_int("lines"), 3);
    CHECK_EQ(field_int("offset"), 1);
    CHECK_EQ(field_int("returned"), 3);
    CHECK(!field_bool("truncated"));

    OK(call(ctx, "Read", "{\"file_path\":\"kernels/a.cu\",\"offset\":2,\"limit\":1}"));
    CHECK_CONTAINS(R.text.data, "     2\tsecond\n");
    CHECK(!strstr(R.text.data, "first"));
    CHECK_CONTAINS(R.text.data, "call Read with offset=3");
    CHECK(field_bool("truncated"));
    CHECK_EQ(field_int("returned"), 1);

    OK(call(ctx, "Read", "{\"file_path\":\"kernels/a.cu\",\"offset\":9}"));
    CHECK_CONTAINS(R.text.data, "has 3 lines; offset 9 is past its end");

    put("kernels/empty.cu", "");
    OK(call(ctx, "Read", "{\"file_path\":\"kernels/empty.cu\"}"));
    CHECK_CONTAINS(R.text.data, "is empty");
    CHECK_EQ(field_int("lines"), 0);
    tool_ctx_free(ctx);
    tool_result_release(&R);
}

TEST(read_cuts_long_lines_and_caps_output)
{
    struct tool_ctx *ctx = ws_ctx();
    /* One line of 2500 characters (some multi-byte). */
    struct buf b;
    buf_init(&b, 1 << 24);
    for (int i = 0; i < 2500; i++)
        REQUIRE(buf_addstr(&b, i % 2 ? "\xc3\xa9" : "x") == 0);
    REQUIRE(buf_addstr(&b, "\nshort\n") == 0);
    put("long.txt", b.data);
    OK(call(ctx, "Read", "{\"file_path\":\"long.txt\"}"));
    CHECK_CONTAINS(R.text.data,
                   "\xe2\x80\xa6 [line truncated: 500 more characters]\n     2\tshort");

    /* 5000 lines of 100 characters: past 64 KiB. */
    buf_reset(&b);
    for (int i = 0; i < 5000; i++)
        REQUIRE(buf_addf(&b, "%099d\n", i) == 0);
    put("many.txt", b.data);
    OK(call(ctx, "Read", "{\"file_path\":\"many.txt\",\"limit\":5000}"));
    CHECK(R.text.len <= CA_LIMIT_TOOL_OUTPUT);
    CHECK_CONTAINS(R.text.data, "output truncated");
    long long ret = field_int("returned");
    CHECK(ret > 500 && ret < 700);
    char want[64];
    snprintf(want, sizeof(want), "offset=%lld to continue", ret + 1);
    CHECK_CONTAINS(R.text.data, want);
    CHECK(field_bool("truncated"));
    CHECK_EQ(field_int("lines"), 5000);

    /* The default limit is 2000 lines. */
    buf_reset(&b);
    for (int i = 0; i < 2500; i++)
        REQUIRE(buf_addf(&b, "%d\n", i) == 0);
    put("lines.txt", b.data);
    OK(call(ctx, "Read", "{\"file_path\":\"lines.txt\"}"));
    CHECK_EQ(field_int("returned"), 2000);
    CHECK_CONTAINS(R.text.data, "showed lines 1-2000 of 2500; call Read with offset=2001");
    buf_release(&b);
    tool_ctx_free(ctx);
    tool_result_release(&R);
}

TEST(read_refuses_binary_dirs_and_missing)
{
    struct tool_ctx *ctx = ws_ctx();
    FILE *f = fopen(wpath("blob.bin"), "wb");
    REQUIRE(f);
    fwrite("ab\0cd", 1, 5, f);
    fclose(f);
    REFUSED(call(ctx, "Read", "{\"file_path\":\"blob.bin\"}"),
            "/workspace/blob.bin is a binary file (5 bytes); Read shows text only");
    put("latin1.txt", "caf\xe9\n");
    REFUSED(call(ctx, "Read", "{\"file_path\":\"latin1.txt\"}"), "is a binary file (5 bytes)");
    REFUSED(call(ctx, "Read", "{\"file_path\":\"kernels\"}"), "is a directory");
    CHECK_CONTAINS(R.text.data, "Glob");
    REFUSED(call(ctx, "Read", "{\"file_path\":\"nope.py\"}"), "/workspace/nope.py does not exist");
    REQUIRE(mkfifo(wpath("fifo"), 0644) == 0);
    REFUSED(call(ctx, "Read", "{\"file_path\":\"fifo\"}"), "not a regular file");
    tool_ctx_free(ctx);
    tool_result_release(&R);
}

TEST(read_renders_notebooks)
{
    struct tool_ctx *ctx = ws_ctx();
    put("nb.ipynb",
        "{\"cells\":[{\"cell_type\":\"markdown\",\"id\":\"m1\",\"metadata\":{},\"source\":[\"# "
        "Title\\n\",\"text\"]},{\"cell_type\":\"code\",\"id\":\"c1\",\"metadata\":{},"
        "\"execution_count\":1,\"source\":\"print(1)\",\"outputs\":[{\"output_type\":\"stream\","
        "\"name\":\"stdout\",\"text\":[\"1\\n\"]}]}],\"metadata\":{},\"nbformat\":4,"
        "\"nbformat_minor\":5}");
    OK(call(ctx, "Read", "{\"file_path\":\"nb.ipynb\"}"));
    CHECK_CONTAINS(R.text.data, "Jupyter notebook with 2 cells");
    CHECK_CONTAINS(R.text.data, "[cell 0] markdown (id: m1)\n# Title\ntext\n");
    CHECK_CONTAINS(R.text.data, "[cell 1] code (id: c1)\nprint(1)\n[cell 1 output]\n1\n");
    CHECK_EQ(field_int("cells"), 2);
    /* Not a notebook inside: shown as text. */
    put("bad.ipynb", "not json\n");
    OK(call(ctx, "Read", "{\"file_path\":\"bad.ipynb\"}"));
    CHECK_STR(R.text.data, "     1\tnot json\n");
    tool_ctx_free(ctx);
    tool_result_release(&R);
}

/* ---- Write ---- */

TEST(write_creates_with_parents)
{
    struct tool_ctx *ctx = ws_ctx();
    OK(call(ctx, "Write",
            "{\"file_path\":\"/workspace/kernels/sub/deep/k.cu\",\"content\":\"__global__\\n\"}"));
    CHECK_CONTAINS(R.text.data, "Created /workspace/kernels/sub/deep/k.cu (11 bytes, 1 lines)");
    CHECK_STR(slurp("kernels/sub/deep/k.cu"), "__global__\n");
    CHECK(field_bool("created"));
    CHECK_EQ(field_int("bytes"), 11);
    CHECK_STR(field_str("path"), "/workspace/kernels/sub/deep/k.cu");
    /* The file just written counts as read: writing again needs no Read. */
    OK(call(ctx, "Write", "{\"file_path\":\"kernels/sub/deep/k.cu\",\"content\":\"v2\"}"));
    CHECK(!field_bool("created"));
    CHECK_STR(slurp("kernels/sub/deep/k.cu"), "v2");
    /* A file the evaluator ignores gets a note. */
    OK(call(ctx, "Write", "{\"file_path\":\"notes.txt\",\"content\":\"plan\"}"));
    CHECK_CONTAINS(R.text.data, "will not be evaluated");
    OK(call(ctx, "Write", "{\"file_path\":\"kernels/x.cu\",\"content\":\"\"}"));
    CHECK(!strstr(R.text.data, "will not be evaluated"));
    /* A component that is a file. */
    REFUSED(call(ctx, "Write", "{\"file_path\":\"notes.txt/x\",\"content\":\"a\"}"),
            "/workspace/notes.txt/x");
    tool_ctx_free(ctx);
    tool_result_release(&R);
}

TEST(write_needs_read_and_detects_changes)
{
    struct tool_ctx *ctx = ws_ctx();
    REFUSED(call(ctx, "Write", "{\"file_path\":\"model_new.py\",\"content\":\"x\"}"),
            "has not been Read in this episode; Read it first");
    CHECK(strstr(slurp("model_new.py"), "class ModelNew"));
    OK(call(ctx, "Read", "{\"file_path\":\"model_new.py\",\"limit\":1}"));
    OK(call(ctx, "Write", "{\"file_path\":\"/workspace/model_new.py\",\"content\":\"x = 1\\n\"}"));
    CHECK_STR(slurp("model_new.py"), "x = 1\n");

    /* Changed on disk (by Bash, say) after the last Read or Write. */
    put("model_new.py", "x = 2\n");
    REFUSED(call(ctx, "Write", "{\"file_path\":\"model_new.py\",\"content\":\"x = 3\\n\"}"),
            "/workspace/model_new.py was modified since you read it; Read it again");
    CHECK_STR(slurp("model_new.py"), "x = 2\n");
    OK(call(ctx, "Read", "{\"file_path\":\"model_new.py\"}"));
    OK(call(ctx, "Write", "{\"file_path\":\"model_new.py\",\"content\":\"x = 3\\n\"}"));
    CHECK_STR(slurp("model_new.py"), "x = 3\n");

    /* The mode of an existing file is kept. */
    REQUIRE(chmod(wpath("model_new.py"), 0600) == 0);
    OK(call(ctx, "Write", "{\"file_path\":\"model_new.py\",\"content\":\"x = 4\\n\"}"));
    struct stat st;
    REQUIRE(stat(wpath("model_new.py"), &st) == 0);
    CHECK_EQ(st.st_mode & 0777, 0600);
    tool_ctx_free(ctx);
    tool_result_release(&R);
}

TEST(write_refuses_read_only)
{
    struct tool_ctx *ctx = ws_ctx();
    char *before = xstrdup(slurp("model.py"));
    static const char *const ro[] = {"model.py",    "./SKILL.md", "/workspace/MANIFEST.json",
                                     "binding.cpp", "compile",    "/workspace//verify"};
    for (size_t i = 0; i < ARRAY_SIZE(ro); i++) {
        char *args = xstrfmt("{\"file_path\":\"%s\"}", ro[i]);
        OK(call(ctx, "Read", args));
        free(args);
        args = xstrfmt("{\"file_path\":\"%s\",\"content\":\"hacked\"}", ro[i]);
        REFUSED(call(ctx, "Write", args), "is read-only in this workspace (it is part of the task "
                                          "infrastructure); write your code in model_new.py or "
                                          "kernels/");
        free(args);
    }
    REFUSED(call(ctx, "Edit",
                 "{\"file_path\":\"model.py\",\"old_string\":\"import\","
                 "\"new_string\":\"export\"}"),
            "/workspace/model.py is read-only");
    REFUSED(call(ctx, "MultiEdit",
                 "{\"file_path\":\"model.py\",\"edits\":[{\"old_string\":"
                 "\"import\",\"new_string\":\"export\"}]}"),
            "is read-only");
    /* Through symlinks inside the workspace too. */
    REQUIRE(symlink("../model.py", wpath("kernels/alias.cu")) == 0);
    REQUIRE(symlink(".", wpath("here")) == 0);
    REFUSED(call(ctx, "Write", "{\"file_path\":\"kernels/alias.cu\",\"content\":\"x\"}"),
            "resolves to /workspace/model.py, which is read-only");
    REFUSED(call(ctx, "Write", "{\"file_path\":\"here/model.py\",\"content\":\"x\"}"),
            "is read-only");
    CHECK_STR(slurp("model.py"), before);
    const char *const *paths = tool_ctx_ro_paths(ctx);
    size_t n = 0;
    bool saw_model = false;
    for (; paths[n]; n++)
        saw_model |= strcmp(paths[n], "model.py") == 0;
    CHECK(saw_model && n >= 8);
    free(before);
    tool_ctx_free(ctx);
    tool_result_release(&R);
}

/* ---- Edit and MultiEdit ---- */

static const char kernel_src[] = "#include <cuda_runtime.h>\n"
                                 "\n"
                                 "__global__ void add(float *x, int n)\n"
                                 "{\n"
                                 "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                                 "    if (i < n)\n"
                                 "        x[i] += 1.0f;\n"
                                 "}\n"
                                 "// n n n\n";

TEST(edit_unique_replacement_with_snippet)
{
    struct tool_ctx *ctx = ws_ctx();
    put("kernels/k.cu", kernel_src);
    REFUSED(call(ctx, "Edit",
                 "{\"file_path\":\"kernels/k.cu\",\"old_string\":\"1.0f\","
                 "\"new_string\":\"2.0f\"}"),
            "has not been Read");
    OK(call(ctx, "Read", "{\"file_path\":\"kernels/k.cu\"}"));
    OK(call(ctx, "Edit",
            "{\"file_path\":\"kernels/k.cu\",\"old_string\":\"x[i] += 1.0f;\","
            "\"new_string\":\"x[i] *= 2.0f;\"}"));
    CHECK_CONTAINS(R.text.data, "replaced 1 occurrence at line 7");
    CHECK_CONTAINS(R.text.data, "     4\t{\n");
    CHECK_CONTAINS(R.text.data, "     7\t        x[i] *= 2.0f;\n");
    CHECK_EQ(field_int("replacements"), 1);
    CHECK(strstr(slurp("kernels/k.cu"), "x[i] *= 2.0f;"));
    /* No Read needed after our own edit. */
    OK(call(ctx, "Edit",
            "{\"file_path\":\"kernels/k.cu\",\"old_string\":\"if (i < n)\","
            "\"new_string\":\"if (i < n && x)\"}"));

    /* Ambiguous, missing, identical, replace_all. */
    REFUSED(call(ctx, "Edit",
                 "{\"file_path\":\"kernels/k.cu\",\"old_string\":\"n\","
                 "\"new_string\":\"m\"}"),
            "old_string occurs");
    CHECK_CONTAINS(R.text.data, "(at lines 1, 3, 5, 6, 9)");
    CHECK_CONTAINS(R.text.data, "replace_all");
    REFUSED(call(ctx, "Edit",
                 "{\"file_path\":\"kernels/k.cu\",\"old_string\":\"a\","
                 "\"new_string\":\"a\"}"),
            "old_string and new_string are identical");
    REFUSED(call(ctx, "Edit",
                 "{\"file_path\":\"kernels/k.cu\",\"old_string\":\"int  i = "
                 "blockIdx.x\",\"new_string\":\"x\"}"),
            "old_string was not found in the file");
    CHECK_CONTAINS(R.text.data, "closest match is line 5");
    CHECK_CONTAINS(R.text.data, "     5\t    int i = blockIdx.x");
    REFUSED(call(ctx, "Edit",
                 "{\"file_path\":\"kernels/k.cu\",\"old_string\":\"     3\\t__global__"
                 " void add\",\"new_string\":\"x\"}"),
            "line-number prefixes");
    REFUSED(call(ctx, "Edit",
                 "{\"file_path\":\"kernels/k.cu\",\"old_string\":\"nothing like "
                 "it\",\"new_string\":\"x\"}"),
            "not even its first line appears");
    OK(call(ctx, "Edit",
            "{\"file_path\":\"kernels/k.cu\",\"old_string\":\"// n n n\","
            "\"new_string\":\"// done\",\"replace_all\":true}"));
    OK(call(ctx, "Edit",
            "{\"file_path\":\"kernels/k.cu\",\"old_string\":\"float\","
            "\"new_string\":\"double\",\"replace_all\":true}"));
    CHECK_EQ(field_int("replacements"), 1);
    OK(call(ctx, "Edit",
            "{\"file_path\":\"kernels/k.cu\",\"old_string\":\"i\","
            "\"new_string\":\"j\",\"replace_all\":true}"));
    CHECK(field_int("replacements") > 5);
    CHECK_CONTAINS(R.text.data, "replaced all");
    CHECK(strstr(slurp("kernels/k.cu"), "jnt j = blockIdx.x") &&
          !strstr(slurp("kernels/k.cu"), "i"));

    /* External change after our edit. */
    put("kernels/k.cu", "changed\n");
    REFUSED(call(ctx, "Edit",
                 "{\"file_path\":\"kernels/k.cu\",\"old_string\":\"changed\","
                 "\"new_string\":\"x\"}"),
            "was modified since you read it");
    CHECK_STR(slurp("kernels/k.cu"), "changed\n");
    tool_ctx_free(ctx);
    tool_result_release(&R);
}

TEST(edit_creates_new_files_only_with_empty_old_string)
{
    struct tool_ctx *ctx = ws_ctx();
    REFUSED(call(ctx, "Edit",
                 "{\"file_path\":\"kernels/new.cu\",\"old_string\":\"x\","
                 "\"new_string\":\"y\"}"),
            "does not exist; create it with Write");
    OK(call(ctx, "Edit",
            "{\"file_path\":\"kernels/new.cu\",\"old_string\":\"\","
            "\"new_string\":\"// new\\n\"}"));
    CHECK_CONTAINS(R.text.data, "Created /workspace/kernels/new.cu");
    CHECK(field_bool("created"));
    CHECK_STR(slurp("kernels/new.cu"), "// new\n");
    REFUSED(call(ctx, "Edit",
                 "{\"file_path\":\"kernels/new.cu\",\"old_string\":\"\","
                 "\"new_string\":\"again\"}"),
            "old_string is empty but /workspace/kernels/new.cu already has content");
    put("kernels/crlf.cu", "a\r\nb\r\n");
    OK(call(ctx, "Read", "{\"file_path\":\"kernels/crlf.cu\"}"));
    REFUSED(call(ctx, "Edit",
                 "{\"file_path\":\"kernels/crlf.cu\",\"old_string\":\"a\\nb\","
                 "\"new_string\":\"c\"}"),
            "Windows line endings");
    put("blob.bin", "a");
    FILE *f = fopen(wpath("blob.bin"), "wb");
    fwrite("\0\1", 1, 2, f);
    fclose(f);
    REFUSED(call(ctx, "Edit",
                 "{\"file_path\":\"blob.bin\",\"old_string\":\"a\","
                 "\"new_string\":\"b\"}"),
            "binary file");
    tool_ctx_free(ctx);
    tool_result_release(&R);
}

TEST(multi_edit_is_all_or_nothing)
{
    struct tool_ctx *ctx = ws_ctx();
    put("kernels/k.cu", kernel_src);
    OK(call(ctx, "Read", "{\"file_path\":\"kernels/k.cu\"}"));
    /* The second edit fails: nothing is written. */
    REFUSED(call(ctx, "MultiEdit",
                 "{\"file_path\":\"kernels/k.cu\",\"edits\":["
                 "{\"old_string\":\"1.0f\",\"new_string\":\"2.0f\"},"
                 "{\"old_string\":\"1.0f\",\"new_string\":\"3.0f\"}]}"),
            "edit 2 of 2 failed on /workspace/kernels/k.cu: old_string was not found");
    CHECK_CONTAINS(R.text.data, "No changes were written");
    CHECK_STR(slurp("kernels/k.cu"), kernel_src);
    REFUSED(call(ctx, "MultiEdit",
                 "{\"file_path\":\"kernels/k.cu\",\"edits\":["
                 "{\"old_string\":\"1.0f\",\"new_string\":\"2.0f\"},"
                 "{\"old_string\":\"n\",\"new_string\":\"m\"}]}"),
            "edit 2 of 2 failed");
    CHECK_CONTAINS(R.text.data, "occurs");
    REFUSED(call(ctx, "MultiEdit",
                 "{\"file_path\":\"kernels/k.cu\",\"edits\":["
                 "{\"old_string\":\"1.0f\",\"new_string\":\"2.0f\"},"
                 "{\"old_string\":\"\",\"new_string\":\"m\"}]}"),
            "edit 2 of 2 has an empty old_string");
    CHECK_STR(slurp("kernels/k.cu"), kernel_src);

    /* Each edit sees the previous ones' result. */
    OK(call(ctx, "MultiEdit",
            "{\"file_path\":\"kernels/k.cu\",\"edits\":["
            "{\"old_string\":\"1.0f\",\"new_string\":\"ONE\"},"
            "{\"old_string\":\"ONE\",\"new_string\":\"2.0f\"},"
            "{\"old_string\":\"n n n\",\"new_string\":\"end\",\"replace_all\":true}]}"));
    CHECK_CONTAINS(R.text.data, "applied 3 edits (3 replacements)");
    CHECK_CONTAINS(R.text.data, "edit 1: 1 occurrence, first at line 7");
    CHECK_EQ(field_int("replacements"), 3);
    const char *now = slurp("kernels/k.cu");
    CHECK(strstr(now, "x[i] += 2.0f;") && strstr(now, "// end") && !strstr(now, "ONE"));

    /* Creating a file: the first edit's old_string is empty. */
    REFUSED(call(ctx, "MultiEdit",
                 "{\"file_path\":\"kernels/m.cu\",\"edits\":["
                 "{\"old_string\":\"a\",\"new_string\":\"b\"}]}"),
            "does not exist");
    OK(call(ctx, "MultiEdit",
            "{\"file_path\":\"kernels/m.cu\",\"edits\":["
            "{\"old_string\":\"\",\"new_string\":\"int a;\\n\"},"
            "{\"old_string\":\"a;\",\"new_string\":\"b;\"}]}"));
    CHECK(field_bool("created"));
    CHECK_STR(slurp("kernels/m.cu"), "int b;\n");
    tool_ctx_free(ctx);
    tool_result_release(&R);
}

TEST(state_save_and_restore)
{
    struct tool_ctx *ctx = ws_ctx();
    OK(call(ctx, "Read", "{\"file_path\":\"model_new.py\"}"));
    OK(call(ctx, "TodoWrite",
            "{\"todos\":[{\"content\":\"write kernel\",\"status\":"
            "\"in_progress\"}]}"));
    json_t *state = tool_ctx_save(ctx);
    REQUIRE(state);
    CHECK(json_object_get(json_object_get(state, "read"), "model_new.py"));
    tool_ctx_free(ctx);

    struct ca_err err;
    struct tool_ctx *again = NULL;
    REQUIRE(tool_ctx_new(ws, &again, &err) == 0);
    REFUSED(call(again, "Write", "{\"file_path\":\"model_new.py\",\"content\":\"x\"}"),
            "has not been Read");
    REQUIRE(tool_ctx_restore(again, state, &err) == 0);
    OK(call(again, "Write", "{\"file_path\":\"model_new.py\",\"content\":\"x\"}"));
    CHECK_EQ(json_array_size(tool_ctx_todos(again)), 1);
    json_decref(state);

    json_t *bad = json_pack("{s:{s:s}}", "read", "../x", "00");
    CHECK(tool_ctx_restore(again, bad, &err) == CA_EPARSE);
    json_decref(bad);
    bad = json_pack("{s:[{s:s}]}", "todos", "content", "x");
    CHECK(tool_ctx_restore(again, bad, &err) == CA_EPARSE);
    CHECK_CONTAINS(err.msg, "status");
    json_decref(bad);
    tool_ctx_free(again);

    /* Not a workspace. */
    CHECK(tool_ctx_new(test_tmpdir(), &again, &err) == CA_ENOTFOUND);
    CHECK_CONTAINS(err.msg, "MANIFEST.json");
    CHECK(again == NULL);
    tool_ctx_free(NULL);
    tool_result_release(&R);
}
