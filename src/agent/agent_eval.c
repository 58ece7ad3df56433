/*
 * agent_eval.c - the evaluations an episode records, and best of
 * trajectory.
 *
 * While the agent works, its ./compile, ./verify and ./profile reach the
 * evaluator through the episode; the episode keeps a numbered record of each
 * (report + a snapshot of the sources as evaluated). agent__poll_evals()
 * collects the records made since the last poll. The episode side provides
 * episode_evals(); where a build lacks it (it is declared weak here), an
 * episode simply records nothing and best of trajectory falls back to the
 * final workspace.
 */
#include "agent/agent_internal.h"

#include <string.h>

#include "eval/eval.h"
#include "core/banned.h"

/* Provided by src/episode when it records evaluations. */
int episode_evals(struct episode *ep, int64_t since, json_t **out, struct ca_err *err)
    __attribute__((weak));

int agent__poll_evals(struct episode *ep, int64_t *since, json_t **out, struct ca_err *err)
{
    *out = json_array();
    if (!episode_evals)
        return 0;
    json_t *got = NULL;
    int rc = episode_evals(ep, *since, &got, err);
    if (rc)
        return rc;
    size_t i;
    json_t *rec;
    json_array_foreach(got, i, rec)
    {
        json_t *seq = json_object_get(rec, "seq");
        if (!json_is_integer(seq) || json_integer_value(seq) <= *since)
            continue;
        *since = json_integer_value(seq);
        json_array_append(*out, rec);
    }
    json_decref(got);
    return 0;
}

static double speedup_compile(const json_t *rec)
{
    const json_t *r = json_object_get(json_object_get(rec, "report"), "reward");
    const json_t *s = json_object_get(r, "speedup_compile");
    return json_is_number(s) ? json_number_value(s) : 0.0;
}

const json_t *agent_best_eval(const json_t *records)
{
    const json_t *best = NULL;
    size_t i;
    const json_t *rec;
    json_array_foreach(records, i, rec)
    {
        const json_t *reward = json_object_get(rec, "reward");
        if (!json_is_true(json_object_get(rec, "ok")) || !json_is_integer(reward) ||
            json_integer_value(reward) < 1 || !json_is_string(json_object_get(rec, "snapshot_dir")))
            continue;
        if (!best) {
            best = rec;
            continue;
        }
        json_int_t a = json_integer_value(reward);
        json_int_t b = json_integer_value(json_object_get(best, "reward"));
        if (a > b || (a == b && speedup_compile(rec) >= speedup_compile(best)))
            best = rec;
    }
    return best;
}

int agent_copy_snapshot(const char *snapshot_dir, const char *ws_dir, struct ca_err *err)
{
    json_t *files = NULL;
    int rc = eval_snapshot(snapshot_dir, ws_dir, &files, err);
    if (rc)
        return rc;
    int n = (int)json_array_size(files);
    json_decref(files);
    return n;
}
