/*
 * tool_calls.c - the tools as tools/list describes them, the argument checks every
 * tool shares, list_tasks, and the agent tools (relayed to the episode's
 * supervisor with the episode_id argument removed, their text cut to
 * --max-output).
 */
#include "server/server.h"
#include "server/server_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "core/json.h"
#include "core/limits.h"
#include "core/log.h"
#include "tools/tools.h"
#include "core/banned.h"

/* Bounds on one call to an episode: a Bash call may run 10 minutes. */
#define TOOL_TIMEOUT_MS (11 * 60 * 1000)
#define LIST_TASKS_MAX 1000

/* ---- tool list ---- */

static json_t *prop(const char *type, const char *desc)
{
    return json_pack("{s:s, s:s}", "type", type, "description", desc);
}

static json_t *tool_def(const char *name, const char *desc, json_t *props, json_t *required)
{
    return json_pack("{s:s, s:s, s:{s:s, s:o, s:o, s:b}}", "name", name, "description", desc,
                     "inputSchema", "type", "object", "properties", props, "required", required,
                     "additionalProperties", 0);
}

#define EPISODE_ID_DESC "The episode, as start_episode returned it."

json_t *server__build_tool_list(void)
{
    json_t *list = json_array();
    json_array_append_new(
        list, tool_def("list_tasks",
                       "List the tasks this server offers (id, name, KernelBench level, operators)."
                       " Pass one id to start_episode.",
                       json_pack("{s:o, s:o, s:o}", "filter",
                                 prop("string", "Only tasks whose id or name contains this."),
                                 "offset", prop("integer", "Skip this many (default 0)."), "limit",
                                 prop("integer", "At most this many (default and most 1000).")),
                       json_array()));
    json_t *limits = json_pack(
        "{s:s, s:s, s:{s:o, s:o}, s:b}", "type", "object", "description",
        "Per-episode limits, within the server's own.", "properties", "wall_s",
        prop("integer", "Seconds after which the episode's tools stop (finish still works)."),
        "ttl_s", prop("integer", "Seconds without calls after which the episode ends."),
        "additionalProperties", 0);
    json_array_append_new(
        list,
        tool_def("start_episode",
                 "Start an episode: a fresh workspace for one task in its own sandbox with a "
                 "persistent shell. Returns episode_id (pass it to every other tool), the system "
                 "prompt (the workspace's SKILL.md) and the task message for the model.",
                 json_pack("{s:o, s:o, s:o, s:o}", "task",
                           prop("string", "A task id, name or unique id prefix from list_tasks."),
                           "code",
                           prop("string", "Or: the task's Python source in KernelBench format "
                                          "(class Model, get_inputs, get_init_inputs)."),
                           "seed",
                           prop("integer", "Recorded with the episode (the evaluator draws its "
                                           "own secret input seeds)."),
                           "limits", limits),
                 json_array()));
    json_t *schemas = tool_schemas();
    size_t i;
    json_t *fn;
    json_array_foreach(schemas, i, fn)
    {
        json_t *f = json_object_get(fn, "function");
        json_t *params = json_deep_copy(json_object_get(f, "parameters"));
        json_object_set_new(json_object_get(params, "properties"), "episode_id",
                            prop("string", EPISODE_ID_DESC));
        json_t *req = json_object_get(params, "required");
        if (!req)
            json_object_set_new(params, "required", req = json_array());
        json_array_insert_new(req, 0, json_string("episode_id"));
        json_array_append_new(list, json_pack("{s:O, s:O, s:o}", "name", json_object_get(f, "name"),
                                              "description", json_object_get(f, "description"),
                                              "inputSchema", params));
    }
    json_decref(schemas);
    json_array_append_new(
        list,
        tool_def("evaluate",
                 "Evaluate the episode's workspace as the trusted evaluator sees it: compile, "
                 "verify (correctness against the reference on fresh inputs) or profile (verify, "
                 "then time against eager PyTorch and torch.compile, and reward). The result's "
                 "structuredContent holds the evaluator's report.",
                 json_pack("{s:o, s:{s:s, s:[sss], s:s}}", "episode_id",
                           prop("string", EPISODE_ID_DESC), "stage", "type", "string", "enum",
                           "compile", "verify", "profile", "description",
                           "What to run (default profile)."),
                 json_pack("[s]", "episode_id")));
    json_array_append_new(
        list,
        tool_def("finish",
                 "End the episode and return its reward: the best correct evaluation of the "
                 "trajectory (-1 when none was correct; else 1, 2 or 3 by speedup over eager and "
                 "torch.compile), with its metrics and snapshot. Stops the sandbox.",
                 json_pack("{s:o, s:o}", "episode_id", prop("string", EPISODE_ID_DESC),
                           "final_eval",
                           prop("boolean", "Profile the workspace as it is now first (default "
                                           "true).")),
                 json_pack("[s]", "episode_id")));
    return list;
}

json_t *server_tool_list(const struct server *s)
{
    return json_incref(s->tool_list);
}

/* ---- argument checks ---- */

/* Refuse keys outside `allowed` (NULL-terminated); a message for the model, or NULL. */
json_t *server__check_keys(const char *tool, const json_t *args, const char *const *allowed)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)args, k, v)
    {
        size_t i = 0;
        while (allowed[i] && strcmp(allowed[i], k) != 0)
            i++;
        if (!allowed[i])
            return server__tool_errorf("%s: unknown argument '%.64s'", tool, k);
    }
    return NULL;
}

json_t *server__get_int(const char *tool, const json_t *args, const char *key, int64_t lo,
                        int64_t hi, int64_t *out)
{
    json_t *v = json_object_get(args, key);
    if (!v || json_is_null(v))
        return NULL;
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return server__tool_errorf("%s: %s must be an integer from %" PRId64 " to %" PRId64, tool,
                                   key, lo, hi);
    *out = json_integer_value(v);
    return NULL;
}

/* ---- list_tasks ---- */

json_t *server__tool_list_tasks(struct server *s, const json_t *args)
{
    static const char *const keys[] = {"filter", "offset", "limit", NULL};
    json_t *bad = server__check_keys("list_tasks", args, keys);
    int64_t offset = 0, limit = LIST_TASKS_MAX;
    if (bad || (bad = server__get_int("list_tasks", args, "offset", 0, INT32_MAX, &offset)) ||
        (bad = server__get_int("list_tasks", args, "limit", 1, LIST_TASKS_MAX, &limit)))
        return bad;
    json_t *f = json_object_get(args, "filter");
    if (f && !json_is_string(f))
        return server__tool_errorf("list_tasks: filter must be a string");
    const char *filter = f ? json_string_value(f) : NULL;
    json_t *tasks = json_array();
    int64_t matched = 0;
    for (size_t i = 0; i < s->tasks.n; i++) {
        const struct task *t = &s->tasks.tasks[i];
        if (filter && !strstr(t->id, filter) && !strstr(t->name, filter))
            continue;
        if (matched++ < offset || (int64_t)json_array_size(tasks) >= limit)
            continue;
        json_t *ops = json_array();
        for (size_t k = 0; k < t->nops; k++)
            json_array_append_new(ops, json_string(t->ops[k]));
        json_array_append_new(tasks, json_pack("{s:s, s:s, s:i, s:o, s:s?}", "id", t->id, "name",
                                               t->name, "level", t->level, "ops", ops,
                                               "data_source", t->data_source));
    }
    json_t *sc = json_pack("{s:o, s:I, s:I}", "tasks", tasks, "total", (json_int_t)matched,
                           "offset", (json_int_t)offset);
    struct buf text;
    buf_init(&text, CA_LIMIT_TOOL_OUTPUT);
    size_t i;
    json_t *t;
    int e = buf_addf(&text, "%" PRId64 " task(s)%s\n", matched,
                     s->tasks.n ? "" : " (this server was started without --tasks: pass code)");
    json_array_foreach(tasks, i, t) e |=
        buf_addf(&text, "%s\n", json_string_value(json_object_get(t, "id")));
    if (e)
        LOG_DEBUG("list_tasks text cut");
    json_t *r = server__tool_result(text.data, text.len, sc, false);
    buf_release(&text);
    return r;
}

/* ---- agent tools ---- */

bool server__is_agent_tool(const char *name)
{
    for (size_t i = 0; tool_names[i]; i++)
        if (strcmp(tool_names[i], name) == 0)
            return true;
    return false;
}

/* Cut text to the server's output limit at a UTF-8 boundary, saying so. */
json_t *server__text_result(struct server *s, const char *text, size_t len, json_t *sc, bool err)
{
    size_t max = s->o.max_output;
    if (len <= max)
        return server__tool_result(text, len, sc, err);
    size_t keep = max > 128 ? max - 128 : max;
    while (keep && ((unsigned char)text[keep] & 0xC0) == 0x80)
        keep--;
    struct buf b;
    buf_init(&b, max + 256);
    if (buf_add(&b, text, keep) ||
        buf_addf(&b, "\n[... %zu more bytes cut: the server's output limit ...]", len - keep))
        BUG("bounded text over its bound");
    json_t *r = server__tool_result(b.data, b.len, sc, err);
    buf_release(&b);
    return r;
}

json_t *server__tool_agent(struct server *s, const char *name, const json_t *args)
{
    json_t *why = NULL;
    struct server__episode *e = server__pin(s, args, &why);
    if (!e)
        return why;
    json_t *result = NULL, *reply = NULL;
    if (e->result || e->finishing) {
        result = server__tool_errorf("episode %s has finished: start a new one", e->id);
        goto out;
    }
    if (server__past_wall(e)) {
        result = server__tool_errorf("episode %s ran past its wall-clock limit of %" PRId64
                                     " s: only finish is accepted now",
                                     e->id, e->wall_ms / 1000);
        goto out;
    }
    json_t *targs = json_deep_copy(args);
    json_object_del(targs, "episode_id");
    json_t *req = json_pack("{s:s, s:o}", "tool", name, "args", targs);
    struct episode_opts eo = server__ep_opts(s, e->id, NULL);
    struct ca_err err = {0};
    int rc = episode_request(&eo, req, TOOL_TIMEOUT_MS, &reply, &err);
    json_decref(req);
    if (rc) {
        result = server__tool_errorf("episode %s did not answer: %s", e->id, err.msg);
        goto out;
    }
    const char *text = json_string_value(json_object_get(reply, "text"));
    bool is_error = json_is_true(json_object_get(reply, "is_error"));
    json_t *sc = json_deep_copy(reply);
    json_object_del(sc, "text"); /* it is the content block; no need to send it twice */
    json_object_set_new(sc, "episode_id", json_string(e->id));
    result = server__text_result(s, text ? text : "", text ? strlen(text) : 0, sc, is_error);
out:
    json_decref(reply);
    server__unpin(s, e);
    return result;
}
