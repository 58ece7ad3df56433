/*
 * evaluate.c - evaluate and finish. An evaluation goes to the episode's own
 * evaluator socket (what the workspace's ./compile, ./verify and ./profile
 * use), so only the record the evaluator thread writes counts. finish takes
 * the best record of the trajectory as the reward, closes the supervisor and
 * stores the result in the table and the record; finish again returns it.
 */
#include "server/server.h"
#include "server/server_internal.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/json.h"
#include "core/log.h"
#include "core/msg.h"
#include "eval/eval_report.h"
#include "core/banned.h"

/* An evaluation may take long on a busy evaluator. */
#define EVAL_TIMEOUT_MS (60 * 60 * 1000)

/* ---- evaluate and finish ---- */

/* Run one evaluation through the episode's own evaluator socket (what ./compile etc. use) and
 * return the record it made (new reference) and the reply's text in *text. */
static int run_eval(struct server *s, struct server__episode *e, const char *stage, json_t **record,
                    char **text, struct ca_err *err)
{
    *record = NULL;
    *text = NULL;
    char *sock = xstrfmt("%s/%s/control/eval.sock", s->state_dir, e->id);
    json_t *req = json_pack("{s:s}", "command", stage), *reply = NULL;
    int rc = msg_request(sock, req, EVAL_TIMEOUT_MS, &reply, err);
    json_decref(req);
    free(sock);
    if (rc)
        return rc;
    const char *t = json_string_value(json_object_get(reply, "text"));
    *text = xstrdup(t ? t : "");
    /* The newest record is this evaluation's: the episode's socket serves one at a time, and
     * only the agent's own ./compile etc. could have run one in between (also a true record). */
    json_t *q = json_pack("{s:s, s:I}", "op", "evals", "since", (json_int_t)0), *ans = NULL;
    struct episode_opts eo = server__ep_opts(s, e->id, NULL);
    rc = episode_request(&eo, q, 60000, &ans, err);
    json_decref(q);
    json_t *evals = json_object_get(ans, "evals");
    if (rc == 0 && json_array_size(evals))
        *record = json_incref(json_array_get(evals, json_array_size(evals) - 1));
    else if (rc == 0)
        *record = json_pack("{s:s, s:b, s:i}", "command", stage, "ok", 0, "exit",
                            (int)json_integer_value(json_object_get(reply, "exit")));
    json_decref(ans);
    json_decref(reply);
    return rc;
}

static json_t *eval_summary(const json_t *rec)
{
    struct eval_report r;
    const json_t *report = json_object_get(rec, "report");
    eval_report_read(report, &r);
    json_t *o = json_pack("{s:O?, s:O?, s:b, s:s?, s:O?, s:O?}", "seq", json_object_get(rec, "seq"),
                          "command", json_object_get(rec, "command"), "ok", r.ok, "stage",
                          *r.stage ? r.stage : NULL, "reward", json_object_get(rec, "reward"),
                          "snapshot_dir", json_object_get(rec, "snapshot_dir"));
    if (r.speedup_eager == r.speedup_eager && r.speedup_eager > 0)
        json_object_set_new(o, "speedup_eager", json_real(r.speedup_eager));
    if (r.speedup_compile == r.speedup_compile && r.speedup_compile > 0)
        json_object_set_new(o, "speedup_compile", json_real(r.speedup_compile));
    if (r.candidate.present && r.candidate.median_ms == r.candidate.median_ms)
        json_object_set_new(o, "candidate_ms", json_real(r.candidate.median_ms));
    if (r.eager.present && r.eager.median_ms == r.eager.median_ms)
        json_object_set_new(o, "eager_ms", json_real(r.eager.median_ms));
    if (r.compile.present && r.compile.median_ms == r.compile.median_ms)
        json_object_set_new(o, "compile_ms", json_real(r.compile.median_ms));
    if (*r.message)
        json_object_set_new(o, "message", json_string(r.message));
    if (json_is_number(json_object_get(rec, "elapsed_ms")))
        json_object_set(o, "elapsed_ms", json_object_get(rec, "elapsed_ms"));
    return o;
}

json_t *server__tool_evaluate(struct server *s, const json_t *args)
{
    static const char *const keys[] = {"episode_id", "stage", NULL};
    json_t *bad = server__check_keys("evaluate", args, keys);
    if (bad)
        return bad;
    json_t *js = json_object_get(args, "stage");
    const char *stage = js ? json_string_value(js) : "profile";
    if (!stage || (strcmp(stage, "compile") && strcmp(stage, "verify") && strcmp(stage, "profile")))
        return server__tool_errorf("evaluate: stage must be compile, verify or profile");
    json_t *why = NULL;
    struct server__episode *e = server__pin(s, args, &why);
    if (!e)
        return why;
    json_t *result = NULL;
    if (e->result || e->finishing) {
        result = server__tool_errorf("episode %s has finished: start a new one", e->id);
    } else if (server__past_wall(e)) {
        result = server__tool_errorf("episode %s ran past its wall-clock limit: only finish is "
                                     "accepted now",
                                     e->id);
    } else {
        json_t *rec = NULL;
        char *text = NULL;
        struct ca_err err = {0};
        int rc = run_eval(s, e, stage, &rec, &text, &err);
        if (rc) {
            result = server__tool_errorf("evaluate: the evaluator could not run: %s", err.msg);
        } else {
            json_t *sc = eval_summary(rec);
            json_object_set_new(sc, "episode_id", json_string(e->id));
            json_object_set(sc, "report", json_object_get(rec, "report"));
            bool ok = json_is_true(json_object_get(rec, "ok"));
            result = server__text_result(s, text, strlen(text), sc, !ok);
        }
        json_decref(rec);
        free(text);
    }
    server__unpin(s, e);
    return result;
}

/* A record's worth as the episode's answer: its reward, or 1 for a passing ./verify (correct,
 * untimed); 0 when it is no candidate. The same rule as the agent's best of trajectory. */
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

static double speedup_of(const json_t *rec)
{
    struct eval_report r;
    eval_report_read(json_object_get(rec, "report"), &r);
    return r.speedup_compile == r.speedup_compile ? r.speedup_compile : 0;
}

/* Highest reward, then highest speedup over torch.compile, then the latest. */
static const json_t *best_record(const json_t *records)
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
        if (!best || a > best_reward || (a == best_reward && speedup_of(rec) >= speedup_of(best))) {
            best = rec;
            best_reward = a;
        }
    }
    return best;
}

json_t *server__tool_finish(struct server *s, const json_t *args)
{
    static const char *const keys[] = {"episode_id", "final_eval", NULL};
    json_t *bad = server__check_keys("finish", args, keys);
    if (bad)
        return bad;
    json_t *jf = json_object_get(args, "final_eval");
    if (jf && !json_is_boolean(jf))
        return server__tool_errorf("finish: final_eval must be true or false");
    json_t *why = NULL;
    struct server__episode *e = server__pin(s, args, &why);
    if (!e)
        return why;
    json_t *result = NULL, *final = NULL, *ans = NULL;
    pthread_mutex_lock(&s->mu);
    json_t *done = e->result ? json_deep_copy(e->result) : NULL;
    bool busy = e->finishing;
    if (!done && !busy)
        e->finishing = true;
    pthread_mutex_unlock(&s->mu);
    if (done || busy) {
        static const char again[] = "The episode had finished; its result again.";
        result = done ? server__tool_result(again, sizeof(again) - 1, done, false)
                      : server__tool_errorf("finish is already running for episode %s", e->id);
        goto out;
    }
    int64_t t0 = ca_now_us();
    struct ca_err err = {0};
    if (!jf || json_is_true(jf)) {
        json_t *rec = NULL;
        char *text = NULL;
        if (run_eval(s, e, "profile", &rec, &text, &err) == 0)
            final = eval_summary(rec);
        else
            final = json_pack("{s:s}", "error", err.msg);
        json_decref(rec);
        free(text);
    }
    json_t *q = json_pack("{s:s, s:I}", "op", "evals", "since", (json_int_t)0);
    struct episode_opts eo = server__ep_opts(s, e->id, NULL);
    int rc = episode_request(&eo, q, 60000, &ans, &err);
    json_decref(q);
    if (rc) {
        pthread_mutex_lock(&s->mu);
        e->finishing = false;
        pthread_mutex_unlock(&s->mu);
        result = server__tool_errorf("finish: episode %s did not answer: %s", e->id, err.msg);
        goto out;
    }
    json_t *evals = json_object_get(ans, "evals");
    const json_t *best = best_record(evals);
    json_int_t reward = best ? candidate_reward(best) : -1;
    json_t *sc = json_pack(
        "{s:s, s:s?, s:I, s:o, s:o, s:I, s:I, s:f, s:s, s:s}", "episode_id", e->id, "task_id",
        e->task_id, "reward", (json_int_t)reward, "best", best ? eval_summary(best) : json_null(),
        "final", final ? final : json_null(), "evaluations", (json_int_t)json_array_size(evals),
        "tool_calls", (json_int_t)e->calls, "wall_s", (double)(ca_now_us() - e->created_us) / 1e6,
        "workspace", e->workspace, "reason",
        best ? "best correct evaluation of the trajectory" : "no correct evaluation: reward -1");
    final = NULL;
    /* The sandbox goes; the workspace, the snapshots and this result stay. */
    json_t *close = json_pack("{s:s}", "op", "close"), *closed = NULL;
    if (episode_request(&eo, close, 30000, &closed, &err))
        LOG_WARN("episode %s: close: %s", e->id, err.msg);
    json_decref(close);
    json_decref(closed);
    pthread_mutex_lock(&s->mu);
    e->result = json_incref(sc);
    e->ended_unix = time(NULL);
    e->finishing = false;
    s->live--;
    s->episodes_finished++;
    server__kept_ended_locked(s, e->id, e->ended_unix);
    pthread_mutex_unlock(&s->mu);
    server__save_record(s, e);
    server__reclaim_kick(s);
    char *text = xstrfmt("Episode %s finished: reward %lld (%s).", e->id, (long long)reward,
                         best ? "best correct evaluation" : "no correct evaluation");
    result = server__tool_result(text, strlen(text), sc, false);
    free(text);
    if (log_events_on())
        log_event("serve.episode_finish", ca_now_us() - t0,
                  json_pack("{s:s, s:I}", "episode", e->id, "reward", (json_int_t)reward));
out:
    json_decref(final);
    json_decref(ans);
    server__unpin(s, e);
    return result;
}
