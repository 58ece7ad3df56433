/*
 * http.c - the HTTP listener (libmicrohttpd): MCP's Streamable HTTP transport
 * at /mcp, the OpenEnv facade (/health, /schema, /metadata, /reset, /step,
 * /state, the /ws WebSocket session), and /metrics.
 *
 * Threading: libmicrohttpd runs one thread per connection
 * (MHD_USE_THREAD_PER_CONNECTION), so a tool call that blocks for minutes
 * (an evaluation) holds only its own connection; the connection limit bounds
 * the threads. A WebSocket session, once upgraded, gets a thread of its own.
 *
 * /mcp serves both eras. A POST whose MCP-Protocol-Version names no handshake
 * revision, or a session-less POST of a 2026-07-28 request, is stateless
 * (mcp_post_modern: no session; the body's envelope is checked against the
 * routing headers by server__rpc_modern, which picks the HTTP status).
 * Otherwise the 2025-11-25 transport: POST one JSON-RPC message (Accept
 * must list application/json and text/event-stream, else 406; Content-Type
 * application/json, else 415); the initialize response carries
 * Mcp-Session-Id, every later request must send it (400 without, 404 for an
 * unknown or ended one); notifications and responses get 202; a present
 * MCP-Protocol-Version header must name the session's revision (400).
 * Replies are application/json (no server-to-client stream: GET is 405).
 * DELETE ends the session. A browser Origin that is not loopback is refused
 * (403) unless a bearer token is required. With opts.token every path but
 * /health needs "Authorization: Bearer TOKEN" (401).
 *
 * Limits: a body over max_body is refused with 413 before or while it is
 * read (never buffered past the limit); JSON depth and the rest are
 * server_rpc's.
 */
#include "server/server.h"
#include "server/server_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/hash.h"
#include "core/json.h"
#include "core/limits.h"
#include "core/log.h"
#include "core/banned.h"

#define HTTP_CONNECTIONS_MAX 1024
#define HTTP_IDLE_TIMEOUT_S 3600
#define WS_GUID "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

struct http_req {
    struct buf body;
    bool too_big;
    int64_t t0;
};

struct http_ctx {
    struct server *s;
};

/* ---- responses ---- */

static enum MHD_Result send_body(struct MHD_Connection *c, struct server *s, unsigned status,
                                 const char *ctype, const char *body, size_t len, const char *h1,
                                 const char *v1)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!r)
        return MHD_NO;
    if (ctype)
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    if (h1)
        MHD_add_response_header(r, h1, v1);
    if (status == MHD_HTTP_UNAUTHORIZED)
        MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, h1 ? v1 : "GET, POST");
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    server__count_http(s, status);
    return ret;
}

static enum MHD_Result send_json(struct MHD_Connection *c, struct server *s, unsigned status,
                                 json_t *v, const char *h1, const char *v1)
{
    struct buf b;
    buf_init(&b, BUF_MAX_INTERNAL);
    if (jsonx_dump(v, 0, &b))
        BUG("JSON dump over an unbounded buffer");
    json_decref(v);
    enum MHD_Result r = send_body(c, s, status, "application/json", b.data, b.len, h1, v1);
    buf_release(&b);
    return r;
}

/* {"error": msg} with the status; also a JSON-RPC error object for /mcp callers. */
static enum MHD_Result send_error(struct MHD_Connection *c, struct server *s, unsigned status,
                                  int rpc_code, const char *msg)
{
    json_t *v = rpc_code ? json_pack("{s:s, s:n, s:{s:i, s:s}}", "jsonrpc", "2.0", "id", "error",
                                     "code", rpc_code, "message", msg)
                         : json_pack("{s:s}", "error", msg);
    return send_json(c, s, status, v, NULL, NULL);
}

/* ---- checks ---- */

static bool ct_equal(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    unsigned char d = (unsigned char)(la != lb);
    for (size_t i = 0; i < la && i < lb; i++)
        d |= (unsigned char)(a[i] ^ b[i]);
    return d == 0;
}

static bool authorized(struct MHD_Connection *c, const struct server *s)
{
    const char *tok = s->o.token;
    if (!tok || !*tok)
        return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!h || strncasecmp(h, "Bearer ", 7) != 0)
        return false;
    return ct_equal(h + 7, tok);
}

/* A browser's Origin: loopback origins only, unless the token guards the server. */
static bool origin_ok(struct MHD_Connection *c, const struct server *s)
{
    const char *o = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    if (!o || (s->o.token && *s->o.token))
        return true;
    const char *p = strstr(o, "://");
    if (!p)
        return false;
    p += 3;
    static const char *const hosts[] = {"localhost", "127.0.0.1", "[::1]", NULL};
    for (size_t i = 0; hosts[i]; i++) {
        size_t n = strlen(hosts[i]);
        if (strncmp(p, hosts[i], n) == 0 && (p[n] == '\0' || p[n] == ':' || p[n] == '/'))
            return true;
    }
    return false;
}

static bool header_has(struct MHD_Connection *c, const char *name, const char *token)
{
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, name);
    return h && strcasestr(h, token);
}

/* ---- /mcp ---- */

/* Which era a POST is in: 2026-07-28 when its MCP-Protocol-Version names no handshake
 * revision (an unknown one too, so that it gets -32022 naming ours), or, without a session,
 * when its body is a 2026-07-28 request or the server/discover probe (a missing header is
 * then the ladder's -32020). */
static bool is_modern_post(struct MHD_Connection *c, const struct http_req *rq, const char *sid)
{
    const char *pv = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "MCP-Protocol-Version");
    if (pv)
        return !server__handshake_revision(pv);
    if (sid)
        return false;
    /* Depth first: json_loadb recurses (the limit is checked again by the parser proper). */
    if (jsonx_depth(sv_from(rq->body.data, rq->body.len)) > CA_LIMIT_JSON_DEPTH)
        return false;
    json_t *m = json_loadb(rq->body.data, rq->body.len, 0, NULL);
    const char *meth = json_string_value(json_object_get(m, "method"));
    bool modern = server__is_modern(m) || (meth && strcmp(meth, "server/discover") == 0);
    json_decref(m);
    return modern;
}

struct routing_count {
    const char *dup;
    int version, method, name;
};

static enum MHD_Result count_routing(void *cls, enum MHD_ValueKind kind, const char *key,
                                     const char *value)
{
    struct routing_count *rc = cls;
    static const char *const names[] = {"MCP-Protocol-Version", "Mcp-Method", "Mcp-Name"};
    int *n[] = {&rc->version, &rc->method, &rc->name};
    for (size_t i = 0; i < 3; i++)
        if (strcasecmp(key, names[i]) == 0 && ++*n[i] == 2 && !rc->dup)
            rc->dup = names[i];
    return MHD_YES;
}

/* A 2026-07-28 POST: no session; the body's envelope is checked against the headers. */
static enum MHD_Result mcp_post_modern(struct MHD_Connection *c, struct server *s,
                                       struct http_req *rq)
{
    struct routing_count rc = {0};
    (void)MHD_get_connection_values(c, MHD_HEADER_KIND, count_routing, &rc);
    struct server__mcp_headers h = {
        .version = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "MCP-Protocol-Version"),
        .method = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Mcp-Method"),
        .name = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Mcp-Name"),
        .duplicated = rc.dup,
    };
    json_t *reply;
    unsigned status;
    server__rpc_modern(s, rq->body.data, rq->body.len, &h, &reply, &status);
    if (!reply)
        return send_body(c, s, MHD_HTTP_ACCEPTED, NULL, "", 0, NULL, NULL);
    return send_json(c, s, status, reply, NULL, NULL);
}

static enum MHD_Result mcp_post(struct MHD_Connection *c, struct server *s, struct http_req *rq)
{
    const char *accept = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Accept");
    if (!accept || !strcasestr(accept, "application/json") ||
        !strcasestr(accept, "text/event-stream"))
        return send_error(c, s, MHD_HTTP_NOT_ACCEPTABLE, RPC_INVALID_REQUEST,
                          "Not Acceptable: the Accept header must list application/json and "
                          "text/event-stream");
    if (!header_has(c, "Content-Type", "application/json"))
        return send_error(c, s, MHD_HTTP_UNSUPPORTED_MEDIA_TYPE, RPC_INVALID_REQUEST,
                          "Unsupported Media Type: the body must be application/json");
    const char *sid = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Mcp-Session-Id");
    if (is_modern_post(c, rq, sid))
        return mcp_post_modern(c, s, rq);
    struct server_session *sess = NULL;
    if (sid) {
        sess = server_session_find(s, sid);
        if (!sess)
            return send_error(c, s, MHD_HTTP_NOT_FOUND, RPC_INVALID_REQUEST,
                              "Session not found: it ended or never existed; initialize a new "
                              "one");
        const char *pv = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "MCP-Protocol-Version");
        if (pv && *sess->version && strcmp(pv, sess->version) != 0) {
            server_session_release(s, sess);
            return send_error(c, s, MHD_HTTP_BAD_REQUEST, RPC_INVALID_REQUEST,
                              "Bad Request: MCP-Protocol-Version does not match the session's "
                              "negotiated revision");
        }
    } else {
        /* Without a session only initialize may come; server_rpc refuses anything else. */
        json_t *m = json_loadb(rq->body.data, rq->body.len, 0, NULL);
        const char *meth = json_string_value(json_object_get(m, "method"));
        bool init = meth && strcmp(meth, "initialize") == 0;
        bool parsed = m != NULL;
        json_decref(m);
        if (parsed && !init &&
            jsonx_depth(sv_from(rq->body.data, rq->body.len)) <= CA_LIMIT_JSON_DEPTH)
            return send_error(c, s, MHD_HTTP_BAD_REQUEST, RPC_INVALID_REQUEST,
                              "Bad Request: Mcp-Session-Id header required (send initialize "
                              "first)");
    }
    json_t *reply;
    bool parse_error;
    struct server_session *before = sess;
    server_rpc(s, &sess, rq->body.data, rq->body.len, &reply, &parse_error);
    enum MHD_Result r;
    unsigned status = parse_error ? MHD_HTTP_BAD_REQUEST : MHD_HTTP_OK;
    if (!reply)
        r = send_body(c, s, MHD_HTTP_ACCEPTED, NULL, "", 0, NULL, NULL);
    else if (!before && sess && json_object_get(reply, "result"))
        r = send_json(c, s, status, reply, "Mcp-Session-Id", sess->id);
    else
        r = send_json(c, s, status, reply, NULL, NULL);
    server_session_release(s, sess);
    return r;
}

static enum MHD_Result mcp_delete(struct MHD_Connection *c, struct server *s)
{
    const char *sid = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Mcp-Session-Id");
    if (!sid)
        return send_error(c, s, MHD_HTTP_BAD_REQUEST, 0, "Mcp-Session-Id header required");
    if (server_session_end(s, sid) != 0)
        return send_error(c, s, MHD_HTTP_NOT_FOUND, 0, "session not found");
    return send_body(c, s, MHD_HTTP_OK, NULL, "", 0, NULL, NULL);
}

/* ---- WebSocket (RFC 6455) for OpenEnv's /ws ---- */

struct ws_conn {
    struct server *s;
    int fd;
    struct MHD_UpgradeResponseHandle *urh;
    struct buf pending; /* bytes MHD read past the handshake */
    char episode[EPISODE_ID_MAX + 1];
    struct server_session *sess; /* for "mcp" messages */
};

static int ws_read(struct ws_conn *w, void *p, size_t n)
{
    size_t got = 0;
    if (w->pending.len) {
        size_t k = n < w->pending.len ? n : w->pending.len;
        memcpy(p, w->pending.data, k);
        buf_remove_prefix(&w->pending, k);
        got = k;
    }
    while (got < n) {
        struct pollfd pf = {.fd = w->fd, .events = POLLIN};
        int k = poll(&pf, 1, HTTP_IDLE_TIMEOUT_S * 1000);
        if (k == 0)
            return CA_ETIMEOUT;
        if (k < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        ssize_t r = recv(w->fd, (char *)p + got, n - got, 0);
        if (r < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (r <= 0)
            return r == 0 ? -ECONNRESET : -errno;
        got += (size_t)r;
    }
    return 0;
}

static int ws_write_all(int fd, const void *p, size_t n)
{
    size_t off = 0;
    while (off < n) {
        ssize_t r = send(fd, (const char *)p + off, n - off, MSG_NOSIGNAL);
        if (r < 0 && (errno == EINTR || errno == EAGAIN)) {
            struct pollfd pf = {.fd = fd, .events = POLLOUT};
            (void)poll(&pf, 1, 1000);
            continue;
        }
        if (r <= 0)
            return -errno;
        off += (size_t)r;
    }
    return 0;
}

static int ws_send(struct ws_conn *w, int opcode, const void *p, size_t n)
{
    unsigned char h[10];
    size_t hl = 2;
    h[0] = (unsigned char)(0x80 | opcode);
    if (n < 126) {
        h[1] = (unsigned char)n;
    } else if (n < 65536) {
        h[1] = 126;
        h[2] = (unsigned char)(n >> 8);
        h[3] = (unsigned char)n;
        hl = 4;
    } else {
        h[1] = 127;
        for (int i = 0; i < 8; i++)
            h[2 + i] = (unsigned char)((uint64_t)n >> (56 - 8 * i));
        hl = 10;
    }
    int rc = ws_write_all(w->fd, h, hl);
    return rc ? rc : ws_write_all(w->fd, p, n);
}

static int ws_send_json(struct ws_conn *w, json_t *v)
{
    struct buf b;
    buf_init(&b, BUF_MAX_INTERNAL);
    if (jsonx_dump(v, 0, &b))
        BUG("JSON dump over an unbounded buffer");
    json_decref(v);
    int rc = ws_send(w, 1, b.data, b.len);
    buf_release(&b);
    return rc;
}

static json_t *ws_error(const char *code, const char *msg)
{
    return json_pack("{s:s, s:{s:s, s:s}}", "type", "error", "data", "message", msg, "code", code);
}

/* One text message: OpenEnv's {"type": reset|step|state|close|mcp, "data": {...}}. */
static bool ws_message(struct ws_conn *w, const char *p, size_t n)
{
    json_t *m = NULL;
    struct ca_err err = {0};
    if (jsonx_parse(sv_from(p, n), w->s->o.max_body, "message", &m, &err) != 0 ||
        !json_is_object(m)) {
        json_decref(m);
        return ws_send_json(w, ws_error("INVALID_JSON", err.msg[0] ? err.msg : "not an object")) ==
               0;
    }
    const char *type = json_string_value(json_object_get(m, "type"));
    json_t *data = json_object_get(m, "data");
    json_t *empty = NULL;
    if (!json_is_object(data))
        data = empty = json_object();
    json_t *out = NULL;
    bool keep = true;
    unsigned status = 200;
    if (!type) {
        out = ws_error("INVALID_MESSAGE", "a message needs \"type\"");
    } else if (strcmp(type, "reset") == 0) {
        if (w->episode[0]) { /* the session's previous episode gives its slot back */
            json_t *a = json_pack("{s:s, s:b}", "episode_id", w->episode, "final_eval", 0), *r;
            if (server_call_tool(w->s, "finish", a, &r) == 0)
                json_decref(r);
            json_decref(a);
            w->episode[0] = '\0';
        }
        json_t *obs = server__openenv_reset(w->s, data, &status);
        const char *id =
            json_string_value(json_object_get(json_object_get(obs, "observation"), "episode_id"));
        if (status == 200 && id) {
            snprintf(w->episode, sizeof(w->episode), "%s", id);
            out = json_pack("{s:s, s:o}", "type", "observation", "data", obs);
        } else {
            const char *msg = json_string_value(json_object_get(obs, "error"));
            out = ws_error("EXECUTION_ERROR", msg ? msg : "reset failed");
            json_decref(obs);
        }
    } else if (strcmp(type, "step") == 0) {
        json_t *req = json_pack("{s:O}", "action", data);
        json_t *obs = server__openenv_step(w->s, req, w->episode[0] ? w->episode : NULL, &status);
        json_decref(req);
        if (status == 200) {
            out = json_pack("{s:s, s:o}", "type", "observation", "data", obs);
        } else {
            const char *msg = json_string_value(json_object_get(obs, "error"));
            out = ws_error("EXECUTION_ERROR", msg ? msg : "step failed");
            json_decref(obs);
        }
    } else if (strcmp(type, "state") == 0) {
        json_t *st = server__openenv_state(w->s, w->episode[0] ? w->episode : NULL, &status);
        out = json_pack("{s:s, s:o}", "type", "state", "data", st);
    } else if (strcmp(type, "close") == 0) {
        keep = false;
    } else if (strcmp(type, "mcp") == 0) {
        if (!w->sess) {
            w->sess = server_session_new(w->s);
            /* The WebSocket's MCP messages: one handshake-era session, initialized. */
            snprintf(w->sess->version, sizeof(w->sess->version), "2025-11-25");
            w->sess->initialized = true;
            pthread_mutex_lock(&w->s->mu);
            w->sess->era = SERVER__ERA_HANDSHAKE;
            pthread_mutex_unlock(&w->s->mu);
        }
        struct buf b;
        buf_init(&b, BUF_MAX_INTERNAL);
        json_t *reply = NULL;
        bool pe;
        if (jsonx_dump(data, 0, &b) == 0)
            server_rpc(w->s, &w->sess, b.data, b.len, &reply, &pe);
        buf_release(&b);
        out = json_pack("{s:s, s:o}", "type", "mcp", "data", reply ? reply : json_object());
    } else {
        out = ws_error("UNKNOWN_TYPE", "unknown message type (reset, step, state, close, mcp)");
    }
    json_decref(empty);
    json_decref(m);
    if (out && ws_send_json(w, out) != 0)
        return false;
    return keep;
}

static void *ws_main(void *arg)
{
    struct ws_conn *w = arg;
    struct buf msg;
    buf_init(&msg, w->s->o.max_body);
    int fl = fcntl(w->fd, F_GETFL);
    if (fl >= 0)
        (void)fcntl(w->fd, F_SETFL, fl & ~O_NONBLOCK);
    for (;;) {
        unsigned char h[2], ext[8], mask[4];
        if (ws_read(w, h, 2))
            break;
        bool fin = h[0] & 0x80, masked = h[1] & 0x80;
        int op = h[0] & 0x0f;
        uint64_t len = h[1] & 0x7f;
        if (len == 126) {
            if (ws_read(w, ext, 2))
                break;
            len = (uint64_t)ext[0] << 8 | ext[1];
        } else if (len == 127) {
            if (ws_read(w, ext, 8))
                break;
            len = 0;
            for (int i = 0; i < 8; i++)
                len = len << 8 | ext[i];
        }
        if (!masked || (h[0] & 0x70)) { /* clients mask every frame; no extensions */
            (void)ws_send(w, 8, "\x03\xea", 2);
            break;
        }
        if (ws_read(w, mask, 4))
            break;
        if (len > w->s->o.max_body || msg.len + len > msg.max) {
            (void)ws_send(w, 8, "\x03\xf1", 2); /* 1009: message too big */
            break;
        }
        size_t at = msg.len;
        if (buf_reserve(&msg, (size_t)len))
            break;
        if (ws_read(w, msg.data + at, (size_t)len))
            break;
        for (size_t i = 0; i < len; i++)
            msg.data[at + i] ^= (char)mask[i % 4];
        if (op >= 8) { /* control frames are never fragmented; they carry <= 125 bytes */
            if (op == 8) {
                (void)ws_send(w, 8, msg.data + at, len >= 2 ? 2 : 0);
                break;
            }
            if (op == 9 && ws_send(w, 10, msg.data + at, (size_t)len))
                break;
            msg.len = at;
            msg.data[at] = '\0';
            continue;
        }
        msg.len = at + (size_t)len;
        msg.data[msg.len] = '\0';
        if (!fin)
            continue;
        bool keep = ws_message(w, msg.data, msg.len);
        buf_reset(&msg);
        if (!keep) {
            (void)ws_send(w, 8, "\x03\xe8", 2);
            break;
        }
    }
    buf_release(&msg);
    buf_release(&w->pending);
    if (w->sess) {
        (void)server_session_end(w->s, w->sess->id);
        server_session_release(w->s, w->sess);
    }
    /* The episode outlives the connection until its TTL, as any other. */
    MHD_upgrade_action(w->urh, MHD_UPGRADE_ACTION_CLOSE);
    free(w);
    return NULL;
}

static void ws_upgraded(void *cls, struct MHD_Connection *c, void *req_cls, const char *extra,
                        size_t extra_len, MHD_socket sock, struct MHD_UpgradeResponseHandle *urh)
{
    struct ws_conn *w = xcalloc(1, sizeof(*w));
    w->s = cls;
    w->fd = sock;
    w->urh = urh;
    buf_init(&w->pending, BUF_MAX_INTERNAL);
    if (extra_len && buf_add(&w->pending, extra, extra_len))
        BUG("unbounded buffer refused");
    pthread_t th;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 512 * 1024);
    if (pthread_create(&th, &attr, ws_main, w) != 0) {
        LOG_WARN("websocket: no thread for the session");
        buf_release(&w->pending);
        MHD_upgrade_action(urh, MHD_UPGRADE_ACTION_CLOSE);
        free(w);
    }
    pthread_attr_destroy(&attr);
}

static enum MHD_Result ws_accept(struct MHD_Connection *c, struct server *s)
{
    const char *key = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Sec-WebSocket-Key");
    if (!key || !header_has(c, "Upgrade", "websocket") || strlen(key) > 64)
        return send_error(c, s, MHD_HTTP_BAD_REQUEST, 0,
                          "/ws is a WebSocket endpoint: send an Upgrade: websocket request");
    char *cat = xstrfmt("%s%s", key, WS_GUID);
    unsigned char dig[20];
    sha1_digest(cat, strlen(cat), dig);
    free(cat);
    struct buf acc;
    buf_init(&acc, 64);
    if (server__base64(dig, sizeof(dig), &acc))
        BUG("base64 of a digest over 64 bytes");
    struct MHD_Response *r = MHD_create_response_for_upgrade(ws_upgraded, s);
    MHD_add_response_header(r, MHD_HTTP_HEADER_UPGRADE, "websocket");
    MHD_add_response_header(r, "Sec-WebSocket-Accept", acc.data);
    buf_release(&acc);
    enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_SWITCHING_PROTOCOLS, r);
    MHD_destroy_response(r);
    server__count_http(s, 101);
    return ret;
}

/* ---- routing ---- */

static json_t *parse_body(struct server *s, struct http_req *rq, char *msg, size_t msgn)
{
    if (rq->body.len == 0)
        return json_object();
    json_t *v = NULL;
    struct ca_err err = {0};
    if (jsonx_parse(sv_from(rq->body.data, rq->body.len), s->o.max_body, "body", &v, &err)) {
        snprintf(msg, msgn, "%s", err.msg);
        return NULL;
    }
    if (!json_is_object(v)) {
        json_decref(v);
        snprintf(msg, msgn, "the body must be a JSON object");
        return NULL;
    }
    return v;
}

static enum MHD_Result route(struct MHD_Connection *c, struct server *s, const char *url,
                             const char *method, struct http_req *rq)
{
    bool get = strcmp(method, "GET") == 0, post = strcmp(method, "POST") == 0;
    if (strcmp(url, "/health") == 0)
        return get ? send_json(c, s, 200, json_pack("{s:s}", "status", "healthy"), NULL, NULL)
                   : send_body(c, s, MHD_HTTP_METHOD_NOT_ALLOWED, NULL, "", 0, "Allow", "GET");
    if (!authorized(c, s))
        return send_error(c, s, MHD_HTTP_UNAUTHORIZED,
                          strcmp(url, "/mcp") ? 0 : RPC_INVALID_REQUEST,
                          "Unauthorized: send Authorization: Bearer TOKEN");
    if (!origin_ok(c, s))
        return send_error(c, s, MHD_HTTP_FORBIDDEN, 0, "Forbidden: cross-origin request");
    if (rq->too_big) {
        char m[128];
        snprintf(m, sizeof(m), "Payload Too Large: a request is at most %zu bytes", s->o.max_body);
        return send_error(c, s, MHD_HTTP_CONTENT_TOO_LARGE,
                          strcmp(url, "/mcp") ? 0 : RPC_INVALID_REQUEST, m);
    }
    if (strcmp(url, "/mcp") == 0) {
        if (post)
            return mcp_post(c, s, rq);
        if (strcmp(method, "DELETE") == 0)
            return mcp_delete(c, s);
        return send_body(c, s, MHD_HTTP_METHOD_NOT_ALLOWED, NULL, "", 0, "Allow", "POST, DELETE");
    }
    if (strcmp(url, "/metrics") == 0 && get) {
        struct buf b;
        buf_init(&b, BUF_MAX_INTERNAL);
        if (server_metrics(s, &b))
            BUG("metrics over an unbounded buffer");
        enum MHD_Result r =
            send_body(c, s, 200, "text/plain; version=0.0.4", b.data, b.len, NULL, NULL);
        buf_release(&b);
        return r;
    }
    if (strcmp(url, "/ws") == 0 && get)
        return ws_accept(c, s);
    if (strcmp(url, "/schema") == 0 && get)
        return send_json(c, s, 200, server__openenv_schema(s), NULL, NULL);
    if (strcmp(url, "/metadata") == 0 && get)
        return send_json(c, s, 200,
                         json_pack("{s:s, s:s, s:s}", "name", "cuda-agent", "description",
                                   "Write fast, correct CUDA kernels for PyTorch reference tasks "
                                   "in a sandboxed workspace; rewarded by a trusted evaluator.",
                                   "version", CA_VERSION),
                         NULL, NULL);
    if (strcmp(url, "/state") == 0 && get) {
        unsigned st = 200;
        json_t *v = server__openenv_state(
            s, MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "episode_id"), &st);
        return send_json(c, s, st, v, NULL, NULL);
    }
    if ((strcmp(url, "/reset") == 0 || strcmp(url, "/step") == 0) && post) {
        char msg[CA_ERR_MSG_MAX + 32] = "";
        json_t *body = parse_body(s, rq, msg, sizeof(msg));
        if (!body)
            return send_error(c, s, 422, 0, msg);
        unsigned st = 200;
        json_t *v = url[1] == 'r' ? server__openenv_reset(s, body, &st)
                                  : server__openenv_step(s, body, NULL, &st);
        json_decref(body);
        return send_json(c, s, st, v, NULL, NULL);
    }
    static const char *const known[] = {"/metrics", "/ws",    "/schema", "/metadata",
                                        "/state",   "/reset", "/step",   NULL};
    for (size_t i = 0; known[i]; i++)
        if (strcmp(url, known[i]) == 0)
            return send_body(c, s, MHD_HTTP_METHOD_NOT_ALLOWED, NULL, "", 0, "Allow",
                             i >= 5 ? "POST" : "GET");
    return send_error(c, s, MHD_HTTP_NOT_FOUND, 0, "no such path");
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **req_cls)
{
    struct http_ctx *hc = cls;
    struct server *s = hc->s;
    struct http_req *rq = *req_cls;
    if (!rq) {
        rq = xcalloc(1, sizeof(*rq));
        buf_init(&rq->body, s->o.max_body);
        rq->t0 = ca_now_us();
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        uint64_t n;
        if (cl && (sv_parse_u64(sv_cstr(cl), &n, "Content-Length", NULL) || n > s->o.max_body))
            rq->too_big = true;
        *req_cls = rq;
        server__inflight_add(s, 1);
        return MHD_YES;
    }
    if (*upload_size) {
        if (!rq->too_big && buf_add(&rq->body, upload, *upload_size)) {
            rq->too_big = true;
            buf_release(&rq->body);
            buf_init(&rq->body, 0);
        }
        *upload_size = 0;
        return MHD_YES;
    }
    enum MHD_Result r = route(c, s, url, method, rq);
    if (log_events_on())
        log_event("serve.http", ca_now_us() - rq->t0,
                  json_pack("{s:s, s:s, s:I}", "method", method, "path", url, "bytes",
                            (json_int_t)rq->body.len));
    return r;
}

static void on_done(void *cls, struct MHD_Connection *c, void **req_cls,
                    enum MHD_RequestTerminationCode why)
{
    struct http_ctx *hc = cls;
    struct http_req *rq = *req_cls;
    if (!rq)
        return;
    buf_release(&rq->body);
    free(rq);
    *req_cls = NULL;
    server__inflight_add(hc->s, -1);
}

/* ---- listening ---- */

static int parse_addr(const char *addr, struct sockaddr_storage *ss, socklen_t *len,
                      struct ca_err *err)
{
    const char *colon = strrchr(addr, ':');
    if (!colon || !colon[1])
        return err_setf(err, CA_EUSAGE, "'%s' is no ADDR:PORT (e.g. 127.0.0.1:8000)", addr);
    struct sv host = sv_from(addr, (size_t)(colon - addr));
    if (host.len >= 2 && host.p[0] == '[' && host.p[host.len - 1] == ']')
        host = sv_sub(host, 1, host.len - 2);
    char *h = host.len ? sv_dup(host) : xstrdup("127.0.0.1");
    int64_t port;
    if (sv_parse_range(sv_cstr(colon + 1), 0, 65535, &port, "port", err)) {
        free(h);
        return CA_EUSAGE;
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE},
                    *res = NULL;
    int g = getaddrinfo(h, NULL, &hints, &res);
    if (g != 0 || !res) {
        int rc = err_setf(err, CA_EUSAGE, "cannot resolve '%s': %s", h, gai_strerror(g));
        free(h);
        return rc;
    }
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *len = res->ai_addrlen;
    freeaddrinfo(res);
    free(h);
    if (ss->ss_family == AF_INET)
        ((struct sockaddr_in *)ss)->sin_port = htons((uint16_t)port);
    else
        ((struct sockaddr_in6 *)ss)->sin6_port = htons((uint16_t)port);
    return 0;
}

int server_addr_loopback(const char *addr, struct ca_err *err)
{
    struct sockaddr_storage ss;
    socklen_t len;
    int rc = parse_addr(addr, &ss, &len, err);
    if (rc)
        return rc;
    if (ss.ss_family == AF_INET)
        return (ntohl(((struct sockaddr_in *)&ss)->sin_addr.s_addr) >> 24) == 127;
    const struct in6_addr *a6 = &((struct sockaddr_in6 *)&ss)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(a6);
}

int server_run_http(struct server *s, const char *addr, volatile sig_atomic_t *stop,
                    int64_t drain_ms, struct ca_err *err)
{
    struct sockaddr_storage ss;
    socklen_t len;
    int rc = parse_addr(addr, &ss, &len, err);
    if (rc)
        return rc;
    if (server_addr_loopback(addr, NULL) != 1 && !(s->o.token && *s->o.token))
        return err_setf(err, CA_EUSAGE,
                        "%s is not a loopback address: a bearer token is required (--token-file "
                        "or $CUDA_AGENT_SERVE_TOKEN)",
                        addr);
    struct http_ctx hc = {.s = s};
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ITC |
                     MHD_ALLOW_UPGRADE | MHD_USE_ERROR_LOG;
    if (ss.ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    struct MHD_Daemon *d = MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, &hc, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)HTTP_CONNECTIONS_MAX, MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned)HTTP_IDLE_TIMEOUT_S, MHD_OPTION_NOTIFY_COMPLETED, on_done, &hc,
        MHD_OPTION_THREAD_STACK_SIZE, (size_t)(512 * 1024), MHD_OPTION_CONNECTION_MEMORY_LIMIT,
        (size_t)(32 * 1024), MHD_OPTION_END);
    if (!d)
        return err_setf(err, -EADDRINUSE, "cannot listen on %s: %s", addr, strerror(errno));
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    unsigned port = info ? info->port : 0;
    char host[INET6_ADDRSTRLEN] = "?";
    if (ss.ss_family == AF_INET)
        inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, host, sizeof(host));
    else
        inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, host, sizeof(host));
    /* Tests and scripts read this line for the port (ADDR:0 picks a free one). */
    fprintf(stderr, "cuda-agent serve: listening on http://%s%s%s:%u (MCP at /mcp)\n",
            ss.ss_family == AF_INET6 ? "[" : "", host, ss.ss_family == AF_INET6 ? "]" : "", port);
    fflush(stderr);
    while (!*stop)
        (void)poll(NULL, 0, 200);
    /* Drain: stop accepting, let the requests in flight finish (their results are not lost),
     * then stop. Episodes stay up until their TTL; a restarted server re-attaches. */
    LOG_WARN("serve: draining (%" PRId64 " requests in flight)", server_inflight(s));
    MHD_socket lfd = MHD_quiesce_daemon(d);
    if (lfd != MHD_INVALID_SOCKET)
        close(lfd);
    int64_t until = ca_now_us() + drain_ms * 1000;
    while (server_inflight(s) > 0 && ca_now_us() < until)
        (void)poll(NULL, 0, 50);
    if (server_inflight(s) > 0) {
        LOG_WARN("serve: %" PRId64 " requests still running after the drain timeout: exiting",
                 server_inflight(s));
        return 0; /* the daemon's threads would block its stop; the process ends */
    }
    MHD_stop_daemon(d);
    return 0;
}
