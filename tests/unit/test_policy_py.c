/*
 * test_policy_py.c - the model_new.py policy is several Python files (harness/policy/) that the
 * evaluator runs from memory: the files embedded are what runs (a rule worded in a second file
 * changes when that file does), any byte of a source survives the trip, a source that does not
 * load is the evaluator's error and never a verdict on the candidate, and files in the working
 * directory are never imported. Runs python3 (skipped without it).
 */
#include "test.h"

#include <errno.h>
#include <unistd.h>

#include "core/embed.h"
#include "core/fs.h"
#include "core/proc.h"
#include "core/util.h"
#include "eval/policy.h"
#include "eval/policy_internal.h"

#define VOCAB "harness/policy/vocab.py"

static void need_python(void)
{
    char *p = proc_which("python3");
    if (!p)
        SKIP("python3", "python3 not found in PATH");
    free(p);
}

static char *write_model_new(const char *code)
{
    char *path = xstrfmt("%s/model_new.py", test_tmpdir());
    struct ca_err err = {0};
    REQUIRE(fs_write_atomic(path, code, strlen(code), 0644, &err) == 0);
    return path;
}

/* The embedded files with the one at `path` given `data` instead (borrowed). */
static struct embedded_file *embedded_but(const char *path, const char *data)
{
    struct embedded_file *files = xcalloc(embedded_files_count, sizeof(*files));
    bool found = false;
    for (size_t i = 0; i < embedded_files_count; i++) {
        files[i] = embedded_files[i];
        if (strcmp(files[i].path, path) == 0) {
            files[i].data = data;
            files[i].len = strlen(data);
            found = true;
        }
    }
    REQUIRE(found);
    return files;
}

TEST(policy_is_several_embedded_files)
{
    static const char *const parts[] = {"check", "structure", "values", "vocab", "answer"};
    for (size_t i = 0; i < ARRAY_SIZE(parts); i++) {
        char *path = xstrfmt("harness/policy/%s.py", parts[i]);
        if (!embed_find(path))
            test__fail(__FILE__, __LINE__, "%s is not embedded", path);
        free(path);
    }
    CHECK(embed_find("harness/policy_model_new.py") != NULL);
}

TEST(a_rule_worded_in_a_second_file_fires_with_that_file)
{
    need_python();
    /* The import rule (structure.py) ends its message with vocab.py's hint. */
    const struct embedded_file *vocab = embed_find(VOCAB);
    REQUIRE(vocab != NULL);
    char *altered = xstrfmt("%s\nALLOWED_HINT = \"the hint of the second file\"\n", vocab->data);
    struct embedded_file *files = embedded_but(VOCAB, altered);
    char *path = write_model_new("import os\n");
    struct policy_report rep;
    policy_report_init(&rep);
    struct ca_err err = {0};
    CHECK_EQ(policy__check_model_new_with(files, embedded_files_count, path, &rep, &err), 0);
    REQUIRE(policy_report_has(&rep, "import"));
    bool seen = false;
    for (size_t i = 0; i < rep.n; i++)
        seen |= !strcmp(rep.items[i].rule, "import") && rep.items[i].line == 1 &&
                strstr(rep.items[i].message, "the hint of the second file") != NULL;
    CHECK(seen);
    policy_report_release(&rep);

    /* The embedded vocab.py gives the real hint. */
    policy_report_init(&rep);
    CHECK_EQ(policy_check_model_new(path, &rep, &err), 0);
    CHECK(policy_report_has(&rep, "import"));
    for (size_t i = 0; i < rep.n; i++)
        CHECK(strstr(rep.items[i].message, "second file") == NULL);
    policy_report_release(&rep);
    free(path);
    free(files);
    free(altered);
}

TEST(every_byte_of_a_policy_source_arrives)
{
    need_python();
    /* A two-file stand-in for the policy whose second file holds quotes, backslashes, a tab, a
     * line ending in CR LF and UTF-8; its message must come back as written. */
    static const char check[] = "import json\n"
                                "from policy.extra import MESSAGE\n"
                                "\n"
                                "\n"
                                "def main(argv):\n"
                                "    print(json.dumps({'violations': [\n"
                                "        {'line': 7, 'rule': 'fallback', 'message': MESSAGE}]}))\n";
    static const char extra[] = "MESSAGE = 'q\"\\\\ \\'x\\' \\u00e9' + \"\t|\" + "
                                "'\xc3\xa9'  # \"\"\" \\\r\n";
    const struct embedded_file files[] = {
        {"harness/policy/check.py", check, sizeof(check) - 1, 0},
        {"harness/policy/extra.py", extra, sizeof(extra) - 1, 0},
    };
    char *path = write_model_new("x = 1\n");
    struct policy_report rep;
    policy_report_init(&rep);
    struct ca_err err = {0};
    int rc = policy__check_model_new_with(files, ARRAY_SIZE(files), path, &rep, &err);
    if (rc)
        test__fail(__FILE__, __LINE__, "%s", err.msg);
    REQUIRE(rep.n == 1);
    CHECK_EQ(rep.items[0].line, 7);
    CHECK_STR(rep.items[0].rule, "fallback");
    CHECK_STR(rep.items[0].message, "q\"\\ 'x' \xc3\xa9\t|\xc3\xa9");
    policy_report_release(&rep);
    free(path);
}

TEST(a_broken_policy_file_is_an_evaluator_error)
{
    need_python();
    static const char *const cases[][3] = {
        {"harness/policy/values.py", "def broken(:\n", "SyntaxError"},
        {"harness/policy/structure.py", "raise RuntimeError('no structure today')\n",
         "RuntimeError: no structure today"},
    };
    /* a file the policy would fault: the verdict must not be blamed on it */
    char *path = write_model_new("import os\n");
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        struct embedded_file *files = embedded_but(cases[i][0], cases[i][1]);
        struct policy_report rep;
        policy_report_init(&rep);
        struct ca_err err = {0};
        CHECK_EQ(policy__check_model_new_with(files, embedded_files_count, path, &rep, &err),
                 CA_ECHILD);
        CHECK_CONTAINS(err.msg, "the evaluator's model_new.py policy does not load");
        CHECK_CONTAINS(err.msg, "not in model_new.py");
        char *where = xstrfmt("): %s line 1: ", cases[i][0]);
        CHECK_CONTAINS(err.msg, where);
        CHECK_CONTAINS(err.msg, cases[i][2]);
        CHECK_EQ(rep.n, 0);
        free(where);
        policy_report_release(&rep);
        free(files);
    }
    free(path);
}

TEST(files_in_the_working_directory_are_not_the_policy)
{
    need_python();
    /* A package named like the policy's, where python3 starts: importing it would exit 0 with
     * no answer, an error; the embedded policy's verdict must come back instead. */
    char *dir = xstrfmt("%s/policy", test_tmpdir());
    struct ca_err err = {0};
    REQUIRE(fs_mkdirs(dir, 0755, &err) == 0);
    static const char *const names[] = {"__init__.py", "check.py", "vocab.py"};
    for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
        char *p = xstrfmt("%s/%s", dir, names[i]);
        REQUIRE(fs_write_atomic(p, "raise SystemExit(0)\n", 20, 0644, &err) == 0);
        free(p);
    }
    REQUIRE(chdir(test_tmpdir()) == 0);
    char *path = write_model_new("import os\n");
    struct policy_report rep;
    policy_report_init(&rep);
    int rc = policy_check_model_new(path, &rep, &err);
    if (rc)
        test__fail(__FILE__, __LINE__, "%s", err.msg);
    CHECK(policy_report_has(&rep, "import"));
    policy_report_release(&rep);
    free(path);
    free(dir);
}
