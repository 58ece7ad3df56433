/*
 * agent_eval.c - the evaluations an episode records, and best of
 * trajectory.
 *
 * While the agent works, its ./compile, ./verify and ./profile reach the
 * evaluator through the episode; the episode keeps a numbered record of each
 * (report + a snapshot of the sources as evaluated). agent__poll_evals()
 * collects the records made since the last poll (episode_evals); an
 * episode without evaluations simply has none, and best of trajectory then
 * is the final workspace. agent_opts.evals replaces the source for tests.
 */
#include "agent/agent_internal.h"

#include <math.h>
#include <string.h>

#include "episode/episode.h"
#include "eval/eval.h"
#include "eval/eval_report.h"
#include "core/banned.h"

int agent__poll_evals(const struct agent_opts *o, struct episode *ep, int64_t *since, json_t **out,
                      struct ca_err *err)
{
    *out = json_array();
    json_t *got = NULL;
    int rc = o->evals ? o->evals(o->evals_data, *since, &got, err)
                      : episode_evals(ep, *since, &got, err);
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
    struct eval_report r;
    eval_report_read(json_object_get(rec, "report"), &r);
    return isnan(r.speedup_compile) ? 0 : r.speedup_compile; /* no baseline: ranks lowest */
}

/* A record's reward as a candidate: the evaluator's, or 1 for a ./verify that
 * passed (verification gives no reward of its own, but correct is worth 1);
 * 0 when it is no candidate. */
static json_int_t candidate_reward(const json_t *rec)
{
    const json_t *reward = json_object_get(rec, "reward");
    if (!json_is_true(json_object_get(rec, "ok")) ||
        !json_is_string(json_object_get(rec, "snapshot_dir")))
        return 0;
    if (json_is_integer(reward))
        return json_integer_value(reward) >= 1 ? json_integer_value(reward) : 0;
    const char *cmd = json_string_value(json_object_get(rec, "command"));
    return cmd && strcmp(cmd, "verify") == 0 ? 1 : 0;
}

const json_t *agent_best_eval(const json_t *records)
{
    const json_t *best = NULL;
    json_int_t best_reward = 0;
    size_t i;
    const json_t *rec;
    json_array_foreach(records, i, rec)
    {
        json_int_t a = candidate_reward(rec);
        if (a < 1)
            continue;
        if (!best || a > best_reward ||
            (a == best_reward && speedup_compile(rec) >= speedup_compile(best))) {
            best = rec;
            best_reward = a;
        }
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
