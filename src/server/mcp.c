/*
 * mcp.c - JSON-RPC 2.0 and the MCP methods: initialize (version negotiation),
 * notifications/initialized, ping, tools/list, tools/call.
 *
 * Every input gets an answer the spec defines: unparseable JSON -32700 (id
 * null); anything that is not a request, notification or response -32600;
 * an unknown method -32601; bad params -32602. Requests other than
 * initialize and ping before initialize are refused (-32600). Batches
 * (arrays) exist only in revision 2025-03-26; other sessions get -32600 for
 * one. Responses the client sends (to requests we never make) are ignored.
 * Supported revisions, newest first, are protocol_versions[]; a client
 * asking for another gets the newest (the client then decides).
 */
#include "server/server.h"
#include "server/server_internal.h"

#include <string.h>

#include "core/json.h"
#include "core/limits.h"
#include "core/log.h"
#include "core/sv.h"
#include "core/banned.h"

static const char *const protocol_versions[] = {"2025-11-25", "2025-06-18", "2025-03-26",
                                                "2024-11-05", NULL};
#define BATCH_VERSION "2025-03-26"
#define BATCH_MAX 256

static json_t *rpc_error(const json_t *id, int code, const char *msg)
{
    return json_pack("{s:s, s:O, s:{s:i, s:s}}", "jsonrpc", "2.0", "id", id ? id : json_null(),
                     "error", "code", code, "message", msg);
}

static json_t *rpc_result(const json_t *id, json_t *result)
{
    return json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id", id, "result", result);
}

static const char *negotiate(const char *asked)
{
    for (size_t i = 0; asked && protocol_versions[i]; i++)
        if (strcmp(protocol_versions[i], asked) == 0)
            return protocol_versions[i];
    return protocol_versions[0];
}

static json_t *do_initialize(struct server *s, struct server_session **sessp, const json_t *id,
                             const json_t *params)
{
    json_t *pv = json_object_get(params, "protocolVersion");
    if (!json_is_string(pv))
        return rpc_error(id, RPC_INVALID_PARAMS,
                         "initialize: params.protocolVersion (a string) is required");
    if (*sessp && (*sessp)->initialized)
        return rpc_error(id, RPC_INVALID_REQUEST,
                         "initialize: this session is already initialized (start a new one)");
    if (!*sessp)
        *sessp = server_session_new(s);
    struct server_session *sess = *sessp;
    const char *v = negotiate(json_string_value(pv));
    snprintf(sess->version, sizeof(sess->version), "%s", v);
    sess->initialized = true;
    json_t *res = json_pack(
        "{s:s, s:{s:{s:b}}, s:{s:s, s:s, s:s}, s:s}", "protocolVersion", v, "capabilities", "tools",
        "listChanged", 0, "serverInfo", "name", "cuda-agent", "title", "cuda-agent RL environment",
        "version", CA_VERSION, "instructions",
        "CUDA kernel-writing episodes: call list_tasks, then start_episode (its result holds the "
        "system prompt and the task message for the model), the agent tools with its "
        "episode_id, evaluate, and finish for the reward.");
    return rpc_result(id, res);
}

static json_t *do_tools_call(struct server *s, const json_t *id, const json_t *params)
{
    json_t *name = json_object_get(params, "name");
    json_t *args = json_object_get(params, "arguments");
    if (!json_is_string(name))
        return rpc_error(id, RPC_INVALID_PARAMS, "tools/call: params.name (a string) is required");
    if (args && !json_is_object(args) && !json_is_null(args))
        return rpc_error(id, RPC_INVALID_PARAMS, "tools/call: params.arguments must be an object");
    json_t *result = NULL;
    if (server_call_tool(s, json_string_value(name), json_is_object(args) ? args : NULL, &result) !=
        0) {
        char msg[200];
        snprintf(msg, sizeof(msg), "Unknown tool: %.100s (see tools/list)",
                 json_string_value(name));
        return rpc_error(id, RPC_INVALID_PARAMS, msg);
    }
    return rpc_result(id, result);
}

/* One message; NULL when nothing is owed (notification, response). */
static json_t *one(struct server *s, struct server_session **sessp, const json_t *msg)
{
    if (!json_is_object(msg))
        return rpc_error(NULL, RPC_INVALID_REQUEST, "a JSON-RPC message is an object");
    json_t *jv = json_object_get(msg, "jsonrpc");
    json_t *id = json_object_get(msg, "id");
    json_t *method = json_object_get(msg, "method");
    const json_t *rid = json_is_string(id) || json_is_integer(id) ? id : NULL;
    if (!json_is_string(jv) || strcmp(json_string_value(jv), "2.0") != 0)
        return rpc_error(rid, RPC_INVALID_REQUEST, "\"jsonrpc\" must be \"2.0\"");
    if (!method) {
        /* A response from the client (we send no requests): accepted, nothing owed. */
        if (id && (json_object_get(msg, "result") || json_object_get(msg, "error")))
            return NULL;
        return rpc_error(rid, RPC_INVALID_REQUEST, "a message needs \"method\" (or is a response)");
    }
    if (!json_is_string(method))
        return rpc_error(rid, RPC_INVALID_REQUEST, "\"method\" must be a string");
    if (id && !rid)
        return rpc_error(NULL, RPC_INVALID_REQUEST, "\"id\" must be a string or an integer");
    json_t *params = json_object_get(msg, "params");
    if (params && !json_is_object(params))
        return id ? rpc_error(id, RPC_INVALID_PARAMS, "\"params\" must be an object") : NULL;
    const char *m = json_string_value(method);
    struct server_session *sess = *sessp;
    if (!id) { /* notification: never answered */
        if (strcmp(m, "notifications/initialized") == 0 && sess && !sess->initialized)
            LOG_DEBUG("initialized before initialize: ignored");
        return NULL;
    }
    pthread_mutex_lock(&s->mu);
    s->rpc_requests++;
    pthread_mutex_unlock(&s->mu);
    if (strcmp(m, "initialize") == 0)
        return do_initialize(s, sessp, id, params);
    if (strcmp(m, "ping") == 0)
        return rpc_result(id, json_object());
    bool known = strcmp(m, "tools/list") == 0 || strcmp(m, "tools/call") == 0;
    if (known && (!sess || !sess->initialized))
        return rpc_error(id, RPC_INVALID_REQUEST,
                         "the session is not initialized: send initialize first");
    if (strcmp(m, "tools/list") == 0)
        return rpc_result(id, json_pack("{s:o}", "tools", server_tool_list(s)));
    if (strcmp(m, "tools/call") == 0)
        return do_tools_call(s, id, params);
    char msg2[200];
    snprintf(msg2, sizeof(msg2), "Method not found: %.100s", m);
    return rpc_error(id, RPC_METHOD_NOT_FOUND, msg2);
}

static void count_error(struct server *s, const json_t *reply)
{
    if (!json_object_get(reply, "error"))
        return;
    pthread_mutex_lock(&s->mu);
    s->rpc_errors++;
    pthread_mutex_unlock(&s->mu);
}

void server_rpc(struct server *s, struct server_session **sessp, const char *body, size_t len,
                json_t **reply, bool *parse_error)
{
    *reply = NULL;
    *parse_error = false;
    json_t *msg = NULL;
    struct ca_err err = {0};
    int rc = jsonx_parse(sv_from(body, len), s->o.max_body, "request", &msg, &err);
    if (rc) {
        *parse_error = true;
        char m[CA_ERR_MSG_MAX + 32];
        snprintf(m, sizeof(m), "%s: %s", rc == CA_ETOOBIG ? "Request too large" : "Parse error",
                 err.msg);
        *reply = rpc_error(NULL, rc == CA_ETOOBIG ? RPC_INVALID_REQUEST : RPC_PARSE_ERROR, m);
        count_error(s, *reply);
        return;
    }
    if (!json_is_array(msg)) {
        *reply = one(s, sessp, msg);
        if (*reply)
            count_error(s, *reply);
        json_decref(msg);
        return;
    }
    const char *v = *sessp ? (*sessp)->version : "";
    if (strcmp(v, BATCH_VERSION) != 0) {
        *reply = rpc_error(NULL, RPC_INVALID_REQUEST,
                           "JSON-RPC batches are not part of this protocol revision (only "
                           "2025-03-26 has them): send one message per request");
    } else if (json_array_size(msg) == 0 || json_array_size(msg) > BATCH_MAX) {
        *reply = rpc_error(NULL, RPC_INVALID_REQUEST, "a batch holds 1 to 256 messages");
    } else {
        json_t *out = json_array();
        size_t i;
        json_t *m;
        json_array_foreach(msg, i, m)
        {
            json_t *r = one(s, sessp, m);
            if (r) {
                count_error(s, r);
                json_array_append_new(out, r);
            }
        }
        if (json_array_size(out))
            *reply = out;
        else
            json_decref(out);
    }
    if (*reply && json_is_object(*reply))
        count_error(s, *reply);
    json_decref(msg);
}
