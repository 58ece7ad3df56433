/*
 * eval.c - the evaluation pipeline: snapshot → static policy → compile →
 * harness (verify, time) → reward. Each stage adds its section to the
 * report; the first failing stage sets report.stage and ends the run with
 * reward -1. Stage failures are the agent's result; only the evaluator's
 * own inability to run (no compiler, no Python) is an error of eval_run.
 */
#include "eval/eval.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/fs.h"
#include "core/hash.h"
#include "core/json.h"
#include "core/limits.h"
#include "core/log.h"
#include "core/proc.h"
#include "core/sv.h"
#include "eval/compile.h"
#include "eval/gpupool.h"
#include "eval/eval_internal.h"
#include "eval/eval_report.h"
#include "eval/policy.h"
#include "eval/reward.h"
#include "task/task.h"
#include "workspace/workspace.h"
#include "core/banned.h"

#define HARNESS_SLACK_MS 60000

const char *const eval_stop_names[] = {"full", "policy", "compile", "verify", NULL};

const char *eval_python(void)
{
    const char *p = getenv("CUDA_AGENT_PYTHON");
    return p && *p ? p : "python3";
}

const char *eval_timing(const struct eval_opts *o)
{
    if (o->timing)
        return o->timing;
    bool kernelbench = o->rules && strcmp(o->rules, "kernelbench") == 0;
    bool cpu = o->device && strcmp(o->device, "cpu") == 0;
    return kernelbench || cpu ? "events" : "device";
}

static char self_exe[CA_LIMIT_PATH];

static void find_self_exe(void)
{
    ssize_t n = readlink("/proc/self/exe", self_exe, sizeof(self_exe) - 1);
    self_exe[n > 0 ? n : 0] = '\0';
}

const char *eval_sandbox_bin(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, find_self_exe);
    return self_exe[0] ? self_exe : NULL;
}

int eval_cache_root(const struct eval_opts *o, struct buf *out, struct ca_err *err)
{
    int rc = o->cache_dir ? (buf_addstr(out, o->cache_dir) ? CA_ETOOBIG : 0)
                          : fs_cache_dir(out, NULL, err);
    if (rc == CA_ETOOBIG)
        return err_setf(err, rc, "cache path too long");
    if (rc || (rc = fs_mkdirs(out->data, 0700, err)))
        return rc;
    /* Absolute: the harness runs in a directory of its own, where a relative cache path
     * (--cache-dir runs/cache, CUDA_AGENT_CACHE_DIR=cache) would name nothing. */
    char *real = realpath(out->data, NULL);
    if (!real)
        return err_setf(err, -errno, "cache directory '%s': %s", out->data, strerror(errno));
    buf_reset(out);
    rc = buf_addstr(out, real);
    free(real);
    return rc ? err_setf(err, CA_ETOOBIG, "cache path too long") : 0;
}

/* The compile options of an evaluation: the compile cache lives under the same root, so
 * --cache-dir moves both. */
static void compile_opts_for(const struct eval_opts *o, const char *cache, struct compile_opts *co,
                             struct buf *ccache)
{
    compile_opts_init(co);
    if (fs_join(ccache, cache, "compile") == 0)
        co->cache_dir = ccache->data;
    co->arch = o->arch;
    co->use_sandbox = !o->no_sandbox;
    /* Slow machines (CI on two cores) need longer than the default per compiler run. */
    const char *t = getenv("CUDA_AGENT_COMPILE_TIMEOUT");
    int64_t sec;
    struct ca_err terr = {0};
    if (t && *t) {
        if (sv_parse_range(sv_cstr(t), 1, 3600, &sec, "CUDA_AGENT_COMPILE_TIMEOUT (seconds)",
                           &terr) == 0)
            co->timeout_ms = sec * 1000;
        else
            LOG_WARN("%s: the default compile timeout stays", terr.msg);
    }
    /* Cutting KernelBench sources in two is an accelerator; "0" turns it off, to measure
     * against (bench/kb_compile.sh). */
    const char *split = getenv("CUDA_AGENT_COMPILE_SPLIT");
    if (split && strcmp(split, "0") == 0)
        co->use_split = false;
}

int eval_warm(const struct eval_opts *o, struct ca_err *err)
{
    struct buf cache, ccache;
    buf_init(&cache, CA_LIMIT_PATH);
    buf_init(&ccache, CA_LIMIT_PATH);
    int rc = eval_cache_root(o, &cache, err);
    if (rc == 0) {
        struct compile_opts co;
        compile_opts_for(o, cache.data, &co, &ccache);
        rc = compile_warm(&co, err);
    }
    buf_release(&cache);
    buf_release(&ccache);
    return rc;
}

int eval_task_code(const struct eval_opts *o, struct buf *code, json_t **task_json,
                   struct ca_err *err)
{
    struct buf path;
    buf_init(&path, CA_LIMIT_PATH);
    int rc = 0;
    *task_json = NULL;
    if (o->task_ref) {
        struct task_set set;
        const struct task *t;
        task_set_init(&set);
        rc = task_resolve(o->task_ref, &set, &t, err);
        if (rc == 0)
            rc = buf_add(code, t->code, t->code_len);
        if (rc == 0)
            *task_json = task_to_json(t, false);
        task_set_release(&set);
    } else {
        json_t *check = NULL;
        rc = workspace_check(o->workspace, &check, err);
        if (rc == 0 && json_array_size(json_object_get(check, "problems")) > 0) {
            json_t *first = json_array_get(json_object_get(check, "problems"), 0);
            rc = err_setf(err, CA_EPARSE,
                          "the workspace's read-only files were changed (%s); "
                          "the evaluator will not use them",
                          json_string_value(first));
        }
        if (rc == 0) {
            *task_json = json_incref(json_object_get(check, "task"));
            rc = fs_join(&path, o->workspace, "model.py");
            if (rc == 0)
                rc = fs_read_file(path.data, CA_LIMIT_TASK_BYTES, code, err);
        }
        json_decref(check);
    }
    buf_release(&path);
    if (rc) {
        json_decref(*task_json);
        *task_json = NULL;
    }
    return rc;
}

/* model.py of the workspace, if its content still matches the manifest (or the task given). */
static int take_task(const struct eval_opts *o, const char *snap, json_t *report,
                     struct ca_err *err)
{
    struct buf path, code;
    buf_init(&path, CA_LIMIT_PATH);
    buf_init(&code, CA_LIMIT_TASK_BYTES);
    json_t *task = NULL;
    int rc = eval_task_code(o, &code, &task, err);
    if (rc == 0 && task)
        json_object_set_new(report, "task", task);
    if (rc == 0 && (rc = fs_join(&path, snap, "model.py")) == 0)
        rc = fs_write_atomic(path.data, code.data, code.len, 0644, err);
    buf_release(&path);
    buf_release(&code);
    return rc;
}

/*
 * KernelBench mode: the file's load_inline sources, extracted into a staging directory, then
 * snapshotted from there like a workspace's files (same names, limits and checks). A file that
 * cannot be extracted sets *rejected and the report's message; that is the candidate's result.
 */
static int take_kernelbench(const struct eval_opts *o, const char *cache, const char *snap,
                            json_t *report, json_t **files, json_t **lines, bool *rejected,
                            struct ca_err *err)
{
    struct buf base, dir;
    buf_init(&base, CA_LIMIT_PATH);
    buf_init(&dir, CA_LIMIT_PATH);
    json_t *summary = NULL, *problem = NULL;
    const char *file = o->kernelbench_file;
    int rc = buf_addf(&base, "%s/runs/kernelbench", cache)
                 ? err_setf(err, CA_ETOOBIG, "cache path too long")
                 : fs_mkdtemp_beside(base.data, &dir, err);
    if (rc == 0)
        rc = eval__kernelbench_extract(file, dir.data, &summary, &problem, err);
    if (rc == 0 && problem) {
        *rejected = true;
        json_int_t line = json_integer_value(json_object_get(problem, "line"));
        const char *msg = json_string_value(json_object_get(problem, "message"));
        json_object_set_new(report, "kernelbench",
                            json_pack("{s:s, s:O}", "file", file, "error", problem));
        json_object_set_new(report, "message",
                            line > 0 ? json_sprintf("%s:%lld: %s", file, (long long)line, msg)
                                     : json_sprintf("%s: %s", file, msg));
    } else if (rc == 0) {
        rc = eval_snapshot(dir.data, snap, files, err);
        json_t *modules = json_object_get(summary, "modules");
        json_object_set_new(report, "kernelbench",
                            json_pack("{s:s, s:O, s:O, s:O}", "file", file, "name",
                                      json_object_get(json_array_get(modules, 0), "name"),
                                      "functions", json_object_get(summary, "functions"), "modules",
                                      modules));
        *lines = json_incref(json_object_get(summary, "lines"));
    }
    json_decref(summary);
    json_decref(problem);
    if (dir.len) {
        struct ca_err ignored;
        if (fs_remove_tree(dir.data, &ignored))
            LOG_WARN("could not remove %s: %s", dir.data, ignored.msg);
    }
    buf_release(&base);
    buf_release(&dir);
    return rc;
}

/* The compiler's diagnostics as the report's message; a KernelBench file's placed in it too. */
static void compile_message(json_t *report, const struct compile_report *cr,
                            const struct eval_opts *o, json_t *kb_lines)
{
    struct sv log = sv_from(cr->errors.data, cr->errors.len);
    struct buf placed;
    buf_init(&placed, 2 * cr->errors.len + CA_LIMIT_PATH * COMPILE_ERROR_LINES + 1);
    if (kb_lines && eval__kernelbench_place_log(log, o->kernelbench_file, kb_lines, &placed) == 0)
        log = sv_from(placed.data, placed.len);
    json_object_set_new(report, "message", json_stringn(log.p, log.len));
    buf_release(&placed);
}

/*
 * The source and model_new.py checks, into pr (the caller's: its notes come back when the built
 * object is judged). Names read in sources are notes; syntax and model_new.py findings decide.
 */
static bool run_policy(const char *snap, const json_t *files, const struct eval_opts *o,
                       json_t *kb_lines, struct policy_report *pr_out, json_t *report,
                       struct ca_err *err, int *rc_out)
{
    bool inline_cuda = o->kernelbench_file != NULL;
    struct policy_report *pr = pr_out;
    int rc = 0;
    size_t i;
    json_t *v;
    struct buf path, code;
    buf_init(&path, CA_LIMIT_PATH);
    buf_init(&code, CA_LIMIT_TASK_BYTES);
    bool have_model_new = false;
    json_array_foreach(files, i, v)
    {
        const char *rel = json_string_value(v);
        buf_reset(&path);
        buf_reset(&code);
        if ((rc = fs_join(&path, snap, rel)) != 0)
            break;
        if (strcmp(rel, "model_new.py") == 0) {
            have_model_new = true;
            rc = policy_check_model_new(path.data, pr, err);
        } else {
            size_t n = strlen(rel);
            bool cu = n > 3 && strcmp(rel + n - 3, ".cu") == 0;
            rc = fs_read_file(path.data, CA_LIMIT_TASK_BYTES, &code, err);
            if (rc == 0 && cu && inline_cuda)
                rc = policy_check_inline_cuda(rel, code.data, code.len, pr, err);
            else if (rc == 0)
                rc = policy_check_source(rel, code.data, code.len, pr, err);
        }
        if (rc)
            break;
    }
    buf_release(&path);
    buf_release(&code);
    if (kb_lines) /* findings where the candidate wrote them, not in the generated files */
        policy_report_set_origins(pr, o->kernelbench_file, eval__kernelbench_origin, kb_lines);
    json_t *pj = policy_report_to_json(pr);
    if (!have_model_new && rc == 0)
        json_object_set_new(pj, "missing", json_string("model_new.py"));
    json_object_set_new(report, "policy", pj);
    bool ok = rc == 0 && policy_report_ok(pr) && have_model_new;
    if (rc == 0 && !ok) {
        struct buf msg;
        buf_init(&msg, CA_LIMIT_TOOL_OUTPUT);
        /* A message cut at the buffer's bound is still useful: ignore overflow. */
        if (!have_model_new && buf_addstr(&msg, "model_new.py is missing: write class ModelNew "
                                                "there\n"))
            LOG_DEBUG("policy message cut");
        if (policy_report_format(pr, &msg))
            LOG_DEBUG("policy message cut");
        json_object_set_new(report, "message", json_stringn(msg.data, msg.len));
        buf_release(&msg);
    }
    *rc_out = rc;
    return ok;
}

int eval_keep_files(const char *snap, const json_t *files, const char *keep, struct ca_err *err)
{
    struct buf from, to, data;
    buf_init(&from, CA_LIMIT_PATH);
    buf_init(&to, CA_LIMIT_PATH);
    buf_init(&data, CA_LIMIT_TASK_BYTES);
    int rc = fs_mkdirs(keep, 0700, err);
    for (size_t i = 0; rc == 0 && i <= json_array_size(files); i++) {
        const char *rel =
            i < json_array_size(files) ? json_string_value(json_array_get(files, i)) : "model.py";
        buf_reset(&from);
        buf_reset(&to);
        buf_reset(&data);
        if (!rel || fs_join(&from, snap, rel) || fs_join(&to, keep, rel)) {
            rc = err_setf(err, CA_ETOOBIG, "snapshot path too long");
            break;
        }
        char *slash = strrchr(to.data, '/');
        *slash = '\0';
        rc = fs_mkdirs(to.data, 0700, err);
        *slash = '/';
        if (rc == 0)
            rc = fs_read_file(from.data, CA_LIMIT_TASK_BYTES, &data, err);
        if (rc == 0)
            rc = fs_write_atomic(to.data, data.data, data.len, 0644, err);
    }
    buf_release(&from);
    buf_release(&to);
    buf_release(&data);
    if (rc)
        err_prefix(err, "keeping the evaluated files in %s: ", keep);
    return rc;
}

static void stage_time(json_t *report, const char *stage, int64_t t0)
{
    json_t *t = json_object_get(report, "stage_ms");
    json_object_set_new(t, stage, json_real((double)(ca_now_us() - t0) / 1000.0));
}

static int run_harness(const struct eval_opts *o, const char *cache, const char *snap,
                       const char *so, json_t *report, struct ca_err *err)
{
    struct buf hdir, script, task, out, baselines;
    buf_init(&hdir, CA_LIMIT_PATH);
    buf_init(&script, CA_LIMIT_PATH);
    buf_init(&task, CA_LIMIT_PATH);
    buf_init(&out, CA_LIMIT_PATH);
    buf_init(&baselines, CA_LIMIT_PATH);
    json_t *result = NULL;
    int rc = eval_harness_dir(cache, &hdir, err);
    if (rc == 0)
        rc = fs_join(&script, hdir.data, "evaluate.py") || fs_join(&task, snap, "model.py") ||
                     fs_join(&out, snap, "result.json") || fs_join(&baselines, cache, "baselines")
                 ? CA_ETOOBIG
                 : 0;
    if (rc)
        goto done;
    char seeds[16], atol[32], rtol[32], timeout[32], budget[32];
    snprintf(seeds, sizeof(seeds), "%d", o->seeds > 0 ? o->seeds : 5);
    snprintf(atol, sizeof(atol), "%g", o->atol > 0 ? o->atol : 1e-2);
    snprintf(rtol, sizeof(rtol), "%g", o->rtol > 0 ? o->rtol : 1e-2);
    int64_t tmo = o->timeout_ms > 0 ? o->timeout_ms : 120000;
    snprintf(timeout, sizeof(timeout), "%.3f", (double)tmo / 1000.0);
    snprintf(budget, sizeof(budget), "%lld", (long long)(o->budget_ms > 0 ? o->budget_ms : 2000));
    const char *argv[40];
    size_t n = 0;
    argv[n++] = eval_python();
    argv[n++] = script.data;
    argv[n++] = "--task";
    argv[n++] = task.data;
    argv[n++] = "--candidate-dir";
    argv[n++] = snap;
    argv[n++] = "--so";
    argv[n++] = so;
    argv[n++] = "--device";
    argv[n++] = o->device ? o->device : "cuda";
    argv[n++] = "--seeds";
    argv[n++] = seeds;
    argv[n++] = "--timing";
    argv[n++] = eval_timing(o);
    argv[n++] = "--precision";
    argv[n++] = o->precision ? o->precision : "strict";
    argv[n++] = "--rules";
    argv[n++] = o->rules ? o->rules : "cuda-agent";
    argv[n++] = "--atol";
    argv[n++] = atol;
    argv[n++] = "--rtol";
    argv[n++] = rtol;
    argv[n++] = "--timeout";
    argv[n++] = timeout;
    argv[n++] = "--budget-ms";
    argv[n++] = budget;
    argv[n++] = "--baseline-cache";
    argv[n++] = baselines.data;
    if (o->stop == EVAL_STOP_VERIFY)
        argv[n++] = "--no-timing";
    if (o->no_compile_baseline)
        argv[n++] = "--no-compile";
    bool boxed = !o->no_sandbox && !o->no_candidate_sandbox;
    const char *box = boxed ? eval_sandbox_bin() : NULL;
    if (boxed && !box) {
        rc = err_setf(err, CA_EUNAVAIL,
                      "cannot find this program (/proc/self/exe) to run the "
                      "candidate sandbox");
        goto done;
    }
    argv[n++] = box ? "--sandbox" : "--no-sandbox";
    if (box)
        argv[n++] = box;
    argv[n++] = "--out";
    argv[n++] = out.data;
    argv[n] = NULL;
    struct proc_opts po = {
        .argv = argv,
        .cwd = snap,
        .out_max = 64 * CA_KIB,
        .err_max = 64 * CA_KIB,
        .timeout_ms = tmo * 2 + HARNESS_SLACK_MS,
    };
    struct proc_result pr;
    proc_result_init(&pr);
    if (o->pool) {
        /* A warm runner: the same arguments, without interpreter and script. */
        int status = 0;
        rc = gpupool_run(o->pool, argv + 2, po.timeout_ms, &status, err);
        pr.exit_code = status;
    } else {
        rc = proc_run(&po, &pr, err);
    }
    if (rc) {
        proc_result_release(&pr);
        goto done;
    }
    struct buf text;
    buf_init(&text, CA_LIMIT_JSON_BYTES);
    int rrc = fs_read_file(out.data, CA_LIMIT_JSON_BYTES, &text, NULL);
    if (rrc == 0)
        rrc = jsonx_parse(sv_from(text.data, text.len), CA_LIMIT_JSON_BYTES, "harness result",
                          &result, NULL);
    buf_release(&text);
    if (rrc) {
        struct buf d;
        buf_init(&d, 256);
        if (proc_describe(&pr, po.timeout_ms, &d))
            LOG_DEBUG("description cut");
        rc = err_setf(err, CA_ECHILD, "the harness produced no result (%s): %.160s", d.data,
                      pr.err.len > 160 ? pr.err.data + pr.err.len - 160 : pr.err.data);
        buf_release(&d);
    } else {
        json_object_set_new(report, "harness", result);
    }
    proc_result_release(&pr);
done:
    buf_release(&hdir);
    buf_release(&script);
    buf_release(&task);
    buf_release(&out);
    buf_release(&baselines);
    return rc;
}

static int finish(json_t *report, const char *stage, bool compiled, bool correct,
                  struct ca_err *err)
{
    json_object_set_new(report, "stage", json_string(stage));
    struct reward_input in = {.compiled = compiled, .correct = correct};
    if (correct) {
        struct eval_report er;
        eval_report_read(report, &er);
        in.eager_ms = er.eager.median_ms;
        in.compile_ms = er.compile.median_ms;
        in.candidate_ms = er.candidate.median_ms;
        in.speed_of_light_flag = er.sol_flagged;
    }
    struct reward_result r;
    int rc = reward_compute(&in, &r, err);
    if (rc)
        return rc;
    if (strcmp(stage, "policy") == 0)
        r.reason = "the static policy refused the code";
    else if (strcmp(stage, "snapshot") == 0)
        r.reason = "the workspace could not be evaluated";
    else if (strcmp(stage, "extract") == 0)
        r.reason = "the KernelBench file's load_inline sources could not be read";
    json_t *rj = reward_to_json(&r);
    /* Issue 21: a reward that rests on a noisy measurement says so (the harness's flag). */
    struct eval_report fr;
    eval_report_read(report, &fr);
    bool noisy = correct && fr.timing_noisy;
    if (noisy)
        json_object_set_new(rj, "decision_at_risk",
                            json_is_array(fr.decision_at_risk) ? json_deep_copy(fr.decision_at_risk)
                                                               : json_array());
    json_object_set_new(rj, "timing_noisy", json_boolean(noisy));
    json_object_set_new(report, "reward", rj);
    json_object_set_new(report, "ok", json_boolean(correct));
    return 0;
}

/* Whether rep already holds a violation with this rule and message (the same symbol). */
static bool has_finding(const struct policy_report *rep, const struct policy_violation *v)
{
    for (size_t i = 0; i < rep->n; i++)
        if (!rep->items[i].advisory && strcmp(rep->items[i].rule, v->rule) == 0 &&
            strcmp(rep->items[i].message, v->message) == 0)
            return true;
    return false;
}

/*
 * The verdict on what the code does: the undefined symbols of each of the agent's objects
 * (reported under its source's name: a real call leaves an import there) and of the linked
 * module (what the objects' findings do not already say). On a violation the message adds the
 * source notes of the same rules, which say where in the sources the import may come from.
 * The findings land in report.policy_so; *ok says whether there were none.
 */
static int check_objects(const struct compile_opts *co, const struct compile_report *cr,
                         const char *so, const struct policy_report *src, json_t *report, bool *ok,
                         struct ca_err *err)
{
    struct policy_report sp, mod;
    policy_report_init(&sp);
    policy_report_init(&mod);
    sp.rules = mod.rules = src->rules;
    struct buf obj;
    buf_init(&obj, CA_LIMIT_PATH);
    int rc = 0;
    for (size_t i = 0; i < cr->n && rc == 0; i++) {
        const struct compile_unit_report *u = &cr->units[i];
        if (strncmp(u->name, "kernels/", 8) != 0 || !u->key[0])
            continue; /* binding.cpp is ours: it imports Python modules by design */
        buf_reset(&obj);
        rc = compile_object_path(co, u->key, &obj, err);
        if (rc == 0 && fs_is_file(obj.data))
            rc = policy_check_object(obj.data, u->name, &sp, err);
    }
    if (rc == 0)
        rc = policy_check_so(so, &mod, err);
    for (size_t i = 0; rc == 0 && i < mod.n; i++) {
        const struct policy_violation *v = &mod.items[i];
        if (!v->advisory && !has_finding(&sp, v))
            policy_report_addf(&sp, v->file, v->line, v->rule, "%s", v->message);
    }
    if (rc == 0) {
        sp.dropped += mod.dropped;
        *ok = policy_report_ok(&sp);
        json_object_set_new(report, "policy_so", policy_report_to_json(&sp));
    }
    if (rc == 0 && !*ok) {
        struct buf msg;
        buf_init(&msg, CA_LIMIT_TOOL_OUTPUT);
        /* A message cut at the buffer's bound is still useful: ignore overflow. */
        if (policy_report_format(&sp, &msg))
            LOG_DEBUG("policy message cut");
        for (size_t i = 0; i < sp.n; i++) {
            const struct policy_violation *v = &sp.items[i];
            bool first = true;
            for (size_t k = 0; k < i && first; k++)
                first = sp.items[k].advisory || strcmp(sp.items[k].rule, v->rule) != 0;
            if (!v->advisory && first && policy_report_format_notes(src, v->rule, &msg))
                LOG_DEBUG("policy message cut");
        }
        json_object_set_new(report, "message", json_stringn(msg.data, msg.len));
        buf_release(&msg);
    }
    buf_release(&obj);
    policy_report_release(&sp);
    policy_report_release(&mod);
    return rc;
}

bool eval_refusal(int code)
{
    return code == CA_EPARSE || code == CA_ETOOBIG || code == CA_EESCAPE;
}

int eval_refused_report(const struct eval_opts *o, const char *message, json_t **report,
                        struct ca_err *err)
{
    enum policy_rules rules;
    json_t *r = json_pack("{s:o, s:s}", "stage_ms", json_object(), "message", message);
    if (o->workspace)
        json_object_set_new(r, "workspace", json_string(o->workspace));
    if (policy_rules_parse(o->rules, &rules) == 0)
        json_object_set_new(r, "rules", json_string(policy_rules_name(rules)));
    int rc = finish(r, o->kernelbench_file ? "extract" : "snapshot", false, false, err);
    if (rc) {
        json_decref(r);
        return rc;
    }
    *report = r;
    return 0;
}

int eval_run(const struct eval_opts *o, json_t **report_out, struct ca_err *err)
{
    int64_t t0 = ca_now_us(), ts;
    bool kb = o->kernelbench_file != NULL;
    if (kb ? !o->task_ref || o->workspace : !o->workspace)
        return err_setf(err, CA_EUSAGE,
                        kb ? "--kernelbench-file needs --task and no workspace"
                           : "no workspace to evaluate");
    json_t *report = json_pack("{s:o}", "stage_ms", json_object());
    if (o->workspace)
        json_object_set_new(report, "workspace", json_string(o->workspace));
    struct buf cache, snap, so, ccache;
    buf_init(&cache, CA_LIMIT_PATH);
    buf_init(&snap, CA_LIMIT_PATH);
    buf_init(&so, CA_LIMIT_PATH);
    buf_init(&ccache, CA_LIMIT_PATH);
    json_t *files = NULL, *kb_lines = NULL;
    struct compile_report cr;
    compile_report_init(&cr);
    struct policy_report pr;
    policy_report_init(&pr);
    int rc = policy_rules_parse(o->rules, &pr.rules);
    if (rc) {
        json_decref(report);
        return err_setf(err, CA_EUSAGE, "rules must be cuda-agent or kernelbench, not \"%s\"",
                        o->rules);
    }
    json_object_set_new(report, "rules", json_string(policy_rules_name(pr.rules)));
    rc = eval_cache_root(o, &cache, err);
    if (rc)
        goto out;
    /* The snapshot lives in the evaluator's cache, out of the agent's reach. */
    struct buf base;
    buf_init(&base, CA_LIMIT_PATH);
    rc = buf_addf(&base, "%s/runs/run", cache.data) ? CA_ETOOBIG : 0;
    if (rc == 0)
        rc = fs_mkdirs(cache.data, 0700, err);
    if (rc == 0) {
        struct buf runs;
        buf_init(&runs, CA_LIMIT_PATH);
        rc = buf_addf(&runs, "%s/runs", cache.data) ? CA_ETOOBIG : fs_mkdirs(runs.data, 0700, err);
        buf_release(&runs);
    }
    if (rc == 0)
        rc = fs_mkdtemp_beside(base.data, &snap, err);
    buf_release(&base);
    if (rc)
        goto out;

    ts = ca_now_us();
    bool rejected = false;
    if (kb) {
        rc = take_task(o, snap.data, report, err);
        if (rc == 0)
            rc = take_kernelbench(o, cache.data, snap.data, report, &files, &kb_lines, &rejected,
                                  err);
        stage_time(report, "extract", ts);
        if (rc == 0 && rejected) {
            rc = finish(report, "extract", false, false, err);
            goto out;
        }
    } else {
        rc = eval_snapshot(o->workspace, snap.data, &files, err);
        if (rc == 0)
            rc = take_task(o, snap.data, report, err);
        stage_time(report, "snapshot", ts);
    }
    if (rc) {
        if (eval_refusal(rc)) {
            json_object_set_new(report, "message", json_string(err->msg));
            rc = finish(report, kb ? "extract" : "snapshot", false, false, err);
        }
        goto out;
    }
    json_object_set(report, "files", files);
    if (o->keep_dir && (rc = eval_keep_files(snap.data, files, o->keep_dir, err)) != 0)
        goto out;

    ts = ca_now_us();
    int prc = 0;
    bool policy_ok = run_policy(snap.data, files, o, kb_lines, &pr, report, err, &prc);
    stage_time(report, "policy", ts);
    if ((rc = prc) != 0)
        goto out;
    if (!policy_ok) {
        rc = finish(report, "policy", false, false, err);
        goto out;
    }
    if (o->stop == EVAL_STOP_POLICY) {
        json_object_set_new(report, "stage", json_string("policy"));
        json_object_set_new(report, "ok", json_true());
        goto out;
    }

    ts = ca_now_us();
    struct compile_opts co;
    compile_opts_for(o, cache.data, &co, &ccache);
    co.inline_cuda = kb;
    rc = fs_join(&so, snap.data, COMPILE_MODULE_NAME ".so") ? CA_ETOOBIG : 0;
    if (rc == 0)
        rc = compile_build(&co, snap.data, so.data, &cr, err);
    json_object_set_new(report, "compile", compile_report_to_json(&cr));
    stage_time(report, "compile", ts);
    bool cu_failed = false;
    for (size_t i = 0; i < cr.n; i++)
        cu_failed |= cr.units[i].role == COMPILE_ROLE_CU && !cr.units[i].ok;
    if (rc == CA_EUNAVAIL && cu_failed) {
        /* Without PyTorch the kernels were still compiled: their errors are the agent's to
         * fix first, whatever else is missing here. */
        json_object_set_new(report, "unavailable", json_string(err->msg));
        compile_message(report, &cr, o, kb_lines);
        rc = finish(report, "compile", false, false, err);
        goto out;
    }
    if (rc)
        goto out;
    if (!cr.ok) {
        compile_message(report, &cr, o, kb_lines);
        rc = finish(report, "compile", false, false, err);
        goto out;
    }
    bool objects_ok = false;
    rc = check_objects(&co, &cr, so.data, &pr, report, &objects_ok, err);
    if (rc)
        goto out;
    if (!objects_ok) {
        rc = finish(report, "policy", false, false, err);
        goto out;
    }
    if (o->stop == EVAL_STOP_COMPILE) {
        json_object_set_new(report, "stage", json_string("compile"));
        json_object_set_new(report, "ok", json_true());
        goto out;
    }

    ts = ca_now_us();
    rc = run_harness(o, cache.data, snap.data, so.data, report, err);
    stage_time(report, "harness", ts);
    if (rc)
        goto out;
    struct eval_report er;
    eval_report_read(report, &er);
    bool correct = er.harness_ok;
    if (!correct && *er.failure_message)
        json_object_set_new(report, "message", json_string(er.failure_message));
    /* The evaluator could not evaluate: its own out-of-memory, a task too large for the GPU,
     * a candidate sandbox it could not build ("infrastructure"), a task whose reference fails
     * before any candidate runs ("task_error"), or a defect of the harness itself
     * ("harness"). None of these is a verdict on the candidate: no reward, reported apart
     * (the candidate cannot claim these kinds: the harness renames them). */
    const char *no_verdict = strcmp(er.failure_kind, "infrastructure") == 0 ? "infrastructure"
                             : strcmp(er.failure_kind, "task_error") == 0   ? "task"
                             : strcmp(er.failure_kind, "harness") == 0      ? "evaluator"
                                                                            : NULL;
    if (!correct && no_verdict) {
        if (strcmp(no_verdict, "evaluator") == 0)
            LOG_WARN("an internal error of the evaluator's harness (no reward given): %s",
                     er.failure_message);
        json_object_set_new(report, "stage", json_string(no_verdict));
        json_object_set_new(report, "ok", json_false());
        json_object_set_new(report, "infrastructure_error", json_true());
        goto out;
    }
    if (o->stop == EVAL_STOP_VERIFY) {
        json_object_set_new(report, "stage", json_string("verify"));
        json_object_set_new(report, "ok", json_boolean(correct));
        goto out;
    }
    /* A failure while timing (the check after the timing runs) is named as such. */
    bool in_timing = !correct && strcmp(er.harness_stage, "timing") == 0;
    rc = finish(report, correct ? "done" : in_timing ? "timing" : "verify", true, correct, err);
out:
    json_decref(files);
    json_decref(kb_lines);
    compile_report_release(&cr);
    policy_report_release(&pr);
    buf_release(&ccache);
    json_object_set_new(report, "elapsed_ms", json_real((double)(ca_now_us() - t0) / 1000.0));
    if (snap.len && !getenv("CUDA_AGENT_KEEP_RUNS")) {
        struct ca_err ignored;
        if (fs_remove_tree(snap.data, &ignored))
            LOG_WARN("could not remove %s: %s", snap.data, ignored.msg);
    }
    buf_release(&cache);
    buf_release(&snap);
    buf_release(&so);
    if (rc) {
        json_decref(report);
        return rc;
    }
    *report_out = report;
    return 0;
}

/* A string member of a JSON object of the report, "" when absent (the compile units and the
 * device: sub-objects eval_report hands over whole). */
static const char *str(const json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}

/*
 * What each unit's kernels use (ptxas -v: registers, shared memory, spills, stack) and the
 * warnings of units that built: what the agent tunes against, on every ./compile.
 */
static int format_units(const json_t *c, struct buf *b)
{
    int e = 0;
    size_t i, k;
    json_t *u, *kn;
    json_array_foreach(json_object_get(c, "units"), i, u)
    {
        json_array_foreach(json_object_get(u, "kernels"), k, kn)
        {
            long long st = json_integer_value(json_object_get(kn, "spill_store_bytes"));
            long long ld = json_integer_value(json_object_get(kn, "spill_load_bytes"));
            long long stack = json_integer_value(json_object_get(kn, "stack_bytes"));
            e |= buf_addf(b, "  %s: %s: %lld registers, %lld bytes shared", str(u, "name"),
                          str(kn, "name"),
                          (long long)json_integer_value(json_object_get(kn, "registers")),
                          (long long)json_integer_value(json_object_get(kn, "shared_bytes")));
            if (st || ld)
                e |= buf_addf(b, ", SPILLS %lld bytes stored / %lld loaded", st, ld);
            else
                e |= buf_addstr(b, ", no spills");
            if (stack)
                e |= buf_addf(b, ", %lld bytes stack", stack);
            e |= buf_addch(b, '\n');
        }
        const char *log = str(u, "log");
        if (json_is_true(json_object_get(u, "ok")) && *log)
            e |= buf_addf(b, "  %s: warnings:\n%s%s", str(u, "name"), log,
                          log[strlen(log) - 1] == '\n' ? "" : "\n");
    }
    return e;
}

/* The GPU the evaluator ran on, as its harness measured it (SKILL.md points here). */
static int format_device(const json_t *d, struct buf *b)
{
    if (!json_is_object(d) || !*str(d, "name"))
        return 0;
    int e = buf_addf(b, "device: %s", str(d, "name"));
    if (*str(d, "capability"))
        e |= buf_addf(b, ", compute capability %s", str(d, "capability"));
    json_int_t sms = json_integer_value(json_object_get(d, "sms"));
    if (sms > 0)
        e |= buf_addf(b, ", %lld SMs", (long long)sms);
    double mem = json_number_value(json_object_get(d, "memory_bytes"));
    if (mem > 0)
        e |= buf_addf(b, ", %.0f GiB", mem / (1024.0 * 1024 * 1024));
    double l2 = json_number_value(json_object_get(d, "l2_bytes"));
    if (l2 > 0)
        e |= buf_addf(b, ", L2 %.0f MiB", l2 / (1024.0 * 1024));
    double bw = json_number_value(json_object_get(d, "peak_bandwidth_bytes_per_s"));
    double fp32 = json_number_value(json_object_get(d, "peak_fp32_flops"));
    double tf32 = json_number_value(json_object_get(d, "peak_tf32_flops"));
    if (bw > 0)
        e |= buf_addf(b, "; peak %.2f TB/s", bw / 1e12);
    if (fp32 > 0)
        e |= buf_addf(b, ", fp32 %.0f TFLOP/s", fp32 / 1e12);
    if (tf32 > 0)
        e |= buf_addf(b, " (TF32 tensor cores %.0f)", tf32 / 1e12);
    return e | buf_addch(b, '\n');
}

int eval_format(const json_t *report, struct buf *b)
{
    struct eval_report r;
    eval_report_read(report, &r);
    int e = 0;
    e |= buf_addf(b, "task: %s\n", r.task_id);
    if (r.has_kernelbench) {
        e |= buf_addf(b, "kernelbench: %s", r.kb_file);
        for (size_t i = 0; i < r.n_kb_functions && i < EVAL_REPORT_FUNCTIONS_MAX; i++)
            e |= buf_addf(b, "%s%s", i ? ", " : " (functions: ", r.kb_functions[i]);
        e |= buf_addstr(b, r.n_kb_functions ? ")\n" : "\n");
    }
    if (r.has_compile)
        e |= buf_addf(b, "compile: %s (%.2f s)\n", r.compile_ok ? "ok" : "FAILED",
                      r.compile_ms / 1000.0);
    e |= format_units(r.compile_json, b);
    e |= format_device(r.device_json, b);
    const char *msg = r.message;
    if (*msg)
        e |=
            buf_addf(b, "%s failed:\n%s%s", r.stage, msg, msg[strlen(msg) - 1] == '\n' ? "" : "\n");
    if (r.infrastructure_error)
        e |= buf_addf(b,
                      "%s: the evaluator could not evaluate this candidate (no verdict, "
                      "no reward)\n",
                      strcmp(r.stage, "task") == 0        ? "task error (its reference failed)"
                      : strcmp(r.stage, "evaluator") == 0 ? "evaluator error (a defect of ours)"
                                                          : "infrastructure error");
    else if (*r.failure_kind)
        e |= buf_addf(b, "check that failed: %s\n", r.failure_kind);
    if (r.has_launches)
        e |= buf_addf(b,
                      "kernels: %lld in your extension, %.0f%% of the forward's GPU time "
                      "(%.1f of %.1f us)\n",
                      (long long)r.extension_kernels, 100.0 * r.extension_us / r.total_us,
                      r.extension_us, r.total_us);
    for (size_t i = 0; i < r.n_flags && i < EVAL_REPORT_FLAGS_MAX; i++)
        e |= buf_addf(b, "flag %s: %s\n", r.flags[i].kind, r.flags[i].message);
    const struct {
        const char *name;
        const struct eval_report_timing *t;
    } timings[] = {{"eager", &r.eager}, {"compile", &r.compile}, {"candidate", &r.candidate}};
    for (size_t i = 0; i < 3; i++) {
        const struct eval_report_timing *t = timings[i].t;
        if (!t->present)
            continue;
        if (isnan(t->median_ms))
            e |= buf_addf(b, "%-10s not measured%s%.300s\n", timings[i].name, *t->error ? ": " : "",
                          t->error);
        else
            e |= buf_addf(b, "%-10s median %.4f ms  (CV %.1f%%, n=%lld)\n", timings[i].name,
                          t->median_ms, 100.0 * t->cv, (long long)t->n);
    }
    if (r.has_reward && r.reward > 0 && isnan(r.speedup_compile))
        e |= buf_addf(b, "speedup: %.2fx vs eager, none vs torch.compile (no baseline)\n",
                      r.speedup_eager);
    else if (r.has_reward && r.reward > 0)
        e |= buf_addf(b, "speedup: %.2fx vs eager, %.2fx vs torch.compile\n", r.speedup_eager,
                      r.speedup_compile);
    if (r.has_reward)
        e |= buf_addf(b, "reward: %lld (%s)\n", (long long)r.reward, r.reward_reason);
    else if (r.ok && !(strcmp(r.stage, "compile") == 0 && r.has_compile))
        e |= buf_addf(b, "%s: ok\n", r.stage); /* compile: its line above says so */
    return e ? CA_ETOOBIG : 0;
}
