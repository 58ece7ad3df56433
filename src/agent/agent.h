/*
 * agent.h - the agent: a ReAct loop that lets a model (any OpenAI-compatible
 * server, through src/llm) work on one task in a sandboxed episode.
 *
 * agent_run() lays out OUT_DIR (workspace/, trajectory.jsonl, eval reports),
 * opens an episode (workspace + sandbox + persistent shell, in process),
 * and loops: send the conversation and the tool schemas; run the reply's
 * tool calls in order in the sandbox; append the results as "tool"
 * messages. It stops on an answer without tool calls, at max_turns, when
 * the conversation no longer fits the context budget, at the wall-clock
 * budget, when the model server fails for good, or on cancel. Then the
 * evaluator scores the final workspace and the best correct snapshot that
 * the episode's evaluations recorded (best of trajectory).
 *
 * The trajectory (docs/trajectory.schema.json) is appended and fsync'd once
 * per turn, so a crash loses at most the turn in flight; agent_run with
 * opts.resume continues from it.
 *
 * The conversation (struct agent_conv) keeps its messages serialised, so a
 * turn appends bytes instead of re-encoding the whole history; it estimates
 * tokens from the server's last usage.prompt_tokens (scaled by bytes added
 * since) or, before any usage, as bytes / 4, and elides the oldest tool
 * outputs first when the estimate nears the budget.
 *
 * Not thread-safe: one agent_run per thread; callbacks run on that thread.
 */
#ifndef CA_AGENT_H
#define CA_AGENT_H

#include <jansson.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/buf.h"
#include "core/err.h"
#include "core/sv.h"
#include "episode/episode.h"
#include "llm/llm.h"

#define AGENT_MAX_TURNS_DEFAULT 200
#define AGENT_CONTEXT_DEFAULT 131072
#define AGENT_TOOL_OUTPUT_DEFAULT (16 * 1024)
#define AGENT_TRAJECTORY_FORMAT 1
/* When the estimate passes AGENT_ELIDE_AT of the budget, old tool outputs are
 * elided down to AGENT_ELIDE_TO: in steps, not one per turn, because each
 * elision changes an early part of the prompt and so defeats the server's
 * prefix cache from there on. */
#define AGENT_ELIDE_AT 0.9
#define AGENT_ELIDE_TO 0.7

enum agent_event_kind {
    AGENT_EV_TURN,  /* a request to the model is about to go out */
    AGENT_EV_TOOL,  /* a tool call is about to run */
    AGENT_EV_EVAL,  /* an evaluation was recorded (or the final scoring finished) */
    AGENT_EV_SCORE, /* final scoring starts */
};

struct agent_event {
    enum agent_event_kind kind;
    int64_t turn, max_turns;
    int64_t tokens;      /* conversation estimate */
    const char *tool;    /* AGENT_EV_TOOL */
    const json_t *eval;  /* AGENT_EV_EVAL: the record */
    const char *message; /* AGENT_EV_SCORE: what is being scored */
};

struct agent_opts {
    const char *task_ref; /* task file / PATH:SELECTOR (from the trajectory on resume) */
    const char *out_dir;  /* created; must not hold a trajectory unless resume */
    bool resume;
    struct llm_opts llm;     /* NULL/unset fields come from the trajectory on resume */
    int64_t max_turns;       /* 0: 200 */
    int64_t context_tokens;  /* 0: 131072 */
    int64_t wall_ms;         /* 0: no wall-clock budget */
    int64_t tool_output_max; /* bytes of one tool output sent to the model; 0: 16 KiB */
    bool no_eval;            /* skip the final scoring */
    const char *device;      /* evaluation device: "cuda" (default) or "cpu", for the
                              * final scoring and the episode's ./compile ./verify ./profile */
    const char *evaluator;   /* evaluator service socket for both; NULL: in process */
    const char *cache_dir;   /* evaluator cache */
    bool eval_no_sandbox;    /* evaluator compilers without the sandbox */
    unsigned sandbox_flags;  /* SANDBOX_INSECURE for --insecure-no-sandbox */
    const char *state_dir;   /* episode state; NULL: episode_state_dir() */
    /* When set, the final scoring and the episode's evaluations go through eval(eval_ctx, ...)
     * instead (the job bus), on agent_run's thread and on the episode's evaluator thread. */
    episode_eval_fn *eval;
    void *eval_ctx;
    volatile sig_atomic_t *cancel;
    void (*on_event)(void *data, const struct agent_event *ev);
    void *event_data;
    const struct llm_transport *transport; /* NULL: libcurl (tests, benchmarks) */
    /* The evaluations made since `since` (a new array of records); NULL: the
     * episode's own (episode_evals). For tests. */
    int (*evals)(void *data, int64_t since, json_t **out, struct ca_err *err);
    void *evals_data;
};

/*
 * Run (or resume) one episode. *result (new reference) summarises it:
 * stop_reason, turns, rewards {final, best, reward}, tokens, timings, paths.
 * Returns 0 whenever the episode ran, whatever made it stop (including the
 * model server failing: stop_reason "model_error"); a negative code when it
 * could not start (bad task, out_dir in use, no sandbox, bad resume file).
 */
int agent_run(const struct agent_opts *o, json_t **result, struct ca_err *err) WARN_UNUSED_RESULT;

/* ---- the conversation ---- */

struct agent_conv;

struct agent_conv *agent_conv_new(void);
void agent_conv_free(struct agent_conv *c);
/* Append a message (takes the reference). CA_ETOOBIG past CA_LIMIT_MODEL_REQUEST. */
int agent_conv_append(struct agent_conv *c, json_t *msg) WARN_UNUSED_RESULT;
size_t agent_conv_count(const struct agent_conv *c);
const json_t *agent_conv_get(const struct agent_conv *c, size_t i);
/* The messages as one serialised JSON array (borrowed, valid until the next change). */
struct sv agent_conv_json(const struct agent_conv *c);
/* Record the server's prompt_tokens for a request of `request_bytes`. */
void agent_conv_note_usage(struct agent_conv *c, int64_t prompt_tokens, size_t request_bytes);
/* Token estimate of a request made of the conversation plus extra_bytes (tools). */
int64_t agent_conv_tokens(const struct agent_conv *c, size_t extra_bytes);
/*
 * Replace the content of the oldest tool messages (before index `keep_from`)
 * with AGENT_ELIDED_MARKER until the estimate is at most target_tokens.
 * Returns how many were elided.
 */
size_t agent_conv_elide(struct agent_conv *c, int64_t target_tokens, size_t extra_bytes,
                        size_t keep_from);
#define AGENT_ELIDED_MARKER "[elided to stay within the context budget:"

/*
 * The text of one tool output for the model: at most `max` bytes, cut at
 * UTF-8 boundaries keeping the first two thirds and the last third, with
 * "[... N bytes trimmed ...]" between them. Appended to out.
 */
int agent_trim_output(struct sv text, size_t max, struct buf *out) WARN_UNUSED_RESULT;
#define AGENT_TRIM_MARKER "bytes trimmed from this tool output"

/* ---- trajectory files ---- */

/*
 * Read a trajectory back: *lines (new array) holds its complete lines;
 * *good_bytes is where the last complete line ends (a torn last line from
 * a crash is left out). CA_EPARSE naming the line when one is not JSON.
 */
int agent_traj_load(const char *path, json_t **lines, size_t *good_bytes,
                    struct ca_err *err) WARN_UNUSED_RESULT;

/* ---- best of trajectory ---- */

/*
 * The best correct record among eval records ({"seq","command","ok",
 * "reward","stage","report","snapshot_dir"}) that kept a snapshot: highest
 * reward (a passing ./verify, which has none, counts 1), then highest
 * speedup over torch.compile, then the latest. NULL when none is correct.
 * Borrowed from records.
 */
const json_t *agent_best_eval(const json_t *records);

/*
 * Copy the agent-writable files (workspace_path_writable) found under
 * snapshot_dir into the workspace at ws_dir (which must exist); anything
 * else in the snapshot is ignored. Symlinks are never followed. Returns the
 * number of files copied, or a negative code.
 */
int agent_copy_snapshot(const char *snapshot_dir, const char *ws_dir,
                        struct ca_err *err) WARN_UNUSED_RESULT;

#endif
