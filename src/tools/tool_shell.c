/*
 * tool_shell.c - the shell tools' tables (Bash, BashOutput, KillBash): their
 * arguments and descriptions live here, their work in whoever attached
 * struct tool_shell_ops (the episode supervisor); without one they say so.
 */
#include "tools/tools_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/json.h"
#include "core/log.h"
#include "workspace/workspace.h"
#include "core/banned.h"

/* ---- shell tools: tables here, work in the supervisor ---- */

static int no_shell(struct tool_result *res, const char *tool)
{
    return tool_result_errorf(res,
                              "%s: no shell is attached to this episode; the file tools (Read, "
                              "Write, Edit, Glob, Grep, ...) still work",
                              tool);
}

static int run_bash(struct tool_ctx *ctx, const json_t *args, struct tool_result *res)
{
    if (!ctx->have_shell || !ctx->shell.bash)
        return no_shell(res, "Bash");
    return ctx->shell.bash(ctx->shell.data, args, res);
}

static int run_bash_output(struct tool_ctx *ctx, const json_t *args, struct tool_result *res)
{
    if (!ctx->have_shell || !ctx->shell.bash_output)
        return no_shell(res, "BashOutput");
    return ctx->shell.bash_output(ctx->shell.data, args, res);
}

static int run_kill_bash(struct tool_ctx *ctx, const json_t *args, struct tool_result *res)
{
    if (!ctx->have_shell || !ctx->shell.kill_bash)
        return no_shell(res, "KillBash");
    return ctx->shell.kill_bash(ctx->shell.data, args, res);
}

static const struct tools__arg bash_args[] = {
    {"command", TOOLS__STRING, true, "The bash command line to run."},
    {"timeout", TOOLS__INTEGER, false,
     "Time limit in milliseconds (at most 600000 = 10 minutes); the command and everything it "
     "started are killed when it passes.",
     .min = 1, .max = 600000},
    {"description", TOOLS__STRING, false,
     "What the command does, in 5-10 words (for the record; not executed).", .max_len = 1024},
    {"run_in_background", TOOLS__BOOLEAN, false,
     "Start the command in a background shell and return its id at once; read its output with "
     "BashOutput, stop it with KillBash."},
    {NULL},
};

const struct tools__spec tools__bash_spec = {
    "Bash",
    "Run a command in this episode's persistent bash shell inside the sandbox. The shell starts "
    "in /workspace; the working directory and environment variables persist between calls. "
    "stdout and stderr are returned together, capped at 64 KiB with a visible truncation marker, "
    "with the exit code. The sandbox has no network and no GPU: build and test your kernels with "
    "the workspace's ./compile, ./verify and ./profile commands. Processes a command leaves "
    "running when it returns are stopped; use run_in_background for long jobs. Prefer Read, Grep "
    "and Glob over cat, grep and find, and Edit or Write over sed or "
    "echo redirection.",
    bash_args,
    run_bash,
};

static const struct tools__arg bash_output_args[] = {
    {"bash_id", TOOLS__STRING, true,
     "The id of the background shell, as returned by Bash with run_in_background.", .max_len = 256},
    {"filter", TOOLS__STRING, false,
     "Optional regular expression: only output lines matching it are returned (others are "
     "discarded).",
     .max_len = 4096},
    {NULL},
};

const struct tools__spec tools__bash_output_spec = {
    "BashOutput",
    "Return the output a background shell (started by Bash with run_in_background) produced since "
    "the last BashOutput call for it, and whether it is still running or its exit code.",
    bash_output_args,
    run_bash_output,
};

static const struct tools__arg kill_bash_args[] = {
    {"shell_id", TOOLS__STRING, true, "The id of the background shell to kill.", .max_len = 256},
    {NULL},
};

const struct tools__spec tools__kill_bash_spec = {
    "KillBash",
    "Kill a background shell started by Bash with run_in_background, and everything it started.",
    kill_bash_args,
    run_kill_bash,
};
