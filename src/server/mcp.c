/*
 * mcp.c - JSON-RPC 2.0 and the MCP methods in both protocol eras.
 *
 * Handshake era (2024-11-05 .. 2025-11-25): initialize (version negotiation),
 * notifications/initialized, ping, tools/list, tools/call on a session.
 * Requests other than initialize and ping before initialize are refused
 * (-32600). Batches (arrays) exist only in revision 2025-03-26; other
 * sessions get -32600 for one. A client asking initialize for another
 * revision gets the newest (the client then decides).
 *
 * 2026-07-28: no handshake and no session. Every request carries its
 * revision and the client's capabilities in params._meta and is checked on
 * its own (the ladder, first failure wins): _meta and its two keys (-32602),
 * over HTTP the routing headers against the body (-32020), the revision
 * (-32022 with data.supported). Methods: server/discover, tools/list,
 * tools/call; results carry resultType and the serverInfo stamp. Over HTTP a
 * request takes this path when its MCP-Protocol-Version header names no
 * handshake revision (server__rpc_modern); on a stdio session the first
 * request that passes fixes the era, as the SDK's dual-era loop does: an
 * enveloped request on a handshake session is -32600, initialize on a
 * 2026-07-28 session -32022.
 *
 * Every input gets an answer the spec defines: unparseable JSON -32700 (id
 * null); anything that is not a request, notification or response -32600;
 * an unknown method -32601; bad params -32602. Responses the client sends
 * (to requests we never make) are ignored.
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
#define MODERN_VERSION "2026-07-28"
#define BATCH_VERSION "2025-03-26"
#define BATCH_MAX 256
/* The reserved _meta keys of 2026-07-28's envelope. */
#define META_VERSION "io.modelcontextprotocol/protocolVersion"
#define META_CAPS "io.modelcontextprotocol/clientCapabilities"
#define META_SERVER_INFO "io.modelcontextprotocol/serverInfo"
/* How long a client may cache server/discover and tools/list: both are fixed for the
 * server's life. */
#define CACHE_TTL_MS (3600 * 1000)
#define INSTRUCTIONS                                                                               \
    "CUDA kernel-writing episodes: call list_tasks, then start_episode (its result holds the "     \
    "system prompt and the task message for the model), the agent tools with its "                 \
    "episode_id, evaluate, and finish for the reward."

static json_t *rpc_error(const json_t *id, int code, const char *msg)
{
    return json_pack("{s:s, s:O, s:{s:i, s:s}}", "jsonrpc", "2.0", "id", id ? id : json_null(),
                     "error", "code", code, "message", msg);
}

static json_t *rpc_error_data(const json_t *id, int code, const char *msg, json_t *data)
{
    json_t *r = rpc_error(id, code, msg);
    json_object_set_new(json_object_get(r, "error"), "data", data);
    return r;
}

static json_t *rpc_result(const json_t *id, json_t *result)
{
    return json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id", id, "result", result);
}

static json_t *server_info(void)
{
    return json_pack("{s:s, s:s, s:s}", "name", "cuda-agent", "title", "cuda-agent RL environment",
                     "version", CA_VERSION);
}

bool server__handshake_revision(const char *rev)
{
    for (size_t i = 0; rev && protocol_versions[i]; i++)
        if (strcmp(protocol_versions[i], rev) == 0)
            return true;
    return false;
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
    pthread_mutex_lock(&s->mu);
    sess->era = SERVER__ERA_HANDSHAKE;
    pthread_mutex_unlock(&s->mu);
    json_t *res =
        json_pack("{s:s, s:{s:{s:b}}, s:o, s:s}", "protocolVersion", v, "capabilities", "tools",
                  "listChanged", 0, "serverInfo", server_info(), "instructions", INSTRUCTIONS);
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

/* ---- 2026-07-28 ---- */

bool server__is_modern(const json_t *msg)
{
    const char *m = json_string_value(json_object_get(msg, "method"));
    json_t *meta = json_object_get(json_object_get(msg, "params"), "_meta");
    return m && strcmp(m, "initialize") != 0 && json_is_object(meta) &&
           json_object_get(meta, META_VERSION) != NULL;
}

static int session_era(struct server *s, const struct server_session *sess)
{
    if (!sess)
        return SERVER__ERA_NONE;
    pthread_mutex_lock(&s->mu);
    int era = sess->era;
    pthread_mutex_unlock(&s->mu);
    return era;
}

/* -32022 naming what is served: on a 2026-07-28 session that revision only; elsewhere the
 * handshake's too, so that a client with no 2026-era revision in common falls back to
 * initialize (the SDK's probe raises only when no handshake revision is listed). */
static json_t *unsupported(const json_t *id, const char *requested, bool modern_only,
                           const char *why)
{
    json_t *sup = json_array();
    json_array_append_new(sup, json_string(MODERN_VERSION));
    for (size_t i = 0; !modern_only && protocol_versions[i]; i++)
        json_array_append_new(sup, json_string(protocol_versions[i]));
    json_t *data = json_pack("{s:o}", "supported", sup);
    if (requested)
        json_object_set_new(data, "requested", json_string(requested));
    return rpc_error_data(id, RPC_UNSUPPORTED_VERSION, why, data);
}

/* Mcp-Name as the SDK writes it: the name itself, or "=?base64?B64?=" of its UTF-8. */
static bool name_header_matches(const char *hdr, const char *name)
{
    if (!hdr)
        return false;
    if (strcmp(hdr, name) == 0)
        return true;
    if (strncmp(hdr, "=?base64?", 9) != 0)
        return false;
    struct buf b;
    buf_init(&b, BUF_MAX_INTERNAL);
    bool eq = buf_addstr(&b, "=?base64?") == 0 &&
              server__base64((const unsigned char *)name, strlen(name), &b) == 0 &&
              buf_addstr(&b, "?=") == 0 && strcmp(b.data, hdr) == 0;
    buf_release(&b);
    return eq;
}

/* The envelope, header and revision rungs: NULL when the request passes. */
static json_t *ladder(const json_t *id, const char *m, const json_t *params,
                      const struct server__mcp_headers *h, bool modern_only)
{
    json_t *meta = json_object_get(params, "_meta");
    if (!json_is_object(meta))
        return rpc_error(id, RPC_INVALID_PARAMS,
                         "params._meta must be an object carrying the " META_VERSION
                         " and " META_CAPS " keys: a 2026-07-28 request is self-contained");
    json_t *pv = json_object_get(meta, META_VERSION);
    bool has_caps = json_object_get(meta, META_CAPS) != NULL;
    if (!pv || !has_caps) {
        char msg[300];
        snprintf(msg, sizeof(msg), "params._meta is missing the required key(s): %s%s%s",
                 pv ? "" : META_VERSION, !pv && !has_caps ? ", " : "", has_caps ? "" : META_CAPS);
        return rpc_error(id, RPC_INVALID_PARAMS, msg);
    }
    if (h) {
        char msg[200];
        if (h->duplicated) {
            snprintf(msg, sizeof(msg), "the %.40s header appears more than once", h->duplicated);
            return rpc_error(id, RPC_HEADER_MISMATCH, msg);
        }
        if (!h->version || !json_is_string(pv) || strcmp(h->version, json_string_value(pv)) != 0)
            return rpc_error(id, RPC_HEADER_MISMATCH,
                             "the MCP-Protocol-Version header does not match the protocol "
                             "version in params._meta");
        if (!h->method || strcmp(h->method, m) != 0)
            return rpc_error(id, RPC_HEADER_MISMATCH,
                             "the Mcp-Method header does not match the body's method");
        const char *name = json_string_value(json_object_get(params, "name"));
        if (strcmp(m, "tools/call") == 0 && name && !name_header_matches(h->name, name))
            return rpc_error(id, RPC_HEADER_MISMATCH,
                             "the Mcp-Name header does not match params.name");
    }
    if (!json_is_string(pv))
        return rpc_error(id, RPC_INVALID_PARAMS,
                         "the protocol version in params._meta must be a string");
    const char *v = json_string_value(pv);
    if (strcmp(v, MODERN_VERSION) != 0) {
        char msg[200];
        snprintf(msg, sizeof(msg),
                 "Unsupported protocol version: %.40s (per request: " MODERN_VERSION
                 "; through initialize: 2025-11-25 to 2024-11-05)",
                 v);
        return unsupported(id, v, modern_only, msg);
    }
    return NULL;
}

/* A 2026-07-28 result: resultType, and the server's identity in _meta. */
static json_t *modern_result(json_t *res)
{
    json_object_set_new(res, "resultType", json_string("complete"));
    json_t *meta = json_object_get(res, "_meta");
    if (!json_is_object(meta)) {
        meta = json_object();
        json_object_set_new(res, "_meta", meta);
    }
    json_object_set_new(meta, META_SERVER_INFO, server_info());
    return res;
}

static json_t *method_not_found(const json_t *id, const char *m, const char *why)
{
    char msg[200];
    snprintf(msg, sizeof(msg), "Method not found: %.100s%s", m, why);
    return rpc_error(id, RPC_METHOD_NOT_FOUND, msg);
}

/* One 2026-07-28 request (its JSON-RPC shape checked); sess is stdio's, else NULL. */
static json_t *modern_request(struct server *s, struct server_session *sess, const json_t *id,
                              const char *m, const json_t *params,
                              const struct server__mcp_headers *h)
{
    bool locked = session_era(s, sess) == SERVER__ERA_MODERN;
    if (strcmp(m, "initialize") == 0)
        return unsupported(id, json_string_value(json_object_get(params, "protocolVersion")),
                           locked,
                           locked ? "this session speaks 2026-07-28, which has no initialize "
                                    "handshake: send server/discover, or start a new session"
                                  : "initialize sent at 2026-07-28, which has no handshake: "
                                    "send it without the 2026-07-28 MCP-Protocol-Version");
    json_t *e = ladder(id, m, params, h, locked);
    if (e)
        return e;
    if (sess && !locked) {
        pthread_mutex_lock(&s->mu);
        if (sess->era == SERVER__ERA_NONE) {
            sess->era = SERVER__ERA_MODERN;
            snprintf(sess->version, sizeof(sess->version), "%s", MODERN_VERSION);
        }
        pthread_mutex_unlock(&s->mu);
    }
    if (strcmp(m, "server/discover") == 0)
        return rpc_result(
            id, modern_result(json_pack("{s:[s], s:{s:{s:b}}, s:s, s:s, s:I}", "supportedVersions",
                                        MODERN_VERSION, "capabilities", "tools", "listChanged", 0,
                                        "instructions", INSTRUCTIONS, "cacheScope", "public",
                                        "ttlMs", (json_int_t)CACHE_TTL_MS)));
    if (strcmp(m, "tools/list") == 0)
        return rpc_result(id, modern_result(json_pack("{s:o, s:s, s:I}", "tools",
                                                      server_tool_list(s), "cacheScope", "public",
                                                      "ttlMs", (json_int_t)CACHE_TTL_MS)));
    if (strcmp(m, "tools/call") == 0) {
        json_t *r = do_tools_call(s, id, params);
        json_t *res = json_object_get(r, "result");
        if (res)
            modern_result(res);
        return r;
    }
    return method_not_found(id, m, strcmp(m, "ping") == 0 ? " (2026-07-28 has no ping)" : "");
}

/* The JSON-RPC shape of one message: NULL when it is well-formed, else the error (*owed
 * false: nothing to answer). *id, *m, *params: its parts. */
static json_t *check_shape(const json_t *msg, const json_t **id, const char **m,
                           const json_t **params, bool *owed)
{
    *owed = true;
    if (!json_is_object(msg))
        return rpc_error(NULL, RPC_INVALID_REQUEST, "a JSON-RPC message is an object");
    json_t *jv = json_object_get(msg, "jsonrpc");
    json_t *rawid = json_object_get(msg, "id");
    json_t *method = json_object_get(msg, "method");
    const json_t *rid = json_is_string(rawid) || json_is_integer(rawid) ? rawid : NULL;
    if (!json_is_string(jv) || strcmp(json_string_value(jv), "2.0") != 0)
        return rpc_error(rid, RPC_INVALID_REQUEST, "\"jsonrpc\" must be \"2.0\"");
    if (!method)
        return rpc_error(rid, RPC_INVALID_REQUEST, "a message needs \"method\" (or is a response)");
    if (!json_is_string(method))
        return rpc_error(rid, RPC_INVALID_REQUEST, "\"method\" must be a string");
    if (rawid && !rid)
        return rpc_error(NULL, RPC_INVALID_REQUEST, "\"id\" must be a string or an integer");
    *params = json_object_get(msg, "params");
    if (*params && !json_is_object(*params)) {
        *owed = rid != NULL;
        return rid ? rpc_error(rid, RPC_INVALID_PARAMS, "\"params\" must be an object") : NULL;
    }
    *id = rid;
    *m = json_string_value(method);
    return NULL;
}

static void count_request(struct server *s)
{
    pthread_mutex_lock(&s->mu);
    s->rpc_requests++;
    pthread_mutex_unlock(&s->mu);
}

/* ---- one message of a session ---- */

/* One message; NULL when nothing is owed (notification, response). */
static json_t *one(struct server *s, struct server_session **sessp, const json_t *msg)
{
    /* A response from the client (we send no requests): accepted, nothing owed. */
    if (json_is_object(msg) && !json_object_get(msg, "method") && json_object_get(msg, "id") &&
        (json_object_get(msg, "result") || json_object_get(msg, "error")))
        return NULL;
    const json_t *id = NULL, *params = NULL;
    const char *m = NULL;
    bool owed;
    json_t *bad = check_shape(msg, &id, &m, &params, &owed);
    if (bad || !owed)
        return bad;
    struct server_session *sess = *sessp;
    if (!id) { /* notification: never answered */
        if (strcmp(m, "notifications/initialized") == 0 && sess && !sess->initialized)
            LOG_DEBUG("initialized before initialize: ignored");
        return NULL;
    }
    count_request(s);
    int era = session_era(s, sess);
    bool enveloped = server__is_modern(msg);
    if (era == SERVER__ERA_MODERN || (era == SERVER__ERA_NONE && enveloped))
        return modern_request(s, sess, id, m, params, NULL);
    if (enveloped)
        return rpc_error(id, RPC_INVALID_REQUEST,
                         "this session began with the initialize handshake: requests in the "
                         "2026-07-28 envelope (params._meta's protocol version) are not "
                         "accepted on it");
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
    return method_not_found(id, m, "");
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

/* HTTP status of a 2026-07-28 reply: the SDK's table (inbound.py's ERROR_CODE_HTTP_STATUS). */
static unsigned modern_status(const json_t *reply)
{
    json_t *e = json_object_get(reply, "error");
    if (!e)
        return 200;
    switch (json_integer_value(json_object_get(e, "code"))) {
    case RPC_METHOD_NOT_FOUND:
        return 404;
    case RPC_PARSE_ERROR:
    case RPC_INVALID_REQUEST:
    case RPC_INVALID_PARAMS:
    case RPC_HEADER_MISMATCH:
    case RPC_UNSUPPORTED_VERSION:
        return 400;
    default:
        return 200;
    }
}

void server__rpc_modern(struct server *s, const char *body, size_t len,
                        const struct server__mcp_headers *h, json_t **reply, unsigned *status)
{
    *reply = NULL;
    *status = 202;
    json_t *msg = NULL;
    struct ca_err err = {0};
    int rc = jsonx_parse(sv_from(body, len), s->o.max_body, "request", &msg, &err);
    if (rc) {
        char m[CA_ERR_MSG_MAX + 32];
        snprintf(m, sizeof(m), "%s: %s", rc == CA_ETOOBIG ? "Request too large" : "Parse error",
                 err.msg);
        *reply = rpc_error(NULL, rc == CA_ETOOBIG ? RPC_INVALID_REQUEST : RPC_PARSE_ERROR, m);
        goto out;
    }
    const json_t *id = NULL, *params = NULL;
    const char *m = NULL;
    bool owed;
    if (!json_is_object(msg) || !json_object_get(msg, "method")) {
        *reply = rpc_error(NULL, RPC_INVALID_REQUEST,
                           "a 2026-07-28 POST holds one JSON-RPC request or notification object "
                           "(no batches, no responses)");
        goto out;
    }
    *reply = check_shape(msg, &id, &m, &params, &owed);
    if (*reply || !owed)
        goto out;
    if (!id) { /* a notification: acknowledged (202) and dropped, at a revision we serve */
        if (!h->version || strcmp(h->version, MODERN_VERSION) != 0)
            *reply = unsupported(NULL, h->version, false,
                                 "Unsupported protocol version in the MCP-Protocol-Version "
                                 "header");
        goto out;
    }
    count_request(s);
    *reply = modern_request(s, NULL, id, m, params, h);
out:
    if (*reply) {
        count_error(s, *reply);
        *status = modern_status(*reply);
    }
    json_decref(msg);
}
