/*
 * policy_py.c - the static policy for model_new.py: runs the embedded Python policy
 * (harness/policy/, started by harness/policy_model_new.py) and reads its verdict into a report.
 *
 * Python's own parser is the only one that reads Python exactly as Python does, so the rules
 * live in Python (standard library only, no torch needed) that walks the syntax tree. The code
 * comes from the binary, never from a path the agent could write, and runs as
 * `python3 -I -S -B - PATH`: isolated from PYTHON* variables and user site-packages, without
 * site, without writing bytecode. The policy is several files (one idea each), yet python3 reads
 * one program on stdin: the loader harness/policy_model_new.py followed by one call,
 * run({path: source, ...}), holding every embedded file of harness/policy/ as a bytes literal; the
 * loader imports them from those strings, never from disk (its comment says why). It prints
 * {"violations": [{"line", "rule", "message"}...]} and exits 0, or 2 when the file does not
 * parse (with a "syntax" violation) or cannot be read, or 3 when the policy's own code does not
 * load. Anything but 0 and 2 (a broken policy, a crash, a timeout, output that is not that JSON,
 * a rule id this side does not know) is an error: the verdict of a broken checker must not pass
 * as "no violations", nor be blamed on the candidate.
 */
#include "eval/policy.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "core/embed.h"
#include "core/fs.h"
#include "core/json.h"
#include "core/proc.h"
#include "core/sv.h"
#include "eval/policy_internal.h"
#include "core/banned.h"

#define LOADER "harness/policy_model_new.py"
#define PACKAGE_DIR "harness/policy/"
/* The program is the policy's own sources (about 80 KiB, escaping included): the cap
 * only catches a build that embeds something it should not. */
#define PROGRAM_MAX (1 * CA_MIB)
#define TIMEOUT_MS 20000
/* The policy caps itself at MAX_VIOLATIONS (policy/answer.py) messages of a few hundred
 * bytes. */
#define OUT_MAX (1 * CA_MIB)
#define ERR_MAX (64 * CA_KIB)
/* Exit status of the policy for a file that does not parse or cannot be read. */
#define EXIT_INPUT 2
/* Exit status of the loader when a source of the policy does not compile or import. */
#define EXIT_BROKEN 3

/* Append data[0..len) as a Python bytes literal: printable ASCII as it is (backslash and quote
 * escaped), newlines as \n, any other byte as \xNN. */
static int add_bytes_literal(struct buf *b, const char *data, size_t len)
{
    int rc = buf_addstr(b, "b\"");
    for (size_t i = 0; rc == 0 && i < len; i++) {
        unsigned char c = (unsigned char)data[i];
        if (c == '\\' || c == '"')
            rc = buf_addf(b, "\\%c", c);
        else if (c == '\n')
            rc = buf_addstr(b, "\\n");
        else if (c >= 0x20 && c < 0x7f)
            rc = buf_addch(b, (char)c);
        else
            rc = buf_addf(b, "\\x%02x", c);
    }
    return rc ? rc : buf_addch(b, '"');
}

static bool in_package(const char *path)
{
    size_t n = strlen(path), dir = strlen(PACKAGE_DIR);
    return n > dir + 3 && strncmp(path, PACKAGE_DIR, dir) == 0 && strcmp(path + n - 3, ".py") == 0;
}

/* The program python3 reads on stdin: the loader, then run({path: source, ...}) with those of
 * files[0..n) that lie under harness/policy/. */
static int build_program(const struct embedded_file *files, size_t n, struct buf *out,
                         struct ca_err *err)
{
    const struct embedded_file *loader = embed_find(LOADER);
    if (!loader)
        BUG("%s is not embedded in the binary", LOADER);
    size_t count = 0;
    int rc = buf_add(out, loader->data, loader->len);
    if (!rc)
        rc = buf_addstr(out, "\nrun({\n");
    for (size_t i = 0; rc == 0 && i < n; i++) {
        if (!in_package(files[i].path))
            continue;
        rc = add_bytes_literal(out, files[i].path, strlen(files[i].path));
        if (!rc)
            rc = buf_addstr(out, ": ");
        if (!rc)
            rc = add_bytes_literal(out, files[i].data, files[i].len);
        if (!rc)
            rc = buf_addstr(out, ",\n");
        count++;
    }
    if (!rc)
        rc = buf_addstr(out, "})\n");
    if (rc)
        return err_setf(err, rc,
                        "the model_new.py policy's program is over %zu bytes (raise "
                        "PROGRAM_MAX in src/eval/policy_py.c)",
                        (size_t)PROGRAM_MAX);
    if (count == 0)
        BUG("no %s*.py is embedded in the binary", PACKAGE_DIR);
    return 0;
}

static struct sv last_line(const struct buf *b)
{
    struct sv s = sv_rtrim(sv_from(b->data, b->len));
    size_t i = s.len;
    while (i > 0 && s.p[i - 1] != '\n')
        i--;
    return sv_trim(sv_sub(s, i, s.len - i));
}

static int read_verdict(const char *path, const struct buf *out, struct policy_report *rep,
                        struct ca_err *err)
{
    json_t *root;
    int rc = jsonx_parse(sv_from(out->data, out->len), OUT_MAX, "policy_model_new.py's answer",
                         &root, err);
    if (rc)
        return rc;
    json_t *arr = NULL;
    int64_t truncated = 0;
    if (!json_is_object(root)) {
        rc = err_setf(err, CA_EPARSE,
                      "policy_model_new.py answered something other than an "
                      "object");
        goto out;
    }
    rc = jsonx_get_array(root, "violations", true, &arr, "policy_model_new.py's answer", err);
    if (!rc)
        rc = jsonx_get_int(root, "truncated", false, &truncated, "policy_model_new.py's answer",
                           err);
    if (rc)
        goto out;
    const char *file = policy__basename(path);
    size_t i;
    json_t *v;
    json_array_foreach(arr, i, v)
    {
        int64_t line = 0;
        const char *rule = NULL, *message = NULL;
        bool advisory = json_is_true(json_object_get(v, "advisory"));
        rc = jsonx_get_int(v, "line", true, &line, "a violation", err);
        if (!rc)
            rc = jsonx_get_str(v, "rule", true, &rule, "a violation", err);
        if (!rc)
            rc = jsonx_get_str(v, "message", true, &message, "a violation", err);
        if (rc)
            goto out;
        if (!policy_rule_summary(rule)) {
            rc = err_setf(err, CA_EPARSE, "policy_model_new.py reported an unknown rule \"%s\"",
                          rule);
            goto out;
        }
        if (line < 0 || line > (int64_t)UINT32_MAX)
            line = 0;
        if (advisory)
            policy_report_add_note(rep, file, (unsigned)line, rule, message);
        else
            policy_report_addf(rep, file, (unsigned)line, rule, "%s", message);
    }
    /* The policy counts what it cut without knowing which would have been notes: treat them as
     * violations (a cut verdict must not pass). */
    if (truncated > 0)
        rep->dropped += (size_t)truncated;
out:
    json_decref(root);
    return rc;
}

int policy__check_model_new_with(const struct embedded_file *files, size_t n, const char *path,
                                 struct policy_report *rep, struct ca_err *err)
{
    if (!fs_is_file(path))
        return err_setf(err, -ENOENT, "%s: no such file", path);
    char *python = proc_which("python3");
    if (!python)
        return err_setf(err, CA_EUNAVAIL,
                        "%s: checking model_new.py needs python3, which is not in PATH (install "
                        "python3; the check uses only its standard library)",
                        path);
    struct buf program;
    buf_init(&program, PROGRAM_MAX);
    struct proc_result res;
    proc_result_init(&res);
    enum policy_basis saved = rep->basis;
    rep->basis = POLICY_BASIS_MODEL_NEW;
    int rc = build_program(files, n, &program, err);
    if (rc)
        goto out;
    const char *argv[] = {python, "-I", "-S", "-B", "-", "--rules", policy_rules_name(rep->rules),
                          path,   NULL};
    struct proc_opts opts = {
        .argv = argv,
        .stdin_data = program.data,
        .stdin_len = program.len,
        .out_max = OUT_MAX,
        .err_max = ERR_MAX,
        .timeout_ms = TIMEOUT_MS,
    };
    rc = proc_run(&opts, &res, err);
    if (rc) {
        err_prefix(err, "%s: cannot run python3", path);
        goto out;
    }
    struct sv why = last_line(&res.err);
    if (res.timed_out) {
        rc = err_setf(err, CA_ETIMEOUT, "%s: the model_new.py check ran past %d s", path,
                      TIMEOUT_MS / 1000);
    } else if (!res.signaled && res.exit_code == EXIT_BROKEN) {
        rc = err_setf(err, CA_ECHILD,
                      "%s: not checked: the evaluator's model_new.py policy does not load (a bug "
                      "in cuda-agent, not in model_new.py): " SV_FMT,
                      path, SV_ARG(why));
    } else if (res.signaled || (res.exit_code != 0 && res.exit_code != EXIT_INPUT) ||
               res.out_truncated) {
        struct buf how;
        buf_init(&how, CA_ERR_MSG_MAX);
        if (proc_describe(&res, TIMEOUT_MS, &how))
            buf_reset(&how);
        rc = err_setf(err, CA_ECHILD, "%s: the model_new.py check failed (%s%s): " SV_FMT, path,
                      how.data, res.out_truncated ? ", output over its limit" : "", SV_ARG(why));
        buf_release(&how);
    } else if (res.exit_code == EXIT_INPUT && res.out.len == 0) {
        rc = err_setf(err, CA_EPARSE, "%s: " SV_FMT, path, SV_ARG(why));
    } else {
        rc = read_verdict(path, &res.out, rep, err);
        if (rc)
            err_prefix(err, "%s", path);
    }
out:
    rep->basis = saved;
    proc_result_release(&res);
    buf_release(&program);
    free(python);
    return rc;
}

int policy_check_model_new(const char *path, struct policy_report *rep, struct ca_err *err)
{
    return policy__check_model_new_with(embedded_files, embedded_files_count, path, rep, err);
}
