/*
 * agent_internal.h - what the agent's files share and nobody else uses.
 */
#ifndef CA_AGENT_INTERNAL_H
#define CA_AGENT_INTERNAL_H

#include "agent/agent.h"
#include "core/limits.h"
#include "task/task.h"

struct episode;

/* The trajectory's file name in an episode's --out directory. */
#define AGENT__TRAJ_FILE "trajectory.jsonl"

/* One episode's run: its settings, its trajectory file, its conversation, its counters (agent.c
 * drives it; agent_traj.c writes and reads its trajectory). */
struct agent__run {
    const struct agent_opts *o;
    int64_t max_turns, context_tokens, wall_ms, tool_output_max;
    bool no_eval;
    const char *device;
    struct llm_opts llm_opts;
    json_t *header; /* owns the strings llm_opts/device may borrow on resume */
    char *task_ref;
    struct task_set tasks;
    const struct task *task;
    char *out_dir, *ws_dir, *traj_path;
    int traj_fd;
    struct agent_conv *conv;
    struct llm_client *llm;
    struct episode *ep;
    char *episode_dir;
    struct buf tools_json;
    json_t *evals;
    int64_t eval_since; /* the current episode's cursor (episodes restart at 1) */
    int64_t eval_seq;   /* our numbering, across resumes */
    int64_t turn;
    int64_t t_start, deadline_us;
    int64_t model_us, tool_us;
    int64_t prompt_tokens, completion_tokens;
    int64_t *overhead, *sync;
    size_t noverhead, overhead_alloc, nsync, sync_alloc;
    int64_t last_sync_us;
    const char *stop_reason;
    char stop_detail[CA_ERR_MSG_MAX];
};

/* Append msg (reference stolen) to the conversation; CA_ETOOBIG past its limit. */
int agent__append_msg(struct agent__run *r, json_t *msg, struct ca_err *err) WARN_UNUSED_RESULT;
/* Write one line (one JSON document) to the trajectory and sync it. */
int agent__traj_append(struct agent__run *r, json_t *line, struct ca_err *err) WARN_UNUSED_RESULT;
/* Open the trajectory: a new one (refused where one exists), or with o->resume the existing one,
 * its complete lines in *lines and its header in *header, a torn last line cut off; refused
 * where its episode ended for good. */
int agent__traj_open(struct agent__run *r, const json_t **header, json_t **lines,
                     struct ca_err *err) WARN_UNUSED_RESULT;
/* Rebuild the conversation and the counters from a trajectory's lines. */
int agent__traj_replay(struct agent__run *r, const json_t *lines,
                       struct ca_err *err) WARN_UNUSED_RESULT;

/* The evaluation records made after *since, in a new array *out (always
 * set); *since advances. From o->evals when set, else the episode's. */
int agent__poll_evals(const struct agent_opts *o, struct episode *ep, int64_t *since, json_t **out,
                      struct ca_err *err) WARN_UNUSED_RESULT;

#endif
