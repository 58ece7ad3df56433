/*
 * server.h - the RL environment server: MCP (JSON-RPC 2.0; revision 2026-07-28's
 * self-contained requests, and the handshake revisions 2024-11-05 to 2025-11-25)
 * over stdio and Streamable HTTP, and an OpenEnv
 * facade (/health, /schema, /reset, /step, /state, the /ws session) on the same
 * HTTP listener.
 *
 * The server is a router over episodes. Each episode is an episode supervisor
 * process (src/episode: workspace + sandbox + persistent shells), started by
 * start_episode and reached over its unix socket; the server keeps a table of
 * its episodes (id, workspace, deadlines, the finish result) and a record of
 * each on disk (<root>/episodes/<id>.json), so an episode outlives the client
 * that started it, and a restarted server finds its running episodes again.
 * Supervisors end themselves after the idle TTL. Ended episodes' workspaces and
 * snapshots go by a cleanup policy (opts.keep_finished, opts.finished_ttl_s);
 * their records and results stay.
 *
 * Tools (tools/call): list_tasks; start_episode; the eleven agent tools, each
 * with an extra episode_id argument; evaluate (compile, verify or profile,
 * through the episode's own evaluator socket, so nothing in the sandbox can
 * fake it); finish (the final reward: best of trajectory). Results carry
 * structuredContent with the raw numbers.
 *
 * Threading: a struct server is shared by the transports' threads; its
 * tables are under one mutex, held only for lookups, never across a call to
 * an episode. server_rpc may run on any thread, concurrently.
 */
#ifndef CA_SERVER_H
#define CA_SERVER_H

#include <jansson.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "episode/episode.h"

#define SERVER_MAX_EPISODES_DEFAULT 256
#define SERVER_TTL_DEFAULT_MS (2 * 3600 * 1000)
#define SERVER_MAX_SESSIONS_DEFAULT 4096
#define SERVER_DRAIN_DEFAULT_MS (600 * 1000)
#define SERVER_KEEP_FINISHED_DEFAULT 64
#define SERVER_FINISHED_TTL_DEFAULT_S (24 * 3600)

enum server_flags {
    /* Refuse every start_episode (parsers, fuzzing, protocol tests): nothing is started. */
    SERVER_NO_EPISODES = 1 << 0,
};

struct server_opts {
    const char *root;        /* workspaces and episode records (made 0700); required */
    const char *state_dir;   /* supervisors' state; NULL: episode_state_dir() */
    const char *tasks;       /* task source for list_tasks and start_episode's "task" */
    const char *evaluator;   /* evaluator service socket for episodes; NULL: in process */
    const char *eval_device; /* "cuda" (NULL) or "cpu" */
    unsigned sandbox_flags;  /* SANDBOX_INSECURE for --insecure-no-sandbox */
    unsigned flags;          /* enum server_flags */
    int64_t max_episodes;    /* live (unfinished) episodes; 0: default */
    int64_t ttl_ms;          /* an episode ends after this long without calls; 0: default */
    int64_t wall_ms;         /* an episode's tools stop after this long; 0: no limit */
    size_t max_body;         /* bytes of one request; 0: CA_LIMIT_REQUEST_BYTES */
    size_t max_output;       /* bytes of one tool result's text; 0: CA_LIMIT_TOOL_OUTPUT */
    int64_t max_sessions;    /* MCP sessions kept (oldest idle dropped); 0: default */
    /* The job bus instead of evaluator and eval_device (the CLI's to wire; the server knows no
     * bus): redis is the URL the supervisors' `cuda-agent tool` starters get as $CUDA_AGENT_REDIS,
     * with redis_args (NULL-terminated, e.g. the bus's waits) on their command line; eval and
     * eval_ctx evaluate for a supervisor forked from this process itself (when this program
     * is not cuda-agent: tests). */
    const char *redis;
    const char *const *redis_args;
    episode_eval_fn *eval;
    void *eval_ctx;
    /* The cleanup policy: ended (finished or idle-expired) episodes keep their workspace and
     * snapshots while among the keep_finished newest and younger than finished_ttl_s; the
     * record and finish's result always stay. keep_finished: 0 default, < 0 none;
     * finished_ttl_s: 0 default, < 0 no age limit. */
    int64_t keep_finished;
    int64_t finished_ttl_s;
    const char *token; /* bearer token HTTP requests must carry; NULL: none */
    /* Accept start_episode's inline `code`: the task's code runs in the evaluator's trusted
     * reference process, so only clients trusted with that may send it (stdio's parent, or
     * an operator's explicit --allow-task-code). Otherwise only --tasks' tasks. */
    bool allow_code;
};

struct server;
struct server_session;

int server_new(const struct server_opts *o, struct server **out,
               struct ca_err *err) WARN_UNUSED_RESULT;
void server_free(struct server *s);
const struct server_opts *server_opts(const struct server *s);

/*
 * One JSON-RPC payload (a message or, for sessions that negotiated 2025-03-26,
 * a batch) from a client. *sess is the client's session; NULL with an
 * `initialize` request makes a new one (stored in *sess). *reply is a new
 * reference, or NULL when nothing is to be sent back (notifications and
 * responses only). *parse_error tells HTTP to answer 400. Never fails: every
 * problem becomes a JSON-RPC error in the reply. A request in the 2026-07-28
 * envelope is served statelessly; the session's first request that passes
 * fixes its era (stdio). HTTP's stateless POSTs go to server__rpc_modern.
 */
void server_rpc(struct server *s, struct server_session **sess, const char *body, size_t len,
                json_t **reply, bool *parse_error);

/*
 * Sessions are reference-counted, since a DELETE or an eviction may come while another
 * request still uses one: server_session_new and server_session_find return a reference
 * that the caller gives back with server_session_release (NULL is a no-op).
 */
/* A new session not yet initialized (stdio holds exactly one). */
struct server_session *server_session_new(struct server *s);
/* The session with this id (NULL when unknown or ended); counts as use. */
struct server_session *server_session_find(struct server *s, const char *id);
void server_session_release(struct server *s, struct server_session *sess);
const char *server_session_id(const struct server_session *sess);
/* The negotiated protocol revision ("" before initialize or a 2026-07-28 request). */
const char *server_session_version(const struct server_session *sess);
/* End a session (DELETE /mcp); 0 or CA_ENOTFOUND. Its episodes keep running. */
int server_session_end(struct server *s, const char *id);

/*
 * Call one tool as tools/call would: *result is the MCP CallToolResult
 * ({"content", "structuredContent", "isError"}, new reference). Returns 0, or
 * CA_ENOTFOUND for an unknown tool (a protocol error).
 */
int server_call_tool(struct server *s, const char *name, const json_t *args,
                     json_t **result) WARN_UNUSED_RESULT;
/* The tools/list array (new reference). */
json_t *server_tool_list(const struct server *s);

/* Prometheus text exposition of the server's counters, appended to out. */
struct buf;
int server_metrics(struct server *s, struct buf *out) WARN_UNUSED_RESULT;
/* Requests in flight (for draining). */
int64_t server_inflight(struct server *s);
void server__inflight_add(struct server *s, int d);

/* MCP over stdin/stdout (newline-delimited JSON) until end of input or *stop. */
int server_run_stdio(struct server *s, int in_fd, int out_fd, volatile sig_atomic_t *stop,
                     struct ca_err *err) WARN_UNUSED_RESULT;

/*
 * HTTP on addr ("127.0.0.1:8000", "[::1]:8000", "0.0.0.0:8000") until *stop;
 * then drains: no new connections, requests in flight get up to drain_ms.
 * A non-loopback address needs opts.token.
 */
int server_run_http(struct server *s, const char *addr, volatile sig_atomic_t *stop,
                    int64_t drain_ms, struct ca_err *err) WARN_UNUSED_RESULT;

/* Whether addr ("HOST:PORT") names a loopback address (127.0.0.0/8, ::1, localhost): 1 or
 * 0; CA_EUSAGE naming the problem when it is no address. */
int server_addr_loopback(const char *addr, struct ca_err *err);

#endif
