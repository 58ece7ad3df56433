/*
 * openenv.c - the OpenEnv facade: reset / step / state / schema in the shapes
 * openenv-core's client reads ({"observation", "reward", "done"}), mapped onto
 * the same tools MCP offers.
 *
 * reset starts an episode (start_episode's arguments: task or code, seed,
 * limits); its observation holds episode_id, system_prompt and task_message.
 * step takes an action {"tool": NAME, "arguments": {...}} (also OpenEnv's
 * CallToolAction spelling {"tool_name", "arguments"}); the episode is the
 * WebSocket session's, else the action's or the request's "episode_id" (plain
 * HTTP is stateless). reward is null until finish, whose reward ends the
 * episode (done). A refused action is an observation with is_error, not an
 * HTTP error: the model reads it and tries again, as with MCP.
 *
 * Also here: base64 for the WebSocket handshake (its SHA-1 is core/hash's,
 * libcrypto's).
 */
#include "server/server.h"
#include "server/server_internal.h"

#include <string.h>

#include "core/banned.h"

static json_t *first_text(const json_t *result)
{
    const json_t *c = json_array_get(json_object_get(result, "content"), 0);
    const json_t *t = json_object_get(c, "text");
    return t ? json_incref((json_t *)t) : json_string("");
}

json_t *server__openenv_reset(struct server *s, const json_t *req, unsigned *status)
{
    json_t *args = json_object();
    static const char *const keys[] = {"task", "code", "seed", "limits", NULL};
    for (size_t i = 0; keys[i]; i++) {
        json_t *v = json_object_get(req, keys[i]);
        if (v && !json_is_null(v))
            json_object_set(args, keys[i], v);
    }
    json_t *r = NULL;
    if (server_call_tool(s, "start_episode", args, &r) != 0)
        BUG("start_episode is a tool");
    json_decref(args);
    json_t *sc = json_object_get(r, "structuredContent");
    bool err = json_is_true(json_object_get(r, "isError"));
    json_t *obs =
        json_pack("{s:o, s:b, s:O?}", "text", first_text(r), "is_error", err, "structured", sc);
    if (!err) {
        static const char *const copy[] = {"episode_id", "system_prompt", "task_message", "task_id",
                                           NULL};
        for (size_t i = 0; copy[i]; i++)
            json_object_set(obs, copy[i], json_object_get(sc, copy[i]));
        json_object_del(obs, "structured");
    }
    json_decref(r);
    *status = err ? 422 : 200;
    if (err)
        return json_pack("{s:O, s:o, s:n, s:b}", "error", json_object_get(obs, "text"),
                         "observation", obs, "reward", "done", 0);
    return json_pack("{s:o, s:n, s:b}", "observation", obs, "reward", "done", 0);
}

/* "unknown tool 'NAME': an action is ...; the tools are: A, B, ..." (NAME cut to 80 bytes). */
static json_t *unknown_tool_text(const struct server *s, const char *name)
{
    struct buf b;
    buf_init(&b, BUF_MAX_INTERNAL);
    size_t n = strlen(name), cut = n > 80 ? 80 : n;
    while (cut < n && cut > 0 && ((unsigned char)name[cut] & 0xC0) == 0x80)
        cut--; /* a whole UTF-8 character, or the string would not be JSON */
    int e = buf_addf(&b,
                     "unknown tool '%.*s%s': an action is one JSON object {\"tool\": NAME, "
                     "\"arguments\": {...}} and nothing else; the tools are:",
                     (int)cut, name, cut < n ? "..." : "");
    size_t i;
    const json_t *t;
    json_array_foreach(s->tool_list, i, t)
    {
        e |= buf_addf(&b, "%s %s", i ? "," : "", json_string_value(json_object_get(t, "name")));
    }
    json_t *v = e ? NULL : json_stringn(b.data, b.len);
    if (!v)
        v = json_string("unknown tool (see /schema)");
    buf_release(&b);
    return v;
}

json_t *server__openenv_step(struct server *s, const json_t *req, const char *episode_id,
                             unsigned *status)
{
    const json_t *action = json_object_get(req, "action");
    if (!json_is_object(action)) {
        *status = 422;
        return json_pack("{s:s}", "error",
                         "step needs \"action\": {\"tool\": NAME, "
                         "\"arguments\": {...}}");
    }
    json_t *tool = json_object_get(action, "tool");
    if (!tool)
        tool = json_object_get(action, "tool_name");
    json_t *a = json_object_get(action, "arguments");
    if (!a)
        a = json_object_get(action, "args");
    if (!json_is_string(tool) || (a && !json_is_object(a))) {
        *status = 422;
        return json_pack("{s:s}", "error",
                         "action.tool must be a tool name and "
                         "action.arguments an object");
    }
    json_t *args = a ? json_deep_copy(a) : json_object();
    const char *id = episode_id;
    if (!id)
        id = json_string_value(json_object_get(action, "episode_id"));
    if (!id)
        id = json_string_value(json_object_get(req, "episode_id"));
    if (id && strcmp(json_string_value(tool), "list_tasks") != 0 &&
        strcmp(json_string_value(tool), "start_episode") != 0)
        json_object_set_new(args, "episode_id", json_string(id));
    json_t *r = NULL;
    if (server_call_tool(s, json_string_value(tool), args, &r) != 0) {
        /* A model's reply that names no tool (prose around its JSON, a misspelt name) is
         * the model's mistake to see and mend, as an unknown tool is in the agent loop: an
         * error observation, the episode going on. */
        json_decref(args);
        *status = 200;
        return json_pack("{s:{s:o, s:b, s:O, s:s?}, s:n, s:b}", "observation", "text",
                         unknown_tool_text(s, json_string_value(tool)), "is_error", 1, "tool", tool,
                         "episode_id", id, "reward", "done", 0);
    }
    json_decref(args);
    bool finish = strcmp(json_string_value(tool), "finish") == 0;
    bool err = json_is_true(json_object_get(r, "isError"));
    json_t *sc = json_object_get(r, "structuredContent");
    json_t *obs = json_pack("{s:o, s:b, s:O, s:s?, s:O?}", "text", first_text(r), "is_error", err,
                            "tool", tool, "episode_id", id, "structured", sc);
    json_t *reward = finish && !err
                         ? json_real((double)json_integer_value(json_object_get(sc, "reward")))
                         : json_null();
    json_decref(r);
    *status = 200;
    return json_pack("{s:o, s:o, s:b}", "observation", obs, "reward", reward, "done",
                     finish && !err);
}

json_t *server__openenv_state(struct server *s, const char *episode_id, unsigned *status)
{
    *status = 200;
    if (!episode_id)
        return json_pack("{s:n, s:i}", "episode_id", "step_count", 0);
    pthread_mutex_lock(&s->mu);
    const struct server__episode *e = s->episodes;
    while (e && strcmp(e->id, episode_id) != 0)
        e = e->next;
    json_t *v = NULL;
    if (e)
        v = json_pack("{s:s, s:I, s:s?, s:b, s:O?}", "episode_id", e->id, "step_count",
                      (json_int_t)e->calls, "task_id", e->task_id, "done", e->result != NULL,
                      "reward", json_object_get(e->result, "reward"));
    pthread_mutex_unlock(&s->mu);
    if (!v) {
        *status = 404;
        return json_pack("{s:s, s:s}", "error", "no such episode", "episode_id", episode_id);
    }
    return v;
}

json_t *server__openenv_schema(struct server *s)
{
    json_t *names = json_array();
    size_t i;
    json_t *t;
    json_array_foreach(s->tool_list, i, t) json_array_append(names, json_object_get(t, "name"));
    json_t *v = json_pack(
        "{s:{s:s, s:{s:{s:s, s:o}, s:{s:s}, s:{s:s}}, s:[s]}, s:{s:s, s:{s:{s:s}, s:{s:s}, "
        "s:{s:s}, s:{s:s}, s:{s:s}}}, s:{s:s, s:{s:{s:s}, s:{s:s}, s:{s:s}, s:{s:s}}}, s:O}",
        "action", "type", "object", "properties", "tool", "type", "string", "enum", names,
        "arguments", "type", "object", "episode_id", "type", "string", "required", "tool",
        "observation", "type", "object", "properties", "text", "type", "string", "is_error", "type",
        "boolean", "episode_id", "type", "string", "structured", "type", "object", "system_prompt",
        "type", "string", "state", "type", "object", "properties", "episode_id", "type", "string",
        "step_count", "type", "integer", "done", "type", "boolean", "reward", "type", "number",
        "tools", s->tool_list);
    /* The tools' schemas where verifiers' OpenEnv engine shows the model the action schema. */
    json_object_set(json_object_get(v, "action"), "available_tools", s->tool_list);
    return v;
}

/* ---- base64, for Sec-WebSocket-Accept ---- */

int server__base64(const unsigned char *d, size_t n, struct buf *out)
{
    static const char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    int e = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)d[i] << 16 | (i + 1 < n ? (uint32_t)d[i + 1] << 8 : 0) |
                     (i + 2 < n ? d[i + 2] : 0);
        e |= buf_addch(out, tbl[v >> 18 & 63]);
        e |= buf_addch(out, tbl[v >> 12 & 63]);
        e |= buf_addch(out, i + 1 < n ? tbl[v >> 6 & 63] : '=');
        e |= buf_addch(out, i + 2 < n ? tbl[v & 63] : '=');
    }
    return e ? CA_ETOOBIG : 0;
}
