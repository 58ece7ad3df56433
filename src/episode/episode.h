/*
 * episode.h - one agent episode: a workspace, its sandbox, its shells and
 * its tool state, behind a small per-episode supervisor process so that
 * the persistent shell survives between separate `cuda-agent tool` calls.
 *
 * Layout of an episode's state (mode 0700, under episode_state_dir()):
 *   <state>/<id>/sock            the supervisor's unix socket
 *   <state>/<id>/lock            flock held while a supervisor is being started
 *   <state>/<id>/control/        bound read-only at /run/cuda-agent in the sandbox
 *   <state>/<id>/control/eval.sock  the workspace commands' evaluator (episode_evals)
 *   <state>/<id>/evals/<seq>/    files of each verify/profile evaluation + report.json
 *   <state>/<id>/supervisor.log  the supervisor's log
 *
 * Protocol on the socket: one request per connection; each message is a
 * 4-byte big-endian length and that many bytes of JSON (at most
 * CA_LIMIT_REQUEST_BYTES). Requests: {"tool": NAME, "args": {...}},
 * {"op": "ping"}, {"op": "evals", "since": N}, {"op": "close"}. Replies: a tool result
 * ({"is_error", "text", ...fields}) or {"ok": true, ...}.
 *
 * The in-process API (episode_open / episode_call / episode_close) is what
 * the supervisor runs; tests and benchmarks may use it directly.
 * An episode belongs to one thread.
 */
#ifndef CA_EPISODE_H
#define CA_EPISODE_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/buf.h"
#include "core/err.h"
#include "sandbox/sandbox.h"
#include "tools/tools.h"

#define EPISODE_ID_MAX 64
#define EPISODE_IDLE_DEFAULT_MS (2 * 3600 * 1000)

struct eval_opts;

/*
 * An evaluation done elsewhere (the job bus's client, which src/cli wires): *report as from
 * eval_run, or non-zero with err set when no report came. It honours o->keep_dir (the files it
 * evaluated, and the task as model.py, copied there), since the episode records snapshots from
 * it. Called from the episode's evaluator thread, one call at a time per episode, in the
 * process that holds the episode (the supervisor, forked without exec from the caller of
 * episode_request, or the caller of episode_open), and by agent_run's final scoring.
 */
typedef int episode_eval_fn(void *ctx, const struct eval_opts *o, json_t **report,
                            struct ca_err *err);

struct episode_opts {
    const char *state_dir;  /* NULL: episode_state_dir() */
    const char *id;         /* [A-Za-z0-9_.-]{1,64} */
    const char *workspace;  /* needed to start an episode */
    unsigned sandbox_flags; /* SANDBOX_INSECURE for --insecure-no-sandbox */
    struct sandbox_limits limits;
    int64_t idle_timeout_ms; /* supervisor exits after this long without requests; 0: default */
    /* How the workspace's ./compile, ./verify and ./profile are evaluated: through the
     * evaluator service listening at `evaluator`, else in process on `eval_device` ("cuda"
     * when NULL). Copied at episode_open. */
    const char *evaluator;
    const char *eval_device;
    /* When set, instead: eval(eval_ctx, ...) (evaluator and eval_device are not used). Both
     * must stay valid for the episode's life, in a supervisor too (a fork inherits them). */
    episode_eval_fn *eval;
    void *eval_ctx;
};

/* $CUDA_AGENT_STATE_DIR, else $XDG_RUNTIME_DIR/cuda-agent, else /tmp/cuda-agent-<uid>;
 * created 0700 and checked to be ours. */
int episode_state_dir(struct buf *out, struct ca_err *err) WARN_UNUSED_RESULT;
int episode_check_id(const char *id, struct ca_err *err) WARN_UNUSED_RESULT;

struct episode;
int episode_open(const struct episode_opts *opts, struct episode **out,
                 struct ca_err *err) WARN_UNUSED_RESULT;
int episode_call(struct episode *ep, const char *tool, const json_t *args,
                 struct tool_result *res) WARN_UNUSED_RESULT;
void episode_close(struct episode *ep);
struct sandbox *episode_sandbox(struct episode *ep);

/*
 * The evaluations the workspace's ./compile, ./verify and ./profile asked for
 * (through <control>/eval.sock, served by a thread of the episode), with
 * seq > since, oldest first: a new array of {"seq", "command", "ok",
 * "reward", "stage", "report", "snapshot_dir", "elapsed_ms"}; snapshot_dir
 * (verify and profile) holds the evaluated files and the task as model.py.
 * Supervisor op: {"op": "evals", "since": N} -> {"ok": true, "evals": [...]}.
 */
int episode_evals(struct episode *ep, int64_t since, json_t **out,
                  struct ca_err *err) WARN_UNUSED_RESULT;

/*
 * Send one request to the episode's supervisor and wait for the reply.
 * When no supervisor runs and opts->workspace is set, one is started first
 * (daemonised; it lives until {"op":"close"} or its idle timeout).
 * timeout_ms bounds the wait for the reply (<= 0: none).
 */
int episode_request(const struct episode_opts *opts, const json_t *req, int64_t timeout_ms,
                    json_t **reply, struct ca_err *err) WARN_UNUSED_RESULT;

/* Whether a supervisor answers for this episode. The probe is no activity: it does not
 * extend the episode's idle timeout. */
bool episode_running(const struct episode_opts *opts);

#endif
