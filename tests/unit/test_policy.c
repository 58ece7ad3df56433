/*
 * test_policy.c - the evaluator's static policy on sources: the report, the C++/CUDA source check
 * (every reference solution and tests/eval/policy/ok/ must pass; every tests/eval/policy/bad/
 * fixture must report exactly the "rule:line" pairs of its .expect file), lexing edge cases where
 * a substring search or a naive tokenizer would disagree with the compiler, the model_new.py
 * check through python3 (skipped without it), and KernelBench's load_inline cuda sources. The
 * check on built objects is test_policy_objects.c.
 */
#include "test.h"

#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/buf.h"
#include "core/fs.h"
#include "core/proc.h"
#include "core/util.h"
#include "eval/policy.h"

#define FIXTURES "tests/eval/policy"

/* ---- helpers ---- */

static char *path_in_repo(const char *rel)
{
    return xstrfmt("%s/%s", test_repo(), rel);
}

static char *slurp(const char *path, size_t *len)
{
    struct buf b;
    buf_init(&b, 64 << 20);
    struct ca_err err = {0};
    if (fs_read_file(path, 64 << 20, &b, &err) != 0) {
        test__fail(__FILE__, __LINE__, "cannot read %s: %s", path, err.msg);
        buf_release(&b);
        return NULL;
    }
    return buf_detach(&b, len);
}

static int cmp_strp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sorted names in dir (no dot files); *n gets the count. */
static char **list_dir(const char *dir, size_t *n)
{
    DIR *d = opendir(dir);
    *n = 0;
    if (!d) {
        test__fail(__FILE__, __LINE__, "cannot open %s: %s", dir, strerror(errno));
        return NULL;
    }
    char **names = NULL;
    size_t alloc = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        ALLOC_GROW(names, *n + 1, alloc);
        names[(*n)++] = xstrdup(e->d_name);
    }
    closedir(d);
    if (*n)
        qsort(names, *n, sizeof(*names), cmp_strp);
    return names;
}

static void free_list(char **names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* Sorted, de-duplicated "rule:line" lines of a report, and every rule id is a known one. */
static char *report_pairs(const struct policy_report *rep)
{
    char **lines = xcalloc(rep->n + 1, sizeof(*lines));
    for (size_t i = 0; i < rep->n; i++) {
        const struct policy_violation *v = &rep->items[i];
        if (!policy_rule_summary(v->rule))
            test__fail(__FILE__, __LINE__, "unknown rule id \"%s\" reported", v->rule);
        if (!v->message[0])
            test__fail(__FILE__, __LINE__, "empty message for rule %s", v->rule);
        lines[i] = xstrfmt("%s:%u", v->rule, v->line);
    }
    if (rep->n)
        qsort(lines, rep->n, sizeof(*lines), cmp_strp);
    struct buf out;
    buf_init(&out, BUF_MAX_INTERNAL);
    for (size_t i = 0; i < rep->n; i++)
        if (i == 0 || strcmp(lines[i], lines[i - 1]) != 0)
            REQUIRE(buf_addf(&out, "%s\n", lines[i]) == 0);
    for (size_t i = 0; i < rep->n; i++)
        free(lines[i]);
    free(lines);
    return buf_detach(&out, NULL);
}

/* An .expect file's lines, sorted and de-duplicated, in report_pairs' format. */
static char *expect_pairs(const char *path)
{
    size_t len;
    char *text = slurp(path, &len);
    if (!text)
        return xstrdup("");
    char **lines = NULL;
    size_t n = 0, alloc = 0;
    char *p = text;
    while (p && *p) {
        char *nl = strchr(p, '\n');
        if (nl)
            *nl = '\0';
        if (*p) {
            ALLOC_GROW(lines, n + 1, alloc);
            lines[n++] = xstrdup(p);
        }
        p = nl ? nl + 1 : NULL;
    }
    free(text);
    if (n)
        qsort(lines, n, sizeof(*lines), cmp_strp);
    struct buf out;
    buf_init(&out, BUF_MAX_INTERNAL);
    for (size_t i = 0; i < n; i++)
        if (i == 0 || strcmp(lines[i], lines[i - 1]) != 0)
            REQUIRE(buf_addf(&out, "%s\n", lines[i]) == 0);
    for (size_t i = 0; i < n; i++)
        free(lines[i]);
    free(lines);
    return buf_detach(&out, NULL);
}

static void check_source_clean(const char *name, const char *code, size_t len)
{
    struct policy_report rep;
    policy_report_init(&rep);
    struct ca_err err = {0};
    CHECK_EQ(policy_check_source(name, code, len, &rep, &err), 0);
    if (!policy_report_ok(&rep)) {
        struct buf out;
        buf_init(&out, BUF_MAX_INTERNAL);
        CHECK(policy_report_format(&rep, &out) == 0);
        test__fail(__FILE__, __LINE__, "%s should pass the policy, got:\n%s", name, out.data);
        buf_release(&out);
    }
    policy_report_release(&rep);
}

/* "rule:line\n..." reported for code under name ("" when clean). */
static char *source_pairs(const char *name, const char *code)
{
    struct policy_report rep;
    policy_report_init(&rep);
    struct ca_err err = {0};
    CHECK_EQ(policy_check_source(name, code, strlen(code), &rep, &err), 0);
    char *pairs = report_pairs(&rep);
    policy_report_release(&rep);
    return pairs;
}

/* ---- the report ---- */

TEST(report_format_caps_lines_and_counts_the_rest)
{
    struct policy_report rep;
    policy_report_init(&rep);
    CHECK(policy_report_ok(&rep));
    for (unsigned i = 1; i <= 25; i++)
        policy_report_addf(&rep, "kernels/a.cu", i, "process", "`fork` number %u", i);
    policy_report_addf(&rep, "ext.so", 0, "library", "imports `cufftExecC2C`");
    CHECK(!policy_report_ok(&rep));
    CHECK_EQ(rep.n, 26);
    struct buf out;
    buf_init(&out, BUF_MAX_INTERNAL);
    REQUIRE(policy_report_format(&rep, &out) == 0);
    CHECK_CONTAINS(out.data, "kernels/a.cu:1: process: `fork` number 1\n");
    CHECK_CONTAINS(out.data, "kernels/a.cu:20: process: `fork` number 20\n");
    CHECK(strstr(out.data, "number 21") == NULL);
    CHECK_CONTAINS(out.data, "... and 6 more violations\n");
    size_t lines = 0;
    for (const char *p = out.data; *p; p++)
        lines += *p == '\n';
    CHECK_EQ(lines, POLICY_FORMAT_LINES + 1);
    buf_release(&out);
    policy_report_release(&rep);

    policy_report_init(&rep);
    policy_report_addf(&rep, "ext.so", 0, "library", "imports `cufftExecC2C`");
    buf_init(&out, BUF_MAX_INTERNAL);
    REQUIRE(policy_report_format(&rep, &out) == 0);
    CHECK_STR(out.data, "ext.so: library: imports `cufftExecC2C`\n");
    buf_release(&out);
    policy_report_release(&rep);

    policy_report_init(&rep);
    buf_init(&out, BUF_MAX_INTERNAL);
    REQUIRE(policy_report_format(&rep, &out) == 0);
    CHECK_STR(out.data, "");
    buf_release(&out);
    policy_report_release(&rep);
}

TEST(report_drops_repeats_and_caps_storage)
{
    struct policy_report rep;
    policy_report_init(&rep);
    policy_report_addf(&rep, "k.cu", 3, "process", "same");
    policy_report_addf(&rep, "k.cu", 3, "process", "same");
    policy_report_addf(&rep, "k.cu", 3, "process", "other");
    CHECK_EQ(rep.n, 2);
    for (int i = 0; i < POLICY_MAX_VIOLATIONS + 10; i++)
        policy_report_addf(&rep, "k.cu", (unsigned)i + 10, "file", "x");
    CHECK_EQ(rep.n, POLICY_MAX_VIOLATIONS);
    CHECK_EQ(rep.dropped, 12);
    struct buf out;
    buf_init(&out, BUF_MAX_INTERNAL);
    REQUIRE(policy_report_format(&rep, &out) == 0);
    char *want = xstrfmt("... and %d more violations\n", POLICY_MAX_VIOLATIONS - 20 + 12);
    CHECK_CONTAINS(out.data, want);
    free(want);
    buf_release(&out);

    char big[2000];
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    policy_report_addf(&rep, "k.cu", 1, "file", "%s", big);
    policy_report_release(&rep);
    CHECK_EQ(rep.n, 0);

    policy_report_init(&rep);
    policy_report_addf(&rep, "k.cu", 1, "file", "%s", big);
    CHECK(strlen(rep.items[0].message) < sizeof(big));
    CHECK(ends_with(rep.items[0].message, "..."));
    policy_report_release(&rep);
}

TEST(report_json)
{
    struct policy_report rep;
    policy_report_init(&rep);
    policy_report_addf(&rep, "kernels/a_binding.cpp", 7, "torch-compute", "`.clone()` ...");
    policy_report_addf(&rep, "k.cu", 1, "file", "bad byte \xff here");
    json_t *j = policy_report_to_json(&rep);
    REQUIRE(j);
    CHECK(json_is_false(json_object_get(j, "ok")));
    json_t *v = json_object_get(j, "violations");
    REQUIRE(json_is_array(v) && json_array_size(v) == 2);
    json_t *first = json_array_get(v, 0);
    CHECK_STR(json_string_value(json_object_get(first, "file")), "kernels/a_binding.cpp");
    CHECK_EQ(json_integer_value(json_object_get(first, "line")), 7);
    CHECK_STR(json_string_value(json_object_get(first, "rule")), "torch-compute");
    CHECK_STR(json_string_value(json_object_get(first, "message")), "`.clone()` ...");
    CHECK(json_string_value(json_object_get(json_array_get(v, 1), "message")) != NULL);
    CHECK_EQ(json_integer_value(json_object_get(j, "dropped")), 0);
    json_decref(j);
    policy_report_release(&rep);

    policy_report_init(&rep);
    j = policy_report_to_json(&rep);
    CHECK(json_is_true(json_object_get(j, "ok")));
    json_decref(j);
}

/* A generated file's lines, placed in the file they were written in: line L of kernels/g.cu is
 * line L + 10 of cand.py, except line 1 (the generator's own); other files have no place. */
static unsigned place(void *ctx, const char *file, unsigned line)
{
    (*(int *)ctx)++;
    return strcmp(file, "kernels/g.cu") == 0 && line > 1 ? line + 10 : 0;
}

TEST(report_origins_place_findings_in_the_candidates_file)
{
    struct policy_report rep;
    policy_report_init(&rep);
    policy_report_addf(&rep, "kernels/g.cu", 5, "process", "`fork` ...");
    policy_report_addf(&rep, "kernels/g.cu", 1, "process", "`system` ...");
    policy_report_addf(&rep, "kernels/g_binding.cpp", 3, "process", "`popen` ...");
    policy_report_addf(&rep, "ext.so", 0, "process", "imports `fork`");
    int calls = 0;
    policy_report_set_origins(&rep, "cand.py", place, &calls);
    CHECK_EQ(calls, 3); /* never asked for a finding without a line */
    /* Set once: a second call does not move a placed finding again. */
    policy_report_set_origins(&rep, "other.py", place, &calls);
    json_t *j = policy_report_to_json(&rep);
    json_t *v = json_object_get(j, "violations");
    REQUIRE(json_array_size(v) == 4);
    json_t *o = json_object_get(json_array_get(v, 0), "origin");
    REQUIRE(json_is_object(o));
    CHECK_STR(json_string_value(json_object_get(o, "file")), "cand.py");
    CHECK_EQ(json_integer_value(json_object_get(o, "line")), 15);
    CHECK_EQ(json_integer_value(json_object_get(json_array_get(v, 0), "line")), 5);
    for (size_t i = 1; i < 4; i++)
        CHECK(json_object_get(json_array_get(v, i), "origin") == NULL);
    json_decref(j);
    struct buf out;
    buf_init(&out, 4096);
    REQUIRE(policy_report_format(&rep, &out) == 0);
    CHECK_STR(out.data, "cand.py:15 (kernels/g.cu:5): process: `fork` ...\n"
                        "kernels/g.cu:1: process: `system` ...\n"
                        "kernels/g_binding.cpp:3: process: `popen` ...\n"
                        "ext.so: process: imports `fork`\n");
    buf_release(&out);
    policy_report_release(&rep);
}

TEST(rule_ids_have_summaries)
{
    static const char *const ids[] = {
        "file-type", "file-size", "lexer",   "include", "macro",     "torch-compute",
        "python",    "process",   "thread",  "file",    "network",   "dlopen",
        "env",       "asm",       "stream",  "memory",  "device",    "library",
        "syntax",    "import",    "builtin", "dunder",  "fallback",  "with",
        "decorator", "scope",     "class",   "state",   "structure", "generator",
    };
    for (size_t i = 0; i < ARRAY_SIZE(ids); i++)
        CHECK(policy_rule_summary(ids[i]) != NULL);
    CHECK(policy_rule_summary("no-such-rule") == NULL);
}

/* ---- sources ---- */

TEST(reference_solutions_pass)
{
    char *root = path_in_repo("examples/solutions");
    size_t ndirs, checked = 0;
    char **dirs = list_dir(root, &ndirs);
    for (size_t i = 0; i < ndirs; i++) {
        char *kdir = xstrfmt("%s/%s/kernels", root, dirs[i]);
        size_t nfiles;
        char **files = list_dir(kdir, &nfiles);
        for (size_t j = 0; j < nfiles; j++) {
            char *path = xstrfmt("%s/%s", kdir, files[j]);
            char *name = xstrfmt("kernels/%s", files[j]);
            size_t len;
            char *code = slurp(path, &len); /* a file it cannot read fails the case */
            if (code) {
                check_source_clean(name, code, len);
                checked++;
            }
            free(code);
            free(name);
            free(path);
        }
        free_list(files, nfiles);
        free(kdir);
    }
    CHECK(checked >= 6);
    free_list(dirs, ndirs);
    free(root);
}

TEST(template_skill_examples_pass)
{
    /* SKILL.md's worked example is what agents copy: it must pass as written. */
    char *path = path_in_repo("template/SKILL.md");
    size_t len;
    char *md = slurp(path, &len);
    REQUIRE(md);
    const char *cu = strstr(md, "```cuda\n");
    const char *cpp = strstr(md, "```cpp\n");
    REQUIRE(cu && cpp);
    cu += strlen("```cuda\n");
    cpp += strlen("```cpp\n");
    const char *cu_end = strstr(cu, "```"), *cpp_end = strstr(cpp, "```");
    REQUIRE(cu_end && cpp_end);
    check_source_clean("kernels/bias_relu.cu", cu, (size_t)(cu_end - cu));
    check_source_clean("kernels/bias_relu_binding.cpp", cpp, (size_t)(cpp_end - cpp));
    free(md);
    free(path);
}

TEST(ok_fixtures_pass)
{
    char *dir = path_in_repo(FIXTURES "/ok");
    size_t n;
    char **files = list_dir(dir, &n);
    CHECK(n >= 4);
    for (size_t i = 0; i < n; i++) {
        char *path = xstrfmt("%s/%s", dir, files[i]);
        char *name = xstrfmt("kernels/%s", files[i]);
        size_t len;
        char *code = slurp(path, &len);
        if (code)
            check_source_clean(name, code, len);
        free(code);
        free(name);
        free(path);
    }
    free_list(files, n);
    free(dir);
}

TEST(bad_fixtures_report_what_they_expect)
{
    char *dir = path_in_repo(FIXTURES "/bad");
    size_t n, checked = 0;
    char **files = list_dir(dir, &n);
    for (size_t i = 0; i < n; i++) {
        const char *f = files[i];
        bool cu = ends_with(f, ".cu"), bind = ends_with(f, "_binding.cpp");
        if (!cu && !bind) {
            CHECK(ends_with(f, ".expect"));
            continue;
        }
        char *stem = xstrndup(f, strlen(f) - (cu ? 3 : 4));
        char *path = xstrfmt("%s/%s", dir, f);
        char *expect_path = xstrfmt("%s/%s.expect", dir, stem);
        char *name = xstrfmt("kernels/%s", f);
        size_t len;
        char *code = slurp(path, &len);
        struct policy_report rep;
        policy_report_init(&rep);
        struct ca_err err = {0};
        CHECK_EQ(policy_check_source(name, code ? code : "", code ? len : 0, &rep, &err), 0);
        char *got = report_pairs(&rep);
        char *want = expect_pairs(expect_path);
        if (!want[0])
            test__fail(__FILE__, __LINE__, "%s: the .expect file lists nothing", f);
        if (strcmp(got, want) != 0) {
            struct buf out;
            buf_init(&out, BUF_MAX_INTERNAL);
            CHECK(policy_report_format(&rep, &out) == 0);
            test__fail(__FILE__, __LINE__, "%s: expected\n%sgot\n%sreport:\n%s", f, want, got,
                       out.data);
            buf_release(&out);
        }
        for (size_t k = 0; k < rep.n; k++)
            CHECK_STR(rep.items[k].file, name);
        checked++;
        free(want);
        free(got);
        policy_report_release(&rep);
        free(code);
        free(name);
        free(expect_path);
        free(path);
        free(stem);
    }
    CHECK(checked >= 30);
    free_list(files, n);
    free(dir);
}

TEST(file_types_sizes_and_nul_bytes)
{
    static const char *const not_built[] = {"kernels/notes.txt",
                                            "kernels/helper.cuh",
                                            "kernels/x.cpp",
                                            "kernels/binding.cpp",
                                            "kernels/a_binding.cc",
                                            "model_new.py",
                                            ".cu"};
    for (size_t i = 0; i < ARRAY_SIZE(not_built); i++) {
        struct policy_report rep;
        policy_report_init(&rep);
        struct ca_err err = {0};
        CHECK_EQ(policy_check_source(not_built[i], "fork();", 7, &rep, &err), 0);
        REQUIRE(rep.n == 1);
        CHECK_STR(rep.items[0].rule, "file-type");
        CHECK_EQ(rep.items[0].line, 0);
        CHECK_STR(rep.items[0].file, not_built[i]);
        policy_report_release(&rep);
    }

    size_t big = POLICY_MAX_SOURCE_BYTES + 1;
    char *code = xmalloc(big);
    memset(code, ' ', big);
    struct policy_report rep;
    policy_report_init(&rep);
    struct ca_err err = {0};
    CHECK_EQ(policy_check_source("kernels/big.cu", code, big, &rep, &err), CA_ETOOBIG);
    CHECK_CONTAINS(err.msg, "kernels/big.cu");
    REQUIRE(rep.n == 1);
    CHECK_STR(rep.items[0].rule, "file-size");
    policy_report_release(&rep);
    free(code);

    policy_report_init(&rep);
    static const char nul[] = "int a;\nint b;\0fork();\n";
    CHECK_EQ(policy_check_source("kernels/nul.cu", nul, sizeof(nul) - 1, &rep, &err), 0);
    REQUIRE(rep.n == 1);
    CHECK_STR(rep.items[0].rule, "lexer");
    CHECK_EQ(rep.items[0].line, 2);
    policy_report_release(&rep);

    policy_report_init(&rep);
    CHECK_EQ(policy_check_source("kernels/empty.cu", "", 0, &rep, &err), 0);
    CHECK(policy_report_ok(&rep));
    policy_report_release(&rep);
}

struct lex_case {
    const char *name;
    const char *code;
    const char *want; /* "rule:line\n..." sorted, or "" */
};

static const struct lex_case lex_cases[] = {
    /* what is not code never counts */
    {"k.cu", "// fork()\n/* system(\"x\") */\nint x; const char *s = \"popen(\";\n", ""},
    {"k.cu", "int fork_count = 0;\nint my_fork();\nint y = s.fork + p->system;\n", ""},
    {"k.cu", "char q = '\\'';\nint b = fork();\n", "process:2\n"},
    {"k.cu", "char q = '\"'; int b = fork();\n", "process:1\n"},
    {"k.cu", "const char *s = \"unterminated\nint y = fork();\n", "process:2\n"},
    /* line ends and continuations */
    {"k.cu", "int a;\r\nint b = fork();\r\n", "process:2\n"},
    {"k.cu", "int a;\rint b = fork();\r", "process:2\n"},
    {"k.cu", "// comment continued by a backslash and spaces \\  \nfork();\nint z;\n", ""},
    {"k.cu", "int x = fo\\\r\nrk();\n", "process:1\n"},
    {"k.cu", "int x = 1;\n  /* a\n  b */ int y = getenv(\"A\");\n", "env:3\n"},
    /* raw strings: their contents never count, and splices stay inside them */
    {"k.cu", "auto s = R\"a(x)\" fork() )a\";\n", ""},
    {"k.cu", "auto s = R\\\n\"(fork())\";\n", ""},
    {"k.cu", "auto s = u8R\"(system(0))\"; auto t = LR\"xy(popen)xy\";\n", ""},
    {"k.cu", "auto s = R\"(\n\n)\"; int k = fork();\n", "process:3\n"},
    {"k.cu", "auto s = fooR\"(x)\"; int k = fork();\n", "process:1\n"},
    {"k.cu", "auto s = R\"01234567890123456789(x)01234567890123456789\";\n", "lexer:1\n"},
    {"k.cu", "auto s = R\"(never closed\nfork();\n", "lexer:1\n"},
    /* numbers, digraphs, <:: */
    {"k.cu", "long x = 1'000'000; int y = fork();\n", "process:1\n"},
    {"k.cu", "double d = 1e+5 + 0x1p-3 + .5f; int y = 0;\n", ""},
    {"k.cu", "std::vector<::cudaStream_t> v; int y = fork();\n", "process:1\n"},
    {"k.cu", "%:define F fork\n", "process:1\n"},
    {"k.cu", "int a<:2:> = <%1, 2%>; int y = fork();\n", "process:1\n"},
    {"k.cu", "\xef\xbb\xbf#include <fstream>\n", "file:1\n"},
    {"k.cu", "std::vector<std::vector<std::vector<int>>> v;\n", ""},
    /* directives */
    {"k.cu", "#define X std::thread\n", "thread:1\n"},
    {"k.cu", "#if 0\nfork();\n#endif\n", "process:2\n"},
    {"k.cu", "#pragma once\n#pragma unroll\n#ifdef __CUDA_ARCH__\n#endif\n", ""},
    {"k.cu", "#include <cuda_runtime.h> // fork()\n#include /* x */ <cstdint>\n", ""},
    {"k.cu", "#include <cuda/../../etc/passwd>\n", "include:1\n"},
    {"k.cu", "#include <cub/cub.cuh>\n#include <cuda/pipeline>\n#include <nv/target>\n", ""},
    {"k.cu", "#include <sm_90_rt.h>\n#include <cudnn_cnn.h>\n#include <cuda_fp8.h>\n", ""},
    {"k.cu", "#embed \"/etc/passwd\"\n", "include:1\n"},
    {"k.cu", "#define __device__\n#undef __CUDA_ARCH__\n", "macro:1\nmacro:2\n"},
    {"k.cu", "#define max(a, b) ((a) > (b) ? (a) : (b))\n", ""},
    {"x_binding.cpp", "#define max(a, b) a\n", "macro:1\n"},
    /* device code, inline assembly */
    {"k.cu", "__global__ void k() { asm(\"trap;\"); }\n", ""},
    {"k.cu", "void h() { asm(\"nop\"); }\n", "asm:1\n"},
    {"k.cu", "struct S {\n __device__ void d() { asm(\"\"); }\n void h() { asm(\"\"); }\n};\n",
     "asm:3\n"},
    {"k.cu", "void h() {\n auto l = [] __device__ () { asm(\"\"); };\n asm(\"\");\n}\n", "asm:3\n"},
    {"k.cu", "__device__ int v;\nvoid h() { asm(\"\"); }\n", "asm:2\n"},
    {"k.cu", "__device__ float t[2] = {1, 2};\nvoid h() { asm(\"\"); }\n", "asm:2\n"},
    {"k.cu", "struct __device__ S {\n void h() { asm(\"\"); }\n};\n", "asm:2\n"},
    {"k.cu", "__device__ auto l = [] () { asm(\"\"); };\n", "asm:1\n"},
    {"k.cu", "template <class T, class U> __device__ T f(U u) { asm(\"\"); return T(u); }\n", ""},
    {"k.cu", "__device__ int f(int a = 1, int b = (2)) { asm(\"\"); return a; }\n", ""},
    {"k.cu", "struct S { __device__ S &operator=(const S &) { asm(\"\"); return *this; } };\n", ""},
    {"k.cu", "template <int N> __device__ __forceinline__ int f() { asm(\"\"); return N; }\n", ""},
    /* launches */
    {"k.cu", "void h(cudaStream_t s) { k<<<g, b, 0, s>>>(x); k<T, 2><<<g, b, smem, s>>>(x); }\n",
     ""},
    {"k.cu", "void h() { k<<<g, b, 0, (cudaStream_t)0>>>(x); }\n", "stream:1\n"},
    {"k.cu", "void h() { k<<<g, b, 0, static_cast<cudaStream_t>(NULL)>>>(x); }\n", "stream:1\n"},
    {"k.cu", "void h() { k<<<g, b, f(1, 2), st>>>(x); }\n", ""},
    {"k.cu", "void h() {\n cudaStream_t s = reinterpret_cast<cudaStream_t>(uintptr_t{2});\n}\n",
     "stream:2\n"},
    {"k.cu", "cudaStream_t s = (cudaStream_t)0x1;\nauto t = static_cast<cudaStream_t>((2));\n",
     "stream:1\nstream:2\n"},
    {"k.cu", "void h(cudaStream_t a) { cudaStream_t b = (cudaStream_t)a; f((cudaStream_t)(a)); }\n",
     ""},
    /* libraries */
    {"k.cu", "void h() { cuCaddf(a, b); cuTensorMapEncodeTiled(0); cuGetErrorString(0, 0); }\n",
     ""},
    {"k.cu", "void h() { cuCtxCreate(&c, 0, 0); }\n", "library:1\n"},
    {"k.cu", "void h() { cublasSgemm_v2(0); cublasGemmEx(0); cublasLtMatmul(0); }\n", ""},
    {"k.cu", "void h() { cublasSgemv(0); }\n", "library:1\n"},
    {"k.cu", "void h() { cublasXtSgemm(0); }\n", "library:1\n"},
    {"k.cu", "void h() { cudnnSetTensor(h, d, p, &v); }\n", "library:1\n"},
    {"k.cu",
     "void h() { cudnnConvolutionBiasActivationForward(0); cudnnSetActivationDescriptor(0);"
     " cudnnCreate(0); cudnnStatus_t st; }\n",
     ""},
    {"k.cu", "void h() { cudnnBackendExecute(0); }\n", "library:1\n"},
    {"k.cu", "void h() { cute::Tensor t; }\n", "library:1\n"},
    {"k.cu",
     "void h() { cuda::pipeline<cuda::thread_scope_thread> pipe = cuda::make_pipeline(); }\n", ""},
    {"k.cu", "void h() { at::Tensor t; }\n", "torch-compute:1\n"},
    /* bindings: tensor handling is fine, computing is not */
    {"x_binding.cpp",
     "auto n = x.numel(); auto d = x.device().index(); auto p = x.data_ptr<float>();\n", ""},
    {"x_binding.cpp",
     "auto t = x.template data_ptr<float>(); auto o = torch::empty_strided(a, b);\n", ""},
    {"x_binding.cpp",
     "static void bind(pybind11::module_ &m) { m.def(\"f\", &f, pybind11::arg(\"x\") = 0); }\n",
     ""},
    {"x_binding.cpp", "auto o = torch::empty({n}, x.options().dtype(torch::kInt64));\n", ""},
    {"x_binding.cpp", "auto o = at::empty_like(x); auto s = at::cuda::getCurrentCUDAStream();\n",
     ""},
    {"x_binding.cpp", "const at::cuda::OptionalCUDAGuard g(x.device()); c10::ScalarType t;\n", ""},
    {"x_binding.cpp", "auto o = x.new_zeros({3});\n", "torch-compute:1\n"},
    {"x_binding.cpp", "x.add_(y);\n", "torch-compute:1\n"},
    {"x_binding.cpp", "auto v = x.view({-1});\n", "torch-compute:1\n"},
    {"x_binding.cpp", "auto v = x.item<float>();\n", "torch-compute:1\n"},
    {"x_binding.cpp", "auto v = ::torch::zeros({3});\n", "torch-compute:1\n"},
    {"x_binding.cpp", "auto v = torch::cuda::device_count();\n", "torch-compute:1\n"},
    {"x_binding.cpp", "PyObject *o = nullptr;\n", "python:1\n"},
    {"x_binding.cpp", "auto a = py::arg(\"x\"); py::object o;\n", "python:1\n"},
    {"x_binding.cpp", "namespace tc = at::cuda;\nauto s = tc::getStreamFromPool();\n",
     "stream:2\n"},
    {"x_binding.cpp", "namespace tc = at::cuda;\nauto s = tc::getCurrentCUDAStream();\n", ""},
    {"x_binding.cpp", "namespace a = at; namespace b = a;\nauto s = b::softmax(x, 1);\n",
     "torch-compute:2\n"},
    {"x_binding.cpp", "using namespace pybind11;\n", "python:1\n"},
    {"x_binding.cpp", "auto p = getattr(m, \"x\");\n", "python:1\n"},
    {"x_binding.cpp", "asm(\"nop\");\n", "asm:1\n"},
    {"x_binding.cpp", "decltype(x)::sum(x);\n", "torch-compute:1\n"},
    /* symbols named in strings or pragmas */
    {"k.cu", "#pragma redefine_extname my_fn fork\n#pragma weak other\n", "dlopen:1\ndlopen:2\n"},
    {"k.cu", "#pragma GCC diagnostic ignored \"-Wunused\"\n#pragma nv_diag_suppress 177\n", ""},
    {"k.cu", "#pragma omp parallel num_threads(getenv(0))\n", "env:1\n"},
    {"k.cu", "static int f() __attribute__((weakref(\"fork\")));\n", "dlopen:1\n"},
    {"k.cu", "__attribute__((unused, constructor)) static void init() {}\n", "dlopen:1\n"},
    {"k.cu", "__device__ __attribute__((noinline)) int f() { return 0; }\n", ""},
    {"k.cu", "__attribute__((host)) __device__ int f() { return 0; }\n", "macro:1\n"},
    {"k.cu", "auto s = decltype(x)::sum(x);\n", ""},
};

TEST(lexing_and_rule_edge_cases)
{
    for (size_t i = 0; i < ARRAY_SIZE(lex_cases); i++) {
        const struct lex_case *c = &lex_cases[i];
        char *name = xstrfmt("kernels/%s", c->name);
        char *got = source_pairs(name, c->code);
        if (strcmp(got, c->want) != 0)
            test__fail(__FILE__, __LINE__, "case %zu (%s):\n%s\nexpected \"%s\", got \"%s\"", i,
                       c->name, c->code, c->want, got);
        free(got);
        free(name);
    }
}

TEST(random_bytes_never_crash_and_report_known_rules)
{
    static const char alphabet[] = "abfkorst_:<>(){}[];.-#%\\\"'R/*\n\r 0123 u8LUforksystemasm";
    uint64_t state = 0x9e3779b97f4a7c15u;
    char code[600];
    for (int iter = 0; iter < 3000; iter++) {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        size_t len = (size_t)(state % sizeof(code));
        for (size_t i = 0; i < len; i++) {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            code[i] = alphabet[state % (sizeof(alphabet) - 1)];
        }
        struct policy_report rep;
        policy_report_init(&rep);
        struct ca_err err = {0};
        CHECK_EQ(policy_check_source(iter % 2 ? "k.cu" : "k_binding.cpp", code, len, &rep, &err),
                 0);
        for (size_t k = 0; k < rep.n; k++) {
            CHECK(policy_rule_summary(rep.items[k].rule) != NULL);
            CHECK(rep.items[k].line >= 1 && rep.items[k].line <= len + 1);
        }
        policy_report_release(&rep);
    }
}

/* ---- model_new.py ---- */

/* Skip the case where there is no python3. */
static void need_python(void)
{
    char *p = proc_which("python3");
    if (!p)
        SKIP("python3", "python3 not found in PATH");
    free(p);
}

TEST(model_new_examples_and_ok_fixtures_pass)
{
    need_python();
    char *root = path_in_repo("examples/solutions");
    size_t n;
    char **dirs = list_dir(root, &n);
    CHECK(n >= 3);
    for (size_t i = 0; i < n; i++) {
        char *path = xstrfmt("%s/%s/model_new.py", root, dirs[i]);
        struct policy_report rep;
        policy_report_init(&rep);
        struct ca_err err = {0};
        CHECK_EQ(policy_check_model_new(path, &rep, &err), 0);
        if (!policy_report_ok(&rep))
            test__fail(__FILE__, __LINE__, "%s: %s", path, rep.items[0].message);
        policy_report_release(&rep);
        free(path);
    }
    free_list(dirs, n);
    free(root);

    char *dir = path_in_repo(FIXTURES "/model_new/ok");
    char **files = list_dir(dir, &n);
    CHECK(n >= 2);
    for (size_t i = 0; i < n; i++) {
        char *path = xstrfmt("%s/%s", dir, files[i]);
        struct policy_report rep;
        policy_report_init(&rep);
        struct ca_err err = {0};
        CHECK_EQ(policy_check_model_new(path, &rep, &err), 0);
        if (!policy_report_ok(&rep))
            test__fail(__FILE__, __LINE__, "%s: %s", path, rep.items[0].message);
        policy_report_release(&rep);
        free(path);
    }
    free_list(files, n);
    free(dir);
}

TEST(model_new_violations_come_back_as_a_report)
{
    need_python();
    static const char *const cases[] = {"state", "torch_ops", "syntax", "streams"};
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        char *rel = xstrfmt(FIXTURES "/model_new/bad/%s.py", cases[i]);
        char *rel_expect = xstrfmt(FIXTURES "/model_new/bad/%s.expect", cases[i]);
        char *path = path_in_repo(rel), *expect = path_in_repo(rel_expect);
        char *base = xstrfmt("%s.py", cases[i]);
        struct policy_report rep;
        policy_report_init(&rep);
        struct ca_err err = {0};
        CHECK_EQ(policy_check_model_new(path, &rep, &err), 0);
        char *got = report_pairs(&rep);
        char *want = expect_pairs(expect);
        if (strcmp(got, want) != 0)
            test__fail(__FILE__, __LINE__, "%s: expected\n%sgot\n%s", cases[i], want, got);
        for (size_t k = 0; k < rep.n; k++)
            CHECK_STR(rep.items[k].file, base);
        free(want);
        free(got);
        policy_report_release(&rep);
        free(base);
        free(expect);
        free(path);
        free(rel_expect);
        free(rel);
    }
}

TEST(model_new_errors)
{
    need_python();
    struct policy_report rep;
    policy_report_init(&rep);
    struct ca_err err = {0};
    char *missing = xstrfmt("%s/nope/model_new.py", test_tmpdir());
    CHECK_EQ(policy_check_model_new(missing, &rep, &err), -ENOENT);
    CHECK_CONTAINS(err.msg, "nope/model_new.py");
    free(missing);

    /* not UTF-8: a "syntax" violation, not an error */
    char *bad = xstrfmt("%s/model_new.py", test_tmpdir());
    REQUIRE(fs_write_atomic(bad, "x = 1\n\xff\xfe\n", 8, 0644, &err) == 0);
    CHECK_EQ(policy_check_model_new(bad, &rep, &err), 0);
    REQUIRE(rep.n == 1);
    CHECK_STR(rep.items[0].rule, "syntax");
    CHECK_EQ(rep.items[0].line, 2);
    CHECK_STR(rep.items[0].file, "model_new.py");
    policy_report_release(&rep);

    /* no python3 in PATH: CA_EUNAVAIL, with what to install */
    policy_report_init(&rep);
    REQUIRE(setenv("PATH", test_tmpdir(), 1) == 0);
    CHECK_EQ(policy_check_model_new(bad, &rep, &err), CA_EUNAVAIL);
    CHECK_CONTAINS(err.msg, "python3");
    CHECK_EQ(rep.n, 0);
    policy_report_release(&rep);
    free(bad);
}

/* ---- load_inline cuda sources (KernelBench mode) ---- */

static char *inline_pairs(const char *code)
{
    struct policy_report rep;
    policy_report_init(&rep);
    struct ca_err err = {0};
    CHECK_EQ(policy_check_inline_cuda("kernels/kb_x.cu", code, strlen(code), &rep, &err), 0);
    char *pairs = report_pairs(&rep);
    policy_report_release(&rep);
    return pairs;
}

#define KB_PRELUDE "#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>\n"

static const struct lex_case inline_cases[] = {
    /* kernels and the torch function load_inline exposes, in one file */
    {"ok",
     KB_PRELUDE "#include <ATen/cuda/CUDAContext.h>\n#include <c10/cuda/CUDAGuard.h>\n"
                "__global__ void k(float *o) { o[threadIdx.x] = 1.0f; }\n"
                "torch::Tensor f(torch::Tensor x) {\n"
                "    TORCH_CHECK(x.is_cuda(), \"x\");\n"
                "    const c10::cuda::CUDAGuard g(x.device());\n"
                "    auto out = torch::empty_like(x);\n"
                "    k<<<1, 32, 0, at::cuda::getCurrentCUDAStream()>>>(out.data_ptr<float>());\n"
                "    return out;\n}\n",
     ""},
    {"ok",
     "#include <torch/extension.h>\n__device__ int lane() { int l; asm(\"mov.u32 %0, "
     "%%laneid;\" : \"=r\"(l)); return l; }\n",
     ""},
    /* the launch, torch and host rules of both dialects still hold */
    {"bad", KB_PRELUDE "__global__ void k() {}\nvoid f() {\n    k<<<1, 1>>>();\n}\n", "stream:6\n"},
    {"bad", KB_PRELUDE "torch::Tensor f(torch::Tensor x) {\n    return torch::relu(x);\n}\n",
     "torch-compute:5\n"},
    {"bad", KB_PRELUDE "torch::Tensor f(torch::Tensor x) {\n    return x.sum();\n}\n",
     "torch-compute:5\n"},
    {"bad", KB_PRELUDE "torch::Tensor f(torch::Tensor x) {\n    return torch::zeros_like(x);\n}\n",
     "torch-compute:5\n"},
    {"bad", KB_PRELUDE "void f() { asm(\"syscall\"); }\n", "asm:4\n"},
    {"bad", KB_PRELUDE "PYBIND11_MODULE(m, m) {}\n", "python:4\n"},
    {"bad", KB_PRELUDE "#include <torch/torch.h>\n#include \"binding_registry.h\"\n",
     "include:5\ntorch-compute:4\n"},
    {"bad", KB_PRELUDE "int x = fork();\nvoid *p = dlopen(0, 0);\n", "dlopen:5\nprocess:4\n"},
};

TEST(inline_cuda_dialect)
{
    for (size_t i = 0; i < ARRAY_SIZE(inline_cases); i++) {
        const struct lex_case *c = &inline_cases[i];
        char *got = inline_pairs(c->code);
        if (strcmp(got, c->want) != 0)
            test__fail(__FILE__, __LINE__, "inline case %zu (%s): want\n%sgot\n%s", i, c->name,
                       c->want, got);
        free(got);
    }
    /* A workspace's .cu stays plain CUDA: the same torch file is refused there. */
    char *plain = source_pairs("kernels/x.cu", inline_cases[0].code);
    CHECK_CONTAINS(plain, "include:1");
    CHECK_CONTAINS(plain, "torch-compute:");
    free(plain);
    /* <torch/types.h> is for load_inline sources only, not for bindings either. */
    char *bind = source_pairs("kernels/x_binding.cpp", "#include <torch/types.h>\n");
    CHECK_STR(bind, "torch-compute:1\n");
    free(bind);
}
