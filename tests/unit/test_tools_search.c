/*
 * test_tools_search.c - Glob (the matcher itself, **, braces, classes,
 * hidden names, newest first, caps), Grep (modes, context, filters, limits,
 * invalid and catastrophic regexes, binary and symlinked files),
 * NotebookEdit, TodoWrite, and per-call timings of Read, Edit and Grep on an
 * example workspace (printed).
 */
#include "tools_fixture.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/buf.h"
#include "core/fs.h"
#include "core/util.h"
#include "task/task.h"
#include "tools/tools.h"
#include "tools/tools_internal.h"
#include "workspace/workspace.h"

/* ---- the glob matcher ---- */

static bool gm(const char *pattern, const char *path)
{
    struct tools__glob g;
    char msg[256];
    REQUIRE(tools__glob_compile(pattern, &g, msg, sizeof(msg)) == 0);
    bool m = tools__glob_match(&g, path, false);
    tools__glob_release(&g);
    return m;
}

static bool gm_partial(const char *pattern, const char *dir)
{
    struct tools__glob g;
    char msg[256];
    REQUIRE(tools__glob_compile(pattern, &g, msg, sizeof(msg)) == 0);
    bool m = tools__glob_match(&g, dir, true);
    tools__glob_release(&g);
    return m;
}

TEST(glob_matcher)
{
    CHECK(gm("*.cu", "a.cu"));
    CHECK(!gm("*.cu", "k/a.cu"));
    CHECK(!gm("*.cu", "a.cuh"));
    CHECK(gm("**/*.cu", "a.cu"));
    CHECK(gm("**/*.cu", "k/a.cu"));
    CHECK(gm("**/*.cu", "k/l/m/a.cu"));
    CHECK(gm("k/**", "k/l/m/a.cu"));
    CHECK(gm("k/**/a.cu", "k/a.cu"));
    CHECK(gm("k/**/a.cu", "k/x/y/a.cu"));
    CHECK(!gm("k/**/a.cu", "j/x/a.cu"));
    CHECK(gm("**/x/**/*.h", "a/x/b/c/d.h"));
    CHECK(gm("**", "a/b/c"));
    CHECK(gm("a?c", "abc"));
    CHECK(!gm("a?c", "ac"));
    CHECK(gm("a?c", "a\xc3\xa9"
                    "c"));
    CHECK(gm("[ab]x", "bx"));
    CHECK(!gm("[!ab]x", "bx"));
    CHECK(gm("[^ab]x", "cx"));
    CHECK(gm("[a-c]*", "cat"));
    CHECK(!gm("[a-c]*", "dog"));
    CHECK(gm("[]]x", "]x"));
    CHECK(gm("[x", "[x"));
    CHECK(gm("*.{cu,cpp}", "k.cpp"));
    CHECK(gm("*.{cu,cpp}", "k.cu"));
    CHECK(!gm("*.{cu,cpp}", "k.h"));
    CHECK(gm("{kernels,src}/**/*.{cu,cuh}", "src/a/b.cuh"));
    CHECK(gm("a{b,{c,d}}e", "ade"));
    CHECK(gm("{x}", "{x}"));
    CHECK(gm("\\*", "*"));
    CHECK(!gm("\\*", "a"));
    CHECK(gm("a*b*c", "aXbYbZc"));
    CHECK(!gm("a*b*c", "aXbYbZ"));
    /* Hidden names need an explicit dot. */
    CHECK(!gm("*", ".hidden"));
    CHECK(gm(".*", ".hidden"));
    CHECK(!gm("**/*.py", ".venv/x.py"));
    CHECK(gm(".venv/**/*.py", ".venv/a/x.py"));
    /* Pruning. */
    CHECK(gm_partial("kernels/*.cu", "kernels"));
    CHECK(!gm_partial("kernels/*.cu", "src"));
    CHECK(!gm_partial("*.cu", "kernels"));
    CHECK(gm_partial("**/*.cu", "a/b"));
    /* Pathological patterns stay fast (no exponential backtracking). */
    int64_t t0 = ca_now_us();
    CHECK(!gm("*a*a*a*a*a*a*a*a*a*a*a*b",
              "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"));
    CHECK(!gm("**/**/**/**/**/**/x", "a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/y"));
    CHECK(ca_now_us() - t0 < 100000);
    /* Too many alternatives. */
    struct tools__glob g;
    char msg[256];
    CHECK(tools__glob_compile("{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}", &g, msg,
                              sizeof(msg)) == CA_EPARSE);
    CHECK_CONTAINS(msg, "more than 256 alternatives");
}

/* ---- Glob ---- */

TEST(glob_newest_first_with_braces_and_doublestar)
{
    struct tool_ctx *ctx = ws_ctx();
    put("kernels/a.cu", "a");
    put("kernels/b.cu", "b");
    put("kernels/sub/c.cu", "c");
    put("kernels/x_binding.cpp", "x");
    put("src/deep/er/d.cuh", "d");
    put(".hidden/e.cu", "e");
    set_mtime("kernels/a.cu", 1000);
    set_mtime("kernels/b.cu", 3000);
    set_mtime("kernels/sub/c.cu", 2000);
    set_mtime("kernels/x_binding.cpp", 2000);
    set_mtime("src/deep/er/d.cuh", 500);

    OK(call(ctx, "Glob", "{\"pattern\":\"**/*.cu\"}"));
    CHECK_STR(R.text.data, "/workspace/kernels/b.cu\n/workspace/kernels/sub/c.cu\n"
                           "/workspace/kernels/a.cu\n");
    CHECK_EQ(field_int("matches"), 3);
    CHECK(!field_bool("truncated"));
    /* Equal times: by name. */
    OK(call(ctx, "Glob", "{\"pattern\":\"kernels/**/*.{cu,cpp}\"}"));
    CHECK_STR(R.text.data, "/workspace/kernels/b.cu\n/workspace/kernels/sub/c.cu\n"
                           "/workspace/kernels/x_binding.cpp\n/workspace/kernels/a.cu\n");
    OK(call(ctx, "Glob", "{\"pattern\":\"*.cu\",\"path\":\"/workspace/kernels\"}"));
    CHECK_STR(R.text.data, "/workspace/kernels/b.cu\n/workspace/kernels/a.cu\n");
    OK(call(ctx, "Glob", "{\"pattern\":\"/workspace/src/**/*.cu?\"}"));
    CHECK_STR(R.text.data, "/workspace/src/deep/er/d.cuh\n");
    OK(call(ctx, "Glob", "{\"pattern\":\"./*.py\"}"));
    CHECK_CONTAINS(R.text.data, "/workspace/model.py\n");
    CHECK_CONTAINS(R.text.data, "/workspace/model_new.py\n");
    OK(call(ctx, "Glob", "{\"pattern\":\".hidden/*\"}"));
    CHECK_STR(R.text.data, "/workspace/.hidden/e.cu\n");
    OK(call(ctx, "Glob", "{\"pattern\":\"*.nothing\"}"));
    CHECK_CONTAINS(R.text.data, "No files match '*.nothing' in /workspace");
    CHECK_EQ(field_int("matches"), 0);

    REFUSED(call(ctx, "Glob", "{\"pattern\":\"../*\"}"), "'..'");
    REFUSED(call(ctx, "Glob", "{\"pattern\":\"/etc/*\"}"), "outside the workspace");
    REFUSED(call(ctx, "Glob", "{\"pattern\":\"*\",\"path\":\"model.py\"}"), "is a file, not a "
                                                                            "folder");
    REFUSED(call(ctx, "Glob", "{\"pattern\":\"*\",\"path\":\"nope\"}"), "does not exist");
    /* Symlinked folders are listed, not entered. */
    REQUIRE(symlink("kernels", wpath("klink")) == 0);
    OK(call(ctx, "Glob", "{\"pattern\":\"klink/**/*.cu\"}"));
    CHECK_CONTAINS(R.text.data, "No files match");
    tool_ctx_free(ctx);
    tool_result_release(&R);
}

TEST(glob_caps_its_list)
{
    struct tool_ctx *ctx = ws_ctx();
    for (int i = 0; i < 1100; i++) {
        char rel[64];
        snprintf(rel, sizeof(rel), "many/f%04d.txt", i);
        put(rel, "");
    }
    OK(call(ctx, "Glob", "{\"pattern\":\"many/*.txt\"}"));
    CHECK_EQ(field_int("matches"), 1100);
    CHECK(field_bool("truncated"));
    CHECK_CONTAINS(R.text.data, "[showing the 1000 most recently modified of 1100 matches");
    tool_ctx_free(ctx);
    tool_result_release(&R);
}

/* ---- Grep ---- */

static void grep_files(void)
{
    put("kernels/a.cu", "#include <cuda.h>\n__global__ void add(float *x)\n{\n    x[0] += 1;\n}\n"
                        "// TODO tune\n");
    put("kernels/b_binding.cpp", "// binding\nvoid add_launcher();\nREGISTER_BINDING(add)\n");
    put("notes/n.md", "todo: profile\nmore\n");
}

TEST(grep_modes_and_filters)
{
    struct tool_ctx *ctx = ws_ctx();
    grep_files();
    OK(call(ctx, "Grep", "{\"pattern\":\"add\",\"path\":\"kernels\"}"));
    CHECK_STR(R.text.data, "/workspace/kernels/a.cu\n/workspace/kernels/b_binding.cpp\n");
    CHECK_EQ(field_int("files"), 2);

    OK(call(ctx, "Grep", "{\"pattern\":\"add\",\"output_mode\":\"content\",\"path\":\"kernels\"}"));
    CHECK_STR(R.text.data, "/workspace/kernels/a.cu:2:__global__ void add(float *x)\n"
                           "/workspace/kernels/b_binding.cpp:2:void add_launcher();\n"
                           "/workspace/kernels/b_binding.cpp:3:REGISTER_BINDING(add)\n");
    CHECK_EQ(field_int("matches"), 3);
    OK(call(ctx, "Grep",
            "{\"pattern\":\"add\",\"output_mode\":\"content\",\"-n\":false,"
            "\"path\":\"kernels/a.cu\"}"));
    CHECK_STR(R.text.data, "/workspace/kernels/a.cu:__global__ void add(float *x)\n");
    OK(call(ctx, "Grep", "{\"pattern\":\"add\",\"output_mode\":\"count\",\"path\":\"kernels\"}"));
    CHECK_STR(R.text.data, "/workspace/kernels/a.cu:1\n/workspace/kernels/b_binding.cpp:2\n");

    /* Case, type, glob, head_limit. */
    OK(call(ctx, "Grep", "{\"pattern\":\"todo\",\"-i\":true}"));
    CHECK_CONTAINS(R.text.data, "/workspace/kernels/a.cu\n");
    CHECK_CONTAINS(R.text.data, "/workspace/notes/n.md\n");
    OK(call(ctx, "Grep", "{\"pattern\":\"todo\",\"-i\":true,\"type\":\"cuda\"}"));
    CHECK_STR(R.text.data, "/workspace/kernels/a.cu\n");
    OK(call(ctx, "Grep", "{\"pattern\":\"todo\",\"-i\":true,\"glob\":\"*.md\"}"));
    CHECK_STR(R.text.data, "/workspace/notes/n.md\n");
    OK(call(ctx, "Grep", "{\"pattern\":\"todo\",\"-i\":true,\"glob\":\"!*.md\"}"));
    CHECK(!strstr(R.text.data, "n.md"));
    OK(call(ctx, "Grep", "{\"pattern\":\"add\",\"glob\":\"kernels/*.{cpp,h}\"}"));
    CHECK_STR(R.text.data, "/workspace/kernels/b_binding.cpp\n");
    OK(call(ctx, "Grep",
            "{\"pattern\":\"add\",\"output_mode\":\"content\",\"head_limit\":2,"
            "\"path\":\"kernels\"}"));
    CHECK_CONTAINS(R.text.data, "b_binding.cpp:2:");
    CHECK(!strstr(R.text.data, "b_binding.cpp:3:"));
    CHECK_CONTAINS(R.text.data, "[head_limit 2 reached");
    CHECK(field_bool("truncated"));

    OK(call(ctx, "Grep", "{\"pattern\":\"zzz_nothing\"}"));
    CHECK_CONTAINS(R.text.data, "No matches for /zzz_nothing/ in /workspace");
    CHECK_EQ(field_int("files"), 0);
    tool_ctx_free(ctx);
    tool_result_release(&R);
}

TEST(grep_context_and_multiline)
{
    struct tool_ctx *ctx = ws_ctx();
    put("t.txt", "l1\nl2 hit\nl3\nl4\nl5\nl6\nl7 hit\nl8\nl9 hit\nl10\n");
    OK(call(ctx, "Grep",
            "{\"pattern\":\"hit\",\"path\":\"t.txt\",\"output_mode\":\"content\","
            "\"-C\":1}"));
    CHECK_STR(R.text.data, "/workspace/t.txt-1-l1\n/workspace/t.txt:2:l2 hit\n"
                           "/workspace/t.txt-3-l3\n--\n/workspace/t.txt-6-l6\n"
                           "/workspace/t.txt:7:l7 hit\n/workspace/t.txt-8-l8\n"
                           "/workspace/t.txt:9:l9 hit\n/workspace/t.txt-10-l10\n");
    OK(call(ctx, "Grep",
            "{\"pattern\":\"hit\",\"path\":\"t.txt\",\"output_mode\":\"content\","
            "\"-A\":1,\"-B\":0}"));
    CHECK_STR(R.text.data, "/workspace/t.txt:2:l2 hit\n/workspace/t.txt-3-l3\n--\n"
                           "/workspace/t.txt:7:l7 hit\n/workspace/t.txt-8-l8\n"
                           "/workspace/t.txt:9:l9 hit\n/workspace/t.txt-10-l10\n");
    OK(call(ctx, "Grep",
            "{\"pattern\":\"^l\\\\d$\",\"path\":\"t.txt\",\"output_mode\":\"count\"}"));
    CHECK_STR(R.text.data, "/workspace/t.txt:6\n");
    /* Without multiline a match stays within a line. */
    OK(call(ctx, "Grep", "{\"pattern\":\"l3\\\\sl4\",\"path\":\"t.txt\"}"));
    CHECK_CONTAINS(R.text.data, "No matches");
    OK(call(ctx, "Grep",
            "{\"pattern\":\"hit\\\\s+l3\",\"path\":\"t.txt\",\"output_mode\":"
            "\"content\"}"));
    CHECK_CONTAINS(R.text.data, "No matches");
    OK(call(ctx, "Grep",
            "{\"pattern\":\"l3.l4\",\"path\":\"t.txt\",\"output_mode\":\"content\","
            "\"multiline\":true}"));
    CHECK_STR(R.text.data, "/workspace/t.txt:3:l3\n/workspace/t.txt:4:l4\n");
    OK(call(ctx, "Grep",
            "{\"pattern\":\"l2.*l4\",\"path\":\"t.txt\",\"output_mode\":\"count\","
            "\"multiline\":true}"));
    CHECK_STR(R.text.data, "/workspace/t.txt:3\n");
    tool_ctx_free(ctx);
    tool_result_release(&R);
}

TEST(grep_bad_and_catastrophic_regex)
{
    struct tool_ctx *ctx = ws_ctx();
    REFUSED(call(ctx, "Grep", "{\"pattern\":\"foo(bar\"}"),
            "Grep: invalid regular expression at offset 7: missing closing parenthesis");
    REFUSED(call(ctx, "Grep", "{\"pattern\":\"[z-a]\"}"), "invalid regular expression at offset");
    struct buf b;
    buf_init(&b, 1 << 20);
    for (int i = 0; i < 40; i++)
        REQUIRE(buf_addch(&b, 'a') == 0);
    REQUIRE(buf_addstr(&b, "!\n") == 0);
    put("evil.txt", b.data);
    buf_release(&b);
    int64_t t0 = ca_now_us();
    REFUSED(call(ctx, "Grep", "{\"pattern\":\"(a+)+$\",\"path\":\"evil.txt\"}"), "too expensive");
    int64_t us = ca_now_us() - t0;
    fprintf(stderr, "  catastrophic regex refused in %lld us\n", (long long)us);
    CHECK(us < 5000000);
    REFUSED(call(ctx, "Grep", "{\"pattern\":\"(a|aa)*$\",\"path\":\"evil.txt\"}"), "too expensive");
    /* The episode stays usable. */
    OK(call(ctx, "Grep", "{\"pattern\":\"a!\",\"path\":\"evil.txt\"}"));
    CHECK_STR(R.text.data, "/workspace/evil.txt\n");
    tool_ctx_free(ctx);
    tool_result_release(&R);
}

TEST(grep_skips_binary_hidden_and_symlinks)
{
    struct tool_ctx *ctx = ws_ctx();
    FILE *f = fopen(wpath("blob.bin"), "wb");
    REQUIRE(f);
    fwrite("needle\0", 1, 7, f);
    fclose(f);
    put(".secret/x.txt", "needle\n");
    put("real/y.txt", "needle\n");
    REQUIRE(symlink("real/y.txt", wpath("link.txt")) == 0);
    REQUIRE(symlink("real", wpath("linkdir")) == 0);
    REQUIRE(symlink("/etc", wpath("etc")) == 0);
    OK(call(ctx, "Grep", "{\"pattern\":\"needle\"}"));
    CHECK_STR(R.text.data, "/workspace/real/y.txt\n(skipped 1 binary and 0 oversized files)\n");
    /* Hidden names are searched when named. */
    OK(call(ctx, "Grep", "{\"pattern\":\"needle\",\"path\":\".secret\"}"));
    CHECK_STR(R.text.data, "/workspace/.secret/x.txt\n");
    OK(call(ctx, "Grep", "{\"pattern\":\"needle\",\"path\":\".secret/x.txt\"}"));
    CHECK_STR(R.text.data, "/workspace/.secret/x.txt\n");
    REFUSED(call(ctx, "Grep", "{\"pattern\":\"root\",\"path\":\"etc/passwd\"}"),
            "leads outside /workspace");
    tool_ctx_free(ctx);
    tool_result_release(&R);
}

TEST(grep_caps_output)
{
    struct tool_ctx *ctx = ws_ctx();
    struct buf b;
    buf_init(&b, 1 << 24);
    for (int i = 0; i < 20000; i++)
        REQUIRE(buf_addf(&b, "match line %d with some padding text\n", i) == 0);
    put("big.txt", b.data);
    buf_release(&b);
    OK(call(ctx, "Grep", "{\"pattern\":\"match\",\"output_mode\":\"content\"}"));
    CHECK(R.text.len <= CA_LIMIT_TOOL_OUTPUT);
    CHECK_CONTAINS(R.text.data, "[output truncated at the 64 KiB tool output limit");
    CHECK(field_bool("truncated"));
    OK(call(ctx, "Grep", "{\"pattern\":\"match\",\"output_mode\":\"count\",\"path\":\"big.txt\"}"));
    CHECK_STR(R.text.data, "/workspace/big.txt:20000\n");
    tool_ctx_free(ctx);
    tool_result_release(&R);
}

/* ---- NotebookEdit ---- */

static const char nb_text[] =
    "{\n \"cells\": [\n  {\n   \"cell_type\": \"markdown\",\n   \"id\": \"m1\",\n"
    "   \"metadata\": {},\n   \"source\": [\"# Title\"]\n  },\n  {\n   \"cell_type\": \"code\",\n"
    "   \"execution_count\": 3,\n   \"id\": \"c1\",\n   \"metadata\": {\"tags\": [\"keep\"]},\n"
    "   \"outputs\": [{\"output_type\": \"stream\", \"name\": \"stdout\", \"text\": [\"1\\n\"]}],\n"
    "   \"source\": [\"print(1)\"]\n  }\n ],\n \"metadata\": {\"kernelspec\": {\"name\": "
    "\"python3\"}},\n \"nbformat\": 4,\n \"nbformat_minor\": 5\n}\n";

static json_t *load_nb(void)
{
    json_error_t je;
    json_t *nb = json_loads(slurp("nb.ipynb"), 0, &je);
    REQUIRE(nb);
    return nb;
}

static const char *cell_src(json_t *nb, size_t i, char *out, size_t n)
{
    json_t *src = json_object_get(json_array_get(json_object_get(nb, "cells"), i), "source");
    out[0] = '\0';
    size_t k;
    json_t *s;
    size_t len = 0;
    json_array_foreach(src, k, s) len +=
        (size_t)snprintf(out + len, n - len, "%s", json_string_value(s));
    return out;
}

TEST(notebook_edit_replace_insert_delete)
{
    struct tool_ctx *ctx = ws_ctx();
    put("nb.ipynb", nb_text);
    REFUSED(call(ctx, "NotebookEdit",
                 "{\"notebook_path\":\"nb.ipynb\",\"cell_number\":1,"
                 "\"new_source\":\"x\"}"),
            "has not been Read");
    OK(call(ctx, "Read", "{\"file_path\":\"nb.ipynb\"}"));

    OK(call(ctx, "NotebookEdit",
            "{\"notebook_path\":\"/workspace/nb.ipynb\",\"cell_id\":\"c1\","
            "\"new_source\":\"a = 1\\nprint(a)\"}"));
    CHECK_CONTAINS(R.text.data, "Replaced the source of cell 1 (code)");
    char src[1024];
    json_t *nb = load_nb();
    json_t *cells = json_object_get(nb, "cells");
    CHECK_STR(cell_src(nb, 1, src, sizeof(src)), "a = 1\nprint(a)");
    CHECK_EQ(json_array_size(json_object_get(json_array_get(cells, 1), "source")), 2);
    CHECK(json_is_null(json_object_get(json_array_get(cells, 1), "execution_count")));
    CHECK_EQ(json_array_size(json_object_get(json_array_get(cells, 1), "outputs")), 0);
    CHECK(json_object_get(json_object_get(json_array_get(cells, 1), "metadata"), "tags"));
    CHECK(json_object_get(json_object_get(nb, "metadata"), "kernelspec"));
    json_decref(nb);
    const char *raw = slurp("nb.ipynb");
    CHECK(strncmp(raw, "{\n \"cells\": [\n  {\n   \"cell_type\"", 32) == 0); /* indent 1 */

    OK(call(ctx, "NotebookEdit",
            "{\"notebook_path\":\"nb.ipynb\",\"cell_number\":0,"
            "\"edit_mode\":\"insert\",\"cell_type\":\"code\","
            "\"new_source\":\"import torch\\n\"}"));
    CHECK_CONTAINS(R.text.data, "Inserted a new code cell at index 0");
    CHECK_EQ(field_int("cells"), 3);
    OK(call(ctx, "NotebookEdit",
            "{\"notebook_path\":\"nb.ipynb\",\"cell_id\":\"m1\","
            "\"edit_mode\":\"insert\",\"cell_type\":\"markdown\","
            "\"new_source\":\"## After title\"}"));
    CHECK_EQ(field_int("cell"), 2);
    OK(call(ctx, "NotebookEdit",
            "{\"notebook_path\":\"nb.ipynb\",\"edit_mode\":\"insert\","
            "\"cell_type\":\"markdown\",\"new_source\":\"end\"}"));
    CHECK_EQ(field_int("cell"), 4);
    nb = load_nb();
    cells = json_object_get(nb, "cells");
    CHECK_EQ(json_array_size(cells), 5);
    CHECK_STR(cell_src(nb, 0, src, sizeof(src)), "import torch\n");
    CHECK_STR(cell_src(nb, 2, src, sizeof(src)), "## After title");
    CHECK_STR(cell_src(nb, 4, src, sizeof(src)), "end");
    const char *id0 = json_string_value(json_object_get(json_array_get(cells, 0), "id"));
    CHECK(id0 && strlen(id0) == 8);
    CHECK(json_is_array(json_object_get(json_array_get(cells, 0), "outputs")));
    CHECK(!json_object_get(json_array_get(cells, 2), "outputs"));
    json_decref(nb);

    OK(call(ctx, "NotebookEdit",
            "{\"notebook_path\":\"nb.ipynb\",\"cell_number\":4,"
            "\"edit_mode\":\"delete\"}"));
    CHECK_CONTAINS(R.text.data, "Deleted cell 4");
    CHECK_EQ(field_int("cells"), 4);
    /* Changing a cell's type. */
    OK(call(ctx, "NotebookEdit",
            "{\"notebook_path\":\"nb.ipynb\",\"cell_number\":0,"
            "\"cell_type\":\"markdown\",\"new_source\":\"# now text\"}"));
    nb = load_nb();
    json_t *c0 = json_array_get(json_object_get(nb, "cells"), 0);
    CHECK_STR(json_string_value(json_object_get(c0, "cell_type")), "markdown");
    CHECK(!json_object_get(c0, "outputs") && !json_object_get(c0, "execution_count"));
    json_decref(nb);

    /* Bad calls. */
    REFUSED(call(ctx, "NotebookEdit",
                 "{\"notebook_path\":\"nb.ipynb\",\"cell_number\":9,"
                 "\"new_source\":\"x\"}"),
            "cell_number 9 is out of range: /workspace/nb.ipynb has 4 cells");
    REFUSED(call(ctx, "NotebookEdit",
                 "{\"notebook_path\":\"nb.ipynb\",\"cell_id\":\"zz\","
                 "\"new_source\":\"x\"}"),
            "no cell of /workspace/nb.ipynb has id 'zz'; its cell ids are");
    REFUSED(call(ctx, "NotebookEdit", "{\"notebook_path\":\"nb.ipynb\",\"new_source\":\"x\"}"),
            "give cell_id or cell_number");
    REFUSED(call(ctx, "NotebookEdit",
                 "{\"notebook_path\":\"nb.ipynb\",\"edit_mode\":\"insert\","
                 "\"new_source\":\"x\"}"),
            "needs cell_type");
    REFUSED(call(ctx, "NotebookEdit", "{\"notebook_path\":\"nb.ipynb\",\"cell_number\":0}"),
            "needs new_source");
    REFUSED(call(ctx, "NotebookEdit",
                 "{\"notebook_path\":\"nb.ipynb\",\"cell_number\":0,"
                 "\"edit_mode\":\"append\",\"new_source\":\"x\"}"),
            "must be one of \"replace\", \"insert\", \"delete\"");
    put("plain.ipynb", "{\"not\":\"a notebook\"}");
    OK(call(ctx, "Read", "{\"file_path\":\"plain.ipynb\"}"));
    REFUSED(call(ctx, "NotebookEdit",
                 "{\"notebook_path\":\"plain.ipynb\",\"cell_number\":0,"
                 "\"new_source\":\"x\"}"),
            "is not a notebook: it has no \"cells\" list");
    put("broken.ipynb", "{\"cells\": [");
    OK(call(ctx, "Read", "{\"file_path\":\"broken.ipynb\"}"));
    REFUSED(call(ctx, "NotebookEdit",
                 "{\"notebook_path\":\"broken.ipynb\",\"cell_number\":0,"
                 "\"new_source\":\"x\"}"),
            "is not a valid notebook");
    REFUSED(call(ctx, "NotebookEdit",
                 "{\"notebook_path\":\"model_new.py\",\"cell_number\":0,"
                 "\"new_source\":\"x\"}"),
            "is not a Jupyter notebook");
    /* External change. */
    put("nb.ipynb", nb_text);
    REFUSED(call(ctx, "NotebookEdit",
                 "{\"notebook_path\":\"nb.ipynb\",\"cell_number\":0,"
                 "\"new_source\":\"x\"}"),
            "modified since you read it");
    tool_ctx_free(ctx);
    tool_result_release(&R);
}

/* ---- TodoWrite ---- */

TEST(todo_write_rules_and_rendering)
{
    struct tool_ctx *ctx = ws_ctx();
    CHECK_EQ(json_array_size(tool_ctx_todos(ctx)), 0);
    OK(call(ctx, "TodoWrite",
            "{\"todos\":[{\"content\":\"Read the task\",\"status\":\"completed\",\"id\":\"1\"},"
            "{\"content\":\"Write the kernel\",\"status\":\"in_progress\",\"activeForm\":"
            "\"Writing the kernel\",\"id\":\"2\"},"
            "{\"content\":\"Profile\",\"status\":\"pending\"}]}"));
    CHECK_STR(R.text.data, "Todo list updated: 3 items (1 completed, 1 in progress, 1 pending)\n"
                           "[x] Read the task\n"
                           "[>] Write the kernel (now: Writing the kernel)\n"
                           "[ ] Profile\n");
    CHECK_EQ(field_int("total"), 3);
    CHECK_EQ(field_int("in_progress"), 1);
    const json_t *todos = tool_ctx_todos(ctx);
    CHECK_EQ(json_array_size(todos), 3);
    CHECK_STR(json_string_value(json_object_get(json_array_get(todos, 1), "activeForm")),
              "Writing the kernel");

    REFUSED(call(ctx, "TodoWrite",
                 "{\"todos\":[{\"content\":\"a\",\"status\":\"in_progress\"},"
                 "{\"content\":\"b\",\"status\":\"in_progress\"}]}"),
            "2 items are in_progress (todos[0] and todos[1]); at most one");
    CHECK_EQ(json_array_size(tool_ctx_todos(ctx)), 3); /* unchanged */
    REFUSED(call(ctx, "TodoWrite", "{\"todos\":[{\"content\":\"  \",\"status\":\"pending\"}]}"),
            "todos[0].content is empty");
    REFUSED(call(ctx, "TodoWrite",
                 "{\"todos\":[{\"content\":\"a\",\"status\":\"pending\","
                 "\"id\":\"x\"},{\"content\":\"b\",\"status\":\"pending\","
                 "\"id\":\"x\"}]}"),
            "have the same id 'x'");
    REFUSED(call(ctx, "TodoWrite", "{\"todos\":[{\"status\":\"pending\"}]}"),
            "missing required argument 'todos[0].content'");
    OK(call(ctx, "TodoWrite", "{\"todos\":[]}"));
    CHECK_CONTAINS(R.text.data, "Todo list cleared");
    CHECK_EQ(json_array_size(tool_ctx_todos(ctx)), 0);
    tool_ctx_free(ctx);
    tool_result_release(&R);
}

/* ---- timings ---- */

static double per_call_us(struct tool_ctx *ctx, const char *name, const char *args, int n)
{
    json_error_t je;
    json_t *a = json_loads(args, 0, &je);
    REQUIRE(a);
    struct tool_result r;
    tool_result_init(&r);
    int64_t t0 = ca_now_us();
    for (int i = 0; i < n; i++) {
        REQUIRE(tool_call(ctx, name, a, &r) == 0);
        if (r.is_error)
            fprintf(stderr, "  %s: %s\n", name, r.text.data);
        REQUIRE(!r.is_error);
    }
    double us = (double)(ca_now_us() - t0) / n;
    tool_result_release(&r);
    json_decref(a);
    return us;
}

TEST(timings_read_edit_grep)
{
    struct tool_ctx *ctx = ws_ctx();
    /* A typical workspace: the template, the task, a kernel and its binding. */
    struct buf b;
    buf_init(&b, 1 << 20);
    for (int i = 0; i < 300; i++)
        REQUIRE(buf_addf(&b, "    float v%d = x[i] * %d.0f; // step %d\n", i, i, i) == 0);
    put("kernels/softmax.cu", b.data);
    put("kernels/softmax_binding.cpp", "// binding\nREGISTER_BINDING(softmax)\n");
    buf_release(&b);
    const int n = 200;
    double read = per_call_us(ctx, "Read", "{\"file_path\":\"kernels/softmax.cu\"}", n);
    double read_skill = per_call_us(ctx, "Read", "{\"file_path\":\"SKILL.md\"}", n);
    /* Edit back and forth so each call changes the file. */
    json_error_t je;
    json_t *fwd = json_loads("{\"file_path\":\"kernels/softmax.cu\",\"old_string\":\"step 150\","
                             "\"new_string\":\"STEP 150\"}",
                             0, &je);
    json_t *back = json_loads("{\"file_path\":\"kernels/softmax.cu\",\"old_string\":\"STEP 150\","
                              "\"new_string\":\"step 150\"}",
                              0, &je);
    struct tool_result r;
    tool_result_init(&r);
    int64_t t0 = ca_now_us();
    for (int i = 0; i < n; i++) {
        REQUIRE(tool_call(ctx, "Edit", i % 2 ? back : fwd, &r) == 0);
        REQUIRE(!r.is_error);
    }
    double edit = (double)(ca_now_us() - t0) / n;
    tool_result_release(&r);
    json_decref(fwd);
    json_decref(back);
    double grep = per_call_us(ctx, "Grep",
                              "{\"pattern\":\"v1[0-9]+ =\",\"output_mode\":"
                              "\"content\"}",
                              n);
    double grep_files = per_call_us(ctx, "Grep", "{\"pattern\":\"REGISTER_BINDING\"}", n);
    double glob = per_call_us(ctx, "Glob", "{\"pattern\":\"**/*\"}", n);
    fprintf(stderr,
            "  per call: Read %.0f us (SKILL.md %.0f us), Edit %.0f us, Grep content %.0f us, "
            "Grep files %.0f us, Glob %.0f us\n",
            read, read_skill, edit, grep, grep_files, glob);
    tool_ctx_free(ctx);
    tool_result_release(&R);
}
