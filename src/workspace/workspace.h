/*
 * workspace.h - an episode's workspace: the directory the agent sees and
 * edits, laid out from the embedded template/ and one task.
 *
 *   SKILL.md, model.py, binding.cpp, binding_registry.h,   read-only
 *   compile, verify, profile, MANIFEST.json                (0444 / 0555)
 *   model_new.py                                           writable skeleton
 *   kernels/                                               writable, empty
 *
 * MANIFEST.json lists the writable patterns (the only paths the evaluator
 * will ever take from a workspace), the read-only files with their content
 * hashes (so tampering is detected even where the sandbox cannot enforce
 * read-only mounts), and the task's public metadata. Creation is atomic: the
 * workspace is built in a temporary sibling directory and renamed into
 * place, so a failure leaves nothing behind.
 */
#ifndef CA_WORKSPACE_H
#define CA_WORKSPACE_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "core/err.h"
#include "task/task.h"

#define WORKSPACE_MANIFEST "MANIFEST.json"
#define WORKSPACE_FORMAT 1

enum workspace_flags {
    /* Replace an existing workspace (only a directory holding a
     * MANIFEST.json of ours; anything else is refused). */
    WORKSPACE_FORCE = 1 << 0,
};

/* The agent-writable patterns (fnmatch with FNM_PATHNAME), NULL-terminated. */
extern const char *const workspace_writable_patterns[];

/* Whether a workspace-relative path is agent-writable. */
bool workspace_path_writable(const char *rel);

int workspace_create(const struct task *task, const char *dir, unsigned flags,
                     struct ca_err *err) WARN_UNUSED_RESULT;

/*
 * Check a workspace against its manifest. Fills *report (a new JSON object:
 * ok, task, problems[], writable_files[], ignored_files[]) and returns 0 even
 * when problems were found; a negative code when the directory is no
 * workspace at all.
 */
int workspace_check(const char *dir, json_t **report, struct ca_err *err) WARN_UNUSED_RESULT;

/* Render the model_new.py skeleton for a task (heap string). */
char *workspace_render_model_new(const char *tmpl, const char *init_signature);

#endif
