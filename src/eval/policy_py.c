/*
 * policy_py.c - the static policy for model_new.py: runs the embedded
 * harness/policy_model_new.py and reads its verdict into a report.
 *
 * Python's own parser is the only one that reads Python exactly as Python does, so the rules
 * live in a Python script (standard library only, no torch needed) that walks the syntax tree.
 * The script comes from the binary, never from a path the agent could write, and runs as
 * `python3 -I -S -B - PATH`: isolated from PYTHON* variables and user site-packages, without
 * site, without writing bytecode. It prints {"violations": [{"line", "rule", "message"}...]} and
 * exits 0, or 2 when the file does not parse (with a "syntax" violation) or cannot be read.
 * Anything else (a crash, a timeout, output that is not that JSON, a rule id this side does not
 * know) is an error: the verdict of a broken checker must not pass as "no violations".
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

#define SCRIPT "harness/policy_model_new.py"
#define TIMEOUT_MS 20000
/* The script caps itself at POLICY_MAX_VIOLATIONS messages of a few hundred bytes. */
#define OUT_MAX (1 * CA_MIB)
#define ERR_MAX (64 * CA_KIB)
/* Exit status of the script for a file that does not parse or cannot be read. */
#define EXIT_INPUT 2

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
    /* The script counts what it cut without knowing which would have been notes: treat them as
     * violations (a cut verdict must not pass). */
    if (truncated > 0)
        rep->dropped += (size_t)truncated;
out:
    json_decref(root);
    return rc;
}

int policy_check_model_new(const char *path, struct policy_report *rep, struct ca_err *err)
{
    const struct embedded_file *script = embed_find(SCRIPT);
    if (!script)
        BUG("%s is not embedded in the binary", SCRIPT);
    if (!fs_is_file(path))
        return err_setf(err, -ENOENT, "%s: no such file", path);
    char *python = proc_which("python3");
    if (!python)
        return err_setf(err, CA_EUNAVAIL,
                        "%s: checking model_new.py needs python3, which is not in PATH (install "
                        "python3; the check uses only its standard library)",
                        path);
    const char *argv[] = {python, "-I", "-S", "-B", "-", "--rules", policy_rules_name(rep->rules),
                          path,   NULL};
    struct proc_opts opts = {
        .argv = argv,
        .stdin_data = script->data,
        .stdin_len = script->len,
        .out_max = OUT_MAX,
        .err_max = ERR_MAX,
        .timeout_ms = TIMEOUT_MS,
    };
    struct proc_result res;
    proc_result_init(&res);
    enum policy_basis saved = rep->basis;
    rep->basis = POLICY_BASIS_MODEL_NEW;
    int rc = proc_run(&opts, &res, err);
    if (rc) {
        err_prefix(err, "%s: cannot run python3", path);
        goto out;
    }
    struct sv why = last_line(&res.err);
    if (res.timed_out) {
        rc = err_setf(err, CA_ETIMEOUT, "%s: the model_new.py check ran past %d s", path,
                      TIMEOUT_MS / 1000);
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
    free(python);
    return rc;
}
