/*
 * tools.h - the agent's tools: Bash, BashOutput, KillBash, Read, Write, Edit,
 * MultiEdit, Glob, Grep, NotebookEdit, TodoWrite.
 *
 * Each tool has its own file (src/tools/tool_<name>.c) with an argument
 * table that both generates its JSON schema (OpenAI function format) and
 * validates calls: unknown tools, missing, extra or ill-typed arguments and
 * oversized values are refused with a message the model can act on, before
 * the tool runs.
 *
 * File tools run in the calling process on the workspace through a confined
 * root (fs_root_*: no "..", no absolute paths outside /workspace, no symlink
 * escapes). Paths may be given as "/workspace/x" (what the agent sees inside
 * its sandbox) or relative "x". Writes to the workspace's read-only paths
 * (MANIFEST.json "read_only") are refused naming the rule. Write to an
 * existing file requires that it was Read in this episode.
 *
 * Shell tools (Bash, BashOutput, KillBash) are delegated to callbacks that
 * the episode supervisor provides (struct tool_shell_ops), since they need
 * the sandbox; without them those tools report that no shell is attached.
 *
 * A tool_ctx holds one episode's state (workspace root, files read, todo
 * list) and is used by one thread at a time.
 */
#ifndef CA_TOOLS_H
#define CA_TOOLS_H

#include <jansson.h>
#include <stdbool.h>

#include "core/buf.h"
#include "core/err.h"

struct tool_result {
    bool is_error;   /* the tool refused or failed; text says why (for the model) */
    struct buf text; /* model-facing text, bounded by CA_LIMIT_TOOL_OUTPUT */
    json_t *fields;  /* structured fields (exit_code, truncated, path, ...); owned */
};

void tool_result_init(struct tool_result *r);
void tool_result_release(struct tool_result *r);
/* Set is_error and the text (printf-style); returns 0 for convenience. */
int tool_result_errorf(struct tool_result *r, const char *fmt, ...) CA_PRINTF(2, 3);
/* {"is_error":..., "text":..., ...fields} (new reference). */
json_t *tool_result_to_json(const struct tool_result *r);

struct tool_ctx;

/* Callbacks for the shell tools; args are already validated against the schema. */
struct tool_shell_ops {
    void *data;
    int (*bash)(void *data, const json_t *args, struct tool_result *res);
    int (*bash_output)(void *data, const json_t *args, struct tool_result *res);
    int (*kill_bash)(void *data, const json_t *args, struct tool_result *res);
};

/* Open the workspace (reads MANIFEST.json for its read-only paths). */
int tool_ctx_new(const char *workspace, struct tool_ctx **out,
                 struct ca_err *err) WARN_UNUSED_RESULT;
void tool_ctx_free(struct tool_ctx *ctx);
void tool_ctx_set_shell(struct tool_ctx *ctx, const struct tool_shell_ops *ops);
/* The workspace-relative read-only paths, NULL-terminated (owned by ctx). */
const char *const *tool_ctx_ro_paths(const struct tool_ctx *ctx);
/* The episode's todo list as TodoWrite last set it: an array of
 * {content, status, activeForm?, id?} (borrowed; valid until the next call). */
const json_t *tool_ctx_todos(const struct tool_ctx *ctx);
/*
 * Episode state for a supervisor to persist between processes:
 * {"read": {path: content-hash hex}, "todos": [...]} (new reference), and
 * its restore into a fresh ctx (CA_EPARSE naming the bad field).
 */
json_t *tool_ctx_save(const struct tool_ctx *ctx);
int tool_ctx_restore(struct tool_ctx *ctx, const json_t *state,
                     struct ca_err *err) WARN_UNUSED_RESULT;

/*
 * Run one tool call. Returns 0 when the call was handled — including calls
 * the tool refused (res->is_error with a message for the model) — and a
 * negative code only for internal failures. args must be a JSON object.
 */
int tool_call(struct tool_ctx *ctx, const char *name, const json_t *args,
              struct tool_result *res) WARN_UNUSED_RESULT;

/* Array of all tool schemas in OpenAI function format (new reference). */
json_t *tool_schemas(void);
/* Names of all tools, NULL-terminated. */
extern const char *const tool_names[];

#endif
