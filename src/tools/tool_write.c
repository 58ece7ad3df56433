/*
 * tool_write.c - Write: replace a file's whole content, or create it (with
 * its parent folders, beneath the workspace only).
 *
 * Rules, in order: the path maps into the workspace; it is not read-only
 * (by name, or through a symlink to a read-only file); an existing file was
 * Read in this episode and has not changed on disk since; then the write is
 * atomic (temporary file + rename), keeps an existing file's mode, and
 * counts as a Read of the new content.
 */
#include "tools/tools_internal.h"

#include <errno.h>
#include <string.h>

#include "workspace/workspace.h"
#include "core/banned.h"

static int run_write(struct tool_ctx *ctx, const json_t *args, struct tool_result *res)
{
    struct tools__path p;
    if (tools__path_arg("Write", args, "file_path", false, &p, res) ||
        tools__resolve(ctx, "Write", &p, res) || tools__check_writable(ctx, "Write", &p, res))
        return 0;
    size_t len;
    const char *content = tools__str(args, "content", &len);
    struct buf old;
    buf_init(&old, TOOLS__FILE_MAX);
    struct stat st;
    mode_t mode = 0644;
    bool created = true;
    int rc = tools__load(ctx, "Write", &p, true, &old, &st, res);
    if (rc && rc != -ENOENT)
        goto out;
    if (!rc) {
        if (tools__check_fresh(ctx, "Write", &p, &old, res))
            goto out;
        mode = st.st_mode & 07777;
        created = false;
    } else {
        p.exists = false; /* a dangling symlink: replaced by the new file */
    }
    if (tools__store(ctx, "Write", &p, content, len, mode, res))
        goto out;
    size_t lines = tools__count_lines(content, len);
    if (created)
        tools__out_tail(res, "Created %s (%zu bytes, %zu lines)\n", p.shown, len, lines);
    else
        tools__out_tail(res, "Wrote %s (%zu bytes, %zu lines); its previous content was replaced\n",
                        p.shown, len, lines);
    if (created && !workspace_path_writable(p.key))
        tools__out_tail(res, "Note: the evaluator takes only model_new.py, kernels/*.cu and "
                             "kernels/*_binding.cpp from the workspace; this file is yours to use "
                             "but will not be evaluated.\n");
    json_object_set_new(res->fields, "path", json_string(p.shown));
    json_object_set_new(res->fields, "bytes", json_integer((json_int_t)len));
    json_object_set_new(res->fields, "created", json_boolean(created));
out:
    buf_release(&old);
    return 0;
}

static const struct tools__arg write_args[] = {
    {"file_path", TOOLS__STRING, true,
     "The file to write: \"/workspace/NAME\" or a path relative to /workspace."},
    {"content", TOOLS__STRING, true, "The complete new content of the file.",
     .max_len = CA_LIMIT_WRITE_BYTES},
    {NULL},
};

const struct tools__spec tools__write_spec = {
    "Write",
    "Write a file in the workspace, replacing all of its content, or create it (parent folders "
    "are created). Paths are \"/workspace/NAME\" or relative to /workspace. An existing file must "
    "have been Read in this episode first, and is refused if it changed since that Read. "
    "Read-only files (SKILL.md, model.py, binding.cpp, binding_registry.h, compile, verify, "
    "profile, MANIFEST.json) cannot be written: your code goes in model_new.py and kernels/ "
    "(kernels/*.cu and kernels/*_binding.cpp). Content is at most 4 MiB. Prefer Edit for changes "
    "to part of a file.",
    write_args,
    run_write,
};
