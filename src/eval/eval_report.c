/*
 * eval_report.c - the evaluator report's one reader (eval_report.h). Every key a C consumer
 * needs is named here once; a missing or mistyped one reads as absent, never as an error:
 * the report is the evaluator's own output, and its consumers show what is there.
 */
#include "eval/eval_report.h"

#include <math.h>
#include <string.h>

#include "core/banned.h"

static const json_t *get(const json_t *o, const char *key)
{
    return json_is_object(o) ? json_object_get(o, key) : NULL;
}

static const char *str(const json_t *o, const char *key)
{
    const char *s = json_string_value(get(o, key));
    return s ? s : "";
}

/* A number (integer or real), else `absent`. */
static double num(const json_t *o, const char *key, double absent)
{
    const json_t *v = get(o, key);
    return json_is_number(v) ? json_number_value(v) : absent;
}

static void read_timing(const json_t *timing, const char *which, struct eval_report_timing *t)
{
    const json_t *s = get(timing, which);
    t->present = s != NULL;
    t->median_ms = num(s, "median_ms", NAN);
    t->cv = num(s, "cv", 0);
    t->n = json_integer_value(get(s, "n"));
    t->error = str(s, "error");
}

static void read_harness(const json_t *h, struct eval_report *r)
{
    r->has_harness = h != NULL;
    r->harness_ok = json_is_true(get(h, "ok"));
    r->harness_stage = str(h, "stage");
    const json_t *f = get(h, "failure");
    r->failure_kind = str(f, "kind");
    r->failure_message = str(f, "message");

    const json_t *ev = get(get(h, "verification"), "launches");
    r->total_us = num(ev, "total_us", 0);
    r->has_launches = json_is_object(ev) && r->total_us > 0;
    r->extension_kernels = json_integer_value(get(ev, "extension_kernels"));
    r->extension_us = num(ev, "extension_us", 0);

    const json_t *flags = get(h, "flags");
    r->n_flags = json_array_size(flags);
    for (size_t i = 0; i < r->n_flags && i < EVAL_REPORT_FLAGS_MAX; i++) {
        const json_t *flag = json_array_get(flags, i);
        r->flags[i].kind = str(flag, "kind");
        r->flags[i].message = str(flag, "message");
    }
    for (size_t i = 0; i < json_array_size(flags); i++) {
        const json_t *flag = json_array_get(flags, i);
        if (strcmp(str(flag, "kind"), "noisy_timing") == 0) {
            r->timing_noisy = true;
            r->decision_at_risk = get(flag, "decision_at_risk");
        }
    }

    const json_t *t = get(h, "timing");
    read_timing(t, "eager", &r->eager);
    read_timing(t, "compile", &r->compile);
    read_timing(t, "candidate", &r->candidate);
    r->sol_flagged = json_is_true(get(get(t, "sol"), "flagged"));
    r->device_json = get(h, "device");
}

void eval_report_read(const json_t *report, struct eval_report *r)
{
    memset(r, 0, sizeof(*r));
    r->raw = report;
    r->ok = json_is_true(get(report, "ok"));
    r->stage = str(report, "stage");
    r->message = str(report, "message");
    r->task_id = str(get(report, "task"), "id");
    r->infrastructure_error = json_is_true(get(report, "infrastructure_error"));
    r->compile_json = get(report, "compile");

    const json_t *reward = get(report, "reward");
    r->has_reward = reward != NULL;
    r->reward_is_int = json_is_integer(get(reward, "reward"));
    r->reward = json_integer_value(get(reward, "reward"));
    r->speedup_eager = num(reward, "speedup_eager", 0);
    r->speedup_compile = num(reward, "speedup_compile", NAN); /* null: no torch.compile time */
    r->reward_reason = str(reward, "reason");

    const json_t *kb = get(report, "kernelbench");
    r->has_kernelbench = kb != NULL;
    r->kb_file = str(kb, "file");
    const json_t *fns = get(kb, "functions");
    r->n_kb_functions = json_array_size(fns);
    for (size_t i = 0; i < r->n_kb_functions && i < EVAL_REPORT_FUNCTIONS_MAX; i++) {
        const char *name = json_string_value(json_array_get(fns, i));
        r->kb_functions[i] = name ? name : "";
    }

    const json_t *c = get(report, "compile");
    r->has_compile = c != NULL;
    r->compile_ok = json_is_true(get(c, "ok"));
    r->compile_ms = num(get(report, "stage_ms"), "compile", 0);

    read_harness(get(report, "harness"), r);
}
