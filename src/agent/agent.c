/*
 * agent.c - the ReAct loop, its settings (resumed ones too), and the final
 * scoring; the trajectory file is agent_traj.c.
 *
 * Invariants:
 *  - A turn is one model reply plus the results of all its tool calls; its
 *    trajectory line is written (and fsync'd) only when every call has a
 *    result, so a trajectory never ends between a tool call and its result
 *    and resume can rebuild a conversation the server will accept.
 *  - Nothing the model sends can end the loop abnormally: malformed calls,
 *    unknown tools and bad arguments come back as tool messages.
 *  - Model time (llm_reply.http_us) and tool time are measured apart from
 *    the loop's own work, which is recorded per turn as overhead_us.
 */
#include "agent/agent_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/fs.h"
#include "core/json.h"
#include "core/limits.h"
#include "core/log.h"
#include "episode/episode.h"
#include "eval/eval.h"
#include "eval/eval_report.h"
#include "eval/evald.h"
#include "task/task.h"
#include "tools/tools.h"
#include "workspace/workspace.h"
#include "core/banned.h"

#define RESUME_NOTE                                                                                \
    "[The episode was interrupted and has been resumed. Your files are as you left them, but "     \
    "the shell is a new one (working directory and variables were reset, background shells "       \
    "are gone), and files must be Read again before you overwrite them.]"

static void emit(struct agent__run *r, enum agent_event_kind kind, const char *tool,
                 const json_t *eval, const char *message)
{
    if (!r->o->on_event)
        return;
    struct agent_event ev = {
        .kind = kind,
        .turn = r->turn,
        .max_turns = r->max_turns,
        .tokens = r->conv ? agent_conv_tokens(r->conv, r->tools_json.len) : 0,
        .tool = tool,
        .eval = eval,
        .message = message,
    };
    r->o->on_event(r->o->event_data, &ev);
}

/* ---- trajectory writer ---- */

/* ---- set-up ---- */

static char *absolute_ref(const char *ref)
{
    if (ref[0] == '/')
        return xstrdup(ref);
    char cwd[CA_LIMIT_PATH];
    if (!getcwd(cwd, sizeof(cwd)))
        return xstrdup(ref);
    return xstrfmt("%s/%s", cwd, ref);
}

static json_t *options_json(const struct agent__run *r)
{
    const struct llm_opts *l = &r->llm_opts;
    json_t *o = json_pack(
        "{s:I, s:I, s:I, s:I, s:b, s:s?, s:s, s:b, s:b, s:b}", "max_turns",
        (json_int_t)r->max_turns, "context_tokens", (json_int_t)r->context_tokens, "wall_ms",
        (json_int_t)r->wall_ms, "tool_output_max", (json_int_t)r->tool_output_max, "no_eval",
        r->no_eval, "device", r->device, "tool_choice", l->tool_choice ? l->tool_choice : "auto",
        "logprobs", l->logprobs, "token_ids", l->token_ids, "no_text_tools", l->no_text_tools);
    if (l->temperature >= 0)
        json_object_set_new(o, "temperature", json_real(l->temperature));
    if (l->top_p >= 0)
        json_object_set_new(o, "top_p", json_real(l->top_p));
    if (l->max_tokens > 0)
        json_object_set_new(o, "max_tokens", json_integer(l->max_tokens));
    if (l->seed >= 0)
        json_object_set_new(o, "seed", json_integer(l->seed));
    return o;
}

/* Settings: the options given, else (on resume) the trajectory's, else defaults. */
static void resolve_settings(struct agent__run *r, const json_t *saved)
{
    const struct agent_opts *o = r->o;
    const json_t *so = json_object_get(saved, "options");
#define SAVED_INT(key)                                                                             \
    (json_is_integer(json_object_get(so, key)) ? json_integer_value(json_object_get(so, key)) : 0)
#define SAVED_NUM(key)                                                                             \
    (json_is_number(json_object_get(so, key)) ? json_number_value(json_object_get(so, key)) : -1)
#define SAVED_STR(key) json_string_value(json_object_get(so, key))
    r->max_turns = o->max_turns > 0 ? o->max_turns : SAVED_INT("max_turns");
    r->context_tokens = o->context_tokens > 0 ? o->context_tokens : SAVED_INT("context_tokens");
    r->wall_ms = o->wall_ms > 0 ? o->wall_ms : SAVED_INT("wall_ms");
    r->tool_output_max = o->tool_output_max > 0 ? o->tool_output_max : SAVED_INT("tool_output_max");
    r->no_eval = o->no_eval || json_is_true(json_object_get(so, "no_eval"));
    r->device = o->device ? o->device : SAVED_STR("device");
    if (r->max_turns <= 0)
        r->max_turns = AGENT_MAX_TURNS_DEFAULT;
    if (r->context_tokens <= 0)
        r->context_tokens = AGENT_CONTEXT_DEFAULT;
    if (r->tool_output_max <= 0)
        r->tool_output_max = AGENT_TOOL_OUTPUT_DEFAULT;
    r->llm_opts = o->llm;
    struct llm_opts *l = &r->llm_opts;
    if (!l->model)
        l->model = json_string_value(json_object_get(saved, "model"));
    if (!l->base_url)
        l->base_url = json_string_value(json_object_get(saved, "base_url"));
    if (!l->tool_choice)
        l->tool_choice = SAVED_STR("tool_choice");
    if (l->temperature < 0)
        l->temperature = SAVED_NUM("temperature");
    if (l->top_p < 0)
        l->top_p = SAVED_NUM("top_p");
    if (l->max_tokens <= 0)
        l->max_tokens = SAVED_INT("max_tokens");
    if (l->seed < 0 && json_is_integer(json_object_get(so, "seed")))
        l->seed = SAVED_INT("seed");
    l->logprobs = l->logprobs || json_is_true(json_object_get(so, "logprobs"));
    l->token_ids = l->token_ids || json_is_true(json_object_get(so, "token_ids"));
    l->no_text_tools = l->no_text_tools || json_is_true(json_object_get(so, "no_text_tools"));
#undef SAVED_INT
#undef SAVED_NUM
#undef SAVED_STR
}

static int first_messages(struct agent__run *r, json_t **system, json_t **user, struct ca_err *err)
{
    struct buf skill, path;
    buf_init(&skill, CA_LIMIT_TASK_BYTES + 4096);
    buf_init(&path, CA_LIMIT_PATH);
    int rc = fs_join(&path, r->ws_dir, "SKILL.md");
    rc = rc ? err_setf(err, rc, "workspace path too long")
            : fs_read_file(path.data, CA_LIMIT_TASK_BYTES, &skill, err);
    if (rc == 0)
        rc = buf_addf(&skill,
                      "\n\n## This episode\n\nYour workspace is /workspace (the shell starts "
                      "there). Act through the tools. You have at most %" PRId64
                      " turns; a turn is one reply of yours with its tool calls. When you are "
                      "done, reply without tool calls: that ends the episode, and the evaluator "
                      "scores the workspace as you leave it and the best correct version that "
                      "your ./verify and ./profile runs recorded.\n",
                      r->max_turns);
    if (rc) {
        buf_release(&skill);
        buf_release(&path);
        return rc;
    }
    *system = json_pack("{s:s, s:s}", "role", "system", "content", skill.data);
    char *u = xstrfmt("The task is `model.py` in your workspace:\n\n```python\n%s\n```\n\n"
                      "Write `ModelNew` in `model_new.py` with your own CUDA kernels in "
                      "`kernels/`, following SKILL.md: make it correct first (`./verify`), then "
                      "fast (`./profile`).",
                      r->task->code);
    *user = json_pack("{s:s, s:s}", "role", "user", "content", u);
    free(u);
    buf_release(&skill);
    buf_release(&path);
    if (!*system || !*user)
        return err_setf(err, CA_EUTF8, "SKILL.md or the task is not valid UTF-8");
    return 0;
}

/* ---- one turn ---- */

static void stop(struct agent__run *r, const char *reason, const char *detail)
{
    r->stop_reason = reason;
    snprintf(r->stop_detail, sizeof(r->stop_detail), "%s", detail ? detail : "");
}

static bool out_of_time(const struct agent__run *r)
{
    return r->deadline_us && ca_now_us() >= r->deadline_us;
}

static bool cancelled(const struct agent__run *r)
{
    return r->o->cancel && *r->o->cancel;
}

/* Run one call; the tool message goes to *msg, the record to *rec. */
static void run_call(struct agent__run *r, const struct llm_tool_call *c, bool skip, json_t **msg,
                     json_t **rec, int64_t *tool_us)
{
    struct tool_result res;
    tool_result_init(&res);
    int64_t t0 = ca_now_us();
    if (skip) {
        tool_result_errorf(&res, "not run: the episode was stopped (%s) before this call",
                           r->stop_reason ? r->stop_reason : "stopped");
    } else if (c->error) {
        tool_result_errorf(&res, "error: %s", c->error);
    } else {
        emit(r, AGENT_EV_TOOL, c->name, NULL, NULL);
        int rc = episode_call(r->ep, c->name, c->args, &res);
        if (rc) {
            tool_result_release(&res);
            tool_result_init(&res);
            tool_result_errorf(&res,
                               "internal error running %s (%s); the call had no effect "
                               "that was reported",
                               c->name, ca_strerror(rc));
        }
    }
    int64_t us = ca_now_us() - t0;
    *tool_us += us;
    struct buf text;
    buf_init(&text, (size_t)r->tool_output_max + 256);
    if (agent_trim_output(sv_from(res.text.data, res.text.len), (size_t)r->tool_output_max, &text))
        BUG("trimmed tool output over its bound");
    json_t *content = jsonx_string(sv_from(text.data, text.len));
    if (!content)
        content = json_string("(the tool output was not valid UTF-8)");
    *msg = json_pack("{s:s, s:s, s:o}", "role", "tool", "tool_call_id", c->id, "content", content);
    *rec = json_pack("{s:s, s:s, s:b, s:I, s:b, s:f}", "tool_call_id", c->id, "name", c->name,
                     "is_error", res.is_error, "bytes", (json_int_t)res.text.len, "trimmed",
                     text.len < res.text.len, "ms", (double)us / 1000.0);
    if (res.fields && json_object_size(res.fields))
        json_object_set(*rec, "fields", res.fields);
    buf_release(&text);
    tool_result_release(&res);
}

static json_t *usage_json(const struct llm_reply *rep)
{
    json_t *u = json_object();
    if (rep->prompt_tokens >= 0)
        json_object_set_new(u, "prompt_tokens", json_integer(rep->prompt_tokens));
    if (rep->completion_tokens >= 0)
        json_object_set_new(u, "completion_tokens", json_integer(rep->completion_tokens));
    if (rep->total_tokens >= 0)
        json_object_set_new(u, "total_tokens", json_integer(rep->total_tokens));
    return u;
}

/* The loop's own time for a turn, and apart from it the trajectory's fsync
 * (disk latency, not loop work). */
static void note_overhead(struct agent__run *r, int64_t us, int64_t sync_us)
{
    ALLOC_GROW(r->overhead, r->noverhead + 1, r->overhead_alloc);
    r->overhead[r->noverhead++] = us < 0 ? 0 : us;
    ALLOC_GROW(r->sync, r->nsync + 1, r->sync_alloc);
    r->sync[r->nsync++] = sync_us;
}

/*
 * Number an episode's evaluation record in our sequence (it keeps its own as
 * episode_seq) and copy its snapshot's agent-writable files to OUT/evals/SEQ,
 * so best of trajectory survives the episode's state (removed at the end)
 * and resumes (a new episode, numbering from 1 again).
 */
static void keep_record(struct agent__run *r, json_t *rec)
{
    json_object_set(rec, "episode_seq", json_object_get(rec, "seq"));
    json_object_set_new(rec, "seq", json_integer(++r->eval_seq));
    const char *snap = json_string_value(json_object_get(rec, "snapshot_dir"));
    if (!snap)
        return;
    char *dir = xstrfmt("%s/evals/%" PRId64, r->out_dir, r->eval_seq);
    struct ca_err err = {0};
    int rc = fs_remove_tree(dir, &err);
    if (rc == 0)
        rc = agent_copy_snapshot(snap, dir, &err);
    if (rc < 0) {
        LOG_WARN("cannot keep the snapshot of evaluation %" PRId64 ": %s", r->eval_seq, err.msg);
        json_object_del(rec, "snapshot_dir");
    } else {
        json_object_set_new(rec, "snapshot_dir", json_string(dir));
    }
    free(dir);
}

/* ---- one turn, in its phases ---- */

/* The budgets checked before a turn: true (r->stop_reason set) when one is spent. */
static bool budget_spent(struct agent__run *r)
{
    if (cancelled(r))
        stop(r, "interrupted", "a signal asked the agent to stop");
    else if (r->turn >= r->max_turns)
        stop(r, "max_turns", NULL);
    else if (out_of_time(r))
        stop(r, "wall_clock", NULL);
    else
        return false;
    return true;
}

/*
 * Fit the conversation to the context budget: keep the latest turn's outputs, elide older
 * ones near the budget. *tokens and *elided say what was sent; true (stop "context") when
 * even that does not fit.
 */
static bool context_full(struct agent__run *r, int64_t *tokens, size_t *elided)
{
    size_t count = agent_conv_count(r->conv), keep_from = count;
    while (keep_from > 0) {
        const char *role =
            json_string_value(json_object_get(agent_conv_get(r->conv, keep_from - 1), "role"));
        keep_from--;
        if (role && strcmp(role, "assistant") == 0)
            break;
    }
    int64_t limit = r->context_tokens;
    if (r->llm_opts.max_tokens > 0 && r->llm_opts.max_tokens < limit)
        limit -= r->llm_opts.max_tokens;
    *elided = 0;
    if (agent_conv_tokens(r->conv, r->tools_json.len) > (int64_t)((double)limit * AGENT_ELIDE_AT))
        *elided = agent_conv_elide(r->conv, (int64_t)((double)limit * AGENT_ELIDE_TO),
                                   r->tools_json.len, keep_from);
    *tokens = agent_conv_tokens(r->conv, r->tools_json.len);
    if (*tokens <= limit)
        return false;
    char d[128];
    snprintf(d, sizeof(d),
             "the conversation needs about %" PRId64 " tokens; the budget is %" PRId64, *tokens,
             limit);
    stop(r, "context", d);
    return true;
}

/* The model call failed (rc, lerr): stop with the reason and record an "error" line. Returns
 * 1 (stop), or a negative code when the trajectory cannot be written. */
static int model_failed(struct agent__run *r, int rc, const struct ca_err *lerr,
                        const struct llm_reply *rep, int64_t model_us, struct ca_err *err)
{
    if (rc == CA_ETOOBIG && strstr(lerr->msg, "context"))
        stop(r, "context", lerr->msg);
    else if (cancelled(r))
        stop(r, "interrupted", lerr->msg);
    else if (rc == CA_ETIMEOUT && (rep->deadline_hit || out_of_time(r)))
        stop(r, "wall_clock", lerr->msg);
    else
        stop(r, "model_error", lerr->msg);
    json_t *line = json_pack("{s:s, s:I, s:s, s:s, s:i, s:I, s:f}", "type", "error", "turn",
                             (json_int_t)(r->turn + 1), "error", lerr->msg, "stop_reason",
                             r->stop_reason, "attempts", rep->attempts, "http_status",
                             (json_int_t)rep->status, "model_ms", (double)model_us / 1000.0);
    rc = agent__traj_append(r, line, err);
    json_decref(line);
    return rc ? rc : 1;
}

/*
 * The reply's message and each of its tool calls, run in order, into the conversation and
 * into msgs and results (the turn's line). A spent budget between calls stops the rest
 * (*stopping). Returns 0 or a negative code (trajectory I/O).
 */
static int run_calls(struct agent__run *r, const struct llm_reply *rep, json_t *msgs,
                     json_t *results, int64_t *tool_us, bool *stopping, struct ca_err *err)
{
    json_array_append(msgs, rep->message);
    int rc = agent__append_msg(r, json_incref(rep->message), err);
    for (size_t i = 0; rc == 0 && i < rep->ncalls; i++) {
        if (!*stopping && (cancelled(r) || out_of_time(r))) {
            *stopping = true;
            stop(r, cancelled(r) ? "interrupted" : "wall_clock", "stopped between tool calls");
        }
        json_t *msg, *rec;
        run_call(r, &rep->calls[i], *stopping, &msg, &rec, tool_us);
        json_array_append_new(results, rec);
        json_array_append(msgs, msg);
        rc = agent__append_msg(r, msg, err);
    }
    return rc;
}

/* The evaluations the episode made during the turn, kept and announced: a new array. */
static json_t *collect_evals(struct agent__run *r)
{
    json_t *new_evals = NULL;
    struct ca_err eerr = {0};
    if (agent__poll_evals(r->o, r->ep, &r->eval_since, &new_evals, &eerr))
        LOG_WARN("cannot read the episode's evaluations: %s", eerr.msg);
    size_t k;
    json_t *rec;
    json_array_foreach(new_evals, k, rec)
    {
        keep_record(r, rec);
        json_array_append(r->evals, rec);
        emit(r, AGENT_EV_EVAL, NULL, rec, NULL);
    }
    return new_evals;
}

/* The turn's trajectory line; takes msgs, results and new_evals. *overhead: the loop's own
 * time since t0, the line included. */
static json_t *turn_line(const struct agent__run *r, const struct llm_reply *rep, json_t *msgs,
                         json_t *results, json_t *new_evals, int64_t tokens, size_t elided,
                         int64_t t0, int64_t model_us, int64_t tool_us, int64_t *overhead)
{
    json_t *line = json_pack("{s:s, s:I, s:o, s:o, s:o, s:o}", "type", "turn", "turn",
                             (json_int_t)r->turn, "messages", msgs, "tool_results", results,
                             "usage", usage_json(rep), "evals", new_evals);
    if (rep->finish_reason)
        json_object_set_new(line, "finish_reason", json_string(rep->finish_reason));
    if (rep->text_form) {
        json_object_set_new(line, "text_form", json_true());
        json_object_set_new(line, "raw_content", json_string(rep->content ? rep->content : ""));
    }
    if (rep->reasoning)
        json_object_set(line, "reasoning", rep->reasoning);
    if (rep->logprobs)
        json_object_set(line, "logprobs", rep->logprobs);
    if (rep->token_ids)
        json_object_set(line, "token_ids", rep->token_ids);
    if (rep->prompt_token_ids)
        json_object_set_new(line, "prompt_token_count",
                            json_integer((json_int_t)json_array_size(rep->prompt_token_ids)));
    json_object_set_new(
        line, "context",
        json_pack("{s:I, s:I}", "tokens", (json_int_t)tokens, "elided", (json_int_t)elided));
    *overhead = ca_now_us() - t0 - model_us - tool_us;
    json_object_set_new(line, "timings",
                        json_pack("{s:f, s:f, s:I, s:i}", "model_ms", (double)model_us / 1000.0,
                                  "tool_ms", (double)tool_us / 1000.0, "overhead_us",
                                  (json_int_t)*overhead, "attempts", rep->attempts));
    return line;
}

/* One turn: budgets, context, the model, its tool calls, the episode's evaluations, the
 * trajectory line. Returns 0 to go on, 1 when the loop should stop (r->stop_reason set), or
 * a negative code for a failure of our own (trajectory I/O). */
static int turn(struct agent__run *r, struct ca_err *err)
{
    if (budget_spent(r))
        return 1;
    int64_t t0 = ca_now_us();
    int64_t tokens;
    size_t elided;
    if (context_full(r, &tokens, &elided))
        return 1;
    emit(r, AGENT_EV_TURN, NULL, NULL, NULL);

    struct llm_reply rep;
    llm_reply_init(&rep);
    struct ca_err lerr = {0};
    size_t request_bytes = agent_conv_json(r->conv).len + r->tools_json.len;
    int rc = llm_chat(r->llm, agent_conv_json(r->conv),
                      sv_from(r->tools_json.data, r->tools_json.len), r->turn + 1, &rep, &lerr);
    int64_t model_us = rep.http_us;
    r->model_us += model_us;
    if (rc) {
        rc = model_failed(r, rc, &lerr, &rep, model_us, err);
        llm_reply_release(&rep);
        return rc;
    }
    agent_conv_note_usage(r->conv, rep.prompt_tokens, request_bytes);
    if (rep.prompt_tokens > 0)
        r->prompt_tokens = rep.prompt_tokens;
    if (rep.completion_tokens > 0)
        r->completion_tokens += rep.completion_tokens;
    r->turn++;

    json_t *msgs = json_array(), *results = json_array();
    int64_t tool_us = 0;
    bool stopping = false;
    rc = run_calls(r, &rep, msgs, results, &tool_us, &stopping, err);
    r->tool_us += tool_us;
    if (rc) {
        json_decref(msgs);
        json_decref(results);
        llm_reply_release(&rep);
        return rc;
    }
    json_t *new_evals = collect_evals(r);
    int64_t overhead;
    json_t *line = turn_line(r, &rep, msgs, results, new_evals, tokens, elided, t0, model_us,
                             tool_us, &overhead);
    bool answered = rep.ncalls == 0;
    llm_reply_release(&rep);
    int64_t w0 = ca_now_us();
    rc = agent__traj_append(r, line, err);
    json_decref(line);
    note_overhead(r, overhead + (ca_now_us() - w0) - r->last_sync_us, r->last_sync_us);
    if (rc)
        return rc;
    if (stopping)
        return 1;
    if (answered) {
        stop(r, "answer", NULL);
        return 1;
    }
    return 0;
}

/* ---- scoring ---- */

static json_t *summary_of(const json_t *report)
{
    struct eval_report r;
    eval_report_read(report, &r);
    return json_pack("{s:b, s:s?, s:I}", "ok", r.ok, "stage", *r.stage ? r.stage : NULL, "reward",
                     (json_int_t)(r.reward_is_int ? r.reward : -1));
}

static json_t *score(struct agent__run *r, const char *ws, const char *what,
                     const char *report_file)
{
    emit(r, AGENT_EV_SCORE, NULL, NULL, what);
    struct eval_opts eo = {
        .workspace = ws,
        .task_ref = r->task_ref,
        .device = r->device,
        .cache_dir = r->o->cache_dir,
        .no_sandbox = r->o->eval_no_sandbox,
    };
    json_t *report = NULL;
    struct ca_err err = {0};
    const char *svc = r->o->evaluator;
    int rc = r->o->eval    ? r->o->eval(r->o->eval_ctx, &eo, &report, &err)
             : svc && *svc ? evald_eval(svc, &eo, &report, &err)
                           : eval_run(&eo, &report, &err);
    if (rc)
        return json_pack("{s:s, s:s}", "error", err.msg, "code", ca_strerror(rc));
    char *path = xstrfmt("%s/%s", r->out_dir, report_file);
    struct buf b;
    buf_init(&b, CA_LIMIT_JSON_BYTES);
    if (jsonx_dump(report, 2, &b) == 0 && buf_addch(&b, '\n') == 0 &&
        fs_write_atomic(path, b.data, b.len, 0644, &err) != 0)
        LOG_WARN("cannot keep the report: %s", err.msg);
    buf_release(&b);
    json_t *s = summary_of(report);
    json_object_set_new(s, "report", json_string(path));
    free(path);
    emit(r, AGENT_EV_EVAL, NULL, s, what);
    json_decref(report);
    return s;
}

static json_t *score_all(struct agent__run *r)
{
    if (r->no_eval)
        return json_pack("{s:n, s:n, s:n, s:s}", "final", "best", "reward", "note",
                         "not scored (--no-eval)");
    json_t *final = score(r, r->ws_dir, "final workspace", "eval_final.json");
    json_t *best = NULL;
    const json_t *b = agent_best_eval(r->evals);
    if (b) {
        char *dir = xstrfmt("%s/best_workspace", r->out_dir);
        struct ca_err err = {0};
        int rc = workspace_create(r->task, dir, WORKSPACE_FORCE, &err);
        if (rc == 0)
            rc = agent_copy_snapshot(json_string_value(json_object_get(b, "snapshot_dir")), dir,
                                     &err);
        if (rc < 0) {
            best = json_pack("{s:s}", "error", err.msg);
        } else {
            best = score(r, dir, "best snapshot", "eval_best.json");
            json_object_set(best, "seq", json_object_get(b, "seq"));
            json_object_set(best, "command", json_object_get(b, "command"));
            json_object_set(best, "recorded_reward", json_object_get(b, "reward"));
            json_object_set_new(best, "workspace", json_string(dir));
        }
        free(dir);
    }
    /* The episode's reward: the better of the two scorings (best of trajectory). */
    json_t *reward = json_null();
    const json_t *fr = json_object_get(final, "reward");
    const json_t *br = best ? json_object_get(best, "reward") : NULL;
    if (json_is_integer(fr))
        reward = json_integer(json_integer_value(fr));
    if (json_is_integer(br) &&
        (!json_is_integer(reward) || json_integer_value(br) > json_integer_value(reward))) {
        json_decref(reward);
        reward = json_integer(json_integer_value(br));
    }
    return json_pack("{s:o, s:o, s:o}", "final", final, "best", best ? best : json_null(), "reward",
                     reward);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static json_t *timings_json(struct agent__run *r)
{
    json_t *t =
        json_pack("{s:f, s:f, s:f}", "wall_ms", (double)(ca_now_us() - r->t_start) / 1000.0,
                  "model_ms", (double)r->model_us / 1000.0, "tool_ms", (double)r->tool_us / 1000.0);
    if (r->noverhead) {
        qsort(r->overhead, r->noverhead, sizeof(*r->overhead), cmp_i64);
        json_object_set_new(t, "overhead_us_median", json_integer(r->overhead[r->noverhead / 2]));
        json_object_set_new(t, "overhead_us_p99",
                            json_integer(r->overhead[(r->noverhead * 99) / 100]));
        qsort(r->sync, r->nsync, sizeof(*r->sync), cmp_i64);
        json_object_set_new(t, "fsync_us_median", json_integer(r->sync[r->nsync / 2]));
    }
    return t;
}

/* ---- the run ---- */

static void run_release(struct agent__run *r)
{
    if (r->traj_fd >= 0)
        close(r->traj_fd);
    episode_close(r->ep);
    if (r->episode_dir) {
        struct ca_err e;
        if (fs_remove_tree(r->episode_dir, &e))
            LOG_WARN("cannot remove %s: %s", r->episode_dir, e.msg);
    }
    free(r->episode_dir);
    llm_client_free(r->llm);
    agent_conv_free(r->conv);
    buf_release(&r->tools_json);
    json_decref(r->evals);
    json_decref(r->header);
    task_set_release(&r->tasks);
    free(r->task_ref);
    free(r->out_dir);
    free(r->ws_dir);
    free(r->traj_path);
    free(r->overhead);
    free(r->sync);
}

static int start_episode(struct agent__run *r, struct ca_err *err)
{
    char id[EPISODE_ID_MAX + 1];
    snprintf(id, sizeof(id), "run-%d-%" PRId64, (int)getpid(), ca_now_us());
    struct episode_opts eo = {
        .state_dir = r->o->state_dir,
        .id = id,
        .workspace = r->ws_dir,
        .sandbox_flags = r->o->sandbox_flags,
        .evaluator = r->o->evaluator,
        .eval_device = r->device,
        .eval = r->o->eval,
        .eval_ctx = r->o->eval_ctx,
    };
    int rc = episode_open(&eo, &r->ep, err);
    struct buf dir;
    buf_init(&dir, CA_LIMIT_PATH);
    struct ca_err ignored;
    if (r->o->state_dir ? buf_addstr(&dir, r->o->state_dir) == 0
                        : episode_state_dir(&dir, &ignored) == 0) {
        if (buf_addf(&dir, "/%s", id) == 0)
            r->episode_dir = buf_detach(&dir, NULL);
    }
    buf_release(&dir);
    return rc;
}

int agent_run(const struct agent_opts *o, json_t **result, struct ca_err *err)
{
    *result = NULL;
    struct agent__run r = {.o = o, .traj_fd = -1};
    task_set_init(&r.tasks);
    buf_init(&r.tools_json, CA_LIMIT_MODEL_REQUEST);
    r.evals = json_array();
    r.t_start = ca_now_us();
    json_t *lines = NULL;
    const json_t *saved = NULL;
    int rc;
    if (!o->out_dir || !*o->out_dir) {
        rc = err_setf(err, CA_EUSAGE, "no output directory given");
        goto out;
    }
    r.out_dir = xstrdup(o->out_dir);
    r.ws_dir = xstrfmt("%s/workspace", r.out_dir);
    r.traj_path = xstrfmt("%s/" AGENT__TRAJ_FILE, r.out_dir);
    rc = agent__traj_open(&r, &saved, &lines, err);
    if (rc)
        goto out;
    if (saved)
        r.header = json_incref((json_t *)saved);
    resolve_settings(&r, r.header);
    const char *ref =
        o->task_ref ? o->task_ref : json_string_value(json_object_get(r.header, "task_ref"));
    if (!ref) {
        rc = err_setf(err, CA_EUSAGE, "no task given (--task)");
        goto out;
    }
    r.task_ref = absolute_ref(ref);
    rc = task_resolve(r.task_ref, &r.tasks, &r.task, err);
    if (rc)
        goto out;
    if (!o->resume) {
        rc = workspace_create(r.task, r.ws_dir, 0, err);
        if (rc)
            goto out;
    } else if (!fs_is_dir(r.ws_dir)) {
        rc = err_setf(err, CA_ENOTFOUND, "%s is missing: the episode's workspace cannot be resumed",
                      r.ws_dir);
        goto out;
    }
    if (r.wall_ms > 0)
        r.deadline_us = r.t_start + r.wall_ms * 1000;
    r.llm_opts.deadline_us = r.deadline_us;
    r.llm_opts.cancel = o->cancel;
    rc = llm_client_new(&r.llm_opts, &r.llm, err);
    if (rc)
        goto out;
    if (o->transport)
        llm_client_set_transport(r.llm, o->transport);
    json_t *schemas = tool_schemas();
    rc = jsonx_dump(schemas, 0, &r.tools_json);
    json_decref(schemas);
    if (rc)
        goto out;
    rc = start_episode(&r, err);
    if (rc)
        goto out;
    r.conv = agent_conv_new();
    if (!o->resume) {
        json_t *sys = NULL, *user = NULL;
        rc = first_messages(&r, &sys, &user, err);
        if (rc)
            goto out;
        json_t *names = json_array();
        for (const char *const *n = tool_names; *n; n++)
            json_array_append_new(names, json_string(*n));
        json_t *header = json_pack(
            "{s:s, s:i, s:s, s:s, s:o, s:s, s:s, s:o, s:o, s:[O,O]}", "type", "header", "format",
            AGENT_TRAJECTORY_FORMAT, "cuda_agent", CA_VERSION, "task_ref", r.task_ref, "task",
            task_to_json(r.task, false), "model", r.llm_opts.model, "base_url", r.llm_opts.base_url,
            "options", options_json(&r), "tools", names, "messages", sys, user);
        json_object_set_new(header, "started", json_integer((json_int_t)time(NULL)));
        rc = agent__append_msg(&r, sys, err);
        rc = rc ? rc : agent__append_msg(&r, user, err);
        rc = rc ? rc : agent__traj_append(&r, header, err);
        json_decref(header);
        if (rc)
            goto out;
    } else {
        rc = agent__traj_replay(&r, lines, err);
        if (rc)
            goto out;
        json_t *note = json_pack("{s:s, s:s}", "role", "user", "content", RESUME_NOTE);
        json_t *line =
            json_pack("{s:s, s:I, s:I, s:[O]}", "type", "resume", "at_turn", (json_int_t)r.turn,
                      "started", (json_int_t)time(NULL), "messages", note);
        rc = agent__append_msg(&r, note, err);
        rc = rc ? rc : agent__traj_append(&r, line, err);
        json_decref(line);
        if (rc)
            goto out;
    }
    while ((rc = turn(&r, err)) == 0)
        ;
    if (rc < 0)
        goto out;
    /* The sandbox and its shells go before scoring: scoring reads only files. */
    episode_close(r.ep);
    r.ep = NULL;
    json_t *rewards = score_all(&r);
    json_t *final =
        json_pack("{s:s, s:s, s:I, s:o, s:I, s:o}", "type", "final", "stop_reason", r.stop_reason,
                  "turns", (json_int_t)r.turn, "rewards", rewards, "evals_recorded",
                  (json_int_t)json_array_size(r.evals), "timings", timings_json(&r));
    if (r.stop_detail[0])
        json_object_set_new(final, "detail", json_string(r.stop_detail));
    json_object_set_new(final, "tokens",
                        json_pack("{s:I, s:I}", "last_prompt", (json_int_t)r.prompt_tokens,
                                  "completion_total", (json_int_t)r.completion_tokens));
    rc = agent__traj_append(&r, final, err);
    if (rc) {
        json_decref(final);
        goto out;
    }
    json_object_del(final, "type");
    json_object_set_new(final, "out_dir", json_string(r.out_dir));
    json_object_set_new(final, "workspace", json_string(r.ws_dir));
    json_object_set_new(final, "trajectory", json_string(r.traj_path));
    *result = final;
out:
    json_decref(lines);
    run_release(&r);
    return rc;
}
