/*
 * server_internal.h - shared between the server's files: the JSON-RPC error
 * codes, the session and episode tables, metrics.
 */
#ifndef CA_SERVER_INTERNAL_H
#define CA_SERVER_INTERNAL_H

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/buf.h"
#include "core/err.h"
#include "episode/episode.h"
#include "server/server.h"
#include "task/task.h"

/* JSON-RPC 2.0 error codes. */
enum {
    RPC_PARSE_ERROR = -32700,
    RPC_INVALID_REQUEST = -32600,
    RPC_METHOD_NOT_FOUND = -32601,
    RPC_INVALID_PARAMS = -32602,
    RPC_INTERNAL_ERROR = -32603,
};

#define SERVER_SESSION_ID_LEN 32

struct server_session {
    char id[SERVER_SESSION_ID_LEN + 1];
    char version[16]; /* "" until initialize */
    bool initialized; /* initialize answered */
    int64_t last_us;
    int refs;   /* holders: server_session_new/find's callers (under the server's mu) */
    bool ended; /* out of the list (DELETE, eviction); freed at the last release */
    struct server_session *next;
};

struct server__episode {
    char id[EPISODE_ID_MAX + 1];
    char *workspace;
    char *task_id;
    int64_t seed;
    int64_t created_us, last_us; /* ca_now_us */
    int64_t wall_ms, ttl_ms;
    int64_t calls;
    int busy;       /* calls in flight */
    bool finishing; /* a finish runs */
    json_t *result; /* finish's structuredContent once finished; owned */
    struct server__episode *next;
};

/* Tool-call latency buckets (seconds) for /metrics. */
#define SERVER__BUCKETS 10

struct server {
    struct server_opts o;
    char *root, *state_dir, *episodes_dir, *ws_dir;
    struct task_set tasks; /* read-only after server_new */
    json_t *tool_list;     /* tools/list, built once */
    pthread_mutex_t mu;    /* sessions, episodes, metrics below */
    struct server_session *sessions;
    int64_t nsessions;
    struct server__episode *episodes;
    int64_t live; /* unfinished episodes in the table */
    atomic_int_fast64_t inflight;
    /* metrics (under mu) */
    int64_t rpc_requests, rpc_errors, tool_calls, tool_errors;
    int64_t episodes_started, episodes_finished, episodes_expired;
    int64_t http_requests[6]; /* by status class: 1xx..5xx, [0] other */
    int64_t lat_buckets[SERVER__BUCKETS + 1];
    double lat_sum;
};

/* A CallToolResult with one text block (new reference). */
json_t *server__tool_result(const char *text, size_t len, json_t *structured, bool is_error);
json_t *server__tool_errorf(const char *fmt, ...) CA_PRINTF(1, 2);
void server__count_http(struct server *s, unsigned status);

/* OpenEnv facade (openenv.c): reset / step / state bodies as the openenv-core client reads
 * them; *status is the HTTP status. */
json_t *server__openenv_reset(struct server *s, const json_t *req, unsigned *status);
json_t *server__openenv_step(struct server *s, const json_t *req, const char *episode_id,
                             unsigned *status);
json_t *server__openenv_state(struct server *s, const char *episode_id, unsigned *status);
json_t *server__openenv_schema(struct server *s);

/* SHA-1 of data (RFC 3174) for the WebSocket handshake. */
void server__sha1(const void *data, size_t len, unsigned char out[20]);
/* Base64 of data appended to out. */
int server__base64(const unsigned char *data, size_t len, struct buf *out) WARN_UNUSED_RESULT;

#endif
