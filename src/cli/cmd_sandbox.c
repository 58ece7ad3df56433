/*
 * cmd_sandbox.c - `cuda-agent candidate-sandbox SPEC -- PROGRAM ARGS...`:
 * run one program in the candidate sandbox (src/eval/candbox.h). The trusted
 * harness (harness/evaluate.py) starts every candidate process this way;
 * the command's exit status is the program's (a program killed by a signal
 * kills this process with the same signal).
 */
#include "cli/cli.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "eval/candbox.h"
#include "core/banned.h"

int cmd_candidate_sandbox(int argc, char **argv)
{
    const struct cli_opt opts[] = {{0}};
    const struct cli_spec spec = {
        .usage = "cuda-agent candidate-sandbox SPEC_JSON -- PROGRAM [ARGS...]",
        .summary = "Run a program in the candidate sandbox (used by the evaluator's harness).",
        .description =
            "SPEC_JSON: {\"scratch\": DIR (writable at /workspace), \"ro\": [host paths bound\n"
            "read-only at the same path], \"gpu\": bool, \"fds\": [fds given as 3, 4, ...],\n"
            "\"report_fd\": one of fds, \"lockdown\": bool (the lockdown filter as the next fd),\n"
            "\"memory_bytes\", \"tmp_bytes\", \"cpu_seconds\", \"uid\", \"gid\" (when root),\n"
            "\"cwd\", \"env\": [\"K=V\"...]}. See docs/internals/candbox.md.\n\n"
            "Exit status: the program's; 69 the sandbox cannot be built here; 2 usage.",
        .opts = opts,
        .min_args = 2,
        .max_args = -1,
    };
    char **args;
    int nargs, rc;
    if (!cli_parse_cmd(&spec, argc, argv, &args, &nargs, &rc))
        return rc;
    struct candbox_spec s;
    json_t *owner = NULL;
    struct ca_err err = {0};
    rc = candbox_spec_parse(args[0], &s, &owner, &err);
    if (rc) {
        free(args);
        return cli_fail(&err);
    }
    const char **prog = xcalloc((size_t)nargs, sizeof(*prog));
    for (int i = 1; i < nargs; i++)
        prog[i - 1] = args[i];
    int status = 0;
    rc = candbox_run(&s, prog, &status, &err);
    free(prog);
    free(args);
    json_decref(owner);
    if (rc)
        return cli_fail(&err);
    if (WIFSIGNALED(status)) {
        int sig = WTERMSIG(status);
        signal(sig, SIG_DFL);
        sigset_t one;
        sigemptyset(&one);
        sigaddset(&one, sig);
        sigprocmask(SIG_UNBLOCK, &one, NULL);
        raise(sig);
        return 128 + sig;
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : CLI_FAILED;
}
