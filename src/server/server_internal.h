/*
 * server_internal.h - shared between the server's files: the JSON-RPC error
 * codes, the session and episode tables, metrics, and the functions one file
 * of the server offers the others (server__ prefix).
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
    /* 2026-07-28: an HTTP routing header disagrees with the body */
    RPC_HEADER_MISMATCH = -32020,
    /* 2026-07-28: the request's revision is not served; data.supported names those that are */
    RPC_UNSUPPORTED_VERSION = -32022,
};

/* A session's protocol era, fixed by its first request that passes (stdio, one session):
 * the initialize handshake (2024-11-05 .. 2025-11-25) or 2026-07-28's self-contained
 * requests. */
enum server__era { SERVER__ERA_NONE, SERVER__ERA_HANDSHAKE, SERVER__ERA_MODERN };

/* An HTTP request's routing headers, which a 2026-07-28 request must agree with (NULL when
 * absent). */
struct server__mcp_headers {
    const char *version;    /* MCP-Protocol-Version */
    const char *method;     /* Mcp-Method */
    const char *name;       /* Mcp-Name (tools/call's name, maybe "=?base64?...?=") */
    const char *duplicated; /* the name of a routing header sent more than once */
};

#define SERVER_SESSION_ID_LEN 32

struct server_session {
    char id[SERVER_SESSION_ID_LEN + 1];
    char version[16]; /* "" until initialize */
    bool initialized; /* initialize answered */
    int era;          /* enum server__era (under the server's mu) */
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
    int busy;           /* calls in flight */
    bool finishing;     /* a finish runs */
    json_t *result;     /* finish's structuredContent once finished; owned */
    int64_t ended_unix; /* when finish ended it; 0 before */
    struct server__episode *next;
};

/* An episode whose tree (workspace, snapshots) is on disk, for the cleanup policy. */
struct server__kept {
    char id[EPISODE_ID_MAX + 1];
    int64_t ended_unix; /* finished or found expired at; 0: live, or not known to have ended */
    int64_t order;      /* ends in the same second: the later one is newer */
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
    /* the cleanup policy (reclaim.c); kept[] and the flags under mu */
    int64_t keep_finished;  /* ended trees kept, newest first */
    int64_t finished_ttl_s; /* an ended tree goes this long after its end; 0: no age limit */
    struct server__kept *kept;
    size_t nkept, kept_alloc;
    int64_t kept_order;
    int64_t episodes_reclaimed;
    pthread_t reclaimer;
    pthread_cond_t reclaim_cv;
    bool reclaimer_on, reclaim_stop, reclaim_kick;
};

/* server.c */
/* nhex random lowercase hex digits and a NUL into out (getrandom; at most 64). */
void server__random_hex(char *out, size_t nhex);

/* The episode table and the records (episodes.c). */
struct episode_opts server__ep_opts(const struct server *s, const char *id, const char *workspace);
/* Drop entries idle past their TTL (their supervisors have ended themselves). Under mu. */
void server__expire_locked(struct server *s);
/* Write the episode's record (<root>/episodes/<id>.json) from its entry. */
void server__save_record(struct server *s, const struct server__episode *e);
/* Find (or re-attach from its record) and pin args' episode_id (busy++); NULL with a result
 * for the model in *why. */
struct server__episode *server__pin(struct server *s, const json_t *args, json_t **why);
void server__unpin(struct server *s, struct server__episode *e);
bool server__past_wall(const struct server__episode *e);
void server__episode_free(struct server__episode *e);

/* The tools (tool_calls.c, start.c, evaluate.c): each returns a CallToolResult (new reference). */
json_t *server__build_tool_list(void);
/* Refuse keys outside `allowed` (NULL-terminated): a result for the model, or NULL. */
json_t *server__check_keys(const char *tool, const json_t *args, const char *const *allowed);
/* args' key, when present, as an integer in [lo, hi] into *out: a result, or NULL. */
json_t *server__get_int(const char *tool, const json_t *args, const char *key, int64_t lo,
                        int64_t hi, int64_t *out);
/* A result whose text is cut to --max-output at a UTF-8 boundary, saying so. */
json_t *server__text_result(struct server *s, const char *text, size_t len, json_t *sc, bool err);
bool server__is_agent_tool(const char *name);
json_t *server__tool_list_tasks(struct server *s, const json_t *args);
json_t *server__tool_agent(struct server *s, const char *name, const json_t *args);
json_t *server__tool_start_episode(struct server *s, const json_t *args);
json_t *server__tool_evaluate(struct server *s, const json_t *args);
json_t *server__tool_finish(struct server *s, const json_t *args);

/*
 * The cleanup policy (reclaim.c): an ended episode (finished, or idle past its TTL with its
 * supervisor gone) keeps its workspace and snapshots while it is among the keep_finished
 * newest ended and younger than finished_ttl_s; then a background thread removes both trees
 * and marks its record (the record and finish's result stay). Started by server_new from the
 * records on disk (a restarted server applies the policy to what it finds).
 */
int server__reclaim_start(struct server *s, struct ca_err *err) WARN_UNUSED_RESULT;
void server__reclaim_stop(struct server *s);
/* Track an episode (ended_unix 0: just started) or mark it ended. Under mu. */
void server__kept_ended_locked(struct server *s, const char *id, int64_t ended_unix);
/* Run a pass soon (after a finish). */
void server__reclaim_kick(struct server *s);

/*
 * One HTTP POST at 2026-07-28 (or one whose MCP-Protocol-Version names no handshake
 * revision): no session; the body's params._meta carries the revision, checked against h.
 * *reply is NULL for a notification (202); *status is the HTTP status to send.
 */
void server__rpc_modern(struct server *s, const char *body, size_t len,
                        const struct server__mcp_headers *h, json_t **reply, unsigned *status);
/* Whether rev is a handshake-era revision that initialize negotiates. */
bool server__handshake_revision(const char *rev);
/* Whether a parsed message is a 2026-07-28 request: not initialize, and params._meta holds
 * the protocol-version key. */
bool server__is_modern(const json_t *msg);

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

/* Base64 of data appended to out. */
int server__base64(const unsigned char *data, size_t len, struct buf *out) WARN_UNUSED_RESULT;

#endif
